//! The HTTP client the Streamable HTTP transport and the OAuth flows share: one server's TLS
//! trust, bounded bodies, and errors told with their causes.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::config::HttpSpec;
use crate::upstream::UpstreamError;

pub(crate) type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Why a body could not be read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("reading the HTTP body failed: {0}")]
    Read(String),
    #[error("the HTTP body is larger than {0} bytes")]
    TooLarge(usize),
}

/// The whole body, at most `limit` bytes.
pub(crate) async fn read_body(mut body: hyper::body::Incoming, limit: usize) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| BodyError::Read(err.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(BodyError::TooLarge(limit));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out)
}

/// An HTTP/1.1 client (TLS when the URL says so) with the server's trust settings; the OAuth
/// exchanges of the server use it too.
///
/// # Errors
/// The `ca_file` cannot be used.
pub(crate) fn client(spec: &HttpSpec, connect_timeout: Duration) -> Result<HttpClient, UpstreamError> {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(connect_timeout));
    connector.set_nodelay(true);
    // `https_or_http` wraps plain http too: 127.0.0.1 servers need no certificate.
    connector.enforce_http(false);
    let tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config(spec)?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    Ok(Client::builder(TokioExecutor::new()).build(tls))
}

/// rustls with the ring provider, trusting the public web's roots, or only `ca_file` when set.
fn tls_config(spec: &HttpSpec) -> Result<rustls::ClientConfig, UpstreamError> {
    crate::tls_client::client_config(spec.ca_file.as_deref()).map_err(|problem| UpstreamError::Protocol(format!("ca_file: {problem}")))
}

/// An error and its causes, "outer: inner: root" (hyper's own message alone says little).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
