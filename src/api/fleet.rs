//! The API's side of the fleet store: `FleetStatus` (operators only). The work is `fleet`'s.

use tonic::{Request, Status};

use crate::api::pb;
use crate::api::service::ToolHostService;
use crate::fleet::{Fleet, FleetError, query};

impl ToolHostService {
    pub(crate) async fn fleet_status_in(&self, request: Request<pb::FleetStatusRequest>) -> Result<pb::FleetStatusResponse, Status> {
        self.admit_admin(&request)?;
        let fleet = self.fleet()?;
        let mut response = pb::FleetStatusResponse {
            host_id: fleet.host_id().to_owned(),
            connected: fleet.is_connected(),
            last_error: fleet.last_error().unwrap_or_default(),
            audit_pending: fleet.audit_pending(),
            drifted_tools: fleet.drifted_tools(),
            ..Default::default()
        };
        let pool = fleet.pool()?;
        response.hosts = query::hosts(&pool)
            .await?
            .into_iter()
            .map(|host| pb::FleetHost {
                host_id: host.host_id,
                version: host.version,
                last_seen_unix_ms: host.last_seen_ms,
                servers: host
                    .servers
                    .into_iter()
                    .map(|s| pb::FleetServer {
                        server: s.server,
                        identity: s.identity,
                        state: s.state,
                        generation: s.generation,
                        tools: s.tools,
                    })
                    .collect(),
            })
            .collect();
        response.drift = query::drift(&pool)
            .await?
            .into_iter()
            .map(|drift| pb::FleetDrift {
                identity: drift.identity,
                tool: drift.tool,
                variants: drift.variants.into_iter().map(|(definition_hash, hosts)| pb::FleetVariant { definition_hash, hosts }).collect(),
            })
            .collect();
        Ok(response)
    }

    /// The fleet, or why there is none.
    pub(crate) fn fleet(&self) -> Result<&Fleet, FleetError> {
        self.fleet.as_ref().ok_or(FleetError::NotConfigured)
    }
}
