//! `toolhost audit verify` and `toolhost audit key`: the audit chain checked, and the public
//! half of the key its checkpoints are signed with, read from the store's directory itself (no
//! daemon needed, and none trusted).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::catalog::store::audit_chain::{self, Verdict};

/// What `toolhost audit` does without the daemon.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AuditAction {
    /// Check the audit chain record by record and every signed checkpoint: prints the first
    /// record changed, removed, inserted or reordered, or "intact". Exit 1 when broken.
    Verify {
        /// The daemon's configuration (for its store and key).
        #[arg(long, short, env = "TOOLHOST_CONFIG")]
        config: Option<PathBuf>,
        /// The store file itself, instead of --config's.
        #[arg(long)]
        store: Option<PathBuf>,
        /// The public key (hex, as `toolhost audit key` prints it) to check checkpoints with,
        /// instead of the one beside the store: keep a copy where the store's writers cannot.
        #[arg(long)]
        public_key: Option<PathBuf>,
    },
    /// Print the public half of the key the audit checkpoints are signed with.
    Key {
        #[arg(long, short, env = "TOOLHOST_CONFIG")]
        config: Option<PathBuf>,
        #[arg(long)]
        store: Option<PathBuf>,
    },
}

/// Runs `action`, printing to stdout; the exit code.
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub fn run(action: AuditAction) -> ExitCode {
    let result = match action {
        AuditAction::Verify { config, store, public_key } => verify(config.as_deref(), store, public_key.as_deref()),
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

fn store_path(config: Option<&Path>, store: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(store) = store {
        return Ok(store);
    }
    let config = config.ok_or("name the daemon's --config (or the --store file)")?;
    Ok(crate::config::Config::load(config).map_err(|error| error.to_string())?.store.path)
}

fn key_path(store: &Path) -> PathBuf {
    store.parent().unwrap_or(Path::new(".")).join("audit.key")
}

fn key(config: Option<&Path>, store: Option<PathBuf>) -> Result<(String, ExitCode), String> {
    let store = store_path(config, store)?;
    let path = key_path(&store);
    // Never made here: a key that is not there yet is the daemon's to make.
    if !path.exists() {
        return Err(format!("no audit key at {} (the daemon makes it at its first start)", path.display()));
    }
    let signer = audit_chain::load_or_make_key(&path)?;
    Ok((audit_chain::public_key_text(&signer), ExitCode::SUCCESS))
}

fn verify(config: Option<&Path>, store: Option<PathBuf>, public_key: Option<&Path>) -> Result<(String, ExitCode), String> {
    let store = store_path(config, store)?;
    let key = match public_key {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read {}: {error}", path.display()))?;
            audit_chain::parse_public_key(&text).ok_or_else(|| format!("{} does not hold a public key (64 hex digits)", path.display()))?
        }
        None => {
            let path = key_path(&store);
            if !path.exists() {
                return Err(format!("no audit key at {} (name one with --public-key)", path.display()));
            }
            audit_chain::load_or_make_key(&path)?.verifying_key()
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|error| error.to_string())?;
    let verdict =
        runtime.block_on(audit_chain::verify(&store, &key)).map_err(|error| format!("cannot read {}: {error}", store.display()))?;
    Ok(match verdict {
        Verdict::Intact { records, checkpoints, last_signed_at_ms, before_chain } => {
            let signed =
                last_signed_at_ms.map_or_else(|| "never signed".to_owned(), |at| format!("last signed at {}", super::output::rfc3339(at)));
            let older = if before_chain > 0 { format!(" ({before_chain} older records precede the chain)") } else { String::new() };
            (format!("intact: {records} records, {checkpoints} checkpoints, {signed}{older}"), ExitCode::SUCCESS)
        }
        Verdict::Broken { problem, .. } => (format!("BROKEN: {problem}"), ExitCode::from(1)),
    })
}
