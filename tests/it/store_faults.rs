//! The store under real faults: a full filesystem, another application's database, and a
//! daemon killed with SIGKILL in the middle of a stream of commits.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sqlx::{Connection, SqliteConnection};
use toolhost::api::pb;
use toolhost::app::App;
use toolhost::registry::ServerState;

use crate::harness::*;
use toolhost::catalog::record::EnumerationOutcome;

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallFs {
    path: PathBuf,
}

impl SmallFs {
    /// Mounts a tmpfs of `size` at `path`, or says why it cannot (not root, no mount).
    fn mount(path: &Path, size: &str) -> Result<SmallFs, String> {
        std::fs::create_dir_all(path).map_err(|err| err.to_string())?;
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .map_err(|err| format!("cannot run mount: {err}"))?;
        if !status.success() {
            return Err(format!("mount -t tmpfs failed: {status}"));
        }
        Ok(SmallFs { path: path.to_path_buf() })
    }

    /// A 3 MB tmpfs in `dir`, or `None` after saying why `test` is skipped.
    fn mount_or_skip(dir: &TestDir, test: &str) -> Option<SmallFs> {
        if !requires_root("to mount a small tmpfs") {
            return None;
        }
        SmallFs::mount(&dir.path("small"), "3m").map_err(|why| skipped(&format!("SKIPPED {test}: needs a tmpfs mount ({why})"))).ok()
    }

