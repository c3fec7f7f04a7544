//! `toolhost audit verify` and `toolhost audit key`: the audit chain checked, and the public
//! half of the key its checkpoints are signed with, read from the store's directory itself (no
//! daemon needed, and none trusted).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::store::audit_chain::{self, Span, Verdict};

/// What `toolhost audit` does without the daemon (or, for `verify --daemon`, through it).
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AuditAction {
    /// Check the audit chain record by record and every signed checkpoint: prints the first
    /// record changed, removed, inserted or reordered, or "intact". Exit 1 when broken.
    Verify {
        /// The store file itself, instead of --config's.
        #[arg(long)]
        store: Option<PathBuf>,
        /// The public key (hex, as `toolhost audit key` prints it) to check checkpoints with,
        /// instead of the daemon's own: keep a copy where the store's writers cannot.
        #[arg(long)]
        public_key: Option<PathBuf>,
        /// Only records written from this time: RFC 3339 (2026-12-01T00:00:00Z) or a time ago (24h).
        #[arg(long)]
        from: Option<String>,
        /// Only records written up to this time, in the same terms.
        #[arg(long)]
        to: Option<String>,
        /// Every host's chain as the fleet store holds it, each against the key it shipped first
        /// (--config names the fleet store).
        #[arg(long, conflicts_with_all = ["store", "daemon"])]
        fleet: bool,
        /// Ask the running daemon to check its own store (operators only).
        #[arg(long, conflicts_with_all = ["store", "public_key"])]
        daemon: bool,
        /// Check an exported trail (the JSON Lines an `[audit] export` file or socket received)
        /// link by link, without the store: what a SIEM holds is what was written.
        #[arg(long, conflicts_with_all = ["store", "public_key", "daemon", "fleet", "from", "to"])]
        export: Option<PathBuf>,
        #[command(flatten)]
        options: super::ClientOptions,
    },
    /// Print the public half of the key the audit checkpoints are signed with.
    Key {
        #[arg(long, short, env = "TOOLHOST_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long)]
        store: Option<PathBuf>,
    },
}

/// Why `toolhost audit` gave no verdict.
#[derive(Debug, thiserror::Error)]
pub enum AuditCliError {
    #[error("{flag}: {text:?} is before 1970")]
    Before1970 { flag: &'static str, text: String },
    #[error("{flag}: {text:?} is neither a time (2026-12-01T00:00:00Z) nor a time ago (24h): {source}")]
    NotATime { flag: &'static str, text: String, source: crate::config::DurationError },
    #[error("--from is after --to")]
    FromAfterTo,
    #[error("name the daemon's --config (or the --store file)")]
    NoStore,
    #[error("name the daemon's --config: its [fleet] names the fleet store")]
    NoFleetConfig,
    #[error("the configuration has no [fleet]")]
    NoFleet,
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("no audit key at {} (the daemon makes it at its first start; or name one with --public-key)", .0.display())]
    NoKey(PathBuf),
    #[error(transparent)]
    Key(#[from] audit_chain::KeyError),
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot read {}: {source}", path.display())]
    Store { path: PathBuf, source: sqlx::Error },
    #[error("{} does not hold a public key (64 hex digits)", .0.display())]
    NotAPublicKey(PathBuf),
    #[error("{} line {line}: not JSON: {source}", path.display())]
    NotJson { path: PathBuf, line: usize, source: serde_json::Error },
    #[error("{} line {line}: {source}", path.display())]
    NotARecord { path: PathBuf, line: usize, source: crate::audit::format::RecordError },
    #[error("{0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Fleet(#[from] crate::fleet::FleetError),
    #[error(transparent)]
    Daemon(#[from] super::ClientError),
}

/// A runtime for the work that needs one (the store, the fleet store, the daemon).
fn runtime() -> Result<tokio::runtime::Runtime, AuditCliError> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(AuditCliError::Runtime)
}

/// Runs `action`, printing to stdout; the exit code.
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub fn run(action: AuditAction) -> ExitCode {
    let result = match action {
        AuditAction::Verify { store, public_key, from, to, fleet, daemon, export, options } => {
            let config = options.config.clone().or_else(|| std::env::var_os("TOOLHOST_CONFIG").map(PathBuf::from));
            let found = span(from.as_deref(), to.as_deref()).and_then(|span| match (daemon, fleet, export) {
                (_, _, Some(export)) => verify_export(&export).map(|found| vec![found]),
                (true, ..) => through_daemon(&options, span).map(|found| vec![found]),
                (false, true, None) => fleet_hosts(config.as_deref()),
                (false, false, None) => verify(config.as_deref(), store, public_key.as_deref(), span).map(|found| vec![found]),
            });
            found.map(|found| render(&found, options.json))
        }
        AuditAction::Key { config, store } => key(config.as_deref(), store),
    };
    match result {
        Ok((text, code)) => {
            println!("{text}");
            code
        }
        Err(problem) => {
            eprintln!("toolhost: {problem}");
            ExitCode::from(super::EXIT_USAGE)
        }
    }
}

/// `--from` and `--to` as a span of record times.
fn span(from: Option<&str>, to: Option<&str>) -> Result<Span, AuditCliError> {
    let at = |flag: &'static str, text: &str| -> Result<i64, AuditCliError> {
        if let Ok(time) = humantime::parse_rfc3339_weak(text) {
            let since_epoch =
                time.duration_since(std::time::UNIX_EPOCH).map_err(|_| AuditCliError::Before1970 { flag, text: text.to_owned() })?;
            return Ok(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX));
        }
        let ago = crate::config::parse_duration(text, std::time::Duration::from_secs(3650 * 24 * 3600))
            .map_err(|source| AuditCliError::NotATime { flag, text: text.to_owned(), source })?;
        Ok(crate::catalog::record::now_ms().saturating_sub(i64::try_from(ago.as_millis()).unwrap_or(i64::MAX)))
    };
    let span = Span { from_ms: from.map(|text| at("--from", text)).transpose()?, to_ms: to.map(|text| at("--to", text)).transpose()? };
    if let (Some(from), Some(to)) = (span.from_ms, span.to_ms)
        && from > to
    {
        return Err(AuditCliError::FromAfterTo);
    }
    Ok(span)
}

