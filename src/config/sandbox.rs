//! A stdio server's sandbox settings (`sandbox`, `read`, `write`, `network`, `limits`), and the
//! daemon's private places that no sandbox may show.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::sandbox::{Limits, Network};

/// `[servers.NAME]`'s sandbox, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxSpec {
    /// `sandbox = "off"` turns it off (logged at WARN at every start).
    pub enabled: bool,
    /// Paths visible read-only, besides the system, the command and its arguments' files.
    pub read: Vec<PathBuf>,
    /// Paths visible and writable.
    pub write: Vec<PathBuf>,
    pub network: Network,
    /// Whether the entry set `network` (else a package launcher gets its registry).
    pub network_given: bool,
    /// `registry`: whether a package launcher reaches the registries its settings name besides
    /// its `network` (unset or an allow-list); false refuses them (`upstream::confinement::egress`).
    pub registry: bool,
    /// With `network = { allow = [...] }`: the hosts its egress proxy reaches.
    pub allow: Vec<HostPattern>,
    pub limits: Limits,
    /// The daemon's private places ([`super::Config::private`]), which it must never show.
    pub hidden: Vec<PathBuf>,
    /// Its own persistent home ([`super::Config::homes`]): `HOME` and the XDG directories,
    /// owned by the uid it runs as, so launcher caches work and survive restarts.
    pub home: Option<PathBuf>,
    /// Every place some server of this daemon can write (every write grant, the homes), where
    /// a path is granted only as written, never through a link a server planted.
    pub server_writable: ServerWritable,
    /// `data`: its own data directory, writable, made at its start and kept (also with the
    /// sandbox off); `${data}` in its `env` names it.
    /// (Boxed: rare, and the entry is kept small.)
    pub data: Option<Box<DataDir>>,
}

/// A server's data directory: where its entry's `data` puts it.
#[derive(Debug, Clone, PartialEq)]
pub struct DataDir {
    pub path: PathBuf,
    /// `data = true`: beside its home ([`data_beside_homes`], in the homes' private directory,
    /// shown to its server alone); else the operator's path, granted like a `write` grant.
    pub beside_homes: bool,
}

/// `data = true | false | "/path"`, as written.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawData {
    Flag(bool),
    Path(String),
}

/// Where `data = true` puts the server `name`'s data directory: `servers/NAME.data/` beside
/// its home `servers/NAME/` (no server name holds a `.`), so that a wiped home or cache never
/// takes it, in the homes' directory no other server sees.
pub fn data_beside_homes(store_dir: &Path, name: &str) -> PathBuf {
    store_dir.join("servers").join(format!("{name}.data"))
}

/// A `data` path of the operator's is refused inside one of the daemon's private places (the
/// server would own it) or above one (it could rename the place away), as a `write` grant is.
pub(crate) fn check_data_places(config: &super::Config) -> Result<(), (String, String)> {
    for (name, server) in &config.servers {
        let super::Transport::Stdio(stdio) = &server.transport else { continue };
        let Some(data) = stdio.sandbox.data.as_ref().filter(|data| !data.beside_homes) else { continue };
        let private = config.private.iter().map(|place| lexical(place));
        if let Some(place) = private.clone().find(|place| data.path.starts_with(place) || place.starts_with(&data.path)) {
            let how = if data.path.starts_with(&place) { "lies inside" } else { "holds" };
            return Err((
                format!("servers.{name}.data"),
                format!(
                    "{} {how} {}, one of the daemon's private places: name a directory apart from it",
                    data.path.display(),
                    place.display()
                ),
            ));
        }
    }
    Ok(())
}

/// `data` of the server `name`: `true` is `servers/NAME.data` beside its home; a path must be absolute
/// (or `~/…`), below a top-level directory, and no home itself, since the server's uid is given
/// the directory.
pub(crate) fn data_dir(raw: Option<&RawData>, store_dir: &Path, name: &str) -> Result<Option<DataDir>, (String, String)> {
    let problem = |why: String| ("data".to_owned(), why);
    let text = match raw {
        None | Some(RawData::Flag(false)) => return Ok(None),
        Some(RawData::Flag(true)) => return Ok(Some(DataDir { path: data_beside_homes(store_dir, name), beside_homes: true })),
        Some(RawData::Path(text)) => text.trim(),
    };
    let path = lexical(&expand_home(text));
    if !path.is_absolute() || text.contains("${") {
        return Err(problem(format!("{text:?}: give true (a directory beside the store) or an absolute path")));
    }
    let depth = path.components().filter(|part| matches!(part, std::path::Component::Normal(_))).count();
    let a_home =
        path.parent() == Some(Path::new("/home")) || std::env::var_os("HOME").is_some_and(|home| lexical(Path::new(&home)) == path);
    if depth < 2 || a_home {
        return Err(problem(format!(
            "{text:?} is / , a top-level directory or a home, which the server's uid would be given: name a directory of its own below it"
        )));
    }
    Ok(Some(DataDir { path, beside_homes: false }))
}

