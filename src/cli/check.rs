//! `toolhost check-config`: whether a configuration file is valid, and what an operator should
//! know before starting the daemon on it: a stdio server whose program cannot be found, each OAuth
//! server's login and pinned authorization server (never a token), and the fleet store's schema.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use crate::config::auth::{AuthSpec, Grant};
use crate::config::{Config, ServerSpec, Transport};
use crate::fleet::schema::Schema;

/// What `check-config` found: notes to read, warnings to act on, and whether the daemon can
/// start on this file at all.
#[derive(Debug, Default)]
pub struct Report {
    pub ok: bool,
    /// `--probe`: some server did not start, answer or list its tools.
    pub probe_failed: bool,
    pub lines: Vec<Finding>,
}

#[derive(Debug)]
pub struct Finding {
    /// `None`: about the whole file.
    pub server: Option<String>,
    pub warning: bool,
    pub text: String,
}

impl Report {
    fn note(&mut self, server: Option<&str>, text: String) {
        self.lines.push(Finding { server: server.map(str::to_owned), warning: false, text });
    }

    fn warn(&mut self, server: Option<&str>, text: String) {
        self.lines.push(Finding { server: server.map(str::to_owned), warning: true, text });
    }

    /// The report as text, a line a finding.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for finding in &self.lines {
            let prefix = if finding.warning { "warning: " } else { "" };
            let server = finding.server.as_deref().map(|server| format!("{server}: ")).unwrap_or_default();
            out.push_str(&format!("{prefix}{server}{}\n", finding.text));
        }
        out
    }

    pub fn json(&self) -> Value {
        let findings: Vec<Value> = self
            .lines
            .iter()
            .map(|f| json!({"server": f.server, "level": if f.warning { "warning" } else { "note" }, "text": f.text}))
            .collect();
        json!({"ok": self.ok, "probe_failed": self.probe_failed, "findings": findings})
    }
}

/// Checks the configuration at `path`.
///
/// # Errors
/// The file is not a valid configuration (the daemon would not start).
pub async fn check(path: &Path, probe: bool) -> Result<Report, crate::config::ConfigError> {
    let config = Config::load(path)?;
    let mut report = Report { ok: true, probe_failed: false, lines: Vec::new() };
    report.note(None, format!("{}: ok, {} servers", config.source.display(), config.servers.len()));
    let desktop = config.source.extension().is_some_and(|extension| extension.eq_ignore_ascii_case("json"));
    for (name, spec) in &config.servers {
        entry_findings(name, spec, desktop, &mut report);
        let missing = missing_program(spec);
        let program_found = missing.is_none();
        if let Some(problem) = missing {
            report.warn(Some(name), problem);
        }
        if let Some(line) = oauth_status(name, spec) {
            report.note(Some(name), line);
        }
        if let Transport::Http(http) = &spec.transport
            && let Some(AuthSpec::OAuth(oauth)) = &http.auth
            && oauth.issuer.is_none()
            && oauth.trust_first_issuer
            && (oauth.client_secret.is_some() || oauth.private_key.is_some())
        {
            report.warn(
                Some(name),
                "trust_first_issuer: its client credential goes to the first authorization server the MCP server names; \
                 a hostile server names its own (give auth.issuer instead)"
                    .to_owned(),
            );
        }
        // (A program found nowhere is said once, above: its sandbox cannot be planned either.)
        if let Transport::Stdio(stdio) = &spec.transport
            && program_found
        {
            sandbox_findings(name, stdio, &mut report);
        }
    }
    policy_findings(&config, &mut report);
    let sandboxed = config.servers.values().any(|spec| matches!(&spec.transport, Transport::Stdio(stdio) if stdio.sandbox.enabled));
    if sandboxed {
        report.note(None, format!("sandboxes: {}", crate::sandbox::Enforcement::here().describe()));
    }
    if probe {
        let served = probe_servers(&config, &mut report).await;
        served_policy_findings(&config, &served, &mut report);
    }
    if let Some(fleet) = &config.fleet {
        fleet_findings(fleet, &mut report).await;
    }
    Ok(report)
}

