//! From a stdio server's configuration to its sandbox [`Plan`]: what it may see, resolved
//! against the filesystem as it is at this start.

use std::path::{Path, PathBuf};

use crate::config::StdioSpec;
use crate::sandbox::Plan;

/// Why a stdio server's sandbox could not be set up, or what it stopped the server for.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("toolhost runs embedded, without its own program to run the sandbox")]
    Embedded,
    #[error("this kernel cannot sandbox the server: {0}; it does not start (sandbox = \"off\" runs it unconfined)")]
    Kernel(crate::sandbox::KernelGap),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("cannot encode the sandbox's plan: {0}")]
    Encode(serde_json::Error),
    #[error("cannot make its report pipe: {0}")]
    ReportPipe(std::io::Error),
    /// What the sandbox itself said: it could not be built, or stopped the server at a limit.
    #[error("{}", .0.describe())]
    Reported(crate::sandbox::Report),
    #[error("cannot make its home {}: {source}", .path.display())]
    Home { path: PathBuf, source: crate::sandbox::beneath::BeneathError },
    #[error("cannot make its data directory {}: {source}", .path.display())]
    Data { path: PathBuf, source: crate::sandbox::beneath::BeneathError },
    #[error(
        "its data directory {} holds files and belongs to uid {owner}, not to uid {runs_as} the server runs as: toolhost never \
         takes over a directory; name a new or empty one, or give it to the server yourself (chown -R {runs_as} {})",
        .path.display(), .path.display()
    )]
    DataTaken { path: PathBuf, owner: u32, runs_as: u32 },
    #[error("its data directory {} (as the filesystem has it now) {why}: name a directory of its own", .path.display())]
    DataPlace { path: PathBuf, why: String },
}

/// Makes the server's home (and the homes' directory) if missing: mode 0700, owned by the uid
/// the server runs as (the sandbox's id under a root daemon), with the XDG directories in it.
///
/// The home is the server's to write: everything in it is opened beneath the home's handle,
/// never through a link ([`crate::sandbox::beneath`]). A link the server planted where an XDG
/// directory goes (`.cache` → `/etc`) is left alone and named in the log; the server starts
/// without that directory rather than the daemon making or giving away what it points to.
///
/// # Errors
/// [`SandboxError::Home`]: it cannot be made (a full disk, a directory it may not write).
pub(crate) fn make_home(home: &Path) -> Result<(), SandboxError> {
    use crate::sandbox::beneath::{BeneathError, Dir};
    let failed = |source| SandboxError::Home { path: home.to_path_buf(), source };
    let (Some(homes), Some(name)) = (home.parent(), home.file_name().and_then(|name| name.to_str())) else {
        return Err(failed(BeneathError::Outside(home.to_path_buf())));
    };
    // Traversable, not listable: the homes of the other servers are nobody's business.
    let homes = Dir::make_trusted(homes, 0o711).map_err(failed)?;
    let owner = crate::sandbox::sandbox_ids();
    let own = homes.make_beneath(name, 0o700, Some(owner)).map_err(failed)?;
    own.chmod(0o700).map_err(failed)?;
    for xdg in [".cache", ".config", ".local/share", ".local/state"] {
        match own.make_beneath(xdg, 0o700, Some(owner)) {
            Ok(_) => {}
            Err(planted @ BeneathError::Planted(_)) => tracing::warn!(home = %home.display(), "{planted}"),
            Err(other) => return Err(failed(other)),
        }
    }
    Ok(())
}

/// Makes the server's data directory (`data`) if missing, owned by `owner` (the uid the server
/// runs as; `None` without a sandbox, where it runs as the daemon), and never through a link.
///
/// Beside its home, it is made in the homes' directory as the home is. An operator's path is
/// found as [`find_data`] finds it (the operator's links resolved down to the deepest directory
/// no server can write, each component below beneath the one before with `O_NOFOLLOW`): a link
/// a server planted anywhere on the way stops the start, and nothing it points to is made or
/// given away. A directory that is there is used only if it is the server's already or empty
/// (then given to it): one of somebody else's that holds files is never taken over. Its
/// content is never touched: it is the server's, kept across restarts, package updates and a
/// wiped home.
///
/// # Errors
/// [`SandboxError::Data`] naming the place, [`SandboxError::DataTaken`], [`SandboxError::DataPlace`].
pub(crate) fn make_data(spec: &StdioSpec, owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>) -> Result<(), SandboxError> {
    use crate::sandbox::beneath::Dir;
    let Some(data) = &spec.sandbox.data else { return Ok(()) };
    let way = data_way(spec, data)?;
    let failed = |source| SandboxError::Data { path: data.path.clone(), source };
    let anchor = Dir::make_trusted(&way.anchor, if data.beside_homes { 0o711 } else { 0o755 }).map_err(failed)?;
    let parent = match &way.below {
        Some(rest) => anchor.make_beneath(rest, 0o755, None).map_err(failed)?,
        None => anchor,
    };
    let (own, made) = parent.make_child_made(&way.name, 0o700).map_err(failed)?;
    if !made && !data.beside_homes {
        let runs_as = owner.map_or_else(|| nix::unistd::geteuid().as_raw(), |(uid, _)| uid.as_raw());
        judge(&own, &way.real(), runs_as)?;
    }
    if let Some((uid, gid)) = owner {
        own.own(uid, gid).map_err(failed)?;
    }
    if data.beside_homes {
        own.chmod(0o700).map_err(failed)?;
    }
    Ok(())
}

