//! Where a server's tokens come from: what the server says without a token, its
//! protected-resource metadata (RFC 9728), its authorization server's metadata (RFC 8414 or
//! OpenID Connect discovery, the 2025-03-26 defaults for a server without either), the resource
//! indicator and the scopes to ask for.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Request, StatusCode};
use http_body_util::Full;
use serde::Deserialize;

use super::flow::{FlowError, Web};
use super::{Challenge, authorization_server_urls, protected_resource_urls};

/// What the MCP server says to a request without a token: the `401`'s challenge, or `None` when
/// it gave none (or did not refuse). `toolhost login` starts from it.
///
/// # Errors
/// The server cannot be reached.
pub async fn probe(web: &Web, server_url: &str) -> Result<Option<Challenge>, FlowError> {
    use crate::mcp::{jsonrpc, lifecycle};
    let params = serde_json::value::RawValue::from_string(lifecycle::initialize_params()).ok();
    let body = jsonrpc::encode_request(0, lifecycle::METHOD_INITIALIZE, params.as_deref());
    let request = Request::post(server_url)
        .header(ACCEPT, "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|err| FlowError::Required(format!("{server_url} is not a usable URL: {err}")))?;
    let response = match tokio::time::timeout(web.timeout, web.client.request(request)).await {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => return Err(FlowError::Unavailable(format!("{server_url}: {}", crate::upstream::http::error_chain(&err)))),
        Err(_) => return Err(FlowError::Unavailable(format!("{server_url}: no answer within {:?}", web.timeout))),
    };
    if response.status() != StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(response.headers().get_all(http::header::WWW_AUTHENTICATE).iter().filter_map(|v| v.to_str().ok()).find_map(Challenge::parse))
}

/// RFC 9728 protected-resource metadata (what toolhost reads of it).
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceMetadata {
    pub resource: Option<String>,
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Option<Vec<String>>,
}

/// RFC 8414 authorization-server metadata (what toolhost reads of it).
#[derive(Debug, Clone, Deserialize)]
pub struct ServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: String,
    pub registration_endpoint: Option<String>,
    pub revocation_endpoint: Option<String>,
    pub code_challenge_methods_supported: Option<Vec<String>>,
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

/// Where and how to get tokens for one MCP server.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// The RFC 8707 resource indicator: the MCP server's canonical URI.
    pub resource: String,
    pub metadata: ServerMetadata,
    pub scopes_supported: Option<Vec<String>>,
}

/// Protected-resource metadata (from the challenge, else the well-known URLs in order), then the
/// first authorization server's metadata (RFC 8414, then OpenID Connect discovery).
///
/// # Errors
/// No metadata where the specification says to look, or a document that does not match.
pub async fn discover(web: &Web, server_url: &str, challenge: Option<&Challenge>) -> Result<Discovery, FlowError> {
    let candidates = match challenge.and_then(|c| c.resource_metadata.clone()) {
        Some(url) => vec![url],
        None => protected_resource_urls(server_url),
    };
    let mut resource_metadata = None;
    for url in &candidates {
        if let Some(found) = web.get_json::<ResourceMetadata>(url).await? {
            resource_metadata = Some(found);
            break;
        }
    }
    let Some(resource_metadata) = resource_metadata else { return discover_2025_03_26(web, server_url).await };
    let canonical = canonical_resource(server_url);
    // The resource indicator is the identifier the metadata publishes, byte for byte, once it
    // is known to cover this server.
    let resource = match resource_metadata.resource.clone() {
        Some(declared) if resource_covers(&declared, &canonical) => declared,
        Some(declared) => {
            return Err(FlowError::Required(format!(
                "the protected resource metadata is for {declared}, not for {canonical}: refusing to send tokens for it"
            )));
        }
        None => canonical,
    };
    let issuer = resource_metadata
        .authorization_servers
        .first()
        .ok_or_else(|| FlowError::Required("the protected resource metadata names no authorization server".into()))?;
    for url in authorization_server_urls(issuer) {
        if let Some(metadata) = web.get_json::<ServerMetadata>(&url).await? {
            if metadata.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
                return Err(FlowError::Required(format!(
                    "the authorization server metadata at {url} names issuer {}, not {issuer}",
                    metadata.issuer
                )));
            }
            check_endpoints(&metadata)?;
            return Ok(Discovery { resource, metadata, scopes_supported: resource_metadata.scopes_supported });
        }
    }
    Err(FlowError::Unavailable(format!("no authorization server metadata for {issuer}")))
}