/// The places servers write, the same for every server: shared, and no part of what makes one
/// server's entry changed (a write grant added to one server restarts no other).
#[derive(Debug, Clone, Default)]
pub struct ServerWritable(pub std::sync::Arc<[PathBuf]>);

impl PartialEq for ServerWritable {
    fn eq(&self, _: &ServerWritable) -> bool {
        true
    }
}

impl ServerWritable {
    /// Whether `path` (absolute) lies in one of these places, `..` taken as written.
    pub fn holds(&self, path: &Path) -> bool {
        let lexical = lexical(path);
        self.0.iter().any(|place| lexical.starts_with(place))
    }
}

/// `path` with `.` and `..` folded as written, without asking the filesystem (which would
/// follow links).
pub fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut folded = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                folded.pop();
            }
            Component::CurDir => {}
            other => folded.push(other),
        }
    }
    folded
}

impl Default for SandboxSpec {
    fn default() -> SandboxSpec {
        SandboxSpec {
            enabled: true,
            read: Vec::new(),
            write: Vec::new(),
            network: Network::None,
            network_given: false,
            registry: true,
            allow: Vec::new(),
            limits: Limits::default(),
            hidden: Vec::new(),
            home: None,
            server_writable: ServerWritable::default(),
            data: None,
        }
    }
}

/// `limits = { … }`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    memory: Option<String>,
    processes: Option<u32>,
    open_files: Option<u32>,
    cpu_time: Option<String>,
    tmp: Option<String>,
}

/// `network`: a mode's name, or the hosts it may reach through the daemon's egress proxy.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawNetwork {
    Mode(String),
    Allow { allow: Vec<String> },
}

/// `registry`: a boolean; anything else is kept to be named in its error.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawRegistry {
    Flag(bool),
    Other(toml::Value),
}

/// The raw keys, as `RawServer` holds them.
pub(crate) struct RawSandbox<'a> {
    pub(crate) mode: Option<&'a str>,
    pub(crate) read: &'a [String],
    pub(crate) write: &'a [String],
    pub(crate) network: Option<&'a RawNetwork>,
    pub(crate) registry: Option<&'a RawRegistry>,
    pub(crate) limits: Option<&'a RawLimits>,
}

impl RawSandbox<'_> {
    pub(crate) fn is_empty(&self) -> bool {
        self.mode.is_none()
            && self.read.is_empty()
            && self.write.is_empty()
            && self.network.is_none()
            && self.registry.is_none()
            && self.limits.is_none()
    }
}

/// `registry` against `network`: a launcher's registry is reached through the proxy, so it goes
/// with `network` unset or an allow-list. `"none"` and `"loopback"` stand as written (no proxy,
/// so `registry = true` asks for what they refuse); `"all"` reaches every host (so
/// `registry = false` cannot narrow it). Those two contradictions are errors; the rest is
/// default or redundant.
fn registry_key(raw: Option<&RawRegistry>, network: Option<&RawNetwork>) -> Result<bool, (String, String)> {
    let wanted = match raw {
        None => return Ok(true),
        Some(RawRegistry::Flag(flag)) => *flag,
        Some(RawRegistry::Other(other)) => {
            let shown = match other {
                toml::Value::String(text) => format!("{text:?}"),
                other => format!("this {}", other.type_str()),
            };
            return Err((
                "registry".into(),
                format!(
                    "{shown} is not a boolean: use true (the default: a package launcher reaches its registry besides network) or false"
                ),
            ));
        }
    };
    let mode = match network {
        Some(RawNetwork::Mode(mode)) => mode.as_str(),
        _ => return Ok(wanted),
    };
    match (mode, wanted) {
        ("none" | "loopback", true) => Err((
            "registry".into(),
            format!(
                "registry = true with network = \"{mode}\": that network has no way out to a registry; give network = {{ allow = [...] }} \
                 (the registry is reached besides) or leave network unset (the registry alone)"
            ),
        )),
        ("all", false) => Err((
            "registry".into(),
            "registry = false with network = \"all\": every host is reached, the registry too; narrow it with network = { allow = [...] }"
                .into(),
        )),
        _ => Ok(wanted),
    }
}

