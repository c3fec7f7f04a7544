//! The audit trail as a hash chain, and its signed checkpoints. Each record's `hash` is the
//! SHA-256 of the previous record's hash and the record's RFC 8785 canonical JSON; a checkpoint
//! is the daemon's Ed25519 signature over the chain's head. [`verify`] reads a store file
//! directly (no daemon) and names the first record that was changed, removed, inserted or
//! reordered, or a checkpoint the key did not sign.

use std::path::Path;
use std::str::FromStr;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sqlx::Row;
use sqlx::sqlite::SqliteConnectOptions;

/// The "previous hash" of the first record of a chain nothing was cut from.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// `store_meta` key of the hash the chain continues from after retention cut its start.
pub(super) const ANCHOR_KEY: &str = "audit.anchor";

/// The fields of one record that its hash covers, in the store's types.
pub(super) struct Fields<'a> {
    pub at_ms: i64,
    pub agent: &'a str,
    pub caller: &'a str,
    pub transport: &'a str,
    pub qualified_name: &'a str,
    pub server: &'a str,
    pub tool: &'a str,
    pub generation: i64,
    pub definition_hash: &'a str,
    pub outcome: &'a str,
    pub duration_us: i64,
    pub arguments: Option<&'a str>,
}

/// A record's hash, chained to `prev`.
pub(super) fn record_hash(prev: &str, fields: &Fields<'_>) -> String {
    let value = serde_json::json!({
        "at_ms": fields.at_ms,
        "agent": fields.agent,
        "caller": fields.caller,
        "transport": fields.transport,
        "qualified_name": fields.qualified_name,
        "server": fields.server,
        "tool": fields.tool,
        "generation": fields.generation,
        "definition_hash": fields.definition_hash,
        "outcome": fields.outcome,
        "duration_us": fields.duration_us,
        "arguments": fields.arguments,
    });
    // Canonical JSON of plain strings and integers cannot fail; the fallback is never used.
    let canonical = serde_json_canonicalizer::to_string(&value).unwrap_or_else(|_| value.to_string());
    let mut bytes = Vec::with_capacity(prev.len() + canonical.len());
    bytes.extend_from_slice(prev.as_bytes());
    bytes.extend_from_slice(canonical.as_bytes());
    crate::catalog::model::sha256_hex(&bytes)
}

/// What a checkpoint signs.
pub(super) fn checkpoint_message(record_id: i64, head_hash: &str, records: i64, signed_at_ms: i64) -> String {
    format!("toolhost-audit-checkpoint:v1:{record_id}:{head_hash}:{records}:{signed_at_ms}")
}

/// The daemon's audit signing key: 32 random bytes, hex, in a file only its user reads; made on
/// first use.
///
/// # Errors
/// The file cannot be read or made, or does not hold a key.
pub fn load_or_make_key(path: &Path) -> Result<SigningKey, String> {
    let shown = path.display();
    match std::fs::read_to_string(path) {
        Ok(text) => parse_key(text.trim()).ok_or_else(|| format!("{shown} does not hold an audit signing key (64 hex digits)")),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let seed = crate::secrets::random_bytes::<32>().ok_or_else(|| "cannot read the system's random source".to_owned())?;
            let text: String = seed.iter().map(|byte| format!("{byte:02x}")).collect();
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|error| format!("cannot make {shown}: {error}"))?;
            file.write_all(text.as_bytes()).and_then(|()| file.sync_all()).map_err(|error| format!("cannot write {shown}: {error}"))?;
            Ok(SigningKey::from_bytes(&seed))
        }
        Err(error) => Err(format!("cannot read {shown}: {error}")),
    }
}

fn parse_key(hex: &str) -> Option<SigningKey> {
    Some(SigningKey::from_bytes(&decode_hex::<32>(hex)?))
}

fn decode_hex<const N: usize>(hex: &str) -> Option<[u8; N]> {
    if hex.len() != N * 2 {
        return None;
    }
    let mut bytes = [0u8; N];
    for (idx, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(idx * 2..idx * 2 + 2)?, 16).ok()?;
    }
    Some(bytes)
}

