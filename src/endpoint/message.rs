//! What the endpoint reads from a client's message: one borrowed parse of the envelope and of
//! the `params` members any method uses. Arguments stay raw; no JSON tree is built.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Era, reply};
use crate::mcp::jsonrpc::code::INVALID_PARAMS;
use crate::mcp::modern::{self, UNSUPPORTED_VERSION};

/// Longest progress token toolhost echoes back to a client.
const MAX_TOKEN_BYTES: usize = 256;

/// A client's message, classified.
#[derive(Debug)]
pub(super) enum Message<'a> {
    Request(Request<'a>),
    Notification {
        method: Cow<'a, str>,
        params: Option<&'a RawValue>,
    },
    /// A response: to a question toolhost put to the client (see `asking`), or else ignored.
    Response {
        id: Option<&'a RawValue>,
        result: Option<&'a RawValue>,
        error: Option<&'a RawValue>,
    },
}

/// A request: its id (echoed verbatim), method and raw params.
#[derive(Debug)]
pub(super) struct Request<'a> {
    pub(super) id: &'a RawValue,
    pub(super) method: Cow<'a, str>,
    pub(super) params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// Why a message was not read, as the JSON-RPC error to answer with (id `null`).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Unreadable {
    pub(super) code: i64,
    pub(super) message: String,
}

/// The `params` members the endpoint's methods read.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Params<'a> {
    #[serde(borrow, default)]
    pub(super) name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) arguments: Option<&'a RawValue>,
    #[serde(default)]
    pub(super) cursor: Option<String>,
    #[serde(rename = "protocolVersion", default)]
    pub(super) protocol_version: Option<String>,
    #[serde(rename = "_meta", borrow, default)]
    pub(super) meta: Option<Meta<'a>>,
    /// A 2026 client's answers to an `input_required` result, and the `requestState` it came
    /// with (toolhost's continuation token).
    #[serde(rename = "inputResponses", borrow, default)]
    pub(super) input_responses: Option<&'a RawValue>,
    #[serde(rename = "requestState", borrow, default)]
    pub(super) request_state: Option<Cow<'a, str>>,
    /// A 2025 client's request that a `tools/call` run as a task (`{"ttl": ms}`).
    #[serde(default)]
    pub(super) task: Option<TaskParams>,
    /// The task a `tasks/*` request names.
    #[serde(rename = "taskId", borrow, default)]
    pub(super) task_id: Option<Cow<'a, str>>,
    /// Copied out of `meta` by [`Params::read`].
    #[serde(skip)]
    pub(super) progress_token: Option<&'a RawValue>,
    #[serde(skip)]
    pub(super) definition_hash: Option<Cow<'a, str>>,
}

/// `params.task` of a task-augmented request (2025-11-25).
#[derive(Debug, Default, Deserialize)]
pub(super) struct TaskParams {
    /// How long the task is kept from its creation, in milliseconds.
    #[serde(default)]
    pub(super) ttl: Option<u64>,
}

/// Whether a 2026 client's per-request capabilities declare the tasks extension.
pub(super) fn declares_tasks(capabilities: Option<&RawValue>) -> bool {
    #[derive(Deserialize)]
    struct Capabilities<'a> {
        #[serde(borrow, default)]
        extensions: Option<std::collections::HashMap<Cow<'a, str>, &'a RawValue>>,
    }
    capabilities
        .and_then(|raw| serde_json::from_str::<Capabilities<'_>>(raw.get()).ok())
        .and_then(|capabilities| capabilities.extensions)
        .is_some_and(|extensions| extensions.contains_key(crate::mcp::tasks::EXTENSION))
}

/// The request `_meta` members the endpoint reads.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Meta<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
    pub(super) protocol_version: Option<Cow<'a, str>>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow, default)]
    pub(super) client_capabilities: Option<&'a RawValue>,
    #[serde(rename = "progressToken", borrow, default)]
    pub(super) progress_token: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) traceparent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) tracestate: Option<Cow<'a, str>>,
    #[serde(rename = "dev.toolhost/definitionHash", borrow, default)]
    pub(super) definition_hash: Option<Cow<'a, str>>,
}

