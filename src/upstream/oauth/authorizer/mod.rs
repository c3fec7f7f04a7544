//! One server's OAuth authorization, shared by all its sessions: the current access token, its
//! refresh before expiry, and what a `401` or a `403 insufficient_scope` calls for.
//!
//! The call path reads the current token from an `ArcSwap` (no lock, no allocation). Past the
//! token's refresh point (a jittered 10–20 % of its lifetime before expiry, at most
//! `refresh_before`), the first request to see it refreshes while the others keep using the
//! still-valid token; past its expiry they all wait on the one refresh. Everything that talks
//! to the authorization server runs under one async mutex, so a server never has two token
//! requests in flight.
//!
//! Without a person at hand (the daemon), an authorization that needs one (no refresh token, a
//! revoked one, more scopes than were granted) is [`AuthError::Required`]: the server goes
//! `auth_required` and waits for `toolhost login`.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use http::{HeaderValue, StatusCode};
use tokio::time::Instant;
use tracing::Instrument;

use super::Challenge;
use super::discovery::{self, Discovery};
use super::flow::{self, ClientAuth, FlowError, Granted, Web};
use super::tokens::{self, Stored};
use crate::config::auth::{Grant, OAuthSpec, TokenEndpointAuth};
use crate::oauth_core::jwt::Signer;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::throttle::Throttle;

mod login;
pub use login::{LOGIN_TIMEOUT, LoginStarted};

/// How often an idle token without an expiry is looked at, and the longest wait between
/// attempts at a due refresh that failed.
const KEEP_FRESH_IDLE: Duration = Duration::from_secs(60);
const KEEP_FRESH_RETRY_MIN: Duration = Duration::from_secs(1);

/// Why no token can be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// An operator must act (`toolhost login`, or correct the client's credentials).
    #[error("{0}")]
    Required(String),
    /// The authorization server failed; a later attempt may succeed.
    #[error("{0}")]
    Unavailable(String),
    /// The server refused for a reason no token fixes (a `403` that is not about scopes).
    #[error("the server refused the request (HTTP {0})")]
    Refused(u16),
}

impl From<FlowError> for AuthError {
    fn from(error: FlowError) -> Self {
        match error {
            FlowError::Required(message) | FlowError::Refused { message, .. } => AuthError::Required(message),
            FlowError::Unavailable(message) => AuthError::Unavailable(message),
        }
    }
}

/// Opens the authorization URL and returns the query of the redirect back to toolhost, or why
/// there is none (the caller's own error: the operator's command line is above this layer).
pub type Visit = Box<dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<String, VisitError>> + Send>> + Send + Sync>;
/// Why a [`Visit`] brought no redirect back.
pub type VisitError = Box<dyn std::error::Error + Send + Sync>;

/// Who can approve an authorization request.
pub enum Interaction {
    /// Nobody (the daemon).
    None,
    /// The authorization server approves at once: follow its redirect (the conformance suite's).
    FollowRedirect,
    /// An operator, through `toolhost login`.
    Operator(Visit),
}

/// The token requests go out with this, and the rest of the request.
struct Current {
    header: HeaderValue,
    refresh_at: Option<Instant>,
    use_until: Option<Instant>,
}

impl Current {
    fn fresh(&self, now: Instant) -> bool {
        self.refresh_at.is_none_or(|at| now < at)
    }

    fn usable(&self, now: Instant) -> bool {
        self.use_until.is_none_or(|at| now < at)
    }
}

/// What the mutex guards: everything that changes when toolhost talks to the authorization server.
#[derive(Default)]
struct Inner {
    stored: Option<Stored>,
    /// The token file's modification time when last read: a `toolhost login` since is picked up.
    stored_mtime: Option<SystemTime>,
    discovery: Option<Discovery>,
    /// The access token last installed: retired from the redaction list when replaced, so that
    /// months of refreshes do not grow it.
    issued_token: Option<String>,
    /// Why the token file could not be used, for the operator.
    file_problem: Option<String>,
    /// The scopes asked for; step-ups add to them.
    scope: Option<String>,
}

