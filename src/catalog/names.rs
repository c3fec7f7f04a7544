//! Agent-facing qualified tool names: `{server}__{tool}`, unique across servers, stable, and
//! within the function-name rules of the common LLM APIs (`[A-Za-z0-9_-]{1,64}`).
//!
//! Rules, in order:
//! 1. A tool name that already uses only letters, digits, `_` and `-`, and fits, is kept as is:
//!    `files__read_file`.
//! 2. Otherwise every other character becomes `_`, the name is cut to fit, and `_` plus the first
//!    8 hex digits of the SHA-256 of the *original* name is appended: `files__read_file_9c1d02ab`
//!    for `read.file`. The suffix depends on that tool's own name only, so no other tool, and no
//!    other server, can ever change it.
//!
//! Server names never contain `__` and never end in `_`, so the first `__` always ends the
//! server part: a qualified name maps back to exactly one server, and within it to one tool.

use std::collections::HashMap;

use crate::catalog::model::{Generation, sha256_hex};

pub const MAX_QUALIFIED_LEN: usize = 64;
pub const SEPARATOR: &str = "__";
const HASH_SUFFIX_LEN: usize = 8;

/// The qualified name of `tool` on `server`.
pub fn qualify(server: &str, tool: &str) -> String {
    let clean = !tool.is_empty() && tool.bytes().all(is_name_byte);
    let fits = server.len() + SEPARATOR.len() + tool.len() <= MAX_QUALIFIED_LEN;
    if clean && fits {
        return format!("{server}{SEPARATOR}{tool}");
    }
    let sanitized: String = tool.chars().map(|c| if c.is_ascii() && is_name_byte(c as u8) { c } else { '_' }).collect();
    let budget = MAX_QUALIFIED_LEN.saturating_sub(server.len() + SEPARATOR.len() + 1 + HASH_SUFFIX_LEN);
    let cut = &sanitized[..sanitized.len().min(budget)];
    let suffix = &sha256_hex(tool.as_bytes())[..HASH_SUFFIX_LEN];
    format!("{server}{SEPARATOR}{cut}_{suffix}")
}

/// The server part of a qualified name, if it has one.
pub fn server_of(qualified: &str) -> Option<&str> {
    qualified.split_once(SEPARATOR).map(|(server, _)| server).filter(|server| !server.is_empty())
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// The qualified names of one generation's tools, with a reverse index.
#[derive(Debug, Default)]
pub struct QualifiedIndex {
    /// Parallel to `Generation::tools`.
    names: Vec<String>,
    by_name: HashMap<String, usize>,
}

impl QualifiedIndex {
    pub fn build(server: &str, generation: &Generation) -> QualifiedIndex {
        let names: Vec<String> = generation.tools.iter().map(|tool| qualify(server, &tool.name)).collect();
        let mut by_name = HashMap::with_capacity(names.len());
        let mut collisions = Vec::new();
        for (idx, name) in names.iter().enumerate() {
            if by_name.insert(name.clone(), idx).is_some() {
                // Only a clean name that happens to equal another's hashed form can collide.
                collisions.push(name.as_str());
            }
        }
        if let Some(first) = collisions.first() {
            // One line per generation, however many a server crafted.
            tracing::warn!(server, collisions = collisions.len(), first = %first, "tools share a qualified name; the later ones are reachable by server and name only");
        }
        QualifiedIndex { names, by_name }
    }

    /// The qualified name of the tool at `idx` in the generation.
    pub fn name(&self, idx: usize) -> &str {
        &self.names[idx]
    }

    /// The generation index of the tool with this qualified name.
    pub fn position(&self, qualified: &str) -> Option<usize> {
        self.by_name.get(qualified).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        !name.is_empty() && name.len() <= MAX_QUALIFIED_LEN && name.bytes().all(is_name_byte)
    }

    #[test]
    fn clean_names_are_kept_and_others_get_a_stable_suffix() {
        assert_eq!(qualify("files", "read_file"), "files__read_file");
        let dotted = qualify("files", "read.file");
        assert!(dotted.starts_with("files__read_file_") && dotted.len() == "files__read_file_".len() + 8, "{dotted}");
        assert_ne!(dotted, qualify("files", "read/file"), "different originals never share a name");
        assert_eq!(dotted, qualify("files", "read.file"), "deterministic");
        for name in [qualify("s", "ünïcode tool"), qualify("s", ""), qualify(&"x".repeat(32), &"y".repeat(200)), dotted] {
            assert!(valid(&name), "{name:?}");
        }
    }

    #[test]
    fn the_server_part_is_recovered() {
        assert_eq!(server_of(&qualify("a_b", "_x__y")), Some("a_b"));
        assert_eq!(server_of(&qualify("srv", "tool.name")), Some("srv"));
        assert_eq!(server_of("noseparator"), None);
        assert_eq!(server_of("__x"), None);
    }
}