/// What a stdio server's sandbox will show it and refuse it: its plan, its reach, grants that
/// are missing, too wide, unwritable or hold toolhost's own files.
fn sandbox_findings(name: &str, stdio: &crate::config::StdioSpec, report: &mut Report) {
    match crate::upstream::sandbox_check(stdio) {
        Ok(line) if stdio.sandbox.enabled => report.note(Some(name), line),
        Ok(line) => report.warn(Some(name), line),
        Err(problem) => report.warn(Some(name), problem.to_string()),
    }
    if let Some(reach) = crate::upstream::reach_summary(stdio) {
        report.note(Some(name), reach);
    }
    if let Some(hint) = crate::upstream::launcher_warning(stdio) {
        report.warn(Some(name), hint.trim_start_matches("hint: ").to_owned());
    }
    // A grant of a path that is not there shows nothing: most likely a typo.
    if stdio.sandbox.enabled {
        let grants = stdio.sandbox.read.iter().map(|path| ("read", path)).chain(stdio.sandbox.write.iter().map(|path| ("write", path)));
        for (key, path) in grants.filter(|(_, path)| !path.exists()) {
            report.warn(Some(name), format!("{key} grant {} does not exist: the sandbox shows nothing there", path.display()));
        }
    }
    for (key, shown) in crate::upstream::wide_grants(stdio) {
        report.warn(
            Some(name),
            format!(
                "{key} {} shows the server all of that directory (a top-level directory, a home or one of its \
                 dot-directories: other programs' files and credentials); grant the directory it needs",
                shown.display()
            ),
        );
    }
    for (grant, fix) in crate::upstream::unwritable_write_grants(stdio) {
        report.warn(
            Some(name),
            format!(
                "write grant {} is not writable by the sandbox's user (uid {}: a root daemon never runs a server as \
                 root), so every write there is refused: {fix}",
                grant.display(),
                crate::sandbox::SANDBOX_ID
            ),
        );
    }
    if stdio.sandbox.enabled {
        for file in crate::upstream::private_files_in_write_grants(stdio) {
            report.warn(
                Some(name),
                format!(
                    "{} is toolhost's and lies in a directory this server may write: it is masked, but once it is replaced \
                     by rename (an editor, a rotation) a running server sees the new one; keep it out of write grants",
                    file.display()
                ),
            );
        }
    }
}

/// The fleet store is checked too: the connection, the credentials, the schema version.
async fn fleet_findings(fleet: &crate::config::FleetConfig, report: &mut Report) {
    let checked = async {
        let pool = crate::fleet::schema::connect(fleet).await?;
        let schema = crate::fleet::schema::check(&pool).await;
        pool.close().await;
        schema
    };
    match checked.await {
        Ok(schema @ (Schema::Current | Schema::Empty)) => {
            report.note(None, format!("fleet store: reachable, schema {}", schema_text(&schema)))
        }
        Ok(schema) => {
            report.ok = false;
            report.warn(None, format!("fleet store: reachable, schema {}", schema_text(&schema)));
        }
        Err(error) => {
            report.ok = false;
            report.warn(None, format!("fleet store: {error} (the daemon would serve from its own store meanwhile)"));
        }
    }
}

/// What an entry says that the daemon will take literally and the operator may not mean: a
/// disabled server (in a desktop client's file, easily missed), an argument naming a path that
/// is not there, a `~` no shell will expand.
fn entry_findings(name: &str, spec: &ServerSpec, desktop: bool, report: &mut Report) {
    if !spec.enabled {
        match desktop {
            true => report.warn(
                Some(name),
                "\"disabled\": true in this file: toolhost does not start it or serve its tools (remove the key to use it)".to_owned(),
            ),
            false => report.note(Some(name), "enabled = false: not started, its tools not served".to_owned()),
        }
        return;
    }
    let Transport::Stdio(stdio) = &spec.transport else { return };
    for arg in &stdio.args {
        if let Some(problem) = argument_problem(arg, stdio.cwd.as_deref()) {
            report.warn(Some(name), problem);
        }
    }
}

