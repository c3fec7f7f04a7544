//! Every task the daemon spawns has an owner that ends it: a `TaskTracker` (with the
//! `CancellationToken` its owner cancels at shutdown), a `JoinSet`, or an `AbortOnDropHandle`
//! its owner holds. A bare `tokio::spawn` detaches a task nobody stops, so outside tests it is
//! written only as `AbortOnDropHandle::new(tokio::spawn(..))`. Threads and blocking-pool work
//! cannot be aborted at all, so each one is listed in [`ALLOWED`] with the owner that ends or
//! joins it. This test reads `src/` to hold that (test code, `#[cfg(test)] mod x { .. }` blocks
//! and the files `#[cfg(test)] mod x;` declares, may spawn freely).

use std::path::{Path, PathBuf};

/// The one way a bare `tokio::spawn` is owned.
const OWNED: &str = "AbortOnDropHandle::new(";

/// The names the daemon gives its `TaskTracker`s and `JoinSet`s: `.spawn(` on one of them is
/// owned, on any other receiver it is not.
const OWNERS: &[&str] = &["tracker", "background", "tasks", "streams", "tunnels", "scope", "probes", "calls", "set"];

/// Spawns the check cannot see an owner for, each with the owner that ends it: (file under
/// `src/`, text on the spawning line, why it ends). An entry that matches nothing fails the test.
const ALLOWED: &[(&str, &str, &str)] = &[
    ("sandbox/watch.rs", "thread::Builder", "the sandbox watch thread: `Watch::stop` (from `Reaper::stop`) joins it"),
    ("upstream/reaper.rs", "spawn_blocking(move || child.wait())", "awaited at once: the reaper's wait"),
    ("upstream/egress.rs", "spawn_blocking(move || crate::sandbox::report::receive_listener", "awaited at once"),
    ("upstream/oauth/authorizer/mod.rs", "spawn_blocking(move || tokens::save", "awaited at once: one file write"),
    ("supervisor/enumerate.rs", "pages.push(tokio::task::spawn_blocking", "CPU-only parse; `pages` is awaited in order"),
    ("api/gate.rs", "spawn_blocking(move || UnixPeer::of_loopback", "awaited at once: one socket-table read"),
    ("endpoint/http.rs", "spawn_blocking(move || local.and_then", "awaited at once: one socket-table read"),
    ("cli/login.rs", "spawn_blocking(||", "awaited at once: the CLI's stdin line (a CLI, not the daemon)"),
    ("store/definitions.rs", "spawn_blocking(rehash)", "awaited at once: CPU-only rehash"),
    ("store/generations.rs", "spawn_blocking(decode)", "awaited at once: CPU-only decode"),
    ("console/mod.rs", "spawn_blocking(move || local.and_then", "awaited at once: one socket-table read"),
    ("bin/scripted_mcp_server.rs", "std::thread::spawn(move ||", "a test fixture server: its threads end with its process"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading src/").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// `text` with comments, string and char literals blanked (newlines kept, so line numbers
/// hold): a spawn written in a doc comment or a string is no spawn, and a brace in one does
/// not end a block.
fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let end = if c == '/' && next == Some('/') {
            chars[i..].iter().position(|&c| c == '\n').map_or(chars.len(), |at| i + at)
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            let mut j = i;
            while j < chars.len() {
                match (chars[j], chars.get(j + 1).copied()) {
                    ('/', Some('*')) => (depth, j) = (depth + 1, j + 2),
                    ('*', Some('/')) => (depth, j) = (depth - 1, j + 2),
                    _ => j += 1,
                }
                if depth == 0 {
                    break;
                }
            }
            j
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !is_ident(chars.get(i.wrapping_sub(1)).copied()) {
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(i + 1 + hashes) == Some(&'"') {
                let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
                let body = i + 2 + hashes;
                let rest: String = chars[body..].iter().collect();
                rest.find(&close).map_or(chars.len(), |at| body + rest[..at].chars().count() + close.chars().count())
            } else {
                i
            }
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            j + 1
        } else if c == '\'' && next == Some('\\') {
            chars[i + 2..].iter().position(|&c| c == '\'').map_or(chars.len(), |at| i + 2 + at + 1)
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i + 3
        } else {
            i
        };
        if end > i {
            let end = end.min(chars.len());
            chars[i..end].iter().for_each(|&c| blank(&mut out, c));
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// `code` (literals blanked) with every `#[cfg(test)] mod x { .. }` block blanked, brace-matched.
fn without_test_blocks(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]").map(|at| from + at) {
        from = at + 1;
        let after = code[at + "#[cfg(test)]".len()..].trim_start();
        let after = after.strip_prefix("pub(crate)").or_else(|| after.strip_prefix("pub")).unwrap_or(after).trim_start();
        let Some(rest) = after.strip_prefix("mod ") else { continue };
        let Some(open) = rest.find(['{', ';']) else { continue };
        if rest[open..].starts_with(';') {
            continue;
        }
        let open = code.len() - rest.len() + open;
        let mut depth = 0usize;
        let mut close = code.len();
        for (offset, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                close = open + offset + 1;
                break;
            }
        }
        let (start, end) = (code[..at].chars().count(), code[..close].chars().count());
        out[start..end].iter_mut().filter(|c| **c != '\n').for_each(|c| *c = ' ');
        from = close;
    }
    out.into_iter().collect()
}

/// The files a `#[cfg(test)] mod name;` declares, which are test code whole.
fn test_only_files(path: &Path, text: &str) -> Vec<PathBuf> {
    let dir = match path.file_name().and_then(|name| name.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => path.parent().map(Path::to_path_buf),
        _ => path.parent().map(|parent| parent.join(path.file_stem().unwrap_or_default())),
    };
    let Some(dir) = dir else { return Vec::new() };
    let code = blank_literals(text);
    let mut files = Vec::new();
    for (at, _) in code.match_indices("#[cfg(test)]") {
        let after = code[at + "#[cfg(test)]".len()..].trim_start();
        let after = after.strip_prefix("pub(crate)").or_else(|| after.strip_prefix("pub")).unwrap_or(after).trim_start();
        let Some(rest) = after.strip_prefix("mod ") else { continue };
        let name: String = rest.chars().take_while(|&c| is_ident(Some(c))).collect();
        if rest[name.len()..].trim_start().starts_with(';') {
            files.push(dir.join(format!("{name}.rs")));
            files.push(dir.join(&name).join("mod.rs"));
        }
    }
    files
}

/// Whether the spawn at `at` in `code` (named `name`) detaches work nobody owns, judged by what
/// precedes it: its receiver for a method, its path for a path call.
fn unowned(code: &str, at: usize, name: &str) -> bool {
    let before = code[..at].trim_end();
    if name != "spawn" {
        // `spawn_blocking`, `spawn_local`: no owner can end them, however called.
        return true;
    }
    if before.ends_with("fn") && !is_ident(before[..before.len() - 2].chars().next_back()) {
        return false;
    }
    if let Some(receiver) = before.strip_suffix('.') {
        // `Command::new(..).spawn()` starts a process, not a task (the reaper owns those).
        if code[at + name.len()..].trim_start().strip_prefix('(').is_some_and(|args| args.trim_start().starts_with(')')) {
            return false;
        }
        // A task set or tracker by its name (`tracker.spawn(`, `self.tasks.spawn(`): a
        // runtime handle, a task or thread builder, or anything held under another name is not
        // one, however it was bound (`let rt = Handle::current(); rt.spawn(..)`).
        let owner: String = receiver.chars().rev().take_while(|&c| is_ident(Some(c))).collect::<Vec<_>>().into_iter().rev().collect();
        return !OWNERS.contains(&owner.as_str());
    }
    if let Some(path) = before.strip_suffix("::") {
        let start = path.rfind(|c: char| !(is_ident(Some(c)) || c == ':')).map_or(0, |at| at + 1);
        let last = path[start..].rsplit("::").next().unwrap_or_default();
        return match last {
            "tokio" | "task" => !path[..start].ends_with(OWNED),
            "thread" => true,
            // `Reaper::spawn`, `stdio::spawn`, `Self::spawn`: the crate's own functions.
            _ => false,
        };
    }
    // A bare `spawn(`, as after `use tokio::spawn;`.
    !before.ends_with(OWNED)
}

/// `(line, code)` for every spawn in `text`'s production code that has no owner, and every
/// renaming import of tokio or of threads (`use tokio as t;`, `use tokio::spawn as go;`),
/// behind which a spawn could not be told from any other call.
fn bare_spawns(text: &str) -> Vec<(usize, String)> {
    let code = without_test_blocks(&blank_literals(text));
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("use ") {
        if is_ident(code[..at].chars().next_back()) {
            continue;
        }
        let statement = &code[at..code[at..].find(';').map_or(code.len(), |end| at + end)];
        let path = statement["use ".len()..].trim_start();
        let renames = statement.split_whitespace().any(|word| word == "as") || statement.contains(" as ");
        if renames && (path.starts_with("tokio") || path.starts_with("std::thread") || path.starts_with("::tokio")) {
            let line = code[..at].matches('\n').count();
            found.push((line + 1, lines.get(line).map_or("", |line| line.trim()).to_owned()));
        }
    }
    for (at, _) in code.match_indices("spawn") {
        if is_ident(code[..at].chars().next_back()) {
            continue;
        }
        let name: String = code[at..].chars().take_while(|&c| is_ident(Some(c))).collect();
        let called = code[at + name.len()..].trim_start().starts_with('(');
        if matches!(name.as_str(), "spawn" | "spawn_blocking" | "spawn_local") && called && unowned(&code, at, &name) {
            let line = code[..at].matches('\n').count();
            found.push((line + 1, lines.get(line).map_or("", |line| line.trim()).to_owned()));
        }
    }
    found
}

#[test]
fn every_spawned_task_has_an_owner_that_ends_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let texts: Vec<(PathBuf, String)> =
        files.into_iter().map(|path| (path.clone(), std::fs::read_to_string(&path).expect("reading a source file"))).collect();
    let test_only: Vec<PathBuf> = texts.iter().flat_map(|(path, text)| test_only_files(path, text)).collect();
    let mut used = vec![false; ALLOWED.len()];
    let mut bare = Vec::new();
    for (path, text) in texts.iter().filter(|(path, _)| !test_only.contains(path)) {
        let file = path.strip_prefix(&src).unwrap_or(path);
        for (line, code) in bare_spawns(text) {
            let allowed = ALLOWED.iter().position(|(allowed, snippet, _)| file.ends_with(allowed) && code.contains(snippet));
            match allowed {
                Some(entry) => used[entry] = true,
                None => bare.push(format!("{}:{line}: {code}", file.display())),
            }
        }
    }
    assert!(
        bare.is_empty(),
        "tasks spawned with no owner (spawn them on a TaskTracker or JoinSet, hold AbortOnDropHandle::new(tokio::spawn(..)), \
         or list a thread or blocking call in ALLOWED with its owner):\n{}",
        bare.join("\n")
    );
    let stale: Vec<_> = ALLOWED.iter().zip(used).filter(|(_, used)| !used).map(|(entry, _)| entry).collect();
    assert!(stale.is_empty(), "ALLOWED entries that match no spawn (remove them): {stale:?}");
}

