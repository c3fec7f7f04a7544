//! Tool search: ranked, always the published generation, safe with any input, filtered by the
//! caller's policy.

use std::process::Command;

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

fn file_tools(weather: &str, with_write: bool) -> Value {
    let object = |props: Value| json!({"type": "object", "properties": props});
    let mut tools = vec![
        json!({"name": "read_file", "description": "Read the complete contents of a file from the file system.",
               "inputSchema": object(json!({"path": {"type": "string", "description": "Path of the file to read"}}))}),
        json!({"name": "list_directory", "description": "Get a detailed listing of all files and directories in a path.",
               "inputSchema": object(json!({"path": {"type": "string"}}))}),
        json!({"name": "search_files", "description": "Recursively search for files and directories matching a pattern.",
               "inputSchema": object(json!({"pattern": {"type": "string"}}))}),
        json!({"name": "get_weather", "description": weather, "inputSchema": object(json!({"city": {"type": "string"}}))}),
    ];
    if with_write {
        tools.push(json!({"name": "write_file", "description": "Create a new file or overwrite an existing file with new content.",
                          "inputSchema": object(json!({"path": {"type": "string"}, "content": {"type": "string"}}))}));
    }
    json!(tools)
}

async fn search(client: &mut pb::tool_host_client::ToolHostClient<tonic::transport::Channel>, query: &str) -> Vec<String> {
    let request = pb::SearchToolsRequest { query: query.into(), limit: 5, ..Default::default() };
    let results = client.search_tools(request).await.unwrap_or_else(|status| panic!("{query:?}: {status:?}")).into_inner().results;
    results.into_iter().map(|r| r.tool.unwrap().qualified_name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_follows_every_published_generation_and_ranks_names_first() {
    let dir = TestDir::new();
    let tools_file = dir.path("tools.json");
    std::fs::write(&tools_file, file_tools("Current weather conditions for a city.", true).to_string()).unwrap();
    let script = dir.script("files", json!({"tools_file": tools_file, "watch_tools_file": true}));
    let app = start(dir.config(&server_table("files", &script, ""))).await;
    wait_for_server(app.registry(), "files", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    assert_eq!(search(&mut client, "read a file").await.first().map(String::as_str), Some("files__read_file"));
    assert_eq!(search(&mut client, "weather").await, ["files__get_weather"]);
    assert!(search(&mut client, "overwrite").await.contains(&"files__write_file".to_owned()));

    // The server drops write_file and rewords get_weather: the next generation's words, at once.
    std::fs::write(&tools_file, file_tools("Forecast for the coming days.", false).to_string()).unwrap();
    wait_for_server(app.registry(), "files", "generation 2", |v| v.generation_number() == 2).await;
    assert!(!search(&mut client, "overwrite write").await.contains(&"files__write_file".to_owned()), "a removed tool vanishes");
    assert_eq!(search(&mut client, "forecast").await, ["files__get_weather"], "the new description matches");
    assert!(search(&mut client, "conditions").await.is_empty(), "the old description does not");

    // Whatever a searcher types, it is words, never FTS5 syntax: no error, no injection.
    for hostile in [r#"""#, "*", "NEAR(read file", "((", "read OR", "-file", "^read", "file:*", "\0", "'; DROP TABLE audit; --"] {
        let request = pb::SearchToolsRequest { query: hostile.into(), ..Default::default() };
        client.search_tools(request).await.unwrap_or_else(|status| panic!("{hostile:?}: {status:?}"));
    }
    // The CLI's JSON carries what a program needs.
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["search", "directory listing", "--json", "--addr", &cli_addr(&app)])
        .output()
        .unwrap();
    let results: Value = serde_json::from_slice(&output.stdout).unwrap();
    let first = &results[0];
    assert_eq!(
        (first["name"].as_str(), first["server"].as_str(), first["tool"].as_str()),
        (Some("files__list_directory"), Some("files"), Some("list_directory"))
    );
    assert!(first["score"].as_f64().unwrap() > 0.0 && first["hash"].as_str().unwrap().len() == 64);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_shows_a_caller_only_what_it_may_use() {
    let dir = TestDir::new();
    let token = "search-token-0123456789";
    std::fs::write(dir.path("token"), token).unwrap();
    let tools_file = dir.path("tools.json");
    std::fs::write(&tools_file, file_tools("Current weather.", true).to_string()).unwrap();
    let script = dir.script("files", json!({"tools_file": tools_file}));
    let policy = format!(
        "[access]\n[[access.agents]]\nname = \"reader\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"files__read_*\"]\n\
         [[access.agents]]\nname = \"operator\"\nusers = [\"root\"]\nallow = [\"*\"]\nadmin = true\n",
        dir.path("token").display()
    );
    let app = start(dir.config(&format!("{policy}{}", server_table("files", &script, "")))).await;
    wait_for_server(app.registry(), "files", "ready", |v| v.state() == ServerState::Ready).await;
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["search", "file", "--json", "--addr", &tcp_addr(&app).to_string()])
        .env("TOOLHOST_TOKEN", token)
        .output()
        .unwrap();
    let results: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&output.stderr)));
    let names: Vec<&str> = results.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["files__read_file"], "write_file, list_directory and search_files match too, but are not the reader's");
    app.shutdown().await;
}
