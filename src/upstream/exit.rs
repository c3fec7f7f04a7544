//! Why a stdio server went away, said so that an operator can act on it: its exit status or
//! signal, the last lines of its stderr (redacted, bounded), and, where the cause is one the
//! sandbox or a clean environment typically brings, the grant or key that would fix it.
//! "The session is closed" alone is never all an operator sees.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::process::ExitStatus;
use std::sync::{Mutex, PoisonError};

/// Lines of a server's stderr kept for the next failure's message.
const TAIL_LINES: usize = 8;
/// Characters kept of each of those lines.
const TAIL_LINE_CHARS: usize = 300;

/// Lines of one stack trace kept in a row: the rest would push the error's own message (the
/// line before the trace, as Node.js prints it) out of the tail.
const TAIL_FRAMES: usize = 2;

/// The last lines a server wrote on stderr, whatever level they were logged at (during the era
/// probe they go to DEBUG, which is exactly when a failing launcher explains itself).
#[derive(Debug, Default)]
pub(crate) struct StderrTail(Mutex<Tail>);

#[derive(Debug, Default)]
struct Tail {
    lines: VecDeque<String>,
    /// Stack frames seen in a row, up to the last line.
    frames: usize,
}

impl StderrTail {
    /// Keeps `line` (already redacted), dropping the oldest past [`TAIL_LINES`]; blank lines
    /// say nothing and are not kept, nor stack frames past [`TAIL_FRAMES`] in a row.
    pub(crate) fn push(&self, line: &str) {
        let line = line.trim_end();
        if line.trim().is_empty() {
            return;
        }
        let mut tail = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if is_stack_frame(line) {
            tail.frames += 1;
            if tail.frames > TAIL_FRAMES {
                return;
            }
        } else {
            tail.frames = 0;
        }
        let mut kept: String = line.chars().take(TAIL_LINE_CHARS).collect();
        if kept.len() < line.len() {
            kept.push('…');
        }
        if tail.lines.len() == TAIL_LINES {
            tail.lines.pop_front();
        }
        tail.lines.push_back(kept);
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).lines.iter().cloned().collect()
    }
}

/// Whether `c` may not be repeated as it is in anything toolhost says (a log line, an error, a
/// status): every control character (ESC and BEL steer a terminal, CR and LF forge a line, DEL,
/// the C1 controls such as CSI U+009B) and every invisible or bidirectional one.
pub(crate) fn unsafe_char(c: char) -> bool {
    c.is_control() || crate::catalog::integrity::is_invisible(c)
}

/// Text a server wrote (a stderr line, an error it answered), as toolhost repeats it: each
/// [`unsafe_char`] but a tab (which steers nothing, and starts a Java or Go stack frame) written
/// as its escape (`\u{1b}`), everything else as it is. Applied once, where the text is captured,
/// so that no log line, error or status built from it carries a control character; escaping
/// what is already escaped changes nothing.
pub fn printable(text: &str) -> Cow<'_, str> {
    let escaped = |c: char| c != '\t' && unsafe_char(c);
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`printable`] for text already owned: not copied when it needs no escape.
pub(crate) fn printable_owned(text: String) -> String {
    match printable(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => escaped,
    }
}

/// A line of a JavaScript or Java stack trace ("    at f (file.js:1:2)").
fn is_stack_frame(line: &str) -> bool {
    line.starts_with([' ', '\t']) && line.trim_start().starts_with("at ")
}

/// How a process ended, in words: "exited with status 1", "killed by SIGKILL".
pub(crate) fn status_text(status: Option<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => match nix::sys::signal::Signal::try_from(signal) {
                Ok(name) => format!("killed by {name}"),
                Err(_) => format!("killed by signal {signal}"),
            },
            (None, None) => "ended".to_owned(),
        },
        None => "ended (its status is unknown)".to_owned(),
    }
}

/// The server's own words and what they point to: its last stderr lines, and a hint where one
/// applies. Empty when it wrote nothing.
pub(crate) fn explain_stderr(stderr: &[String]) -> String {
    if stderr.is_empty() {
        return String::new();
    }
    let quoted: Vec<String> = stderr.iter().map(|line| format!("«{line}»")).collect();
    let mut text = format!("its last stderr lines: {}", quoted.join(" "));
    if let Some(hint) = hint(stderr) {
        text.push_str("; ");
        text.push_str(&hint);
    }
    text
}