#[test]
fn the_check_finds_a_bare_spawn_and_passes_an_owned_one() {
    let text = r#"use tokio::spawn;
use tokio::task;
// tokio::spawn(in_a_comment());
const S: &str = "tokio::spawn(in_a_string()) }";
fn a<'x>(tracker: &TaskTracker, set: &mut JoinSet<()>) {
    let x = tokio::spawn(work());
    let y = AbortOnDropHandle::new(tokio::spawn(work()));
    let z = AbortOnDropHandle::new(tokio::task::spawn(work()));
    spawn(work());
    task::spawn(work());
    tokio::runtime::Handle::current().spawn(work());
    tokio::task::Builder::new().name("n").spawn(work());
    tokio::task::spawn_blocking(|| ());
    std::thread::spawn(|| ());
    tracker.spawn(work());
    set.spawn(work());
    JoinSet::spawn(set, work());
    Reaper::spawn(program);
    let c = '{';
}
fn spawn() {}
#[cfg(test)]
mod tests {
    fn b() { tokio::spawn(work()); if true { std::thread::spawn(|| ()); } }
}
fn c() { tokio::task::spawn_local(work()); }
use tokio as t;
use tokio::task as tk;
use tokio::spawn as go;
fn d(tracker: &TaskTracker) {
    let rt = tokio::runtime::Handle::current(); rt.spawn(work());
    let b = tokio::task::Builder::new(); b.spawn(work());
    std::process::Command::new("x").spawn();
    self.inner.tracker.spawn(work());
    let reuse = because(use_it);
}
"#;
    let mut lines: Vec<usize> = bare_spawns(text).into_iter().map(|(line, _)| line).collect();
    lines.sort_unstable();
    assert_eq!(lines, [6, 9, 10, 11, 12, 13, 14, 26, 27, 28, 29, 31, 32]);
    let declared = test_only_files(Path::new("src/store/mod.rs"), "#[cfg(test)]\nmod owners;\n#[cfg(test)]\nmod inline {}\n");
    assert!(declared.contains(&PathBuf::from("src/store/owners.rs")));
    assert!(!declared.iter().any(|path| path.ends_with("inline.rs")));
}
