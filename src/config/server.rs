//! `[servers.NAME]`: one server entry as written (the keys desktop MCP clients use, and
//! toolhost's own) and its conversion into a [`ServerSpec`], key by key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::sandbox::{self, RawSandbox, SandboxSpec};
use super::{
    AuditArguments, DAY, EnumerationLimits, HOUR, HttpSpec, IntegrityPolicy, KeyProblem, MAX_SERVER_NAME_LEN, MINUTE, ProtocolChoice,
    RestartPolicy, ServerSpec, StdioSpec, Transport, ValueError, access, auth, optional_duration, positive, registry,
};
use crate::secrets::Resolved;

/// One `[servers.NAME]` table: the `mcpServers` keys plus toolhost's own settings.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    // --- the keys desktop MCP clients use ---
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) args: Vec<String>,
    #[serde(default)]
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) cwd: Option<String>,
    pub(crate) url: Option<String>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    #[serde(rename = "type")]
    pub(crate) kind: Option<String>,
    // --- toolhost's settings ---
    /// Variables of the daemon's environment a stdio server also gets (beyond the base set).
    #[serde(default)]
    pub(crate) inherit_env: Vec<String>,
    /// What the audit trail keeps of a call's arguments: "none", "hash" or "full".
    pub(crate) audit_arguments: Option<String>,
    /// "accept" or "hold": a changed definition.
    pub(crate) changes: Option<String>,
    /// "accept" or "hold": a tool never approved.
    pub(crate) new_tools: Option<String>,
    /// TOOL = "sha256:…".
    #[serde(default)]
    pub(crate) pins: BTreeMap<String, String>,
    pub(crate) ca_file: Option<String>,
    /// How toolhost authorizes itself to an HTTP server.
    pub(crate) auth: Option<super::auth::RawAuth>,
    pub(crate) protocol: Option<String>,
    /// What makes this server the same server on every host of a fleet (default: its URL, or
    /// its command and arguments).
    pub(crate) fleet_identity: Option<String>,
    pub(crate) enabled: Option<bool>,
    pub(crate) request_timeout: Option<String>,
    pub(crate) enumeration_timeout: Option<String>,
    pub(crate) max_pages: Option<u32>,
    pub(crate) max_tools: Option<u32>,
    pub(crate) max_listing_bytes: Option<u64>,
    pub(crate) max_message_bytes: Option<u64>,
    pub(crate) shutdown_grace: Option<String>,
    pub(crate) max_concurrent_calls: Option<u32>,
    #[serde(default)]
    pub(crate) restart: RawRestart,
    /// A stdio server's sandbox: "on" (the default) or "off".
    pub(crate) sandbox: Option<String>,
    #[serde(default)]
    pub(crate) read: Vec<String>,
    #[serde(default)]
    pub(crate) write: Vec<String>,
    /// "none" (the default), "loopback", "all", or `{ allow = ["host[:port]", …] }`.
    pub(crate) network: Option<super::sandbox::RawNetwork>,
    /// A package launcher's registry besides its `network` (true, the default) or not (false).
    pub(crate) registry: Option<super::sandbox::RawRegistry>,
    pub(crate) limits: Option<super::sandbox::RawLimits>,
    /// Globs over this server's tool names whose calls wait for a person's approval, whoever calls.
    #[serde(default)]
    pub(crate) approve: Vec<String>,
    /// A stdio server's own data directory, kept across restarts and package updates: `true`
    /// (beside the homes) or an absolute path; `${data}` in its `env` names it.
    pub(crate) data: Option<super::sandbox::RawData>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRestart {
    pub(crate) initial_backoff: Option<String>,
    pub(crate) max_backoff: Option<String>,
    pub(crate) stable_after: Option<String>,
    pub(crate) crash_loop_after: Option<u32>,
}

impl RawServer {
    /// Its sandbox keys, as the sandbox takes them.
    fn sandbox_keys(&self) -> RawSandbox<'_> {
        RawSandbox {
            mode: self.sandbox.as_deref(),
            read: &self.read,
            write: &self.write,
            network: self.network.as_ref(),
            registry: self.registry.as_ref(),
            limits: self.limits.as_ref(),
        }
    }
}

