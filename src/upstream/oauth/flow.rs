//! The OAuth exchanges with an authorization server, each one bounded request: dynamic client
//! registration, the authorization request and its callback, and the token endpoint
//! (authorization code, refresh, client credentials). Errors say whether an
//! operator must act ([`FlowError::Required`]) or a later attempt may succeed
//! ([`FlowError::Unavailable`]); neither ever carries a token or a secret.

use std::time::Duration;

use base64::Engine;
use http::StatusCode;
use serde::Deserialize;

use super::Pkce;
use super::discovery::{Discovery, ServerMetadata};
use super::exchange::Answer;
pub use super::exchange::{FlowError, Web};
use super::tokens::RegisteredClient;
use crate::config::auth::TokenEndpointAuth;

/// Longest token lifetime believed (a server that says "forever" is refreshed yearly).
const MAX_EXPIRES_IN_SECS: u64 = 366 * 24 * 3600;

/// Dynamic client registration (RFC 7591) as a native application with a loopback redirect.
///
/// # Errors
/// The server refused or did not answer.
pub async fn register(web: &Web, metadata: &ServerMetadata, redirect_uri: &str) -> Result<RegisteredClient, FlowError> {
    let endpoint = metadata.registration_endpoint.as_deref().ok_or_else(|| {
        FlowError::Required(
            "the authorization server offers no client registration: configure auth.client_id (a pre-registered client)".into(),
        )
    })?;
    let supported = metadata.token_endpoint_auth_methods_supported.clone().unwrap_or_default();
    let method = ["client_secret_basic", "client_secret_post"].into_iter().find(|m| supported.iter().any(|s| s == m)).unwrap_or("none");
    let body = serde_json::json!({
        "client_name": "toolhost",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
        "application_type": "native",
    });
    let answer = web.post(endpoint, "application/json", body.to_string().into_bytes(), None).await?;
    if !answer.status.is_success() {
        return Err(refusal("client registration", &answer));
    }
    #[derive(Deserialize)]
    struct Registered {
        client_id: String,
        client_secret: Option<String>,
        token_endpoint_auth_method: Option<String>,
    }
    let registered: Registered = serde_json::from_slice(&answer.body)
        .map_err(|err| FlowError::Unavailable(format!("the client registration answer is not valid: {err}")))?;
    if let Some(secret) = &registered.client_secret {
        crate::secrets::register(secret);
    }
    Ok(RegisteredClient {
        client_id: registered.client_id,
        client_secret: registered.client_secret,
        token_endpoint_auth_method: registered.token_endpoint_auth_method,
        redirect_uri: redirect_uri.to_owned(),
    })
}

/// An authorization request on its way: the URL for the browser, and what checks the callback.
pub struct Pending {
    pub url: String,
    state: String,
    pkce: Pkce,
    pub redirect_uri: String,
    issuer: String,
    iss_required: bool,
}

/// Builds the authorization URL (PKCE S256, `state`, `resource`, the scopes).
///
/// # Errors
/// The server cannot do PKCE with S256 (the specification forbids going on), or has no
/// authorization endpoint.
pub fn authorization_url(discovery: &Discovery, client_id: &str, redirect_uri: &str, scope: Option<&str>) -> Result<Pending, FlowError> {
    let metadata = &discovery.metadata;
    let endpoint = metadata
        .authorization_endpoint
        .as_deref()
        .ok_or_else(|| FlowError::Required("the authorization server has no authorization endpoint".into()))?;
    if !metadata.code_challenge_methods_supported.as_ref().is_some_and(|methods| methods.iter().any(|m| m == "S256")) {
        return Err(FlowError::Required(
            "the authorization server does not advertise PKCE with S256; refusing to authorize without it".into(),
        ));
    }
    let pkce = Pkce::generate().ok_or_else(|| FlowError::Unavailable("cannot read the system's random source".into()))?;
    let state = crate::secrets::random_token().ok_or_else(|| FlowError::Unavailable("cannot read the system's random source".into()))?;
    let mut query = form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("response_type", "code")
        .append_pair("client_id", client_id)
        .append_pair("redirect_uri", redirect_uri)
        .append_pair("code_challenge", &pkce.challenge)
        .append_pair("code_challenge_method", "S256")
        .append_pair("state", &state)
        .append_pair("resource", &discovery.resource);
    if let Some(scope) = scope {
        query.append_pair("scope", scope);
    }
    let separator = if endpoint.contains('?') { '&' } else { '?' };
    Ok(Pending {
        url: format!("{endpoint}{separator}{}", query.finish()),
        state,
        pkce,
        redirect_uri: redirect_uri.to_owned(),
        issuer: metadata.issuer.clone(),
        iss_required: metadata.authorization_response_iss_parameter_supported,
    })
}

