//! Publishing integrity states: evaluating a server's current generation against its policy
//! and approvals (at boot, on a reload, after an operator's approval), and the operator's
//! approvals themselves. A worker's commit evaluates in `commit`, under the same lock.

use std::collections::HashMap;
use std::sync::Arc;

use crate::catalog::integrity::{self, Approval, Policy, ToolIntegrity};
use crate::catalog::model::{Generation, ToolDef};
use crate::registry::Registry;
use crate::store::approvals::ACCEPTED_BY_POLICY;
use crate::store::{Store, StoreError};

/// Why an approval was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("no server named {0:?}")]
    UnknownServer(String),
    #[error("{server:?} offers no tool {tool:?} now")]
    UnknownTool { server: String, tool: String },
    #[error("{server}/{tool} is pinned by the configuration (pins); change the pin instead")]
    Pinned { server: String, tool: String },
    #[error("{server}/{tool} now offers {offered}, not {expected}: look at the new definition first")]
    HashMismatch { server: String, tool: String, expected: String, offered: String },
    #[error("name the tools to approve, or --all")]
    NothingNamed,
    #[error("--hash approves one tool's exact definition: name exactly one tool")]
    HashNeedsOneTool,
    #[error("--hash {0:?} is too short to bind a definition: give at least {MIN_HASH_PREFIX} hex digits (`toolhost tools` shows 12)")]
    HashTooShort(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Shortest hash prefix an approval takes: what `toolhost tools` prints is 12.
pub const MIN_HASH_PREFIX: usize = 8;

/// Whether the `--hash` an operator gave (`sha256:` optional, the full hex or a prefix of at
/// least [`MIN_HASH_PREFIX`] digits) names the definition whose hash is `offered`.
fn names_hash(given: &str, offered: &str) -> Result<bool, ApproveError> {
    let given = given.trim().trim_start_matches("sha256:").to_ascii_lowercase();
    if given.len() < MIN_HASH_PREFIX || !given.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApproveError::HashTooShort(given));
    }
    Ok(offered.starts_with(&given))
}

/// What one tool's definition looks like next to the approved one.
#[derive(Debug)]
pub struct DefinitionDiff {
    pub approved: Option<(Approval, String)>,
    pub offered: ToolDef,
    pub integrity: Option<ToolIntegrity>,
    pub changes: Vec<String>,
}

/// Evaluates `generation` and makes what the policy accepted durable. Returns the states (empty
/// when every tool is callable as offered with nothing flagged) and the approvals as they now are.
///
/// # Errors
/// [`StoreError`] when the accepted baseline cannot be stored.
pub(crate) async fn evaluate_stored(
    store: &Store,
    server: &str,
    policy: &Policy,
    generation: &Generation,
    mut approvals: HashMap<String, Approval>,
    previous: &HashMap<String, String>,
) -> Result<(Arc<[ToolIntegrity]>, HashMap<String, Approval>), StoreError> {
    let evaluation = integrity::evaluate(policy, &generation.tools, &approvals, |name| description_of(previous.get(name)));
    for (name, approval) in store.approvals().approve(server, &evaluation.accepted, ACCEPTED_BY_POLICY).await? {
        approvals.insert(name, approval);
    }
    Ok((compact(&generation.tools, evaluation.tools), approvals))
}

/// The states as the registry keeps them: nothing at all when every tool is callable as
/// offered with nothing flagged (the common case costs no memory per tool).
pub(crate) fn compact(tools: &[ToolDef], states: Vec<ToolIntegrity>) -> Arc<[ToolIntegrity]> {
    debug_assert_eq!(tools.len(), states.len());
    let plain = states.iter().all(|state| state.held.is_none() && !state.flags.any() && state.approved_hash.is_none());
    if plain { Arc::new([]) } else { states.into() }
}

/// The description in a stored definition.
pub(crate) fn description_of(definition: Option<&String>) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(definition?).ok()?;
    Some(value.get("description").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned())
}

/// The operator's side: approvals and diffs. Cheap to clone.
#[derive(Clone)]
pub struct Approver {
    pub(crate) registry: Arc<Registry>,
    pub(crate) store: Store,
}

