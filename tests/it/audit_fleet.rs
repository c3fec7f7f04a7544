//! The audit chain and the fleet store: a host ships its chain fields and signed checkpoints;
//! `toolhost audit verify --fleet` checks every host's chain in PostgreSQL, each against the key
//! it shipped first, and finds a record edited, removed, inserted or reordered there at its
//! record; a host that truncates its own history (records and checkpoints, so that its store
//! alone still verifies) is caught by the checkpoints the fleet kept; the daemon verifies its
//! own store on request (`--daemon`), and `--from`/`--to` check a span.

use std::process::Command;

use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use toolhost::registry::ServerState;

use crate::fleet::{cluster, database, fleet_section};
use crate::harness::*;

fn verify(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost")).args(["audit", "verify"]).args(args).output().unwrap();
    (output.status.success(), format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

async fn pg(url: &str, statement: &str) {
    let mut conn = PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_owned())).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

async fn pg_count(url: &str, query: &str) -> i64 {
    let mut conn = PgConnection::connect(url).await.unwrap();
    let count = sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned())).fetch_one(&mut conn).await.unwrap();
    conn.close().await.unwrap();
    count
}

/// A copy of host `alpha`'s shipped chain, checkpoints and key under `host`, for one tampering.
fn copy_of_alpha(host: &str) -> String {
    format!(
        "INSERT INTO audit SELECT '{host}', local_id, at_ms, agent, caller, transport, qualified_name, server, tool, generation, \
         definition_hash, outcome, duration_us, arguments, prev_hash, hash FROM audit WHERE host_id = 'alpha'; \
         INSERT INTO audit_checkpoints SELECT '{host}', local_id, record_id, head_hash, records, signed_at_ms, public_key, signature, anchor \
         FROM audit_checkpoints WHERE host_id = 'alpha'; \
         INSERT INTO audit_keys SELECT '{host}', public_key, first_seen_ms FROM audit_keys WHERE host_id = 'alpha';"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_keeps_each_hosts_chain_and_a_host_cannot_rewrite_its_history_unseen() {
    let Some(cluster) = cluster() else { return };
    let url = database(&cluster).await;
    let dir = TestDir::new();
    let sections = format!("{}[audit]\ncheckpoint_records = 3\n", fleet_section(&dir, &url, "alpha"));
    let app = start(dir.config_with(&sections, &server_table("demo", &dir.script("demo", json!({})), ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    crate::audit_chain::calls_each_recorded(&app, 10).await;
    let config = dir.path("toolhost.toml");
    let config = config.to_str().unwrap();
    // Every record and at least three checkpoints reach the fleet store.
    eventually("the chain and its checkpoints shipped", async || {
        let records = pg_count(&url, "SELECT count(*) FROM audit WHERE host_id = 'alpha' AND hash IS NOT NULL").await;
        let checkpoints = pg_count(&url, "SELECT count(*) FROM audit_checkpoints WHERE host_id = 'alpha'").await;
        (records == 10 && checkpoints >= 3).then_some(())
    })
    .await;

    // The daemon verifies its own store on request, beside the fleet's copy of its checkpoints.
    let (ok, said) = verify(&["--daemon", "--addr", &cli_addr(&app)]);
    assert!(ok && said.starts_with("intact: 10 records, ") && said.contains("as the fleet store kept them"), "{said}");
    let (ok, said) = verify(&["--daemon", "--addr", &cli_addr(&app), "--json"]);
    let report: Value = serde_json::from_str(said.trim()).unwrap_or_else(|_| panic!("{said}"));
    assert!(ok && report["intact"] == true && report["records"] == 10 && report["fleet_checkpoints"].as_u64() >= Some(3), "{report}");
    // A span: the records written in it, no more.
    let (ok, said) = verify(&["--daemon", "--addr", &cli_addr(&app), "--from", "1h", "--to", "2000-01-01T00:00:00Z"]);
    assert!(!ok && said.contains("--from is after --to"), "{said}");
    let (ok, said) = verify(&["--daemon", "--addr", &cli_addr(&app), "--to", "2000-01-01T00:00:00Z"]);
    assert!(ok && said.starts_with("intact: 0 records, "), "{said}");
    app.shutdown().await;
    let (ok, said) = verify(&["--config", config, "--from", "1h"]);
    assert!(ok && said.starts_with("intact: 10 records, "), "{said}");

    // In PostgreSQL: each tampering of a copy of the chain found at its record.
    let cases = [
        (
            "edited",
            "UPDATE audit SET outcome = 'denied' WHERE host_id = 'edited' AND local_id = 4",
            "record 4 was changed after it was written",
        ),
        ("removed", "DELETE FROM audit WHERE host_id = 'removed' AND local_id = 6", "record 7 does not follow the record before it"),
        (
            "inserted",
            "INSERT INTO audit SELECT host_id, 100, at_ms, agent, caller, transport, qualified_name, server, tool, generation, \
             definition_hash, outcome, duration_us, arguments, NULL, NULL FROM audit WHERE host_id = 'inserted' AND local_id = 10",
            "record 100 carries no hash: it was inserted",
        ),
        (
            "reordered",
            "UPDATE audit SET local_id = -2 WHERE host_id = 'reordered' AND local_id = 2; \
             UPDATE audit SET local_id = 2 WHERE host_id = 'reordered' AND local_id = 3; \
             UPDATE audit SET local_id = 3 WHERE host_id = 'reordered' AND local_id = -2;",
            "record 2 does not follow the record before it",
        ),
        (
            "forged",
            "UPDATE audit_checkpoints SET records = records + 1 WHERE host_id = 'forged'",
            "(as the fleet store kept it) is not signed",
        ),
    ];
    for (host, statement, _) in &cases {
        pg(&url, &copy_of_alpha(host)).await;
        pg(&url, statement).await;
    }
    let (ok, said) = verify(&["--fleet", "--config", config]);
    assert!(!ok, "{said}");
    assert!(said.lines().any(|line| line.starts_with("alpha: intact: 10 records, ")), "{said}");
    for (host, _, found) in &cases {
        assert!(said.lines().any(|line| line.starts_with(&format!("{host}: BROKEN: ")) && line.contains(found)), "{host}: {said}");
    }

    // The host truncates its own history, checkpoints too: its store alone still verifies…
    let db = dir.db_path();
    crate::audit_chain::sql(&db, "DELETE FROM audit WHERE id > 5; DELETE FROM audit_checkpoints WHERE record_id > 5").await;
    let (ok, said) = verify(&["--store", db.to_str().unwrap()]);
    assert!(ok && said.starts_with("intact: 5 records, "), "{said}");
    // …but not beside what the fleet kept.
    let (ok, said) = verify(&["--config", config]);
    assert!(!ok && said.contains("(as the fleet store kept it), was removed"), "{said}");
}