/// Validates the keys; paths are taken relative to the configuration file's directory.
pub(crate) fn validate(base: &Path, raw: &RawSandbox<'_>) -> Result<SandboxSpec, (String, String)> {
    let enabled = match raw.mode {
        None | Some("on") => true,
        Some("off") => false,
        Some(other) => return Err(("sandbox".into(), format!("{other:?}: use \"on\" (the default) or \"off\""))),
    };
    let (network, allow) = match raw.network {
        None => (Network::None, Vec::new()),
        Some(RawNetwork::Mode(mode)) => match mode.as_str() {
            "none" => (Network::None, Vec::new()),
            "loopback" => (Network::Loopback, Vec::new()),
            "all" => (Network::All, Vec::new()),
            other => {
                return Err((
                    "network".into(),
                    format!("{other:?}: use \"none\" (the default), \"loopback\", \"all\" or {{ allow = [\"host:port\", …] }}"),
                ));
            }
        },
        Some(RawNetwork::Allow { allow }) => {
            let patterns = allow
                .iter()
                .enumerate()
                .map(|(idx, text)| HostPattern::parse(text).map_err(|problem| (format!("network.allow[{idx}]"), problem)))
                .collect::<Result<Vec<_>, _>>()?;
            if patterns.is_empty() || patterns.len() > MAX_ALLOWED {
                return Err(("network.allow".into(), format!("give between 1 and {MAX_ALLOWED} hosts (for none, network = \"none\")")));
            }
            (Network::Proxied, patterns)
        }
    };
    let paths = |key: &str, list: &[String]| -> Result<Vec<PathBuf>, (String, String)> {
        list.iter()
            .map(|path| match path.trim() {
                "" => Err((key.to_owned(), "a path must not be empty".to_owned())),
                path => Ok(base.join(expand_home(path))),
            })
            .collect()
    };
    let registry = registry_key(raw.registry, raw.network)?;
    let read = paths("read", raw.read)?;
    let write = paths("write", raw.write)?;
    let defaults = Limits::default();
    let limits = match raw.limits {
        None => defaults,
        Some(limits) => Limits {
            memory_bytes: size(limits.memory.as_deref(), defaults.memory_bytes, 16 << 20).map_err(|p| ("limits.memory".to_owned(), p))?,
            processes: at_least(limits.processes, defaults.processes, 2).map_err(|p| ("limits.processes".to_owned(), p))?,
            open_files: at_least(limits.open_files, defaults.open_files, 16).map_err(|p| ("limits.open_files".to_owned(), p))?,
            cpu_seconds: match limits.cpu_time.as_deref() {
                None => defaults.cpu_seconds,
                Some(text) => humantime::parse_duration(text)
                    .ok()
                    .filter(|time| *time >= Duration::from_secs(1))
                    .map(|time| time.as_secs())
                    .ok_or_else(|| ("limits.cpu_time".to_owned(), format!("{text:?} is not a duration of at least 1s (\"1h\")")))?,
            },
            tmp_bytes: size(limits.tmp.as_deref(), defaults.tmp_bytes, 1 << 20).map_err(|p| ("limits.tmp".to_owned(), p))?,
        },
    };
    Ok(SandboxSpec {
        enabled,
        read,
        write,
        network,
        network_given: raw.network.is_some(),
        registry,
        allow,
        limits,
        hidden: Vec::new(),
        home: None,
        server_writable: ServerWritable::default(),
        data: None,
    })
}

/// Allowed hosts, at most: a server's way out is meant to be narrow.
const MAX_ALLOWED: usize = 64;

/// One `network.allow` entry: a host name (`api.github.com`), every name below a domain
/// (`*.example.com`, not the domain itself) or an IP address (`10.0.0.5`, `[2001:db8::1]`),
/// and a port (443 when none is given).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPattern {
    host: HostMatch,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum HostMatch {
    Name(String),
    /// `*.suffix`: the suffix with its leading dot.
    Below(String),
    Address(std::net::IpAddr),
}

