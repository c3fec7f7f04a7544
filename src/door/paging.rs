//! Pages over one catalog snapshot, for both doors: where a page starts (bound to the revision
//! it was cut from, so that a page never mixes two catalogs) and the walk that fills it. Each
//! door keeps its own token format (a gRPC page token, an MCP cursor) and its own filters.

use crate::registry::{CatalogSnapshot, ServerView};

/// Where a page starts: the catalog revision it was cut from, a server's index in that
/// snapshot and a tool's in its generation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub revision: u64,
    pub server: usize,
    pub tool: usize,
}

impl Position {
    /// The first page of `snapshot`.
    pub fn start(snapshot: &CatalogSnapshot) -> Position {
        Position { revision: snapshot.revision, server: 0, tool: 0 }
    }

    /// `revision.server.tool`, what both doors' tokens carry after their own prefix.
    pub fn encode(&self) -> String {
        format!("{}.{}.{}", self.revision, self.server, self.tool)
    }

    /// The inverse of [`Position::encode`]; `None` for anything else.
    pub fn decode(text: &str) -> Option<Position> {
        let mut parts = text.split('.');
        let revision = parts.next()?.parse().ok()?;
        let server = parts.next()?.parse().ok()?;
        let tool = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some(Position { revision, server, tool })
    }
}

/// Walks `snapshot` (which `start` must come from) from `start`: of the servers `server` lets
/// through, every tool `include` accepts goes to `emit`, until `page_size` have; returns where
/// the next page starts, if anything is left. Cost is proportional to the tools walked, never
/// to the offset.
pub fn walk(
    snapshot: &CatalogSnapshot,
    start: Position,
    page_size: usize,
    mut server: impl FnMut(&ServerView) -> bool,
    mut include: impl FnMut(&ServerView, usize) -> bool,
    mut emit: impl FnMut(&ServerView, usize),
) -> Option<Position> {
    let mut taken = 0usize;
    for (ordinal, view) in snapshot.servers.values().enumerate().skip(start.server) {
        if !server(view) {
            continue;
        }
        let Some(generation) = &view.generation else { continue };
        let first = if ordinal == start.server { start.tool } else { 0 };
        for idx in first..generation.tools.len() {
            if !include(view, idx) {
                continue;
            }
            if taken == page_size {
                return Some(Position { revision: snapshot.revision, server: ordinal, tool: idx });
            }
            emit(view, idx);
            taken += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_and_reject_garbage() {
        let position = Position { revision: 42, server: 3, tool: 17 };
        assert_eq!(Position::decode(&position.encode()), Some(position));
        for bad in ["", "1.2", "1.2.3.4", "a.b.c", "-1.0.0", "1..2"] {
            assert_eq!(Position::decode(bad), None, "{bad}");
        }
    }
}
