//! The 2026-07-28 ("modern") era: `server/discover`, the `_meta` every request carries, and
//! `subscriptions/listen`. Sans-IO.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::mcp::jsonrpc::RpcError;
use crate::mcp::lifecycle::{Era, HandshakeError, ServerHello};

pub const VERSION: &str = "2026-07-28";
pub const METHOD_DISCOVER: &str = "server/discover";
pub const METHOD_LISTEN: &str = "subscriptions/listen";
pub const METHOD_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// A recognised modern error: the server speaks the modern era but not this version.
pub const UNSUPPORTED_VERSION: i64 = -32022;
pub const HEADER_MISMATCH: i64 = -32020;
pub const MISSING_CAPABILITY: i64 = -32021;

/// The `_meta` keys every modern request carries: no optional client capabilities.
pub fn request_meta(version: &str) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("io.modelcontextprotocol/protocolVersion".into(), json!(version));
    meta.insert("io.modelcontextprotocol/clientCapabilities".into(), json!({}));
    meta.insert("io.modelcontextprotocol/clientInfo".into(), json!({"name": "toolhost", "version": env!("CARGO_PKG_VERSION")}));
    meta
}

/// `params` with `meta` merged into its `_meta` (keys already there, like `traceparent`, stay).
pub fn with_meta(params: Option<&RawValue>, meta: &Map<String, Value>) -> Option<Box<RawValue>> {
    let mut object: Map<String, Value> = match params {
        Some(params) => serde_json::from_str(params.get()).ok()?,
        None => Map::new(),
    };
    let slot = object.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(existing) = slot {
        for (key, value) in meta {
            existing.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    RawValue::from_string(Value::Object(object).to_string()).ok()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoverResult {
    #[serde(default)]
    supported_versions: Vec<String>,
    #[serde(default)]
    capabilities: Value,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default, rename = "_meta")]
    meta: Map<String, Value>,
}

/// Reads a `DiscoverResult`.
///
/// # Errors
/// [`HandshakeError`] when it is malformed or does not list the modern version.
pub fn check_discover_result(result: &RawValue) -> Result<ServerHello, HandshakeError> {
    let parsed: DiscoverResult = serde_json::from_str(result.get()).map_err(|err| HandshakeError::Malformed(err.to_string()))?;
    if !parsed.supported_versions.iter().any(|v| v == VERSION) {
        return Err(HandshakeError::UnsupportedVersion(parsed.supported_versions.join(", ")));
    }
    let tools = parsed.capabilities.get("tools");
    Ok(ServerHello {
        era: Era::Modern,
        protocol_version: VERSION.to_owned(),
        server_info: parsed.meta.get("io.modelcontextprotocol/serverInfo").map(Value::to_string),
        has_tools: tools.is_some_and(Value::is_object),
        tools_list_changed: tools.and_then(|t| t.get("listChanged")).and_then(Value::as_bool).unwrap_or(false),
        instructions: parsed.instructions,
    })
}

/// The versions a -32022 error says the server supports.
pub fn supported_versions(error: &RpcError) -> Vec<String> {
    error
        .data
        .as_ref()
        .and_then(|data| serde_json::from_str::<Value>(data.get()).ok())
        .and_then(|data| data.get("supported").cloned())
        .and_then(|supported| serde_json::from_value(supported).ok())
        .unwrap_or_default()
}

/// An error that only a modern server gives: it speaks the era, so toolhost must not fall back.
pub fn is_modern_error(error: &RpcError) -> bool {
    matches!(error.code, UNSUPPORTED_VERSION | HEADER_MISMATCH | MISSING_CAPABILITY)
}

/// `subscriptions/listen` for tool-list changes.
pub fn listen_params() -> Box<RawValue> {
    RawValue::from_string(json!({"notifications": {"toolsListChanged": true}}).to_string()).unwrap_or_else(|_| empty_object())
}

fn empty_object() -> Box<RawValue> {
    // "{}" is valid JSON.
    serde_json::value::to_raw_value(&Map::new()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn meta_is_merged_without_overriding_what_is_there() {
        let meta = request_meta(VERSION);
        let merged = with_meta(Some(&raw(r#"{"name":"t","_meta":{"traceparent":"x"}}"#)), &meta).unwrap();
        let value: Value = serde_json::from_str(merged.get()).unwrap();
        assert_eq!(value["_meta"]["traceparent"], "x");
        assert_eq!(value["_meta"]["io.modelcontextprotocol/protocolVersion"], VERSION);
        assert_eq!(value["_meta"]["io.modelcontextprotocol/clientCapabilities"], json!({}));
        let bare: Value = serde_json::from_str(with_meta(None, &meta).unwrap().get()).unwrap();
        assert_eq!(bare["_meta"]["io.modelcontextprotocol/clientInfo"]["name"], "toolhost");
    }

    #[test]
    fn discover_results_and_version_errors_are_read() {
        let hello = check_discover_result(&raw(
            r#"{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"ttlMs":0,"cacheScope":"public","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"m","version":"1"}}}"#,
        ))
        .unwrap();
        assert!(hello.era == Era::Modern && hello.has_tools && hello.tools_list_changed);
        assert!(hello.server_info.unwrap().contains("\"m\""));
        assert!(check_discover_result(&raw(r#"{"supportedVersions":["2099-01-01"],"capabilities":{}}"#)).is_err());
        let error = RpcError {
            code: UNSUPPORTED_VERSION,
            message: "Unsupported protocol version".into(),
            data: Some(raw(r#"{"supported":["2026-07-28"],"requested":"x"}"#)),
        };
        assert!(is_modern_error(&error));
        assert_eq!(supported_versions(&error), ["2026-07-28"]);
    }
}
