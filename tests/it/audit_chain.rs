//! The audit trail as a hash chain with signed checkpoints: a real daemon's trail verifies
//! intact with `toolhost audit verify` (no daemon needed); a record edited, removed, inserted or
//! two reordered in the SQLite file, and a forged checkpoint, are each found at the exact place;
//! a daemon started on an altered trail says so in its health and serves on.

use serde_json::json;
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

fn verify(store: &std::path::Path, extra: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["audit", "verify", "--store"])
        .arg(store)
        .args(extra)
        .output()
        .unwrap();
    (output.status.success(), format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

pub(crate) async fn sql(path: &std::path::Path, statement: &str) {
    use std::str::FromStr;
    let options = sqlx::sqlite::SqliteConnectOptions::from_str("sqlite://").unwrap().filename(path);
    let mut connection = sqlx::ConnectOptions::connect(&options).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_owned())).execute(&mut connection).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_chain_verifies_and_every_kind_of_tampering_is_found_at_its_record() {
    let dir = TestDir::new();
    let app = start(dir.config_with("[audit]\ncheckpoint_records = 5\n", &server_table("demo", &dir.script("demo", json!({})), ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state == ServerState::Ready).await;
    let mut grpc = client(&app).await;
    for n in 0..12 {
        let call =
            pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: json!({"n": n}).to_string(), ..Default::default() };
        grpc.call_tool(call).await.unwrap();
        // Each record stored before the next call: batches of one, so the cadence shows.
        eventually("the call's record stored", async || {
            let trail = grpc.query_audit(pb::QueryAuditRequest { limit: 100, ..Default::default() }).await.unwrap().into_inner();
            (trail.records.len() == n + 1).then_some(())
        })
        .await;
    }
    // The writer signs the head every five records, and when it stops.
    app.shutdown().await;
    let db = dir.db_path();
    let (ok, said) = verify(&db, &[]);
    let checkpoints: u32 =
        said.strip_prefix("intact: 12 records, ").and_then(|rest| rest.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(ok && (2..=12).contains(&checkpoints) && said.contains("last signed at "), "{said}");
    let key = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost")).args(["audit", "key", "--store"]).arg(&db).output().unwrap();
    let public = String::from_utf8(key.stdout).unwrap();
    assert_eq!(public.trim().len(), 64, "{public}");
    std::fs::write(dir.path("audit.pub"), &public).unwrap();

    let pristine = std::fs::read(&db).unwrap();
    let tampered = dir.path("tampered.db");
    let cases = [
        ("UPDATE audit SET outcome = 'denied' WHERE id = 5", "record 5 was changed after it was written"),
        ("DELETE FROM audit WHERE id = 7", "record 8 does not follow the record before it"),
        (
            "INSERT INTO audit (at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, duration_us) \
             SELECT at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, 'ok', duration_us FROM audit WHERE id = 3",
            "record 13 carries no hash: it was inserted",
        ),
        (
            "UPDATE audit SET at_ms = CASE id WHEN 4 THEN (SELECT at_ms FROM audit WHERE id = 6) ELSE (SELECT at_ms FROM audit WHERE id = 4) END, \
             qualified_name = qualified_name, prev_hash = CASE id WHEN 4 THEN (SELECT prev_hash FROM audit WHERE id = 6) ELSE (SELECT prev_hash FROM audit WHERE id = 4) END, \
             hash = CASE id WHEN 4 THEN (SELECT hash FROM audit WHERE id = 6) ELSE (SELECT hash FROM audit WHERE id = 4) END WHERE id IN (4, 6)",
            "record 4 does not follow the record before it",
        ),
        ("UPDATE audit_checkpoints SET records = records + 1", "checkpoint 1 is not signed by this key"),
    ];
    for (statement, found) in cases {
        std::fs::write(&tampered, &pristine).unwrap();
        sql(&tampered, statement).await;
        let (ok, said) = verify(&tampered, &["--public-key", dir.path("audit.pub").to_str().unwrap()]);
        assert!(!ok && said.contains("BROKEN") && said.contains(found), "{statement}: {said}");
    }

    // A daemon started on an altered trail says so (its audit's health NOT_SERVING) and serves.
    sql(&db, "UPDATE audit SET agent = 'someone-else' WHERE id = 2").await;
    let app = start(dir.config(&server_table("demo", &dir.script("demo", json!({})), ""))).await;
    crate::store_faults::health_becomes(&app, "toolhost.v1.Audit", tonic_health::pb::health_check_response::ServingStatus::NotServing)
        .await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state == ServerState::Ready).await;
    let call = pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: "{}".into(), ..Default::default() };
    client(&app).await.call_tool(call).await.expect("calls go on");
    app.shutdown().await;
}

