//! The audit trail as a hash chain, and its signed checkpoints. Each record's `hash` is the
//! SHA-256 of the previous record's hash and the record's RFC 8785 canonical JSON; a checkpoint
//! is the daemon's Ed25519 signature over the chain's head. [`verify`] reads a store file
//! directly (no daemon) and names the first record that was changed, removed, inserted or
//! reordered, or a checkpoint the key did not sign.

use std::path::Path;
use std::str::FromStr;

use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use sqlx::sqlite::SqliteConnectOptions;

/// The "previous hash" of the first record of a chain nothing was cut from.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// `store_meta` key of the hash the chain continues from after retention cut its start.
pub(super) const ANCHOR_KEY: &str = "audit.anchor";

/// The fields of one record that its hash covers, in the store's types.
pub struct Fields<'a> {
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

impl<'a> Fields<'a> {
    /// The fields of a record as the writer stores them.
    #[must_use]
    pub fn of(record: &'a crate::catalog::record::AuditRecord) -> Fields<'a> {
        Fields {
            at_ms: record.at_ms,
            agent: &record.agent,
            caller: &record.caller,
            transport: record.transport,
            qualified_name: &record.qualified_name,
            server: &record.server,
            tool: &record.tool,
            generation: super::to_i64(record.generation),
            definition_hash: &record.definition_hash,
            outcome: &record.outcome,
            duration_us: super::to_i64(record.duration_us),
            arguments: record.arguments.as_deref(),
        }
    }
}

/// A record's hash, chained to `prev`: SHA-256 of `prev` followed by the record's RFC 8785 form.
pub fn record_hash(prev: &str, fields: &Fields<'_>) -> String {
    let canonical = canonical(fields).unwrap_or_else(|| canonical_by_the_book(fields));
    crate::digest::sha256_hex_of(&[prev.as_bytes(), canonical.as_bytes()])
}

/// The largest integer RFC 8785 prints as itself (it formats numbers as IEEE doubles).
const EXACT: i64 = 1 << 53;

/// The record's RFC 8785 form, written directly: the keys are fixed ASCII, so their order is
/// known (below, as JCS sorts them); strings are escaped as JCS says, which is what serde_json
/// writes; integers within ±2^53 print as themselves. `None` for an integer beyond that (never
/// seen in practice), which [`canonical_by_the_book`] formats as a double. The chain's hash is
/// on every record the daemon writes: this form costs a fraction of building a `Value` and
/// canonicalizing it, and a test holds the two equal.
fn canonical(fields: &Fields<'_>) -> Option<String> {
    if [fields.at_ms, fields.generation, fields.duration_us].iter().any(|n| n.unsigned_abs() > EXACT.unsigned_abs()) {
        return None;
    }
    let mut out = Vec::with_capacity(320 + fields.arguments.map_or(0, str::len));
    let text = |out: &mut Vec<u8>, key: &str, value: &str| {
        out.extend_from_slice(key.as_bytes());
        // Writing a &str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, value);
    };
    text(&mut out, "{\"agent\":", fields.agent);
    match fields.arguments {
        Some(arguments) => text(&mut out, ",\"arguments\":", arguments),
        None => out.extend_from_slice(b",\"arguments\":null"),
    }
    out.extend_from_slice(format!(",\"at_ms\":{}", fields.at_ms).as_bytes());
    text(&mut out, ",\"caller\":", fields.caller);
    text(&mut out, ",\"definition_hash\":", fields.definition_hash);
    out.extend_from_slice(format!(",\"duration_us\":{},\"generation\":{}", fields.duration_us, fields.generation).as_bytes());
    text(&mut out, ",\"outcome\":", fields.outcome);
    text(&mut out, ",\"qualified_name\":", fields.qualified_name);
    text(&mut out, ",\"server\":", fields.server);
    text(&mut out, ",\"tool\":", fields.tool);
    text(&mut out, ",\"transport\":", fields.transport);
    out.push(b'}');
    String::from_utf8(out).ok()
}

/// The record's RFC 8785 form by the general canonicalizer: the definition [`canonical`] keeps to.
fn canonical_by_the_book(fields: &Fields<'_>) -> String {
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
    serde_json_canonicalizer::to_string(&value).unwrap_or_else(|_| value.to_string())
}

/// What a checkpoint signs: the head, and (since v2) where the chain starts.
fn checkpoint_message(record_id: i64, head_hash: &str, records: i64, signed_at_ms: i64, anchor: Option<&str>) -> String {
    match anchor {
        Some(anchor) => format!("toolhost-audit-checkpoint:v2:{record_id}:{head_hash}:{records}:{signed_at_ms}:{anchor}"),
        None => format!("toolhost-audit-checkpoint:v1:{record_id}:{head_hash}:{records}:{signed_at_ms}"),
    }
}

/// The daemon's audit signing key: 32 random bytes, hex, in a file only its user reads; made on
/// first use when `make` (the place beside the store; a key the operator provides is never made).
///
/// # Errors
/// The file cannot be read or made, or does not hold a key.
pub fn load_or_make_key(path: &Path, make: bool) -> Result<SigningKey, String> {
    let shown = path.display();
    match std::fs::read_to_string(path) {
        Ok(text) => parse_key(text.trim()).ok_or_else(|| format!("{shown} does not hold an audit signing key (64 hex digits)")),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && !make => Err(format!("no audit signing key at {shown}")),
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
pub(super) fn sign(key: &SigningKey, record_id: i64, head_hash: &str, records: i64, signed_at_ms: i64, anchor: &str) -> (String, String) {
    let signature = key.sign(checkpoint_message(record_id, head_hash, records, signed_at_ms, Some(anchor)).as_bytes());
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

/// One stored record as its chain covers it, in the store's own types (SQLite's or the fleet's
/// PostgreSQL, where `id` is the host's own record id).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ChainRecord {
    pub id: i64,
    pub at_ms: i64,
    pub agent: String,
    pub caller: String,
    pub transport: String,
    pub qualified_name: String,
    pub server: String,
    pub tool: String,
    pub generation: i64,
    pub definition_hash: String,
    pub outcome: String,
    pub duration_us: i64,
    pub arguments: Option<String>,
    pub prev_hash: Option<String>,
    pub hash: Option<String>,
}

impl ChainRecord {
    fn fields(&self) -> Fields<'_> {
        Fields {
            at_ms: self.at_ms,
            agent: &self.agent,
            caller: &self.caller,
            transport: &self.transport,
            qualified_name: &self.qualified_name,
            server: &self.server,
            tool: &self.tool,
            generation: self.generation,
            definition_hash: &self.definition_hash,
            outcome: &self.outcome,
            duration_us: self.duration_us,
            arguments: self.arguments.as_deref(),
        }
    }
}

/// One signed checkpoint as stored, and who kept it: the host's own store, or the fleet's copy
/// of what the host shipped (which the host cannot rewrite).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CheckpointRecord {
    pub id: i64,
    pub record_id: i64,
    pub head_hash: String,
    pub records: i64,
    pub signed_at_ms: i64,
    pub signature: String,
    /// Where the chain started when it was signed (v2; `None` for a v1 checkpoint).
    pub anchor: Option<String>,
    #[sqlx(skip)]
    pub kept_by_fleet: bool,
}

impl CheckpointRecord {
    fn named(&self) -> String {
        match self.kept_by_fleet {
            true => format!("checkpoint {} (as the fleet store kept it)", self.id),
            false => format!("checkpoint {}", self.id),
        }
    }
}

/// Which records a verification covers: `at_ms` from and to (inclusive), or all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
}