pub struct Authorizer {
    server: Arc<str>,
    server_url: String,
    spec: OAuthSpec,
    signer: Option<Signer>,
    web: Web,
    interaction: Interaction,
    current: ArcSwapOption<Current>,
    inner: tokio::sync::Mutex<Inner>,
    warnings: Throttle,
    metrics: Option<Metrics>,
    /// An operator's login through the daemon, between its two RPCs (one at a time).
    pending_login: std::sync::Mutex<Option<login::PendingLogin>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").field("server", &self.server).field("grant", &self.spec.grant).finish_non_exhaustive()
    }
}

impl Authorizer {
    /// # Errors
    /// The configured private key cannot be used.
    pub fn new(
        server: Arc<str>,
        server_url: &str,
        spec: &OAuthSpec,
        web: Web,
        interaction: Interaction,
        metrics: Option<Metrics>,
    ) -> Result<Authorizer, crate::oauth_core::jwt::SignerError> {
        let signer = spec.private_key.as_ref().map(|key| Signer::new(key.expose(), spec.signing_algorithm)).transpose()?;
        Ok(Authorizer {
            server,
            server_url: server_url.to_owned(),
            spec: spec.clone(),
            signer,
            web,
            interaction,
            current: ArcSwapOption::empty(),
            inner: tokio::sync::Mutex::new(Inner::default()),
            warnings: Throttle::new(1),
            metrics,
            pending_login: std::sync::Mutex::new(None),
        })
    }

    pub fn grant(&self) -> Grant {
        self.spec.grant
    }

    pub fn token_file(&self) -> &PathBuf {
        &self.spec.token_file
    }

    /// The current `Authorization` value as it is, without refreshing (a session's last DELETE).
    pub fn peek(&self) -> Option<HeaderValue> {
        self.current.load().as_ref().map(|current| current.header.clone())
    }

    /// The `Authorization` value for the next request, refreshed first when it is due; `None`
    /// when toolhost has no token yet (the server's `401` will say where to get one).
    ///
    /// # Errors
    /// The token expired and cannot be renewed.
    pub async fn bearer(&self) -> Result<Option<HeaderValue>, AuthError> {
        let now = Instant::now();
        let current = self.current.load_full();
        if let Some(current) = &current
            && current.fresh(now)
        {
            return Ok(Some(current.header.clone()));
        }
        let mut inner = match &current {
            // Due but still valid: one request refreshes, the others go on with it.
            Some(current) if current.usable(now) => match self.inner.try_lock() {
                Ok(inner) => inner,
                Err(_) => return Ok(Some(current.header.clone())),
            },
            _ => self.inner.lock().await,
        };
        self.load(&mut inner);
        let now = Instant::now();
        let current = self.current.load_full();
        if let Some(current) = &current
            && current.fresh(now)
        {
            return Ok(Some(current.header.clone()));
        }
        let renewable = match self.spec.grant {
            Grant::ClientCredentials => current.is_some(),
            Grant::AuthorizationCode => inner.stored.as_ref().is_some_and(|s| s.refresh_token.is_some()),
        };
        if !renewable {
            return Ok(current.filter(|c| c.usable(now)).map(|c| c.header.clone()));
        }
        match self.renew(&mut inner, None).await {
            Ok(()) => Ok(self.current.load().as_ref().map(|c| c.header.clone())),
            Err(AuthError::Unavailable(message)) if current.as_ref().is_some_and(|c| c.usable(Instant::now())) => {
                self.warn(&message);
                Ok(current.map(|c| c.header.clone()))
            }
            Err(error) => Err(error),
        }
    }

    /// Refreshes the token when it is due even if no request asks for it, for as long as the
    /// session lasts (its worker drops this future with the session). Returns only when an
    /// operator must act.
    pub async fn keep_fresh(&self) -> AuthError {
        let mut retry = KEEP_FRESH_RETRY_MIN;
        loop {
            let now = Instant::now();
            let wake = match self.current.load().as_ref().and_then(|current| current.refresh_at) {
                Some(at) if at > now => at,
                // Due, and the last attempt did not renew it (the authorization server failed,
                // or a request was at it): not a tight loop.
                Some(_) => crate::deadline::after(retry),
                // No expiry known, or no token yet: look now and then (a login may have come).
                None => crate::deadline::after(KEEP_FRESH_IDLE),
            };
            tokio::time::sleep_until(wake).await;
            match self.bearer().await {
                Ok(_) => retry = KEEP_FRESH_RETRY_MIN,
                Err(AuthError::Required(message)) => return AuthError::Required(message),
                Err(error) => {
                    self.warn(&error.to_string());
                    retry = (retry * 2).min(KEEP_FRESH_IDLE);
                }
            }
        }
    }

