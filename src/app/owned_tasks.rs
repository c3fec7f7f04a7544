//! Every task the daemon spawns has an owner that ends it: a `TaskTracker` (with the
//! `CancellationToken` its owner cancels at shutdown), a `JoinSet`, or an `AbortOnDropHandle`
//! its owner holds. A bare `tokio::spawn` detaches a task nobody stops, so outside tests it is
//! written only as `AbortOnDropHandle::new(tokio::spawn(..))`. This test reads `src/` to hold
//! that (test code, `#[cfg(test)]` modules and files, may spawn freely).

use std::path::{Path, PathBuf};

/// The ways to spawn a detached tokio task.
const BARE: [&str; 3] = ["tokio::spawn(", "tokio::task::spawn(", "task::spawn_local("];
/// The one way a bare spawn is owned.
const OWNED: &str = "AbortOnDropHandle::new(";

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

/// The files a `#[cfg(test)] mod name;` declares, which are test code whole.
fn test_only_files(path: &Path, text: &str) -> Vec<PathBuf> {
    let dir = match path.file_name().and_then(|name| name.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => path.parent().map(Path::to_path_buf),
        _ => path.parent().map(|parent| parent.join(path.file_stem().unwrap_or_default())),
    };
    let Some(dir) = dir else { return Vec::new() };
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut files = Vec::new();
    for pair in lines.windows(2) {
        if pair[0] != "#[cfg(test)]" {
            continue;
        }
        let declared = pair[1].trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        if let Some(name) = declared.strip_prefix("mod ").and_then(|rest| rest.strip_suffix(';')) {
            files.push(dir.join(format!("{name}.rs")));
            files.push(dir.join(name).join("mod.rs"));
        }
    }
    files
}

/// A file's text up to its first `#[cfg(test)]` module (test modules come last).
fn production_part(text: &str) -> &str {
    let mut offset = 0;
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" && lines.peek().is_some_and(|next| next.trim_start().starts_with("mod ")) {
            return &text[..offset];
        }
        offset += line.len();
    }
    text
}

/// `file:line: code` for every bare spawn in `text`.
fn bare_spawns(file: &Path, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in production_part(text).lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for bare in BARE {
            for (at, _) in code.match_indices(bare) {
                if !code[..at].ends_with(OWNED) {
                    found.push(format!("{}:{}: {}", file.display(), number + 1, line.trim()));
                }
            }
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
    let bare: Vec<String> = texts
        .iter()
        .filter(|(path, _)| !test_only.contains(path) && !path.ends_with("app/owned_tasks.rs"))
        .flat_map(|(path, text)| bare_spawns(path.strip_prefix(&src).unwrap_or(path), text))
        .collect();
    assert!(
        bare.is_empty(),
        "tasks spawned with no owner (spawn them on a TaskTracker or JoinSet, or hold AbortOnDropHandle::new(tokio::spawn(..))):\n{}",
        bare.join("\n")
    );
}

#[test]
fn the_check_finds_a_bare_spawn_and_passes_an_owned_one() {
    let text = "fn a() {\n    let x = tokio::spawn(work());\n    let y = AbortOnDropHandle::new(tokio::spawn(work()));\n}\n\
                #[cfg(test)]\nmod tests {\n    fn b() { tokio::spawn(work()); }\n}\n";
    assert_eq!(bare_spawns(Path::new("a.rs"), text), ["a.rs:2: let x = tokio::spawn(work());"]);
    let declared = test_only_files(Path::new("src/store/mod.rs"), "#[cfg(test)]\nmod owners;\n");
    assert!(declared.contains(&PathBuf::from("src/store/owners.rs")));
}
