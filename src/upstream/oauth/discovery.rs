//! Where a server's tokens come from: what the server says without a token, its
//! protected-resource metadata (RFC 9728), its authorization server's metadata (RFC 8414 or
//! OpenID Connect discovery, the 2025-03-26 defaults for a server without either), the resource
//! indicator and the scopes to ask for.

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Request, StatusCode};
use http_body_util::Full;
use serde::Deserialize;

use super::exchange::{FlowError, Web};
use super::{Challenge, authorization_server_urls, protected_resource_urls};
use crate::oauth_core::urls::{host_of, is_secure};

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
        Ok(Err(err)) => return Err(FlowError::Unavailable(format!("{server_url}: {}", crate::upstream::web::error_chain(&err)))),
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
    let fence = Fence::around(server_url).await;
    let mut resource_metadata = None;
    for url in &candidates {
        fence.check(url).await?;
        if let Some(found) = web.get_json::<ResourceMetadata>(url).await? {
            resource_metadata = Some(found);
            break;
        }
    }
    let Some(resource_metadata) = resource_metadata else { return discover_2025_03_26(web, server_url, &fence).await };
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
        fence.check(&url).await?;
        if let Some(metadata) = web.get_json::<ServerMetadata>(&url).await? {
            if metadata.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
                return Err(FlowError::Required(format!(
                    "the authorization server metadata at {url} names issuer {}, not {issuer}",
                    metadata.issuer
                )));
            }
            check_endpoints(&metadata)?;
            fence.check_endpoints(&metadata).await?;
            return Ok(Discovery { resource, metadata, scopes_supported: resource_metadata.scopes_supported });
        }
    }
    Err(FlowError::Unavailable(format!("no authorization server metadata for {issuer}")))
}

/// A server without protected-resource metadata, as the 2025-03-26 specification had it: the
/// authorization server is the MCP server's origin, with its RFC 8414 metadata there, or else
/// the default endpoints `/authorize`, `/token` and `/register` (PKCE was already required).
async fn discover_2025_03_26(web: &Web, server_url: &str, fence: &Fence) -> Result<Discovery, FlowError> {
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
    fence.check_endpoints(&metadata).await?;
    Ok(Discovery { resource: canonical_resource(server_url), metadata, scopes_supported: None })
}

/// What discovery may reach from one MCP server. A server on the open network can name any URL
/// in its metadata; toolhost must not become its way into this machine or its private network
/// (SSRF). So a URL of another origin whose host is, or resolves to, a loopback, private,
/// link-local or unspecified address is refused, unless the server itself is on such an address.
struct Fence {
    origin: String,
    server_internal: bool,
}

impl Fence {
    async fn around(server_url: &str) -> Fence {
        let origin = super::split_url(server_url).0.to_ascii_lowercase();
        let server_internal = match host_of(server_url) {
            Some(host) => is_internal_host(host).await,
            None => false,
        };
        Fence { origin, server_internal }
    }

    async fn check(&self, url: &str) -> Result<(), FlowError> {
        if self.server_internal || super::split_url(url).0.eq_ignore_ascii_case(&self.origin) {
            return Ok(());
        }
        match host_of(url) {
            None => Err(FlowError::Required(format!("{url} is not a URL toolhost fetches (no host, or user information in it)"))),
            Some(host) if is_internal_host(host).await => Err(FlowError::Required(format!(
                "the server's metadata points at {url}, on this machine or a private network, while the server is not: refusing to go there"
            ))),
            Some(_) => Ok(()),
        }
    }

    async fn check_endpoints(&self, metadata: &ServerMetadata) -> Result<(), FlowError> {
        let endpoints = [
            Some(&metadata.token_endpoint),
            metadata.authorization_endpoint.as_ref(),
            metadata.registration_endpoint.as_ref(),
            metadata.revocation_endpoint.as_ref(),
        ];
        for url in endpoints.into_iter().flatten() {
            self.check(url).await?;
        }
        Ok(())
    }
}

/// Whether `host` is, or resolves to, an address on this machine or a private network. A name
/// that does not resolve is left to the fetch to fail.
async fn is_internal_host(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return is_internal(ip);
    }
    match tokio::time::timeout(std::time::Duration::from_secs(5), tokio::net::lookup_host((host.as_str(), 443))).await {
        Ok(Ok(mut addrs)) => addrs.any(|addr| is_internal(addr.ip())),
        _ => false,
    }
}