impl Pending {
    /// The authorization code of the redirect's `query`, once `state` and `iss` check out
    /// (RFC 9207: compared as strings, required when the server advertises it).
    ///
    /// # Errors
    /// The server refused, or the redirect is not the answer to this request.
    pub fn code(&self, query: &str) -> Result<String, FlowError> {
        let mut code = None;
        let mut state = None;
        let mut iss = None;
        let mut error = None;
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            match &*name {
                "code" => code = Some(value.into_owned()),
                "state" => state = Some(value.into_owned()),
                "iss" => iss = Some(value.into_owned()),
                "error" => error = Some(value.into_owned()),
                _ => {}
            }
        }
        if let Some(error) = error {
            return Err(FlowError::Required(format!("the authorization server refused: {error}")));
        }
        if state.as_deref() != Some(self.state.as_str()) {
            return Err(FlowError::Required("the redirect's state does not match this authorization request".into()));
        }
        match iss {
            Some(iss) if iss != self.issuer => {
                return Err(FlowError::Required(format!("the redirect names issuer {iss}, not {}: refusing it (RFC 9207)", self.issuer)));
            }
            None if self.iss_required => {
                return Err(FlowError::Required("the authorization server promised an iss parameter and sent none (RFC 9207)".into()));
            }
            _ => {}
        }
        code.ok_or_else(|| FlowError::Required("the redirect carries no authorization code".into()))
    }

    pub fn verifier(&self) -> &str {
        &self.pkce.verifier
    }
}

/// How the client proves itself at the token endpoint.
pub struct ClientAuth<'a> {
    pub client_id: &'a str,
    pub method: TokenEndpointAuth,
    pub secret: Option<&'a str>,
    pub signer: Option<&'a crate::oauth_core::jwt::Signer>,
}

/// What the token endpoint granted.
pub struct Granted {
    pub access_token: String,
    pub expires_in: Option<Duration>,
    pub refresh_token: Option<String>,
    pub scope: Option<String>,
}

/// One token request: `form` is the grant's parameters; the client's authentication is added.
///
/// # Errors
/// [`FlowError::Required`] when the server refused the grant or the client
/// (`invalid_grant`, `invalid_client`, …), [`FlowError::Unavailable`] when it failed.
pub async fn token(web: &Web, metadata: &ServerMetadata, form: Vec<(&str, String)>, client: &ClientAuth<'_>) -> Result<Granted, FlowError> {
    let answer = post_authenticated(web, metadata, &metadata.token_endpoint, form, client).await?;
    if !answer.status.is_success() {
        return Err(refusal("the token request", &answer));
    }
    granted(&answer.body)
}

/// What a token endpoint's answer grants (its body is the authorization server's text): a Bearer
/// token that is safe in a header, its lifetime read leniently and bounded.
///
/// # Errors
/// [`FlowError::Required`] for another token type, [`FlowError::Unavailable`] for an answer that
/// is not one.
pub fn granted(body: &[u8]) -> Result<Granted, FlowError> {
    #[derive(Deserialize)]
    struct TokenAnswer {
        access_token: String,
        token_type: String,
        expires_in: Option<serde_json::Value>,
        refresh_token: Option<String>,
        scope: Option<String>,
    }
    let granted: TokenAnswer =
        serde_json::from_slice(body).map_err(|err| FlowError::Unavailable(format!("the token answer is not valid: {err}")))?;
    if !granted.token_type.eq_ignore_ascii_case("bearer") {
        return Err(FlowError::Required(format!("the token type is {:?}; toolhost sends Bearer tokens only", granted.token_type)));
    }
    if granted.access_token.is_empty() || !granted.access_token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(FlowError::Unavailable("the access token is not a header-safe string".into()));
    }
    // A number (a fraction too) or a numeric string, as some servers send; zero, negative or
    // nonsense means unknown (the token is then used until the server refuses it).
    let expires_in = granted
        .expires_in
        .and_then(|v| v.as_f64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())))
        .filter(|secs| secs.is_finite() && *secs > 0.0)
        .map(|secs| Duration::from_secs_f64(secs.min(MAX_EXPIRES_IN_SECS as f64)));
    Ok(Granted { access_token: granted.access_token, expires_in, refresh_token: granted.refresh_token, scope: granted.scope })
}

/// Token revocation (RFC 7009) at the server's `revocation_endpoint`. `Ok(false)`: the server
/// has none.
///
/// # Errors
/// The server refused or did not answer.
pub async fn revoke(web: &Web, metadata: &ServerMetadata, token: &str, hint: &str, client: &ClientAuth<'_>) -> Result<bool, FlowError> {
    let Some(endpoint) = &metadata.revocation_endpoint else { return Ok(false) };
    let form = vec![("token", token.to_owned()), ("token_type_hint", hint.to_owned())];
    let answer = post_authenticated(web, metadata, endpoint, form, client).await?;
    match answer.status.is_success() {
        true => Ok(true),
        false => Err(refusal("the revocation", &answer)),
    }
}