/// Reads one message.
///
/// # Errors
/// [`Unreadable`]: -32700 for text that is not JSON, -32600 for JSON that is not one JSON-RPC
/// message (a batch included: MCP dropped batches in 2025-06-18).
pub(super) fn read(bytes: &[u8]) -> Result<Message<'_>, Unreadable> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        return Err(Unreadable { code: -32600, message: "JSON-RPC batches are not supported".into() });
    }
    let envelope: Envelope<'_> = serde_json::from_slice(bytes).map_err(|err| match err.is_data() {
        true => Unreadable { code: -32600, message: "not a JSON-RPC message object".into() },
        false => Unreadable { code: -32700, message: format!("parse error: {err}") },
    })?;
    if envelope.jsonrpc.as_deref() != Some("2.0") {
        return Err(Unreadable { code: -32600, message: "jsonrpc must be \"2.0\"".into() });
    }
    match (envelope.method, envelope.id) {
        (Some(method), Some(id)) if id.get() != "null" => {
            let valid_id = id.get().starts_with('"') || id.get().bytes().all(|b| b.is_ascii_digit() || b == b'-');
            if !valid_id {
                return Err(Unreadable { code: -32600, message: "a request id is a string or an integer".into() });
            }
            Ok(Message::Request(Request { id, method, params: envelope.params }))
        }
        (Some(method), _) => Ok(Message::Notification { method, params: envelope.params }),
        (None, id) if envelope.result.is_some() || envelope.error.is_some() => {
            Ok(Message::Response { id, result: envelope.result, error: envelope.error })
        }
        (None, _) => Err(Unreadable { code: -32600, message: "neither a request, a notification nor a response".into() }),
    }
}

/// The request a `notifications/cancelled` names (its id's JSON text), if its params are readable.
pub(super) fn cancelled_request(params: Option<&RawValue>) -> Option<&str> {
    #[derive(Deserialize)]
    struct Cancelled<'a> {
        #[serde(rename = "requestId", borrow)]
        request_id: &'a RawValue,
    }
    let cancelled: Cancelled<'_> = serde_json::from_str(params?.get()).ok()?;
    Some(cancelled.request_id.get())
}

/// Whether a `subscriptions/listen` asks for tool list changes (the only kind toolhost sends).
pub(super) fn listens_for_tools(params: Option<&RawValue>) -> bool {
    #[derive(Deserialize, Default)]
    struct ListenParams {
        #[serde(default)]
        notifications: ListenTypes,
    }
    #[derive(Deserialize, Default)]
    struct ListenTypes {
        #[serde(rename = "toolsListChanged", default)]
        tools_list_changed: bool,
    }
    params.and_then(|p| serde_json::from_str::<ListenParams>(p.get()).ok()).is_some_and(|p| p.notifications.tools_list_changed)
}

/// A request refused before it is served: the JSON-RPC error line that answers it.
#[derive(Debug)]
pub(super) struct Refused(pub(super) String);