/// What a server's start finds where its data directory goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DataFound {
    /// Not there: made for the server.
    Missing,
    /// There and the server's (or beside its home, the daemon's to give): used as it is.
    Own,
    /// There, somebody else's, and empty: given to the server.
    Empty,
}

/// Where the server's data directory is (its real path, the operator's links resolved) and what
/// its start will find there, making and giving away nothing: the one rule `check-config` and
/// [`make_data`] share. `None` without `data`.
///
/// # Errors
/// What its start would fail with: a link on the way, a directory somebody else's that holds
/// files, a place no data directory may be.
pub(crate) fn find_data(spec: &StdioSpec) -> Result<Option<(PathBuf, DataFound)>, SandboxError> {
    use crate::sandbox::beneath::Dir;
    let Some(data) = &spec.sandbox.data else { return Ok(None) };
    let way = data_way(spec, data)?;
    let failed = |source| SandboxError::Data { path: data.path.clone(), source };
    let parent = match Dir::find_trusted(&way.anchor).map_err(failed)? {
        Some(anchor) => match &way.below {
            Some(rest) => anchor.find_beneath(rest).map_err(failed)?,
            None => Some(anchor),
        },
        None => None,
    };
    let own = match parent {
        Some(parent) => parent.find_beneath(&way.name).map_err(failed)?,
        None => None,
    };
    let found = match own {
        None => DataFound::Missing,
        Some(_) if data.beside_homes => DataFound::Own,
        Some(own) => {
            let runs_as = if spec.sandbox.enabled { crate::sandbox::sandbox_ids().0 } else { nix::unistd::geteuid() };
            judge(&own, &way.real(), runs_as.as_raw())?
        }
    };
    Ok(Some((way.real(), found)))
}

/// Whether an operator's directory that is already there may be the server's: it is its own,
/// or empty; one of somebody else's that holds files is not taken over.
fn judge(dir: &crate::sandbox::beneath::Dir, path: &Path, runs_as: u32) -> Result<DataFound, SandboxError> {
    let failed = |source| SandboxError::Data { path: path.to_path_buf(), source };
    let owner = dir.owner().map_err(failed)?;
    match (owner == runs_as, dir.is_empty().map_err(failed)?) {
        (true, _) => Ok(DataFound::Own),
        (false, true) => Ok(DataFound::Empty),
        (false, false) => Err(SandboxError::DataTaken { path: path.to_path_buf(), owner, runs_as }),
    }
}

/// The way to a data directory: a directory no server can write (`anchor`, real), the names
/// below it to its parent, and its own name.
struct DataWay {
    anchor: PathBuf,
    below: Option<String>,
    name: String,
}

impl DataWay {
    /// Where it is on the host.
    fn real(&self) -> PathBuf {
        let parent = self.below.as_ref().map_or_else(|| self.anchor.clone(), |rest| self.anchor.join(rest));
        parent.join(&self.name)
    }
}

/// The way to `data`. Beside the homes: from the homes' directory (the daemon's). An operator's
/// path: from its deepest directory above that no server can write, with the operator's own
/// links resolved ([`operator_path`]); refused where it (so resolved) lies inside or above one
/// of the daemon's private places or is no place for data (a home, the system's: the rule
/// the configuration was checked by, again, as accounts and links may have changed).
fn data_way(spec: &StdioSpec, data: &crate::config::sandbox::DataDir) -> Result<DataWay, SandboxError> {
    use crate::sandbox::beneath::BeneathError;
    let failed = |source| SandboxError::Data { path: data.path.clone(), source };
    let (Some(parent), Some(name)) = (data.path.parent(), data.path.file_name().and_then(|name| name.to_str())) else {
        return Err(failed(BeneathError::Outside(data.path.clone())));
    };
    if data.beside_homes {
        return Ok(DataWay { anchor: parent.to_path_buf(), below: None, name: name.to_owned() });
    }
    refuse_private(&data.path, parent, name, &spec.sandbox.hidden)?;
    // The deepest directory above it outside every place a server writes: the operator's.
    let writable = &spec.sandbox.server_writable;
    let trusted = parent.ancestors().find(|dir| !writable.holds(dir)).unwrap_or(Path::new("/"));
    let below = parent.strip_prefix(trusted).ok().and_then(Path::to_str).filter(|rest| !rest.is_empty()).map(str::to_owned);
    let way = DataWay { anchor: operator_path(trusted, writable).map_err(failed)?, below, name: name.to_owned() };
    let real = way.real();
    if let Some(why) = crate::config::sandbox::data_place_problem(&real, &crate::config::sandbox::Homes::read()) {
        return Err(SandboxError::DataPlace { path: real, why });
    }
    Ok(way)
}

/// `path` (a directory outside every place a server writes) with the operator's links on it
/// resolved, one component at a time: a link that leads into a place a server writes is
/// refused as planted (the daemon follows no link there); what is missing stays as written
/// (it is made).
fn operator_path(path: &Path, writable: &crate::config::sandbox::ServerWritable) -> Result<PathBuf, crate::sandbox::beneath::BeneathError> {
    use crate::sandbox::beneath::BeneathError;
    use std::path::Component;
    let mut real = PathBuf::from("/");
    let mut todo: Vec<std::ffi::OsString> = path.components().rev().map(|part| part.as_os_str().to_owned()).collect();
    let mut links = 0_u32;
    while let Some(part) = todo.pop() {
        match Path::new(&part).components().next() {
            Some(Component::Normal(_)) => {}
            Some(Component::ParentDir) => {
                real.pop();
                continue;
            }
            _ => continue,
        }
        let next = real.join(&part);
        if writable.holds(&next) {
            return Err(BeneathError::Planted(next));
        }
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                links += 1;
                let target = std::fs::read_link(&next).map_err(|source| BeneathError::Io { path: next.clone(), source })?;
                if links > 40 {
                    return Err(BeneathError::Io { path: next, source: std::io::Error::from_raw_os_error(nix::libc::ELOOP) });
                }
                if target.is_absolute() {
                    real = PathBuf::from("/");
                }
                todo.extend(target.components().rev().map(|part| part.as_os_str().to_owned()));
            }
            Ok(_) => real = next,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                real = next;
                real.extend(todo.iter().rev());
                return Ok(crate::config::sandbox::lexical(&real));
            }
            Err(source) => return Err(BeneathError::Io { path: next, source }),
        }
    }
    Ok(real)
}

