//! `[mcp]` validation: the endpoint's listeners, page size, extra allowed origins and profiles.

use std::collections::BTreeMap;
use std::path::Path;

use super::listeners::{http_listeners, origins};
use super::raw::{RawMcp, RawProfile};
use super::{KeyProblem, McpConfig, ProfileConfig, ServerSpec};

const DEFAULT_PAGE_SIZE: u32 = 500;
const MAX_PAGE_SIZE: u32 = 10_000;
const MAX_PROFILE_NAME_LEN: usize = 64;

pub(super) fn validate(base: &Path, raw: RawMcp, servers: &BTreeMap<String, ServerSpec>) -> Result<McpConfig, KeyProblem> {
    let listen = http_listeners(base, raw.listen, "the MCP endpoint does not serve TLS yet: use a loopback address or a unix: socket")?;
    let page_size = match raw.page_size {
        None => DEFAULT_PAGE_SIZE,
        Some(n) if (1..=MAX_PAGE_SIZE).contains(&n) => n,
        Some(n) => return Err(("page_size".into(), format!("{n} is not between 1 and {MAX_PAGE_SIZE}"))),
    };
    let allowed_origins = origins(&raw.allowed_origins)?;
    let mut profiles = BTreeMap::new();
    for (name, profile) in raw.profiles {
        let profile = validate_profile(&name, profile, servers).map_err(|(key, problem)| (format!("profiles.{name}.{key}"), problem))?;
        profiles.insert(name, profile);
    }
    if !profiles.is_empty() && listen.is_empty() {
        return Err(("listen".into(), "profiles are configured but the endpoint listens nowhere".into()));
    }
    Ok(McpConfig { listen, page_size: usize::try_from(page_size).unwrap_or(usize::MAX), allowed_origins, profiles })
}

fn validate_profile(name: &str, raw: RawProfile, servers: &BTreeMap<String, ServerSpec>) -> Result<ProfileConfig, KeyProblem> {
    let valid_name =
        !name.is_empty() && name.len() <= MAX_PROFILE_NAME_LEN && name.chars().all(|c| c.is_ascii_alphanumeric() || "_-".contains(c));
    if !valid_name {
        return Err((String::new(), format!("a profile name is 1 to {MAX_PROFILE_NAME_LEN} letters, digits, '_' or '-'")));
    }
    let lazy = raw.lazy.unwrap_or(false);
    if raw.tools.is_empty() && !lazy {
        return Err(("tools".into(), "lists no tools (globs over qualified names, like \"files__*\")".into()));
    }
    if raw.find.is_some() && !lazy {
        return Err(("find".into(), "applies to lazy profiles only (lazy = true)".into()));
    }
    let find = raw.find.unwrap_or_else(|| vec!["*".to_owned()]);
    for pattern in &find {
        super::access::check_tool_pattern(pattern, servers).map_err(|problem| ("find".to_owned(), problem))?;
    }
    for pattern in &raw.tools {
        super::access::check_tool_pattern(pattern, servers).map_err(|problem| ("tools".to_owned(), problem))?;
    }
    let original_names = match raw.names.as_deref() {
        None | Some("qualified") => None,
        Some("original") => {
            // A server's own names are unique only within that server: the profile must name one.
            let mut named = raw.tools.iter().map(|pattern| pattern.split_once("__").map(|(server, _)| server));
            let first = named.next().flatten();
            match first {
                Some(server) if !server.contains(['*', '?']) && named.all(|other| other == Some(server)) => Some(server.to_owned()),
                _ => {
                    return Err((
                        "names".into(),
                        "\"original\" needs every tools pattern to name the same single server (\"SERVER__*\")".into(),
                    ));
                }
            }
        }
        Some(other) => return Err(("names".into(), format!("{other:?} is not \"qualified\" or \"original\""))),
    };
    if lazy && original_names.is_some() {
        return Err(("lazy".into(), "a lazy profile reaches tools by qualified name: it cannot also use names = \"original\"".into()));
    }
    Ok(ProfileConfig { tools: raw.tools, original_names, lazy: lazy.then_some(find) })
}
