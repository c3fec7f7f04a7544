//! What the launchers servers are run with need to see beyond their program: a script's own
//! directory (a Python server imports the modules beside it, a Node server requires them), the
//! project it belongs to (the `node_modules` or virtual environment above it), and the module
//! paths its entry sets (`PYTHONPATH`, `NODE_PATH`). All read-only; package launchers (`npx`,
//! `uvx`, `pipx run`, `bunx`) need none of this: they fetch into the server's own home.

use std::path::{Path, PathBuf};

/// Interpreters that take a script as their first argument that is not an option.
const INTERPRETERS: &[&str] = &["python", "node", "nodejs", "bun", "deno", "ruby", "perl", "php", "tsx", "ts-node"];
/// Files that mark the root of a project: what a script's imports resolve against.
const PROJECT_MARKERS: &[&str] = &["package.json", "node_modules", "pyproject.toml", "setup.py", "requirements.txt", ".venv"];
/// How far above a script a project root is looked for.
const PROJECT_DEPTH: usize = 6;
/// Environment variables whose directories a server's modules are found in.
const MODULE_PATHS: &[&str] = &["PYTHONPATH", "NODE_PATH"];

/// The directories `program` run with `args` (relative to `base`) and module paths from `env`
/// needs to read, beyond the program and the files its arguments name.
pub(crate) fn grants<'a>(program: &Path, args: &[String], base: &Path, env: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<PathBuf> {
    let mut grants = Vec::new();
    if let Some(script) = script(program, args, base) {
        if let Some(dir) = script.parent().filter(|dir| shareable(dir)) {
            grants.push(dir.to_path_buf());
        }
        grants.extend(project_root(&script));
    }
    for (name, value) in env {
        if MODULE_PATHS.contains(&name) {
            grants.extend(
                std::env::split_paths(value).filter(|dir| dir.is_absolute() && dir.is_dir()).filter_map(|dir| dir.canonicalize().ok()),
            );
        }
    }
    grants.retain(|dir| shareable(dir));
    grants.dedup();
    grants
}

/// The script an interpreter runs: its first argument that is not an option (after `run` for
/// `deno` and `bun`), as a file; none for `-m`/`-c`/`-e` (a module or inline code).
fn script(program: &Path, args: &[String], base: &Path) -> Option<PathBuf> {
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
    base.join(first).canonicalize().ok().filter(|path| path.is_file())
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

/// Whether a whole directory may be shown for a script in it: never the root, a top-level
/// directory (`/tmp`, `/home`) or someone's home itself, where a stray script would show
/// everything beside it; the script alone is shown then.
fn shareable(dir: &Path) -> bool {
    let depth = dir.components().count();
    let home = matches!(dir.parent(), Some(parent) if parent == Path::new("/home")) || dir == Path::new("/root");
    depth > 2 && !home
}

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
        let shown =
            grants(Path::new("/usr/bin/node"), &args(&["--enable-source-maps", "src/server/index.js"]), &project, std::iter::empty());
        assert_eq!(shown, vec![real(&project.join("src/server")), real(&project)]);
        // python3.12 is a Python; a module run (-m) names no script.
        std::fs::write(project.join("server.py"), "").unwrap();
        let python = grants(Path::new("/usr/bin/python3.12"), &args(&["-u", "server.py"]), &project, std::iter::empty());
        assert_eq!(python, vec![real(&project)]);
        assert!(grants(Path::new("/usr/bin/python3"), &args(&["-m", "server"]), &project, std::iter::empty()).is_empty());
        assert_eq!(
            grants(Path::new("/usr/bin/deno"), &args(&["run", "-A", "server.py"]), &project, std::iter::empty()),
            vec![real(&project)]
        );
        // Not an interpreter: its arguments are files to show, nothing more.
        assert!(grants(Path::new("/usr/bin/mcp-server-sqlite"), &args(&["server.py"]), &project, std::iter::empty()).is_empty());
    }

    #[test]
    fn module_paths_are_shown_and_a_home_or_top_level_directory_never_whole() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir_all(&lib).unwrap();
        let value = format!("{}:relative:/nonexistent-dir", lib.display());
        let shown = grants(Path::new("/bin/true"), &[], dir.path(), [("PYTHONPATH", value.as_str()), ("OTHER", "/usr")].into_iter());
        assert_eq!(shown, vec![lib.canonicalize().unwrap()]);
        assert!(!shareable(Path::new("/tmp")) && !shareable(Path::new("/home/alice")) && !shareable(Path::new("/root")));
        assert!(shareable(Path::new("/home/alice/mcp")) && shareable(Path::new("/opt/srv")));
    }
}
