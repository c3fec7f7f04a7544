//! `toolhost __conformance-client URL`: an upstream session of toolhost driven by the official
//! MCP conformance suite (`@modelcontextprotocol/conformance client --command ...`). The suite
//! starts a scripted server per scenario and appends its URL; the scenario's name comes in
//! `MCP_CONFORMANCE_SCENARIO`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;

use crate::config::Config;
use crate::mcp::tools::{list_params, parse_list_page};
use crate::upstream::reaper::Reaper;
use crate::upstream::{self, SessionSettings};

/// Connects as toolhost connects to any upstream, enumerates every page, and calls what the
/// scenario expects a client to call.
///
/// # Errors
/// What went wrong, for the suite's log.
pub async fn run(url: &str) -> Result<(), String> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    // A 2026-07-28 run says so; the 2025 scenarios test the legacy handshake (no era probe).
    let modern = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").is_ok_and(|v| v.as_str() >= crate::mcp::modern::VERSION);
    let protocol = if modern { "modern" } else { "legacy" };
    let text = format!("[servers.conformance]\nurl = {url:?}\nprotocol = \"{protocol}\"\nrequest_timeout = \"10s\"\n");
    let config = Config::parse(Path::new("/conformance/toolhost.toml"), &text).map_err(|err| err.to_string())?;
    let spec = &config.servers["conformance"];
    let settings = SessionSettings {
        request_timeout: Duration::from_secs(10),
        max_message_bytes: 16 << 20,
        shutdown_grace: Duration::from_secs(2),
        reaper: Arc::new(Reaper::disabled()),
    };
    let connection = upstream::connect(&"conformance".into(), spec, &settings, None).await.map_err(|err| err.to_string())?;
    let session = connection.handle().clone();
    let mut cursor: Option<String> = None;
    let mut tools = Vec::new();
    if connection.hello().has_tools {
        loop {
            let params = list_params(cursor.as_deref());
            let result =
                session.request("tools/list", params.as_deref(), settings.request_timeout, true).await.map_err(|err| err.to_string())?;
            let page = parse_list_page(&result)?;
            let values = page.tools.iter().filter_map(|tool| serde_json::from_str::<serde_json::Value>(tool.get()).ok());
            tools.extend(values.filter_map(|tool| tool.get("name").and_then(|n| n.as_str()).map(str::to_owned)));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    let call = match scenario.as_str() {
        "tools_call" => Some(("add_numbers", r#"{"a":5,"b":3}"#)),
        "sse-retry" => Some(("test_reconnection", "{}")),
        _ => None,
    };
    if let Some((name, arguments)) = call.filter(|(name, _)| tools.iter().any(|t| t == name)) {
        let params = RawValue::from_string(format!(r#"{{"name":"{name}","arguments":{arguments}}}"#)).map_err(|err| err.to_string())?;
        session.request("tools/call", Some(&params), settings.request_timeout, true).await.map_err(|err| err.to_string())?;
    }
    connection.shutdown().await;
    Ok(())
}