/// A server entry and what its conversion needs besides: the configuration file's directory
/// (relative paths), the state directory (default token and data places) and its name.
pub(super) struct ServerEntry<'a> {
    pub(super) base: &'a Path,
    pub(super) state_dir: &'a Path,
    pub(super) name: &'a str,
    pub(super) raw: RawServer,
}

fn at<E: ToString>(key: &'static str) -> impl Fn(E) -> KeyProblem {
    move |problem| (key.to_owned(), problem.to_string())
}

/// Keys are named within the entry (`request_timeout`, `auth.grant`); the first problem wins,
/// in the order the keys are checked.
impl TryFrom<ServerEntry<'_>> for ServerSpec {
    type Error = KeyProblem;

    fn try_from(ServerEntry { base, state_dir, name, mut raw }: ServerEntry<'_>) -> Result<ServerSpec, KeyProblem> {
        let transport = transport(base, state_dir, name, &mut raw)?;
        if let Some(kind) = raw.kind.as_deref() {
            let expected: &[&str] = match transport {
                Transport::Stdio(_) => &["stdio"],
                Transport::Http(_) => &["http", "streamable-http", "streamableHttp", "sse"],
            };
            if !expected.contains(&kind) {
                return Err(("type".into(), format!("{kind:?} does not match the server's transport")));
            }
        }
        let limits = EnumerationLimits {
            max_pages: positive(raw.max_pages, 1_000).map_err(at("max_pages"))?,
            max_tools: positive(raw.max_tools, 100_000).map_err(at("max_tools"))?,
            max_bytes: positive(raw.max_listing_bytes, 256 * 1024 * 1024).map_err(at("max_listing_bytes"))?,
        };
        let max_message_bytes = positive(raw.max_message_bytes, 16 * 1024 * 1024).map_err(at("max_message_bytes"))?;
        let restart = RestartPolicy::try_from(&raw.restart)?;
        Ok(ServerSpec {
            transport,
            enabled: raw.enabled.unwrap_or(true),
            request_timeout: optional_duration(raw.request_timeout.as_deref(), Duration::from_secs(30), DAY)
                .map_err(at("request_timeout"))?,
            enumeration_timeout: optional_duration(raw.enumeration_timeout.as_deref(), Duration::from_secs(120), DAY)
                .map_err(at("enumeration_timeout"))?,
            limits,
            max_message_bytes: usize::try_from(max_message_bytes).map_err(|_| ("max_message_bytes".to_owned(), "too large".to_owned()))?,
            shutdown_grace: optional_duration(raw.shutdown_grace.as_deref(), Duration::from_secs(2), 10 * MINUTE)
                .map_err(at("shutdown_grace"))?,
            max_concurrent_calls: positive(raw.max_concurrent_calls, 16).map_err(at("max_concurrent_calls"))?,
            restart,
            protocol: match raw.protocol.as_deref() {
                None | Some("auto") => ProtocolChoice::Auto,
                Some("legacy") => ProtocolChoice::Legacy,
                Some("modern") => ProtocolChoice::Modern,
                Some(other) => return Err(("protocol".into(), format!("{other:?} is not one of \"auto\", \"legacy\", \"modern\""))),
            },
            audit_arguments: match raw.audit_arguments.as_deref() {
                None | Some("none") => AuditArguments::None,
                Some("hash") => AuditArguments::Hash,
                Some("full") => AuditArguments::Full,
                Some(other) => {
                    return Err(("audit_arguments".into(), format!("{other:?} is not one of \"none\", \"hash\", \"full\"")));
                }
            },
            integrity: integrity(raw.changes.as_deref(), raw.new_tools.as_deref(), raw.pins)?,
            fleet_identity: match raw.fleet_identity {
                Some(identity) if identity.trim().is_empty() || identity.len() > 512 => {
                    return Err(("fleet_identity".into(), "must be 1 to 512 characters".into()));
                }
                identity => identity,
            },
            approve: {
                for pattern in &raw.approve {
                    access::check_glob(pattern).map_err(at("approve"))?;
                }
                raw.approve
            },
        })
    }
}

/// `restart = { … }`; keys are named as in the server entry.
impl TryFrom<&RawRestart> for RestartPolicy {
    type Error = KeyProblem;