impl HostPattern {
    /// Parses `host[:port]`.
    ///
    /// # Errors
    /// What is wrong with it, for the key's error.
    pub fn parse(text: &str) -> Result<HostPattern, String> {
        let text = text.trim();
        let explain = || format!("{text:?} is not host[:port] (\"api.github.com:443\", \"*.example.com\", \"10.0.0.5:8080\")");
        let (host, port) = match text.strip_prefix('[') {
            Some(rest) => {
                let (address, after) = rest.split_once(']').ok_or_else(explain)?;
                (address, after.strip_prefix(':'))
            }
            None => match text.rsplit_once(':') {
                Some((host, port)) if !host.contains(':') => (host, Some(port)),
                Some(_) => (text, None),
                None => (text, None),
            },
        };
        let port = match port {
            None => 443,
            Some(port) => port.parse::<u16>().ok().filter(|port| *port > 0).ok_or_else(explain)?,
        };
        if let Ok(address) = host.parse::<std::net::IpAddr>() {
            return Ok(HostPattern { host: HostMatch::Address(address), port });
        }
        let host = host.to_ascii_lowercase();
        let (wild, name) = match host.strip_prefix("*.") {
            Some(name) => (true, name),
            None => (false, host.as_str()),
        };
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(explain());
        }
        let host = if wild { HostMatch::Below(format!(".{name}")) } else { HostMatch::Name(name.to_owned()) };
        Ok(HostPattern { host, port })
    }

    /// Whether a CONNECT to `host:port` is allowed by this entry.
    #[must_use]
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if port != self.port {
            return false;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']').trim_end_matches('.').to_ascii_lowercase();
        match &self.host {
            HostMatch::Name(name) => host == *name,
            HostMatch::Below(suffix) => host.ends_with(suffix.as_str()) && host.len() > suffix.len(),
            HostMatch::Address(address) => host.parse::<std::net::IpAddr>().is_ok_and(|asked| asked == *address),
        }
    }

    /// Whether the entry names an address itself (which may then be a private one).
    #[must_use]
    pub fn is_address(&self) -> bool {
        matches!(self.host, HostMatch::Address(_))
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            HostMatch::Name(name) => write!(f, "{name}:{}", self.port),
            HostMatch::Below(suffix) => write!(f, "*{suffix}:{}", self.port),
            HostMatch::Address(std::net::IpAddr::V6(address)) => write!(f, "[{address}]:{}", self.port),
            HostMatch::Address(address) => write!(f, "{address}:{}", self.port),
        }
    }
}

fn expand_home(path: &str) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

fn at_least(value: Option<u32>, default: u32, floor: u32) -> Result<u32, String> {
    match value {
        None => Ok(default),
        Some(value) if value >= floor => Ok(value),
        Some(value) => Err(format!("{value} is below the smallest useful value, {floor}")),
    }
}

/// `"512MiB"`, `"2GiB"`, `"64M"`, or a number of bytes.
fn size(text: Option<&str>, default: u64, floor: u64) -> Result<u64, String> {
    let Some(text) = text else { return Ok(default) };
    let trimmed = text.trim();
    let digits = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" | "k" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => return Err(format!("{text:?} is not a size (\"512MiB\", \"2GiB\")")),
    };
    let bytes = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("{text:?} is not a size (\"512MiB\", \"2GiB\")"))?;
    if bytes < floor {
        return Err(format!("{text:?} is below the smallest useful size, {} MiB", floor >> 20));
    }
    Ok(bytes)
}

/// The daemon's private places, for `Config::private`: its state and runtime directories, the
/// service manager's credentials, this file, the store and its journals, its sockets, its TLS
/// and OAuth files, and every secret file the text names.
pub(crate) fn private_places(config: &super::Config, text: &str) -> Vec<PathBuf> {
    let mut places = vec![super::places::state_dir(), super::places::runtime_dir(), config.source.clone()];
    places.extend(std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from));
    let store = &config.store.path;
    places.push(store.clone());
    // The servers' homes, beside the store: a grant of the store's directory (or one above it)
    // must not show one server another's home; each still sees its own.
    places.push(config.homes());
    // The audit trail's signing key: beside the store, or where the operator put it.
    places.extend(store.parent().map(|dir| dir.join("audit.key")));
    places.push(config.audit.key_place(store).path);
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = store.as_os_str().to_owned();
        name.push(suffix);
        places.push(PathBuf::from(name));
    }
    for listener in config.grpc.listen.iter().chain(&config.mcp.listen) {
        if let super::ListenAddr::Unix(path) = &listener.addr {
            places.push(path.clone());
        }
        if let Some(tls) = &listener.tls {
            places.extend([tls.cert.clone(), tls.key.clone()]);
        }
    }
    for server in config.servers.values() {
        if let super::Transport::Http(http) = &server.transport
            && let Some(super::auth::AuthSpec::OAuth(oauth)) = &http.auth
        {
            places.push(oauth.token_file.clone());
        }
    }
    places.extend(secret_files(text));
    places.sort();
    places.dedup();
    places
}

