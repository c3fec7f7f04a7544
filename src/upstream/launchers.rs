//! What the launchers servers are run with need to see beyond their program: a script's own
//! directory (a Python server imports the modules beside it, a Node server requires them), the
//! project it belongs to (the `node_modules` or virtual environment above it), and the module
//! paths its entry sets (`PYTHONPATH`, `NODE_PATH`). All read-only; package launchers (`npx`,
//! `uvx`, `pipx run`, `bunx`) need none of this: they fetch into the server's own home.

use std::path::{Path, PathBuf};

use crate::config::sandbox::ServerWritable;

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

pub(crate) use crate::config::registry::{fetcher, is_public_registry, registries};

/// Whether `host` (as a server asked for it) is a public host name: one an operator's fix may
/// name. Never an address (a server chooses which: loopback, link-local, private, this
/// machine's), a name without a dot, a special-use or private suffix (`localhost`, `.local`,
/// `.internal`, `.home.arpa`, …) or this machine's own name; nothing but letters, digits, `-`
/// and `.`, and a top-level label that is not a number (`127.1` is an address to a resolver).
pub(crate) fn is_public_name(host: &str) -> bool {
    const PRIVATE_SUFFIXES: &[&str] =
        &["localhost", "local", "internal", "intranet", "lan", "home", "corp", "localdomain", "home.arpa", "test", "invalid", "example"];
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let labels_ok = host
        .split('.')
        .all(|label| !label.is_empty() && label.len() <= 63 && label.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-'));
    let Some((_, top)) = host.rsplit_once('.') else { return false };
    let special = PRIVATE_SUFFIXES.iter().any(|suffix| host == *suffix || host.ends_with(&format!(".{suffix}")));
    let this_machine = std::fs::read_to_string("/proc/sys/kernel/hostname").is_ok_and(|name| name.trim().eq_ignore_ascii_case(&host));
    host.len() <= 253 && labels_ok && !top.bytes().all(|byte| byte.is_ascii_digit()) && !special && !this_machine
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
    fn a_public_host_name_is_one_a_fix_may_name_and_nothing_a_server_points_inward() {
        for public in ["example.org", "objects.githubusercontent.com", "Registry.NPMjs.org.", "xn--bcher-kva.example.com"] {
            assert!(is_public_name(public), "{public}");
        }
        for inward in [
            "127.0.0.1",
            "[::1]",
            "::1",
            "169.254.169.254",
            "10.0.0.5",
            "2130706433",
            "127.1",
            "localhost",
            "db.localhost",
            "printer.local",
            "metadata.google.internal",
            "router.home.arpa",
            "intranet",
            "a\u{1b}[2J.example.org",
            "evil.org:22",
            "",
        ] {
            assert!(!is_public_name(inward), "{inward}");
        }
        let own = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert!(!is_public_name(own.trim()), "{own}");
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
