//! `SearchTools`: full-text search over exactly the generations one catalog snapshot publishes,
//! filtered by the caller's policy like every other read.

use tonic::{Request, Status};

use crate::api::service::ToolHostService;
use crate::api::status::ApiError;
use crate::api::{convert, pb};
use crate::door::server_visible;

const DEFAULT_LIMIT: u32 = 10;
const MAX_LIMIT: u32 = 100;
/// Hits fetched beyond the limit, for those the caller's policy then hides.
const OVERFETCH: u32 = 4;

impl ToolHostService {
    pub(crate) async fn search_tools_in(&self, request: Request<pb::SearchToolsRequest>) -> Result<pb::SearchToolsResponse, Status> {
        let caller = self.admit(&request)?;
        let request = request.into_inner();
        let limit = match request.limit {
            0 => DEFAULT_LIMIT,
            n => n.min(MAX_LIMIT),
        };
        let snapshot = self.registry.snapshot();
        for server in &request.servers {
            if !snapshot.servers.get(server.as_str()).is_some_and(|view| server_visible(&caller, view)) {
                return Err(ApiError::UnknownServer(server.clone()).into());
            }
        }
        // The generation of each server in this snapshot: the index answers for exactly those.
        let generations: Vec<(&str, u64)> = snapshot
            .servers
            .values()
            .filter(|view| request.servers.is_empty() || request.servers.iter().any(|s| **s == *view.name))
            .filter_map(|view| view.generation.as_ref().map(|generation| (&*view.name, generation.number)))
            .collect();
        let hits = self.store.search_words(&request.query, &generations, limit.saturating_mul(OVERFETCH)).await.map_err(ApiError::from)?;
        let mut results = Vec::with_capacity(limit as usize);
        for (server, name, score) in hits {
            let Some(view) = snapshot.servers.get(server.as_str()) else { continue };
            let Some(generation) = &view.generation else { continue };
            let Some(idx) = generation.position(&name) else { continue };
            let qualified = view.qualified().name(idx);
            if !caller.agent.may_use(qualified) {
                continue;
            }
            results.push(pb::SearchResult {
                tool: Some(convert::tool(view, qualified, &generation.tools[idx], generation.number, false, view.integrity_at(idx))),
                score,
            });
            if results.len() == limit as usize {
                break;
            }
        }
        Ok(pb::SearchToolsResponse { results, catalog_revision: snapshot.revision })
    }
}
