//! JSON-RPC 2.0 framing for MCP: classify an incoming line and encode outgoing messages.
//!
//! Sans-IO. Incoming payloads (`params`, `result`, `error.data`) stay as borrowed raw JSON so the
//! routing of a response never parses the body it carries.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::value::RawValue;

/// A request id as toolhost issues them. Server-issued ids are kept raw (see [`Incoming::Request`]).
pub type RequestId = u64;

/// JSON-RPC error codes that MCP gives a meaning to.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
}

/// The `error` member of a JSON-RPC response.
#[derive(Debug, Clone, Deserialize)]
pub struct RpcError {
    pub code: i64,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub data: Option<Box<RawValue>>,
}

/// One message read from an upstream, classified by shape.
#[derive(Debug)]
pub enum Incoming<'a> {
    /// A response to one of toolhost's requests.
    Response {
        id: RequestId,
        outcome: Result<&'a RawValue, RpcError>,
    },
    /// A response whose id toolhost never issued (not an unsigned integer).
    ForeignResponse,
    /// A request from the server; `id` is echoed back verbatim.
    Request {
        id: &'a RawValue,
        method: &'a str,
        params: Option<&'a RawValue>,
    },
    Notification {
        method: &'a str,
        params: Option<&'a RawValue>,
    },
}

/// Why a line could not be classified.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("JSON but not a JSON-RPC message: {0}")]
    NotJsonRpc(&'static str),
    #[error("JSON-RPC batches are not supported")]
    Batch,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<RpcError>,
}

/// Classifies one line (without its newline).
///
/// # Errors
/// [`FrameError`] when the line is not a single JSON-RPC message.
pub fn parse_line(line: &[u8]) -> Result<Incoming<'_>, FrameError> {
    let first = line.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        return Err(FrameError::Batch);
    }
    let envelope: Envelope<'_> = match serde_json::from_slice(line) {
        Ok(envelope) => envelope,
        Err(err) if err.is_data() => return Err(FrameError::NotJsonRpc("not an object")),
        Err(err) => return Err(FrameError::NotJson(err.to_string())),
    };
    match (envelope.method, envelope.id) {
        (Some(method), Some(id)) if id.get() != "null" => Ok(Incoming::Request { id, method, params: envelope.params }),
        (Some(method), _) => Ok(Incoming::Notification { method, params: envelope.params }),
        (None, id) => {
            let Some(id) = id.and_then(|id| id.get().parse::<RequestId>().ok()) else {
                if envelope.result.is_some() || envelope.error.is_some() {
                    return Ok(Incoming::ForeignResponse);
                }
                return Err(FrameError::NotJsonRpc("neither request, notification nor response"));
            };
            let outcome = match (envelope.result, envelope.error) {
                (_, Some(error)) => Err(error),
                (Some(result), None) => Ok(result),
                (None, None) => return Err(FrameError::NotJsonRpc("response without result or error")),
            };
            Ok(Incoming::Response { id, outcome })
        }
    }
}

/// Encodes a request as one line, newline included.
pub fn encode_request(id: RequestId, method: &str, params: Option<&RawValue>) -> String {
    encode_call(Some(id), method, params)
}

/// Encodes a notification as one line, newline included.
pub fn encode_notification(method: &str, params: Option<&RawValue>) -> String {
    encode_call(None, method, params)
}

fn encode_call(id: Option<RequestId>, method: &str, params: Option<&RawValue>) -> String {
    let mut line = String::with_capacity(64 + method.len() + params.map_or(0, |p| p.get().len()));
    line.push_str(r#"{"jsonrpc":"2.0","#);
    if let Some(id) = id {
        let _ = write!(line, r#""id":{id},"#);
    }
    line.push_str(r#""method":"#);
    push_json_str(&mut line, method);
    if let Some(params) = params {
        line.push_str(r#","params":"#);
        line.push_str(params.get());
    }
    line.push_str("}\n");
    line
}

/// Encodes a success response to a server-issued request.
pub fn encode_result(id: &RawValue, result: &str) -> String {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{result}}}\n", id.get())
}

/// Encodes an error response to a server-issued request.
pub fn encode_error(id: &RawValue, code: i64, message: &str) -> String {
    let mut line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":{{\"code\":{code},\"message\":", id.get());
    push_json_str(&mut line, message);
    line.push_str("}}\n");
    line
}

fn push_json_str(out: &mut String, value: &str) {
    // Serialising a &str to a String cannot fail.
    out.push_str(&serde_json::to_string(value).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_every_shape() {
        let check = |line: &str| format!("{:?}", parse_line(line.as_bytes()));
        assert!(check(r#"{"jsonrpc":"2.0","id":7,"result":{"a":1}}"#).contains("Response { id: 7, outcome: Ok"));
        assert!(check(r#"{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Unknown tool"}}"#).contains("code: -32602"));
        assert!(check(r#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#).contains("Request"));
        assert!(check(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#).contains("Notification"));
        assert!(check(r#"{"jsonrpc":"2.0","id":"x","result":{}}"#).contains("ForeignResponse"));
        assert_eq!(parse_line(b"[1]").unwrap_err(), FrameError::Batch);
        assert!(matches!(parse_line(b"hello world"), Err(FrameError::NotJson(_))));
        assert!(matches!(parse_line(b"42"), Err(FrameError::NotJsonRpc(_))));
        assert!(matches!(parse_line(br#"{"id":1}"#), Err(FrameError::NotJsonRpc(_))));
    }

    #[test]
    fn encodes_lines_that_parse_back() {
        let params = RawValue::from_string(r#"{"cursor":"a\nb"}"#.to_owned()).unwrap();
        let line = encode_request(3, "tools/list", Some(&params));
        assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["params"]["cursor"], "a\nb");
        let id = RawValue::from_string("\"s-1\"".to_owned()).unwrap();
        let error: serde_json::Value = serde_json::from_str(&encode_error(&id, code::METHOD_NOT_FOUND, "no \"roots\"")).unwrap();
        assert_eq!(error["id"], "s-1");
        assert_eq!(error["error"]["code"], -32601);
    }
}