/// Why `arg`, an argument that names a path (absolute, `./`, `../`, `~/`), will not find it.
/// Package names (`@scope/name`), URLs and options are not paths.
fn argument_problem(arg: &str, cwd: Option<&Path>) -> Option<String> {
    if arg == "~" || arg.starts_with("~/") {
        return Some(format!("argument {arg:?}: no shell runs the server, so ~ is not your home; write the whole path"));
    }
    let relative = arg.starts_with("./") || arg.starts_with("../");
    if !arg.starts_with('/') && !relative {
        return None;
    }
    let path = match (relative, cwd) {
        (false, _) => Path::new(arg).to_path_buf(),
        (true, Some(cwd)) => cwd.join(arg),
        (true, None) => {
            return Some(format!(
                "argument {arg:?} is relative, and the entry has no cwd: it is not read from this file's directory nor \
                 your shell's (give cwd, or the whole path)"
            ));
        }
    };
    // `symlink_metadata`: a dangling link is there (the server may make its target).
    let missing = |path: &Path| std::fs::symlink_metadata(path).is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound);
    if !missing(&path) {
        return None;
    }
    // A file the server makes (a database, a log) is missing until its first start; its
    // directory is not.
    let parent = path.parent().filter(|parent| !parent.as_os_str().is_empty());
    if parent.is_some_and(|parent| !missing(parent)) {
        return None;
    }
    Some(format!("argument {arg:?} names {}, which does not exist, nor does its directory (a typo?)", path.display()))
}

/// Servers probed at once, at most.
const PROBES_AT_ONCE: usize = 4;

