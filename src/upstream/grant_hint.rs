//! A tool call refused a write by the sandbox, answered with the grant that would allow it.
//!
//! A sandboxed server that may only read a directory (its arguments name it, so it is shown
//! read-only) fails a write there with its own words ("EROFS: read-only file system, open
//! '/srv/shared/x.txt'"), in a tool result or a JSON-RPC error, and nothing says why. This names
//! the grant. The words are a server's (hostile): only a bounded path is taken from them, only a
//! path inside what its sandbox shows it read-only is answered, and what is named is that path
//! (its own words, escaped) and a place of its own view, so the hint tells nobody, the server or
//! its caller, of a place the server could not already see.

use std::path::{Path, PathBuf};

use super::exit::refused_write;

/// Text items of a result looked through.
const SCAN_ITEMS: usize = 8;
/// Lines looked through in all.
const SCAN_LINES: usize = 64;
/// Bytes of text looked through in all (each line's first 4 KiB only, besides).
const SCAN_BYTES: usize = 16 * 1024;

/// What a sandboxed server sees and writes, as the hint needs it.
#[derive(Debug, Clone, Copy)]
pub struct Grants<'a> {
    /// Everything shown read-only beside the system (canonical): its program's installation,
    /// its launcher's places, its `cwd`, its arguments' paths, its `read` grants.
    pub read: &'a [PathBuf],
    /// Of those, what its entry names: its `cwd`, its arguments' paths, its `read` grants.
    pub given: &'a [PathBuf],
    /// Where it may write already: its `write` grants, its home, its data directory.
    pub writable: &'a [&'a Path],
    /// It has a data directory (`data`), named by `${data}` in its env.
    pub has_data: bool,
}

/// The hint for a call whose error `texts` (a result's text items, a JSON-RPC error's message)
/// say a write was refused on a path the server's sandbox shows it read-only; `None` for any
/// other text, or a path outside that view or already writable. Starts with "toolhost: ".
pub fn for_call<'t>(texts: impl IntoIterator<Item = &'t str>, grants: &Grants<'_>) -> Option<String> {
    let mut budget = SCAN_BYTES;
    let lines = texts.into_iter().take(SCAN_ITEMS).flat_map(str::lines).take(SCAN_LINES);
    for line in lines {
        if budget == 0 {
            return None;
        }
        let line = bounded(line, budget);
        budget = budget.saturating_sub(line.len().max(1));
        if let Some(hint) = refused_write(line).and_then(|path| hint_for(path, grants)) {
            return Some(hint);
        }
    }
    None
}

/// `line`'s first `bytes` at most, cut at a character boundary.
fn bounded(line: &str, bytes: usize) -> &str {
    if line.len() <= bytes {
        return line;
    }
    let end = (0..=bytes).rev().find(|at| line.is_char_boundary(*at)).unwrap_or(0);
    &line[..end]
}

/// The hint for a refused write on `said` (the server's words, absolute), when the path lies in
/// its read-only view: the entry's own place is granted writable (`write`); a place it runs
/// from (its installation, its launcher's) is no place to write, and `data` gives it one.
fn hint_for(said: &str, grants: &Grants<'_>) -> Option<String> {
    // `..` folded, so that "/srv/shared/../../etc/x" is not taken for a path in /srv/shared.
    let path = crate::config::sandbox::lexical(Path::new(said));
    if !path.is_absolute() || grants.writable.iter().any(|place| path.starts_with(place)) {
        return None;
    }
    let deepest = |places: &'_ [PathBuf]| {
        places.iter().filter(|place| path.starts_with(place)).max_by_key(|place| place.components().count()).cloned()
    };
    let shown = escaped(said);
    match deepest(grants.given) {
        Some(grant) => {
            // A wide grant (a top-level directory, a home) is no place to open for writing whole:
            // the directory the write was in, inside it, is named instead.
            let grant = if super::launchers::shareable(&grant) {
                grant
            } else {
                path.parent().filter(|dir| super::launchers::shareable(dir))?.to_path_buf()
            };
            let grant = escaped(grant.to_str()?);
            Some(format!(
                "toolhost: hint: this server's sandbox shows {shown} read-only (its entry names that place, but grants no write \
                 there): write = [{grant}] in its entry lets it write there (a daemon run as root runs it as another id, which \
                 must own that directory)"
            ))
        }
        None => {
            deepest(grants.read)?;
            let data = match grants.has_data {
                true => "its data directory is writable: point the setting that names this file at ${data}",
                false => "data = true gives it a directory of its own, kept across restarts (${data} in its env names it)",
            };
            Some(format!(
                "toolhost: hint: this server's sandbox shows {shown} read-only (a place it runs from, where it should not write): \
                 {data}"
            ))
        }
    }
}

