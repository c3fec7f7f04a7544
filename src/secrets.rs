//! Secrets: values that come from a `${…}` reference in the configuration, and the rule that they
//! never appear in anything toolhost writes.
//!
//! A reference is `${VAR}` (the daemon's environment), `${file:/abs/path}` (a file's content,
//! trimmed) or `${cred:NAME}` (a systemd credential: `$CREDENTIALS_DIRECTORY/NAME`, from
//! `LoadCredential=`). Each resolved value is registered with the process-wide [`redact`] list.
//! Text that comes from outside (an upstream's error message or HTTP body, its stderr, a garbage
//! line) passes through [`redact`] where it enters toolhost, so an upstream that echoes its token
//! back cannot get it into a log, `last_error`, an API answer, a span or the store.

use std::borrow::Cow;
use std::path::Path;
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;

/// What a secret looks like in anything toolhost writes.
pub const REDACTED: &str = "[redacted]";
/// Shorter values are not scrubbed from text: they would match innocent words.
const MIN_REDACTED_LEN: usize = 6;

static SECRETS: LazyLock<ArcSwap<Vec<Arc<str>>>> = LazyLock::new(|| ArcSwap::from_pointee(Vec::new()));

/// A string that may hold secrets, resolved from the configuration. Its `Debug` form never shows them.
#[derive(Clone, PartialEq, Eq)]
pub struct Resolved {
    value: String,
    has_secret: bool,
}

impl Resolved {
    pub fn expose(&self) -> &str {
        &self.value
    }

    pub fn has_secret(&self) -> bool {
        self.has_secret
    }

    /// The same value, known to hold a secret written in the file itself (a password in a
    /// URL): never printed either.
    pub fn marked_secret(self) -> Resolved {
        Resolved { has_secret: true, ..self }
    }
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.has_secret { f.write_str("\"[redacted]\"") } else { write!(f, "{:?}", self.value) }
    }
}

/// A `${…}` reference that cannot be resolved (never what a resolved one held).
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("an unclosed ${{ reference")]
    Unclosed,
    #[error("${{file:{0}}} needs an absolute path")]
    RelativeFile(String),
    #[error("cannot read {path}: {source}")]
    File { path: String, source: std::io::Error },
    #[error("${{cred:{0}}} must name one credential")]
    CredentialName(String),
    #[error("${{cred:{0}}}: $CREDENTIALS_DIRECTORY is not set (systemd sets it for LoadCredential=)")]
    NoCredentialsDirectory(String),
    #[error("cannot read the credential {name} ({path}): {source}")]
    Credential { name: String, path: String, source: std::io::Error },
    #[error("the environment variable {0} is not set")]
    Environment(String),
}

/// Resolves every `${…}` reference in `value` and registers what they resolved to as secrets.
///
/// # Errors
/// [`ReferenceError`] naming the reference that cannot be resolved.
pub fn resolve(value: &str) -> Result<Resolved, ReferenceError> {
    resolve_with(value, &[])
}

/// [`resolve`], where `${NAME}` for each `(NAME, value)` of `local` is that value: a place of
/// the entry's own (`${data}`), plain text, never a secret nor looked up elsewhere.
///
/// # Errors
/// [`ReferenceError`] naming the reference that cannot be resolved.
pub fn resolve_with(value: &str, local: &[(&str, &str)]) -> Result<Resolved, ReferenceError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    let mut found = Vec::new();
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(ReferenceError::Unclosed)?;
        rest = &after[end + 1..];
        if let Some((_, plain)) = local.iter().find(|(name, _)| *name == &after[..end]) {
            out.push_str(plain);
            continue;
        }
        let secret = lookup(&after[..end])?;
        out.push_str(&secret);
        found.push(secret);
    }
    out.push_str(rest);
    let has_secret = !found.is_empty();
    for secret in found {
        register(&secret);
    }
    Ok(Resolved { value: out, has_secret })
}

