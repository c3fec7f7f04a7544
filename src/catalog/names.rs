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
//!
//! Policy globs (allow, deny, approve, quotas, profiles) are matched here only ([`ToolGlob`]),
//! against both names of a tool ([`ToolName`]): its qualified name and `{server}__{own name}`
//! (the name as its server spells it). Both begin with `{server}__`, and no other server's
//! names can (server names hold no `__` and end in no `_`): a glob whose server part is a
//! literal reaches that server's tools only, under either form.

use std::collections::HashMap;

use wildmatch::WildMatch;

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

/// One tool as policy judges it: its server, its own name there, and its qualified name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolName<'a> {
    server: &'a str,
    tool: &'a str,
    qualified: &'a str,
}

impl<'a> ToolName<'a> {
    /// The tool `tool` of `server`, served as `qualified` (which [`qualify`] made of the two).
    pub fn new(server: &'a str, tool: &'a str, qualified: &'a str) -> ToolName<'a> {
        ToolName { server, tool, qualified }
    }

    /// A qualified name whose tool no catalog at hand holds: judged by the name alone (its
    /// own name is taken to be the part after the server's).
    pub fn unresolved(qualified: &'a str) -> ToolName<'a> {
        let (server, tool) = match server_of(qualified) {
            Some(server) => (server, &qualified[server.len() + SEPARATOR.len()..]),
            None => ("", qualified),
        };
        ToolName { server, tool, qualified }
    }

    pub fn qualified(&self) -> &'a str {
        self.qualified
    }

    /// Whether the qualified name is `{server}__{tool}` as is (a name that needed no escaping).
    fn is_clean(&self) -> bool {
        self.qualified.strip_prefix(self.server).and_then(|rest| rest.strip_prefix(SEPARATOR)) == Some(self.tool)
    }

    /// What a decision about this tool may be cached under: the qualified name, and the own
    /// name when it differs (two tools may share a qualified name; see [`QualifiedIndex`]).
    pub fn key(&self) -> std::borrow::Cow<'a, str> {
        match self.is_clean() {
            true => std::borrow::Cow::Borrowed(self.qualified),
            false => std::borrow::Cow::Owned(format!("{}\0{}", self.qualified, self.tool)),
        }
    }

    /// The part of the qualified name after its server's.
    fn qualified_local(&self) -> &'a str {
        self.qualified.strip_prefix(self.server).and_then(|rest| rest.strip_prefix(SEPARATOR)).unwrap_or(self.qualified)
    }
}

/// A configured glob over tools, compiled: the one matcher of every policy list.
#[derive(Debug)]
pub struct ToolGlob {
    /// `Some`: a server's own list (`[servers.NAME] approve`), which reaches that server's tools
    /// only, by their own names (or the escaped part of their qualified names).
    server: Option<Box<str>>,
    glob: WildMatch,
}

impl ToolGlob {
    /// A glob over `SERVER__TOOL` names, as agents' lists and profiles take them.
    pub fn qualified(pattern: &str) -> ToolGlob {
        ToolGlob { server: None, glob: WildMatch::new(pattern) }
    }

    /// A glob in `server`'s own list, over that server's tool names.
    pub fn of_server(server: &str, pattern: &str) -> ToolGlob {
        ToolGlob { server: Some(server.into()), glob: WildMatch::new(pattern) }
    }

    pub fn matches(&self, name: &ToolName<'_>) -> bool {
        match &self.server {
            Some(server) => **server == *name.server && (self.glob.matches(name.tool) || self.glob.matches(name.qualified_local())),
            None => {
                self.glob.matches(name.qualified)
                    || (!name.is_clean()
                        && !name.server.is_empty()
                        && self.glob.matches(&format!("{}{SEPARATOR}{}", name.server, name.tool)))
            }
        }
    }
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

    /// Every glob reaches a tool by either of its names, and never another server's tools.
    #[test]
    fn a_glob_matches_either_name_of_a_tool_and_no_other_servers() {
        let refund_q = qualify("pay", "refund.now");
        let send_q = qualify("pay", "ns:send");
        let refund = ToolName::new("pay", "refund.now", &refund_q);
        let send = ToolName::new("pay", "ns:send", &send_q);
        let other_q = qualify("payroll", "refund.now");
        let other = ToolName::new("payroll", "refund.now", &other_q);
        let clean = ToolName::new("pay", "list", "pay__list");
        // A server's own list: its names as the server spells them, or as served.
        for pattern in ["refund.now", "refund*", &refund_q["pay__".len()..]] {
            let glob = ToolGlob::of_server("pay", pattern);
            assert!(glob.matches(&refund), "{pattern}");
            assert!(!glob.matches(&other) && !glob.matches(&clean), "{pattern}");
        }
        assert!(ToolGlob::of_server("pay", "ns:*").matches(&send));
        assert!(!ToolGlob::of_server("pay", "*").matches(&other), "a server's list never reaches another server");
        // Agents' lists: qualified names, or the server's prefix and the tool's own name.
        for pattern in [refund_q.as_str(), "pay__refund.now", "pay__refund*", "pay__*", "*__refund.now"] {
            assert!(ToolGlob::qualified(pattern).matches(&refund), "{pattern}");
        }
        for pattern in ["pay__refund.now", "pay__*", "refund*", "refund.now"] {
            assert!(!ToolGlob::qualified(pattern).matches(&other), "{pattern} reaches payroll");
        }
        assert!(!ToolGlob::qualified("refund*").matches(&refund), "a glob without the server part names servers");
        assert!(ToolGlob::qualified("pay__list").matches(&clean));
        let unresolved = ToolName::unresolved(&refund_q);
        assert!(ToolGlob::qualified(&refund_q).matches(&unresolved) && !ToolGlob::qualified("pay__refund.now").matches(&unresolved));
        assert_ne!(refund.key(), ToolName::new("pay", &refund_q["pay__".len()..], &refund_q).key(), "two tools, one qualified name");
    }

    #[test]
    fn the_server_part_is_recovered() {
        assert_eq!(server_of(&qualify("a_b", "_x__y")), Some("a_b"));
        assert_eq!(server_of(&qualify("srv", "tool.name")), Some("srv"));
        assert_eq!(server_of("noseparator"), None);
        assert_eq!(server_of("__x"), None);
    }
}
