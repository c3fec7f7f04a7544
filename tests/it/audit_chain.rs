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

/// Calls `demo__echo` `count` times, each record stored before the next call: batches of one,
/// so the checkpoint cadence shows.
pub(crate) async fn calls_each_recorded(app: &toolhost::app::App, count: usize) {
    let mut grpc = client(app).await;
    let stored = async |grpc: &mut toolhost::api::pb::tool_host_client::ToolHostClient<tonic::transport::Channel>| {
        grpc.query_audit(pb::QueryAuditRequest { limit: 1_000, ..Default::default() }).await.unwrap().into_inner().records.len()
    };
    let before = stored(&mut grpc).await;
    for n in 0..count {
        let call =
            pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: json!({"n": n}).to_string(), ..Default::default() };
        grpc.call_tool(call).await.unwrap();
        eventually("the call's record stored", async || (stored(&mut grpc).await == before + n + 1).then_some(())).await;
    }
}

pub(crate) async fn sql(path: &std::path::Path, statement: &str) {
    use std::str::FromStr;
    let options = sqlx::sqlite::SqliteConnectOptions::from_str("sqlite://").unwrap().filename(path);
    let mut connection = sqlx::ConnectOptions::connect(&options).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_owned())).execute(&mut connection).await.unwrap();
    // Closed here, not in the background: the change is in the file (its WAL checkpointed)
    // before anything copies or reads it.
    sqlx::Connection::close(connection).await.unwrap();
}