    /// The server answered `status` (401 or 403) to a request sent with `sent`: get what it
    /// asks for. `Ok`: send the request again.
    ///
    /// # Errors
    /// What stands in the way; [`AuthError::Required`] names what the operator must do.
    pub async fn challenged(&self, status: StatusCode, challenge: Option<Challenge>, sent: Option<&HeaderValue>) -> Result<(), AuthError> {
        let mut inner = self.inner.lock().await;
        self.load(&mut inner);
        let challenge = challenge.as_ref();
        if status == StatusCode::UNAUTHORIZED {
            // Another request already replaced the token this one carried.
            if let Some(current) = self.current.load_full()
                && Some(&current.header) != sent
                && current.usable(Instant::now())
            {
                return Ok(());
            }
            self.current.store(None);
            // The resource may have moved to another authorization server (SEP-2352): a 401 is
            // rare enough (tokens are refreshed before they expire) to look again each time.
            inner.discovery = None;
            return match self.renew(&mut inner, challenge).await {
                Err(AuthError::Required(_)) if self.can_ask() => self.authorize(&mut inner, challenge, None, None).await,
                other => other,
            };
        }
        if status == StatusCode::FORBIDDEN && challenge.is_some_and(|c| c.error.as_deref() == Some("insufficient_scope")) {
            let wanted = discovery::scope_union(inner.scope.as_deref(), challenge.and_then(|c| c.scope.as_deref()));
            inner.scope.clone_from(&wanted);
            return match self.spec.grant {
                Grant::ClientCredentials => {
                    let discovery = self.discovery(&mut inner, challenge, false).await?;
                    self.client_credentials(&mut inner, &discovery, wanted).await
                }
                Grant::AuthorizationCode if self.can_ask() => self.authorize(&mut inner, challenge, wanted, None).await,
                Grant::AuthorizationCode => {
                    // Remember what to ask for, so that `toolhost login` does.
                    if let Some(stored) = inner.stored.as_mut() {
                        stored.scope.clone_from(&wanted);
                        self.save(&mut inner).await;
                    }
                    Err(AuthError::Required(format!(
                        "the server needs the scopes \"{}\", more than were granted: run `toolhost login {}`",
                        wanted.unwrap_or_default(),
                        self.server
                    )))
                }
            };
        }
        Err(AuthError::Refused(status.as_u16()))
    }

    fn can_ask(&self) -> bool {
        !matches!(self.interaction, Interaction::None)
    }

    /// Reads the token file when it changed since the last read (first use, `toolhost login`).
    fn load(&self, inner: &mut Inner) {
        if self.spec.grant != Grant::AuthorizationCode {
            // The client credentials grant keeps only its pinned issuer in the file, read once.
            if inner.stored.is_none() {
                let pinned = tokens::load(&self.spec.token_file).ok().flatten().filter(|stored| stored.server_url == self.server_url);
                inner.stored = Some(Stored { issuer: pinned.and_then(|stored| stored.issuer), ..Stored::new(&self.server_url) });
            }
            return;
        }
        let mtime = std::fs::metadata(&self.spec.token_file).and_then(|m| m.modified()).ok();
        if inner.stored.is_some() && mtime == inner.stored_mtime {
            return;
        }
        inner.stored_mtime = mtime;
        inner.file_problem = None;
        // The file changed under the daemon (a login, a logout): it holds the truth now.
        self.current.store(None);
        match tokens::load(&self.spec.token_file) {
            Ok(Some(stored)) if stored.server_url == self.server_url => {
                if inner.scope.is_none() {
                    inner.scope.clone_from(&stored.scope);
                }
                if let (Some(token), Some(expires)) = (&stored.access_token, stored.expires_at_unix_ms) {
                    let remaining = Duration::from_millis(expires.saturating_sub(unix_ms()));
                    if !remaining.is_zero() {
                        self.install(token, Instant::now(), Some(remaining));
                        inner.issued_token = Some(token.clone());
                    }
                }
                inner.stored = Some(stored);
            }
            Ok(Some(_)) => {
                inner.file_problem = Some(format!("the token file {} is for another URL", self.spec.token_file.display()));
                inner.stored = Some(Stored::new(&self.server_url));
            }
            Ok(None) => inner.stored = Some(Stored::new(&self.server_url)),
            Err(message) => {
                inner.file_problem = Some(message.to_string());
                inner.stored = Some(Stored::new(&self.server_url));
            }
        }
    }

