//! `toolhost login SERVER`: the authorization code grant, done once by an operator. It prints
//! the authorization URL and waits for the browser on the loopback redirect (or for the URL the
//! browser ended on, pasted, when the browser runs on another machine). With the daemon running,
//! the daemon does the rest (`BeginLogin`, `CompleteLogin`: it holds the credentials and owns
//! the token file); without it, this process does, and the daemon finds the token file when it
//! starts. The daemon refreshes the tokens from then on. `toolhost logout` is here too.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::auth::{AuthSpec, Grant};
use crate::config::{Config, Transport};
use crate::upstream::oauth::authorizer::{AuthError, Authorizer, Interaction, Visit};

/// How long the operator has to approve in the browser.
const APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest request head read from the browser.
const MAX_REQUEST_BYTES: usize = 16 << 10;

/// Why a login or logout did not happen, for the operator.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("invalid configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("there is no server {server:?} in {}", file.display())]
    NoServer { server: String, file: std::path::PathBuf },
    #[error("{0} is a stdio server: it has no login")]
    Stdio(String),
    #[error("{0} uses the client credentials grant: the daemon authorizes itself, there is no login")]
    ClientCredentials(String),
    #[error("{0} has no `auth = {{ grant = \"authorization_code\" }}` in its configuration")]
    NoAuthorizationCode(String),
    #[error("{0} has no OAuth configuration")]
    NoOAuth(String),
    #[error(transparent)]
    Authorizer(#[from] crate::upstream::UpstreamError),
    #[error("the login failed: {0}")]
    Failed(AuthError),
    #[error(transparent)]
    Logout(AuthError),
    #[error("the login asked for a second authorization")]
    SecondAuthorization,
    #[error("the authorization URL has no redirect_uri")]
    NoRedirectUri,
    #[error("the redirect URI {0} is not a loopback http:// address: use --paste, and paste the URL the browser ends on")]
    NotLoopback(String),
    #[error("cannot listen on {authority} for the redirect: {source}")]
    Listen { authority: String, source: std::io::Error },
    #[error("the redirect listener failed: {0}")]
    Accept(std::io::Error),
    #[error("no redirect within {:?}", APPROVAL_TIMEOUT)]
    NoRedirect,
    #[error("{0}")]
    Stdin(tokio::task::JoinError),
    #[error("cannot read the pasted URL: {0}")]
    ReadPaste(std::io::Error),
    #[error("the pasted text is not the redirected URL (it has no query)")]
    NotRedirected,
}

/// Runs the login. `paste`: read the redirected URL from stdin instead of listening.
///
/// # Errors
/// What went wrong, for the operator.
pub async fn run(config_path: &Path, server: &str, scope: Option<String>, paste: bool) -> Result<String, LoginError> {
    let redirect = Redirect::prepare(paste).await;
    let port = redirect.port();
    let redirect = Arc::new(std::sync::Mutex::new(Some(redirect)));
    let visit: Visit = Box::new(move |url: String| {
        let redirect = redirect.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        Box::pin(async move {
            match redirect {
                Some(redirect) => redirect.wait(&url).await.map_err(Into::into),
                None => Err(LoginError::SecondAuthorization.into()),
            }
        })
    });
    let authorizer = authorizer(config_path, server, Interaction::Operator(visit))?;
    authorizer.login(scope, port).await.map_err(LoginError::Failed)?;
    Ok(format!("logged in: {server}'s tokens are in {}", authorizer.token_file().display()))
}

/// `toolhost logout SERVER`: revokes the server's tokens where the authorization server offers
/// revocation, and deletes its token file.
///
/// # Errors
/// What went wrong, for the operator.
pub async fn logout(config_path: &Path, server: &str) -> Result<String, LoginError> {
    let authorizer = authorizer(config_path, server, Interaction::None)?;
    let outcome = authorizer.logout().await.map_err(LoginError::Logout)?;
    Ok(format!("logged out of {server}: {outcome}; {} deleted", authorizer.token_file().display()))
}

/// The authorizer of a server configured for the authorization code grant.
fn authorizer(config_path: &Path, server: &str, interaction: Interaction) -> Result<Arc<Authorizer>, LoginError> {
    let config = Config::load(config_path)?;
    let spec =
        config.servers.get(server).ok_or_else(|| LoginError::NoServer { server: server.to_owned(), file: config_path.to_path_buf() })?;
    let Transport::Http(http_spec) = &spec.transport else { return Err(LoginError::Stdio(server.to_owned())) };
    match &http_spec.auth {
        Some(AuthSpec::OAuth(oauth)) if oauth.grant == Grant::AuthorizationCode => {}
        Some(AuthSpec::OAuth(_)) => return Err(LoginError::ClientCredentials(server.to_owned())),
        _ => return Err(LoginError::NoAuthorizationCode(server.to_owned())),
    }
    crate::upstream::authorizer_for(&server.into(), spec, interaction, None)?.ok_or_else(|| LoginError::NoOAuth(server.to_owned()))
}

