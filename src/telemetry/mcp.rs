//! The MCP semantic conventions (OpenTelemetry's GenAI conventions, `model/mcp/`): one span per
//! MCP request on either side of toolhost, named `{mcp.method.name} {target}`, and the operation
//! and session duration histograms, in seconds. Both front doors and every upstream request
//! build their operations here, so the names and the error rules exist once.
//!
//! toolhost's own facts (the server entry, the outcome in its own words) stay under `toolhost.*`.

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::Histogram;
use opentelemetry::trace::Status;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::mcp::lifecycle::{METHOD_INITIALIZE, METHOD_PING, METHOD_TOOLS_CALL, METHOD_TOOLS_LIST};
use crate::mcp::modern::{METHOD_DISCOVER, METHOD_LISTEN};

pub const METHOD_NAME: &str = "mcp.method.name";
pub const PROTOCOL_VERSION: &str = "mcp.protocol.version";
pub const SESSION_ID: &str = "mcp.session.id";
pub const REQUEST_ID: &str = "jsonrpc.request.id";
pub const STATUS_CODE: &str = "rpc.response.status_code";
pub const ERROR_TYPE: &str = "error.type";
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
pub const TOOL_NAME: &str = "gen_ai.tool.name";
pub const NETWORK_TRANSPORT: &str = "network.transport";
pub const NETWORK_PROTOCOL: &str = "network.protocol.name";
pub const SERVER_ADDRESS: &str = "server.address";
pub const SERVER_PORT: &str = "server.port";
pub const CLIENT_ADDRESS: &str = "client.address";
pub const CLIENT_PORT: &str = "client.port";
/// `gen_ai.operation.name` of a tool call; set on `tools/call` only.
pub const EXECUTE_TOOL: &str = "execute_tool";
/// `error.type` of a call whose result says `isError`.
pub const TOOL_ERROR: &str = "tool_error";
/// The method a span and a metric name when a caller sent one toolhost does not know: a
/// caller's made-up method must not become a span name or a time series.
const OTHER_METHOD: &str = "_OTHER";

/// How an operation's peer is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wire {
    /// `network.transport`: `pipe` (a stdio server), `tcp` or `unix`.
    pub transport: &'static str,
    /// `network.protocol.name`: `http` for Streamable HTTP (and gRPC), none over a pipe.
    pub protocol: Option<&'static str>,
    /// The peer's address and port: `server.*` on the client side, `client.*` on the server side.
    pub address: Option<Arc<str>>,
    pub port: Option<u16>,
}

impl Wire {
    /// A stdio server: its pipes.
    pub fn pipe() -> Wire {
        Wire { transport: "pipe", protocol: None, address: None, port: None }
    }

    /// A Unix socket, with the protocol spoken over it (`None`: newline-delimited JSON-RPC).
    pub fn unix(protocol: Option<&'static str>) -> Wire {
        Wire { transport: "unix", protocol, address: None, port: None }
    }

    /// HTTP over TCP to or from `address:port`.
    pub fn http(address: Option<Arc<str>>, port: Option<u16>) -> Wire {
        Wire { transport: "tcp", protocol: Some("http"), address, port }
    }

    /// A Streamable HTTP server's URL: its host and port (the scheme's default when not written).
    pub fn of_url(url: &str) -> Wire {
        let Ok(uri) = url.parse::<http::Uri>() else { return Wire::http(None, None) };
        let port = uri.port_u16().or(match uri.scheme_str() {
            Some("https") => Some(443),
            Some("http") => Some(80),
            _ => None,
        });
        Wire::http(uri.host().map(|host| Arc::from(host.trim_start_matches('[').trim_end_matches(']'))), port)
    }
}

/// Which side of the exchange toolhost is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// toolhost sends the request (to a server): a `client` span, `mcp.client.*` metrics.
    Client,
    /// toolhost answers it (to an agent): a `server` span, `mcp.server.*` metrics.
    Server,
}

/// One MCP request as the conventions describe it: its span, and, when it ends, its duration
/// in `mcp.client.operation.duration` or `mcp.server.operation.duration`.
pub struct Operation {
    span: Span,
    side: Side,
    started: Instant,
    histogram: Histogram<f64>,
    /// The metric's attributes, collected as the operation learns them.
    attributes: Vec<KeyValue>,
    /// Whether the span's attributes and the metric's data point are built at all.
    traced: bool,
    measured: bool,
    failed: bool,
    /// Set once: a call answered in several rounds names its tool once.
    tool_named: bool,
    version_named: bool,
}