/// An operator's data directory that is, behind the links of its parent, inside or above one
/// of the daemon's private places: refused before anything is made or given away.
fn refuse_private(path: &Path, parent: &Path, name: &str, hidden: &[PathBuf]) -> Result<(), SandboxError> {
    let real = canonical(parent).map_or_else(|| path.to_path_buf(), |parent| parent.join(name));
    for place in hidden.iter().map(|place| canonical(place).unwrap_or_else(|| place.clone())) {
        if real.starts_with(&place) {
            return Err(PlanError::Private { grant: real, place }.into());
        }
        if place.starts_with(&real) {
            return Err(PlanError::AbovePrivate { grant: real.clone(), via: real, place }.into());
        }
    }
    Ok(())
}

/// The variables that put a server's caches and settings in its home.
pub(crate) fn home_env(home: &Path) -> [(&'static str, PathBuf); 5] {
    [
        ("HOME", home.to_path_buf()),
        ("XDG_CACHE_HOME", home.join(".cache")),
        ("XDG_CONFIG_HOME", home.join(".config")),
        ("XDG_DATA_HOME", home.join(".local/share")),
        ("XDG_STATE_HOME", home.join(".local/state")),
    ]
}

/// Why a stdio server's sandbox cannot be planned: it does not start.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot find the program {} (on PATH, or as a path)", .0.display())]
    NoProgram(PathBuf),
    #[error("the cwd {} does not exist", .0.display())]
    NoCwd(PathBuf),
    #[error("{} lies inside {}, one of the daemon's private places, which no server may see", grant.display(), place.display())]
    Private { grant: PathBuf, place: PathBuf },
    #[error(
        "{} cannot be granted writable: it holds {}, which holds {}, one of the daemon's private places; the server could rename {} and take the place from under its mask (grant a directory beside it, or move the store)",
        grant.display(), via.display(), place.display(), via.display()
    )]
    AbovePrivate { grant: PathBuf, via: PathBuf, place: PathBuf },
    /// Its data directory cannot be used (what [`find_data`] said).
    #[error("{0}")]
    Data(String),
}

/// The plan for one start of a sandboxed server.
///
/// Besides the system and the entry's `read` and `write`, a server sees its `cwd`, its program
/// (and the program's installation: the directory above a `bin/` it lies in, such as a virtual
/// environment or a language runtime, both as configured and behind symbolic links), a script's
/// interpreter named by its `#!` line, the files and directories its arguments name, and what
/// its launcher needs ([`super::launchers`]: a script's directory and project, module paths).
///
/// # Errors
/// The program cannot be found, or a grant lies inside one of the daemon's private places.
/// Where a sandboxed server's network leads, and the hosts its proxy reaches, each with why:
/// the one rule every path (the sandbox, the proxy, `check-config`, `toolhost servers`) takes.
/// Its entry's `network`; and a package launcher that fetches (`npx`, `uvx`…) reaches the
/// registries its settings name besides, through the proxy, where the network goes through it:
/// with `network` unset (the registry alone) or an allow-list (the registry and the list).
/// `registry = false` refuses them (unset, that leaves no network at all); `"none"`,
/// `"loopback"` and `"all"` stand as written (config refuses `registry` contradicting them).
pub(crate) fn egress(spec: &StdioSpec) -> super::egress::Route {
    use super::egress::{Launcher, Reach, Route, Why};
    use crate::sandbox::Network;
    let sandbox = &spec.sandbox;
    let launcher = super::launchers::fetcher(&spec.command, &spec.args).map(|(fetcher, said)| {
        let env = spec.env.iter().map(|(name, value)| (name.as_str(), value.expose()));
        // A setting that names no registry to reach is refused when the file is read; were it
        // read wrong here, no registry is reached rather than the public one.
        Launcher { said, registries: super::launchers::registries(fetcher, env).unwrap_or_default(), refused: !sandbox.registry }
    });
    let mut reach: Vec<Reach> = sandbox.allow.iter().map(|host| Reach { host: host.clone(), why: Why::Allowed }).collect();
    let proxied = !sandbox.network_given || sandbox.network == Network::Proxied;
    if let Some(launcher) = launcher.as_ref().filter(|launcher| proxied && !launcher.refused) {
        for host in &launcher.registries {
            // A registry the allow-list names already is the operator's: said once, as theirs.
            if !reach.iter().any(|reach| reach.host == *host) {
                reach.push(Reach { host: host.clone(), why: Why::Registry(launcher.said.clone()) });
            }
        }
    }
    let network = match sandbox.network_given {
        true => sandbox.network,
        // Unset, `network` is its default (none).
        false if reach.is_empty() => sandbox.network,
        false => Network::Proxied,
    };
    Route { network, reach, launcher }
}

