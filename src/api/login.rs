//! `BeginLogin`, `CompleteLogin` and `Logout` (operators only): an OAuth login done by the daemon, which
//! holds the configuration's credentials and owns the token file, with the operator's CLI as the
//! browser's side. The work is the operator side of the door's.

use std::time::{SystemTime, UNIX_EPOCH};

use tonic::{Request, Status};

use crate::api::pb;
use crate::api::service::ToolHostService;
use crate::door::operator::LOGIN_TIMEOUT;

impl ToolHostService {
    pub(crate) async fn begin_login_in(&self, request: Request<pb::BeginLoginRequest>) -> Result<pb::BeginLoginResponse, Status> {
        let operator = self.admit(&request)?;
        let request = request.into_inner();
        let scope = Some(request.scope.trim().to_owned()).filter(|scope| !scope.is_empty());
        let port = u16::try_from(request.redirect_port).ok().filter(|port| *port != 0);
        let started = self.operator.begin_login(&operator, &request.server, scope, port).await?;
        let expires = SystemTime::now().checked_add(LOGIN_TIMEOUT).and_then(|at| at.duration_since(UNIX_EPOCH).ok());
        Ok(pb::BeginLoginResponse {
            login_id: started.login_id,
            authorization_url: started.authorization_url,
            redirect_uri: started.redirect_uri,
            expires_at_unix_ms: expires.map_or(0, |at| i64::try_from(at.as_millis()).unwrap_or(i64::MAX)),
        })
    }

    pub(crate) async fn complete_login_in(&self, request: Request<pb::CompleteLoginRequest>) -> Result<pb::CompleteLoginResponse, Status> {
        let operator = self.admit(&request)?;
        let request = request.into_inner();
        // The whole redirected URL is accepted too: its query is what counts.
        let query = request.redirect_query.split_once('?').map_or(request.redirect_query.as_str(), |(_, query)| query);
        let token_file = self.operator.complete_login(&operator, &request.server, &request.login_id, query).await?;
        Ok(pb::CompleteLoginResponse { token_file })
    }

    pub(crate) async fn logout_in(&self, request: Request<pb::LogoutRequest>) -> Result<pb::LogoutResponse, Status> {
        let operator = self.admit(&request)?;
        let (outcome, token_file) = self.operator.logout(&operator, &request.into_inner().server).await?;
        Ok(pb::LogoutResponse { outcome, token_file })
    }
}