    /// A token without a person: a refresh, or the client-credentials grant.
    async fn renew(&self, inner: &mut Inner, challenge: Option<&Challenge>) -> Result<(), AuthError> {
        let discovery = self.discovery(inner, challenge, false).await?;
        match self.spec.grant {
            Grant::ClientCredentials => {
                let scope = inner.scope.clone().or_else(|| discovery::select_scope(self.spec.scopes.as_deref(), challenge, &discovery));
                self.client_credentials(inner, &discovery, scope).await
            }
            Grant::AuthorizationCode => {
                let Some(refresh_token) = inner.stored.as_ref().and_then(|s| s.refresh_token.clone()) else {
                    let why = inner.file_problem.clone().unwrap_or_else(|| "toolhost has no authorization for it yet".to_owned());
                    return Err(self.login_required(&why));
                };
                let client = self.client(inner, &discovery, false).await?;
                let form = vec![
                    ("grant_type", "refresh_token".to_owned()),
                    ("refresh_token", refresh_token),
                    ("resource", discovery.resource.clone()),
                ];
                let started = Instant::now();
                match self.token(&discovery, form, &client).await {
                    Ok(granted) => {
                        self.accept(inner, granted, started, None).await;
                        Ok(())
                    }
                    Err(refused @ (FlowError::Required(_) | FlowError::Refused { .. })) => {
                        // Revoked or expired: forget it, so that only a new login is tried; and a
                        // registration the server no longer knows, so that the login registers anew.
                        let client_unknown = matches!(&refused, FlowError::Refused { code, .. } if code == "invalid_client");
                        if let Some(stored) = inner.stored.as_mut() {
                            stored.refresh_token = None;
                            stored.access_token = None;
                            if client_unknown {
                                stored.registered_client = None;
                            }
                            self.save(inner).await;
                        }
                        Err(self.login_required(&format!("its refresh token no longer works ({refused})")))
                    }
                    Err(error) => Err(error.into()),
                }
            }
        }
    }

    async fn client_credentials(&self, inner: &mut Inner, discovery: &Discovery, scope: Option<String>) -> Result<(), AuthError> {
        let client = self.client(inner, discovery, false).await?;
        let mut form = vec![("grant_type", "client_credentials".to_owned()), ("resource", discovery.resource.clone())];
        if let Some(scope) = &scope {
            form.push(("scope", scope.clone()));
        }
        let started = Instant::now();
        let granted = self.token(discovery, form, &client).await?;
        self.accept(inner, granted, started, scope).await;
        Ok(())
    }

