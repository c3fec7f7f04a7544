//! `toolhost __conformance-client URL`: an upstream session of toolhost driven by the official
//! MCP conformance suite (`@modelcontextprotocol/conformance client --command ...`). The suite
//! starts a scripted server per scenario and appends its URL; the scenario's name comes in
//! `MCP_CONFORMANCE_SCENARIO`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use crate::catalog::model::{ToolDef, define_entries};
use crate::config::Config;
use crate::mcp::tools::{list_params, parse_list_page};
use crate::upstream::oauth::authorizer::Interaction;
use crate::upstream::reaper::Reaper;
use crate::upstream::{self, SessionSettings};

/// Why a conformance run stopped: its configuration, the session, a page or a call's JSON.
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Upstream(#[from] crate::upstream::UpstreamError),
    #[error(transparent)]
    Page(#[from] crate::mcp::tools::ResultError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// Connects as toolhost connects to any upstream, enumerates every page, and calls what the
/// scenario expects a client to call.
///
/// # Errors
/// What went wrong, for the suite's log.
pub async fn run(url: &str) -> Result<(), ConformanceError> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    // A 2026-07-28 run says so; the 2025 scenarios test the legacy handshake (no era probe).
    let modern = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").is_ok_and(|v| v.as_str() >= crate::mcp::modern::VERSION);
    let protocol = if modern { "modern" } else { "legacy" };
    let mut text = format!("[servers.conformance]\nurl = {url:?}\nprotocol = \"{protocol}\"\nrequest_timeout = \"10s\"\n");
    if scenario.starts_with("auth/") {
        text.push_str(&auth_table(&scenario, &context()));
    }
    let config = Config::parse(Path::new("/conformance/toolhost.toml"), &text)?;
    let spec = &config.servers["conformance"];
    let name: Arc<str> = "conformance".into();
    let authorizer = upstream::authorizer_for(&name, spec, Interaction::FollowRedirect, None)?;
    let settings = SessionSettings {
        request_timeout: Duration::from_secs(10),
        max_message_bytes: 16 << 20,
        shutdown_grace: Duration::from_secs(2),
        reaper: Arc::new(Reaper::disabled()),
        authorizer,
        operations: crate::telemetry::metrics::Metrics::global().client_operation_duration,
        egress: Arc::default(),
    };
    let connection = upstream::connect(&name, spec, &settings, None).await?;
    let session = connection.handle().clone();
    let mut cursor: Option<String> = None;
    let mut tools = Vec::new();
    if connection.hello().has_tools {
        loop {
            let params = list_params(cursor.as_deref());
            let result = session.request("tools/list", params.as_deref(), settings.request_timeout, true).await?;
            let page = parse_list_page(&result)?;
            // As the catalog defines them: a tool it would leave out is never called.
            tools.extend(define_entries(page.tools).into_iter().filter_map(Result::ok));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    // The calls the scenario asks for: in its context (`toolCalls`), or known by name.
    let mut calls: Vec<(String, String)> = context_tool_calls();
    match scenario.as_str() {
        "tools_call" if calls.is_empty() => calls.push(("add_numbers".into(), r#"{"a":5,"b":3}"#.into())),
        "sse-retry" => calls.push(("test_reconnection".into(), "{}".into())),
        // Every tool the catalog kept, with its required arguments filled in.
        // A call needs more scopes than a listing in the step-up scenario.
        name if name.starts_with("auth/") => calls.extend(tools.iter().map(|tool| (tool.name.clone(), minimal_arguments(tool)))),
        "http-invalid-tool-headers" => calls.extend(tools.iter().map(|tool| (tool.name.clone(), minimal_arguments(tool)))),
        // The rich schema as the catalog stored it, handed back byte for byte: what an agent
        // would get from toolhost.
        "json-schema-2020-12-preservation" => {
            if let Some(schema) = tools.iter().find(|t| t.name == "json_schema_2020_12_tool").and_then(|t| input_schema(&t.definition)) {
                calls.push(("json_schema_echo".into(), format!(r#"{{"schema":{schema}}}"#)));
            }
        }
        _ => {}
    }
    for (name, arguments) in calls.into_iter().filter(|(name, _)| tools.iter().any(|t| t.name == *name)) {
        let name = serde_json::to_string(&name)?;
        let params = RawValue::from_string(format!(r#"{{"name":{name},"arguments":{arguments}}}"#))?;
        session.request("tools/call", Some(&params), settings.request_timeout, true).await?;
    }
    connection.shutdown().await;
    if let Some(authorizer) = &settings.authorizer {
        let _ = std::fs::remove_file(authorizer.token_file());
    }
    Ok(())
}

/// A stored definition's `inputSchema`, as raw JSON.
fn input_schema(definition: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Entry<'a> {
        #[serde(rename = "inputSchema", borrow)]
        input_schema: &'a RawValue,
    }
    serde_json::from_str::<Entry<'_>>(definition).ok().map(|entry| entry.input_schema.get().to_owned())
}

/// Arguments for a tool's required properties: a string, zero, or false by type.
fn minimal_arguments(tool: &ToolDef) -> String {
    let schema: serde_json::Value = serde_json::from_str(&tool.definition).unwrap_or_default();
    let mut arguments = serde_json::Map::new();
    for name in
        schema.pointer("/inputSchema/required").and_then(serde_json::Value::as_array).into_iter().flatten().filter_map(|n| n.as_str())
    {
        let kind = schema.pointer(&format!("/inputSchema/properties/{name}/type")).and_then(serde_json::Value::as_str).unwrap_or("string");
        let value = match kind {
            "integer" | "number" => serde_json::json!(0),
            "boolean" => serde_json::json!(false),
            _ => serde_json::json!("conformance"),
        };
        arguments.insert(name.to_owned(), value);
    }
    serde_json::Value::Object(arguments).to_string()
}

/// The scenario's context (`MCP_CONFORMANCE_CONTEXT`), or `null`.
fn context() -> serde_json::Value {
    std::env::var("MCP_CONFORMANCE_CONTEXT").ok().and_then(|text| serde_json::from_str(&text).ok()).unwrap_or_default()
}

/// The `auth` table an operator would write for the scenario's server: the client credentials
/// grant with the credentials the scenario hands out, or the authorization code grant (with a
/// pre-registered client when the scenario gives one, else a client ID metadata document
/// where the server accepts them, else dynamic registration). Tokens go to a throwaway file.
fn auth_table(scenario: &str, context: &serde_json::Value) -> String {
    let text = |key: &str| context.get(key).and_then(serde_json::Value::as_str).map(str::to_owned);
    let token_file = std::env::temp_dir().join(format!("toolhost-conformance-{}.oauth.json", std::process::id()));
    let _ = std::fs::remove_file(&token_file);
    let grant = if scenario.starts_with("auth/client-credentials") { "client_credentials" } else { "authorization_code" };
    let mut table = format!("[servers.conformance.auth]\ngrant = \"{grant}\"\ntoken_file = {:?}\n", token_file.display().to_string());
    table.push_str("client_metadata_url = \"https://conformance-test.local/client-metadata.json\"\n");
    if let Some(client_id) = text("client_id") {
        table.push_str(&format!("client_id = {client_id:?}\n"));
    }
    if let Some(secret) = text("client_secret") {
        table.push_str(&format!("client_secret = {secret:?}\n"));
    }
    // The suite's authorization server listens where the run puts it: trusted at first sight.
    if context.get("client_secret").is_some() || context.get("private_key_pem").is_some() {
        table.push_str("trust_first_issuer = true\n");
    }
    if let Some(key) = text("private_key_pem") {
        table.push_str(&format!("private_key = {key:?}\n"));
        if let Some(algorithm) = text("signing_algorithm") {
            table.push_str(&format!("signing_algorithm = {algorithm:?}\n"));
        }
    }
    table
}

/// `MCP_CONFORMANCE_CONTEXT`'s `toolCalls`: `(name, arguments as JSON)`.
fn context_tool_calls() -> Vec<(String, String)> {
    let context = context();
    context
        .get("toolCalls")
        .and_then(serde_json::Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .filter_map(|call| {
                    let name = call.get("name")?.as_str()?.to_owned();
                    let arguments = call.get("arguments").cloned().unwrap_or_else(|| serde_json::json!({}));
                    Some((name, arguments.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}