/// Loopback, private (RFC 1918, RFC 4193), link-local, shared (RFC 6598) or unspecified.
fn is_internal(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback() || v4.is_private() || v4.is_link_local() || v4.is_unspecified() || (a == 100 && (64..128).contains(&b))
        }
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_internal(std::net::IpAddr::V4(v4)),
            None => {
                let first = v6.segments()[0];
                v6.is_loopback() || v6.is_unspecified() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80
            }
        },
    }
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
    fn internal_addresses_are_told_from_public_ones() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "172.32.0.1", "2606:4700::1111", "100.128.0.1"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
        assert_eq!(host_of("https://[::1]:8443/x"), Some("::1"));
        assert_eq!(host_of("http://127.0.0.1:9/x?y"), Some("127.0.0.1"));
        assert_eq!(host_of("https://user@as.example/"), None);
        assert_eq!(host_of("ftp://as.example/"), None);
        assert!(!is_secure("http://127.0.0.1:80@evil.example/token"));
    }

    #[tokio::test]
    async fn a_public_server_cannot_send_discovery_to_this_machine_or_a_private_network() {
        // Nothing is fetched: every URL below is refused before a connection is made (the
        // server's address is a documentation address that is never contacted).
        let spec = crate::config::HttpSpec { url: String::new(), headers: Default::default(), ca_file: None, auth: None };
        let web =
            Web::new(crate::upstream::web::client(&spec, std::time::Duration::from_secs(1)).unwrap(), std::time::Duration::from_secs(1));
        for target in [
            "http://127.0.0.1:9/.well-known/oauth-protected-resource",
            "http://169.254.169.254/latest/meta-data",
            "http://[::1]:9/x",
            "https://10.0.0.5/x",
            "http://localhost:9/x",
        ] {
            let challenge = Challenge { resource_metadata: Some(target.to_owned()), ..Challenge::default() };
            let refused = discover(&web, "https://203.0.113.7/mcp", Some(&challenge)).await.expect_err(target);
            assert!(refused.to_string().contains("private network"), "{target}: {refused}");
        }
        // A server on this machine may point at this machine.
        let fence = Fence::around("http://127.0.0.1:8080/mcp").await;
        assert!(fence.check("http://127.0.0.1:9000/token").await.is_ok());
        let fence = Fence::around("https://203.0.113.7/mcp").await;
        assert!(fence.check("https://203.0.113.7/.well-known/oauth-authorization-server").await.is_ok(), "its own origin");
        assert!(fence.check("https://198.51.100.1/token").await.is_ok(), "another public address");
    }

    /// Pieces of RFC 9728 and RFC 8414 metadata documents, glued at random (FUZZING.md).
    const METADATA: &[&str] = &[
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"",
        "null",
        "true",
        "1e999",
        "\"resource\":",
        "\"authorization_servers\":",
        "\"scopes_supported\":",
        "\"issuer\":",
        "\"authorization_endpoint\":",
        "\"token_endpoint\":",
        "\"registration_endpoint\":",
        "\"revocation_endpoint\":",
        "\"code_challenge_methods_supported\":",
        "\"token_endpoint_auth_methods_supported\":",
        "\"client_id_metadata_document_supported\":",
        "\"https://as.example\"",
        "\"http://as.example/token\"",
        "\"https://127.0.0.1/token\"",
        "\"http://[::1]:8/t\"",
        "\"https://mcp.example/mcp\"",
        "\"https://mcp.example/\"",
        "\"S256\"",
        "\"read write\"",
        "\"\\u0000\"",
        "\"é\"",
        " ",
    ];

    proptest::proptest! {
        #![proptest_config(crate::mcp::fuzzing::campaign())]

        /// An authorization server's metadata and a resource's are the remote side's text:
        /// read without panicking, and endpoints passed as fit only when each is HTTPS or this
        /// machine's; a resource covers only its own origin's paths.
        #[test]
        fn authorization_metadata_is_read_and_checked_without_panicking(
            document in crate::mcp::fuzzing::glued_or_any(METADATA, 32),
            declared in crate::mcp::fuzzing::glued_or_any(METADATA, 4),
        ) {
            if let Ok(metadata) = serde_json::from_str::<ServerMetadata>(&document) && check_endpoints(&metadata).is_ok() {
                proptest::prop_assert!(is_secure(&metadata.token_endpoint));
                for url in [&metadata.authorization_endpoint, &metadata.registration_endpoint, &metadata.revocation_endpoint].into_iter().flatten() {
                    proptest::prop_assert!(is_secure(url), "{url}");
                }
            }
            if let Ok(resource) = serde_json::from_str::<ResourceMetadata>(&document)
                && let Some(declared) = resource.resource
            {
                let canonical = canonical_resource("https://mcp.example/mcp");
                if resource_covers(&declared, &canonical) {
                    proptest::prop_assert!(declared.starts_with("https://mcp.example"), "{declared}");
                }
            }
            let _ = resource_covers(&declared, &canonical_resource(&document));
            let _ = scope_union(Some(&declared), Some(&document));
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
