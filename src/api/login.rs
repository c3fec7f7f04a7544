//! `BeginLogin`, `CompleteLogin` and `Logout` (operators only): an OAuth login done by the daemon, which
//! holds the configuration's credentials and owns the token file, with the operator's CLI as the
//! browser's side. The work is the server's `Authorizer`'s.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tonic::{Request, Status};

use crate::api::pb;
use crate::api::service::ToolHostService;
use crate::api::status::LoginError;
use crate::config::auth::Grant;
use crate::upstream::oauth::authorizer::{Authorizer, LOGIN_TIMEOUT};

impl ToolHostService {
    pub(crate) async fn begin_login_in(&self, request: Request<pb::BeginLoginRequest>) -> Result<pb::BeginLoginResponse, Status> {
        self.admit_admin(&request)?;
        let request = request.into_inner();
        let authorizer = self.login_authorizer(&request.server)?;
        let scope = Some(request.scope.trim().to_owned()).filter(|scope| !scope.is_empty());
        let started = authorizer.begin_login(scope).await.map_err(|error| LoginError::Auth { server: request.server, error })?;
        let expires = SystemTime::now().checked_add(LOGIN_TIMEOUT).and_then(|at| at.duration_since(UNIX_EPOCH).ok());
        Ok(pb::BeginLoginResponse {
            login_id: started.login_id,
            authorization_url: started.authorization_url,
            redirect_uri: started.redirect_uri,
            expires_at_unix_ms: expires.map_or(0, |at| i64::try_from(at.as_millis()).unwrap_or(i64::MAX)),
        })
    }

    pub(crate) async fn complete_login_in(&self, request: Request<pb::CompleteLoginRequest>) -> Result<pb::CompleteLoginResponse, Status> {
        self.admit_admin(&request)?;
        let request = request.into_inner();
        let authorizer = self.login_authorizer(&request.server)?;
        // The whole redirected URL is accepted too: its query is what counts.
        let query = request.redirect_query.split_once('?').map_or(request.redirect_query.as_str(), |(_, query)| query);
        authorizer
            .complete_login(&request.login_id, query)
            .await
            .map_err(|error| LoginError::Auth { server: request.server.clone(), error })?;
        // A server waiting out its backoff tries now; a running session already has the token.
        self.refresher.authorized(&request.server);
        Ok(pb::CompleteLoginResponse { token_file: authorizer.token_file().display().to_string() })
    }

    pub(crate) async fn logout_in(&self, request: Request<pb::LogoutRequest>) -> Result<pb::LogoutResponse, Status> {
        self.admit_admin(&request)?;
        let server = request.into_inner().server;
        let authorizer = self.login_authorizer(&server)?;
        let outcome = authorizer.logout().await.map_err(|error| LoginError::Auth { server: server.clone(), error })?;
        // The session in progress holds no token any more: end it, so that the state says so now.
        self.refresher.restart(&server);
        Ok(pb::LogoutResponse { outcome, token_file: authorizer.token_file().display().to_string() })
    }

    fn login_authorizer(&self, server: &str) -> Result<Arc<Authorizer>, LoginError> {
        let view = self.registry.server(server).ok_or_else(|| LoginError::UnknownServer(server.to_owned()))?;
        view.authorizer
            .clone()
            .filter(|authorizer| authorizer.grant() == Grant::AuthorizationCode)
            .ok_or_else(|| LoginError::NotApplicable(server.to_owned()))
    }
}