pub(crate) fn plan_for(spec: &StdioSpec) -> Result<Plan, PlanError> {
    let sandbox = &spec.sandbox;
    let network = egress(spec).network;
    let hidden: Vec<PathBuf> = sandbox.hidden.iter().map(|path| canonical(path).unwrap_or_else(|| path.clone())).collect();
    let program = find_program(&spec.command, spec.cwd.as_deref()).ok_or_else(|| PlanError::NoProgram(spec.command.clone()))?;
    let mut read = Vec::new();
    for path in installation(&program) {
        read.push(path);
    }
    if let Some(interpreter) = interpreter(&program) {
        read.extend(installation(&interpreter));
    }
    // Relative paths are the entry's `cwd`'s, never the daemon's (the sandbox runs a server
    // without one in its private `/tmp`).
    let base = spec.cwd.clone();
    let writable = &sandbox.server_writable;
    read.extend(spec.args.iter().filter_map(|arg| path_argument(arg, base.as_deref(), writable)));
    read.extend(super::launchers::grants(
        &program,
        &spec.args,
        base.as_deref(),
        spec.env.iter().map(|(name, value)| (name.as_str(), value.expose())),
        writable,
    ));
    read.extend(sandbox.read.iter().filter_map(|path| super::launchers::resolve(path, writable)));
    if network == crate::sandbox::Network::All {
        // Name resolution: /etc is shown, but its resolv.conf is often a link into /run
        // (systemd-resolved), which is not.
        read.extend(canonical(Path::new("/etc/resolv.conf")));
    }
    let mut write: Vec<PathBuf> = sandbox.write.iter().filter_map(|path| canonical(path)).collect();
    // An operator's data directory is a write grant (checked as one); one beside the homes lies
    // in a private place and is shown through its mask, as the home is.
    // Where its start finds (or makes) it, the operator's links resolved as `make_data` resolves
    // them: `check-config` plans one that is not made yet.
    let real_data = find_data(spec).map_err(|refused| PlanError::Data(refused.to_string()))?.map(|(real, _)| real);
    let (data, chosen_data) = match &sandbox.data {
        Some(data) if data.beside_homes => (canonical(&data.path), None),
        Some(_) => (None, real_data),
        None => (None, None),
    };
    write.extend(chosen_data);
    let cwd = spec.cwd.as_deref().map(|cwd| canonical(cwd).ok_or_else(|| PlanError::NoCwd(cwd.to_path_buf()))).transpose()?;
    for grant in read.iter().chain(&write).chain(cwd.iter()) {
        if let Some(place) = hidden.iter().find(|place| grant.starts_with(place)) {
            return Err(PlanError::Private { grant: grant.clone(), place: place.clone() });
        }
    }
    for grant in &write {
        if let Some((via, place)) = movable_above(grant, &hidden) {
            return Err(PlanError::AbovePrivate { grant: grant.clone(), via, place });
        }
    }
    read.sort();
    read.dedup();
    Ok(Plan {
        program: canonical(&program).unwrap_or(program),
        command: spec.command.clone(),
        args: spec.args.clone(),
        cwd,
        read,
        write,
        hidden,
        home: sandbox.home.as_deref().and_then(canonical),
        data,
        network,
        limits: sandbox.limits,
        watched: false,
    })
}

/// What a server's entry itself shows it read-only, as the plan resolves it: its `cwd`, the
/// paths its arguments name, its `read` grants (not its program's installation or its
/// launcher's places, which it runs from).
pub(crate) fn given(spec: &StdioSpec) -> Vec<PathBuf> {
    let writable = &spec.sandbox.server_writable;
    let base = spec.cwd.as_deref();
    let mut given: Vec<PathBuf> = spec.cwd.iter().filter_map(|cwd| canonical(cwd)).collect();
    given.extend(spec.args.iter().filter_map(|arg| path_argument(arg, base, writable)));
    given.extend(spec.sandbox.read.iter().filter_map(|path| super::launchers::resolve(path, writable)));
    given.sort();
    given.dedup();
    given
}

/// A directory a writable `grant` holds on the way to a private place, which is not itself
/// hidden: the server could rename it (its mask is a mount on the place, deeper down) and the
/// place would leave its mask, and the daemon would then make its homes where the server says.
/// A place straight in the grant is its own mount, which no rename moves.
fn movable_above(grant: &Path, hidden: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    hidden.iter().filter(|place| place.starts_with(grant) && place.as_path() != grant).find_map(|place| {
        let via = place.ancestors().skip(1).take_while(|dir| *dir != grant).find(|dir| !hidden.iter().any(|other| other == dir))?;
        Some((via.to_path_buf(), place.clone()))
    })
}

