//! MCP authorization (OAuth 2.1 with protected-resource metadata), the parts that need no I/O:
//! reading a `WWW-Authenticate` challenge, where to look for the protected resource's and the
//! authorization server's metadata (in the order the 2025-11-25 specification lists), and PKCE.
//!
//! [`discovery`] finds the authorization server, [`flow`] does the exchanges with it, [`authorizer::Authorizer`] keeps one server's token current,
//! [`tokens`] keeps what must survive a restart, [`jwt`] signs `private_key_jwt` assertions.

pub mod authorizer;
pub mod discovery;
mod exchange;
pub mod flow;
pub mod tokens;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// What a `401` or `403` asks for: the parameters of its `Bearer` challenge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// RFC 9728 `resource_metadata`: where the protected resource's metadata is.
    pub resource_metadata: Option<String>,
    /// The scopes the resource wants (space-separated).
    pub scope: Option<String>,
    /// `invalid_token`, `insufficient_scope`, …
    pub error: Option<String>,
}

/// Longest challenge read (a header an outsider controls).
const MAX_CHALLENGE_BYTES: usize = 8 << 10;

impl Challenge {
    /// The `Bearer` challenge among those of a `WWW-Authenticate` value, or `None` when there
    /// is none (or the value is absurdly long).
    pub fn parse(header: &str) -> Option<Challenge> {
        if header.len() > MAX_CHALLENGE_BYTES {
            return None;
        }
        let mut rest = header.trim_start();
        let mut challenge: Option<Challenge> = None;
        let mut in_bearer = false;
        while !rest.is_empty() {
            // A scheme name starts a challenge; an auth-param is `name = value`.
            let token_end = rest.find(|c: char| c == '=' || c == ',' || c.is_whitespace()).unwrap_or(rest.len());
            let token = &rest[..token_end];
            let after = rest[token_end..].trim_start();
            if let Some(value_part) = after.strip_prefix('=').filter(|_| !token.is_empty()) {
                let (value, remainder) = read_value(value_part.trim_start())?;
                if in_bearer && let Some(found) = challenge.as_mut() {
                    match token.to_ascii_lowercase().as_str() {
                        "resource_metadata" => found.resource_metadata = Some(value),
                        "scope" => found.scope = Some(value),
                        "error" => found.error = Some(value),
                        _ => {}
                    }
                }
                rest = remainder.trim_start().trim_start_matches(',').trim_start();
            } else if token.is_empty() {
                // A lone `=` (or `,`) names nothing: skip it, or the loop would stand still on it.
                rest = after.trim_start_matches([',', '=']).trim_start();
            } else {
                in_bearer = token.eq_ignore_ascii_case("bearer");
                if in_bearer && challenge.is_none() {
                    challenge = Some(Challenge::default());
                }
                rest = after.trim_start_matches(',').trim_start();
            }
        }
        challenge
    }
}

/// An auth-param value: a quoted string (backslash escapes) or a token; and what follows it.
fn read_value(text: &str) -> Option<(String, &str)> {
    match text.strip_prefix('"') {
        Some(quoted) => {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            while let Some((at, c)) = chars.next() {
                match c {
                    '\\' => value.push(chars.next()?.1),
                    '"' => return Some((value, &quoted[at + 1..])),
                    c => value.push(c),
                }
            }
            None
        }
        None => {
            let end = text.find(|c: char| c == ',' || c.is_whitespace()).unwrap_or(text.len());
            Some((text[..end].to_owned(), &text[end..]))
        }
    }
}

/// Where to look for the protected resource's metadata when the challenge names none (RFC 9728):
/// under the MCP endpoint's path first, then at the root.
pub fn protected_resource_urls(server_url: &str) -> Vec<String> {
    let (origin, path) = split_url(server_url);
    let mut urls = Vec::with_capacity(2);
    if !path.is_empty() {
        urls.push(format!("{origin}/.well-known/oauth-protected-resource/{path}"));
    }
    urls.push(format!("{origin}/.well-known/oauth-protected-resource"));
    urls
}