/// `text` quoted, every quote, backslash and character that is not printable escaped.
fn escaped(text: &str) -> String {
    format!("{text:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(read: &'a [PathBuf], given: &'a [PathBuf], writable: &'a [&'a Path]) -> Grants<'a> {
        Grants { read, given, writable, has_data: false }
    }

    #[test]
    fn a_refused_write_in_a_place_its_entry_names_is_answered_with_that_write_grant() {
        let read = [PathBuf::from("/srv/shared"), PathBuf::from("/opt/node/lib/server")];
        let writable = [Path::new("/srv/shared/out"), Path::new("/var/lib/toolhost/servers/files")];
        let grants = view(&read, &read[..1], &writable);
        let cases = [
            "Error: EROFS: read-only file system, open '/srv/shared/x.txt'",
            "OSError: [Errno 30] Read-only file system: '/srv/shared/deep/db.sqlite'",
            "cannot write /srv/shared/x: Permission denied (os error 13)",
            "Error: EACCES: permission denied, mkdir '/srv/shared/new'",
        ];
        for text in cases {
            let hint = for_call([text], &grants).unwrap_or_else(|| panic!("{text}: no hint"));
            assert!(hint.starts_with("toolhost: hint: ") && hint.contains("write = [\"/srv/shared\"]"), "{text}: {hint}");
        }
        // Among other lines and items, after a first item that says nothing.
        let hint = for_call(["done 3 of 4", "a\nError: EROFS: read-only file system, open '/srv/shared/x'\nb"], &grants);
        assert!(hint.is_some_and(|hint| hint.contains("write = [\"/srv/shared\"]")));
        // A place it runs from: data, never a write grant of its installation.
        let hint = for_call(["EROFS: read-only file system, open '/opt/node/lib/server/dist/memory.json'"], &grants).unwrap();
        assert!(hint.contains("data = true") && !hint.contains("write = ["), "{hint}");
        let with_data = Grants { has_data: true, ..grants };
        let hint = for_call(["EROFS: read-only file system, open '/opt/node/lib/server/m.json'"], &with_data).unwrap();
        assert!(hint.contains("${data}") && !hint.contains("data = true"), "{hint}");
    }

    #[test]
    fn a_path_outside_its_read_only_view_or_already_writable_gets_no_hint() {
        let read = [PathBuf::from("/srv/shared")];
        let writable = [Path::new("/srv/shared/out")];
        let grants = view(&read, &read, &writable);
        for text in [
            // Outside its view: nothing is said of it, not even that it is outside.
            "EROFS: read-only file system, open '/etc/shadow'",
            "EROFS: read-only file system, open '/home/operator/.ssh/id_ed25519'",
            "EROFS: read-only file system, open '/srv/shared2/x'",
            "EROFS: read-only file system, open '/srv/shared/../../etc/passwd'",
            // Writable already (a permission, not a grant, is at fault).
            "EACCES: permission denied, open '/srv/shared/out/x'",
            // Not a refusal, or no path.
            "ENOENT: no such file or directory, open '/srv/shared/x'",
            "EROFS: read-only file system",
            "wrote /srv/shared/x",
        ] {
            assert_eq!(for_call([text], &grants), None, "{text}");
        }
        assert_eq!(for_call(["EROFS '/srv/shared/x'"], &view(&[], &[], &[])), None, "nothing shown read-only");
    }

    #[test]
    fn a_hostile_message_is_bounded_and_escaped() {
        let read = [PathBuf::from("/srv/shared")];
        let grants = view(&read, &read, &[]);
        // Quotes, a newline's escape, a bidirectional override: all escaped, none as such.
        let hint = for_call(["EROFS: open '/srv/shared/a\"]\\nrm -rf \u{202e}x'"], &grants).unwrap();
        assert!(!hint.contains('\u{202e}') && !hint.contains('\n'), "{hint:?}");
        assert!(hint.contains("write = [\"/srv/shared\"]"), "{hint}");
        // A control character makes no path at all.
        assert_eq!(for_call(["EROFS: open '/srv/shared/a\u{1b}[2Jb'"], &grants), None);
        // Far past what is looked through: not found, and no unbounded work.
        let long = format!("{}\nEROFS: open '/srv/shared/x'", "y\n".repeat(SCAN_LINES));
        assert_eq!(for_call([long.as_str()], &grants), None);
        let wide = format!("{} EROFS: open '/srv/shared/x'", "y".repeat(SCAN_BYTES * 4));
        assert_eq!(for_call([wide.as_str()], &grants), None);
        let many: Vec<&str> = std::iter::repeat_n("nothing", SCAN_ITEMS).chain(["EROFS: open '/srv/shared/x'"]).collect();
        assert_eq!(for_call(many, &grants), None);
        // A long path is no grant anyone writes.
        let deep = format!("EROFS: open '/srv/shared/{}'", "x/".repeat(200));
        assert_eq!(for_call([deep.as_str()], &grants), None);
        // Whatever it says, the hint is bounded.
        let hint = for_call([format!("EROFS: open '/srv/shared/{}'", "\"".repeat(240)).as_str()], &grants).unwrap();
        assert!(hint.len() < 1024, "{}", hint.len());
    }

    #[test]
    fn a_wide_grant_is_not_named_whole() {
        let read = [PathBuf::from("/srv")];
        let grants = view(&read, &read, &[]);
        let hint = for_call(["EROFS: open '/srv/shared/x'"], &grants).unwrap();
        assert!(hint.contains("write = [\"/srv/shared\"]"), "{hint}");
        assert_eq!(for_call(["EROFS: open '/srv/x'"], &grants), None, "its directory is the wide grant itself");
    }
}