impl Span {
    #[must_use]
    pub fn is_all(&self) -> bool {
        self.from_ms.is_none() && self.to_ms.is_none()
    }
}

/// The records a verification reads, in id order.
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a> {
    /// The hash the first chained record must follow; `None` takes the first one's as given
    /// (a span that starts mid-chain).
    pub anchor: Option<&'a str>,
    pub records: &'a [ChainRecord],
    /// Whether `records` run to the chain's head: then a checkpoint of a record after the last
    /// one means records were removed from the end.
    pub to_head: bool,
}

/// Checks `chain` link by link, and each checkpoint's signature with `key` (without one, any
/// checkpoint is a break) and against the record it signed. Pure: the store's reader below and
/// the fleet's feed it.
#[must_use]
pub fn check(chain: Chain<'_>, checkpoints: &[CheckpointRecord], key: Option<&VerifyingKey>) -> Verdict {
    let Chain { anchor, records, to_head } = chain;
    let mut expected_prev = anchor.map(str::to_owned);
    let (mut chained, mut before_chain) = (0u64, 0u64);
    let mut hashes = std::collections::HashMap::with_capacity(records.len());
    let mut first_chained: Option<i64> = None;
    for record in records {
        let id = record.id;
        let (Some(prev), Some(hash)) = (&record.prev_hash, &record.hash) else {
            if first_chained.is_some() {
                return Verdict::Broken { record_id: Some(id), problem: format!("record {id} carries no hash: it was inserted") };
            }
            before_chain += 1;
            continue;
        };
        first_chained.get_or_insert(id);
        if expected_prev.as_ref().is_some_and(|expected| expected != prev) {
            let problem =
                format!("record {id} does not follow the record before it: a record was removed, inserted or reordered before it");
            return Verdict::Broken { record_id: Some(id), problem };
        }
        if record_hash(prev, &record.fields()) != *hash {
            return Verdict::Broken { record_id: Some(id), problem: format!("record {id} was changed after it was written") };
        }
        hashes.insert(id, hash.as_str());
        expected_prev = Some(hash.clone());
        chained += 1;
    }
    let last = records.last().map(|record| record.id);
    let mut last_signed_at_ms = None;
    for checkpoint in checkpoints {
        let record_id = checkpoint.record_id;
        let message =
            checkpoint_message(record_id, &checkpoint.head_hash, checkpoint.records, checkpoint.signed_at_ms, checkpoint.anchor.as_deref());
        let signed = decode_hex::<64>(&checkpoint.signature)
            .map(|bytes| Signature::from_bytes(&bytes))
            .is_some_and(|signature| key.is_some_and(|key| key.verify(message.as_bytes(), &signature).is_ok()));
        if !signed {
            let problem = format!("{} is not signed by this key: it was forged or changed", checkpoint.named());
            return Verdict::Broken { record_id: None, problem };
        }
        match hashes.get(&record_id) {
            Some(hash) if *hash == checkpoint.head_hash => {}
            Some(_) => {
                let problem = format!(
                    "record {record_id}, signed by {}, no longer has the hash that was signed: the chain up to it was rewritten",
                    checkpoint.named()
                );
                return Verdict::Broken { record_id: Some(record_id), problem };
            }
            // Before the records read: cut by retention (the anchor covers it) or before the span.
            None if first_chained.is_none_or(|first| record_id < first) => {}
            // After them: past the span's end.
            None if !to_head && last.is_none_or(|last| record_id > last) => {}
            None => {
                let problem = format!("record {record_id}, signed by {}, was removed", checkpoint.named());
                return Verdict::Broken { record_id: Some(record_id), problem };
            }
        }
        last_signed_at_ms = last_signed_at_ms.max(Some(checkpoint.signed_at_ms));
    }
    // Retention signs every cut: a chain that starts elsewhere than the last checkpoint says
    // lost records from its start, with the stored cut moved to hide it.
    let last = checkpoints.iter().filter(|checkpoint| checkpoint.anchor.is_some()).max_by_key(|c| (c.signed_at_ms, !c.kept_by_fleet));
    if let (Some(start), Some(checkpoint)) = (anchor, last)
        && checkpoint.anchor.as_deref() != Some(start)
    {
        let problem = format!("the chain does not start where {} signed it: records were removed from its start", checkpoint.named());
        return Verdict::Broken { record_id: first_chained, problem };
    }
    Verdict::Intact { records: chained, checkpoints: u64::try_from(checkpoints.len()).unwrap_or(0), last_signed_at_ms, before_chain }
}

