//! `[servers.NAME.auth]`: how toolhost authorizes itself to a remote server. A static bearer
//! token, the OAuth client-credentials grant (a daemon's own identity), or the authorization
//! code grant done once by an operator (`toolhost login NAME`) and refreshed from then on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{KeyProblem, MINUTE, optional_duration};
pub use crate::oauth_core::jwt::SigningAlgorithm;
use crate::secrets::Resolved;

/// How an HTTP server's requests are authorized.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthSpec {
    /// `Authorization: Bearer TOKEN`, as configured; a refusal is `auth_failed`.
    Bearer(Resolved),
    /// OAuth 2.1 with MCP's discovery: toolhost obtains, refreshes and stores tokens.
    OAuth(Box<OAuthSpec>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct OAuthSpec {
    pub grant: Grant,
    /// A pre-registered client. Without it (authorization code only), toolhost uses
    /// `client_metadata_url` where the authorization server accepts client ID metadata
    /// documents, or else registers itself dynamically (and keeps the registration).
    pub client_id: Option<String>,
    pub client_secret: Option<Resolved>,
    /// PEM PKCS#8 private key for `private_key_jwt`.
    pub private_key: Option<Resolved>,
    pub signing_algorithm: SigningAlgorithm,
    /// How the token endpoint is authenticated; `None`: as registered, else the best method the
    /// authorization server lists for the credentials at hand.
    pub token_endpoint_auth: Option<TokenEndpointAuth>,
    /// An HTTPS URL whose document describes toolhost as a client (SEP-991).
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for instead of what the server's challenge or metadata suggest.
    pub scopes: Option<String>,
    /// Where the authorization server sends the operator's browser back to (`toolhost login`).
    pub redirect_uri: String,
    /// Refresh at most this long before a token expires (a jittered share of its lifetime,
    /// 10–20 %, when that is shorter).
    pub refresh_before: Duration,
    /// Where the refresh token and the client registration are kept (0600).
    pub token_file: PathBuf,
    /// The authorization server credentials may go to. Without it, the first one seen (at login
    /// or the first token request) is pinned in the token file; a pre-shared credential
    /// (`client_secret`, `private_key`) needs it, unless `trust_first_issuer` says otherwise.
    pub issuer: Option<String>,
    /// The operator accepts that a pre-shared credential goes to the first authorization server
    /// the MCP server names (trust on first use), which `check-config` warns about.
    pub trust_first_issuer: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    ClientCredentials,
    AuthorizationCode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenEndpointAuth {
    ClientSecretBasic,
    ClientSecretPost,
    PrivateKeyJwt,
    None,
}

impl TokenEndpointAuth {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenEndpointAuth::ClientSecretBasic => "client_secret_basic",
            TokenEndpointAuth::ClientSecretPost => "client_secret_post",
            TokenEndpointAuth::PrivateKeyJwt => "private_key_jwt",
            TokenEndpointAuth::None => "none",
        }
    }

    pub fn parse(text: &str) -> Option<TokenEndpointAuth> {
        [
            TokenEndpointAuth::ClientSecretBasic,
            TokenEndpointAuth::ClientSecretPost,
            TokenEndpointAuth::PrivateKeyJwt,
            TokenEndpointAuth::None,
        ]
        .into_iter()
        .find(|method| method.as_str() == text)
    }
}

/// The default loopback redirect of `toolhost login` (RFC 8252 §7.3).
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:33418/callback";

/// The loopback redirect URIs that name no port (`http://127.0.0.1/callback`): RFC 8252 §7.3's
/// variable port, which each login picks (the kernel gives `toolhost login` a free one) and an
/// authorization server must accept.
pub fn has_variable_port(redirect_uri: &str) -> bool {
    ["http://127.0.0.1/", "http://[::1]/"].iter().any(|prefix| redirect_uri.starts_with(prefix))
}

