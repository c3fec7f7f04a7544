//! What the launchers servers are run with need to see beyond their program: a script's own
//! directory (a Python server imports the modules beside it, a Node server requires them), the
//! project it belongs to (the `node_modules` or virtual environment above it), and the module
//! paths its entry sets (`PYTHONPATH`, `NODE_PATH`). All read-only; package launchers (`npx`,
//! `uvx`, `pipx run`, `bunx`) need none of this: they fetch into the server's own home.

use std::path::{Path, PathBuf};

use crate::config::sandbox::{HostPattern, ServerWritable};

/// Interpreters that take a script as their first argument that is not an option.
const INTERPRETERS: &[&str] = &["python", "node", "nodejs", "bun", "deno", "ruby", "perl", "php", "tsx", "ts-node"];
/// Files that mark the root of a project: what a script's imports resolve against.
const PROJECT_MARKERS: &[&str] = &["package.json", "node_modules", "pyproject.toml", "setup.py", "requirements.txt", ".venv"];
/// How far above a script a project root is looked for.
const PROJECT_DEPTH: usize = 6;
/// Environment variables whose directories a server's modules are found in.
const MODULE_PATHS: &[&str] = &["PYTHONPATH", "NODE_PATH"];

/// The directories `program` run with `args` (relative to `base`, the entry's `cwd`) and module paths from `env`
/// needs to read, beyond the program and the files its arguments name.
pub(crate) fn grants<'a>(
    program: &Path,
    args: &[String],
    base: Option<&Path>,
    env: impl Iterator<Item = (&'a str, &'a str)>,
    writable: &ServerWritable,
) -> Vec<PathBuf> {
    let mut grants = Vec::new();
    if let Some(script) = script(program, args, base, writable) {
        if let Some(dir) = script.parent().filter(|dir| shareable(dir)) {
            grants.push(dir.to_path_buf());
        }
        grants.extend(project_root(&script));
        if is_javascript(program) {
            grants.extend(node_modules_above(&script));
        }
    }
    for (name, value) in env {
        if MODULE_PATHS.contains(&name) {
            grants.extend(
                std::env::split_paths(value).filter(|dir| dir.is_absolute() && dir.is_dir()).filter_map(|dir| resolve(&dir, writable)),
            );
        }
    }
    grants.retain(|dir| shareable(dir));
    // A directory inside another grant (or the same one twice) adds nothing.
    let mut kept: Vec<PathBuf> = Vec::with_capacity(grants.len());
    for (index, dir) in grants.iter().enumerate() {
        let covered =
            grants.iter().enumerate().any(|(other, wider)| (wider != dir && dir.starts_with(wider)) || (wider == dir && other < index));
        if !covered {
            kept.push(dir.clone());
        }
    }
    kept
}

/// Which package launcher `program` with `args` is, by its ecosystem, if it is one that fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fetcher {
    /// `npx`, `npm exec`, `pnpm dlx`, `bunx`: npm's registry.
    Npm,
    /// `uvx`, `uv tool run`, `pipx run`: the Python package index.
    Python,
}

/// The package launcher `program` is, with the words it was called by ("npx", "uv tool").
pub(crate) fn fetcher(program: &Path, args: &[String]) -> Option<(Fetcher, String)> {
    let name = program.file_name()?.to_str()?;
    let first = args.iter().find(|arg| !arg.starts_with('-')).map(String::as_str);
    match (name, first) {
        ("npx" | "bunx", _) => Some((Fetcher::Npm, name.to_owned())),
        ("npm" | "pnpm", Some(verb @ ("exec" | "dlx"))) => Some((Fetcher::Npm, format!("{name} {verb}"))),
        ("uvx", _) => Some((Fetcher::Python, name.to_owned())),
        ("uv", Some("tool")) => Some((Fetcher::Python, "uv tool".to_owned())),
        ("pipx", Some("run")) => Some((Fetcher::Python, "pipx run".to_owned())),
        _ => None,
    }
}

/// The hosts a launcher fetches from: the registry its settings name (`npm_config_registry`;
/// `UV_DEFAULT_INDEX`, `UV_INDEX_URL`, `PIP_INDEX_URL`, read from the server's `env`, else the
/// daemon's), else the public one.
pub(crate) fn registries<'a>(fetcher: Fetcher, env: impl Iterator<Item = (&'a str, &'a str)> + Clone) -> Vec<HostPattern> {
    let setting = |names: &[&str]| {
        names.iter().find_map(|name| {
            env.clone()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.to_owned())
                .or_else(|| std::env::var(name).ok())
        })
    };
    let configured = match fetcher {
        Fetcher::Npm => setting(&["npm_config_registry"]),
        Fetcher::Python => setting(&["UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"]),
    };
    if let Some(pattern) = configured.as_deref().and_then(url_host) {
        return vec![pattern];
    }
    let public = match fetcher {
        Fetcher::Npm => NPM_PUBLIC,
        Fetcher::Python => PYTHON_PUBLIC,
    };
    public.iter().filter_map(|host| HostPattern::parse(host).ok()).collect()
}