    /// One token request, in a span of its own and counted by outcome.
    async fn token(&self, discovery: &Discovery, form: Vec<(&'static str, String)>, client: &Client) -> Result<Granted, FlowError> {
        let grant = match form.first().map(|(_, value)| value.as_str()) {
            Some("refresh_token") => "refresh_token",
            Some("client_credentials") => "client_credentials",
            _ => "authorization_code",
        };
        let span = tracing::info_span!("oauth token request", toolhost.server = %self.server, oauth.grant_type = grant);
        let result = flow::token(&self.web, &discovery.metadata, form, &client.auth(self.signer.as_ref())).instrument(span).await;
        if let Some(metrics) = &self.metrics {
            let outcome = match &result {
                Ok(_) => "ok",
                Err(FlowError::Required(_) | FlowError::Refused { .. }) => "required",
                Err(FlowError::Unavailable(_)) => "unavailable",
            };
            metrics.record_token_request(&self.server, grant, outcome);
        }
        result
    }

    /// The discovery done earlier, or a new one (the first time, and after every `401`), if its
    /// authorization server is the pinned one ([`Authorizer::check_issuer`]); the first one
    /// seen is pinned. `operator`: an operator is logging in, and may move the pin.
    async fn discovery(&self, inner: &mut Inner, challenge: Option<&Challenge>, operator: bool) -> Result<Discovery, AuthError> {
        let discovery = match &inner.discovery {
            Some(discovery) => discovery.clone(),
            None => {
                let discovery = discovery::discover(&self.web, &self.server_url, challenge).await?;
                inner.discovery = Some(discovery.clone());
                discovery
            }
        };
        self.check_issuer(inner, &discovery.metadata.issuer, operator)?;
        let stored = inner.stored.get_or_insert_with(|| Stored::new(&self.server_url));
        if self.spec.issuer.is_none() && stored.issuer.is_none() {
            stored.issuer = Some(discovery.metadata.issuer.clone());
            self.save(inner).await;
        }
        Ok(discovery)
    }

    /// Credentials go to the authorization server the operator chose: `auth.issuer`, else the
    /// one pinned in the token file. Another one, named by the MCP server (which may be
    /// hostile), gets nothing until an operator logs in again (or configures it).
    fn check_issuer(&self, inner: &Inner, found: &str, operator: bool) -> Result<(), AuthError> {
        let same = |pinned: &str| pinned.trim_end_matches('/') == found.trim_end_matches('/');
        if let Some(configured) = &self.spec.issuer {
            return match same(configured) {
                true => Ok(()),
                false => Err(AuthError::Required(format!(
                    "the server names the authorization server {found}, but auth.issuer is {configured}: toolhost sends its credentials to {configured} only"
                ))),
            };
        }
        match inner.stored.as_ref().and_then(|stored| stored.issuer.as_deref()) {
            Some(pinned) if !same(pinned) && !operator => Err(AuthError::Required(match self.spec.grant {
                Grant::AuthorizationCode => format!(
                    "the server now names the authorization server {found}, not {pinned} as before: no credentials go to it until an operator accepts it with `toolhost login {}`",
                    self.server
                ),
                Grant::ClientCredentials => format!(
                    "the server now names the authorization server {found}, not {pinned} as before: no credentials go to it unless auth.issuer = \"{found}\" is configured"
                ),
            })),
            _ => Ok(()),
        }
    }

    /// Which client toolhost is at this authorization server: configured, a client ID metadata
    /// document, or registered (once, and kept in the token file).
    async fn client(&self, inner: &mut Inner, discovery: &Discovery, may_register: bool) -> Result<Client, AuthError> {
        let metadata = &discovery.metadata;
        let supported = metadata.token_endpoint_auth_methods_supported.clone().unwrap_or_default();
        if let Some(id) = &self.spec.client_id {
            let method = self.spec.token_endpoint_auth.unwrap_or_else(|| {
                if self.signer.is_some() {
                    TokenEndpointAuth::PrivateKeyJwt
                } else if self.spec.client_secret.is_none() {
                    TokenEndpointAuth::None
                } else if supported.iter().any(|m| m == "client_secret_post") && !supported.iter().any(|m| m == "client_secret_basic") {
                    TokenEndpointAuth::ClientSecretPost
                } else {
                    TokenEndpointAuth::ClientSecretBasic
                }
            });
            let secret = self.spec.client_secret.as_ref().map(|s| s.expose().to_owned());
            return Ok(Client { id: id.clone(), method, secret, redirect_uri: self.spec.redirect_uri.clone() });
        }
        if let Some(url) = &self.spec.client_metadata_url
            && metadata.client_id_metadata_document_supported
        {
            return Ok(Client {
                id: url.clone(),
                method: TokenEndpointAuth::None,
                secret: None,
                redirect_uri: self.spec.redirect_uri.clone(),
            });
        }
        let stored = inner.stored.get_or_insert_with(|| Stored::new(&self.server_url));
        let registered = stored
            .registered_client
            .clone()
            .filter(|client| stored.issuer.as_deref() == Some(metadata.issuer.as_str()) && client.redirect_uri == self.spec.redirect_uri);
        let registered = match registered {
            Some(registered) => registered,
            None if may_register => {
                let registered = flow::register(&self.web, metadata, &self.spec.redirect_uri).await?;
                stored.issuer = Some(metadata.issuer.clone());
                stored.registered_client = Some(registered.clone());
                self.save(inner).await;
                registered
            }
            None => return Err(self.login_required("toolhost is not registered with its authorization server yet")),
        };
        let method = registered
            .token_endpoint_auth_method
            .as_deref()
            .and_then(TokenEndpointAuth::parse)
            .unwrap_or(if registered.client_secret.is_some() { TokenEndpointAuth::ClientSecretBasic } else { TokenEndpointAuth::None });
        Ok(Client { id: registered.client_id, method, secret: registered.client_secret, redirect_uri: registered.redirect_uri })
    }

    /// Makes `granted` the current token, and stores it (authorization code: with its refresh token).
    async fn accept(&self, inner: &mut Inner, granted: Granted, obtained: Instant, scope: Option<String>) {
        let Granted { access_token, expires_in, refresh_token, scope: granted_scope } = granted;
        tracing::info!(server = %self.server, expires_in_ms = expires_in.map(|d| d.as_millis() as u64), "obtained an access token");
        let retired = inner.issued_token.replace(access_token.clone());
        crate::secrets::rotate(retired.as_deref(), &access_token);
        if self.spec.grant != Grant::AuthorizationCode {
            self.install(&access_token, obtained, expires_in);
            return;
        }
        let stored = inner.stored.get_or_insert_with(|| Stored::new(&self.server_url));
        if let Some(fresh) = &refresh_token {
            crate::secrets::rotate(stored.refresh_token.as_deref(), fresh);
        }
        self.install(&access_token, obtained, expires_in);
        if let Some(discovery) = &inner.discovery {
            stored.issuer = Some(discovery.metadata.issuer.clone());
        }
        stored.access_token = Some(access_token);
        // A refresh answer without a refresh token keeps the one it used (RFC 6749 §6).
        if refresh_token.is_some() {
            stored.refresh_token = refresh_token;
        }
        stored.expires_at_unix_ms = expires_in.map(|lifetime| unix_ms().saturating_add(lifetime.as_millis() as u64));
        if let Some(scope) = granted_scope.or(scope) {
            stored.scope = Some(scope);
        }
        self.save(inner).await;
    }

    fn install(&self, token: &str, obtained: Instant, lifetime: Option<Duration>) {
        let Ok(mut header) = HeaderValue::from_str(&format!("Bearer {token}")) else { return };
        header.set_sensitive(true);
        let (refresh_at, use_until) = match lifetime {
            Some(lifetime) => {
                let share = fastrand::u32(100..=200);
                let margin = (lifetime * share / 1000).min(self.spec.refresh_before);
                let safety = (lifetime / 20).min(Duration::from_secs(5));
                (obtained.checked_add(lifetime - margin), obtained.checked_add(lifetime - safety))
            }
            None => (None, None),
        };
        self.current.store(Some(Arc::new(Current { header, refresh_at, use_until })));
    }

    /// Writes the token file; a failure (a full disk) is logged and the token used anyway: it
    /// is valid, only a restart would need a new login.
    async fn save(&self, inner: &mut Inner) {
        let Some(stored) = inner.stored.clone() else { return };
        let path = self.spec.token_file.clone();
        match tokio::task::spawn_blocking(move || tokens::save(&path, &stored)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => self.warn(&error.to_string()),
            Err(panicked) => self.warn(&format!("writing the token file failed: {panicked}")),
        }
        // Its own write is not news to the daemon (see `load`).
        inner.stored_mtime = std::fs::metadata(&self.spec.token_file).and_then(|m| m.modified()).ok();
    }

    fn login_required(&self, why: &str) -> AuthError {
        AuthError::Required(format!("{why}: run `toolhost login {}`", self.server))
    }

    fn warn(&self, message: &str) {
        if let Some(suppressed) = self.warnings.admit() {
            tracing::warn!(server = %self.server, suppressed, error = %crate::secrets::redact(message), "OAuth");
        }
    }
}

/// The client identity for one token request.
struct Client {
    id: String,
    method: TokenEndpointAuth,
    secret: Option<String>,
    redirect_uri: String,
}

impl Client {
    fn auth<'a>(&'a self, signer: Option<&'a Signer>) -> ClientAuth<'a> {
        ClientAuth { client_id: &self.id, method: self.method, secret: self.secret.as_deref(), signer }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