/// Every `${file:PATH}` the configuration text refers to: another server's secret.
pub(crate) fn secret_files(text: &str) -> Vec<PathBuf> {
    text.match_indices("${file:")
        .filter_map(|(at, marker)| {
            let rest = &text[at + marker.len()..];
            rest.find('}').map(|end| PathBuf::from(&rest[..end]))
        })
        .filter(|path| path.is_absolute())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(size(Some("512MiB"), 0, 0), Ok(512 << 20));
        assert_eq!(size(Some("2G"), 0, 0), Ok(2 << 30));
        assert_eq!(size(None, 7, 0), Ok(7));
        assert!(size(Some("lots"), 0, 0).is_err());
        assert!(size(Some("99999999999999999999G"), 0, 0).is_err());
        assert!(size(Some("1K"), 0, 1 << 20).unwrap_err().contains("smallest"));
    }

    #[test]
    fn secret_file_references_are_found_anywhere() {
        let text = "a = \"${file:/run/secrets/a}\"\nb = \"Bearer ${file:/etc/t} x\"\nc = \"${file:relative}\"\nd = \"${file:/unterminated";
        assert_eq!(secret_files(text), vec![PathBuf::from("/run/secrets/a"), PathBuf::from("/etc/t")]);
    }

    #[test]
    fn bad_values_name_their_key() {
        fn raw(network: Option<&RawNetwork>) -> RawSandbox<'_> {
            RawSandbox { mode: None, read: &[], write: &[], network, registry: None, limits: None }
        }
        let check = |network: RawNetwork| validate(Path::new("/etc"), &raw(Some(&network)));
        let allow = |list: &[&str]| RawNetwork::Allow { allow: list.iter().map(|s| (*s).to_owned()).collect() };
        assert_eq!(check(RawNetwork::Mode("wifi".into())).unwrap_err().0, "network");
        assert_eq!(check(RawNetwork::Mode("loopback".into())).unwrap().network, Network::Loopback);
        let spec = check(allow(&["api.github.com:443", "*.Example.com", "[::1]:8080"])).unwrap();
        assert_eq!(spec.network, Network::Proxied);
        let shown: Vec<String> = spec.allow.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["api.github.com:443", "*.example.com:443", "[::1]:8080"]);
        assert!(spec.allow[0].matches("API.github.com", 443) && !spec.allow[0].matches("api.github.com", 80));
        assert!(spec.allow[1].matches("a.b.example.com", 443) && !spec.allow[1].matches("example.com", 443));
        assert!(!spec.allow[1].matches("evil-example.com", 443) && spec.allow[2].matches("[::1]", 8080));
        for bad in ["http://x.com", "x.com:0", "x.com:99999", "*.", "a..b", "-a.com", "x.com/path", ""] {
            let error = check(allow(&[bad])).unwrap_err();
            assert_eq!(error.0, "network.allow[0]", "{bad}: {error:?}");
        }
        assert_eq!(check(allow(&[])).unwrap_err().0, "network.allow");
        assert_eq!(validate(Path::new("/etc"), &raw(None)).unwrap(), SandboxSpec::default());
    }

    #[test]
    fn a_data_directory_is_beside_the_store_or_an_absolute_path_of_its_own() {
        let store = Path::new("/var/lib/toolhost");
        let beside = data_dir(Some(&RawData::Flag(true)), store, "memory").unwrap().unwrap();
        assert_eq!(beside, DataDir { path: PathBuf::from("/var/lib/toolhost/servers/memory.data"), beside_homes: true });
        assert_eq!(data_dir(Some(&RawData::Flag(false)), store, "memory").unwrap(), None);
        assert_eq!(data_dir(None, store, "memory").unwrap(), None);
        let chosen = data_dir(Some(&RawData::Path("/srv/memory/./x/..".into())), store, "m").unwrap().unwrap();
        assert_eq!(chosen, DataDir { path: PathBuf::from("/srv/memory"), beside_homes: false });
        for bad in ["relative/dir", "/", "/srv", "/home/alice", "/srv/${X}", "/usr/.."] {
            let (key, why) = data_dir(Some(&RawData::Path(bad.into())), store, "m").unwrap_err();
            assert_eq!(key, "data", "{bad}: {why}");
        }
    }

    #[test]
    fn data_is_offered_to_env_and_an_entry_without_one_that_names_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolhost.toml");
        let parse = |servers: &str| super::super::Config::parse(&file, &format!("[store]\npath = \"st/catalog.db\"\n\n{servers}"));
        let config =
            parse("[servers.memory]\ncommand = \"npx\"\ndata = true\nenv = { MEMORY_FILE_PATH = \"${data}/memory.jsonl\" }\n").unwrap();
        let super::super::Transport::Stdio(stdio) = &config.servers["memory"].transport else { panic!("stdio") };
        let data = dir.path().join("st/servers/memory.data");
        assert_eq!(stdio.sandbox.data.as_ref().map(|data| data.path.clone()), Some(data.clone()));
        let value = &stdio.env["MEMORY_FILE_PATH"];
        assert_eq!(value.expose(), format!("{}/memory.jsonl", data.display()));
        assert!(!value.has_secret(), "a place of its own is no secret (it would be redacted from its stderr)");
        assert!(stdio.sandbox.server_writable.holds(&data.join("x")), "the daemon takes nothing through it");
        assert!(config.private.contains(&dir.path().join("st/servers")), "no other server sees it");

        let chosen = dir.path().join("memory");
        let config =
            parse(&format!("[servers.m]\ncommand = \"npx\"\ndata = {:?}\nenv = {{ F = \"${{data}}\" }}\n", chosen.display().to_string()))
                .unwrap();
        let super::super::Transport::Stdio(stdio) = &config.servers["m"].transport else { panic!("stdio") };
        assert_eq!(stdio.env["F"].expose(), chosen.display().to_string());

        let error = parse("[servers.m]\ncommand = \"npx\"\nenv = { F = \"${data}/x\" }\n").unwrap_err();
        assert_eq!(error.key.as_deref(), Some("servers.m.env.F"), "{error}");
        assert!(error.problem.contains("data = true"), "{error}");
        let inside = dir.path().join("st/servers/m");
        let error = parse(&format!("[servers.m]\ncommand = \"npx\"\ndata = {:?}\n", inside.display().to_string())).unwrap_err();
        assert_eq!(error.key.as_deref(), Some("servers.m.data"), "{error}");
        assert!(error.problem.contains("private"), "{error}");
        let above = parse(&format!("[servers.m]\ncommand = \"npx\"\ndata = {:?}\n", dir.path().display().to_string())).unwrap_err();
        assert!(above.problem.contains("holds"), "{above}");
        let url = parse("[servers.m]\nurl = \"https://example.com/mcp\"\ndata = true\n").unwrap_err();
        assert_eq!(url.key.as_deref(), Some("servers.m.data"), "{url}");
    }

    #[test]
    fn registry_is_a_boolean_that_goes_with_a_proxied_network_and_contradictions_are_named() {
        let check = |registry: Option<RawRegistry>, network: Option<RawNetwork>| {
            let raw =
                RawSandbox { mode: None, read: &[], write: &[], network: network.as_ref(), registry: registry.as_ref(), limits: None };
            validate(Path::new("/etc"), &raw)
        };
        let mode = |name: &str| Some(RawNetwork::Mode(name.to_owned()));
        let allow = || Some(RawNetwork::Allow { allow: vec!["api.example.com".to_owned()] });
        assert!(check(None, None).unwrap().registry, "a launcher reaches its registry by default");
        assert!(check(None, allow()).unwrap().registry);
        assert!(!check(Some(RawRegistry::Flag(false)), allow()).unwrap().registry);
        assert!(!check(Some(RawRegistry::Flag(false)), None).unwrap().registry);
        let (key, why) = check(Some(RawRegistry::Other(toml::Value::String("no".into()))), None).unwrap_err();
        assert_eq!(key, "registry");
        assert!(why.contains("\"no\" is not a boolean") && why.contains("false"), "{why}");
        for contradiction in [(true, "none"), (true, "loopback"), (false, "all")] {
            let (key, why) = check(Some(RawRegistry::Flag(contradiction.0)), mode(contradiction.1)).unwrap_err();
            assert!(key == "registry" && why.contains(contradiction.1) && why.contains("network = { allow"), "{why}");
        }
        // Redundant, not contradictory: accepted.
        assert!(!check(Some(RawRegistry::Flag(false)), mode("none")).unwrap().registry);
        assert!(check(Some(RawRegistry::Flag(true)), mode("all")).unwrap().registry);
    }
}
