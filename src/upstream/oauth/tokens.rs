//! The token file: what an OAuth server's authorization needs to survive a restart (the refresh
//! token, the current access token and its expiry, a dynamically registered client). One JSON
//! file per server, mode 0600 in a 0700 directory, replaced atomically (write, fsync, rename).
//!
//! Why a file and not the SQLite store: the store is replicated (the fleet ships from it,
//! operators copy it for support), a token must not be; `toolhost login` writes the file without
//! the daemon's database lock; and an operator revokes locally by deleting one file.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A token file is small; anything larger is not one of toolhost's.
const MAX_FILE_BYTES: u64 = 64 << 10;
const VERSION: u32 = 1;

/// What is kept for one server. Every secret in it is registered for redaction when loaded.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    pub version: u32,
    /// The MCP server these tokens are for: a file for another URL is not used.
    pub server_url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// A client toolhost registered itself (dynamic registration) at `issuer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_client: Option<RegisteredClient>,
    /// The scopes granted (or asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_unix_ms: Option<u64>,
}

#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredClient {
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_endpoint_auth_method: Option<String>,
    pub redirect_uri: String,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("server_url", &self.server_url)
            .field("issuer", &self.issuer)
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| crate::secrets::REDACTED))
            .field("expires_at_unix_ms", &self.expires_at_unix_ms)
            .finish_non_exhaustive()
    }
}

impl Stored {
    pub fn new(server_url: &str) -> Stored {
        Stored { version: VERSION, server_url: server_url.to_owned(), ..Stored::default() }
    }
}

/// What is wrong with a token file, or what kept it from being written. Names the file, never
/// what it holds.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot {doing} the token file {}: {source}", path.display())]
    Io { doing: &'static str, path: PathBuf, source: std::io::Error },
    #[error("the token file {} is larger than {MAX_FILE_BYTES} bytes", .0.display())]
    TooLarge(PathBuf),
    #[error("the token file {} is readable by other users; `chmod 600` it or delete it and log in again", .0.display())]
    Exposed(PathBuf),
    #[error("the token file {} is damaged ({source}); delete it and log in again", path.display())]
    Damaged { path: PathBuf, source: serde_json::Error },
    #[error("the token file {} has version {found}, not {VERSION}", path.display())]
    Version { path: PathBuf, found: u32 },
    #[error("cannot encode the token file: {0}")]
    Encode(serde_json::Error),
}

/// Reads `path`: `Ok(None)` when there is no file.
///
/// # Errors
/// A file that is unreadable, too large, readable by others, or not a token file.
pub fn load(path: &Path) -> Result<Option<Stored>, TokenFileError> {
    let io = |doing| move |source| TokenFileError::Io { doing, path: path.to_path_buf(), source };
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(io("read")(err)),
    };
    if metadata.len() > MAX_FILE_BYTES {
        return Err(TokenFileError::TooLarge(path.to_path_buf()));
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        return Err(TokenFileError::Exposed(path.to_path_buf()));
    }
    let text = std::fs::read_to_string(path).map_err(io("read"))?;
    let stored: Stored = serde_json::from_str(&text).map_err(|source| TokenFileError::Damaged { path: path.to_path_buf(), source })?;
    if stored.version != VERSION {
        return Err(TokenFileError::Version { path: path.to_path_buf(), found: stored.version });
    }
    for secret in [&stored.refresh_token, &stored.access_token].into_iter().flatten() {
        crate::secrets::register(secret);
    }
    if let Some(secret) = stored.registered_client.as_ref().and_then(|client| client.client_secret.as_ref()) {
        crate::secrets::register(secret);
    }
    Ok(Some(stored))
}

/// Replaces `path` with `stored`, durably: a crash leaves the old file or the new one.
///
/// # Errors
/// The directory or the file cannot be written (a full disk among them).
pub fn save(path: &Path, stored: &Stored) -> Result<(), TokenFileError> {
    let fail = |doing: &'static str, source: std::io::Error| TokenFileError::Io { doing, path: path.to_path_buf(), source };
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(|err| fail("create the directory of", err))?;
    }
    let text = serde_json::to_vec_pretty(stored).map_err(TokenFileError::Encode)?;
    let temporary = path.with_extension("json.tmp");
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()
    })();
    if let Err(err) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(fail("write", err));
    }
    // `toolhost login` run as root for a daemon that runs as its own user: the file belongs to
    // whoever owns the directory.
    if nix::unistd::geteuid().is_root()
        && let Ok(owner) = std::fs::metadata(dir)
        && owner.uid() != 0
    {
        let _ = std::os::unix::fs::chown(&temporary, Some(owner.uid()), Some(owner.gid()));
    }
    std::fs::rename(&temporary, path).map_err(|err| fail("replace", err))?;
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_round_trips_privately_and_refuses_loose_permissions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("oauth/remote.oauth.json");
        assert_eq!(load(&path).unwrap(), None);
        let mut stored = Stored::new("https://mcp.example/mcp");
        stored.refresh_token = Some("refresh-token-value-1".into());
        stored.expires_at_unix_ms = Some(1_700_000_000_000);
        save(&path, &stored).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(load(&path).unwrap(), Some(stored.clone()));
        assert!(!format!("{stored:?}").contains("refresh-token-value-1"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(load(&path), Err(TokenFileError::Exposed(_))));
        std::fs::write(&path, "{").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(load(&path), Err(TokenFileError::Damaged { .. })));
    }
}
