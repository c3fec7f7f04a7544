//! `[mcp]` validation: the endpoint's listeners, page size, extra allowed origins and profiles.

use std::collections::BTreeMap;
use std::path::Path;

use super::raw::{OneOrMany, RawMcp, RawProfile};
use super::{KeyProblem, Listener, McpConfig, ProfileConfig, ServerSpec, parse_listener};

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

/// The listeners of an HTTP front door without TLS (the MCP endpoint, the console): each
/// address once; `no_tls` says why a `tls` table is refused.
pub(super) fn http_listeners(base: &Path, raw: Option<OneOrMany>, no_tls: &str) -> Result<Vec<Listener>, KeyProblem> {
    let entries = match raw {
        None => Vec::new(),
        Some(OneOrMany::One(entry)) => vec![entry],
        Some(OneOrMany::Many(entries)) => entries,
    };
    let mut listen: Vec<Listener> = Vec::with_capacity(entries.len());
    for (idx, entry) in entries.iter().enumerate() {
        let listener = parse_listener(base, entry).map_err(|problem| (format!("listen[{idx}]"), problem))?;
        if listener.tls.is_some() {
            return Err((format!("listen[{idx}]"), no_tls.to_owned()));
        }
        if listen.iter().any(|other| other.addr == listener.addr) {
            return Err((format!("listen[{idx}]"), "names the same address twice".into()));
        }
        listen.push(listener);
    }
    Ok(listen)
}

/// Browser origins a listener admits besides loopback ones, checked and normalized (lower case,
/// no trailing slash).
pub(super) fn origins(raw: &[String]) -> Result<Vec<String>, KeyProblem> {
    for (idx, origin) in raw.iter().enumerate() {
        let rest = origin.strip_prefix("http://").or_else(|| origin.strip_prefix("https://"));
        let valid =
            rest.is_some_and(|rest| !rest.is_empty() && !rest.trim_end_matches('/').contains('/') && !rest.contains(char::is_whitespace));
        if !valid {
            return Err((format!("allowed_origins[{idx}]"), format!("{origin:?} is not an origin like \"https://app.example\"")));
        }
    }
    Ok(raw.iter().map(|o| o.trim_end_matches('/').to_ascii_lowercase()).collect())
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