/// The program as the server's own PATH (the daemon's) finds it.
fn find_program(command: &Path, cwd: Option<&Path>) -> Option<PathBuf> {
    if command.components().count() > 1 {
        let path = match cwd {
            Some(cwd) if command.is_relative() => cwd.join(command),
            _ => command.to_path_buf(),
        };
        return path.is_file().then_some(path);
    }
    let search = std::env::var_os("PATH")?;
    std::env::split_paths(&search).map(|dir| dir.join(command)).find(|path| is_executable(path))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The program and its installation, as found and behind its symbolic links: the directory
/// above a `bin/` it lies in (a virtual environment, a language runtime) where
/// [`super::launchers::shareable`] allows it, else the program alone.
fn installation(program: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    let resolved = canonical(program);
    for path in std::iter::once(program.to_path_buf()).chain(resolved) {
        let Some(dir) = path.parent() else { continue };
        let root = if dir.file_name().is_some_and(|name| name == "bin") { dir.parent() } else { None };
        let shown = root.filter(|root| super::launchers::shareable(root)).and_then(canonical);
        match shown {
            Some(root) if super::launchers::shareable(&root) => paths.push(root),
            // `/usr/bin/node`'s installation is `/usr`, the system, shown anyway; `~/bin/tool`
            // or `~/.local/bin/uvx` show the program, never the home around it.
            _ => paths.extend(canonical(&path)),
        }
    }
    paths
}

/// An argument that names a file or directory the server is meant to use: a path (it holds a
/// `/`; a bare word such as `run` is a verb, not a grant), relative ones resolved against the
/// entry's `cwd` (none without one), which exists and is not the root.
fn path_argument(arg: &str, cwd: Option<&Path>, writable: &crate::config::sandbox::ServerWritable) -> Option<PathBuf> {
    if arg.starts_with('-') || !arg.contains('/') {
        return None;
    }
    let path = Path::new(arg);
    let candidate = if path.is_absolute() { path.to_path_buf() } else { cwd?.join(path) };
    super::launchers::resolve(&candidate, writable).filter(|resolved| resolved != Path::new("/"))
}

/// A script's interpreter, from its `#!` line (not `/usr/bin/env`, which is the system's).
fn interpreter(program: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let read = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..read].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|b| *b == b'\n')?];
    let first = std::str::from_utf8(line).ok()?.split_whitespace().next()?;
    Some(PathBuf::from(first))
}