/// `redirect_uri` with `port` in it, when it names no port of its own; else as it is.
pub fn with_port(redirect_uri: &str, port: u16) -> String {
    match redirect_uri.strip_prefix("http://").and_then(|rest| rest.split_once('/')) {
        Some((host, path)) if has_variable_port(redirect_uri) => format!("http://{host}:{port}/{path}"),
        _ => redirect_uri.to_owned(),
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAuth {
    grant: Option<String>,
    token: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    private_key: Option<String>,
    signing_algorithm: Option<String>,
    token_endpoint_auth: Option<String>,
    client_metadata_url: Option<String>,
    scopes: Option<Vec<String>>,
    redirect_uri: Option<String>,
    refresh_before: Option<String>,
    token_file: Option<String>,
    issuer: Option<String>,
    trust_first_issuer: Option<bool>,
}

/// An `auth` table and what its conversion needs besides: the server's URL, the configuration
/// file's directory (a relative `token_file`), the state directory (the default token file) and
/// the server's name (which names that file).
pub(crate) struct AuthEntry<'a> {
    pub(crate) raw: RawAuth,
    pub(crate) url: &'a str,
    pub(crate) base: &'a Path,
    pub(crate) state_dir: &'a Path,
    pub(crate) server: &'a str,
}

fn at<E: ToString>(key: &'static str) -> impl Fn(E) -> KeyProblem {
    move |problem| (format!("auth.{key}"), problem.to_string())
}

/// Keys are named `auth.KEY` (the server's `url` when OAuth meets plain HTTP).
impl TryFrom<AuthEntry<'_>> for AuthSpec {
    type Error = KeyProblem;

    fn try_from(AuthEntry { mut raw, url, base, state_dir, server }: AuthEntry<'_>) -> Result<AuthSpec, KeyProblem> {
        if let Some(token) = raw.token.take() {
            return bearer(&raw, &token);
        }
        if !crate::oauth_core::urls::is_secure(url) {
            return Err(("url".into(), "OAuth tokens are sent over HTTPS only (or to a loopback address): use an https:// URL".into()));
        }
        let grant = match raw.grant.as_deref() {
            Some("bearer") => return Err(at("token")("missing: grant = \"bearer\" needs a token")),
            None => return Err(at("grant")("give grant = \"client_credentials\" or \"authorization_code\", or a bearer token")),
            Some("client_credentials") => Grant::ClientCredentials,
            Some("authorization_code") => Grant::AuthorizationCode,
            Some(other) => {
                return Err(at("grant")(format!("{other:?} is not one of \"client_credentials\", \"authorization_code\", \"bearer\"")));
            }
        };
        let client = Client::try_from(&mut raw)?;
        if grant == Grant::ClientCredentials && (raw.client_id.is_none() || (client.secret.is_none() && client.private_key.is_none())) {
            return Err(at("client_id")("the client credentials grant needs client_id and client_secret or private_key"));
        }
        if let Some(client_id) = &raw.client_id
            && (client_id.is_empty() || client_id.len() > 1024)
        {
            return Err(at("client_id")("must be 1 to 1024 characters"));
        }
        if let Some(url) = &raw.client_metadata_url
            && !url.starts_with("https://")
        {
            return Err(at("client_metadata_url")(format!("{url:?} is not an https:// URL (a client ID metadata document must be)")));
        }
        let scopes = match raw.scopes.take() {
            Some(scopes) if scopes.iter().any(|s| s.is_empty() || s.contains(' ') || !s.is_ascii()) => {
                return Err(at("scopes")("each scope is a non-empty ASCII word without spaces"));
            }
            Some(scopes) => Some(scopes.join(" ")),
            None => None,
        };
        let redirect_uri = redirect_uri(raw.redirect_uri.take())?;
        let refresh_before =
            optional_duration(raw.refresh_before.as_deref(), Duration::from_secs(60), 60 * MINUTE).map_err(at("refresh_before"))?;
        let token_file = match raw.token_file.take() {
            Some(path) if path.trim().is_empty() => return Err(at("token_file")("must not be empty")),
            Some(path) => base.join(path),
            None => state_dir.join(format!("{server}.oauth.json")),
        };
        let trust_first_issuer = issuer(&raw, &client)?;
        Ok(AuthSpec::OAuth(Box::new(OAuthSpec {
            grant,
            client_id: raw.client_id,
            client_secret: client.secret,
            private_key: client.private_key,
            signing_algorithm: client.signing_algorithm,
            token_endpoint_auth: client.token_endpoint_auth,
            client_metadata_url: raw.client_metadata_url,
            scopes,
            redirect_uri,
            refresh_before,
            token_file,
            issuer: raw.issuer.map(|issuer| issuer.trim_end_matches('/').to_owned()),
            trust_first_issuer,
        })))
    }
}

/// `token`: a static bearer token, which takes no client settings.
fn bearer(raw: &RawAuth, token: &str) -> Result<AuthSpec, KeyProblem> {
    if !matches!(raw.grant.as_deref(), None | Some("bearer")) {
        return Err(at("token")("only grant = \"bearer\" takes a token"));
    }
    let others = raw.client_id.is_some() || raw.client_secret.is_some() || raw.private_key.is_some() || raw.scopes.is_some();
    if others {
        return Err(at("token")("a bearer token takes no client settings; use grant = \"client_credentials\""));
    }
    let token = crate::secrets::resolve(token).map_err(at("token"))?;
    check_header_value(token.expose()).map_err(at("token"))?;
    Ok(AuthSpec::Bearer(token.marked_secret()))
}

