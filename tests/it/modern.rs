//! The 2026-07-28 era over stdio: detection, `_meta` on every request, subscriptions/listen,
//! the -32022 retry, and the era remembered across restarts.

use serde_json::json;
use toolhost::api::pb;
use toolhost::mcp::lifecycle::Era;
use toolhost::registry::ServerState;

use crate::harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_server_is_discovered_listened_to_and_never_initialized() {
    let dir = TestDir::new();
    let file = dir.path("tools.json");
    std::fs::write(&file, json!(tools("t", 3)).to_string()).unwrap();
    let script = dir.script("modern", json!({"era": "modern", "tools_file": file, "watch_tools_file": true, "page_size": 2}));
    let app = start(dir.config(&server_table("modern", &script, ""))).await;
    let view = wait_for_server(app.registry(), "modern", "ready", |v| v.state() == ServerState::Ready).await;
    let hello = view.hello().cloned().unwrap();
    assert_eq!((hello.era, hello.protocol_version.as_str()), (Era::Modern, "2026-07-28"));
    assert_eq!(tool_names(&view).len(), 3);

    // A change announced on the subscription publishes a new generation.
    crate::http::wait_for_listen_acknowledged(&app, "modern").await;
    std::fs::write(&file, json!(tools("t", 4)).to_string()).unwrap();
    let view = wait_for_server(app.registry(), "modern", "generation 2", |v| v.generation_number() == 2).await;
    assert_eq!(tool_names(&view).len(), 4);

    let mut client = client(&app).await;
    let called = client
        .call_tool(pb::CallToolRequest { qualified_name: "modern__t0".into(), arguments_json: r#"{"x":1}"#.into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(called.content_json.contains("x"));

    let received = dir.received("modern");
    assert!(!received.iter().any(|m| m["method"] == "initialize"), "a modern server is never sent initialize");
    for request in received.iter().filter(|m| m.get("id").is_some() && m.get("method").is_some()) {
        let meta = &request["params"]["_meta"];
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28", "{request}");
        assert_eq!(meta["io.modelcontextprotocol/clientCapabilities"], json!({}), "{request}");
        assert_eq!(meta["io.modelcontextprotocol/clientInfo"]["name"], "toolhost", "{request}");
    }
    let listen = received.iter().find(|m| m["method"] == "subscriptions/listen").unwrap();
    assert_eq!(listen["params"]["notifications"]["toolsListChanged"], true);
    let servers = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
    assert_eq!(servers[0].protocol_version, "2026-07-28");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_version_answer_is_retried_with_a_listed_version() {
    let dir = TestDir::new();
    let script = dir.script("picky", json!({"era": "modern", "tools": tools("t", 1), "discover_unsupported_once": true}));
    let app = start(dir.config(&server_table("picky", &script, ""))).await;
    let view = wait_for_server(app.registry(), "picky", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(view.hello().cloned().unwrap().era, Era::Modern);
    let methods = dir.methods("picky");
    assert_eq!(methods.iter().filter(|m| *m == "server/discover").count(), 2, "{methods:?}");
    assert!(!methods.iter().any(|m| m == "initialize"), "a modern error never falls back to initialize");
    app.shutdown().await;
}

/// A server slow to start (as one a launcher is still fetching) reads the era probe after
/// toolhost gave up waiting and takes the 2026-07-28 protocol; the `initialize` sent meanwhile
/// is refused with -32022, and toolhost discovers again instead of failing the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_server_slow_to_start_is_spoken_to_in_its_era() {
    let dir = TestDir::new();
    let script = dir.script("slow", json!({"era": "modern", "tools": tools("t", 2), "start_delay_ms": 3500}));
    let app = start(dir.config(&server_table("slow", &script, "request_timeout = \"5s\""))).await;
    let view = wait_for_server(app.registry(), "slow", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(view.hello().cloned().unwrap().era, Era::Modern);
    assert_eq!(view.num_restarts(), 0, "the first session succeeded");
    let methods = dir.methods("slow");
    let first = methods.iter().position(|m| m == "initialize");
    assert!(first.is_some_and(|idx| methods[idx + 1..].iter().any(|m| m == "server/discover")), "{methods:?}");
    app.shutdown().await;
}

/// The same for a server of the older protocol: the late answer to the probe is dropped, the
/// session goes on, and its tools are called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_server_slow_to_start_is_called_after_a_late_probe_answer() {
    let dir = TestDir::new();
    let script = dir.script("slowold", json!({"tools": tools("t", 2), "start_delay_ms": 3500}));
    let app = start(dir.config(&server_table("slowold", &script, "request_timeout = \"5s\""))).await;
    let view = wait_for_server(app.registry(), "slowold", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(view.hello().cloned().unwrap().era, Era::Legacy);
    let tool = view.generation().map(|generation| generation.tools[0].name.clone()).unwrap_or_default();
    let call = pb::CallToolRequest { qualified_name: format!("slowold__{tool}"), arguments_json: "{}".into(), ..Default::default() };
    client(&app).await.call_tool(call).await.expect("the slow server is callable");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_server_pays_the_probe_once_and_its_era_is_remembered() {
    let dir = TestDir::new();
    let script = dir.script("old", json!({"tools": tools("t", 2), "hang_methods": ["server/discover"]}));
    let config = dir.config(&server_table("old", &script, "request_timeout = \"400ms\""));
    let app = start(config.clone()).await;
    let view = wait_for_server(app.registry(), "old", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(view.hello().cloned().unwrap().era, Era::Legacy);
    app.shutdown().await;

    let app = start(config).await;
    wait_for_server(app.registry(), "old", "ready", |v| v.state() == ServerState::Ready && !v.revalidating()).await;
    let methods = dir.methods("old");
    assert_eq!(methods.iter().filter(|m| *m == "server/discover").count(), 1, "the second start goes straight to initialize: {methods:?}");
    assert_eq!(methods.iter().filter(|m| *m == "initialize").count(), 2);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_server_receives_the_arguments_byte_for_byte() {
    let dir = TestDir::new();
    let script = dir.script("exact", json!({"era": "modern", "tools": tools("t", 1)}));
    let app = start(dir.config(&server_table("exact", &script, ""))).await;
    wait_for_server(app.registry(), "exact", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    // 2^70 does not fit any 64-bit integer; the keys are deliberately out of order.
    let arguments = r#"{"zeta":1,"big":1180591620717411303424,"alpha":[0.10,"é"]}"#;
    client
        .call_tool(pb::CallToolRequest { qualified_name: "exact__t0".into(), arguments_json: arguments.into(), ..Default::default() })
        .await
        .unwrap();
    let log = std::fs::read_to_string(dir.path("exact.log")).unwrap();
    let line = log.lines().find(|line| line.contains("tools/call")).expect("the call reached the server");
    assert!(line.contains(&format!(r#""arguments":{arguments}"#)), "{line}");
    assert!(line.contains("io.modelcontextprotocol/protocolVersion"), "the request _meta is there too: {line}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_listing_is_served_after_a_restart_only_under_the_same_credential() {
    let dir = TestDir::new();
    let script = dir.script("private", json!({"era": "modern", "tools": tools("t", 2), "cache_scope": "private"}));
    let with_token = |token: &str| dir.config(&server_table("private", &script, &format!("env = {{ API_TOKEN = \"{token}\" }}\n")));
    let app = start(with_token("first-credential")).await;
    wait_for_server(app.registry(), "private", "ready", |v| v.generation_number() == 1).await;
    app.shutdown().await;

    // The same credential: the stored listing is served at once, before the server is up.
    let app = start(with_token("first-credential")).await;
    assert_eq!(app.registry().server("private").unwrap().generation_number(), 1, "served from the store");
    app.shutdown().await;

    // Another credential: nothing is served until the server lists again for it.
    let app = start(with_token("second-credential")).await;
    assert!(app.registry().server("private").unwrap().generation().is_none(), "another credential's private listing is not served");
    let view = wait_for_server(app.registry(), "private", "listed again", |v| v.generation().is_some()).await;
    assert_eq!(view.generation_number(), 1, "the same tools: no new generation, but now this credential's");
    app.shutdown().await;
}
