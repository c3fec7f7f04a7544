//! One bounded request to an authorization server, and the errors every OAuth exchange speaks:
//! whether an operator must act or a later attempt may succeed.

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION};
use http::{Request, StatusCode};
use http_body_util::Full;

use crate::upstream::web::HttpClient;

/// Longest metadata document or token response read.
const MAX_BODY_BYTES: usize = 256 << 10;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// Only an operator can fix this: log in again, correct the client's credentials.
    #[error("{0}")]
    Required(String),
    /// The authorization server is unreachable or failing: a later attempt may succeed.
    #[error("{0}")]
    Unavailable(String),
    /// The authorization server refused with an OAuth error code (`invalid_grant`,
    /// `invalid_client`, …): like [`FlowError::Required`], with the code to act on.
    #[error("{message}")]
    Refused { code: String, message: String },
}

/// An HTTP client for the authorization server (the MCP server's TLS settings apply).
pub struct Web {
    pub(super) client: HttpClient,
    pub(super) timeout: Duration,
}

pub(super) struct Answer {
    pub(super) status: StatusCode,
    pub(super) location: Option<String>,
    pub(super) body: Vec<u8>,
}

impl Web {
    pub fn new(client: HttpClient, timeout: Duration) -> Web {
        Web { client, timeout }
    }

    pub(super) async fn send(&self, request: Request<Full<Bytes>>) -> Result<Answer, FlowError> {
        let url = request.uri().clone();
        let exchange = async {
            let response =
                self.client.request(request).await.map_err(|err| format!("{url}: {}", crate::upstream::web::error_chain(&err)))?;
            let status = response.status();
            let location = response.headers().get(LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let body =
                crate::upstream::web::read_body(response.into_body(), MAX_BODY_BYTES).await.map_err(|err| format!("{url}: {err}"))?;
            Ok(Answer { status, location, body })
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(message)) => Err(FlowError::Unavailable(crate::secrets::redact_owned(message))),
            Err(_) => Err(FlowError::Unavailable(format!("{url}: no answer within {:?}", self.timeout))),
        }
    }

    /// A JSON document, or `None` when the server has none there (any 4xx).
    pub(super) async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<Option<T>, FlowError> {
        let request = Request::get(url)
            .header(ACCEPT, "application/json")
            .header("mcp-protocol-version", crate::mcp::lifecycle::LEGACY_VERSIONS[0])
            .body(Full::default())
            .map_err(|err| FlowError::Required(format!("{url} is not a usable URL: {err}")))?;
        let answer = self.send(request).await?;
        match answer.status {
            status if status.is_success() => serde_json::from_slice(&answer.body)
                .map(Some)
                .map_err(|err| FlowError::Unavailable(format!("{url}: not the metadata expected: {err}"))),
            status if status.is_client_error() => Ok(None),
            status => Err(FlowError::Unavailable(format!("{url}: HTTP {status}"))),
        }
    }

    pub(super) async fn post(
        &self,
        url: &str,
        content_type: &str,
        body: Vec<u8>,
        authorization: Option<String>,
    ) -> Result<Answer, FlowError> {
        let mut request = Request::post(url).header(ACCEPT, "application/json").header(CONTENT_TYPE, content_type);
        if let Some(authorization) = authorization {
            let mut value = http::HeaderValue::from_str(&authorization)
                .map_err(|_| FlowError::Required("the client credentials are not valid in a header".into()))?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        let request =
            request.body(Full::new(Bytes::from(body))).map_err(|err| FlowError::Required(format!("{url} is not a usable URL: {err}")))?;
        self.send(request).await
    }

    /// Follows an authorization URL one step, as a browser whose user approves at once would:
    /// the redirect's query.
    pub async fn follow_authorization(&self, url: &str) -> Result<String, FlowError> {
        let request =
            Request::get(url).body(Full::default()).map_err(|err| FlowError::Required(format!("bad authorization URL: {err}")))?;
        let answer = self.send(request).await?;
        match (answer.status.is_redirection(), answer.location) {
            (true, Some(location)) => Ok(location.split_once('?').map(|(_, query)| query.to_owned()).unwrap_or_default()),
            _ => Err(FlowError::Required(format!("the authorization endpoint answered HTTP {} without a redirect", answer.status))),
        }
    }
}
