//! `[mcp]`: the endpoint's listeners, page size, extra allowed origins and profiles, as written
//! and as validated.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::listeners::{Listener, OneOrMany, http_listeners, origins};
use super::{KeyProblem, ServerSpec};

const DEFAULT_PAGE_SIZE: u32 = 500;
const MAX_PAGE_SIZE: u32 = 10_000;
const MAX_PROFILE_NAME_LEN: usize = 64;

/// `[mcp]`: the MCP endpoint agents connect to.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcp {
    pub(crate) listen: Option<OneOrMany>,
    pub(crate) page_size: Option<u32>,
    #[serde(default)]
    pub(crate) allowed_origins: Vec<String>,
    #[serde(default)]
    pub(crate) profiles: BTreeMap<String, RawProfile>,
}

/// `[mcp.profiles.NAME]`: a subset of the catalog served at `/mcp/NAME`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProfile {
    #[serde(default)]
    pub(crate) tools: Vec<String>,
    pub(crate) names: Option<String>,
    /// Lazy exposure: the model sees `tools` plus `find_tools` and `call_tool`.
    pub(crate) lazy: Option<bool>,
    /// What `find_tools` and `call_tool` reach (globs over qualified names; default everything).
    pub(crate) find: Option<Vec<String>>,
}

/// `[mcp]`: the MCP endpoint (off when it listens nowhere).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct McpConfig {
    /// TCP listeners serve Streamable HTTP at `/mcp`; Unix sockets speak newline-delimited JSON-RPC.
    pub listen: Vec<Listener>,
    /// Tools per `tools/list` page.
    pub page_size: usize,
    /// Browser origins allowed besides loopback ones (lower case, no trailing slash).
    pub allowed_origins: Vec<String>,
    pub profiles: BTreeMap<String, ProfileConfig>,
}

/// `[mcp.profiles.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileConfig {
    /// Globs over qualified names.
    pub tools: Vec<String>,
    /// `names = "original"`: the one server whose own tool names the profile exposes.
    pub original_names: Option<String>,
    /// `lazy = true`: the globs `find_tools` and `call_tool` reach (`find`, default everything).
    pub lazy: Option<Vec<String>>,
}

/// `[mcp]`, its listeners taken against `base` and its profiles' globs against the servers.
impl TryFrom<(&Path, RawMcp, &BTreeMap<String, ServerSpec>)> for McpConfig {
    type Error = KeyProblem;

    fn try_from((base, raw, servers): (&Path, RawMcp, &BTreeMap<String, ServerSpec>)) -> Result<McpConfig, KeyProblem> {
        validate(base, raw, servers)
    }
}

fn validate(base: &Path, raw: RawMcp, servers: &BTreeMap<String, ServerSpec>) -> Result<McpConfig, KeyProblem> {
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
        super::access::check_tool_pattern(pattern, servers).map_err(|problem| ("find".to_owned(), problem.to_string()))?;
    }
    for pattern in &raw.tools {
        super::access::check_tool_pattern(pattern, servers).map_err(|problem| ("tools".to_owned(), problem.to_string()))?;
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