/// The configuration (unless `--store` names the file alone) and the store's path.
fn load(config: Option<&Path>, store: Option<PathBuf>) -> Result<(Option<crate::config::Config>, PathBuf), AuditCliError> {
    if let Some(store) = store {
        return Ok((None, store));
    }
    let path = config.ok_or(AuditCliError::NoStore)?;
    let config = crate::config::Config::load(path)?;
    let store = config.store.path.clone();
    Ok((Some(config), store))
}

/// The signing key as the configuration places it (else beside the store); never made here: a
/// key that is not there yet is the daemon's to make.
fn signing_key(config: Option<&crate::config::Config>, store: &Path) -> Result<ed25519_dalek::SigningKey, AuditCliError> {
    let path = match config {
        Some(config) => config.audit.key_place(store).path,
        None => store.parent().unwrap_or(Path::new(".")).join("audit.key"),
    };
    if !path.exists() {
        return Err(AuditCliError::NoKey(path));
    }
    Ok(audit_chain::load_or_make_key(&path, false)?)
}

fn key(config: Option<&Path>, store: Option<PathBuf>) -> Result<(String, ExitCode), AuditCliError> {
    let (config, store) = load(config, store)?;
    Ok((audit_chain::public_key_text(&signing_key(config.as_ref(), &store)?), ExitCode::SUCCESS))
}

/// What one verification found: of which host (`--fleet`), its verdict, and how the fleet's
/// copy of its checkpoints took part.
struct Found {
    host_id: Option<String>,
    verdict: Verdict,
    kept_by_fleet: Option<u64>,
    fleet_problem: Option<String>,
}

fn verify(config: Option<&Path>, store: Option<PathBuf>, public_key: Option<&Path>, span: Span) -> Result<Found, AuditCliError> {
    let (loaded, store) = load(config, store)?;
    let key = match public_key {
        Some(path) => read_public_key(path)?,
        None => signing_key(loaded.as_ref(), &store)?.verifying_key(),
    };
    runtime()?.block_on(async {
        // This host's checkpoints as the fleet store kept them, when it ships its audit there.
        let fleet = loaded.as_ref().and_then(|config| config.fleet.as_ref()).filter(|fleet| fleet.share_audit);
        let (kept, fleet_problem) = match fleet {
            Some(fleet) => match fleet_checkpoints(fleet).await {
                Ok(kept) => (Some(kept), None),
                Err(problem) => (None, Some(problem.to_string())),
            },
            None => (None, None),
        };
        let verdict = audit_chain::verify(&store, &key, span, kept.as_deref().unwrap_or_default())
            .await
            .map_err(|source| AuditCliError::Store { path: store.clone(), source })?;
        let kept_by_fleet = kept.map(|kept| u64::try_from(kept.len()).unwrap_or(u64::MAX));
        Ok(Found { host_id: None, verdict, kept_by_fleet, fleet_problem })
    })
}

async fn fleet_checkpoints(fleet: &crate::config::FleetConfig) -> Result<Vec<audit_chain::CheckpointRecord>, crate::fleet::FleetError> {
    let pool = crate::fleet::schema::connect(fleet).await?;
    let kept = crate::fleet::verify::checkpoints_of(&pool, &fleet.host_id).await;
    pool.close().await;
    kept
}

fn read_public_key(path: &Path) -> Result<ed25519_dalek::VerifyingKey, AuditCliError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuditCliError::Read { path: path.to_path_buf(), source })?;
    audit_chain::parse_public_key(&text).ok_or_else(|| AuditCliError::NotAPublicKey(path.to_path_buf()))
}

