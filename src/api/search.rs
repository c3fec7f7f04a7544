//! `SearchTools`: full-text search over exactly the generations one catalog snapshot publishes,
//! filtered by the caller's policy like every other read.

use tonic::{Request, Status};

use crate::api::service::ToolHostService;
use crate::api::{convert, pb};
use crate::door::Presentation;

const DEFAULT_LIMIT: u32 = 10;
const MAX_LIMIT: u32 = 100;

impl ToolHostService {
    pub(crate) async fn search_tools_in(&self, request: Request<pb::SearchToolsRequest>) -> Result<pb::SearchToolsResponse, Status> {
        let caller = self.admit(&request)?;
        let request = request.into_inner();
        let limit = match request.limit {
            0 => DEFAULT_LIMIT,
            n => n.min(MAX_LIMIT),
        };
        let (snapshot, hits) =
            self.door.search(&caller, &request.query, &request.servers, limit as usize, Presentation::WithState, |_| true).await?;
        let results = hits
            .iter()
            .filter_map(|hit| Some(pb::SearchResult { tool: Some(convert::tool(&hit.tool()?.shown(), false)), score: hit.score }))
            .collect();
        Ok(pb::SearchToolsResponse { results, catalog_revision: snapshot.revision() })
    }
}
