//! The catalog over real gRPC: reads, paging on one revision, the watch, health, reflection.

use serde_json::{Value, json};
use tokio_stream::StreamExt;
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

fn tools_file(dir: &TestDir, tools: &Value) -> std::path::PathBuf {
    let path = dir.path("tools.json");
    std::fs::write(&path, tools.to_string()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_tools_and_history_read_back_what_the_servers_offer() {
    let dir = TestDir::new();
    let file = tools_file(
        &dir,
        &json!([{"name": "b.tool", "title": "B", "description": "second", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}, "annotations": {"readOnlyHint": true}}, {"name": "a", "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}}]),
    );
    let live = dir.script("live", json!({"tools_file": file, "watch_tools_file": true}));
    let quiet = dir.script("quiet", json!({"capabilities": {}}));
    let servers = [
        server_table("live", &live, ""),
        server_table("quiet", &quiet, ""),
        "[servers.off]\ncommand = \"true\"\nenabled = false\n".to_owned(),
    ];
    let app = start(dir.config(&servers.join("\n"))).await;
    wait_for_server(app.registry(), "live", "ready", |v| v.state() == ServerState::Ready).await;
    wait_for_server(app.registry(), "quiet", "no tools", |v| v.state() == ServerState::NoTools).await;
    let mut client = unix_client(&app).await;

    let servers = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
    let summary: Vec<(String, i32, u64, u32, bool)> =
        servers.iter().map(|s| (s.name.clone(), s.state, s.generation, s.tool_count, s.available)).collect();
    assert_eq!(
        summary,
        vec![
            ("live".into(), pb::ServerState::Ready as i32, 1, 2, true),
            ("off".into(), pb::ServerState::Disabled as i32, 0, 0, false),
            ("quiet".into(), pb::ServerState::NoTools as i32, 1, 0, false),
        ]
    );
    assert_eq!(servers[0].protocol_version, "2025-11-25");
    assert!(servers[0].server_info_json.contains("scripted-mcp-server"));
    assert_eq!(servers[0].last_enumeration.as_ref().unwrap().reason, "initial");

    let listed = client.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner();
    let names: Vec<&str> = listed.tools.iter().map(|t| t.qualified_name.as_str()).collect();
    assert_eq!(names.len(), 2);
    assert_eq!(names[0], "live__a");
    assert!(names[1].starts_with("live__b_tool_"), "a dotted name gets a stable hashed form: {}", names[1]);
    let b = &listed.tools[1];
    assert_eq!((b.name.as_str(), b.title.as_str(), b.description.as_str()), ("b.tool", "B", "second"));
    assert_eq!(serde_json::from_str::<Value>(&b.input_schema_json).unwrap()["properties"]["n"]["type"], "integer");
    assert_eq!(serde_json::from_str::<Value>(&b.annotations_json).unwrap()["readOnlyHint"], true);
    assert_eq!(b.generation, 1);
    assert_eq!(b.definition_hash.len(), 64);

    let got = client
        .get_tool(pb::GetToolRequest { qualified_name: b.qualified_name.clone(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .tool
        .unwrap();
    assert_eq!(got.definition_hash, b.definition_hash);
    assert!(got.definition_json.contains("\"readOnlyHint\":true"));

    // A change: generation 2; the old definition stays readable by generation number.
    std::fs::write(&file, json!([{"name": "a", "inputSchema": {"type": "object"}, "description": "now described"}, {"name": "c", "inputSchema": {"type": "object"}}]).to_string()).unwrap();
    wait_for_server(app.registry(), "live", "generation 2", |v| v.generation_number() == 2).await;
    let old = client
        .get_tool(pb::GetToolRequest { server: "live".into(), name: "b.tool".into(), generation: 1, ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .tool
        .unwrap();
    assert_eq!(old.definition_hash, b.definition_hash);
    let gone =
        client.get_tool(pb::GetToolRequest { server: "live".into(), name: "b.tool".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);

    let history = client.history(pb::HistoryRequest { server: "live".into(), limit: 10 }).await.unwrap().into_inner();
    let latest = &history.generations[0];
    assert_eq!((latest.generation, latest.reason.as_str()), (2, "list_changed"));
    assert_eq!(
        (latest.added.clone(), latest.removed.clone(), latest.changed.clone()),
        (vec!["c".to_owned()], vec!["b.tool".to_owned()], vec!["a".to_owned()])
    );
    assert_eq!(history.generations[1].generation, 1);
    assert!(history.enumerations.iter().any(|e| e.outcome == "committed" && e.reason == "initial"));
    let unknown = client.history(pb::HistoryRequest { server: "nope".into(), limit: 1 }).await.unwrap_err();
    assert_eq!((unknown.code(), error_info(&unknown).0.as_str()), (tonic::Code::NotFound, "UNKNOWN_SERVER"));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_stays_on_one_revision_while_the_catalog_moves() {
    let dir = TestDir::new();
    let file = tools_file(&dir, &json!(tools("t", 7)));
    let script = dir.script("pages", json!({"tools_file": file, "watch_tools_file": true}));
    let app = start(dir.config(&server_table("pages", &script, ""))).await;
    wait_for_server(app.registry(), "pages", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;

    let first = client.list_tools(pb::ListToolsRequest { page_size: 3, ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(first.tools.len(), 3);
    std::fs::write(&file, json!(tools("u", 2)).to_string()).unwrap();
    wait_for_server(app.registry(), "pages", "generation 2", |v| v.generation_number() == 2).await;

    let mut names: Vec<String> = first.tools.iter().map(|t| t.name.clone()).collect();
    let mut token = first.next_page_token.clone();
    while !token.is_empty() {
        let page =
            client.list_tools(pb::ListToolsRequest { page_size: 3, page_token: token, ..Default::default() }).await.unwrap().into_inner();
        assert_eq!(page.catalog_revision, first.catalog_revision, "every page comes from the first page's revision");
        names.extend(page.tools.iter().map(|t| t.name.clone()));
        token = page.next_page_token;
    }
    assert_eq!(names, ["t0", "t1", "t2", "t3", "t4", "t5", "t6"]);

    let fresh = client.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner();
    assert!(fresh.catalog_revision > first.catalog_revision);
    assert_eq!(fresh.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["u0", "u1"]);

    let bad = client
        .list_tools(pb::ListToolsRequest { page_size: 4, page_token: first.next_page_token.clone(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "a token is bound to its filters");
    let filtered = client.list_tools(pb::ListToolsRequest { name_contains: "U1".into(), ..Default::default() }).await.unwrap().into_inner();
    assert_eq!(filtered.tools.len(), 1);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_sends_every_change_in_order_and_resyncs_a_laggard() {
    let dir = TestDir::new();
    let file = tools_file(&dir, &json!(tools("t", 1)));
    let script = dir.script("w", json!({"tools_file": file, "watch_tools_file": true}));
    let config_text = server_table("w", &script, "");
    let mut config = dir.config(&config_text);
    config.grpc.watch_backlog = 8;
    let app = start(config).await;
    wait_for_server(app.registry(), "w", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let mut stream = client.watch_catalog(pb::WatchCatalogRequest::default()).await.unwrap().into_inner();

    for n in 2..=4 {
        std::fs::write(&file, json!(tools("t", n)).to_string()).unwrap();
        wait_for_server(app.registry(), "w", "next generation", |v| v.generation_number() == n as u64).await;
    }
    let mut seen = Vec::new();
    let mut last_revision = 0;
    while seen.len() < 3 {
        let event = tokio::time::timeout(WAIT, stream.next()).await.expect("an event").expect("stream open").unwrap();
        assert!(event.revision > last_revision, "revisions increase");
        last_revision = event.revision;
        if let Some(pb::catalog_event::Event::GenerationPublished(published)) = event.event {
            seen.push((published.generation, published.previous_generation, published.added));
        }
    }
    assert_eq!(seen, vec![(2, 1, vec!["w__t1".to_owned()]), (3, 2, vec!["w__t2".to_owned()]), (4, 3, vec!["w__t3".to_owned()])]);

    // Ask for changes from the first revision: with a backlog of 8 events they are gone.
    for n in 5..=12 {
        std::fs::write(&file, json!(tools("t", n)).to_string()).unwrap();
        wait_for_server(app.registry(), "w", "next generation", |v| v.generation_number() == n as u64).await;
    }
    let mut late = client.watch_catalog(pb::WatchCatalogRequest { from_revision: 1, servers: vec![] }).await.unwrap().into_inner();
    let first = tokio::time::timeout(WAIT, late.next()).await.unwrap().unwrap().unwrap();
    assert!(matches!(first.event, Some(pb::catalog_event::Event::Resync(_))), "{first:?}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_turns_serving_and_reflection_lists_the_services() {
    let dir = TestDir::new();
    let script = dir.script("h", json!({"tools": tools("t", 1)}));
    let app = start(dir.config(&server_table("h", &script, ""))).await;
    wait_for_server(app.registry(), "h", "ready", |v| v.state() == ServerState::Ready).await;
    // Health and reflection answer anyone on TCP, token or not: they say what is served, not what it holds.
    let addr = tcp_addr(&app);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    eventually("health turns SERVING", async || {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest { service: "toolhost.v1.ToolHost".into() })
            .await
            .unwrap()
            .into_inner()
            .status;
        (status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32).then_some(())
    })
    .await;

    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1alpha::{ServerReflectionRequest, ServerReflectionResponse};
    let mut reflection = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest { host: String::new(), message_request: Some(MessageRequest::ListServices(String::new())) };
    let mut responses = reflection.server_reflection_info(tokio_stream::iter(vec![request])).await.unwrap().into_inner();
    let response: ServerReflectionResponse = responses.next().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else { panic!("{response:?}") };
    let services: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(
        services.contains(&"toolhost.v1.ToolHost".to_owned()) && services.contains(&"grpc.health.v1.Health".to_owned()),
        "{services:?}"
    );
    app.shutdown().await;
}