impl Operation {
    /// Starts the span (a child of the current one) of `method`, naming `target` (a tool, as the
    /// peer named it, bounded by the caller) in its name. The metric names the tool only once
    /// [`Operation::tool`] says it exists.
    pub fn start(side: Side, histogram: &Histogram<f64>, method: &str, target: Option<&str>, wire: &Wire) -> Operation {
        let method = known_method(method);
        let name = match target {
            Some(target) => format!("{method} {target}"),
            None => method.to_owned(),
        };
        let span = match side {
            Side::Client => tracing::info_span!("mcp", otel.name = %name, otel.kind = "client"),
            Side::Server => tracing::info_span!("mcp", otel.name = %name, otel.kind = "server"),
        };
        let mut operation = Operation {
            span,
            side,
            started: Instant::now(),
            histogram: histogram.clone(),
            attributes: Vec::new(),
            traced: super::traces_exported(),
            measured: super::metrics_exported(),
            failed: false,
            tool_named: false,
            version_named: false,
        };
        operation.both(KeyValue::new(METHOD_NAME, method));
        operation.both(KeyValue::new(NETWORK_TRANSPORT, wire.transport));
        if let Some(protocol) = wire.protocol {
            operation.both(KeyValue::new(NETWORK_PROTOCOL, protocol));
        }
        if let Some(address) = wire.address.as_ref().filter(|_| operation.observed()) {
            // The server's address is one per configured server; a client's would be a series
            // per connection, so the metric names only the server's.
            let (address_key, port_key) = match side {
                Side::Client => (SERVER_ADDRESS, SERVER_PORT),
                Side::Server => (CLIENT_ADDRESS, CLIENT_PORT),
            };
            let address = KeyValue::new(address_key, address.to_string());
            let port = wire.port.map(|port| KeyValue::new(port_key, i64::from(port)));
            match side {
                Side::Client => {
                    operation.both(address);
                    port.into_iter().for_each(|port| operation.both(port));
                }
                Side::Server => {
                    operation.on_span(address);
                    port.into_iter().for_each(|port| operation.on_span(port));
                }
            }
        }
        if method == METHOD_TOOLS_CALL {
            operation.both(KeyValue::new(OPERATION_NAME, EXECUTE_TOOL));
        }
        operation
    }

    /// An attribute on the span only.
    fn on_span(&self, attribute: KeyValue) {
        if self.traced {
            self.span.set_attribute(attribute.key, attribute.value);
        }
    }

    /// An attribute on the span and the metric.
    fn both(&mut self, attribute: KeyValue) {
        if self.traced {
            self.span.set_attribute(attribute.key.clone(), attribute.value.clone());
        }
        if self.measured {
            self.attributes.push(attribute);
        }
    }

    pub fn span(&self) -> &Span {
        &self.span
    }

    /// Whether anything reads this operation's attributes (its span or its metric is exported).
    pub fn observed(&self) -> bool {
        self.traced || self.measured
    }

    /// The tool the operation is about: `gen_ai.tool.name` on the span and the metric. Only a
    /// tool that exists (a caller's made-up name would be a new time series).
    pub fn tool(&mut self, name: &str) {
        if std::mem::replace(&mut self.tool_named, true) || !(self.traced || self.measured) {
            return;
        }
        self.both(KeyValue::new(TOOL_NAME, name.to_owned()));
    }

    /// One of toolhost's own attributes (`toolhost.*`), on the span and the metric.
    pub fn attribute(&mut self, attribute: KeyValue) {
        self.both(attribute);
    }

    /// `mcp.protocol.version`, on the span and the metric.
    pub fn protocol_version(&mut self, version: &str) {
        if std::mem::replace(&mut self.version_named, true) || !(self.traced || self.measured) {
            return;
        }
        self.both(KeyValue::new(PROTOCOL_VERSION, version.to_owned()));
    }

    /// `mcp.session.id`: only where the protocol has a session (2025 era), on the span only.
    pub fn session(&self, id: &str) {
        if self.traced {
            self.span.set_attribute(SESSION_ID, id.to_owned());
        }
    }

    /// The answer was a JSON-RPC error `code`. On the client side every code is an error; on
    /// the server side, those that say the caller asked for something toolhost cannot serve
    /// (parse error, invalid request, unknown method, invalid params, resource not found) are not.
    pub fn rpc_error(&mut self, code: i64, message: &str) {
        self.both(KeyValue::new(STATUS_CODE, code.to_string()));
        let caller_error = matches!(code, -32700 | -32600 | -32601 | -32602 | -32002);
        if self.side == Side::Client || !caller_error {
            self.fail(code.to_string(), message);
        }
    }

