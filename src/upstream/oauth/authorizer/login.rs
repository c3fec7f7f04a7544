//! The authorization code grant, which needs a person: approved at once through an
//! [`Interaction`] (`toolhost login` run on its own, the conformance suite), or in two steps
//! through the daemon (`BeginLogin` gives the URL, `CompleteLogin` brings back the redirect),
//! so that the daemon, which holds the configuration's credentials and owns the token file, does
//! the exchange. And `logout`.

use std::time::Duration;

use tokio::time::Instant;

use super::{AuthError, Authorizer, Client, Inner, Interaction};
use crate::config::auth::{has_variable_port, with_port};
use crate::upstream::oauth::Challenge;
use crate::upstream::oauth::discovery::{self, Discovery};
use crate::upstream::oauth::flow::{self, Pending};
use crate::upstream::oauth::tokens::Stored;

/// How long a login begun through the daemon waits for its redirect.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(600);

/// An authorization request on its way: what finishing it needs.
pub(super) struct Authorization {
    pending: Pending,
    client: Client,
    discovery: Discovery,
    scope: Option<String>,
}

/// A login begun through the daemon.
pub(crate) struct PendingLogin {
    id: String,
    expires: Instant,
    authorization: Authorization,
}

/// What `BeginLogin` answers.
pub struct LoginStarted {
    pub login_id: String,
    pub authorization_url: String,
    pub redirect_uri: String,
}

impl Authorizer {
    /// `toolhost login` without a daemon: a new authorization from the operator, whatever is
    /// stored, approved through this authorizer's [`Interaction`]. `port`: where the operator's
    /// side listens, for a redirect URI that names no port (RFC 8252 §7.3).
    ///
    /// # Errors
    /// Discovery, the operator's answer or the token request failed.
    pub async fn login(&self, scope: Option<String>, port: Option<u16>) -> Result<(), AuthError> {
        let challenge = self.probe().await;
        let mut inner = self.inner.lock().await;
        self.load(&mut inner);
        let scope = scope.or_else(|| inner.stored.as_ref().and_then(|s| s.scope.clone()));
        self.authorize(&mut inner, challenge.as_ref(), scope, port).await
    }

    /// The first half of a login through the daemon: the URL for the operator's browser. A
    /// login begun earlier and not finished is dropped (one at a time per server). `port`: as
    /// for [`Authorizer::login`].
    ///
    /// # Errors
    /// Discovery or registration failed.
    pub async fn begin_login(&self, scope: Option<String>, port: Option<u16>) -> Result<LoginStarted, AuthError> {
        let challenge = self.probe().await;
        let mut inner = self.inner.lock().await;
        self.load(&mut inner);
        let scope = scope.or_else(|| inner.stored.as_ref().and_then(|s| s.scope.clone()));
        let authorization = self.start_authorization(&mut inner, challenge.as_ref(), scope, port).await?;
        let id = crate::secrets::random_token().ok_or_else(|| AuthError::Unavailable("cannot read the system's random source".into()))?;
        let started = LoginStarted {
            login_id: id.clone(),
            authorization_url: authorization.pending.url.clone(),
            redirect_uri: authorization.pending.redirect_uri.clone(),
        };
        let pending = PendingLogin { id, expires: crate::deadline::after(LOGIN_TIMEOUT), authorization };
        *self.pending_login.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(pending);
        Ok(started)
    }

    /// The second half: the query of the redirect the browser was sent to, for the login
    /// `login_id`. Single use.
    ///
    /// # Errors
    /// [`AuthError::Required`] for an unknown or expired login, or a redirect that does not
    /// answer it; whatever the token request met.
    pub async fn complete_login(&self, login_id: &str, redirect_query: &str) -> Result<(), AuthError> {
        let pending = {
            let mut slot = self.pending_login.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match slot.take() {
                Some(pending) if pending.id == login_id && Instant::now() < pending.expires => pending,
                other => {
                    // Someone else's or stale: leave a live one in place.
                    *slot = other.filter(|pending| Instant::now() < pending.expires);
                    return Err(AuthError::Required("no such login in progress (it expired, finished, or another began since)".into()));
                }
            }
        };
        let mut inner = self.inner.lock().await;
        self.finish_authorization(&mut inner, pending.authorization, redirect_query).await
    }