    fn try_from(raw: &RawRestart) -> Result<RestartPolicy, KeyProblem> {
        let restart = RestartPolicy {
            initial_backoff: optional_duration(raw.initial_backoff.as_deref(), Duration::from_millis(500), HOUR)
                .map_err(at("restart.initial_backoff"))?,
            max_backoff: optional_duration(raw.max_backoff.as_deref(), Duration::from_secs(60), DAY).map_err(at("restart.max_backoff"))?,
            stable_after: optional_duration(raw.stable_after.as_deref(), Duration::from_secs(60), DAY)
                .map_err(at("restart.stable_after"))?,
            crash_loop_after: positive(raw.crash_loop_after, 5).map_err(at("restart.crash_loop_after"))?,
        };
        if restart.max_backoff < restart.initial_backoff {
            return Err(("restart.max_backoff".into(), "must not be shorter than restart.initial_backoff".into()));
        }
        Ok(restart)
    }
}

/// `command` (stdio, with its sandbox) or `url` (HTTP), and the keys that go with each.
fn transport(base: &Path, state_dir: &Path, name: &str, raw: &mut RawServer) -> Result<Transport, KeyProblem> {
    let raw_sandbox = raw.sandbox_keys();
    let mut sandbox_spec = SandboxSpec::try_from((base, &raw_sandbox))?;
    let has_sandbox_keys = !raw_sandbox.is_empty();
    sandbox_spec.data = sandbox::data_dir(raw.data.as_ref(), state_dir, name)?.map(Box::new);
    if sandbox_spec.data.is_some() && raw.command.is_none() {
        return Err(("data".into(), "a data directory is a stdio server's (command), not a url's".into()));
    }
    match (raw.command.take(), raw.url.take()) {
        (Some(_), Some(_)) => Err(("url".into(), "give either command (stdio) or url (HTTP), not both".into())),
        (None, None) => Err(("command".into(), "missing: give command (stdio) or url (HTTP)".into())),
        (Some(command), None) => stdio(base, command, raw, sandbox_spec).map(Transport::Stdio),
        (None, Some(url)) => http(base, state_dir, name, url, raw, has_sandbox_keys).map(Transport::Http),
    }
}

fn stdio(base: &Path, command: String, raw: &mut RawServer, sandbox: SandboxSpec) -> Result<StdioSpec, KeyProblem> {
    if command.trim().is_empty() {
        return Err(("command".into(), "must not be empty".into()));
    }
    if !raw.headers.is_empty() || raw.ca_file.is_some() || raw.auth.is_some() {
        return Err(("headers".into(), "only HTTP servers (url) take headers, auth and ca_file".into()));
    }
    // A bare program name is looked up on PATH; a path is taken relative to the config file.
    let command = if command.contains('/') { base.join(&command) } else { PathBuf::from(command) };
    let env = resolve_env(std::mem::take(&mut raw.env), sandbox.data.as_deref())?;
    if let Some((fetcher, _)) = registry::fetcher(&command, &raw.args) {
        let settings = env.iter().map(|(name, value)| (name.as_str(), value.expose()));
        registry::registries(fetcher, settings).map_err(|error| (format!("env.{}", error.key()), error.to_string()))?;
    }
    for name in &raw.inherit_env {
        if name.is_empty() || name.contains('=') {
            return Err(("inherit_env".into(), format!("{name:?} is not an environment variable name")));
        }
    }
    Ok(StdioSpec {
        command,
        args: std::mem::take(&mut raw.args),
        env,
        inherit_env: std::mem::take(&mut raw.inherit_env),
        cwd: raw.cwd.take().map(|cwd| base.join(cwd)),
        sandbox,
    })
}