/// A server without protected-resource metadata, as the 2025-03-26 specification had it: the
/// authorization server is the MCP server's origin, with its RFC 8414 metadata there, or else
/// the default endpoints `/authorize`, `/token` and `/register` (PKCE was already required).
async fn discover_2025_03_26(web: &Web, server_url: &str) -> Result<Discovery, FlowError> {
    let (origin, _) = super::split_url(server_url);
    let metadata = match web.get_json::<ServerMetadata>(&format!("{origin}/.well-known/oauth-authorization-server")).await? {
        Some(mut metadata) => {
            // Fetched from the MCP server's own origin: an issuer of that origin is the server's word.
            if super::split_url(&metadata.issuer).0 != origin {
                return Err(FlowError::Required(format!("the authorization server metadata at {origin} names issuer {}", metadata.issuer)));
            }
            // That revision required PKCE with S256 of every server.
            metadata.code_challenge_methods_supported.get_or_insert_with(|| vec!["S256".to_owned()]);
            metadata
        }
        None => ServerMetadata {
            issuer: origin.to_owned(),
            authorization_endpoint: Some(format!("{origin}/authorize")),
            token_endpoint: format!("{origin}/token"),
            registration_endpoint: Some(format!("{origin}/register")),
            revocation_endpoint: None,
            code_challenge_methods_supported: Some(vec!["S256".to_owned()]),
            token_endpoint_auth_methods_supported: None,
            client_id_metadata_document_supported: false,
            authorization_response_iss_parameter_supported: false,
        },
    };
    check_endpoints(&metadata)?;
    Ok(Discovery { resource: canonical_resource(server_url), metadata, scopes_supported: None })
}

/// Credentials go to an authorization server over HTTPS only, or to this machine.
fn check_endpoints(metadata: &ServerMetadata) -> Result<(), FlowError> {
    let endpoints = [
        Some(&metadata.token_endpoint),
        metadata.authorization_endpoint.as_ref(),
        metadata.registration_endpoint.as_ref(),
        metadata.revocation_endpoint.as_ref(),
    ];
    match endpoints.into_iter().flatten().find(|url| !is_secure(url)) {
        Some(url) => Err(FlowError::Required(format!(
            "the authorization server's endpoint {url} is not HTTPS: toolhost sends credentials over HTTPS only (or to a loopback address)"
        ))),
        None => Ok(()),
    }
}

/// HTTPS, or plain HTTP to a loopback address.
pub fn is_secure(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The server URL as a resource indicator: no fragment, no query (RFC 8707 §2).
pub fn canonical_resource(server_url: &str) -> String {
    server_url.split(['#', '?']).next().unwrap_or_default().to_owned()
}

/// Whether metadata declared for `declared` may be used for `resource`: the same origin, and
/// `declared`'s path is `resource`'s or a parent of it.
fn resource_covers(declared: &str, resource: &str) -> bool {
    let declared = declared.trim_end_matches('/');
    let resource = resource.trim_end_matches('/');
    resource == declared || resource.strip_prefix(declared).is_some_and(|rest| rest.starts_with('/'))
}

/// The scopes to ask for: configured, else the challenge's, else everything the resource lists,
/// else none (the parameter is left out).
pub fn select_scope(configured: Option<&str>, challenge: Option<&Challenge>, discovery: &Discovery) -> Option<String> {
    configured
        .map(str::to_owned)
        .or_else(|| challenge.and_then(|c| c.scope.clone()))
        .or_else(|| discovery.scopes_supported.as_ref().filter(|s| !s.is_empty()).map(|s| s.join(" ")))
}

/// `a ∪ b`, in first-seen order.
pub fn scope_union(a: Option<&str>, b: Option<&str>) -> Option<String> {
    let mut scopes: Vec<&str> = Vec::new();
    for scope in a.into_iter().chain(b).flat_map(str::split_whitespace) {
        if !scopes.contains(&scope) {
            scopes.push(scope);
        }
    }
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_chosen_and_unioned_as_the_specification_says() {
        let discovery = Discovery {
            resource: "https://mcp.example/mcp".into(),
            metadata: serde_json::from_str(r#"{"issuer":"https://as","token_endpoint":"https://as/token"}"#).unwrap(),
            scopes_supported: Some(vec!["a".into(), "b".into()]),
        };
        let challenge = Challenge { scope: Some("c".into()), ..Challenge::default() };
        assert_eq!(select_scope(Some("x y"), Some(&challenge), &discovery).as_deref(), Some("x y"));
        assert_eq!(select_scope(None, Some(&challenge), &discovery).as_deref(), Some("c"));
        assert_eq!(select_scope(None, None, &discovery).as_deref(), Some("a b"));
        assert_eq!(select_scope(None, None, &Discovery { scopes_supported: None, ..discovery }), None);
        assert_eq!(scope_union(Some("a b"), Some("b c")).as_deref(), Some("a b c"));
        assert_eq!(scope_union(None, None), None);
    }

    #[test]
    fn credentials_travel_over_https_or_to_this_machine_only() {
        for url in ["https://as.example/token", "http://127.0.0.1:9/token", "http://localhost/t", "http://[::1]:8/t", "http://127.0.0.2/t"]
        {
            assert!(is_secure(url), "{url}");
        }
        for url in
            ["http://as.example/token", "http://127.0.0.1.evil.example/t", "ftp://127.0.0.1/t", "http://[::2]/t", "http://localhost.evil/t"]
        {
            assert!(!is_secure(url), "{url}");
        }
    }

    #[test]
    fn metadata_for_another_resource_is_refused() {
        assert!(resource_covers("https://mcp.example/mcp", "https://mcp.example/mcp"));
        assert!(resource_covers("https://mcp.example/", "https://mcp.example/mcp"));
        assert!(!resource_covers("https://mcp.example/mc", "https://mcp.example/mcp"));
        assert!(!resource_covers("https://evil.example/mcp", "https://mcp.example/mcp"));
        assert_eq!(canonical_resource("https://mcp.example/mcp?x=1#f"), "https://mcp.example/mcp");
    }
}