impl Approver {
    /// Approves what `server` offers now: the named tools (with `hash`, only that exact
    /// definition of the one named tool, so an approval cannot race a new change), or every
    /// tool with `all`. Durable before it takes effect; the tools are callable when it returns.
    /// Returns the `(tool, hash)` approved.
    ///
    /// # Errors
    /// [`ApproveError`].
    pub async fn approve(
        &self,
        server: &str,
        tools: &[String],
        all: bool,
        hash: Option<&str>,
        approved_by: &str,
    ) -> Result<Vec<(String, String)>, ApproveError> {
        let view = self.registry.server(server).ok_or_else(|| ApproveError::UnknownServer(server.to_owned()))?;
        if hash.is_some() && (all || tools.len() != 1) {
            return Err(ApproveError::HashNeedsOneTool);
        }
        if !all && tools.is_empty() {
            return Err(ApproveError::NothingNamed);
        }
        // The integrity lock: no commit publishes between reading the offer and publishing.
        let mut approvals = view.shared().approvals.lock().await;
        let view = self.registry.server(server).ok_or_else(|| ApproveError::UnknownServer(server.to_owned()))?;
        let Some(generation) = view.generation().cloned() else {
            return Err(ApproveError::UnknownTool { server: server.to_owned(), tool: tools.first().cloned().unwrap_or_default() });
        };
        let policy = &view.shared().policy;
        let chosen: Vec<&ToolDef> = match all {
            true => generation.tools.iter().filter(|tool| !policy.pins.contains_key(&tool.name)).collect(),
            false => tools
                .iter()
                .map(|name| {
                    generation.tool(name).ok_or_else(|| ApproveError::UnknownTool { server: server.to_owned(), tool: name.clone() })
                })
                .collect::<Result<_, _>>()?,
        };
        let mut entries = Vec::with_capacity(chosen.len());
        for tool in chosen {
            if policy.pins.contains_key(&tool.name) {
                return Err(ApproveError::Pinned { server: server.to_owned(), tool: tool.name.clone() });
            }
            if let Some(expected) = hash
                && !names_hash(expected, &tool.hash)?
            {
                return Err(ApproveError::HashMismatch {
                    server: server.to_owned(),
                    tool: tool.name.clone(),
                    expected: expected.to_owned(),
                    offered: tool.hash.clone(),
                });
            }
            entries.push((tool.name.clone(), tool.hash.clone()));
        }
        for (name, approval) in self.store.approvals().approve(server, &entries, approved_by).await? {
            approvals.insert(name, approval);
        }
        let previous = self.store.generations().previous_definitions(Some(server)).await?.remove(server).unwrap_or_default();
        let evaluation = integrity::evaluate(policy, &generation.tools, &approvals, |name| description_of(previous.get(name)));
        let states = compact(&generation.tools, evaluation.tools);
        self.registry.update(server, |view| {
            if view.generation().is_some_and(|current| Arc::ptr_eq(current, &generation)) {
                view.integrity_changed(states);
            }
        });
        tracing::info!(server, tools = entries.len(), approved_by, "tool definitions approved");
        Ok(entries)
    }

    /// The offered definition of `server`'s tool next to the approved one, field by field.
    ///
    /// # Errors
    /// [`ApproveError`] for an unknown server or tool, or a store failure.
    pub async fn diff(&self, server: &str, tool: &str) -> Result<DefinitionDiff, ApproveError> {
        let unknown = || ApproveError::UnknownTool { server: server.to_owned(), tool: tool.to_owned() };
        let view = self.registry.server(server).ok_or_else(|| ApproveError::UnknownServer(server.to_owned()))?;
        let generation = view.generation().cloned().ok_or_else(unknown)?;
        let idx = generation.position(tool).ok_or_else(unknown)?;
        let offered = generation.tools[idx].clone();
        let approval = match view.shared().policy.pins.get(tool) {
            Some(pin) => Some(Approval { hash: pin.clone(), approved_by: "pins (configuration)".into(), approved_at_ms: 0 }),
            None => view.shared().approvals.lock().await.get(tool).cloned(),
        };
        let integrity = view.integrity_at(idx).cloned();
        let approved = match approval {
            Some(approval) => self.store.generations().definition(&approval.hash).await?.map(|definition| (approval, definition)),
            // Not held and never recorded: the policy accepts what the server offers.
            None if integrity.as_ref().is_none_or(|state| state.held.is_none()) => Some((
                Approval { hash: offered.hash.clone(), approved_by: "policy (accept), nothing recorded".into(), approved_at_ms: 0 },
                offered.definition.to_string(),
            )),
            None => None,
        };
        let parse = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap_or_default();
        let changes = match &approved {
            Some((_, definition)) => integrity::changes(&parse(definition), &parse(&offered.definition)),
            None => integrity::changes(&serde_json::Value::Object(serde_json::Map::new()), &parse(&offered.definition)),
        };
        Ok(DefinitionDiff { approved, offered, integrity, changes })
    }
}