/// Two parts of an explanation, either of which may be empty, as one: "a; b".
pub(crate) fn joined(first: String, second: String) -> String {
    match (first.is_empty(), second.is_empty()) {
        (_, true) => first,
        (true, false) => second,
        (false, false) => format!("{first}; {second}"),
    }
}

/// What would fix a failure whose stderr shows a cause the sandbox or a clean environment
/// typically brings. Matched on the text servers and their launchers (Python, Node.js, npm,
/// uv) print; `None` when nothing is recognised.
pub(crate) fn hint(stderr: &[String]) -> Option<std::borrow::Cow<'static, str>> {
    // The grant that would allow a refused write, named: the most useful hint of all.
    if let Some(named) = stderr.iter().rev().find_map(|line| write_hint(line)) {
        return Some(named.into());
    }
    static_hint(stderr).map(Into::into)
}

fn static_hint(stderr: &[String]) -> Option<&'static str> {
    let text = stderr.join("\n");
    let has = |needle: &str| text.contains(needle);
    if has("ModuleNotFoundError") || has("No module named") || has("Cannot find module") || has("ERR_MODULE_NOT_FOUND") {
        return Some(
            "hint: a module it imports is not in its view: grant the directory it lives in (read = [\"DIR\"]), or run the \
             interpreter of the virtualenv or package that has it",
        );
    }
    if has("EAI_AGAIN") || has("ENOTFOUND") || has("getaddrinfo") || has("Network is unreachable") || has("dns error") {
        return Some(
            "hint: it tried to reach the network, which its sandbox does not give (network = \"none\" by default): \
             allow the hosts it needs (network = { allow = [\"HOST:PORT\"] }), or install what it fetches beforehand",
        );
    }
    if has("UnknownIssuer") || has("CERTIFICATE_VERIFY_FAILED") || has("unable to get local issuer certificate") || has("SELF_SIGNED_CERT")
    {
        return Some(
            "hint: TLS trust: the host's CA settings are not in its clean environment; inherit them \
             (inherit_env = [\"SSL_CERT_FILE\", \"NODE_EXTRA_CA_CERTS\", \"REQUESTS_CA_BUNDLE\"])",
        );
    }
    if has("Read-only file system") || has("EROFS") {
        return Some("hint: it wrote outside its write grants: add the directory it writes to with write = [\"DIR\"]");
    }
    if has("EACCES") || has("Permission denied") || has("PermissionError") || has("Operation not permitted") {
        return Some(
            "hint: a path was refused: grant what it needs (read = [...], write = [...]); a daemon run as root runs it as an \
             unprivileged id, which must be able to read and write its grants",
        );
    }
    if has("No such file or directory") || has("ENOENT") || has("FileNotFoundError") {
        return Some("hint: a path it needs is not in its view: grant it (read = [\"PATH\"]), or check the path exists");
    }
    None
}

/// Longest path a hint names: a longer one is no grant an operator would write.
const HINT_PATH_CHARS: usize = 256;
/// How far into a line a refused write's path is looked for.
const HINT_SCAN_BYTES: usize = 4096;

/// For a line that says a write was refused (`EROFS`, "Read-only file system", `EACCES`,
/// "Permission denied") and names an absolute path, the grant that would allow it: the path's
/// directory as a `write` grant, or `data` for data of its own. The text is a server's (hostile):
/// only a bounded path is taken from it, shown escaped; nothing else of it is repeated. `None`
/// when the line names no such refusal, no path, or only `/` or a top-level directory.
pub(crate) fn write_hint(line: &str) -> Option<String> {
    let path = refused_write(line)?;
    let dir = crate::config::sandbox::lexical(std::path::Path::new(path));
    let dir = dir.parent().filter(|dir| dir.components().count() > 2)?;
    let dir = dir.to_str()?;
    Some(format!(
        "hint: it may not write {path:?} in its sandbox: write = [{dir:?}] grants that directory (its uid must own it), or data = true \
         gives it a directory of its own that is kept (${{data}} in its env names it)"
    ))
}

/// The absolute path `line` says a write to was refused (`EROFS`, "Read-only file system",
/// `EACCES`, "Permission denied"), as the server wrote it: bounded ([`HINT_PATH_CHARS`]), without
/// control characters, looked for in the first [`HINT_SCAN_BYTES`] of the line only. `None` when
/// the line names no such refusal or no such path.
pub(crate) fn refused_write(line: &str) -> Option<&str> {
    let end = line.char_indices().map(|(at, _)| at).find(|at| *at >= HINT_SCAN_BYTES).unwrap_or(line.len());
    let line = &line[..end];
    let lower = line.to_ascii_lowercase();
    let refusals = ["erofs", "read-only file system", "eacces", "permission denied"];
    let at = refusals.iter().filter_map(|word| lower.find(word)).min()?;
    refused_path(line, at)
}