    /// `toolhost logout`: revokes the stored tokens at the authorization server where it offers
    /// revocation (RFC 7009), then deletes the token file whatever the server said. Returns
    /// what happened at the server.
    ///
    /// # Errors
    /// The token file cannot be deleted.
    pub async fn logout(&self) -> Result<String, AuthError> {
        let challenge = self.probe().await;
        let mut inner = self.inner.lock().await;
        self.load(&mut inner);
        let stored = inner.stored.clone().unwrap_or_else(|| Stored::new(&self.server_url));
        let tokens: Vec<(&str, &str)> = [(&stored.refresh_token, "refresh_token"), (&stored.access_token, "access_token")]
            .into_iter()
            .filter_map(|(token, hint)| token.as_deref().map(|token| (token, hint)))
            .collect();
        let outcome = match tokens.is_empty() {
            true => "there was nothing to revoke".to_owned(),
            false => match self.revoke(&mut inner, challenge.as_ref(), &tokens).await {
                Ok(true) => "revoked at the authorization server".to_owned(),
                Ok(false) => "the authorization server offers no revocation: its tokens stay valid there until they expire".to_owned(),
                Err(error) => format!("not revoked at the authorization server ({error})"),
            },
        };
        match std::fs::remove_file(&self.spec.token_file) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(AuthError::Required(format!("cannot delete the token file {}: {err}", self.spec.token_file.display()))),
        }
        self.current.store(None);
        inner.stored = Some(Stored::new(&self.server_url));
        inner.stored_mtime = None;
        Ok(outcome)
    }

    /// What the server says to a request without a token (its challenge names the metadata);
    /// `None` if it says nothing useful or cannot be reached (discovery then uses the
    /// well-known addresses).
    async fn probe(&self) -> Option<Challenge> {
        discovery::probe(&self.web, &self.server_url).await.ok().flatten()
    }

    async fn revoke(&self, inner: &mut Inner, challenge: Option<&Challenge>, tokens: &[(&str, &str)]) -> Result<bool, AuthError> {
        // Tokens go back only to the server that issued them.
        let discovery = self.discovery(inner, challenge, false).await?;
        let client = self.client(inner, &discovery, false).await?;
        let mut revoked = false;
        for (token, hint) in tokens {
            revoked |= flow::revoke(&self.web, &discovery.metadata, token, hint, &client.auth(self.signer.as_ref())).await?;
        }
        Ok(revoked)
    }

    /// The authorization code grant with PKCE, approved through [`Interaction`].
    pub(super) async fn authorize(
        &self,
        inner: &mut Inner,
        challenge: Option<&Challenge>,
        scope: Option<String>,
        port: Option<u16>,
    ) -> Result<(), AuthError> {
        let authorization = self.start_authorization(inner, challenge, scope, port).await?;
        let url = authorization.pending.url.clone();
        let query = match &self.interaction {
            Interaction::None => return Err(self.login_required("it needs a new authorization")),
            Interaction::FollowRedirect => self.web.follow_authorization(&url).await?,
            Interaction::Operator(visit) => visit(url).await.map_err(|error| AuthError::Required(error.to_string()))?,
        };
        self.finish_authorization(inner, authorization, &query).await
    }

    /// Discovery, the client (registered if need be), and the authorization URL. A client
    /// registered with a redirect URI that names no port is sent back to `port`.
    async fn start_authorization(
        &self,
        inner: &mut Inner,
        challenge: Option<&Challenge>,
        scope: Option<String>,
        port: Option<u16>,
    ) -> Result<Authorization, AuthError> {
        // An operator is at hand: the authorization server they log in at becomes the pinned one
        // when the login completes (see `accept`).
        let discovery = self.discovery(inner, challenge, true).await?;
        let client = self.client(inner, &discovery, true).await?;
        let scope = scope.or_else(|| discovery::select_scope(self.spec.scopes.as_deref(), challenge, &discovery));
        let redirect_uri = match (has_variable_port(&client.redirect_uri), port) {
            (false, _) => client.redirect_uri.clone(),
            (true, Some(port)) => with_port(&client.redirect_uri, port),
            (true, None) => {
                return Err(AuthError::Required(format!(
                    "the redirect URI {} names no port: run `toolhost login`, which listens on one the kernel gives it",
                    client.redirect_uri
                )));
            }
        };
        let pending = flow::authorization_url(&discovery, &client.id, &redirect_uri, scope.as_deref())?;
        Ok(Authorization { pending, client, discovery, scope })
    }

    /// The redirect checked (`state`, `iss`), the code exchanged, the tokens kept.
    async fn finish_authorization(&self, inner: &mut Inner, authorization: Authorization, query: &str) -> Result<(), AuthError> {
        let Authorization { pending, client, discovery, scope } = authorization;
        let code = pending.code(query)?;
        let form = vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code),
            ("redirect_uri", pending.redirect_uri.clone()),
            ("code_verifier", pending.verifier().to_owned()),
            ("resource", discovery.resource.clone()),
        ];
        let started = Instant::now();
        let granted = self.token(&discovery, form, &client).await?;
        inner.scope.clone_from(&scope);
        self.accept(inner, granted, started, scope).await;
        Ok(())
    }
}
