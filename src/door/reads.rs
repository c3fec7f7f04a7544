//! The agent side's reads: the catalog now or at a revision, search, one tool in any
//! generation, a server's history. Each judges the caller's policy here, picks generations
//! here and reads the store here, so a door only asks and converts ([`super::view`]'s types).

use std::borrow::Cow;
use std::sync::Arc;

use super::view::{Catalog, Server, Shown, Tool};
use super::{Door, Presentation, error::DoorError};
use crate::access::Caller;
use crate::calls::ToolRef;
use crate::catalog::integrity::Approval;
use crate::catalog::names;
use crate::catalog::record::{EnumerationRecord, GenerationSummary};
use crate::registry::ServerView;

/// Search hits fetched beyond the limit, for those the caller's policy then hides.
const SEARCH_OVERFETCH: usize = 4;

/// One search hit: a tool of one server in the searched snapshot, and its score (higher first).
pub struct Hit {
    view: Arc<ServerView>,
    idx: usize,
    pub score: f64,
}

impl Hit {
    /// The tool found.
    pub fn tool(&self) -> Option<Tool<'_>> {
        Server::of(&self.view).tool(self.idx)
    }
}

/// Why a search was refused.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("no server named {0:?}")]
    UnknownServer(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// What a server went through, as one caller may see it.
pub struct ServerHistory {
    /// Its generations, newest first, naming only the tools the caller sees now.
    pub generations: Vec<GenerationSummary>,
    /// Its latest enumerations; their diagnostics (which quote entries) for operators only.
    pub enumerations: Vec<EnumerationRecord>,
    /// The definition approvals of the tools the caller sees, newest first.
    pub approvals: Vec<(String, Approval)>,
}

impl Door {
    /// The catalog now.
    pub fn snapshot(&self) -> Catalog {
        Catalog::new(self.registry.snapshot())
    }

    /// The catalog as it was at `revision`, while it is kept (page tokens refer to one).
    pub fn snapshot_at(&self, revision: u64) -> Option<Catalog> {
        self.registry.snapshot_at(revision).map(Catalog::new)
    }

    /// The catalog's revision, as it changes.
    pub fn revisions(&self) -> tokio::sync::watch::Receiver<u64> {
        self.registry.subscribe()
    }

    /// Full-text search over exactly the generations one snapshot publishes, in `servers` (all
    /// when empty), keeping at most `limit` hits that the caller sees ([`super::shows_tool`])
    /// and that `also` (a profile) lets through. A server the caller may not know of is an
    /// unknown server.
    ///
    /// # Errors
    /// [`SearchError`].
    pub async fn search(
        &self,
        caller: &Caller,
        query: &str,
        servers: &[String],
        limit: usize,
        presentation: Presentation,
        also: impl Fn(Tool<'_>) -> bool,
    ) -> Result<(Catalog, Vec<Hit>), SearchError> {
        let catalog = self.snapshot();
        let snapshot = catalog.snapshot();
        for server in servers {
            if catalog.visible_server(caller, server).is_none() {
                return Err(SearchError::UnknownServer(server.clone()));
            }
        }
        // The generation of each server in this snapshot: the index answers for exactly those.
        let generations: Vec<(&str, u64)> = snapshot
            .servers
            .values()
            .filter(|view| servers.is_empty() || servers.iter().any(|s| **s == **view.name()))
            .filter_map(|view| view.generation().map(|generation| (&**view.name(), generation.number)))
            .collect();
        let fetch = u32::try_from(limit.saturating_mul(SEARCH_OVERFETCH)).unwrap_or(u32::MAX);
        let found = self.store.generations().search_words(query, &generations, fetch).await?;
        let mut hits = Vec::with_capacity(limit);
        for (server, name, score) in found {
            let Some(view) = snapshot.servers.get(server.as_str()) else { continue };
            let Some(tool) = Server::of(view).tool_named(&name) else { continue };
            if !tool.shown_to(caller, presentation) || !also(tool) {
                continue;
            }
            hits.push(Hit { view: view.clone(), idx: tool.idx(), score });
            if hits.len() == limit {
                break;
            }
        }
        Ok((catalog, hits))
    }

    /// The tool `tool` names, as `caller` may see it in `catalog`: in its server's current
    /// generation, or in `generation` (0: the current one) from the store. A qualified name
    /// is looked up in the current generations; a server and name are taken as given (the
    /// tool may be in an older generation). A tool held now is hidden from agents in every
    /// generation, as it is from every listing; one the caller may not use answers as missing.
    ///
    /// # Errors
    /// Unknown server or tool, refused as unknown; the store.
    pub async fn tool_at<'c>(
        &self,
        caller: &Caller,
        catalog: &'c Catalog,
        tool: &ToolRef,
        generation: u64,
    ) -> Result<Shown<'c>, DoorError> {
        let (server, name) = match tool {
            ToolRef::ServerTool { server, name } => (server.clone(), name.clone()),
            ToolRef::Qualified(qualified) => {
                let unknown = || DoorError::unknown_tool(tool.server().unwrap_or_default(), qualified);
                match tool.server() {
                    Some(server) if catalog.server(server).is_none() => return Err(DoorError::unknown_server(server)),
                    None => return Err(unknown()),
                    Some(_) => {}
                }
                let found = catalog.tool(tool).ok_or_else(unknown)?;
                (found.server().name().to_owned(), found.name().to_owned())
            }
        };
        if !catalog.may_use(caller, tool) || !catalog.shows_name(caller, &names::qualify(&server, &name), Presentation::WithState) {
            return Err(catalog.refused(caller, tool).into());
        }
        let view = catalog.server(&server).ok_or_else(|| DoorError::unknown_server(&server))?;
        let current = view.tool_named(&name);
        let (def, generation) = if generation == 0 || generation == view.generation() {
            // The current generation (0 asks for it): the tool in it, or missing.
            let tool = current.ok_or_else(|| DoorError::unknown_tool(&server, &name))?;
            (Cow::Borrowed(tool.def()), view.generation())
        } else {
            let past = self.store.generations().tools_at(&server, generation).await?;
            let def = past.into_iter().find(|tool| tool.name == name).ok_or_else(|| DoorError::unknown_tool(&server, &name))?;
            (Cow::Owned(def), generation)
        };
        // Integrity is the current generation's: a past generation's tool has none to show.
        let integrity = (generation == view.generation()).then(|| current.and_then(|tool| tool.integrity())).flatten();
        Ok(Shown { server: view, qualified: Cow::Owned(names::qualify(&server, &def.name)), def, generation, integrity })
    }

    /// `server`'s generations, newest first (at most `generations`), its latest `enumerations`
    /// and its tools' definition approvals (at most `approvals`), as `caller` may see them; `None`
    /// when it may not know of the server (it answers as one that does not exist).
    ///
    /// # Errors
    /// The store.
    pub async fn server_history(
        &self,
        caller: &Caller,
        server: &str,
        generations: u32,
        enumerations: u32,
        approvals: u32,
    ) -> Result<Option<ServerHistory>, DoorError> {
        if self.snapshot().visible_server(caller, server).is_none() {
            return Ok(None);
        }
        let mut summaries = self.store.generations().history(server, generations).await?;
        let mut records = self.store.generations().enumerations(server, enumerations).await?;
        // Names the caller may not see are left out, judged by the catalog now.
        let catalog = self.snapshot();
        let visible = |name: &str| catalog.shows_name(caller, &names::qualify(server, name), Presentation::WithState);
        for summary in &mut summaries {
            summary.added.retain(|name| visible(name));
            summary.removed.retain(|name| visible(name));
            summary.changed.retain(|name| visible(name));
        }
        if !caller.agent.admin {
            records.iter_mut().for_each(|record| record.diagnostics.clear());
        }
        let approved = self.store.approvals().history(server, approvals).await?;
        let approved = approved.into_iter().filter(|(name, _)| visible(name)).collect();
        Ok(Some(ServerHistory { generations: summaries, enumerations: records, approvals: approved }))
    }

    /// The definitions `server` offered as tool `name`: `(first generation, last generation if
    /// it is gone, hash)`, newest first. The caller has seen the tool.
    ///
    /// # Errors
    /// The store.
    pub async fn tool_history(&self, server: &str, name: &str, limit: u32) -> Result<Vec<(u64, Option<u64>, String)>, DoorError> {
        Ok(self.store.generations().tool_history(server, name, limit).await?)
    }
}
