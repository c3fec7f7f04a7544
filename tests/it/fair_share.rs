//! One caller cannot deny the others: a caller that floods the endpoint with 2025-era sessions,
//! or the API with watch streams, loses its own oldest ones while another caller still opens
//! its first.

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;
use crate::mcp_endpoint::{JSON_HEADERS, http, mcp_http, mcp_section};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"it","version":"1"}}}"#;
const PING: &str = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
/// What `src/endpoint/sessions.rs` lets one caller hold.
const SESSIONS_PER_CALLER: usize = 256;

async fn open_session(addr: std::net::SocketAddr, bearer: &str) -> String {
    let auth = format!("Bearer {bearer}");
    let headers = [JSON_HEADERS[0], JSON_HEADERS[1], ("Authorization", auth.as_str())];
    let (status, headers, body) = http(addr, "POST", "/mcp", &headers, INITIALIZE).await;
    assert_eq!(status, 200, "{body}");
    headers.into_iter().find(|(name, _)| name == "mcp-session-id").map(|(_, id)| id).expect("a session id")
}

async fn ping(addr: std::net::SocketAddr, bearer: &str, session: &str) -> u16 {
    let auth = format!("Bearer {bearer}");
    let headers = [
        JSON_HEADERS[0],
        JSON_HEADERS[1],
        ("Authorization", auth.as_str()),
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    http(addr, "POST", "/mcp", &headers, PING).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_caller_evicts_only_its_own_sessions_and_watch_streams() {
    let dir = TestDir::new();
    let (flood, quiet) = ("flooding-agent-token-0123456789", "quiet-agent-token-0123456789ab");
    std::fs::write(dir.path("flood.token"), flood).unwrap();
    std::fs::write(dir.path("quiet.token"), quiet).unwrap();
    let access = format!(
        "[access]\n[[access.agents]]\nname = \"operator\"\nuids = [{}]\nallow = [\"*\"]\nadmin = true\n\
         [[access.agents]]\nname = \"flood\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n\
         [[access.agents]]\nname = \"quiet\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n",
        nix::unistd::getuid(),
        dir.path("flood.token").display(),
        dir.path("quiet.token").display()
    );
    let script = dir.script("demo", json!({}));
    let app = start(dir.config_with(&format!("{}\n{access}", mcp_section("")), &server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let addr = mcp_http(&app);

    // The quiet caller opens one session first; then the flood.
    let quiet_session = open_session(addr, quiet).await;
    let mut flooded = Vec::new();
    for _ in 0..SESSIONS_PER_CALLER + 20 {
        flooded.push(open_session(addr, flood).await);
    }
    // The flood cost the flooder its own oldest sessions, and nobody else anything.
    assert_eq!(ping(addr, quiet, &quiet_session).await, 200, "the quiet caller's session survived the flood");
    assert_eq!(ping(addr, flood, &flooded[0]).await, 404, "the flooder's oldest session made room");
    assert_eq!(ping(addr, flood, &flooded[19]).await, 404);
    assert_eq!(ping(addr, flood, &flooded[20]).await, 200, "the flooder keeps exactly its share");
    assert_eq!(ping(addr, flood, flooded.last().unwrap()).await, 200);
    let second = open_session(addr, quiet).await;
    assert_eq!(ping(addr, quiet, &second).await, 200, "another caller still opens a session");

    // Watch streams: the operator's oldest stream ends once it holds more than its share, and
    // says why; its newer streams are untouched.
    let mut operator = client(&app).await;
    let mut first = operator.watch_catalog(pb::WatchCatalogRequest::default()).await.unwrap().into_inner();
    let mut streams = Vec::new();
    for _ in 0..64 {
        streams.push(operator.watch_catalog(pb::WatchCatalogRequest::default()).await.unwrap().into_inner());
    }
    let ended = tokio::time::timeout(WAIT, first.message()).await.expect("the oldest stream ends").unwrap_err();
    assert_eq!(ended.code(), tonic::Code::ResourceExhausted, "{ended:?}");
    client(&app).await.restart_server(pb::RestartServerRequest { server: "demo".into() }).await.unwrap();
    let newest = streams.last_mut().unwrap();
    let event = tokio::time::timeout(WAIT, newest.message()).await.expect("an event on the newest stream").unwrap();
    assert!(event.is_some(), "the newest stream still carries events");
    app.shutdown().await;
}

/// A server's slots are shared round-robin by agent: an agent that queues twenty slow calls on
/// a one-slot server does not make another agent's single call wait behind all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_calls_are_served_round_robin_across_agents() {
    let dir = TestDir::new();
    let (flood, polite) = ("flooding-agent-token-0123456789", "polite-agent-token-01234567890");
    std::fs::write(dir.path("flood.token"), flood).unwrap();
    std::fs::write(dir.path("polite.token"), polite).unwrap();
    let access = format!(
        "[access]\n[[access.agents]]\nname = \"flood\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n\
         [[access.agents]]\nname = \"polite\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n",
        dir.path("flood.token").display(),
        dir.path("polite.token").display()
    );
    let script = dir.script("slow", json!({}));
    let app = start(dir.config_with(&access, &server_table("slow", &script, "max_concurrent_calls = 1"))).await;
    wait_for_server(app.registry(), "slow", "ready", |v| v.state() == ServerState::Ready).await;
    let sleep = |arguments: Value| pb::CallToolRequest {
        qualified_name: "slow__sleep".into(),
        arguments_json: arguments.to_string(),
        ..Default::default()
    };
    // The first call holds the slot until the test opens this pipe: never on a clock.
    let release = dir.path("release");
    nix::unistd::mkfifo(&release, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let queue = app.registry().server("slow").unwrap().shared().call_queue.clone();
    let mut floods = Vec::new();
    // The flood's first call holds the one slot; nineteen more queue behind it.
    for index in 0..20 {
        let (mut client, finished) = (agent_client(&app, flood).await, finished.clone());
        let request = sleep(if index == 0 { json!({"until": release}) } else { json!({"ms": 20}) });
        floods.push(tokio::spawn(async move {
            client.call_tool(request).await.unwrap();
            finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        if index == 0 {
            eventually("the first call holds the slot", async || (queue.in_use() == 1).then_some(())).await;
        }
    }
    eventually("the flood queued", async || (queue.waiting() == 19).then_some(())).await;
    let shown = agent_client(&app, polite).await.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
    assert_eq!((shown[0].calls_in_flight, shown[0].calls_waiting), (1, 19), "ListServers shows the queue");
    let mut client = agent_client(&app, polite).await;
    let counted = finished.clone();
    let polite_call = tokio::spawn(async move {
        client.call_tool(sleep(json!({"ms": 1}))).await.unwrap();
        counted.load(std::sync::atomic::Ordering::SeqCst)
    });
    eventually("the polite call queued behind the flood", async || (queue.waiting() == 20).then_some(())).await;
    tokio::task::spawn_blocking(move || std::fs::write(release, "")).await.unwrap().unwrap();
    let before_polite = polite_call.await.unwrap();
    // Round-robin: the polite call went in after the call at the server and at most one more
    // of the flood's, never after the nineteen that were waiting before it.
    assert!(before_polite <= 2, "{before_polite} flood calls finished before the polite one");
    for task in floods {
        task.await.unwrap();
    }
    assert_eq!(finished.load(std::sync::atomic::Ordering::SeqCst), 20, "every flood call was served in the end");
    app.shutdown().await;
}

/// An agent entry's `rate` and `concurrency`: past them a call is refused at once, typed, with
/// when to retry, on both doors, audited; `whoami` tells what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_rate_and_concurrency_are_exact_and_refusals_say_when_to_retry() {
    let dir = TestDir::new();
    let (limited, narrow) = ("rate-limited-agent-token-012345", "narrow-agent-token-0123456789ab");
    std::fs::write(dir.path("limited.token"), limited).unwrap();
    std::fs::write(dir.path("narrow.token"), narrow).unwrap();
    let access = format!(
        "[access]\n[[access.agents]]\nname = \"limited\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n\
         rate = {{ calls = 3, per = \"1h\", burst = 3 }}\n\
         [[access.agents]]\nname = \"narrow\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\nconcurrency = 1\n",
        dir.path("limited.token").display(),
        dir.path("narrow.token").display()
    );
    let script = dir.script("demo", json!({"calls_file": dir.path("calls.log")}));
    let app = start(dir.config_with(&format!("{}\n{access}", mcp_section("")), &server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let echo =
        || pb::CallToolRequest { qualified_name: "demo__echo".into(), arguments_json: r#"{"text":"hi"}"#.into(), ..Default::default() };

    let mut client = agent_client(&app, limited).await;
    let who = client.who_am_i(pb::WhoAmIRequest {}).await.unwrap().into_inner().limits.unwrap();
    assert_eq!((who.rate_calls, who.rate_burst, who.rate_available), (3, 3, 3));
    for _ in 0..3 {
        client.call_tool(echo()).await.unwrap();
    }
    let refused = client.call_tool(echo()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    let (reason, metadata) = error_info(&refused);
    assert_eq!(reason, "RATE_LIMITED");
    let retry_ms: u64 = metadata["retry_after_ms"].parse().unwrap();
    assert!((1_000_000..=1_200_000).contains(&retry_ms), "one interval (20 min) until the next call: {retry_ms}");
    use tonic_types::StatusExt;
    let retry = refused.get_details_retry_info().expect("RetryInfo").retry_delay.unwrap();
    assert_eq!(retry.as_millis() as u64 / 1000, retry_ms / 1000);
    assert_eq!(client.who_am_i(pb::WhoAmIRequest {}).await.unwrap().into_inner().limits.unwrap().rate_available, 0);

    // The same agent over MCP: a JSON-RPC error with the reason and retryAfterMs.
    let auth = format!("Bearer {limited}");
    let headers = [
        JSON_HEADERS[0],
        JSON_HEADERS[1],
        ("Authorization", auth.as_str()),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "demo__echo"),
    ];
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "demo__echo", "arguments": {"text": "hi"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let (_, _, answer) = http(mcp_http(&app), "POST", "/mcp", &headers, &body.to_string()).await;
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap_or_else(|_| panic!("{answer}"));
    assert_eq!(answer["error"]["data"]["reason"], "RATE_LIMITED", "{answer}");
    assert!(answer["error"]["data"]["retryAfterMs"].as_u64().is_some_and(|ms| ms > 1_000_000), "{answer}");

    // concurrency = 1: a second call while one is in flight is refused at once.
    let mut narrow_client = agent_client(&app, narrow).await;
    // In flight until the test opens the pipe.
    let release = dir.path("release");
    nix::unistd::mkfifo(&release, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    let arguments = json!({"until": release}).to_string();
    let slow = pb::CallToolRequest { qualified_name: "demo__sleep".into(), arguments_json: arguments, ..Default::default() };
    let mut first = agent_client(&app, narrow).await;
    let running = tokio::spawn(async move { first.call_tool(slow).await });
    let calls = dir.path("calls.log");
    eventually("the first call is at the server", async || {
        std::fs::read_to_string(&calls).ok().filter(|log| log.contains("start")).map(|_| ())
    })
    .await;
    let busy = narrow_client.call_tool(echo()).await.unwrap_err();
    assert_eq!(error_info(&busy).0, "CONCURRENCY_LIMITED");
    tokio::task::spawn_blocking(move || std::fs::write(release, "")).await.unwrap().unwrap();
    running.await.unwrap().unwrap();
    narrow_client.call_tool(echo()).await.unwrap();

    app.shutdown().await;
    let store = toolhost::store::Store::open(&dir.db_path(), 50).await.unwrap();
    let outcomes: Vec<String> = store.audit().query(0, None, 100).await.unwrap().into_iter().map(|record| record.outcome).collect();
    assert_eq!(outcomes.iter().filter(|outcome| *outcome == "rate_limited").count(), 2, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|outcome| *outcome == "concurrency_limited").count(), 1, "{outcomes:?}");
}

/// A quota on some tools holds across a restart (it is counted in the store) and leaves the
/// agent's other tools alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_holds_across_a_restart() {
    let dir = TestDir::new();
    let token = "quota-agent-token-0123456789abcd";
    std::fs::write(dir.path("quota.token"), token).unwrap();
    let access = format!(
        "[access]\n[[access.agents]]\nname = \"metered\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n\
         quota = {{ tools = [\"demo__echo\"], calls = 2, per = \"1d\" }}\n",
        dir.path("quota.token").display()
    );
    let script = dir.script("demo", json!({}));
    let config = dir.config_with(&access, &server_table("demo", &script, ""));
    let call = |name: &str| pb::CallToolRequest {
        qualified_name: name.into(),
        arguments_json: r#"{"text":"hi","a":1,"b":2}"#.into(),
        ..Default::default()
    };
    let app = start(config.clone()).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = agent_client(&app, token).await;
    for _ in 0..2 {
        client.call_tool(call("demo__echo")).await.unwrap();
    }
    let refused = client.call_tool(call("demo__echo")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    let (reason, metadata) = error_info(&refused);
    assert_eq!(reason, "QUOTA_EXHAUSTED");
    assert_eq!(metadata["limit"], "2 per 1day");
    assert!(metadata["retry_after_ms"].parse::<u64>().unwrap() <= 24 * 3600 * 1000);
    client.call_tool(call("demo__add")).await.expect("a tool the quota does not cover");
    app.shutdown().await;

    let app = start(config).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = agent_client(&app, token).await;
    let still = client.call_tool(call("demo__echo")).await.unwrap_err();
    assert_eq!(error_info(&still).0, "QUOTA_EXHAUSTED", "the count survived the restart");
    // WhoAmI tells the agent what it has used and when the window starts afresh.
    let limits = client.who_am_i(pb::WhoAmIRequest {}).await.unwrap().into_inner().limits.unwrap();
    let quota = &limits.quotas[..];
    assert_eq!(quota.len(), 1);
    assert_eq!((quota[0].tools.as_slice(), quota[0].calls, quota[0].used), (&["demo__echo".to_owned()][..], 2, 2));
    assert_eq!(quota[0].per_ms, 24 * 3600 * 1000);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    assert!(quota[0].resets_at_unix_ms > now && quota[0].resets_at_unix_ms <= now + 24 * 3600 * 1000);
    app.shutdown().await;
}
