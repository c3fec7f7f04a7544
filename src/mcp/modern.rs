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
/// Spliced as text: every other member keeps its bytes and its place, so arguments reach the
/// server exactly as the agent sent them (key order, numbers beyond 64 bits). `None` when
/// `params` is not a JSON object.
pub fn with_meta(params: Option<&RawValue>, meta: &Map<String, Value>) -> Option<Box<RawValue>> {
    let members = match params {
        Some(params) => serde_json::from_str::<Members>(params.get()).ok()?.0,
        None => Vec::new(),
    };
    let mut out = String::with_capacity(params.map_or(0, |p| p.get().len()) + 256);
    out.push('{');
    let mut merged = false;
    for (key, value) in &members {
        if out.len() > 1 {
            out.push(',');
        }
        push_key(&mut out, key);
        if key == "_meta"
            && let Ok(Members(existing)) = serde_json::from_str::<Members>(value.get())
        {
            merged = true;
            push_meta(&mut out, &existing, meta);
        } else {
            out.push_str(value.get());
        }
    }
    if !merged {
        if out.len() > 1 {
            out.push(',');
        }
        push_key(&mut out, "_meta");
        push_meta(&mut out, &[], meta);
    }
    out.push('}');
    RawValue::from_string(out).ok()
}

/// `existing` members (kept as sent) followed by the `meta` keys they lack, as one object.
fn push_meta(out: &mut String, existing: &[(String, Box<RawValue>)], meta: &Map<String, Value>) {
    out.push('{');
    let mut first = true;
    for (key, value) in existing {
        if !std::mem::take(&mut first) {
            out.push(',');
        }
        push_key(out, key);
        out.push_str(value.get());
    }
    for (key, value) in meta.iter().filter(|(key, _)| !existing.iter().any(|(k, _)| k == *key)) {
        if !std::mem::take(&mut first) {
            out.push(',');
        }
        push_key(out, key);
        out.push_str(&value.to_string());
    }
    out.push('}');
}

fn push_key(out: &mut String, key: &str) {
    out.push_str(&Value::from(key).to_string());
    out.push(':');
}

/// A JSON object's members in their order, each value unparsed.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Members, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visit)
    }
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
        tasks: parsed.capabilities.pointer("/extensions").and_then(|extensions| extensions.get(super::tasks::EXTENSION)).is_some(),
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
    fn meta_is_spliced_without_touching_the_other_members() {
        let meta = request_meta(VERSION);
        let params = r#"{"name":"t","arguments":{"z":1,"big":1180591620717411303424,"a":[1.50,"\u00e9"]}}"#;
        let merged = with_meta(Some(&raw(params)), &meta).unwrap();
        let text = merged.get();
        assert!(
            text.starts_with(r#"{"name":"t","arguments":{"z":1,"big":1180591620717411303424,"a":[1.50,"\u00e9"]},"_meta":{"#),
            "{text}"
        );
        assert!(text.contains(r#""io.modelcontextprotocol/protocolVersion":"2026-07-28""#));
        let with_trace = with_meta(Some(&raw(r#"{"_meta":{"traceparent":"x"},"n":1e400}"#)), &meta).unwrap();
        assert!(with_trace.get().starts_with(r#"{"_meta":{"traceparent":"x","io.modelcontextprotocol"#), "{}", with_trace.get());
        assert!(with_trace.get().ends_with(r#","n":1e400}"#), "numbers out of any float's range survive too");
        assert!(with_meta(Some(&raw("[1]")), &meta).is_none());
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
