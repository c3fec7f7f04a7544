//! The legacy (2024-11-05 to 2025-11-25) lifecycle: the `initialize` request toolhost sends and
//! what it accepts back.

use serde::Deserialize;
use serde_json::value::RawValue;

/// The protocol revisions with `initialize`, newest first. toolhost offers the first.
pub const LEGACY_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

pub const METHOD_INITIALIZE: &str = "initialize";
pub const METHOD_INITIALIZED: &str = "notifications/initialized";
pub const METHOD_PING: &str = "ping";
pub const METHOD_CANCELLED: &str = "notifications/cancelled";
pub const METHOD_PROGRESS: &str = "notifications/progress";
pub const METHOD_TOOLS_LIST: &str = "tools/list";
pub const METHOD_TOOLS_CALL: &str = "tools/call";
pub const METHOD_TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";

/// What the server told toolhost about itself in its `InitializeResult`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerHello {
    pub era: Era,
    pub protocol_version: String,
    /// `serverInfo` exactly as received (JSON), when present.
    pub server_info: Option<String>,
    /// `capabilities.tools` was present: the server offers tools.
    pub has_tools: bool,
    /// `capabilities.tools.listChanged` was `true`.
    pub tools_list_changed: bool,
    pub instructions: Option<String>,
    /// The server runs `tools/call` as a task when asked (2025-11-25:
    /// `capabilities.tasks.requests.tools.call`; 2026-07-28: the tasks extension).
    pub tasks: bool,
}

/// The two eras of MCP: `initialize` and sessions (up to 2025-11-25), or stateless requests
/// that each carry their version and capabilities (2026-07-28).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    Legacy,
    Modern,
}

impl Era {
    pub fn as_str(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Modern => "modern",
        }
    }

    pub fn parse(text: &str) -> Option<Era> {
        match text {
            "legacy" => Some(Era::Legacy),
            "modern" => Some(Era::Modern),
            _ => None,
        }
    }
}

/// Why an `InitializeResult` was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HandshakeError {
    #[error("the initialize result is malformed: {0}")]
    Malformed(String),
    #[error("the server chose protocol version {0:?}, which toolhost does not support (it speaks {supported})", supported = LEGACY_VERSIONS.join(", "))]
    UnsupportedVersion(String),
}

/// The `params` of toolhost's `initialize` request. No client capabilities are offered:
/// toolhost answers roots, sampling and elicitation requests with -32601.
pub fn initialize_params() -> String {
    format!(
        r#"{{"protocolVersion":"{}","capabilities":{{}},"clientInfo":{{"name":"toolhost","version":"{}"}}}}"#,
        LEGACY_VERSIONS[0],
        env!("CARGO_PKG_VERSION")
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeResult<'a> {
    protocol_version: String,
    #[serde(default)]
    capabilities: Capabilities,
    #[serde(borrow, default)]
    server_info: Option<&'a RawValue>,
    #[serde(default)]
    instructions: Option<String>,
}

#[derive(Deserialize, Default)]
struct Capabilities {
    #[serde(default)]
    tools: Option<ToolsCapability>,
    #[serde(default)]
    tasks: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ToolsCapability {
    #[serde(default)]
    list_changed: Option<bool>,
}

/// Reads and checks an `InitializeResult`.
///
/// # Errors
/// [`HandshakeError`] when the result is malformed or names a version toolhost does not speak.
pub fn check_initialize_result(result: &RawValue) -> Result<ServerHello, HandshakeError> {
    let parsed: InitializeResult<'_> = serde_json::from_str(result.get()).map_err(|err| HandshakeError::Malformed(err.to_string()))?;
    if !LEGACY_VERSIONS.contains(&parsed.protocol_version.as_str()) {
        return Err(HandshakeError::UnsupportedVersion(parsed.protocol_version));
    }
    let tools = parsed.capabilities.tools;
    Ok(ServerHello {
        era: Era::Legacy,
        protocol_version: parsed.protocol_version,
        server_info: parsed.server_info.map(|info| info.get().to_owned()),
        has_tools: tools.is_some(),
        tools_list_changed: tools.and_then(|t| t.list_changed).unwrap_or(false),
        instructions: parsed.instructions,
        tasks: parsed.capabilities.tasks.as_ref().and_then(|tasks| tasks.pointer("/requests/tools/call")).is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn accepts_known_versions_and_reads_the_tools_capability() {
        let hello = check_initialize_result(&raw(
            r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"1"}}"#,
        ))
        .unwrap();
        assert!(hello.has_tools && hello.tools_list_changed);
        assert_eq!(hello.server_info.as_deref(), Some(r#"{"name":"s","version":"1"}"#));

        let hello = check_initialize_result(&raw(r#"{"protocolVersion":"2024-11-05","capabilities":{"prompts":{}}}"#)).unwrap();
        assert!(!hello.has_tools);
    }

    #[test]
    fn refuses_unknown_versions_and_garbage() {
        assert_eq!(
            check_initialize_result(&raw(r#"{"protocolVersion":"1999-01-01","capabilities":{}}"#)),
            Err(HandshakeError::UnsupportedVersion("1999-01-01".into()))
        );
        assert!(matches!(check_initialize_result(&raw("[]")), Err(HandshakeError::Malformed(_))));
    }

    #[test]
    fn offers_the_newest_legacy_version_and_no_capabilities() {
        let params: serde_json::Value = serde_json::from_str(&initialize_params()).unwrap();
        assert_eq!(params["protocolVersion"], "2025-11-25");
        assert_eq!(params["capabilities"], serde_json::json!({}));
        assert_eq!(params["clientInfo"]["name"], "toolhost");
    }
}