fn http(
    base: &Path,
    state_dir: &Path,
    name: &str,
    url: String,
    raw: &mut RawServer,
    has_sandbox_keys: bool,
) -> Result<HttpSpec, KeyProblem> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(("url".into(), format!("{url:?} is not an http:// or https:// URL")));
    }
    if !raw.args.is_empty() || !raw.env.is_empty() || raw.cwd.is_some() || !raw.inherit_env.is_empty() || has_sandbox_keys {
        return Err((
            "url".into(),
            "args, env, inherit_env, cwd and the sandbox (sandbox, read, write, network, registry, limits) apply to stdio servers (command), not to url".into(),
        ));
    }
    let headers = resolve_all(std::mem::take(&mut raw.headers), "headers")?;
    let auth = raw
        .auth
        .take()
        .map(|raw| auth::AuthSpec::try_from(auth::AuthEntry { raw, url: &url, base, state_dir, server: name }))
        .transpose()?;
    if auth.is_some() && headers.keys().any(|header| header.eq_ignore_ascii_case("authorization")) {
        return Err(("auth".into(), "give either auth or an Authorization header, not both".into()));
    }
    Ok(HttpSpec { url, headers, ca_file: raw.ca_file.take().map(|path| base.join(path)), auth })
}

/// `changes`, `new_tools` and `pins`.
fn integrity(changes: Option<&str>, new_tools: Option<&str>, pins: BTreeMap<String, String>) -> Result<IntegrityPolicy, KeyProblem> {
    Ok(IntegrityPolicy {
        hold_changes: hold_or_accept(changes).map_err(at("changes"))?,
        hold_new: hold_or_accept(new_tools).map_err(at("new_tools"))?,
        pins: pins
            .into_iter()
            .map(|(tool, pin)| match pin.strip_prefix("sha256:") {
                Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) => {
                    Ok((tool, hex.to_owned()))
                }
                _ => Err((format!("pins.{tool}"), format!("{pin:?} is not \"sha256:\" and 64 lower-case hex digits"))),
            })
            .collect::<Result<_, _>>()?,
    })
}

pub(super) fn check_name(name: &str) -> Result<(), ValueError> {
    let valid_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if name.is_empty() || name.len() > MAX_SERVER_NAME_LEN || !valid_chars {
        return Err(ValueError::ServerNameChars);
    }
    // The first "__" in a qualified tool name ends the server part (see catalog::names).
    if name.contains("__") || name.ends_with('_') {
        return Err(ValueError::ServerNameSeparator);
    }
    Ok(())
}

fn hold_or_accept(value: Option<&str>) -> Result<bool, ValueError> {
    match value {
        None | Some("accept") => Ok(false),
        Some("hold") => Ok(true),
        Some(other) => Err(ValueError::NotHoldOrAccept { text: other.to_owned() }),
    }
}

/// A stdio server's `env`: [`resolve_all`], with `${data}` its data directory's path (an entry
/// without `data` that names it is an error, not a variable looked up in the daemon's
/// environment).
fn resolve_env(values: BTreeMap<String, String>, data: Option<&sandbox::DataDir>) -> Result<BTreeMap<String, Resolved>, KeyProblem> {
    // Where the server finds it: its sandbox shows an operator's path where the operator's
    // links lead (`/srv` → `/data`), not through them.
    let seen = data.map(|data| if data.beside_homes { data.path.clone() } else { sandbox::real_or_written(&data.path) });
    let path = seen.as_ref().map(|path| path.to_str().ok_or_else(|| ("data".to_owned(), format!("{} is not UTF-8", path.display()))));
    let local = match path.transpose()? {
        Some(path) => vec![("data", path)],
        None => Vec::new(),
    };
    values
        .into_iter()
        .map(|(name, value)| {
            if local.is_empty() && value.contains("${data}") {
                let why = "${data} is the server's data directory, and this entry has none: add data = true (or data = \"/a/path\")";
                return Err((format!("env.{name}"), why.to_owned()));
            }
            match crate::secrets::resolve_with(&value, &local) {
                Ok(resolved) => Ok((name, resolved)),
                Err(problem) => Err((format!("env.{name}"), problem.to_string())),
            }
        })
        .collect()
}

/// Resolves the `${…}` references of every value, naming the key of one that cannot be.
fn resolve_all(values: BTreeMap<String, String>, table: &str) -> Result<BTreeMap<String, Resolved>, KeyProblem> {
    values
        .into_iter()
        .map(|(name, value)| match crate::secrets::resolve(&value) {
            Ok(resolved) => Ok((name, resolved)),
            Err(problem) => Err((format!("{table}.{name}"), problem.to_string())),
        })
        .collect()
}