/// The public registries' hosts, npm's and the Python package index's.
const NPM_PUBLIC: &[&str] = &["registry.npmjs.org"];
const PYTHON_PUBLIC: &[&str] = &["pypi.org", "files.pythonhosted.org"];
/// Other public registries' hosts a refusal is recognised by (Yarn's mirror of npm's).
const OTHER_PUBLIC: &[&str] = &["registry.yarnpkg.com"];

/// Whether `host` is a public package registry's (a refusal of it looks like a package fetch).
pub(crate) fn is_public_registry(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    NPM_PUBLIC.iter().chain(PYTHON_PUBLIC).chain(OTHER_PUBLIC).any(|public| *public == host)
}

/// `https://host[:port]/…` as an allow-list entry (port 443, or 80 for `http:`, unless given).
fn url_host(url: &str) -> Option<HostPattern> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?.rsplit('@').next()?;
    let default_port = if scheme.eq_ignore_ascii_case("http") { 80 } else { 443 };
    let has_port =
        authority.rsplit_once(':').is_some_and(|(_, port)| port.bytes().all(|byte| byte.is_ascii_digit()) && !authority.ends_with(']'));
    let text = if has_port { authority.to_owned() } else { format!("{authority}:{default_port}") };
    HostPattern::parse(&text).ok()
}

/// The script an interpreter runs: its first argument that is not an option (after `run` for
/// `deno` and `bun`), as a file; none for `-m`/`-c`/`-e` (a module or inline code).
fn script(program: &Path, args: &[String], base: Option<&Path>, writable: &ServerWritable) -> Option<PathBuf> {
    let name = program.file_name()?.to_str()?;
    // `python3.12` is `python`.
    let family = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    if !INTERPRETERS.contains(&family) {
        return None;
    }
    let mut rest = args.iter().skip_while(|arg| arg.as_str() == "run" && matches!(family, "deno" | "bun"));
    let first = rest.find(|arg| !arg.starts_with('-') || matches!(arg.as_str(), "-m" | "-c" | "-e" | "--eval"))?;
    if first.starts_with('-') {
        return None;
    }
    let first = Path::new(first);
    let path = if first.is_absolute() { first.to_path_buf() } else { base?.join(first) };
    resolve(&path, writable).filter(|path| path.is_file())
}

/// Whether `program` runs JavaScript, whose imports resolve through every `node_modules`
/// directory above the script.
fn is_javascript(program: &Path) -> bool {
    program
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| matches!(name, "node" | "nodejs" | "bun" | "deno" | "tsx" | "ts-node"))
}

/// Every `node_modules` directory above `script`, as Node's resolution walks them: a package
/// run from inside an install (`…/node_modules/pkg/dist/index.js`) imports dependencies that
/// the package manager hoisted to the install's top `node_modules`, beyond the package's root.
fn node_modules_above(script: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    script.ancestors().skip(1).map(|dir| dir.join("node_modules")).filter(|dir| dir.is_dir())
}

/// The nearest directory above `script` that holds a project marker, if any.
fn project_root(script: &Path) -> Option<PathBuf> {
    script
        .ancestors()
        .skip(1)
        .take(PROJECT_DEPTH)
        .find(|dir| PROJECT_MARKERS.iter().any(|marker| dir.join(marker).exists()))
        .map(Path::to_path_buf)
}

/// `path` resolved to what the sandbox will show, where that is safe: a path inside a place
/// some server can write (its home, a write grant) is taken only as written, since a link
/// there is the server's to plant (`data/db.sqlite` → `/root/.ssh/id_ed25519`); one whose
/// resolution follows a link below such a place is not granted at all.
pub(crate) fn resolve(path: &Path, writable: &ServerWritable) -> Option<PathBuf> {
    let resolved = path.canonicalize().ok()?;
    let written = crate::config::sandbox::lexical(path);
    let Some(place) = writable.0.iter().filter(|place| written.starts_with(place)).max_by_key(|place| place.components().count()) else {
        return Some(resolved);
    };
    let below = written.strip_prefix(place).ok()?;
    (place.canonicalize().ok()?.join(below) == resolved).then_some(resolved)
}