/// The records a store holds in `span` (all of them, in id order), its chain's anchor (where
/// retention cut it; `None` for a span that starts mid-chain), and its checkpoints.
///
/// # Errors
/// The store cannot be read.
pub async fn read_store(
    connection: &mut sqlx::SqliteConnection,
    span: Span,
) -> Result<(Option<String>, Vec<ChainRecord>, Vec<CheckpointRecord>), sqlx::Error> {
    let checkpoints: Vec<CheckpointRecord> =
        sqlx::query_as("SELECT id, record_id, head_hash, records, signed_at_ms, signature, anchor FROM audit_checkpoints ORDER BY id")
            .fetch_all(&mut *connection)
            .await?;
    let records: Vec<ChainRecord> = sqlx::query_as(
        "SELECT id, at_ms, agent, caller, transport, qualified_name, server, tool, generation, definition_hash, outcome, duration_us, \
         arguments, prev_hash, hash FROM audit \
         WHERE id >= coalesce((SELECT min(id) FROM audit WHERE at_ms >= ?1), 0) \
           AND id <= coalesce((SELECT max(id) FROM audit WHERE at_ms <= ?2), 0) ORDER BY id",
    )
    .bind(span.from_ms.unwrap_or(i64::MIN))
    .bind(span.to_ms.unwrap_or(i64::MAX))
    .fetch_all(&mut *connection)
    .await?;
    let anchor = match span.from_ms {
        Some(_) => None,
        None => Some(
            sqlx::query_scalar("SELECT value FROM store_meta WHERE key = ?")
                .bind(ANCHOR_KEY)
                .fetch_optional(&mut *connection)
                .await?
                .unwrap_or_else(|| GENESIS.to_owned()),
        ),
    };
    Ok((anchor, records, checkpoints))
}