/// `--probe`: every server started once as the daemon would start it, listed, stopped; a few at
/// a time, under the orphan guard the daemon uses. The tools of each server that listed them.
async fn probe_servers(config: &Config, report: &mut Report) -> BTreeMap<String, Vec<String>> {
    use crate::supervisor::probe::{Probed, probe};
    let reaper = match std::env::current_exe().and_then(|program| crate::upstream::reaper::Reaper::spawn(&program)) {
        Ok(reaper) => std::sync::Arc::new(reaper),
        Err(error) => {
            report.probe_failed = true;
            report.warn(None, format!("probe: cannot start the orphan guard the servers run under: {error}"));
            return BTreeMap::new();
        }
    };
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(PROBES_AT_ONCE));
    let mut probes = tokio::task::JoinSet::new();
    for (name, spec) in &config.servers {
        let (name, spec, reaper, slots) = (name.clone(), spec.clone(), reaper.clone(), slots.clone());
        probes.spawn(async move {
            let _slot = slots.acquire_owned().await;
            let probed = probe(&name, &spec, reaper).await;
            (name, probed)
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = probes.join_next().await {
        match joined {
            Ok(result) => results.push(result),
            Err(error) => {
                report.probe_failed = true;
                report.warn(None, format!("probe: a probe failed inside toolhost: {error}"));
            }
        }
    }
    reaper.stop().await;
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut served = BTreeMap::new();
    for (name, probed) in results {
        match probed {
            Probed::Works { tools, protocol, took } => {
                let count = tools.len();
                report.note(Some(&name), format!("probe: works: {count} tools, protocol {protocol}, ready in {} ms", took.as_millis()));
                served.insert(name, tools);
            }
            Probed::Fails(why) => {
                report.probe_failed = true;
                report.warn(Some(&name), format!("probe: fails: {why}"));
            }
            Probed::Skipped(why) => report.note(Some(&name), format!("probe: not started: {why}")),
        }
    }
    served
}

/// The tool globs of the file, each with where it is written, the server whose list it is (a
/// server's own `approve`), and the pattern: `(key, Some(server), pattern)` or `(key, None, pattern)`.
fn tool_patterns(config: &Config) -> Vec<(String, Option<&str>, &str)> {
    let mut patterns = Vec::new();
    for (server, spec) in &config.servers {
        patterns.extend(spec.approve.iter().map(|pattern| (format!("servers.{server}.approve"), Some(server.as_str()), pattern.as_str())));
    }
    for (idx, agent) in config.access.agents.iter().enumerate() {
        let at = |key: &str| format!("access.agents[{idx}] ({:?}).{key}", agent.name);
        for (key, list) in [("allow", &agent.allow), ("deny", &agent.deny), ("approve", &agent.approve)] {
            patterns.extend(list.iter().map(|pattern| (at(key), None, pattern.as_str())));
        }
        for quota in &agent.quotas {
            patterns.extend(quota.tools.iter().map(|pattern| (at("quota.tools"), None, pattern.as_str())));
        }
    }
    for (name, profile) in &config.mcp.profiles {
        let lists = [("tools", Some(&profile.tools)), ("lazy", profile.lazy.as_ref())];
        for (key, list) in lists.into_iter().filter_map(|(key, list)| Some((key, list?))) {
            patterns.extend(list.iter().map(|pattern| (format!("mcp.profiles.{name}.{key}"), None, pattern.as_str())));
        }
    }
    patterns
}

/// What the file alone tells of its tool globs: a server's own `approve` written as a qualified
/// name (`other__tool`) matches only a tool of its own server that the server itself names so.
fn policy_findings(config: &Config, report: &mut Report) {
    // The approver is another entry: with one operator entry, its own requests wait forever.
    let operators: Vec<&str> = config.access.agents.iter().filter(|agent| agent.admin).map(|agent| agent.name.as_str()).collect();
    if config.approvals.separate_approver && operators.len() < 2 {
        let which = match (config.access.configured, operators.first()) {
            (false, _) => "without [access] every local operator is one entry, so their calls".to_owned(),
            (true, Some(only)) => format!("{only:?} is the only operator entry, so its calls"),
            (true, None) => "no entry is an operator, so calls".to_owned(),
        };
        report.warn(None, format!("approvals.separate_approver: {which} that need approval can never be approved"));
    }
    for (key, server, pattern) in tool_patterns(config) {
        let Some(server) = server else { continue };
        let Some((named, rest)) = pattern.split_once(crate::catalog::names::SEPARATOR) else { continue };
        if !config.servers.contains_key(named) {
            continue;
        }
        let fix = match named == server {
            true => format!("write {rest:?}"),
            false => format!("put {rest:?} in [servers.{named}] approve"),
        };
        report.warn(
            Some(server),
            format!(
                "{key}: {pattern:?} is written as a tool of server {named:?}, but a server's approve names its own tools as it                  names them, so it matches only a tool {server:?} itself calls {pattern:?}: {fix}"
            ),
        );
    }
}

/// `--probe`: each tool glob (and pin) that reaches a server that listed its tools and matches
/// none of them. A glob whose server part is a wildcard is judged only when it matches nothing
/// anywhere.
fn served_policy_findings(config: &Config, served: &BTreeMap<String, Vec<String>>, report: &mut Report) {
    use crate::catalog::names::{SEPARATOR, ToolGlob, ToolName, qualify};
    let tools: Vec<(&str, &str, String)> = served
        .iter()
        .flat_map(|(server, tools)| tools.iter().map(move |tool| (server.as_str(), tool.as_str(), qualify(server, tool))))
        .collect();
    let matches_one = |glob: &ToolGlob, only: Option<&str>| {
        tools
            .iter()
            .filter(|(server, _, _)| only.is_none_or(|only| only == *server))
            .any(|(server, tool, qualified)| glob.matches(&ToolName::new(server, tool, qualified)))
    };
    for (key, server, pattern) in tool_patterns(config) {
        let (glob, reaches) = match server {
            Some(server) => (ToolGlob::of_server(server, pattern), Some(server)),
            None => {
                let literal = pattern.split_once(SEPARATOR).map(|(named, _)| named).filter(|named| !named.contains(['*', '?']));
                (ToolGlob::qualified(pattern), literal)
            }
        };
        let judged = match reaches {
            Some(server) => served.contains_key(server),
            None => served.len() == config.servers.len(),
        };
        if judged && !matches_one(&glob, reaches) {
            let whose = reaches.map_or("any server".to_owned(), |server| format!("{server:?}"));
            report.warn(
                reaches,
                format!("{key}: {pattern:?} matches none of the tools {whose} serves now: it grants, denies or gates nothing"),
            );
        }
    }
    for (server, spec) in &config.servers {
        let Some(listed) = served.get(server) else { continue };
        for pin in spec.integrity.pins.keys().filter(|pin| !listed.contains(pin)) {
            report.warn(
                Some(server),
                format!("servers.{server}.pins: {pin:?} is none of the tools it serves now (a pin names a tool as the server does)"),
            );
        }
    }
}

/// Why a stdio server's program would not start, if it would not: a path that is not an
/// executable file, or a bare name on none of the directories of the `PATH` the server gets.
fn missing_program(spec: &ServerSpec) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let Transport::Stdio(stdio) = &spec.transport else { return None };
    let executable = |path: &Path| path.metadata().is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0);
    if stdio.command.components().count() > 1 || stdio.command.is_absolute() {
        return (!executable(&stdio.command))
            .then(|| format!("command {} is not an executable file: the server will fail to start", stdio.command.display()));
    }
    // What the server gets as PATH: its own `env`, else toolhost's.
    let path = match stdio.env.get("PATH") {
        Some(value) => value.expose().to_owned(),
        None => std::env::var("PATH").unwrap_or_default(),
    };
    let found = std::env::split_paths(&path).any(|dir| executable(&dir.join(&stdio.command)));
    (!found).then(|| {
        format!(
            "command {:?} is on none of the directories of PATH ({path}): the server will fail to start",
            stdio.command.display().to_string()
        )
    })
}