impl<'a> Params<'a> {
    /// The params of a request (absent params read as empty).
    ///
    /// # Errors
    /// What is wrong with them.
    pub(super) fn read(params: Option<&'a RawValue>) -> Result<Params<'a>, serde_json::Error> {
        let Some(params) = params else { return Ok(Params::default()) };
        let mut read: Params<'a> = serde_json::from_str(params.get())?;
        if let Some(meta) = &mut read.meta {
            read.progress_token = meta.progress_token.filter(|token| {
                let text = token.get();
                text.len() <= MAX_TOKEN_BYTES && (text.starts_with('"') || text.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
            });
            read.definition_hash = meta.definition_hash.take();
        }
        Ok(read)
    }

    /// A request that names its protocol version in `_meta` belongs to the 2026 era.
    pub(super) fn era(&self) -> Era {
        match self.meta.as_ref().and_then(|meta| meta.protocol_version.as_ref()) {
            Some(_) => Era::Modern,
            None => Era::Legacy,
        }
    }

    /// The 2026 rules for a request's `_meta`: a version toolhost speaks, and the client's
    /// capabilities. On failure, the error line to answer with.
    ///
    /// # Errors
    /// The response line: -32022 with the supported versions, or -32602.
    pub(super) fn check_modern(&self, id: &RawValue) -> Result<(), Refused> {
        let meta = self.meta.as_ref();
        let version = meta.and_then(|meta| meta.protocol_version.as_deref()).unwrap_or_default();
        if version != modern::VERSION {
            let data = serde_json::json!({ "supported": [modern::VERSION], "requested": reply::clip(version) }).to_string();
            let data = RawValue::from_string(data).ok();
            return Err(Refused(reply::error(id, UNSUPPORTED_VERSION, "Unsupported protocol version", data.as_deref())));
        }
        if meta.and_then(|meta| meta.client_capabilities).is_none() {
            return Err(Refused(reply::error(id, INVALID_PARAMS, "_meta needs io.modelcontextprotocol/clientCapabilities", None)));
        }
        Ok(())
    }

    /// The trace named in `_meta` (`traceparent`, `tracestate`), if any.
    pub(super) fn trace(&self) -> Option<(&str, Option<&str>)> {
        let meta = self.meta.as_ref()?;
        Some((meta.traceparent.as_deref()?, meta.tracestate.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Client messages: MCP fragments glued at random, or any bytes (FUZZING.md).
    fn message() -> impl Strategy<Value = Vec<u8>> {
        crate::mcp::fuzzing::glued_or_any_bytes(crate::mcp::fuzzing::MCP, 48)
    }

    proptest! {
        #![proptest_config(crate::mcp::fuzzing::campaign())]

        /// Whatever a client sends, the endpoint classifies it or names why not, never panics;
        /// a request's params and a 2026 client's capabilities are read the same way.
        #[test]
        fn client_messages_are_classified_without_panicking(line in message()) {
            match read(&line) {
                Ok(Message::Request(request)) => {
                    let _ = Params::read(request.params);
                    if let Ok(params) = Params::read(request.params) {
                        let _ = params.era();
                        let _ = declares_tasks(params.meta.as_ref().and_then(|meta| meta.client_capabilities));
                    }
                }
                Ok(_) => {}
                Err(unreadable) => prop_assert!(unreadable.code < 0 && !unreadable.message.is_empty()),
            }
        }
    }

    #[test]
    fn every_shape_is_classified_and_bad_input_named() {
        assert!(matches!(read(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Ok(Message::Request(_))));
        assert!(matches!(read(br#"{"jsonrpc":"2.0","id":"a\"b","method":"tools/list"}"#), Ok(Message::Request(_))));
        assert!(matches!(read(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), Ok(Message::Notification { .. })));
        assert!(matches!(read(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Ok(Message::Response { .. })));
        assert_eq!(read(b"{nope").unwrap_err().code, -32700);
        assert_eq!(read(b"[{}]").unwrap_err().code, -32600);
        assert_eq!(read(b"42").unwrap_err().code, -32600);
        assert_eq!(read(br#"{"id":1,"method":"ping"}"#).unwrap_err().code, -32600, "jsonrpc missing");
        assert_eq!(read(br#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#).unwrap_err().code, -32600, "object id");
        assert_eq!(read(br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#).unwrap_err().code, -32600, "fractional id");
    }

    #[test]
    fn params_keep_arguments_raw_and_read_the_meta() {
        let raw = RawValue::from_string(
            r#"{"name":"a\u005fb","arguments":{"big":12345678901234567890},"_meta":{"progressToken":"p1","dev.toolhost/definitionHash":"abc","io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#.to_owned(),
        )
        .unwrap();
        let params = Params::read(Some(&raw)).unwrap();
        assert_eq!(params.name.as_deref(), Some("a_b"));
        assert_eq!(params.arguments.unwrap().get(), r#"{"big":12345678901234567890}"#);
        assert_eq!(params.progress_token.unwrap().get(), r#""p1""#);
        assert_eq!(params.definition_hash.as_deref(), Some("abc"));
        assert_eq!(params.era(), Era::Modern);
        assert!(params.meta.as_ref().unwrap().definition_hash.is_none(), "moved out");
        let id = RawValue::from_string("1".into()).unwrap();
        assert!(params.check_modern(&id).unwrap_err().0.contains("clientCapabilities"));
        let old = RawValue::from_string(
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"1900-01-01","io.modelcontextprotocol/clientCapabilities":{}}}"#.into(),
        )
        .unwrap();
        let Refused(line) = Params::read(Some(&old)).unwrap().check_modern(&id).unwrap_err();
        assert!(line.contains("-32022") && line.contains(r#""requested":"1900-01-01""#), "{line}");
        let object_token = RawValue::from_string(r#"{"_meta":{"progressToken":{"x":1}}}"#.into()).unwrap();
        assert!(Params::read(Some(&object_token)).unwrap().progress_token.is_none());
        assert_eq!(Params::read(None).unwrap().era(), Era::Legacy);
    }
}