/// A daemon on `dir`'s store records twelve calls and stops: the writer signs the head every
/// five records, and when it stops.
async fn signed_trail_of_twelve_calls(dir: &TestDir) {
    let app = start(dir.config_with("[audit]\ncheckpoint_records = 5\n", &server_table("demo", &dir.script("demo", json!({})), ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    calls_each_recorded(&app, 12).await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_chain_verifies_and_every_kind_of_tampering_is_found_at_its_record() {
    let dir = TestDir::new();
    signed_trail_of_twelve_calls(&dir).await;
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
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let call = pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: "{}".into(), ..Default::default() };
    client(&app).await.call_tool(call).await.expect("calls go on");
    app.shutdown().await;
}

/// What a store writer without the key does in item 8: record 3 edited, record 7 removed, every
/// hash recomputed from the chain's start, and the ids moved above every checkpoint's record id
/// (where a verifier once took the checkpoints for cut by retention).
async fn rewrite_past_every_checkpoint(db: &std::path::Path) {
    use std::str::FromStr;
    use toolhost::store::audit_chain::{ChainRecord, Fields, GENESIS, record_hash};
    let options = sqlx::sqlite::SqliteConnectOptions::from_str("sqlite://").unwrap().filename(db);
    let mut connection = sqlx::ConnectOptions::connect(&options).await.unwrap();
    let mut records: Vec<ChainRecord> = sqlx::query_as(
        "SELECT id, at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, duration_us, \
         arguments, prev_hash, hash FROM audit ORDER BY id",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    let above: i64 = sqlx::query_scalar("SELECT max(record_id) FROM audit_checkpoints").fetch_one(&mut connection).await.unwrap();
    records.retain(|record| record.id != 7);
    records.iter_mut().filter(|record| record.id == 3).for_each(|record| record.outcome = "denied".into());
    sqlx::query("DELETE FROM audit").execute(&mut connection).await.unwrap();
    let mut prev = GENESIS.to_owned();
    for (n, record) in records.iter().enumerate() {
        let fields = Fields {
            at_ms: record.at_ms,
            agent: &record.agent,
            caller: &record.caller,
            transport: &record.transport,
            qualified_name: &record.qualified_name,
            server: &record.server,
            tool: &record.tool,
            generation: record.generation,
            definition_hash: &record.definition_hash,
            outcome: &record.outcome,
            duration_us: record.duration_us,
            arguments: record.arguments.as_deref(),
        };
        let hash = record_hash(&prev, &fields);
        sqlx::query(
            "INSERT INTO audit (id, at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, \
             duration_us, arguments, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(above + 1 + i64::try_from(n).unwrap())
        .bind(record.at_ms)
        .bind(&record.agent)
        .bind(&record.caller)
        .bind(&record.transport)
        .bind(&record.qualified_name)
        .bind(&record.server)
        .bind(&record.tool)
        .bind(record.generation)
        .bind(&record.definition_hash)
        .bind(&record.outcome)
        .bind(record.duration_us)
        .bind(&record.arguments)
        .bind(&prev)
        .bind(&hash)
        .execute(&mut connection)
        .await
        .unwrap();
        prev = hash;
    }
    sqlx::Connection::close(connection).await.unwrap();
}

/// Item 8 and 10 of issue 50: with write access to the store but not the key, rewriting the
/// chain with recomputed hashes and ids moved past every checkpoint, removing every link, or
/// removing every checkpoint each fails `verify --public-key`, naming why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_writer_without_the_key_can_neither_renumber_unlink_nor_unsign_the_chain() {
    let dir = TestDir::new();
    signed_trail_of_twelve_calls(&dir).await;
    let db = dir.db_path();
    let key = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost")).args(["audit", "key", "--store"]).arg(&db).output().unwrap();
    std::fs::write(dir.path("audit.pub"), &key.stdout).unwrap();
    let public = ["--public-key", dir.path("audit.pub").to_str().unwrap()].map(str::to_owned);
    let (ok, said) = verify(&db, &public.each_ref().map(String::as_str));
    assert!(ok && said.starts_with("intact: 12 records, "), "{said}");

    let pristine = std::fs::read(&db).unwrap();
    let tampered = dir.path("tampered.db");
    // Rewritten, hashes recomputed, ids moved past every checkpoint.
    std::fs::write(&tampered, &pristine).unwrap();
    rewrite_past_every_checkpoint(&tampered).await;
    let (ok, said) = verify(&tampered, &public.each_ref().map(String::as_str));
    assert!(
        !ok && said.contains("BROKEN: record ") && said.contains(", signed by checkpoint ") && said.contains("was removed or its id moved"),
        "{said}"
    );
    // Every link removed: no record left "older than the chain" past where it was signed to start.
    std::fs::write(&tampered, &pristine).unwrap();
    sql(&tampered, "UPDATE audit SET prev_hash = NULL, hash = NULL").await;
    let (ok, said) = verify(&tampered, &public.each_ref().map(String::as_str));
    assert!(!ok && said.contains("BROKEN: record 1 carries no hash, yet checkpoint ") && said.contains("its link was removed"), "{said}");
    // Every checkpoint removed: a chain nothing signs.
    std::fs::write(&tampered, &pristine).unwrap();
    sql(&tampered, "DELETE FROM audit_checkpoints").await;
    let (ok, said) = verify(&tampered, &public.each_ref().map(String::as_str));
    assert!(!ok && said.contains("BROKEN: no checkpoint signs the chain's 12 records"), "{said}");
}

/// A running daemon whose store is rewritten under it (hashes recomputed, ids moved past every
/// checkpoint) signs it no more: no checkpoint is added, its audit's health turns NOT_SERVING,
/// calls go on and are recorded; the chain then fails verification with the kept public key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_refuses_to_sign_a_chain_rewritten_under_it_and_serves_on() {
    let dir = TestDir::new();
    let app = start(dir.config_with("[audit]\ncheckpoint_records = 1\n", &server_table("demo", &dir.script("demo", json!({})), ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    calls_each_recorded(&app, 6).await;
    let db = dir.db_path();
    let checkpoints = async || -> (i64, i64) {
        let mut connection = sqlx::ConnectOptions::connect(
            &<sqlx::sqlite::SqliteConnectOptions as std::str::FromStr>::from_str("sqlite://").unwrap().filename(&db).read_only(true),
        )
        .await
        .unwrap();
        let counted: (i64, i64) =
            sqlx::query_as("SELECT COUNT(*), coalesce(max(record_id), 0) FROM audit_checkpoints").fetch_one(&mut connection).await.unwrap();
        sqlx::Connection::close(connection).await.unwrap();
        counted
    };
    let signed = eventually("the sixth record signed", async || {
        let (count, to) = checkpoints().await;
        (to == 6).then_some((count, to))
    })
    .await;
    rewrite_past_every_checkpoint(&db).await;
    // Three more records: the writer's cadence would sign each.
    calls_each_recorded(&app, 3).await;
    crate::store_faults::health_becomes(&app, "toolhost.v1.Audit", tonic_health::pb::health_check_response::ServingStatus::NotServing)
        .await;
    let call = pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: "{}".into(), ..Default::default() };
    client(&app).await.call_tool(call).await.expect("calls go on");
    app.shutdown().await;
    assert_eq!(checkpoints().await, signed, "nothing signed over the rewritten chain, not even at shutdown");
    let key = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost")).args(["audit", "key", "--store"]).arg(&db).output().unwrap();
    std::fs::write(dir.path("audit.pub"), &key.stdout).unwrap();
    let (ok, said) = verify(&db, &["--public-key", dir.path("audit.pub").to_str().unwrap()]);
    assert!(!ok && said.contains("BROKEN: ") && said.contains("was removed or its id moved"), "{said}");
}

/// Records go to a JSON Lines file, a Unix socket, a syslog receiver over TCP and one over TLS,
/// and an OpenTelemetry collector as they are written, in the draft SEP-3004 record's shape,
/// chain fields kept; a socket sink that is down loses nothing: once it listens, it gets every
/// record, in order. The exported file verifies on its own, and an edit to it is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_exported_as_written_and_a_sink_down_loses_nothing() {
    use tokio::io::AsyncBufReadExt;
    let dir = TestDir::new();
    let (file, socket) = (dir.path("audit.jsonl"), dir.path("siem.sock"));
    // Syslog receivers, plain and TLS, and a collector, listening from the start (ports bound once).
    let syslog = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let syslog_tls = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (config, cert_pem) = self_signed_tls(&["localhost"]);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    std::fs::write(dir.path("syslog-ca.pem"), cert_pem).unwrap();
    let (collector, otlp, collector_task) = crate::collector::Collector::start().await;
    let sections = format!(
        "[audit]\nexport = [{{ file = {:?} }}, {{ unix = {:?} }}, {{ syslog = \"{}\" }}, \
         {{ syslog = \"localhost:{}\", tls = true, ca = {:?} }}, {{ otlp = \"{otlp}\" }}]\n",
        file.display().to_string(),
        socket.display().to_string(),
        syslog.local_addr().unwrap(),
        syslog_tls.local_addr().unwrap().port(),
        dir.path("syslog-ca.pem").display().to_string(),
    );
    let app = start(dir.config_with(&sections, &server_table("demo", &dir.script("demo", json!({})), ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
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
    // The draft's core fields, toolhost's own in its extension.
    for line in &written {
        let ours = &line["extensions"]["toolhost"];
        assert!(line["event_hash"].as_str().is_some_and(|hash| hash.len() == 64), "{line}");
        assert!(line["occurred_at"].as_str().is_some_and(|at| at.ends_with('Z')), "{line}");
        assert_eq!(
            (&line["event_type"], &line["outcome"], &line["tool_name"]),
            (&json!("tool_call"), &json!("allowed"), &json!("demo__echo"))
        );
        assert_eq!(
            (&ours["outcome"], &ours["server"], &ours["tool"], &ours["hash_form"]),
            (&json!("ok"), &json!("demo"), &json!("echo"), &json!("toolhost-audit-chain/1"))
        );
        assert!(line["principal_id"].is_string() && ours["definition_hash"].as_str().is_some_and(|hash| hash.len() == 64), "{line}");
    }
    assert_eq!(written[1]["previous_hash"], written[0]["event_hash"], "the chain travels with the records");
    // The exported file verifies without the store; an edit to it is found at its record.
    let (ok, said) = verify_export(&file);
    assert!(ok && said.starts_with("intact: 4 records, "), "{said}");
    let edited = std::fs::read_to_string(&file).unwrap().replacen("\"outcome\":\"ok\"", "\"outcome\":\"denied\"", 1);
    std::fs::write(dir.path("edited.jsonl"), edited).unwrap();
    let (ok, said) = verify_export(&dir.path("edited.jsonl"));
    let first = written[0]["event_id"].as_str().unwrap();
    assert!(!ok && said.contains(&format!("record {first} was changed after it was written")), "{said}");

    // The socket sink was down all along; now it listens, and gets all four, in order.
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let (stream, _) = tokio::time::timeout(WAIT, listener.accept()).await.expect("the exporter connects").unwrap();
    let mut lines = tokio::io::BufReader::new(stream).lines();
    for expected in &written {
        let line = tokio::time::timeout(WAIT, lines.next_line()).await.expect("a record").unwrap().unwrap();
        let got: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!((&got["event_id"], &got["event_hash"]), (&expected["event_id"], &expected["event_hash"]));
    }
    // Syslog: RFC 5424 messages, octet-counted (RFC 6587), the record's id and hash as
    // structured data and its JSON as the message; the same over TLS (RFC 5425).
    let (plain, _) = tokio::time::timeout(WAIT, syslog.accept()).await.expect("the exporter connects").unwrap();
    syslog_receives(plain, &written).await;
    let (tcp, _) = tokio::time::timeout(WAIT, syslog_tls.accept()).await.expect("the exporter connects over TLS").unwrap();
    let tls =
        tokio::time::timeout(WAIT, acceptor.accept(tcp)).await.expect("a TLS handshake").expect("the exporter trusts the CA it was given");
    syslog_receives(tls, &written).await;
    // OpenTelemetry logs: one per record, the GenAI and MCP names beside toolhost's own.
    let logs = eventually("four log records at the collector", async || {
        let logs = collector.logs();
        (logs.len() >= 4).then_some(logs)
    })
    .await;
    for (log, expected) in logs.iter().zip(&written) {
        assert_eq!((log.event_name.as_str(), log.severity_text.as_str()), ("toolhost.audit", "INFO"));
        assert_eq!(Some(log.time_unix_nano / 1_000_000), expected["extensions"]["toolhost"]["at_ms"].as_u64(), "the record's own time");
        assert_eq!(log.attributes.get("gen_ai.tool.name").map(String::as_str), Some("echo"));
        assert_eq!(log.attributes.get("gen_ai.operation.name").map(String::as_str), Some("execute_tool"));
        assert_eq!(log.attributes.get("mcp.method.name").map(String::as_str), Some("tools/call"));
        assert_eq!(log.attributes.get("toolhost.audit.event_hash").map(String::as_str), expected["event_hash"].as_str());
        assert_eq!(log.resource.get("service.name").map(String::as_str), Some("toolhost"));
        assert_eq!(&serde_json::from_str::<serde_json::Value>(&log.body).unwrap(), expected);
    }
    app.shutdown().await;
    collector_task.abort();
}

fn verify_export(file: &std::path::Path) -> (bool, String) {
    let output =
        std::process::Command::new(env!("CARGO_BIN_EXE_toolhost")).args(["audit", "verify", "--export"]).arg(file).output().unwrap();
    (output.status.success(), format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

/// Reads one syslog message per expected record from `stream` and checks it carries the record.
async fn syslog_receives(mut stream: impl tokio::io::AsyncRead + Unpin, written: &[serde_json::Value]) {
    let mut received = Vec::new();
    for expected in written {
        let message = tokio::time::timeout(WAIT, octet_counted(&mut stream, &mut received)).await.expect("a syslog message");
        assert!(message.starts_with("<86>1 ") && message.contains(" toolhost "), "{message}");
        let structured = format!(
            "[toolhost@32473 id=\"{}\" hash=\"{}\"] ",
            expected["event_id"].as_str().unwrap(),
            expected["event_hash"].as_str().unwrap()
        );
        let (_, json) = message.split_once(&structured).unwrap_or_else(|| panic!("{message}"));
        assert_eq!(&serde_json::from_str::<serde_json::Value>(json).unwrap(), expected);
    }
}

/// The next `LEN SP MSG` frame from `stream` (`buffer` keeps what came after it).
async fn octet_counted(stream: &mut (impl tokio::io::AsyncRead + Unpin), buffer: &mut Vec<u8>) -> String {
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

/// A real syslog daemon (Debian's rsyslog, which the test command installs) receives the trail
/// over TCP, octet-counted, and parses each message as RFC 5424: its MSGID, its structured data
/// (the record's id and hash) and its message (the record's JSON) come out as they were sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsyslog_receives_the_trail_as_rfc_5424() {
    let rsyslogd = std::path::Path::new("/usr/sbin/rsyslogd");
    if !requires("Debian's rsyslog (/usr/sbin/rsyslogd)", rsyslogd.exists()) {
        return;
    }
    let dir = TestDir::new();
    let (received, port_file, work) = (dir.path("received.log"), dir.path("rsyslog.port"), dir.path("rsyslog"));
    std::fs::create_dir(&work).unwrap();
    // Port 0: the kernel picks it, and rsyslog writes it down.
    let conf = format!(
        "global(workDirectory=\"{dir}\")\n\
         module(load=\"imtcp\")\n\
         template(name=\"parsed\" type=\"string\" string=\"%msgid%|%structured-data%|%msg%\\n\")\n\
         ruleset(name=\"audit\") {{ action(type=\"omfile\" file=\"{received}\" template=\"parsed\") }}\n\
         input(type=\"imtcp\" address=\"127.0.0.1\" port=\"0\" listenPortFileName=\"{port_file}\" ruleset=\"audit\")\n",
        dir = work.display(),
        received = received.display(),
        port_file = port_file.display(),
    );
    std::fs::write(dir.path("rsyslog.conf"), conf).unwrap();
    let mut daemon = tokio::process::Command::new(rsyslogd)
        .args(["-n", "-f"])
        .arg(dir.path("rsyslog.conf"))
        .arg("-i")
        .arg(dir.path("rsyslog.pid"))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let port: u16 = eventually("rsyslog listening", async || std::fs::read_to_string(&port_file).ok()?.trim().parse().ok()).await;
    let sections = format!("[audit]\nexport = [{{ syslog = \"127.0.0.1:{port}\" }}]\n");
    let app = start(dir.config_with(&sections, &server_table("demo", &dir.script("demo", json!({})), ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut grpc = client(&app).await;
    for n in 0..3 {
        let call =
            pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: json!({"n": n}).to_string(), ..Default::default() };
        grpc.call_tool(call).await.unwrap();
    }
    let lines: Vec<String> = eventually("rsyslog wrote three messages", async || {
        let lines: Vec<String> = std::fs::read_to_string(&received).unwrap_or_default().lines().map(str::to_owned).collect();
        (lines.len() == 3).then_some(lines)
    })
    .await;
    app.shutdown().await;
    daemon.start_kill().unwrap();
    daemon.wait().await.unwrap();
    let mut previous = None;
    for line in &lines {
        let mut parts = line.splitn(3, '|');
        let (msgid, structured, message) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        let record: serde_json::Value =
            serde_json::from_str(message).unwrap_or_else(|_| panic!("the message is the record's JSON: {line}"));
        assert_eq!(msgid, "audit", "{line}");
        let expected =
            format!("[toolhost@32473 id=\"{}\" hash=\"{}\"]", record["event_id"].as_str().unwrap(), record["event_hash"].as_str().unwrap());
        assert_eq!(structured, expected, "{line}");
        if let Some(previous) = previous {
            assert_eq!(record["previous_hash"], previous, "in order, chained");
        }
        previous = Some(record["event_hash"].clone());
    }
}