/// The absolute path a refusal names: the first one quoted (`'…'`, `"…"`, `` `…` ``) or standing
/// as a word, after the refusal first (Node.js: "EROFS: …, open '/x'"; Python: "[Errno 30]
/// Read-only file system: '/x'"), else before it (Rust: "/x: Read-only file system").
fn refused_path(line: &str, at: usize) -> Option<&str> {
    let (before, after) = line.split_at(at);
    let path = quoted_path(after).or_else(|| word_path(after)).or_else(|| quoted_path(before)).or_else(|| word_path(before))?;
    (path.len() > 1 && path.chars().count() <= HINT_PATH_CHARS && !path.chars().any(char::is_control)).then_some(path)
}

/// The first quoted text that starts with `/`.
fn quoted_path(text: &str) -> Option<&str> {
    text.char_indices().filter(|(_, c)| matches!(c, '\'' | '"' | '`')).find_map(|(start, quote)| {
        let rest = &text[start + quote.len_utf8()..];
        if !rest.starts_with('/') {
            return None;
        }
        rest.find(quote).map(|end| &rest[..end])
    })
}

/// The first word that starts with `/`.
fn word_path(text: &str) -> Option<&str> {
    text.split(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '`' | ',' | '(' | ')' | '[' | ']'))
        .map(|word| word.trim_end_matches([':', '.', ';']))
        .find(|word| word.starts_with('/') && word.len() > 1)
}