/// The operator's side of an authorization: where the browser's redirect arrives. Unless the
/// operator pastes the URL the browser ended on, a loopback port the kernel gives is bound
/// before the login begins, so that a redirect URI naming no port (RFC 8252 §7.3) is sent
/// there; a redirect URI with its own port is listened on as it says.
pub struct Redirect {
    listener: Option<tokio::net::TcpListener>,
    paste: bool,
}

impl Redirect {
    pub async fn prepare(paste: bool) -> Redirect {
        let listener = match paste {
            true => None,
            false => tokio::net::TcpListener::bind("127.0.0.1:0").await.ok(),
        };
        Redirect { listener, paste }
    }

    /// The port bound for a redirect URI that names none.
    pub fn port(&self) -> Option<u16> {
        self.listener.as_ref().and_then(|listener| listener.local_addr().ok()).map(|addr| addr.port())
    }

    /// Prints the URL, then waits for the browser's redirect on the loopback address the URL
    /// names, or (`paste`) reads the URL the browser ended on. Returns the redirect's query.
    ///
    /// # Errors
    /// The listener cannot be set up, the operator gave up, or the pasted text is not a redirect.
    pub async fn wait(self, url: &str) -> Result<String, LoginError> {
        match self.paste {
            true => paste_redirect(url).await,
            false => loopback_redirect(url, self.listener).await,
        }
    }
}

/// Prints the URL and waits for the browser's redirect on the loopback address: on `bound` when
/// the redirect names its port, else on the address the redirect names.
async fn loopback_redirect(url: &str, bound: Option<tokio::net::TcpListener>) -> Result<String, LoginError> {
    let redirect_uri = redirect_of(url)?;
    let rest = redirect_uri.strip_prefix("http://").ok_or_else(|| LoginError::NotLoopback(redirect_uri.clone()))?;
    let (authority, path) = rest.split_once('/').map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
    let ours = bound.filter(|listener| listener.local_addr().is_ok_and(|addr| addr.to_string() == authority));
    let listener = match ours {
        Some(listener) => listener,
        None => tokio::net::TcpListener::bind(authority)
            .await
            .map_err(|source| LoginError::Listen { authority: authority.to_owned(), source })?,
    };
    announce(&format!("Open this URL in a browser and approve:\n\n  {url}\n\nWaiting for the redirect to {redirect_uri} ..."));
    tokio::time::timeout(APPROVAL_TIMEOUT, async {
        loop {
            let (mut stream, _) = listener.accept().await.map_err(LoginError::Accept)?;
            let Some(target) = read_request_target(&mut stream).await else { continue };
            let (target_path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
            if target_path != path {
                let _ = stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
                continue;
            }
            let page = "toolhost: authorization received; you may close this window.\n";
            let answer =
                format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}", page.len());
            let _ = stream.write_all(answer.as_bytes()).await;
            return Ok(query.to_owned());
        }
    })
    .await
    .map_err(|_| LoginError::NoRedirect)?
}

/// The request target of a `GET` (bounded; anything else is ignored).
async fn read_request_target(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await.ok()?.ok()?;
        if read == 0 || head.len() + read > MAX_REQUEST_BYTES {
            return None;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let line = std::str::from_utf8(&head).ok()?.lines().next()?.to_owned();
    let mut parts = line.split(' ');
    (parts.next()? == "GET").then_some(())?;
    parts.next().map(str::to_owned)
}

/// Prints the URL and reads the URL the browser ended on from stdin.
async fn paste_redirect(url: &str) -> Result<String, LoginError> {
    announce(&format!(
        "Open this URL in a browser and approve:\n\n  {url}\n\nThe browser then fails to load a 127.0.0.1 page: paste its whole URL here and press Enter."
    ));
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(LoginError::Stdin)?
    .map_err(LoginError::ReadPaste)?;
    let line = line.trim();
    line.split_once('?').map(|(_, query)| query.to_owned()).ok_or(LoginError::NotRedirected)
}

/// The `redirect_uri` an authorization URL carries.
fn redirect_of(url: &str) -> Result<String, LoginError> {
    let query = url.split_once('?').map(|(_, query)| query).unwrap_or_default();
    form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| name == "redirect_uri")
        .map(|(_, value)| value.into_owned())
        .ok_or(LoginError::NoRedirectUri)
}

fn announce(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}