fn encode_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A public key as `toolhost audit key` prints it (hex), or read back from such text.
#[must_use]
pub fn public_key_text(key: &SigningKey) -> String {
    encode_hex(key.verifying_key().as_bytes())
}

/// A public key from its hex text.
#[must_use]
pub fn parse_public_key(text: &str) -> Option<VerifyingKey> {
    VerifyingKey::from_bytes(&decode_hex::<32>(text.trim())?).ok()
}

/// A checkpoint's row, signed.
pub(super) fn sign(key: &SigningKey, record_id: i64, head_hash: &str, records: i64, signed_at_ms: i64) -> (String, String) {
    let signature = key.sign(checkpoint_message(record_id, head_hash, records, signed_at_ms).as_bytes());
    (public_key_text(key), encode_hex(&signature.to_bytes()))
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Intact {
        records: u64,
        checkpoints: u64,
        last_signed_at_ms: Option<i64>,
        before_chain: u64,
    },
    /// The first problem found, in words, and the record or checkpoint it concerns.
    Broken {
        record_id: Option<i64>,
        problem: String,
    },
}

/// Reads the store at `path` (read-only, no daemon needed) and checks the chain from its
/// anchor, and every checkpoint's signature with `key` and against the record it signed.
///
/// # Errors
/// The store cannot be opened or read.
pub async fn verify(path: &Path, key: &VerifyingKey) -> Result<Verdict, sqlx::Error> {
    let options = SqliteConnectOptions::from_str("sqlite://")?.filename(path).read_only(true);
    let mut connection = sqlx::ConnectOptions::connect(&options).await?;
    let anchor: Option<String> =
        sqlx::query_scalar("SELECT value FROM store_meta WHERE key = ?").bind(ANCHOR_KEY).fetch_optional(&mut connection).await?;
    let rows = sqlx::query(
        "SELECT id, at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, duration_us, \
         arguments, prev_hash, hash FROM audit ORDER BY id",
    )
    .fetch_all(&mut connection)
    .await?;
    let mut expected_prev = anchor.unwrap_or_else(|| GENESIS.to_owned());
    let (mut records, mut before_chain) = (0u64, 0u64);
    let mut hashes = std::collections::HashMap::new();
    let mut first_chained: Option<i64> = None;
    for row in &rows {
        let id: i64 = row.get("id");
        let (prev, hash): (Option<String>, Option<String>) = (row.get("prev_hash"), row.get("hash"));
        let (Some(prev), Some(hash)) = (prev, hash) else {
            if first_chained.is_some() {
                return Ok(Verdict::Broken { record_id: Some(id), problem: format!("record {id} carries no hash: it was inserted") });
            }
            before_chain += 1;
            continue;
        };
        first_chained.get_or_insert(id);
        if prev != expected_prev {
            let problem =
                format!("record {id} does not follow the record before it: a record was removed, inserted or reordered before it");
            return Ok(Verdict::Broken { record_id: Some(id), problem });
        }
        let fields = Fields {
            at_ms: row.get("at_ms"),
            agent: row.get("agent"),
            caller: row.get("caller"),
            transport: row.get("transport"),
            qualified_name: row.get("qualified_name"),
            server: row.get("server"),
            tool: row.get("tool"),
            generation: row.get("generation"),
            definition_hash: row.get("definition_hash"),
            outcome: row.get("outcome"),
            duration_us: row.get("duration_us"),
            arguments: row.get("arguments"),
        };
        if record_hash(&prev, &fields) != hash {
            return Ok(Verdict::Broken { record_id: Some(id), problem: format!("record {id} was changed after it was written") });
        }
        hashes.insert(id, hash.clone());
        expected_prev = hash;
        records += 1;
    }
    let checkpoints = sqlx::query("SELECT id, record_id, head_hash, records, signed_at_ms, signature FROM audit_checkpoints ORDER BY id")
        .fetch_all(&mut connection)
        .await?;
    let mut last_signed_at_ms = None;
    for row in &checkpoints {
        let (id, record_id, head_hash, count, signed_at_ms): (i64, i64, String, i64, i64) =
            (row.get("id"), row.get("record_id"), row.get("head_hash"), row.get("records"), row.get("signed_at_ms"));
        let signature: String = row.get("signature");
        let message = checkpoint_message(record_id, &head_hash, count, signed_at_ms);
        let signed = decode_hex::<64>(&signature)
            .map(|bytes| Signature::from_bytes(&bytes))
            .is_some_and(|signature| key.verify(message.as_bytes(), &signature).is_ok());
        if !signed {
            return Ok(Verdict::Broken {
                record_id: None,
                problem: format!("checkpoint {id} is not signed by this key: it was forged or changed"),
            });
        }
        match hashes.get(&record_id) {
            Some(hash) if *hash == head_hash => {}
            Some(_) => {
                return Ok(Verdict::Broken {
                    record_id: Some(record_id),
                    problem: format!(
                        "record {record_id}, signed by checkpoint {id}, no longer has the hash that was signed: the chain up to it was rewritten"
                    ),
                });
            }
            // Cut by retention: the chain's anchor covers it.
            None if first_chained.is_none_or(|first| record_id < first) => {}
            None => {
                return Ok(Verdict::Broken {
                    record_id: Some(record_id),
                    problem: format!("record {record_id}, signed by checkpoint {id}, was removed"),
                });
            }
        }
        last_signed_at_ms = Some(signed_at_ms);
    }
    Ok(Verdict::Intact { records, checkpoints: u64::try_from(checkpoints.len()).unwrap_or(0), last_signed_at_ms, before_chain })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::record::AuditRecord;
    use crate::catalog::store::Store;

    fn record(n: i64) -> AuditRecord {
        AuditRecord {
            at_ms: 1_000 + n,
            agent: "bot".into(),
            caller: "uid 1000".into(),
            transport: "unix",
            qualified_name: format!("demo__tool{n}"),
            server: "demo".into(),
            tool: format!("tool{n}"),
            generation: 1,
            definition_hash: "ab".repeat(32),
            outcome: "ok".into(),
            duration_us: 10,
            arguments: (n % 2 == 0).then(|| format!("{{\"n\":{n}}}")),
        }
    }

    async fn sql(path: &Path, statement: &str) {
        let options = SqliteConnectOptions::from_str("sqlite://").unwrap().filename(path);
        let mut connection = sqlx::ConnectOptions::connect(&options).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(statement.to_owned())).execute(&mut connection).await.unwrap();
    }

    #[tokio::test]
    async fn retention_cuts_the_chain_where_it_says_and_removing_more_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let key = load_or_make_key(&dir.path().join("audit.key")).unwrap();
        let store = Store::open(&path, 10).await.unwrap();
        let records: Vec<AuditRecord> = (0..20).map(record).collect();
        store.append_audit(&records[..12]).await.unwrap();
        store.checkpoint_audit(&key, 5_000).await.unwrap();
        store.append_audit(&records[12..]).await.unwrap();
        store.prune_audit(0, 5).await.unwrap();
        store.checkpoint_audit(&key, 6_000).await.unwrap();
        store.close().await;
        let verdict = verify(&path, &key.verifying_key()).await.unwrap();
        assert!(matches!(verdict, Verdict::Intact { records: 5, checkpoints: 2, .. }), "{verdict:?}");
        // The oldest record left removed: the cut no longer matches.
        sql(&path, "DELETE FROM audit WHERE id = (SELECT min(id) FROM audit)").await;
        let verdict = verify(&path, &key.verifying_key()).await.unwrap();
        assert_eq!(
            verdict,
            Verdict::Broken {
                record_id: Some(17),
                problem: "record 17 does not follow the record before it: a record was removed, inserted or reordered before it".into()
            }
        );
        // Another key did not sign these checkpoints.
        let other = SigningKey::from_bytes(&[7; 32]);
        let store = Store::open(&dir.path().join("other.db"), 10).await.unwrap();
        store.append_audit(&records[..3]).await.unwrap();
        store.checkpoint_audit(&key, 1).await.unwrap();
        store.close().await;
        let verdict = verify(&dir.path().join("other.db"), &other.verifying_key()).await.unwrap();
        assert!(
            matches!(&verdict, Verdict::Broken { record_id: None, problem } if problem.contains("not signed by this key")),
            "{verdict:?}"
        );
    }
}