/// The verdicts in words (or JSON), and exit 1 when any is broken.
fn render(found: &[Found], json: bool) -> (String, ExitCode) {
    let broken = found.iter().any(|found| matches!(found.verdict, Verdict::Broken { .. }));
    let code = if broken { ExitCode::from(1) } else { ExitCode::SUCCESS };
    if json {
        let values: Vec<serde_json::Value> = found.iter().map(as_json).collect();
        let value = match values.as_slice() {
            [one] if found[0].host_id.is_none() => one.clone(),
            _ => serde_json::Value::Array(values),
        };
        return (value.to_string(), code);
    }
    if found.is_empty() {
        return ("no host has shipped audit records to the fleet store".to_owned(), code);
    }
    let lines: Vec<String> = found
        .iter()
        .map(|found| {
            let text = in_words(found);
            match &found.host_id {
                Some(host_id) => format!("{host_id}: {text}"),
                None => text,
            }
        })
        .collect();
    (lines.join("\n"), code)
}

fn in_words(found: &Found) -> String {
    match &found.verdict {
        Verdict::Intact { records, checkpoints, last_signed_at_ms, before_chain } => {
            let signed =
                last_signed_at_ms.map_or_else(|| "never signed".to_owned(), |at| format!("last signed at {}", super::output::rfc3339(at)));
            let older = if *before_chain > 0 {
                format!(" ({before_chain} older records precede the chain; nothing signs them)")
            } else {
                String::new()
            };
            let fleet = match (&found.kept_by_fleet, &found.fleet_problem) {
                (Some(kept), _) => format!(", {kept} of them as the fleet store kept them"),
                (None, Some(problem)) => format!(" (not checked against the fleet store: {problem})"),
                (None, None) => String::new(),
            };
            format!("intact: {records} records, {checkpoints} checkpoints{fleet}, {signed}{older}")
        }
        Verdict::Broken { problem, .. } => format!("BROKEN: {problem}"),
    }
}

fn as_json(found: &Found) -> serde_json::Value {
    let mut value = match &found.verdict {
        Verdict::Intact { records, checkpoints, last_signed_at_ms, before_chain } => serde_json::json!({
            "intact": true,
            "records": records,
            "checkpoints": checkpoints,
            "last_signed_at": last_signed_at_ms.map(super::output::rfc3339),
            "before_chain": before_chain,
        }),
        Verdict::Broken { record_id, problem } => serde_json::json!({"intact": false, "record_id": record_id, "problem": problem}),
    };
    if let Some(host_id) = &found.host_id {
        value["host_id"] = serde_json::json!(host_id);
    }
    value["fleet_checkpoints"] = serde_json::json!(found.kept_by_fleet);
    if let Some(problem) = &found.fleet_problem {
        value["fleet_problem"] = serde_json::json!(problem);
    }
    value
}

/// `--export`: an exported trail, line by line; its first record's link is taken as given (the
/// sink may have joined after the chain began), and checkpoints are not exported.
fn verify_export(path: &Path) -> Result<Found, AuditCliError> {
    use std::io::BufRead;
    let read = |source| AuditCliError::Read { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut records = Vec::new();
    for (idx, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(read)?;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_str(&line).map_err(|source| AuditCliError::NotJson { path: path.to_path_buf(), line: idx + 1, source })?;
        let record = crate::audit::format::parse(&value).map_err(|source| AuditCliError::NotARecord {
            path: path.to_path_buf(),
            line: idx + 1,
            source,
        })?;
        records.push(record);
    }
    let verdict = audit_chain::check(audit_chain::Chain { anchor: None, records: &records, to_head: false }, &[], None);
    Ok(Found { host_id: None, verdict, kept_by_fleet: None, fleet_problem: None })
}

/// `--fleet`: every host's shipped chain.
fn fleet_hosts(config: Option<&Path>) -> Result<Vec<Found>, AuditCliError> {
    let config = crate::config::Config::load(config.ok_or(AuditCliError::NoFleetConfig)?)?;
    let fleet = config.fleet.ok_or(AuditCliError::NoFleet)?;
    let verdicts = runtime()?.block_on(async {
        let pool = crate::fleet::schema::connect(&fleet).await?;
        let verdicts = crate::fleet::verify::every_host(&pool).await;
        pool.close().await;
        verdicts
    })?;
    Ok(verdicts
        .into_iter()
        .map(|(host_id, verdict)| Found { host_id: Some(host_id), verdict, kept_by_fleet: None, fleet_problem: None })
        .collect())
}

/// `--daemon`: the daemon checks its own store (and the fleet's copy of its checkpoints).
fn through_daemon(options: &super::ClientOptions, span: Span) -> Result<Found, AuditCliError> {
    let response = runtime()?.block_on(super::verify_audit(options, span))?;
    let verdict = match response.intact {
        true => Verdict::Intact {
            records: response.records,
            checkpoints: response.checkpoints,
            last_signed_at_ms: Some(response.last_signed_unix_ms).filter(|at| *at > 0),
            before_chain: response.before_chain,
        },
        false => Verdict::Broken { record_id: Some(response.record_id).filter(|id| *id > 0), problem: response.problem },
    };
    let kept_by_fleet = Some(response.fleet_checkpoints).filter(|kept| *kept > 0);
    Ok(Found { host_id: None, verdict, kept_by_fleet, fleet_problem: None })
}