/// Reads the store at `path` (read-only, no daemon needed) and checks its chain in `span`, and
/// its checkpoints with `key`, and those of `more` (the fleet's copy) beside them.
///
/// # Errors
/// The store cannot be opened or read.
pub async fn verify(path: &Path, key: &VerifyingKey, span: Span, more: &[CheckpointRecord]) -> Result<Verdict, sqlx::Error> {
    let options = SqliteConnectOptions::from_str("sqlite://")?.filename(path).read_only(true);
    let mut connection = sqlx::ConnectOptions::connect(&options).await?;
    // One read transaction: the records, the cut and the checkpoints as of one moment, while
    // the daemon may be writing and pruning.
    let mut snapshot = sqlx::Connection::begin(&mut connection).await?;
    let (anchor, records, mut checkpoints) = read_store(&mut snapshot, span).await?;
    snapshot.rollback().await?;
    checkpoints.extend_from_slice(more);
    let chain = Chain { anchor: anchor.as_deref(), records: &records, to_head: span.to_ms.is_none() };
    Ok(check(chain, &checkpoints, Some(key)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::record::AuditRecord;
    use crate::store::Store;

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
        // Closed here, not in the background: the change is in the file (its WAL checkpointed)
        // before anything copies or reads it.
        sqlx::Connection::close(connection).await.unwrap();
    }

    proptest::proptest! {
        /// The direct form is the canonicalizer's, byte for byte, whatever the strings hold
        /// (quotes, backslashes, control characters, any Unicode) and whatever the integers.
        #[test]
        fn the_direct_canonical_form_is_rfc_8785(
            text in "(?s).{0,40}",
            arguments in proptest::option::of("(?s)[\\x00-\\x{10FFFF}]{0,40}"),
            at_ms in proptest::prop_oneof![0i64..4_000_000_000_000, proptest::num::i64::ANY],
            small in 0i64..100_000,
        ) {
            let fields = Fields {
                at_ms,
                agent: &text,
                caller: "uid 1000 \"quoted\" \\ tab\t",
                transport: "unix",
                qualified_name: &text,
                server: "demo",
                tool: "echo\u{7f}\u{1f}",
                generation: small,
                definition_hash: "ab",
                outcome: &text,
                duration_us: at_ms,
                arguments: arguments.as_deref(),
            };
            let by_the_book = canonical_by_the_book(&fields);
            match canonical(&fields) {
                Some(direct) => proptest::prop_assert_eq!(direct, by_the_book),
                None => proptest::prop_assert!(at_ms.unsigned_abs() > EXACT.unsigned_abs()),
            }
        }
    }

    /// A batch larger than one `INSERT` (64 rows) goes in whole, in its order, every field as
    /// given (a missing argument stays missing), chained across the statements' seams.
    #[tokio::test]
    async fn a_batch_of_many_statements_is_stored_whole_in_order_and_chained() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let key = load_or_make_key(&dir.path().join("audit.key"), true).unwrap();
        let store = Store::open(&path, 10).await.unwrap();
        let records: Vec<AuditRecord> = (0..151).map(record).collect();
        store.append_audit(&records[..150]).await.unwrap();
        store.append_audit(&records[150..]).await.unwrap();
        let stored = store.audit_chained_after(0, 1_000).await.unwrap();
        assert_eq!(stored.len(), records.len());
        let mut prev = GENESIS.to_owned();
        for ((id, got, prev_hash, hash), (n, want)) in stored.iter().zip(records.iter().enumerate()) {
            assert_eq!(*id, i64::try_from(n).unwrap() + 1);
            assert_eq!(
                (got.at_ms, &got.qualified_name, &got.tool, &got.arguments, got.generation, got.duration_us),
                (want.at_ms, &want.qualified_name, &want.tool, &want.arguments, want.generation, want.duration_us)
            );
            assert_eq!(prev_hash.as_deref(), Some(prev.as_str()), "record {id} follows the one before it");
            prev = record_hash(&prev, &Fields::of(want));
            assert_eq!(hash.as_deref(), Some(prev.as_str()));
        }
        store.checkpoint_audit(&key, 5_000).await.unwrap();
        store.close().await;
        let verdict = verify(&path, &key.verifying_key(), Span::default(), &[]).await.unwrap();
        assert!(matches!(verdict, Verdict::Intact { records: 151, checkpoints: 1, .. }), "{verdict:?}");
    }

    #[tokio::test]
    async fn retention_cuts_the_chain_where_it_says_and_removing_more_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let key = load_or_make_key(&dir.path().join("audit.key"), true).unwrap();
        let store = Store::open(&path, 10).await.unwrap();
        let records: Vec<AuditRecord> = (0..20).map(record).collect();
        store.append_audit(&records[..12]).await.unwrap();
        store.checkpoint_audit(&key, 5_000).await.unwrap();
        store.append_audit(&records[12..]).await.unwrap();
        store.prune_audit(0, 5, Some((&key, 6_000))).await.unwrap();
        store.close().await;
        let verdict = verify(&path, &key.verifying_key(), Span::default(), &[]).await.unwrap();
        assert!(matches!(verdict, Verdict::Intact { records: 5, checkpoints: 2, .. }), "{verdict:?}");
        // The oldest record left removed: the cut no longer matches.
        sql(&path, "DELETE FROM audit WHERE id = (SELECT min(id) FROM audit)").await;
        let verdict = verify(&path, &key.verifying_key(), Span::default(), &[]).await.unwrap();
        assert_eq!(
            verdict,
            Verdict::Broken {
                record_id: Some(17),
                problem: "record 17 does not follow the record before it: a record was removed, inserted or reordered before it".into()
            }
        );
        // The oldest removed and the stored cut moved to match: the last checkpoint signed the
        // start where it was.
        let cut = dir.path().join("cut.db");
        std::fs::copy(&path, &cut).unwrap();
        sql(&cut, "UPDATE store_meta SET value = (SELECT prev_hash FROM audit WHERE id = 17) WHERE key = 'audit.anchor'").await;
        let verdict = verify(&cut, &key.verifying_key(), Span::default(), &[]).await.unwrap();
        assert_eq!(
            verdict,
            Verdict::Broken {
                record_id: Some(17),
                problem: "the chain does not start where checkpoint 2 signed it: records were removed from its start".into()
            }
        );
        // Another key did not sign these checkpoints.
        let other = SigningKey::from_bytes(&[7; 32]);
        let store = Store::open(&dir.path().join("other.db"), 10).await.unwrap();
        store.append_audit(&records[..3]).await.unwrap();
        store.checkpoint_audit(&key, 1).await.unwrap();
        store.close().await;
        let verdict = verify(&dir.path().join("other.db"), &other.verifying_key(), Span::default(), &[]).await.unwrap();
        assert!(
            matches!(&verdict, Verdict::Broken { record_id: None, problem } if problem.contains("not signed by this key")),
            "{verdict:?}"
        );
    }
}