/// Where to look for an authorization server's metadata, in the specification's order: RFC 8414
/// then OpenID Connect discovery, path-inserted then path-appended for an issuer with a path.
pub fn authorization_server_urls(issuer: &str) -> Vec<String> {
    let (origin, path) = split_url(issuer);
    match path.is_empty() {
        true => vec![format!("{origin}/.well-known/oauth-authorization-server"), format!("{origin}/.well-known/openid-configuration")],
        false => vec![
            format!("{origin}/.well-known/oauth-authorization-server/{path}"),
            format!("{origin}/.well-known/openid-configuration/{path}"),
            format!("{origin}/{path}/.well-known/openid-configuration"),
        ],
    }
}

/// `(scheme://authority, path without its slashes, query and fragment)`.
pub(crate) fn split_url(url: &str) -> (&str, &str) {
    let url = url.split(['?', '#']).next().unwrap_or_default();
    let authority_start = url.find("://").map_or(0, |at| at + 3);
    match url[authority_start..].find('/') {
        Some(slash) => (&url[..authority_start + slash], url[authority_start + slash..].trim_matches('/')),
        None => (url, ""),
    }
}

/// A PKCE pair (RFC 7636, S256): the verifier toolhost keeps, the challenge it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

impl Pkce {
    /// A fresh verifier of 43 characters (256 bits from the kernel's CSPRNG), or `None` if the
    /// CSPRNG cannot be read.
    pub fn generate() -> Option<Pkce> {
        Some(Pkce::from_verifier(URL_SAFE_NO_PAD.encode(crate::secrets::random_bytes::<32>()?)))
    }

    /// The S256 challenge of `verifier`.
    pub fn from_verifier(verifier: String) -> Pkce {
        let challenge = URL_SAFE_NO_PAD.encode(sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(&verifier)));
        Pkce { verifier, challenge }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_challenge_is_read_among_others() {
        let header = r#"Basic realm="x", Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", scope="files:read files:write", error=insufficient_scope"#;
        let challenge = Challenge::parse(header).unwrap();
        assert_eq!(challenge.resource_metadata.as_deref(), Some("https://mcp.example.com/.well-known/oauth-protected-resource"));
        assert_eq!(challenge.scope.as_deref(), Some("files:read files:write"));
        assert_eq!(challenge.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(Challenge::parse("Bearer"), Some(Challenge::default()));
        assert_eq!(Challenge::parse(r#"bearer scope="a \"b\"""#).unwrap().scope.as_deref(), Some(r#"a "b""#));
        assert_eq!(Challenge::parse(r#"Basic realm="x""#), None);
        assert_eq!(Challenge::parse(r#"Bearer scope="unterminated"#), None);
        assert_eq!(Challenge::parse(&"x".repeat(MAX_CHALLENGE_BYTES + 1)), None);
        // A lone `=` once held the reader (and a runtime thread) for ever; found by the fuzz
        // target `www_authenticate_challenges_are_read_without_panicking`.
        assert_eq!(Challenge::parse("=").unwrap_or_default(), Challenge::default());
        let spaced = Challenge::parse("Bearer scope=a, =, = error=x").unwrap();
        assert_eq!((spaced.scope.as_deref(), spaced.error.as_deref()), (Some("a"), Some("x")));
    }

    #[test]
    fn metadata_is_looked_for_where_the_specification_says() {
        assert_eq!(
            protected_resource_urls("https://mcp.example.com/public/mcp?x=1"),
            [
                "https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(protected_resource_urls("http://127.0.0.1:8080"), ["http://127.0.0.1:8080/.well-known/oauth-protected-resource"]);
        assert_eq!(
            authorization_server_urls("https://auth.example.com/tenant1"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            authorization_server_urls("https://auth.example.com/"),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn the_pkce_challenge_is_the_unpadded_base64url_sha256_of_the_verifier() {
        // Computed independently: base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()), '=' stripped.
        let pkce = Pkce::from_verifier("dBjftJeZ4CVP-mB92K27uhbUJU1p1r0wW1gFWFOEjXk".to_owned());
        assert_eq!(pkce.challenge, "RCtbqyFn6Dv6GL6UC4xrWL6mHZBJowIOtGzu8O97GYg");
        let fresh = Pkce::generate().unwrap();
        assert_eq!(fresh.verifier.len(), 43);
        assert_ne!(fresh.verifier, Pkce::generate().unwrap().verifier);
    }
}
