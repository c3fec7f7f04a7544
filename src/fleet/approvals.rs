//! Approvals from the fleet: an operator's approval of one definition (server identity, tool,
//! definition hash) on any host applies on every host whose server has that identity and
//! offers exactly that definition, now or later. Read whole on connect, then as PostgreSQL
//! announces them; applied through the same `Approver` as a local approval (durable in this
//! host's store before the tool becomes callable), marked as coming from the fleet.

use std::collections::{BTreeMap, HashMap};

use sqlx::PgPool;

use super::{FleetError, FleetParts};
use crate::store::fleet::FROM_FLEET;
use crate::supervisor::integrity::ApproveError;
use crate::telemetry::throttle::Throttle;

/// The approvals this host knows of, for the identities it serves.
pub(super) struct Known {
    /// `(identity, tool, hash)` → who approved it, where.
    by_definition: HashMap<(String, String, String), String>,
    /// The highest approval id read.
    last_id: i64,
    /// The identities the approvals were read for: a reload that adds one reads them all again.
    identities: Vec<String>,
    /// An approval that cannot be applied is retried at every change: its warning is rate-limited.
    warnings: Throttle,
}

impl Default for Known {
    fn default() -> Known {
        Known { by_definition: HashMap::new(), last_id: 0, identities: Vec::new(), warnings: Throttle::new(1) }
    }
}

impl Known {
    /// Reads every approval of this host's identities.
    pub(super) async fn load(&mut self, pool: &PgPool, identities: &BTreeMap<String, String>) -> Result<(), FleetError> {
        self.last_id = 0;
        self.by_definition.clear();
        self.load_new(pool, identities).await
    }

    /// Reads the approvals made since the last read (all of them again when this host's
    /// identities changed).
    pub(super) async fn load_new(&mut self, pool: &PgPool, identities: &BTreeMap<String, String>) -> Result<(), FleetError> {
        let wanted: Vec<&String> = identities.values().collect();
        if wanted.len() != self.identities.len() || wanted.iter().zip(&self.identities).any(|(a, b)| *a != b) {
            self.last_id = 0;
            self.by_definition.clear();
            self.identities = wanted.iter().map(|identity| (*identity).clone()).collect();
        }
        let rows: Vec<(i64, String, String, String, String, String)> = sqlx::query_as(
            "SELECT id, identity, tool, definition_hash, approved_by, host_id FROM approvals \
             WHERE id > $1 AND identity = ANY($2) ORDER BY id",
        )
        .bind(self.last_id)
        .bind(&wanted)
        .fetch_all(pool)
        .await?;
        // Announcements for other identities still move the mark: they are never wanted here.
        let newest: Option<i64> = sqlx::query_scalar("SELECT max(id) FROM approvals").fetch_one(pool).await?;
        for (id, identity, tool, hash, approved_by, host) in rows {
            self.last_id = self.last_id.max(id);
            self.by_definition.insert((identity, tool, hash), format!("{FROM_FLEET}{approved_by} (on {host})"));
        }
        self.last_id = self.last_id.max(newest.unwrap_or(0));
        Ok(())
    }

    /// Approves, on this host, every held tool whose offered definition the fleet approved.
    pub(super) async fn apply(&self, parts: &FleetParts, identities: &BTreeMap<String, String>) {
        if self.by_definition.is_empty() {
            return;
        }
        let snapshot = parts.registry.snapshot();
        for view in snapshot.servers.values() {
            let (Some(generation), Some(identity)) = (view.generation(), identities.get(&**view.name())) else { continue };
            for (idx, tool) in generation.tools.iter().enumerate() {
                if view.held(idx).is_none() {
                    continue;
                }
                let key = (identity.clone(), tool.name.clone(), tool.hash.clone());
                let Some(approved_by) = self.by_definition.get(&key) else { continue };
                match parts.approver.approve(view.name(), std::slice::from_ref(&tool.name), false, Some(&tool.hash), approved_by).await {
                    Ok(_) => {
                        tracing::info!(server = %view.name(), tool = %tool.name, hash = %tool.hash, approved_by, "approved by the fleet")
                    }
                    // The server changed (or the tool is pinned) meanwhile: nothing to approve here.
                    Err(ApproveError::HashMismatch { .. } | ApproveError::UnknownTool { .. } | ApproveError::Pinned { .. }) => {}
                    Err(error) => {
                        if let Some(suppressed) = self.warnings.admit() {
                            tracing::warn!(server = %view.name(), tool = %tool.name, %error, suppressed, "cannot apply the fleet's approval");
                        }
                    }
                }
            }
        }
    }
}