/// A form POST to one of the authorization server's endpoints, with the client's
/// authentication added.
async fn post_authenticated(
    web: &Web,
    metadata: &ServerMetadata,
    endpoint: &str,
    mut form: Vec<(&str, String)>,
    client: &ClientAuth<'_>,
) -> Result<Answer, FlowError> {
    let mut authorization = None;
    match client.method {
        TokenEndpointAuth::ClientSecretBasic => {
            let secret = client.secret.unwrap_or_default();
            let pair = format!("{}:{}", form_encode(client.client_id), form_encode(secret));
            authorization = Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)));
        }
        TokenEndpointAuth::ClientSecretPost => {
            form.push(("client_id", client.client_id.to_owned()));
            form.push(("client_secret", client.secret.unwrap_or_default().to_owned()));
        }
        TokenEndpointAuth::PrivateKeyJwt => {
            let signer = client.signer.ok_or_else(|| FlowError::Required("private_key_jwt needs auth.private_key".into()))?;
            let assertion =
                signer.assertion(client.client_id, &metadata.issuer).map_err(|error| FlowError::Unavailable(error.to_string()))?;
            form.push(("client_id", client.client_id.to_owned()));
            form.push(("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_owned()));
            form.push(("client_assertion", assertion));
        }
        TokenEndpointAuth::None => form.push(("client_id", client.client_id.to_owned())),
    }
    // The serializer is not `Send`: it is gone before the request is awaited.
    let body = form.iter().fold(form_urlencoded::Serializer::new(String::new()), |mut body, (name, value)| {
        body.append_pair(name, value);
        body
    });
    let body = { body }.finish().into_bytes();
    web.post(endpoint, "application/x-www-form-urlencoded", body, authorization).await
}

/// An OAuth error answer as a [`FlowError`], with the server's error code but nothing else it
/// sent (a description could quote the request).
fn refusal(what: &str, answer: &Answer) -> FlowError {
    #[derive(Deserialize)]
    struct OAuthError {
        error: String,
    }
    let code = serde_json::from_slice::<OAuthError>(&answer.body)
        .ok()
        .map(|e| e.error)
        .filter(|e| e.len() <= 64 && e.bytes().all(|b| b.is_ascii_graphic()));
    let message = match &code {
        Some(code) => format!("{what} was refused: {code} (HTTP {})", answer.status),
        None => format!("{what} failed: HTTP {}", answer.status),
    };
    if answer.status.is_server_error() || answer.status == StatusCode::TOO_MANY_REQUESTS || answer.status == StatusCode::REQUEST_TIMEOUT {
        return FlowError::Unavailable(message);
    }
    match code {
        Some(code) => FlowError::Refused { code, message },
        None => FlowError::Required(message),
    }
}

/// `application/x-www-form-urlencoded` of one value (RFC 6749 §2.3.1 encodes the client's id
/// and secret so before Basic authentication).
fn form_encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callback_is_checked_for_state_and_issuer() {
        let discovery = Discovery {
            resource: "https://mcp.example/mcp".into(),
            metadata: serde_json::from_str(
                r#"{"issuer":"https://as","token_endpoint":"https://as/token","authorization_endpoint":"https://as/authorize",
                    "code_challenge_methods_supported":["S256"],"authorization_response_iss_parameter_supported":true}"#,
            )
            .unwrap(),
            scopes_supported: None,
        };
        let pending = authorization_url(&discovery, "client", "http://127.0.0.1:1/cb", Some("a b")).unwrap();
        assert!(pending.url.starts_with("https://as/authorize?response_type=code&client_id=client&"), "{}", pending.url);
        assert!(pending.url.contains("code_challenge_method=S256") && pending.url.contains("scope=a+b"), "{}", pending.url);
        assert!(pending.url.contains("resource=https%3A%2F%2Fmcp.example%2Fmcp"), "{}", pending.url);
        let state = pending.state.clone();
        assert_eq!(pending.code(&format!("code=abc&state={state}&iss=https%3A%2F%2Fas")).unwrap(), "abc");
        assert!(pending.code(&format!("code=abc&state={state}&iss=https%3A%2F%2Fas%2F")).is_err());
        assert!(pending.code(&format!("code=abc&state={state}")).is_err());
        assert!(pending.code("code=abc&state=other&iss=https%3A%2F%2Fas").is_err());
        assert!(pending.code(&format!("error=access_denied&state={state}")).is_err());
        let without_pkce = Discovery {
            metadata: serde_json::from_str(
                r#"{"issuer":"https://as","token_endpoint":"https://as/token","authorization_endpoint":"https://as/a"}"#,
            )
            .unwrap(),
            ..discovery
        };
        assert!(authorization_url(&without_pkce, "client", "http://127.0.0.1:1/cb", None).is_err());
    }
}