/// What `check-config` says of a server's OAuth authorization (never a token).
fn oauth_status(name: &str, spec: &ServerSpec) -> Option<String> {
    let Transport::Http(http) = &spec.transport else { return None };
    let Some(AuthSpec::OAuth(oauth)) = &http.auth else { return None };
    let file = oauth.token_file.display();
    let stored = crate::upstream::oauth::tokens::load(&oauth.token_file);
    let ours = stored.as_ref().ok().and_then(Option::as_ref).filter(|stored| stored.server_url == http.url);
    let pinned = match (&oauth.issuer, ours.and_then(|stored| stored.issuer.as_deref())) {
        (Some(configured), _) => format!("; credentials go to {configured} only (auth.issuer)"),
        (None, Some(pinned)) => format!("; credentials go to {pinned} only (pinned in {file})"),
        (None, None) => String::new(),
    };
    if oauth.grant == Grant::ClientCredentials {
        return Some(format!("OAuth client credentials; the daemon gets its own tokens{pinned}"));
    }
    Some(match (&stored, ours) {
        (_, Some(stored)) if stored.refresh_token.is_some() => {
            format!("OAuth authorization code; logged in ({file} holds a refresh token){pinned}")
        }
        (_, Some(stored)) if stored.access_token.is_none() => {
            format!("OAuth authorization code; not logged in yet: run `toolhost login {name}`{pinned}")
        }
        (Ok(Some(_)), _) => {
            format!("OAuth authorization code; not logged in (no usable refresh token in {file}): run `toolhost login {name}`")
        }
        (Ok(None), _) => format!("OAuth authorization code; not logged in yet: run `toolhost login {name}`"),
        (Err(error), _) => format!("OAuth authorization code; {error}"),
    })
}

pub fn schema_text(schema: &Schema) -> String {
    match schema {
        Schema::Empty => "empty (the daemon creates it on first connect)".to_owned(),
        Schema::Current => "current".to_owned(),
        Schema::Older { applied, expected } => {
            format!("older (version {applied}, this toolhost expects {expected}): run toolhost fleet-migrate")
        }
        Schema::Newer { applied, known } => format!("newer (version {applied}, this toolhost knows up to {known}): upgrade toolhost"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_naming_paths_that_are_not_there_are_said_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = Some(dir.path());
        std::fs::create_dir(dir.path().join("data")).unwrap();
        for fine in ["@modelcontextprotocol/server-filesystem", "https://example.com/a", "--root=/nowhere", "/", "./data", "./data/new.db"]
        {
            assert_eq!(argument_problem(fine, cwd), None, "{fine}");
        }
        let said = |arg: &str, cwd| argument_problem(arg, cwd).unwrap_or_else(|| panic!("{arg} is said"));
        assert!(said("/srv/shraed/docs", cwd).contains("does not exist, nor does its directory"));
        assert!(said("./dta/x", cwd).contains(&dir.path().join("./dta/x").display().to_string()));
        assert!(said("./data", None).contains("the entry has no cwd"));
        assert!(said("~/notes", cwd).contains("~ is not your home"));
    }
}