/// How toolhost proves itself a pre-registered client: its secret or key, and how the token
/// endpoint is authenticated.
struct Client {
    secret: Option<Resolved>,
    private_key: Option<Resolved>,
    signing_algorithm: SigningAlgorithm,
    token_endpoint_auth: Option<TokenEndpointAuth>,
}

/// `client_secret`, `private_key`, `signing_algorithm`, `token_endpoint_auth`, and that they
/// agree (with each other and with `client_id`).
impl TryFrom<&mut RawAuth> for Client {
    type Error = KeyProblem;

    fn try_from(raw: &mut RawAuth) -> Result<Client, KeyProblem> {
        let resolve = |value: Option<String>, key: &'static str| value.map(|v| crate::secrets::resolve(&v).map_err(at(key))).transpose();
        let secret = resolve(raw.client_secret.take(), "client_secret")?.map(Resolved::marked_secret);
        let private_key = resolve(raw.private_key.take(), "private_key")?.map(Resolved::marked_secret);
        let signing_algorithm = match raw.signing_algorithm.as_deref() {
            None | Some("ES256") => SigningAlgorithm::Es256,
            Some("RS256") => SigningAlgorithm::Rs256,
            Some(other) => return Err(at("signing_algorithm")(format!("{other:?} is not \"ES256\" or \"RS256\""))),
        };
        if let Some(key) = &private_key {
            crate::oauth_core::jwt::Signer::new(key.expose(), signing_algorithm).map_err(at("private_key"))?;
        }
        let token_endpoint_auth = raw
            .token_endpoint_auth
            .as_deref()
            .map(|method| {
                TokenEndpointAuth::parse(method).ok_or_else(|| {
                    at("token_endpoint_auth")(format!(
                        "{method:?} is not one of \"client_secret_basic\", \"client_secret_post\", \"private_key_jwt\", \"none\""
                    ))
                })
            })
            .transpose()?;
        match token_endpoint_auth {
            Some(TokenEndpointAuth::ClientSecretBasic | TokenEndpointAuth::ClientSecretPost) if secret.is_none() => {
                return Err(at("client_secret")("missing: the token endpoint authentication needs it"));
            }
            Some(TokenEndpointAuth::PrivateKeyJwt) if private_key.is_none() => {
                return Err(at("private_key")("missing: private_key_jwt needs it"));
            }
            _ => {}
        }
        if secret.is_some() && private_key.is_some() {
            return Err(at("private_key")("give client_secret or private_key, not both"));
        }
        if (secret.is_some() || private_key.is_some()) && raw.client_id.is_none() {
            return Err(at("client_id")("missing: a client secret or key belongs to a pre-registered client"));
        }
        Ok(Client { secret, private_key, signing_algorithm, token_endpoint_auth })
    }
}

/// `redirect_uri`: a loopback one (with a port or without), or HTTPS.
fn redirect_uri(raw: Option<String>) -> Result<String, KeyProblem> {
    let redirect_uri = raw.unwrap_or_else(|| DEFAULT_REDIRECT_URI.to_owned());
    if !(redirect_uri.starts_with("http://127.0.0.1:")
        || redirect_uri.starts_with("http://[::1]:")
        || has_variable_port(&redirect_uri)
        || redirect_uri.starts_with("https://"))
    {
        return Err(at("redirect_uri")(format!(
            "{redirect_uri:?}: use a loopback http://127.0.0.1:PORT/... (or no port: each login picks one), or an https:// URL"
        )));
    }
    Ok(redirect_uri)
}

/// `issuer` and `trust_first_issuer`: where a pre-shared credential may go.
fn issuer(raw: &RawAuth, client: &Client) -> Result<bool, KeyProblem> {
    if let Some(issuer) = &raw.issuer
        && !crate::oauth_core::urls::is_secure(issuer)
    {
        return Err(at("issuer")(format!("{issuer:?} is not an https:// URL (or a loopback http:// one)")));
    }
    // The MCP server names its authorization server, and a hostile one names its own: a secret
    // the operator holds goes only where the operator says, from the first request on.
    let trust_first_issuer = raw.trust_first_issuer.unwrap_or(false);
    if (client.secret.is_some() || client.private_key.is_some()) && raw.issuer.is_none() && !trust_first_issuer {
        return Err(at("issuer")(
            "missing: a client_secret or private_key is sent only to the authorization server named here, never to the one the \
             MCP server names at first sight (a hostile server names its own); give issuer = \"https://…\" (or, accepting \
             that risk, trust_first_issuer = true)",
        ));
    }
    Ok(trust_first_issuer)
}

fn check_header_value(token: &str) -> Result<(), super::ValueError> {
    match !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic()) {
        true => Ok(()),
        false => Err(super::ValueError::NotAToken),
    }
}