    /// The answer's status code (a door's own: `OK`, `NOT_FOUND`, `-32602`), judging nothing.
    pub fn status_code(&mut self, code: &str) {
        self.both(KeyValue::new(STATUS_CODE, code.to_owned()));
    }

    /// The operation failed without a JSON-RPC error code (a timeout, a lost connection, a gRPC
    /// status): `error_type` is low-cardinality, e.g. `timeout`.
    pub fn failed(&mut self, error_type: &str, message: &str) {
        self.fail(error_type.to_owned(), message);
    }

    /// The call succeeded as JSON-RPC but the tool reports a failure (`isError`).
    pub fn tool_error(&mut self) {
        self.fail(TOOL_ERROR.to_owned(), "the tool reported an error");
    }

    fn fail(&mut self, error_type: String, message: &str) {
        if self.failed {
            return;
        }
        self.failed = true;
        if self.traced {
            self.span.set_status(Status::error(message.to_owned()));
        }
        self.both(KeyValue::new(ERROR_TYPE, error_type));
    }
}

/// The duration is recorded when the operation drops: a cancelled operation still took its time.
impl Drop for Operation {
    fn drop(&mut self) {
        if self.measured {
            self.histogram.record(self.started.elapsed().as_secs_f64(), &self.attributes);
        }
    }
}

/// `method` if it is one toolhost sends or answers, else `_OTHER`.
fn known_method(method: &str) -> &'static str {
    const KNOWN: [&str; 10] = [
        METHOD_TOOLS_CALL,
        METHOD_TOOLS_LIST,
        METHOD_INITIALIZE,
        METHOD_PING,
        METHOD_DISCOVER,
        METHOD_LISTEN,
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/tools/list_changed",
    ];
    KNOWN.iter().find(|known| **known == method).copied().unwrap_or(OTHER_METHOD)
}

/// One MCP session's life (2025 era only: a 2026-07-28 exchange has no session), recorded in
/// `mcp.client.session.duration` or `mcp.server.session.duration` when it ends.
pub struct SessionLife {
    started: Instant,
    histogram: Histogram<f64>,
    attributes: Vec<KeyValue>,
}

impl SessionLife {
    pub fn start(histogram: &Histogram<f64>, version: &str, wire: &Wire, side: Side) -> SessionLife {
        let mut attributes = vec![KeyValue::new(PROTOCOL_VERSION, version.to_owned())];
        if let Some(protocol) = wire.protocol {
            attributes.push(KeyValue::new(NETWORK_PROTOCOL, protocol));
        }
        if side == Side::Client
            && let Some(address) = &wire.address
        {
            attributes.push(KeyValue::new(SERVER_ADDRESS, address.to_string()));
            if let Some(port) = wire.port {
                attributes.push(KeyValue::new(SERVER_PORT, i64::from(port)));
            }
        }
        SessionLife { started: Instant::now(), histogram: histogram.clone(), attributes }
    }

    /// Adds a toolhost attribute (the server entry) to the record.
    pub fn with(mut self, attribute: KeyValue) -> SessionLife {
        self.attributes.push(attribute);
        self
    }

    /// Records the session's end; `error_type` when it ended with an error. A session dropped
    /// without it is recorded as ended without one.
    pub fn end(mut self, error_type: Option<&str>) {
        if let Some(error_type) = error_type {
            self.attributes.push(KeyValue::new(ERROR_TYPE, error_type.to_owned()));
        }
        // Recorded as it drops.
    }
}

impl Drop for SessionLife {
    fn drop(&mut self) {
        self.histogram.record(self.started.elapsed().as_secs_f64(), &self.attributes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_its_host_and_port() {
        assert_eq!(Wire::of_url("http://127.0.0.1:8931/mcp"), Wire::http(Some("127.0.0.1".into()), Some(8931)));
        assert_eq!(Wire::of_url("https://tools.example/mcp"), Wire::http(Some("tools.example".into()), Some(443)));
        assert_eq!(Wire::of_url("http://[::1]/mcp"), Wire::http(Some("::1".into()), Some(80)));
    }

    #[test]
    fn an_unknown_method_is_other() {
        assert_eq!(known_method("tools/call"), "tools/call");
        assert_eq!(known_method("x/made-up-by-a-caller"), "_OTHER");
    }
}