fn canonical(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: &str, args: &[&str]) -> StdioSpec {
        StdioSpec {
            command: PathBuf::from(command),
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            env: Default::default(),
            inherit_env: Vec::new(),
            cwd: None,
            sandbox: Default::default(),
        }
    }

    #[test]
    fn a_virtual_environment_is_shown_whole_and_arguments_that_name_files_are_shown() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("venv/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let python = bin.join("python");
        std::fs::write(&python, "#!/bin/sh\n").unwrap();
        let script = dir.path().join("server.py");
        std::fs::write(&script, "").unwrap();
        // Written with a `..`, as a path relative to a configuration file often is: the view has
        // no directory the `..` could climb out of, so the program runs by its real path.
        let roundabout = dir.path().join("venv/bin/../bin/python");
        let plan = plan_for(&spec(roundabout.to_str().unwrap(), &[script.to_str().unwrap(), "--flag", "stdio"])).unwrap();
        assert_eq!(plan.program, std::fs::canonicalize(&python).unwrap());
        assert_eq!(plan.command, roundabout, "argv[0] stays as configured");
        let venv = std::fs::canonicalize(dir.path().join("venv")).unwrap();
        assert!(plan.read.contains(&venv), "{:?}", plan.read);
        assert!(plan.read.contains(&std::fs::canonicalize(&script).unwrap()), "{:?}", plan.read);
        assert!(plan.read.iter().all(|path| !path.ends_with("stdio")));
    }

    #[test]
    fn a_bare_word_or_a_relative_path_without_a_cwd_is_never_a_grant() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("run")).unwrap();
        std::fs::write(dir.path().join("weather.py"), "").unwrap();
        // `uv --directory D run weather.py`: `run` and `weather.py` are words, whatever the
        // daemon's own working directory holds.
        let words = plan_for(&spec("sh", &["--directory", "/nonexistent", "run", "weather.py", "/"])).unwrap();
        assert!(words.read.iter().all(|path| !path.ends_with("run") && path.as_path() != Path::new("/")), "{:?}", words.read);
        // A relative path is the entry's cwd's; without one it names nothing.
        let mut relative = spec("sh", &["./run", "sub/../weather.py"]);
        assert!(plan_for(&relative).unwrap().read.iter().all(|path| !path.starts_with(dir.path())));
        relative.cwd = Some(dir.path().to_path_buf());
        let shown = plan_for(&relative).unwrap().read;
        assert!(shown.contains(&std::fs::canonicalize(dir.path().join("run")).unwrap()), "{shown:?}");
    }

    #[test]
    fn a_link_planted_where_a_server_writes_never_becomes_a_grant() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let secret = dir.path().join("secret");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(&secret, "id_ed25519").unwrap();
        std::fs::write(data.join("plain.db"), "").unwrap();
        // What a server with `write = [data]` plants for its next start (or for a sibling's).
        std::os::unix::fs::symlink(&secret, data.join("db.sqlite")).unwrap();
        std::os::unix::fs::symlink(dir.path(), data.join("up")).unwrap();
        let args = [data.join("db.sqlite"), data.join("up/secret"), data.join("plain.db")];
        let mut planned = spec("sh", &args.iter().map(|arg| arg.to_str().unwrap()).collect::<Vec<_>>());
        planned.sandbox.read = vec![data.join("up")];
        planned.sandbox.server_writable = crate::config::sandbox::ServerWritable(vec![data.clone()].into());
        let read = plan_for(&planned).unwrap().read;
        let secret = std::fs::canonicalize(&secret).unwrap();
        assert!(read.iter().all(|path| !secret.starts_with(path)), "{read:?}");
        assert!(read.contains(&std::fs::canonicalize(data.join("plain.db")).unwrap()), "a plain file is granted as written: {read:?}");
    }

    #[test]
    fn a_program_installed_in_a_home_shows_itself_never_the_home() {
        // A home is any directory straight in /home: one made for the test (as root, which the
        // test command runs as; elsewhere /home is not writable and only the rule is checked).
        let Ok(home) = tempfile::Builder::new().prefix("toolhost-test-home").tempdir_in("/home") else {
            assert!(!crate::upstream::launchers::shareable(Path::new("/home/someone")));
            return;
        };
        for program in ["bin/tool", ".local/bin/uvx", ".cargo/bin/npx", "tool"] {
            let path = home.path().join(program);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
            let plan = plan_for(&spec(path.to_str().unwrap(), &[])).unwrap();
            let inside: Vec<_> = plan.read.iter().filter(|grant| grant.starts_with(home.path())).collect();
            assert_eq!(inside, [&path], "{program}: only the program itself, got {:?}", plan.read);
        }
        // A virtual environment deeper in the home is an installation, shown whole.
        let venv = home.path().join("project/.venv/bin/python");
        std::fs::create_dir_all(venv.parent().unwrap()).unwrap();
        std::fs::write(&venv, "").unwrap();
        std::fs::set_permissions(&venv, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let plan = plan_for(&spec(venv.to_str().unwrap(), &[])).unwrap();
        assert!(plan.read.contains(&home.path().join("project/.venv")), "{:?}", plan.read);
    }

    #[test]
    fn a_grant_inside_a_private_place_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = spec("sh", &[]);
        spec.sandbox.read = vec![dir.path().join(".")];
        spec.sandbox.hidden = vec![dir.path().to_path_buf()];
        let problem = plan_for(&spec).unwrap_err();
        assert!(matches!(&problem, PlanError::Private { place, .. } if *place == std::fs::canonicalize(dir.path()).unwrap()), "{problem}");
        assert!(problem.to_string().contains("private"), "{problem}");
    }

    #[test]
    fn a_write_grant_above_the_stores_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("w/st");
        std::fs::create_dir_all(&store_dir).unwrap();
        let mut spec = spec("sh", &[]);
        spec.sandbox.write = vec![dir.path().join("w")];
        let real = |path: &Path| std::fs::canonicalize(path).unwrap();
        // The store and the homes beside it, one directory down: `st` could be renamed.
        spec.sandbox.hidden = vec![real(&store_dir).join("toolhost.db"), real(&store_dir).join("servers")];
        let problem = plan_for(&spec).unwrap_err();
        assert!(matches!(&problem, PlanError::AbovePrivate { via, .. } if *via == real(&store_dir)), "{problem}");
        assert!(problem.to_string().contains("rename"), "{problem}");
        // Straight in the grant, each place is its own mount: the grant stands.
        spec.sandbox.write = vec![store_dir.clone()];
        assert!(plan_for(&spec).is_ok());
        // And a hidden directory on the way hides what is under it.
        spec.sandbox.write = vec![dir.path().join("w")];
        spec.sandbox.hidden.push(real(&store_dir));
        assert!(plan_for(&spec).is_ok());
    }

    #[test]
    fn a_networked_server_sees_where_resolv_conf_links_to() {
        let Ok(resolv) = std::fs::canonicalize("/etc/resolv.conf") else { return };
        let mut networked = spec("sh", &[]);
        networked.sandbox.network = crate::sandbox::Network::All;
        assert!(plan_for(&networked).unwrap().read.contains(&resolv));
        assert!(!plan_for(&spec("sh", &[])).unwrap().read.contains(&resolv), "only with the network");
    }

    #[test]
    fn a_launcher_reaches_its_registry_besides_its_allow_list_unless_its_entry_refuses_it() {
        use crate::sandbox::Network;
        use crate::upstream::egress::Why;
        let allow = |hosts: &[&str]| hosts.iter().map(|host| crate::config::sandbox::HostPattern::parse(host).unwrap()).collect::<Vec<_>>();
        let narrowed = |mut spec: StdioSpec, hosts: &[&str], registry: bool| {
            spec.sandbox.network = Network::Proxied;
            spec.sandbox.network_given = true;
            spec.sandbox.allow = allow(hosts);
            spec.sandbox.registry = registry;
            spec
        };
        let reached = |spec: &StdioSpec| {
            let route = egress(spec);
            (route.network, route.reach.iter().map(|reach| format!("{} ({})", reach.host, reach.why())).collect::<Vec<_>>())
        };
        let uvx = || spec("uvx", &["mcp-server-fetch"]);
        // The issue: an allow-list no longer cuts a launcher off its index.
        assert_eq!(
            reached(&narrowed(uvx(), &["api.example.com"], true)),
            (
                Network::Proxied,
                vec![
                    "api.example.com:443 (network.allow)".to_owned(),
                    "pypi.org:443 (uvx's registry; registry = false to refuse)".to_owned(),
                    "files.pythonhosted.org:443 (uvx's registry; registry = false to refuse)".to_owned(),
                ]
            )
        );
        let npx = narrowed(spec("npx", &["-y", "@scope/server"]), &["api.example.com", "registry.npmjs.org"], true);
        assert_eq!(
            reached(&npx).1,
            ["api.example.com:443 (network.allow)", "registry.npmjs.org:443 (network.allow)"],
            "named once, as allowed"
        );
        // Refused: the allow-list alone; unset, nothing at all.
        let refused = narrowed(uvx(), &["api.example.com"], false);
        assert_eq!(reached(&refused).1, ["api.example.com:443 (network.allow)"]);
        assert!(egress(&refused).launcher.is_some_and(|launcher| launcher.refused && launcher.registries.len() == 2));
        let mut unset = uvx();
        assert_eq!(reached(&unset).1.len(), 2);
        unset.sandbox.registry = false;
        assert_eq!(reached(&unset), (Network::None, Vec::new()));
        assert_eq!(plan_for(&spec("sh", &[])).unwrap().network, Network::None);
        // A mode stands as written; a program that is no launcher gets its list alone.
        let mut loopback = uvx();
        (loopback.sandbox.network, loopback.sandbox.network_given) = (Network::Loopback, true);
        assert_eq!(reached(&loopback), (Network::Loopback, Vec::new()));
        assert_eq!(
            reached(&narrowed(spec("python3", &["server.py"]), &["api.example.com"], true)).1,
            ["api.example.com:443 (network.allow)"]
        );
        // The registry its settings name, from its env.
        let mut private = narrowed(spec("npx", &["-y", "x"]), &["api.example.com"], true);
        private.env.insert("npm_config_registry".into(), crate::secrets::resolve("https://npm.internal.example/").unwrap());
        assert!(
            matches!(&egress(&private).reach[1], reach if reach.host.to_string() == "npm.internal.example:443" && reach.why == Why::Registry("npx".into()))
        );
    }

    #[test]
    fn a_refusal_that_looks_like_a_package_fetch_names_its_fix() {
        let mut refused = spec("uvx", &["mcp-server-fetch"]);
        (refused.sandbox.network, refused.sandbox.network_given, refused.sandbox.registry) =
            (crate::sandbox::Network::Proxied, true, false);
        refused.sandbox.allow = vec![crate::config::sandbox::HostPattern::parse("api.example.com").unwrap()];
        let route = egress(&refused);
        let fix = route.fix("pypi.org:443", "pypi.org", 443).unwrap();
        assert!(fix.contains("uvx's registry") && fix.contains("remove `registry = false`"), "{fix}");
        let other = route.fix("github.com:443", "github.com", 443).unwrap();
        assert!(other.contains("add github.com:443 to network.allow"), "{other}");
        let mut plain = spec("python3", &["server.py"]);
        (plain.sandbox.network, plain.sandbox.network_given) = (crate::sandbox::Network::Proxied, true);
        plain.sandbox.allow = refused.sandbox.allow.clone();
        let plain = egress(&plain);
        assert!(
            plain.fix("registry.npmjs.org:443", "registry.npmjs.org", 443).unwrap().contains("add registry.npmjs.org:443 to network.allow")
        );
        assert_eq!(plain.fix("evil.example:443", "evil.example", 443), None, "any other refusal is only named");
        assert_eq!(plain.fix("127.0.0.1:443", "127.0.0.1", 443), None);
    }

    /// A hostile launcher (any program called `npx`) chooses the host it asks for, never the
    /// advice: an address, loopback or a private name is refused without "allow it"; an entry
    /// with no allow-list is told of `network = { allow = [...] }`, never of a `network.allow`
    /// it does not have.
    #[test]
    fn a_launcher_asking_for_an_inward_host_gets_no_advice_to_allow_it() {
        let route = egress(&spec("/tmp/bin/npx", &["-y", "@scope/server"]));
        assert!(route.launcher.is_some() && route.network == crate::sandbox::Network::Proxied, "{route:?}");
        for (target, host, port) in [
            ("127.0.0.1:22", "127.0.0.1", 22),
            ("[::1]:22", "[::1]", 22),
            ("169.254.169.254:80", "169.254.169.254", 80),
            ("10.0.0.5:5432", "10.0.0.5", 5432),
            ("localhost:6379", "localhost", 6379),
            ("metadata.google.internal:80", "metadata.google.internal", 80),
        ] {
            let fix = route.fix(target, host, port).unwrap();
            assert!(!fix.contains(target) && !fix.contains("allow ="), "{target}: {fix}");
            assert!(!fix.contains("network.allow") && fix.contains("does not need"), "{target}: {fix}");
        }
        let public = route.fix("github.com:443", "github.com", 443).unwrap();
        assert!(public.contains("network = { allow = [\"github.com:443\"] }") && !public.contains("network.allow"), "{public}");
    }

    #[test]
    fn a_data_directory_is_made_never_through_a_link_and_never_in_a_private_place() {
        use crate::config::sandbox::{DataDir, ServerWritable};
        let dir = tempfile::tempdir().unwrap();
        let real = |path: &Path| std::fs::canonicalize(path).unwrap();
        let mut spec = spec("sh", &[]);
        spec.sandbox.data = Some(Box::new(DataDir { path: dir.path().join("st/servers/memory.data"), beside_homes: true }));
        make_data(&spec, None).unwrap();
        let made = std::fs::metadata(dir.path().join("st/servers/memory.data")).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&made.permissions()) & 0o777, 0o700);
        let plan = plan_for(&spec).unwrap();
        assert_eq!(plan.data, Some(real(&dir.path().join("st/servers/memory.data"))), "shown as the home is");
        assert!(plan.write.is_empty(), "{:?}", plan.write);

        // An operator's path below a directory another server writes: a link planted on the way
        // or where it goes stops it, and nothing is made where the link points.
        let shared = dir.path().join("shared");
        let victim = dir.path().join("victim");
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        spec.sandbox.server_writable = ServerWritable(vec![shared.clone()].into());
        std::os::unix::fs::symlink(&victim, shared.join("a")).unwrap();
        std::os::unix::fs::symlink(&victim, shared.join("here")).unwrap();
        for planted in [shared.join("a/b/data"), shared.join("here")] {
            spec.sandbox.data = Some(Box::new(DataDir { path: planted.clone(), beside_homes: false }));
            let refused = make_data(&spec, None).unwrap_err();
            assert!(matches!(&refused, SandboxError::Data { source: crate::sandbox::beneath::BeneathError::Planted(_), .. }), "{refused}");
        }
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0, "nothing made through a link");
        // A plain one is made, and granted writable as a write grant is.
        spec.sandbox.data = Some(Box::new(DataDir { path: shared.join("mine/data"), beside_homes: false }));
        make_data(&spec, None).unwrap();
        assert!(plan_for(&spec).unwrap().write.contains(&real(&shared.join("mine/data"))));
        // Behind a link of the operator's, inside a private place: refused before it is made.
        std::os::unix::fs::symlink(dir.path().join("st"), dir.path().join("via")).unwrap();
        spec.sandbox.hidden = vec![dir.path().join("st")];
        spec.sandbox.data = Some(Box::new(DataDir { path: dir.path().join("via/other"), beside_homes: false }));
        let refused = make_data(&spec, None).unwrap_err();
        assert!(matches!(&refused, SandboxError::Plan(PlanError::Private { .. })), "{refused}");
        assert!(!dir.path().join("st/other").exists());
    }

    #[test]
    fn an_existing_directory_is_the_servers_only_if_it_was_or_is_empty_and_an_operators_link_is_followed() {
        use crate::config::sandbox::{DataDir, ServerWritable};
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let mut spec = spec("sh", &[]);
        spec.sandbox.enabled = false;
        let with = |spec: &mut StdioSpec, path: PathBuf| spec.sandbox.data = Some(Box::new(DataDir { path, beside_homes: false }));
        // Missing: said so, and planned where it will be (check-config), then made.
        let missing = dir.path().join("made/data");
        with(&mut spec, missing.clone());
        assert_eq!(find_data(&spec).unwrap().map(|(_, found)| found), Some(DataFound::Missing));
        assert!(plan_for(&spec).unwrap().write.iter().any(|grant| grant.ends_with("made/data")), "planned before it is made");
        make_data(&spec, None).unwrap();
        assert_eq!(find_data(&spec).unwrap().map(|(_, found)| found), Some(DataFound::Own));
        // Somebody else's (here: a uid the server never runs as) that holds a file: never taken.
        if root_or_skipped("chown to another uid") {
            let theirs = dir.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::fs::write(theirs.join("secret"), "x").unwrap();
            std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
            with(&mut spec, theirs.clone());
            let refused = make_data(&spec, Some((nix::unistd::Uid::from_raw(4343), nix::unistd::Gid::from_raw(4343)))).unwrap_err();
            assert!(matches!(refused, SandboxError::DataTaken { owner: 4242, runs_as: 4343, .. }), "{refused}");
            assert!(refused.to_string().contains("chown -R 4343"), "{refused}");
            assert_eq!(std::fs::metadata(&theirs).unwrap().uid(), 4242, "left as it was");
            // Empty: given to the server.
            std::fs::remove_file(theirs.join("secret")).unwrap();
            make_data(&spec, Some((nix::unistd::Uid::from_raw(4343), nix::unistd::Gid::from_raw(4343)))).unwrap();
            assert_eq!(std::fs::metadata(&theirs).unwrap().uid(), 4343);
        }
        // The operator's own link on the way is followed (it is not a server's place)...
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("via")).unwrap();
        with(&mut spec, dir.path().join("via/data"));
        make_data(&spec, None).unwrap();
        let real = std::fs::canonicalize(dir.path().join("real/data")).unwrap();
        assert_eq!(find_data(&spec).unwrap(), Some((real, DataFound::Own)));
        // ...unless it leads into a place a server writes.
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::os::unix::fs::symlink(&shared, dir.path().join("into")).unwrap();
        spec.sandbox.server_writable = ServerWritable(vec![shared.clone()].into());
        with(&mut spec, dir.path().join("into/data"));
        let refused = make_data(&spec, None).unwrap_err();
        assert!(matches!(&refused, SandboxError::Data { source: crate::sandbox::beneath::BeneathError::Planted(_), .. }), "{refused}");
        assert!(!shared.join("data").exists());
    }

    /// Whether the root-only half of a test may run: as root, yes. Otherwise it says so (a
    /// `SKIPPED` line, counted by the test command like `harness::requires_root`), or fails
    /// under `TOOLHOST_TESTS_REQUIRE_ROOT=1` (set by `bash .ci/test`), where a pass means it ran.
    fn root_or_skipped(why: &str) -> bool {
        use std::io::Write;
        if nix::unistd::geteuid().is_root() {
            return true;
        }
        let test = std::thread::current().name().unwrap_or("a test").to_owned();
        let required = std::env::var("TOOLHOST_TESTS_REQUIRE_ROOT").is_ok_and(|value| value != "0");
        assert!(!required, "{test} needs root ({why}) and TOOLHOST_TESTS_REQUIRE_ROOT is set: run as root, or set it to 0");
        let line = format!("SKIPPED {test} (its root-only half): needs root ({why})\n");
        let _ = std::io::stderr().write_all(line.as_bytes());
        if let Some(file) = std::env::var_os("TOOLHOST_TEST_SKIPS")
            && let Ok(mut skips) = std::fs::OpenOptions::new().create(true).append(true).open(file)
        {
            // One write of the whole line: appends from tests running at once never interleave.
            let _ = skips.write_all(line.as_bytes());
        }
        false
    }

    #[test]
    fn a_program_that_is_nowhere_is_named() {
        let problem = plan_for(&spec("no-such-program-xyz", &[])).unwrap_err();
        assert!(matches!(problem, PlanError::NoProgram(_)) && problem.to_string().contains("no-such-program-xyz"), "{problem}");
    }
}