    /// Writes zeros into `filler` until the filesystem refuses more.
    fn fill(&self, filler: &Path) {
        let mut file = std::fs::File::create(filler).expect("create the filler");
        let chunk = vec![0u8; 16 * 1024];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Tools whose descriptions are large and unique to `round`, so that storing them needs new pages.
fn bulky_tools(round: usize) -> Value {
    let filler: String = (0..40_000).map(|i| char::from(b'a' + ((i * 7 + round * 13) % 26) as u8)).collect();
    json!((0..4).map(|i| json!({"name": format!("bulky{i}"), "description": format!("round {round} {filler}"), "inputSchema": {"type": "object"}})).collect::<Vec<_>>())
}

async fn stored_generation(db: &Path, server: &str) -> (i64, String) {
    let mut connection = SqliteConnection::connect(&format!("sqlite://{}", db.display())).await.expect("open the store");
    let integrity: String = sqlx::query_scalar("PRAGMA integrity_check").fetch_one(&mut connection).await.unwrap();
    let generation: i64 =
        sqlx::query_scalar("SELECT current_generation FROM servers WHERE name = ?").bind(server).fetch_one(&mut connection).await.unwrap();
    connection.close().await.unwrap();
    (generation, integrity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_never_publishes_an_unstored_generation_and_the_store_recovers_by_itself() {
    let dir = TestDir::new();
    let Some(fs) = SmallFs::mount_or_skip(&dir, "a_full_disk_never_publishes_an_unstored_generation") else { return };
    let db = fs.path.join("catalog.db");
    let tools_file = dir.path("tools.json");
    std::fs::write(&tools_file, json!(tools("t", 3)).to_string()).unwrap();
    let script = dir.script("changing", json!({"tools_file": tools_file, "watch_tools_file": true}));
    let mut config = dir.config(&server_table("changing", &script, ""));
    config.store.path = db.clone();
    let app = start(config.clone()).await;
    wait_for_server(app.registry(), "changing", "ready", |v| v.state() == ServerState::Ready && v.generation_number() == 1).await;

    let filler = fs.path.join("filler");
    fs.fill(&filler);
    std::fs::write(&tools_file, bulky_tools(1).to_string()).unwrap();
    let view = wait_for_server(app.registry(), "changing", "the store failure shown", |v| {
        v.state() == ServerState::Failed && v.last_error().is_some_and(|e| e.contains("full"))
    })
    .await;
    assert_eq!(view.generation_number(), 1, "a generation the disk did not take is never published");
    assert_eq!(tool_names(&view), ["t0", "t1", "t2"]);
    // Another change while the disk is still full: still nothing published, nothing numbered.
    let before = view.last_enumeration().map_or(0, |record| record.started_at_ms);
    std::fs::write(&tools_file, bulky_tools(2).to_string()).unwrap();
    let view = wait_for_server(app.registry(), "changing", "the second change's pass, failed", |v| {
        v.last_enumeration().is_some_and(|record| record.started_at_ms > before && record.outcome == EnumerationOutcome::Failed)
    })
    .await;
    assert_eq!(view.generation_number(), 1);

    std::fs::remove_file(&filler).unwrap();
    let view = wait_for_server(app.registry(), "changing", "recovered once space returned", |v| {
        v.state() == ServerState::Ready && v.generation_number() == 2
    })
    .await;
    assert!(view.last_error().is_none(), "the error clears with the recovery: {:?}", view.last_error());
    assert!(view.generation().unwrap().tools[0].definition.contains("round 2"), "the listing the server offers now");
    std::fs::write(&tools_file, json!(tools("u", 2)).to_string()).unwrap();
    wait_for_server(app.registry(), "changing", "the next change", |v| v.generation_number() == 3).await;
    app.shutdown().await;

    let (generation, integrity) = stored_generation(&db, "changing").await;
    assert_eq!((generation, integrity.as_str()), (3, "ok"), "every published generation is on disk");
    let app = start(config).await;
    let view = app.registry().server("changing").unwrap();
    assert_eq!((view.generation_number(), tool_names(&view)), (3, vec!["u0".to_owned(), "u1".to_owned()]));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_applications_database_is_refused_untouched() {
    let dir = TestDir::new();
    let foreign = dir.path("other.db");
    let mut connection = SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", foreign.display())).await.unwrap();
    sqlx::query("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total INTEGER)").execute(&mut connection).await.unwrap();
    connection.close().await.unwrap();
    let digest = |path: &Path| toolhost::catalog::model::sha256_hex(&std::fs::read(path).unwrap());
    let before = digest(&foreign);

    let error = toolhost::store::Store::open(&foreign, 10).await.err().expect("a foreign database is refused");
    let message = error.to_string();
    assert!(message.contains("not a toolhost catalog") && message.contains("invoices"), "{message}");
    assert!(digest(&foreign) == before, "not a byte changed");

    let tagged = dir.path("tagged.db");
    let mut connection = SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", tagged.display())).await.unwrap();
    sqlx::query("PRAGMA application_id = 42").execute(&mut connection).await.unwrap();
    connection.close().await.unwrap();
    let message = toolhost::store::Store::open(&tagged, 10).await.err().expect("refused").to_string();
    assert!(message.contains("application_id is 0x2a"), "{message}");

    // toolhost's own store opens again, and so does an empty file.
    let own = dir.path("own.db");
    toolhost::store::Store::open(&own, 10).await.unwrap().close().await;
    toolhost::store::Store::open(&own, 10).await.unwrap().close().await;
    std::fs::write(dir.path("empty.db"), b"").unwrap();
    toolhost::store::Store::open(&dir.path("empty.db"), 10).await.unwrap().close().await;
}

/// Waits on the health service's own stream until `service` reports `wanted`.
pub(crate) async fn health_becomes(
    app: &toolhost::app::App,
    service: &str,
    wanted: tonic_health::pb::health_check_response::ServingStatus,
) {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", tcp_addr(app))).unwrap().connect().await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let mut statuses =
        health.watch(tonic_health::pb::HealthCheckRequest { service: service.into() }).await.expect("health watch").into_inner();
    let seen = tokio::time::timeout(WAIT, async {
        while let Some(status) = statuses.message().await.expect("the health stream") {
            if status.status == wanted as i32 {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "{service} never became {wanted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_restarted_on_a_full_disk_serves_its_catalog_and_commits_once_there_is_room() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let dir = TestDir::new();
    let Some(fs) = SmallFs::mount_or_skip(&dir, "a_daemon_restarted_on_a_full_disk") else { return };
    let db = fs.path.join("catalog.db");
    let tools_file = dir.path("tools.json");
    std::fs::write(&tools_file, json!(tools("t", 3)).to_string()).unwrap();
    let changing = dir.script("changing", json!({"tools_file": tools_file, "watch_tools_file": true}));
    let steady = dir.script("steady", json!({}));
    let mut config = dir.config(&[server_table("changing", &changing, ""), server_table("steady", &steady, "")].concat());
    config.store.path = db.clone();
    let app = start(config.clone()).await;
    wait_until(app.registry(), "both ready", |s| s.servers.values().all(|v| v.state() == ServerState::Ready)).await;
    app.shutdown().await;
    let wal = fs.path.join("catalog.db-wal");
    assert!(std::fs::metadata(&wal).map_or(true, |meta| meta.len() == 0), "a clean stop leaves no WAL to replay");

    // The disk fills while the daemon is down, and one server's tools change meanwhile.
    let filler = fs.path.join("filler");
    fs.fill(&filler);
    std::fs::write(&tools_file, json!(tools("u", 2)).to_string()).unwrap();
    let app = App::start_with(config.clone(), runtime()).await.expect("the daemon starts on a full disk");
    assert!(app.store().degraded().is_some_and(|why| why.contains("full")), "{:?}", app.store().degraded());
    let mut client = client(&app).await;
    let listed = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner();
    let store = listed.store.expect("the store's state");
    assert!(store.degraded && store.reason.contains("full"), "{store:?}");
    health_becomes(&app, "toolhost.v1.Store", ServingStatus::NotServing).await;
    health_becomes(&app, "toolhost.v1.ToolHost", ServingStatus::Serving).await;

    // The unchanged server is confirmed from memory and callable; the changed one keeps its
    // stored generation: what the disk cannot take is not published.
    wait_for_server(app.registry(), "steady", "ready on the stored catalog", |v| v.state() == ServerState::Ready).await;
    let echoed = client
        .call_tool(pb::CallToolRequest {
            qualified_name: "steady__echo".into(),
            arguments_json: r#"{"text":"hi"}"#.into(),
            ..Default::default()
        })
        .await
        .expect("a tool of the stored catalog is callable");
    assert!(!echoed.into_inner().is_error);
    let view = wait_for_server(app.registry(), "changing", "its change waiting for room", |v| {
        v.last_error().is_some_and(|e| e.contains("degraded"))
    })
    .await;
    assert_eq!((view.generation_number(), tool_names(&view)), (1, vec!["t0".to_owned(), "t1".to_owned(), "t2".to_owned()]));

    // Room returns: the change is committed as the next generation, and the store is healthy.
    std::fs::remove_file(&filler).unwrap();
    let view = wait_for_server(app.registry(), "changing", "committed once there is room", |v| {
        v.state() == ServerState::Ready && v.generation_number() == 2
    })
    .await;
    assert_eq!(tool_names(&view), ["u0", "u1"]);
    assert!(app.store().degraded().is_none());
    health_becomes(&app, "toolhost.v1.Store", ServingStatus::Serving).await;
    app.shutdown().await;
    let (generation, integrity) = stored_generation(&db, "changing").await;
    assert_eq!((generation, integrity.as_str()), (2, "ok"));
}

/// A store filesystem of 3 MiB filled and freed: the WAL never takes the freed bytes (SQLite's
/// own checkpoint waits for 4 MiB of it), so the commits after the recovery, the checkpoint at
/// the stop and the commits of the next start all have room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_store_filesystem_filled_and_freed_keeps_committing_across_a_restart() {
    let dir = TestDir::new();
    let Some(fs) = SmallFs::mount_or_skip(&dir, "a_small_store_filesystem_filled_and_freed") else { return };
    let db = fs.path.join("catalog.db");
    let wal = fs.path.join("catalog.db-wal");
    let tools_file = dir.path("tools.json");
    std::fs::write(&tools_file, json!(tools("t", 3)).to_string()).unwrap();
    let script = dir.script("changing", json!({"tools_file": tools_file, "watch_tools_file": true}));
    let mut config = dir.config(&server_table("changing", &script, ""));
    config.store.path = db.clone();
    config.store.history_generations = 2;
    let app = start(config.clone()).await;
    wait_for_server(app.registry(), "changing", "ready", |v| v.state() == ServerState::Ready && v.generation_number() == 1).await;
    let filler = fs.path.join("filler");
    fs.fill(&filler);
    std::fs::write(&tools_file, bulky_tools(1).to_string()).unwrap();
    wait_for_server(app.registry(), "changing", "the full disk shown", |v| v.last_error().is_some_and(|e| e.contains("full"))).await;
    std::fs::remove_file(&filler).unwrap();
    wait_for_server(app.registry(), "changing", "recovered", |v| v.state() == ServerState::Ready && v.generation_number() == 2).await;
    // Change after change: each is committed, and the WAL stays far below the free space.
    for round in 2..8 {
        std::fs::write(&tools_file, bulky_tools(round).to_string()).unwrap();
        let generation = round as u64 + 1;
        wait_for_server(app.registry(), "changing", "the next change", |v| v.generation_number() == generation).await;
        let size = std::fs::metadata(&wal).map_or(0, |meta| meta.len());
        assert!(size <= 1 << 20, "round {round}: the WAL holds {size} bytes");
    }
    app.shutdown().await;
    assert!(std::fs::metadata(&wal).map_or(true, |meta| meta.len() == 0), "the stop checkpointed the WAL");
    let app = start(config).await;
    wait_for_server(app.registry(), "changing", "ready again", |v| v.state() == ServerState::Ready).await;
    std::fs::write(&tools_file, json!(tools("u", 2)).to_string()).unwrap();
    let view = wait_for_server(app.registry(), "changing", "a commit after the restart", |v| v.generation_number() == 9).await;
    assert_eq!(tool_names(&view), ["u0", "u1"]);
    assert!(app.store().degraded().is_none());
    app.shutdown().await;
    let (generation, integrity) = stored_generation(&db, "changing").await;
    assert_eq!((generation, integrity.as_str()), (9, "ok"));
}