/// What a package launcher needs that its sandbox does not give: `npx`, `bunx`, `uvx`, `pipx`,
/// `npm exec` and `uv tool run` fetch the package from their registry on a first start (and check
/// it later), which `network = "none"` or `"loopback"` cannot reach; they retry for minutes
/// before they say anything. `None` for any other program, or one with the network open.
pub(crate) fn launcher_hint(command: &std::path::Path, args: &[String], network: crate::sandbox::Network) -> Option<String> {
    if matches!(network, crate::sandbox::Network::All | crate::sandbox::Network::Proxied) {
        return None;
    }
    let (_, launcher) = super::launchers::fetcher(command, args)?;
    Some(format!(
        "hint: {launcher} fetches its package from its registry, which this sandbox cannot reach (network = \"{}\"): leave \
         network unset (it then reaches its registry alone) or give the hosts it needs (network = {{ allow = [\"HOST\"] }}: its \
         registry is reached besides)",
        network.label()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines_bounded() {
        let tail = StderrTail::default();
        for n in 0..20 {
            tail.push(&format!("line {n}"));
        }
        tail.push("   ");
        tail.push(&"x".repeat(1000));
        let lines = tail.lines();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines[0], "line 13");
        assert_eq!(lines[TAIL_LINES - 1].chars().count(), TAIL_LINE_CHARS + 1);
    }

    #[test]
    fn a_stack_trace_leaves_the_error_it_follows_in_the_tail() {
        let tail = StderrTail::default();
        tail.push("node:internal/modules/esm/resolve:873");
        tail.push("Error [ERR_MODULE_NOT_FOUND]: Cannot find package 'zod' imported from /srv/server/dist/index.js");
        for frame in 0..12 {
            tail.push(&format!("    at frame{frame} (node:internal/modules/esm/resolve:{frame}:1)"));
        }
        for line in ["  code: 'ERR_MODULE_NOT_FOUND'", "}", "", "Node.js v20.20.2"] {
            tail.push(line);
        }
        let lines = tail.lines();
        assert!(lines.iter().any(|line| line.contains("Cannot find package 'zod'")), "{lines:?}");
        assert_eq!(lines.iter().filter(|line| is_stack_frame(line)).count(), TAIL_FRAMES, "{lines:?}");
        assert_eq!(lines.last().map(String::as_str), Some("Node.js v20.20.2"));
    }

    #[test]
    fn causes_are_recognised_and_named_with_their_fix() {
        let cases = [
            ("ModuleNotFoundError: No module named 'helpers'", "read = [\"DIR\"]"),
            ("npm error code EAI_AGAIN", "network = { allow"),
            ("npm error code EACCES", "unprivileged id"),
            ("invalid peer certificate: UnknownIssuer", "SSL_CERT_FILE"),
            ("OSError: [Errno 30] Read-only file system: '/data/db.sqlite'", "write = [\"DIR\"]"),
        ];
        for (line, fix) in cases {
            let hint = hint(&[line.to_owned()]).unwrap_or_else(|| panic!("{line}: no hint"));
            assert!(hint.contains(fix), "{line}: {hint}");
        }
        assert_eq!(hint(&["listening on stdio".to_owned()]), None);
        assert!(explain_stderr(&[]).is_empty());
    }

    #[test]
    fn a_refused_write_is_answered_with_the_grant_that_allows_it_bounded_and_escaped() {
        let cases = [
            ("Error: EROFS: read-only file system, open '/srv/shared/note.txt'", "/srv/shared"),
            ("OSError: [Errno 30] Read-only file system: '/srv/my data/db.sqlite'", "/srv/my data"),
            ("scripted-mcp-server: cannot write /srv/ro/file: Read-only file system (os error 30)", "/srv/ro"),
            ("PermissionError: [Errno 13] Permission denied: \"/var/lib/app/x.db\"", "/var/lib/app"),
            ("npm error code EACCES npm error path /opt/cache/_cacache/tmp", "/opt/cache/_cacache"),
        ];
        for (line, dir) in cases {
            let hint = write_hint(line).unwrap_or_else(|| panic!("{line}: no hint"));
            assert!(hint.contains(&format!("write = [{dir:?}]")) && hint.contains("data = true"), "{line}: {hint}");
            assert!(super::hint(&[line.to_owned()]).is_some_and(|said| said == hint), "{line}");
        }
        // Not a refusal, no path, a top-level place, an unbounded or hostile path: nothing named.
        for line in ["listening on /srv/shared/sock", "EROFS: read-only file system", "EROFS: open '/etc/passwd'"] {
            assert_eq!(write_hint(line), None, "{line}");
        }
        assert_eq!(write_hint(&format!("EROFS: open '/srv/{}'", "x/".repeat(200))), None);
        let hostile = write_hint("EROFS: open '/srv/a\u{1b}[2J/b'");
        assert_eq!(hostile, None, "a control character is no path: {hostile:?}");
        let quoted = write_hint("EROFS: open '/srv/\"]\nrm/b'").unwrap_or_default();
        assert!(!quoted.contains('\n'), "{quoted}");
        // A refusal past the scanned part of a long line is not looked for.
        assert_eq!(write_hint(&format!("{} EROFS: open '/srv/shared/x'", "y".repeat(HINT_SCAN_BYTES))), None);
    }

    #[test]
    fn a_launcher_without_network_is_told_what_it_needs() {
        use crate::sandbox::Network;
        let args = |list: &[&str]| list.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();
        let npx = launcher_hint(std::path::Path::new("/usr/bin/npx"), &args(&["-y", "@scope/server"]), Network::None).unwrap();
        assert!(npx.contains("npx fetches") && npx.contains("leave network unset"), "{npx}");
        assert!(launcher_hint(std::path::Path::new("npx"), &args(&["x"]), Network::Proxied).is_none());
        assert!(launcher_hint(std::path::Path::new("uv"), &args(&["tool", "run", "x"]), Network::Loopback).is_some());
        assert!(launcher_hint(std::path::Path::new("npx"), &args(&["x"]), Network::All).is_none());
        assert!(launcher_hint(std::path::Path::new("python3"), &args(&["server.py"]), Network::None).is_none());
    }

    #[test]
    fn a_servers_text_is_repeated_without_any_control_character() {
        let hostile = "EROFS: open '/tmp/ro/\u{1b}]0;PWNED\u{7}\u{1b}[2J\r\n\u{7f}\u{9b}2J\u{202e}x\tz'";
        let shown = printable(hostile);
        assert!(!shown.chars().any(|c| c != '\t' && unsafe_char(c)), "{shown:?}");
        assert!(shown.contains(r"\u{1b}]0;PWNED\u{7}") && shown.contains(r"\u{9b}") && shown.contains(r"\u{7f}"), "{shown}");
        assert_eq!(printable(&shown), shown, "escaped once: escaping again changes nothing");
        assert!(matches!(printable("listening on stdio"), Cow::Borrowed(_)));
        assert!(matches!(printable("\tat Main.main(Main.java:3)"), Cow::Borrowed(_)), "a tab steers nothing");
    }

    #[test]
    fn a_status_is_said_in_words() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status_text(Some(ExitStatus::from_raw(1 << 8))), "exited with status 1");
        assert_eq!(status_text(Some(ExitStatus::from_raw(9))), "killed by SIGKILL");
    }
}
