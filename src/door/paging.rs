//! Pages over one catalog snapshot, for both doors: where a page starts (bound to the revision
//! it was cut from, so that a page never mixes two catalogs), the walk that fills it, and the
//! token that carries the position, bound to who asked and how ([`Binding`]): a gRPC page token
//! or an MCP cursor is useless to another caller, or to the same caller with other filters.

use super::view::{Catalog, Server, Tool};
use crate::digest::sha256_hex;

/// Where a page starts: the catalog revision it was cut from, a server's index in that
/// snapshot and a tool's in its generation.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub revision: u64,
    pub server: usize,
    pub tool: usize,
}

impl Position {
    /// The first page of `catalog`.
    pub fn start(catalog: &Catalog) -> Position {
        Position { revision: catalog.revision(), server: 0, tool: 0 }
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

/// Who a page token was issued to and for which view (the agent, its filters or profile): a
/// digest, so that the token says nothing of either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding(String);

impl Binding {
    /// Bound to each of `parts`, in order.
    #[must_use]
    pub fn of(parts: &[&str]) -> Binding {
        let mut text = String::new();
        for part in parts {
            // Length-prefixed: ("ab", "c") and ("a", "bc") bind differently.
            text.push_str(&format!("{}:{part}|", part.len()));
        }
        Binding(sha256_hex(text.as_bytes())[..12].to_owned())
    }

    /// `BINDING.REVISION.SERVER.TOOL`, what both doors' tokens carry after their own prefix.
    #[must_use]
    pub fn token(&self, position: Position) -> String {
        format!("{}.{}", self.0, position.encode())
    }

    /// Where `token` resumes, if it is one of this binding's.
    ///
    /// # Errors
    /// [`TokenError`]: not a token at all, or one issued to another caller or view.
    pub fn resume(&self, token: &str) -> Result<Position, TokenError> {
        let (binding, position) = token.split_once('.').ok_or(TokenError::Malformed)?;
        let position = Position::decode(position).ok_or(TokenError::Malformed)?;
        if binding != self.0 {
            return Err(TokenError::OtherCaller);
        }
        Ok(position)
    }
}

/// Why a page token is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("not a page token toolhost issued")]
    Malformed,
    #[error("issued to another caller, or for other filters")]
    OtherCaller,
}

/// Walks `catalog` (which `start` must come from) from `start`: of the servers `server` lets
/// through, every tool `include` accepts goes to `emit`, until `page_size` have; returns where
/// the next page starts, if anything is left. Cost is proportional to the tools walked, never
/// to the offset.
pub fn walk(
    catalog: &Catalog,
    start: Position,
    page_size: usize,
    mut server: impl FnMut(Server<'_>) -> bool,
    mut include: impl FnMut(Tool<'_>) -> bool,
    mut emit: impl FnMut(Tool<'_>),
) -> Option<Position> {
    let mut taken = 0usize;
    for (ordinal, view) in catalog.servers().enumerate().skip(start.server) {
        if !server(view) {
            continue;
        }
        let first = if ordinal == start.server { start.tool } else { 0 };
        // By index from `first`: a resumed page costs the tools it walks, never the offset.
        for tool in (first..view.tool_count()).filter_map(|idx| view.tool(idx)) {
            if !include(tool) {
                continue;
            }
            if taken == page_size {
                return Some(Position { revision: catalog.revision(), server: ordinal, tool: tool.idx() });
            }
            emit(tool);
            taken += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_resumes_only_for_the_binding_it_was_issued_to() {
        let position = Position { revision: 9, server: 1, tool: 5 };
        let alice = Binding::of(&["alice", "profile-a"]);
        let token = alice.token(position);
        assert_eq!(alice.resume(&token), Ok(position));
        for other in [Binding::of(&["bob", "profile-a"]), Binding::of(&["alice", "profile-b"]), Binding::of(&["alic", "eprofile-a"])] {
            assert_eq!(other.resume(&token), Err(TokenError::OtherCaller));
        }
        for bad in ["", "abc", "abc.1.2", &format!("{token}.4"), "x.a.b.c"] {
            assert_eq!(alice.resume(bad), Err(TokenError::Malformed), "{bad}");
        }
    }

    #[test]
    fn positions_round_trip_and_reject_garbage() {
        let position = Position { revision: 42, server: 3, tool: 17 };
        assert_eq!(Position::decode(&position.encode()), Some(position));
        for bad in ["", "1.2", "1.2.3.4", "a.b.c", "-1.0.0", "1..2"] {
            assert_eq!(Position::decode(bad), None, "{bad}");
        }
    }
}