/// Records go to a JSON Lines file, a Unix socket and a syslog receiver as they are written,
/// chain fields kept; a socket sink that is down loses nothing: once it listens, it gets every
/// record, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_exported_as_written_and_a_sink_down_loses_nothing() {
    use tokio::io::AsyncBufReadExt;
    let dir = TestDir::new();
    let (file, socket) = (dir.path("audit.jsonl"), dir.path("siem.sock"));
    // A syslog receiver, listening from the start (its port bound once, here).
    let syslog = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sections = format!(
        "[audit]\nexport = [{{ file = {:?} }}, {{ unix = {:?} }}, {{ syslog = \"{}\" }}]\n",
        file.display().to_string(),
        socket.display().to_string(),
        syslog.local_addr().unwrap()
    );
    let app = start(dir.config_with(&sections, &server_table("demo", &dir.script("demo", json!({})), ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state == ServerState::Ready).await;
    let mut grpc = client(&app).await;
    for n in 0..4 {
        let call =
            pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: json!({"n": n}).to_string(), ..Default::default() };
        grpc.call_tool(call).await.unwrap();
    }
    let written: Vec<serde_json::Value> = eventually("four records in the file", async || {
        let lines: Vec<serde_json::Value> =
            std::fs::read_to_string(&file).unwrap_or_default().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        (lines.len() == 4).then_some(lines)
    })
    .await;
    assert!(
        written.iter().all(|line| line["hash"].as_str().is_some_and(|hash| hash.len() == 64) && line["outcome"] == "ok"),
        "{written:?}"
    );
    assert_eq!(written[1]["prev_hash"], written[0]["hash"], "the chain travels with the records");
    // The socket sink was down all along; now it listens, and gets all four, in order.
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let (stream, _) = tokio::time::timeout(WAIT, listener.accept()).await.expect("the exporter connects").unwrap();
    let mut lines = tokio::io::BufReader::new(stream).lines();
    for expected in &written {
        let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("a record").unwrap().unwrap();
        let got: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!((&got["id"], &got["hash"]), (&expected["id"], &expected["hash"]));
    }
    // Syslog: RFC 5424 messages, octet-counted (RFC 6587), the record's id and hash as
    // structured data and its JSON as the message.
    let (mut stream, _) = tokio::time::timeout(WAIT, syslog.accept()).await.expect("the exporter connects").unwrap();
    let mut received = Vec::new();
    for expected in &written {
        let message = tokio::time::timeout(WAIT, octet_counted(&mut stream, &mut received)).await.expect("a syslog message");
        assert!(message.starts_with("<86>1 ") && message.contains(" toolhost "), "{message}");
        let structured = format!("[toolhost@32473 id=\"{}\" hash=\"{}\"] ", expected["id"], expected["hash"].as_str().unwrap());
        let (_, json) = message.split_once(&structured).unwrap_or_else(|| panic!("{message}"));
        assert_eq!(&serde_json::from_str::<serde_json::Value>(json).unwrap(), expected);
    }
    app.shutdown().await;
}

/// The next `LEN SP MSG` frame from `stream` (`buffer` keeps what came after it).
async fn octet_counted(stream: &mut tokio::net::TcpStream, buffer: &mut Vec<u8>) -> String {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(space) = buffer.iter().position(|byte| *byte == b' ') {
            let length: usize = std::str::from_utf8(&buffer[..space]).unwrap().parse().unwrap();
            if buffer.len() >= space + 1 + length {
                let message = String::from_utf8(buffer[space + 1..space + 1 + length].to_vec()).unwrap();
                buffer.drain(..space + 1 + length);
                return message;
            }
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "the exporter closed the connection");
        buffer.extend_from_slice(&chunk[..read]);
    }
}