/// Whether a whole directory may be shown because a program or script lies in it: the one
/// rule of what is a home, shared with where a data directory may be.
pub(crate) use crate::config::sandbox::shareable;

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|arg| (*arg).to_owned()).collect()
    }

    #[test]
    fn a_scripts_directory_and_its_project_root_are_shown() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir_all(project.join("node_modules")).unwrap();
        std::fs::create_dir_all(project.join("src/server")).unwrap();
        std::fs::write(project.join("src/server/index.js"), "").unwrap();
        let real = |path: &Path| path.canonicalize().unwrap();
        let shown = grants(
            Path::new("/usr/bin/node"),
            &args(&["--enable-source-maps", "src/server/index.js"]),
            Some(&project),
            std::iter::empty(),
            &ServerWritable::default(),
        );
        // The script's directory is inside its project: the project alone is shown.
        assert_eq!(shown, vec![real(&project)]);
        // python3.12 is a Python; a module run (-m) names no script.
        std::fs::write(project.join("server.py"), "").unwrap();
        let python = grants(
            Path::new("/usr/bin/python3.12"),
            &args(&["-u", "server.py"]),
            Some(&project),
            std::iter::empty(),
            &ServerWritable::default(),
        );
        assert_eq!(python, vec![real(&project)]);
        assert!(
            grants(Path::new("/usr/bin/python3"), &args(&["-m", "server"]), Some(&project), std::iter::empty(), &ServerWritable::default())
                .is_empty()
        );
        assert_eq!(
            grants(
                Path::new("/usr/bin/deno"),
                &args(&["run", "-A", "server.py"]),
                Some(&project),
                std::iter::empty(),
                &ServerWritable::default()
            ),
            vec![real(&project)]
        );
        // A package run from inside an install sees the install's hoisted dependencies too.
        let install = dir.path().join("tools/node_modules");
        std::fs::create_dir_all(install.join("@scope/server/dist")).unwrap();
        std::fs::create_dir_all(install.join("dependency")).unwrap();
        std::fs::write(install.join("@scope/server/package.json"), "{}").unwrap();
        std::fs::write(install.join("@scope/server/dist/index.js"), "").unwrap();
        let hoisted = grants(
            Path::new("node"),
            &args(&["node_modules/@scope/server/dist/index.js", "stdio"]),
            Some(&install.join("..")),
            std::iter::empty(),
            &ServerWritable::default(),
        );
        assert_eq!(hoisted, vec![real(&install)]);
        // Not an interpreter: its arguments are files to show, nothing more.
        assert!(
            grants(
                Path::new("/usr/bin/mcp-server-sqlite"),
                &args(&["server.py"]),
                Some(&project),
                std::iter::empty(),
                &ServerWritable::default()
            )
            .is_empty()
        );
    }

    #[test]
    fn launchers_that_fetch_reach_their_registry_and_the_one_their_settings_name() {
        let shown = |patterns: Vec<HostPattern>| patterns.iter().map(ToString::to_string).collect::<Vec<_>>();
        let (npm, _) = fetcher(Path::new("/usr/bin/npx"), &args(&["-y", "@modelcontextprotocol/server-filesystem"])).unwrap();
        assert_eq!(shown(registries(npm, std::iter::empty())), ["registry.npmjs.org:443"]);
        let (python, said) = fetcher(Path::new("uv"), &args(&["tool", "run", "mcp-server-time"])).unwrap();
        assert_eq!((python, said.as_str()), (Fetcher::Python, "uv tool"));
        assert_eq!(shown(registries(python, std::iter::empty())), ["pypi.org:443", "files.pythonhosted.org:443"]);
        let private = [("UV_INDEX_URL", "http://user:pw@pypi.internal.example:8081/simple/")];
        assert_eq!(shown(registries(python, private.into_iter())), ["pypi.internal.example:8081"]);
        assert!(fetcher(Path::new("npm"), &args(&["install"])).is_none() && fetcher(Path::new("python3"), &args(&["-m", "x"])).is_none());
        assert!(is_public_registry("PyPI.org.") && is_public_registry("registry.npmjs.org") && !is_public_registry("api.example.com"));
    }

    #[test]
    fn module_paths_are_shown_and_a_home_or_top_level_directory_never_whole() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        let value = format!("{}:relative:/nonexistent-dir", lib.display());
        let shown = grants(
            Path::new("/bin/true"),
            &[],
            Some(dir.path()),
            [("PYTHONPATH", value.as_str()), ("OTHER", "/usr")].into_iter(),
            &ServerWritable::default(),
        );
        assert_eq!(shown, vec![lib.canonicalize().unwrap()]);
        assert!(!shareable(Path::new("/tmp")) && !shareable(Path::new("/home/alice")) && !shareable(Path::new("/root")));
        assert!(shareable(Path::new("/home/alice/mcp")) && shareable(Path::new("/opt/srv")));
        // A home's own dot-directories hold other programs' credentials; deeper is a project.
        for dot in ["/home/alice/.local", "/home/alice/.cargo", "/root/.config", "/root/.ssh"] {
            assert!(!shareable(Path::new(dot)), "{dot}");
        }
        assert!(shareable(Path::new("/home/alice/.nvm/versions/node/v22")) && shareable(Path::new("/home/alice/mcp/.venv")));
    }
}
