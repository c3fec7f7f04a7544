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
#[derive(Debug)]
pub(crate) enum RawData {
    Flag(bool),
    Path(String),
}

impl<'de> Deserialize<'de> for RawData {
    /// By hand: an untagged enum's error ("did not match any variant of untagged enum") says
    /// nothing of what the key takes.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<RawData, D::Error> {
        struct Shape;
        impl serde::de::Visitor<'_> for Shape {
            type Value = RawData;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("`data` to be true, false or an absolute path (a string)")
            }
            fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<RawData, E> {
                Ok(RawData::Flag(value))
            }
            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<RawData, E> {
                Ok(RawData::Path(value.to_owned()))
            }
        }
        deserializer.deserialize_any(Shape)
    }
}

/// Where `data = true` puts the server `name`'s data directory: `servers/NAME.data/` beside
/// its home `servers/NAME/` (no server name holds a `.`), so that a wiped home or cache never
/// takes it, in the homes' directory no other server sees.
pub fn data_beside_homes(store_dir: &Path, name: &str) -> PathBuf {
    store_dir.join("servers").join(format!("{name}.data"))
}

/// A `data` path of the operator's is refused inside one of the daemon's private places (the
/// server would own it) or above one (it could rename the place away), as a `write` grant is;
/// and where it meets another server's place (its data directory, a `write` grant: the same,
/// inside or above), since a server that can plant a link there leads the other (unsandboxed,
/// root) to follow it: every server's data directory is its own.
pub(crate) fn check_data_places(config: &super::Config) -> Result<(), (String, String)> {
    for (name, server) in &config.servers {
        let super::Transport::Stdio(stdio) = &server.transport else { continue };
        let Some(data) = stdio.sandbox.data.as_ref().filter(|data| !data.beside_homes) else { continue };
        let key = format!("servers.{name}.data");
        let private = config.private.iter().map(|place| lexical(place));
        if let Some(place) = private.clone().find(|place| data.path.starts_with(place) || place.starts_with(&data.path)) {
            let how = if data.path.starts_with(&place) { "lies inside" } else { "holds" };
            return Err((
                key,
                format!(
                    "{} {how} {}, one of the daemon's private places: name a directory apart from it",
                    data.path.display(),
                    place.display()
                ),
            ));
        }
        if let Some(how) = shared_with(config, name, &data.path) {
            return Err((
                key,
                format!(
                    "{} {how}: a server's data directory is its own, apart from every other server's data directory, write \
                     grants and home; name another",
                    data.path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Another server's place that `path` (server `name`'s data directory) meets, said as
/// "lies inside servers.B.write (/x)"; compared as written and as the filesystem resolves the
/// operator's links (`/srv` → `/data`).
fn shared_with(config: &super::Config, name: &str, path: &Path) -> Option<String> {
    let theirs = config.servers.iter().filter(|(other, _)| other.as_str() != name).filter_map(|(other, server)| match &server.transport {
        super::Transport::Stdio(stdio) => Some((other, stdio)),
        super::Transport::Http(_) => None,
    });
    for (other, stdio) in theirs {
        let data = stdio.sandbox.data.iter().map(|data| (format!("servers.{other}.data"), &data.path));
        let write = stdio.sandbox.write.iter().map(|grant| (format!("servers.{other}.write"), grant));
        for (key, place) in data.chain(write) {
            let pairs = [(lexical(path), lexical(place)), (real_or_written(path), real_or_written(place))];
            for (mine, theirs) in pairs {
                let how = if mine == theirs {
                    "is also"
                } else if mine.starts_with(&theirs) {
                    "lies inside"
                } else if theirs.starts_with(&mine) {
                    "holds"
                } else {
                    continue;
                };
                return Some(format!("{how} {key} ({})", place.display()));
            }
        }
    }
    None
}

/// `path` with the links of its deepest existing ancestor resolved (the rest as written): how
/// two operator's paths are told apart at load, when one may not exist yet, and where the
/// sandbox shows one.
pub(crate) fn real_or_written(path: &Path) -> PathBuf {
    let path = lexical(path);
    path.ancestors().find_map(|dir| Some(std::fs::canonicalize(dir).ok()?.join(path.strip_prefix(dir).ok()?))).unwrap_or(path)
}

/// The system's own trees: a data directory is never in one, whatever it holds (the sandbox
/// shows them to every server; `/proc`, `/sys`, `/dev` are the kernel's views, `/run` other
/// services' sockets).
const SYSTEM_TREES: &[&str] =
    &["/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc", "/sys", "/dev", "/run"];

/// Why `path` (absolute, as written or as resolved at a start) is no place for a server's data
/// directory, whose uid is given it: the system's trees, a directory straight in `/var` (`/var/lib`,
/// `/var/log`: other services' state), what may never be shown whole ([`Homes::shareable`]: `/`,
/// a top-level directory, a home, a home's dot-directory), anything inside a home's
/// dot-directory (`~/.ssh/keys`) or above a home (`/tmp/x` holding `/tmp/x/uhome`). `None`
/// when it may be one.
pub fn data_place_problem(path: &Path, homes: &Homes) -> Option<String> {
    if let Some(tree) = SYSTEM_TREES.iter().find(|tree| path.starts_with(tree)) {
        return Some(format!("lies in {tree}, the system's"));
    }
    if path.parent() == Some(Path::new("/var")) {
        return Some("is one of the system's directories in /var, other services' state".to_owned());
    }
    if !homes.shareable(path) {
        return Some("is / , a top-level directory, a home or a home's dot-directory".to_owned());
    }
    if let Some(dot) = path.ancestors().find(|dir| homes.dot_in_home(dir)) {
        return Some(format!("lies inside {}, a home's dot-directory (other programs' keys and settings)", dot.display()));
    }
    if let Some(home) = homes.named().find(|home| home.starts_with(path)) {
        return Some(format!("holds {}, someone's home", home.display()));
    }
    None
}

/// Where people's homes are: read once for a decision (accounts come and go while the daemon
/// runs, and the file is small). The one rule of what is a home: what is shown whole
/// (`upstream::launchers`) and where a data directory may be.
pub struct Homes {
    passwd: String,
}

impl Homes {
    pub fn read() -> Homes {
        Homes { passwd: std::fs::read_to_string("/etc/passwd").unwrap_or_default() }
    }

    /// Homes as `passwd` (in `/etc/passwd`'s form) names them.
    pub fn from_passwd(passwd: &str) -> Homes {
        Homes { passwd: passwd.to_owned() }
    }

    /// The homes named: `/root`, the daemon's `$HOME`, every one `/etc/passwd` names but `/`.
    fn named(&self) -> impl Iterator<Item = PathBuf> + '_ {
        let passwd = self.passwd.lines().filter_map(|line| line.split(':').nth(5)).filter(|home| home.starts_with('/') && *home != "/");
        [PathBuf::from("/root")]
            .into_iter()
            .chain(std::env::var_os("HOME").map(PathBuf::from))
            .chain(passwd.map(|home| lexical(Path::new(home))))
    }

    /// Whether `dir` is someone's home: straight in `/home`, `/root`, the daemon's `$HOME`, or
    /// a home `/etc/passwd` names.
    pub fn holds(&self, dir: &Path) -> bool {
        dir.parent() == Some(Path::new("/home")) || self.named().any(|home| home == dir)
    }

    /// Whether `dir` is a dot-directory straight in a home (`~/.ssh`, `~/.config`).
    fn dot_in_home(&self, dir: &Path) -> bool {
        dir.file_name().and_then(|name| name.to_str()).is_some_and(|name| name.starts_with('.'))
            && dir.parent().is_some_and(|parent| self.holds(parent))
    }

    /// Whether a whole directory may be shown because a program or script lies in it (the one
    /// rule for a program's installation, a script's directory and its project): never the root,
    /// a top-level directory (`/tmp`, `/home`, `/opt`), someone's home (`/home/u`, `/root`, every
    /// home `/etc/passwd` names, the daemon's `$HOME`) or a dot-directory straight in a home
    /// (`~/.local`, `~/.cargo`, `~/.config`), which hold other programs' credentials. Where a
    /// directory may not be shown, the program or script alone is.
    pub fn shareable(&self, dir: &Path) -> bool {
        dir.components().count() > 2 && !self.holds(dir) && !self.dot_in_home(dir)
    }
}

/// [`Homes::shareable`], with `/etc/passwd` read now.
pub fn shareable(dir: &Path) -> bool {
    Homes::read().shareable(dir)
}

/// `data` of the server `name`: `true` is `servers/NAME.data` beside its home; a path must be
/// absolute (or `~/…`) and a place of its own ([`data_place_problem`]), since the server's uid is
/// given the directory.
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
    if let Some(why) = data_place_problem(&path, &Homes::read()) {
        return Err(problem(format!(
            "{} {why}, and the server's uid would be given it: name a directory of its own (data = true, or one like /srv/NAME or /var/lib/NAME)",
            path.display()
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

/// A stdio server's sandbox keys; paths are taken relative to the configuration file's directory.
impl TryFrom<(&Path, &RawSandbox<'_>)> for SandboxSpec {
    type Error = (String, String);

    fn try_from((base, raw): (&Path, &RawSandbox<'_>)) -> Result<SandboxSpec, (String, String)> {
        validate(base, raw)
    }
}

fn validate(base: &Path, raw: &RawSandbox<'_>) -> Result<SandboxSpec, (String, String)> {
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
                .map(|(idx, text)| HostPattern::parse(text).map_err(|problem| (format!("network.allow[{idx}]"), problem.to_string())))
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
            memory_bytes: size(limits.memory.as_deref(), defaults.memory_bytes, 16 << 20)
                .map_err(|p| ("limits.memory".to_owned(), p.to_string()))?,
            processes: at_least(limits.processes, defaults.processes, 2).map_err(|p| ("limits.processes".to_owned(), p.to_string()))?,
            open_files: at_least(limits.open_files, defaults.open_files, 16)
                .map_err(|p| ("limits.open_files".to_owned(), p.to_string()))?,
            cpu_seconds: match limits.cpu_time.as_deref() {
                None => defaults.cpu_seconds,
                Some(text) => humantime::parse_duration(text)
                    .ok()
                    .filter(|time| *time >= Duration::from_secs(1))
                    .map(|time| time.as_secs())
                    .ok_or_else(|| ("limits.cpu_time".to_owned(), format!("{text:?} is not a duration of at least 1s (\"1h\")")))?,
            },
            tmp_bytes: size(limits.tmp.as_deref(), defaults.tmp_bytes, 1 << 20).map_err(|p| ("limits.tmp".to_owned(), p.to_string()))?,
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
    pub fn parse(text: &str) -> Result<HostPattern, super::ValueError> {
        let text = text.trim();
        let explain = || super::ValueError::NotAHost { text: text.to_owned() };
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

fn at_least(value: Option<u32>, default: u32, floor: u32) -> Result<u32, super::ValueError> {
    match value {
        None => Ok(default),
        Some(value) if value >= floor => Ok(value),
        Some(value) => Err(super::ValueError::BelowFloor { value, floor }),
    }
}

/// `"512MiB"`, `"2GiB"`, `"64M"`, or a number of bytes.
fn size(text: Option<&str>, default: u64, floor: u64) -> Result<u64, super::ValueError> {
    let Some(text) = text else { return Ok(default) };
    let not_a_size = || super::ValueError::NotASize { text: text.to_owned() };
    let trimmed = text.trim();
    let digits = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" | "k" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => return Err(not_a_size()),
    };
    let bytes = number.parse::<u64>().ok().and_then(|n| n.checked_mul(1u64 << shift)).ok_or_else(not_a_size)?;
    if bytes < floor {
        return Err(super::ValueError::SizeBelowFloor { text: text.to_owned(), floor });
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
        assert_eq!(size(Some("512MiB"), 0, 0).ok(), Some(512 << 20));
        assert_eq!(size(Some("2G"), 0, 0).ok(), Some(2 << 30));
        assert_eq!(size(None, 7, 0).ok(), Some(7));
        assert!(size(Some("lots"), 0, 0).is_err());
        assert!(size(Some("99999999999999999999G"), 0, 0).is_err());
        assert!(size(Some("1K"), 0, 1 << 20).unwrap_err().to_string().contains("smallest"));
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
        let check = |network: RawNetwork| SandboxSpec::try_from((Path::new("/etc"), &raw(Some(&network))));
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
        assert_eq!(SandboxSpec::try_from((Path::new("/etc"), &raw(None))).unwrap(), SandboxSpec::default());
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
    fn a_data_directory_is_never_a_home_inside_a_dot_directory_above_a_home_or_the_systems() {
        let homes = Homes::from_passwd("u:x:1001:1001::/tmp/x/uhome:/bin/sh\npostgres:x:120:120::/var/lib/postgresql:/bin/false\n");
        for bad in [
            "/tmp/x/uhome",
            "/var/lib/postgresql",
            "/tmp/x/uhome/.ssh",
            "/tmp/x/uhome/.ssh/keys",
            "/root/.config/memory",
            "/tmp/x",
            "/var/lib",
            "/var/log",
            "/etc/ssh",
            "/usr/local",
            "/usr/local/share/memory",
            "/proc/self",
            "/sys/fs/cgroup",
            "/dev/shm/x",
            "/boot/x",
            "/tmp",
        ] {
            assert!(data_place_problem(Path::new(bad), &homes).is_some(), "{bad}");
        }
        for fine in ["/var/lib/memory", "/srv/memory", "/tmp/x/uhome/project", "/opt/srv/data", "/var/lib/postgresql-mcp"] {
            assert_eq!(data_place_problem(Path::new(fine), &homes), None, "{fine}");
        }
        // This machine's own accounts: a home /etc/passwd names outside /home and /root is one.
        let store = Path::new("/var/lib/toolhost");
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let elsewhere = passwd.lines().filter_map(|line| line.split(':').nth(5)).map(Path::new).find(|home| {
            home.components().count() > 3 && !home.starts_with("/home") && data_place_problem(home, &Homes::from_passwd("")).is_none()
        });
        if let Some(home) = elsewhere {
            for under in [home.to_path_buf(), home.join(".ssh/authorized_keys.d")] {
                let refused = data_dir(Some(&RawData::Path(under.display().to_string())), store, "m").unwrap_err();
                assert_eq!(refused.0, "data", "{}: {}", under.display(), refused.1);
            }
        }
    }

    #[test]
    fn every_servers_data_directory_is_its_own_and_data_takes_only_its_shapes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("toolhost.toml");
        let parse = |servers: &str| super::super::Config::parse(&file, &format!("[store]\npath = \"st/catalog.db\"\n\n{servers}"));
        let at = |name: &str| dir.path().join(name).display().to_string();
        let table = |name: &str, extra: &str| format!("[servers.{name}]\ncommand = \"npx\"\n{extra}\n");
        let cases = [
            (format!("data = {:?}", at("x/a")), format!("data = {:?}\nsandbox = \"off\"", at("x/a")), "is also servers."),
            (format!("data = {:?}", at("x/a")), format!("data = {:?}", at("x/a/b")), "servers."),
            (format!("write = [{:?}]", at("x")), format!("data = {:?}\nsandbox = \"off\"", at("x/a/b")), "lies inside servers.a.write"),
            (format!("write = [{:?}]", at("x/a/b/c")), format!("data = {:?}", at("x/a")), "holds servers.a.write"),
        ];
        for (first, second, said) in cases {
            let error = parse(&format!("{}{}", table("a", &first), table("b", &second))).unwrap_err();
            let key = error.key.clone().unwrap_or_default();
            assert!(key == "servers.a.data" || key == "servers.b.data", "{error}");
            let other = if key == "servers.a.data" { "servers.b." } else { "servers.a." };
            assert!(error.problem.contains(said) && error.problem.contains(other), "{error}");
        }
        // Behind an operator's link: the same directory.
        std::fs::create_dir_all(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("via")).unwrap();
        let aliased = format!("{}{}", table("a", &format!("data = {:?}", at("real/d"))), table("b", &format!("data = {:?}", at("via/d"))));
        assert!(parse(&aliased).unwrap_err().problem.contains("is also"));
        // Apart, and its own write grant around it: fine.
        let apart = format!(
            "{}{}",
            table("a", &format!("data = {:?}\nwrite = [{:?}]", at("x/a/data"), at("x/a"))),
            table("b", &format!("data = {:?}", at("x/b")))
        );
        parse(&apart).unwrap();
        // A shape `data` does not take is named as what it takes.
        let error = parse(&table("m", "data = 1")).unwrap_err();
        assert_eq!(error.key.as_deref(), Some("servers.m.data"), "{error}");
        assert!(error.problem.contains("true, false or an absolute path"), "{error}");
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
            SandboxSpec::try_from((Path::new("/etc"), &raw))
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
