//! The API's side of the fleet store: `FleetStatus` (operators only). The work is the operator
//! side of the door's.

use tonic::{Request, Status};

use crate::api::pb;
use crate::api::service::ToolHostService;

impl ToolHostService {
    pub(crate) async fn fleet_status_in(&self, request: Request<pb::FleetStatusRequest>) -> Result<pb::FleetStatusResponse, Status> {
        let operator = self.admit(&request)?;
        let fleet = self.operator.fleet_status(&operator).await?;
        let mut response = pb::FleetStatusResponse {
            host_id: fleet.host_id,
            connected: fleet.connected,
            last_error: fleet.last_error.unwrap_or_default(),
            audit_pending: fleet.audit_pending,
            drifted_tools: fleet.drifted_tools,
            ..Default::default()
        };
        response.hosts = fleet
            .hosts
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
        response.drift = fleet
            .drift
            .into_iter()
            .map(|drift| pb::FleetDrift {
                identity: drift.identity,
                tool: drift.tool,
                variants: drift.variants.into_iter().map(|(definition_hash, hosts)| pb::FleetVariant { definition_hash, hosts }).collect(),
            })
            .collect();
        Ok(response)
    }
}