fn lookup(reference: &str) -> Result<String, ReferenceError> {
    if let Some(path) = reference.strip_prefix("file:") {
        if !Path::new(path).is_absolute() {
            return Err(ReferenceError::RelativeFile(path.to_owned()));
        }
        return read_trimmed(Path::new(path)).map_err(|source| ReferenceError::File { path: path.to_owned(), source });
    }
    if let Some(name) = reference.strip_prefix("cred:") {
        if name.is_empty() || name.contains('/') || name == ".." {
            return Err(ReferenceError::CredentialName(name.to_owned()));
        }
        let dir = std::env::var_os("CREDENTIALS_DIRECTORY").ok_or_else(|| ReferenceError::NoCredentialsDirectory(name.to_owned()))?;
        let path = Path::new(&dir).join(name);
        return read_trimmed(&path).map_err(|source| ReferenceError::Credential {
            name: name.to_owned(),
            path: path.display().to_string(),
            source,
        });
    }
    std::env::var(reference).map_err(|_| ReferenceError::Environment(reference.to_owned()))
}

fn read_trimmed(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path).map(|text| text.trim().to_owned())
}

/// Adds `secret` to the values scrubbed from outside text.
pub fn register(secret: &str) {
    if secret.len() < MIN_REDACTED_LEN {
        return;
    }
    let current = SECRETS.load();
    if current.iter().any(|known| &**known == secret) {
        return;
    }
    SECRETS.rcu(|secrets| {
        let mut secrets = Vec::clone(secrets);
        if !secrets.iter().any(|known| &**known == secret) {
            secrets.push(secret.into());
            // Longest first, so that a secret containing another is scrubbed whole.
            secrets.sort_by_key(|known| std::cmp::Reverse(known.len()));
        }
        secrets
    });
}

/// A secret that replaces another (a refreshed OAuth token): the retired value leaves the list,
/// so months of rotations do not grow it.
pub fn rotate(retired: Option<&str>, fresh: &str) {
    if let Some(retired) = retired.filter(|retired| *retired != fresh) {
        SECRETS.rcu(|secrets| secrets.iter().filter(|known| &***known != retired).cloned().collect::<Vec<_>>());
    }
    register(fresh);
}

/// `text` with every registered secret replaced by [`REDACTED`]. Free when none is registered or
/// none occurs.
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.load();
    if secrets.is_empty() || !secrets.iter().any(|secret| text.contains(&**secret)) {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_owned();
    for secret in secrets.iter() {
        if out.contains(&**secret) {
            out = out.replace(&**secret, REDACTED);
        }
    }
    Cow::Owned(out)
}

/// [`redact`] for an owned string.
pub fn redact_owned(text: String) -> String {
    match redact(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(redacted) => redacted,
    }
}

/// 128 bits from the kernel's CSPRNG, as 32 hex digits (visible ASCII): session ids and
/// continuation tokens, which a caller must not be able to guess.
pub fn random_token() -> Option<String> {
    Some(hex::encode(random_bytes::<16>()?))
}

/// `N` bytes from the kernel's CSPRNG, or `None` if it cannot be read.
pub fn random_bytes<const N: usize>() -> Option<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_secret_replaces_the_one_it_retires() {
        register("rotating-token-one");
        rotate(Some("rotating-token-one"), "rotating-token-two");
        assert_eq!(redact("a rotating-token-two b"), format!("a {REDACTED} b"));
        assert_eq!(redact("rotating-token-one"), "rotating-token-one", "a retired token leaves the list");
        assert!(SECRETS.load().iter().all(|known| &**known != "rotating-token-one"));
    }

    #[test]
    fn references_resolve_and_their_values_are_scrubbed() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "s3cr3t-token-value\n").unwrap();
        let resolved = resolve(&format!("Bearer ${{file:{}}}", token.display())).unwrap();
        assert_eq!(resolved.expose(), "Bearer s3cr3t-token-value");
        assert!(resolved.has_secret());
        assert_eq!(format!("{resolved:?}"), "\"[redacted]\"");
        assert_eq!(redact("the server said: bad token s3cr3t-token-value!"), "the server said: bad token [redacted]!");
        assert!(matches!(redact("nothing to hide"), Cow::Borrowed(_)));
        let plain = resolve("plain").unwrap();
        assert!(!plain.has_secret() && format!("{plain:?}") == "\"plain\"");
        assert!(resolve("${file:relative}").unwrap_err().to_string().contains("absolute"));
        let unset = resolve("${TOOLHOST_SURELY_UNSET_VARIABLE}").unwrap_err();
        assert!(matches!(&unset, ReferenceError::Environment(name) if name == "TOOLHOST_SURELY_UNSET_VARIABLE"), "{unset}");
        assert!(matches!(resolve("${cred:../x}"), Err(ReferenceError::CredentialName(_))));
        assert!(matches!(resolve("${OPEN"), Err(ReferenceError::Unclosed)));
    }
}
