//! The audit trail as a hash chain, and its signed checkpoints. Each record's `hash` is the
//! SHA-256 of the previous record's hash and the record's RFC 8785 canonical JSON; a checkpoint
//! is the daemon's Ed25519 signature over the chain's head. [`verify`] reads a store file
//! directly (no daemon) and names the first record that was changed, removed, inserted or
//! reordered, or a checkpoint the key did not sign.

use std::path::Path;
use std::str::FromStr;

use ed25519_dalek::{Signature, Signer as _, SigningKey, Verifier, VerifyingKey};
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

/// Why the audit signing key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{} does not hold an audit signing key (64 hex digits)", .0.display())]
    NotAKey(std::path::PathBuf),
    #[error("no audit signing key at {}", .0.display())]
    Missing(std::path::PathBuf),
    #[error("cannot read the system's random source")]
    NoRandom,
    #[error("cannot {doing} {}: {source}", path.display())]
    File { doing: &'static str, path: std::path::PathBuf, source: std::io::Error },
}

/// The daemon's audit signing key: 32 random bytes, hex, in a file only its user reads; made on
/// first use when `make` (the place beside the store; a key the operator provides is never made).
///
/// # Errors
/// The file cannot be read or made, or does not hold a key.
pub fn load_or_make_key(path: &Path, make: bool) -> Result<SigningKey, KeyError> {
    let file_error = |doing| move |source| KeyError::File { doing, path: path.to_path_buf(), source };
    match std::fs::read_to_string(path) {
        Ok(text) => parse_key(text.trim()).ok_or_else(|| KeyError::NotAKey(path.to_path_buf())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && !make => Err(KeyError::Missing(path.to_path_buf())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let seed = crate::secrets::random_bytes::<32>().ok_or(KeyError::NoRandom)?;
            let text = hex::encode(seed);
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(file_error("make"))?;
            file.write_all(text.as_bytes()).and_then(|()| file.sync_all()).map_err(file_error("write"))?;
            Ok(SigningKey::from_bytes(&seed))
        }
        Err(error) => Err(file_error("read")(error)),
    }
}

fn parse_key(hex: &str) -> Option<SigningKey> {
    Some(SigningKey::from_bytes(&decode_hex::<32>(hex)?))
}

fn decode_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut bytes = [0u8; N];
    hex::decode_to_slice(text, &mut bytes).ok()?;
    Some(bytes)
}

/// A public key as `toolhost audit key` prints it (hex), or read back from such text.
#[must_use]
pub fn public_key_text(key: &SigningKey) -> String {
    hex::encode(key.verifying_key().as_bytes())
}

/// A public key from its hex text.
#[must_use]
pub fn parse_public_key(text: &str) -> Option<VerifyingKey> {
    VerifyingKey::from_bytes(&decode_hex::<32>(text.trim())?).ok()
}

/// A checkpoint's row, signed.
pub(super) fn sign(key: &SigningKey, record_id: i64, head_hash: &str, records: i64, signed_at_ms: i64, anchor: &str) -> (String, String) {
    let signature = key.sign(checkpoint_message(record_id, head_hash, records, signed_at_ms, Some(anchor)).as_bytes());
    (public_key_text(key), hex::encode(signature.to_bytes()))
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
    /// The first record id of the chain it signed: `records` records up to `record_id`, no id
    /// skipped (the store's ids never skip), so `record_id − records + 1`; the one after
    /// `record_id` when retention had cut every record (`records` 0).
    #[must_use]
    pub fn start(&self) -> i64 {
        self.record_id.saturating_sub(self.records).saturating_add(1)
    }

    /// Whether `key` signed it, as it stands.
    fn is_signed_by(&self, key: Option<&VerifyingKey>) -> bool {
        let message = checkpoint_message(self.record_id, &self.head_hash, self.records, self.signed_at_ms, self.anchor.as_deref());
        decode_hex::<64>(&self.signature)
            .map(|bytes| Signature::from_bytes(&bytes))
            .is_some_and(|signature| key.is_some_and(|key| key.verify(message.as_bytes(), &signature).is_ok()))
    }

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
///
/// A chain read from its stored start (`anchor` given) trusts nothing unsigned: the newest
/// checkpoint says where the chain starts (record `R − n + 1`, from its anchor) and every
/// checkpoint's record must be there with its signed hash, unless it lies before that start
/// (cut by retention, which signs every cut). A chain no checkpoint signs, a record carrying no
/// hash at or after the signed start, and ids moved past a checkpoint are each a break.
#[must_use]
pub fn check(chain: Chain<'_>, checkpoints: &[CheckpointRecord], key: Option<&VerifyingKey>) -> Verdict {
    let Chain { anchor, records, to_head } = chain;
    // The signatures first: nothing is read from a checkpoint, not even which is the newest,
    // before its signature holds.
    if let Some(checkpoint) = checkpoints.iter().find(|checkpoint| !checkpoint.is_signed_by(key)) {
        let problem = format!("{} is not signed by this key: it was forged or changed", checkpoint.named());
        return Verdict::Broken { record_id: None, problem };
    }
    // The whole chain (read from its stored start): the newest checkpoint vouches for its start.
    let newest = anchor.and_then(|_| newest(checkpoints));
    let walked = match walk(anchor, records, newest) {
        Ok(walked) => walked,
        Err(broken) => return broken,
    };
    if anchor.is_some() && checkpoints.is_empty() && !records.is_empty() {
        let problem = format!(
            "no checkpoint signs the chain's {} records: its checkpoints were removed, or the daemon never signed it",
            records.len()
        );
        return Verdict::Broken { record_id: records.first().map(|record| record.id), problem };
    }
    let last = records.last().map(|record| record.id);
    let mut last_signed_at_ms = None;
    for checkpoint in checkpoints {
        let record_id = checkpoint.record_id;
        match walked.hashes.get(&record_id) {
            Some(hash) if *hash == checkpoint.head_hash => {}
            Some(_) => {
                let problem = format!(
                    "record {record_id}, signed by {}, no longer has the hash that was signed: the chain up to it was rewritten",
                    checkpoint.named()
                );
                return Verdict::Broken { record_id: Some(record_id), problem };
            }
            // Before the start the newest checkpoint signed (a signed cut), or past a span's end.
            None if newest.is_some_and(|newest| record_id < newest.start()) => {}
            None if !to_head && last.is_none_or(|last| record_id > last) => {}
            // Read from the chain's start: nowhere else.
            None if anchor.is_some() => {
                let problem = format!("record {record_id}, signed by {}, was removed or its id moved", checkpoint.named());
                return Verdict::Broken { record_id: Some(record_id), problem };
            }
            // A span from mid-chain: before the records read.
            None if walked.first_chained.is_none_or(|first| record_id < first) => {}
            None => {
                let problem = format!("record {record_id}, signed by {}, was removed", checkpoint.named());
                return Verdict::Broken { record_id: Some(record_id), problem };
            }
        }
        last_signed_at_ms = last_signed_at_ms.max(Some(checkpoint.signed_at_ms));
    }
    // Retention signs every cut: a chain that starts elsewhere than the newest checkpoint says
    // lost records from its start (the stored cut moved to hide it), or ids moved.
    if let (Some(start), Some(newest)) = (anchor, newest) {
        let moved = walked.first_chained.is_some_and(|first| first != newest.start());
        if moved || newest.anchor.as_deref().is_some_and(|signed| signed != start) {
            let problem = format!("the chain does not start where {} signed it: records were removed from its start", newest.named());
            return Verdict::Broken { record_id: walked.first_chained, problem };
        }
    }
    let checkpoints = u64::try_from(checkpoints.len()).unwrap_or(0);
    Verdict::Intact { records: walked.chained, checkpoints, last_signed_at_ms, before_chain: walked.before_chain }
}

/// The checkpoint signed last: the chain only grows at its head and is only cut at its start,
/// so the newest signed the highest record id and, of those, the latest start. (Not by
/// `signed_at_ms`: the daemon's clock may step back.) The store's own copy before the fleet's.
fn newest(checkpoints: &[CheckpointRecord]) -> Option<&CheckpointRecord> {
    checkpoints.iter().max_by_key(|checkpoint| (checkpoint.record_id, checkpoint.start(), !checkpoint.kept_by_fleet))
}

/// What a walk along the records found.
struct Walked<'a> {
    hashes: std::collections::HashMap<i64, &'a str>,
    first_chained: Option<i64>,
    chained: u64,
    before_chain: u64,
}

/// The records link by link: each follows the one before it, has the hash of what it holds,
/// and the id after it (the daemon's ids never skip, so a gap is ids moved). A record carrying
/// no hash is older than the chain only before its first linked record and, in a whole chain,
/// before the start the newest checkpoint signed.
fn walk<'a>(anchor: Option<&str>, records: &'a [ChainRecord], newest: Option<&CheckpointRecord>) -> Result<Walked<'a>, Verdict> {
    let mut expected_prev = anchor;
    let mut walked =
        Walked { hashes: std::collections::HashMap::with_capacity(records.len()), first_chained: None, chained: 0, before_chain: 0 };
    let mut previous: Option<i64> = None;
    for record in records {
        let id = record.id;
        let (Some(prev), Some(hash)) = (&record.prev_hash, &record.hash) else {
            if walked.first_chained.is_some() {
                return Err(Verdict::Broken { record_id: Some(id), problem: format!("record {id} carries no hash: it was inserted") });
            }
            if let Some(newest) = newest.filter(|newest| id >= newest.start()) {
                let problem = format!(
                    "record {id} carries no hash, yet {} signed the chain from record {}: its link was removed",
                    newest.named(),
                    newest.start()
                );
                return Err(Verdict::Broken { record_id: Some(id), problem });
            }
            walked.before_chain += 1;
            continue;
        };
        walked.first_chained.get_or_insert(id);
        if expected_prev.is_some_and(|expected| expected != prev) {
            let problem =
                format!("record {id} does not follow the record before it: a record was removed, inserted or reordered before it");
            return Err(Verdict::Broken { record_id: Some(id), problem });
        }
        if record_hash(prev, &record.fields()) != *hash {
            return Err(Verdict::Broken { record_id: Some(id), problem: format!("record {id} was changed after it was written") });
        }
        if let Some(before) = previous.filter(|before| before.checked_add(1) != Some(id)) {
            let problem = format!("record {id} follows record {before}, yet the ids between them are missing: the records' ids were moved");
            return Err(Verdict::Broken { record_id: Some(id), problem });
        }
        walked.hashes.insert(id, hash.as_str());
        expected_prev = Some(hash.as_str());
        previous = Some(id);
        walked.chained += 1;
    }
    Ok(walked)
}

/// What the signing daemon itself saw of its chain, which no store writer can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Witness {
    /// It has not looked at the store yet: a chain no checkpoint signs is not its to sign.
    Starting,
    /// The newest record id it signed or found signed and checked (0: it started on a store
    /// with no record, so a chain no checkpoint signs yet is its own).
    SignedTo(i64),
}

/// The daemon's key, the time it signs at, and what it saw of its chain.
#[derive(Clone, Copy)]
pub struct Signer<'a> {
    pub key: &'a SigningKey,
    pub now_ms: i64,
    pub witness: Witness,
}

/// What an attempt to sign the chain's head did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signing {
    /// Signed up to this record id.
    Signed(i64),
    /// The newest checkpoint already signed the head and the start (this record id; 0 when there
    /// is nothing to sign).
    Unchanged(i64),
    /// The chain does not continue the newest checkpoint: nothing was signed (or cut).
    Refused { record_id: Option<i64>, problem: String },
}

/// The chain as stored, read from its newest checkpoint on: what the daemon checks before it
/// signs again (a few records, not the whole trail).
pub struct Stored<'a> {
    /// The checkpoint the store holds with the highest record id (and, of those, the latest start).
    pub newest: Option<&'a CheckpointRecord>,
    /// How many records the store holds, chained or not (counted only when no checkpoint is).
    pub records: i64,
    /// The first linked record's id, and the hash it follows.
    pub start: Option<(i64, &'a str)>,
    /// The records from the newest checkpoint's record on, in id order.
    pub tail: &'a [ChainRecord],
}

/// Whether the chain as stored continues what the daemon signed last, as `witness` saw it and
/// as the newest checkpoint signed it: that checkpoint signed by `key`; the chain still starting
/// where it signed; its record still there with the signed hash; every record after it linked
/// to the one before, with the next id. `Err` says why not: the daemon signs nothing then.
///
/// # Errors
/// The refusal: the record concerned, and the problem in words.
pub fn continues(stored: &Stored<'_>, witness: Witness, key: &VerifyingKey) -> Result<(), (Option<i64>, String)> {
    let Some(newest) = stored.newest else {
        return match witness {
            Witness::SignedTo(0) => Ok(()),
            Witness::Starting if stored.records == 0 => Ok(()),
            Witness::Starting => Err((None, format!("no checkpoint signs the {} records the store holds", stored.records))),
            Witness::SignedTo(id) => Err((Some(id), format!("the checkpoint this daemon signed at record {id} was removed"))),
        };
    };
    let named = newest.named();
    if !newest.is_signed_by(Some(key)) {
        return Err((None, format!("{named} is not signed by this daemon's key")));
    }
    if let Witness::SignedTo(id) = witness
        && newest.record_id < id
    {
        return Err((Some(id), format!("the checkpoint this daemon signed at record {id} was removed")));
    }
    let start = newest.start();
    let moved = match stored.start {
        Some((first, prev)) => first != start || newest.anchor.as_deref().is_some_and(|signed| signed != prev),
        None => newest.records > 0,
    };
    if moved {
        return Err((stored.start.map(|(first, _)| first), format!("the chain does not start where {named} signed it")));
    }
    let mut tail = stored.tail.iter().peekable();
    if newest.records > 0 {
        let record_id = newest.record_id;
        match tail.next_if(|record| record.id == record_id) {
            Some(record) if record.hash.as_deref() == Some(newest.head_hash.as_str()) => {}
            _ => return Err((Some(record_id), format!("record {record_id} no longer has the hash {named} signed"))),
        }
    }
    let (mut id, mut hash) = (newest.record_id, newest.head_hash.as_str());
    for record in tail {
        let linked = record.prev_hash.as_deref() == Some(hash) && id.checked_add(1) == Some(record.id);
        match (&record.prev_hash, &record.hash) {
            (Some(prev), Some(next)) if linked && record_hash(prev, &record.fields()) == *next => (id, hash) = (record.id, next),
            _ => return Err((Some(record.id), format!("record {} does not continue the chain {named} signed", record.id))),
        }
    }
    Ok(())
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

    /// A daemon's signer that has seen the chain so far (it signed or checked it).
    fn signer(key: &SigningKey, now_ms: i64) -> Signer<'_> {
        Signer { key, now_ms, witness: Witness::SignedTo(0) }
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
        store.audit().append(&records[..150]).await.unwrap();
        store.audit().append(&records[150..]).await.unwrap();
        let stored = store.audit().chained_after(0, 1_000).await.unwrap();
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
        store.audit().checkpoint(signer(&key, 5_000)).await.unwrap();
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
        store.audit().append(&records[..12]).await.unwrap();
        store.audit().checkpoint(signer(&key, 5_000)).await.unwrap();
        store.audit().append(&records[12..]).await.unwrap();
        store.audit().prune(0, 5, Some(signer(&key, 6_000))).await.unwrap();
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
        store.audit().append(&records[..3]).await.unwrap();
        store.audit().checkpoint(signer(&key, 1)).await.unwrap();
        store.close().await;
        let verdict = verify(&dir.path().join("other.db"), &other.verifying_key(), Span::default(), &[]).await.unwrap();
        assert!(
            matches!(&verdict, Verdict::Broken { record_id: None, problem } if problem.contains("not signed by this key")),
            "{verdict:?}"
        );
    }

    /// Retention cuts a prefix by age even when a long call's record, older than the one
    /// written before it, sits later in the chain; a cut of every record is signed all the
    /// same (no record left, the start past the old head), and the chain after it verifies.
    #[tokio::test]
    async fn retention_cuts_a_prefix_and_a_cut_of_everything_is_signed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let key = load_or_make_key(&dir.path().join("audit.key"), true).unwrap();
        let store = Store::open(&path, 10).await.unwrap();
        let mut records: Vec<AuditRecord> = (0..6).map(record).collect();
        // Record 4 (id 5) started before record 3 (id 4) and was written after it.
        records[4].at_ms = 1_000;
        store.audit().append(&records).await.unwrap();
        store.audit().checkpoint(signer(&key, 5_000)).await.unwrap();
        store.audit().prune(1_003, 1_000, Some(signer(&key, 6_000))).await.unwrap();
        let left: Vec<i64> = store.audit().chained_after(0, 10).await.unwrap().into_iter().map(|(id, ..)| id).collect();
        assert_eq!(left, [4, 5, 6], "a prefix: id 5, older than 1_003, waits behind id 4");
        let verdict = verify(&path, &key.verifying_key(), Span::default(), &[]).await.unwrap();
        assert!(matches!(verdict, Verdict::Intact { records: 3, checkpoints: 2, .. }), "{verdict:?}");
        // Everything cut: signed with no record left; the next record follows the old head.
        let cut = store.audit().prune(i64::MAX, 1_000, Some(signer(&key, 7_000))).await.unwrap();
        assert_eq!(cut, Some(Signing::Signed(6)));
        let verdict = verify(&path, &key.verifying_key(), Span::default(), &[]).await.unwrap();
        assert!(matches!(verdict, Verdict::Intact { records: 0, checkpoints: 3, .. }), "{verdict:?}");
        store.audit().append(&records[..2]).await.unwrap();
        assert_eq!(store.audit().checkpoint(signer(&key, 8_000)).await.unwrap(), Signing::Signed(8));
        store.close().await;
        let verdict = verify(&path, &key.verifying_key(), Span::default(), &[]).await.unwrap();
        assert!(matches!(verdict, Verdict::Intact { records: 2, checkpoints: 4, .. }), "{verdict:?}");
    }

    /// The daemon signs nothing over a chain that does not continue its newest checkpoint, nor
    /// a chain it finds with records no checkpoint signs, nor after a checkpoint it signed is
    /// gone; an intact chain it signs.
    #[tokio::test]
    async fn the_daemon_signs_no_chain_that_does_not_continue_its_newest_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let key = load_or_make_key(&dir.path().join("audit.key"), true).unwrap();
        let store = Store::open(&path, 10).await.unwrap();
        let records: Vec<AuditRecord> = (0..6).map(record).collect();
        store.audit().append(&records[..4]).await.unwrap();
        assert_eq!(store.audit().checkpoint(signer(&key, 5_000)).await.unwrap(), Signing::Signed(4));
        store.audit().append(&records[4..]).await.unwrap();
        let pristine = dir.path().join("pristine.db");
        store.close().await;
        std::fs::copy(&path, &pristine).unwrap();
        let attempt = async |statement: &str, witness: Witness| {
            std::fs::copy(&pristine, &path).unwrap();
            sql(&path, statement).await;
            let store = Store::open(&path, 10).await.unwrap();
            let signing = store.audit().checkpoint(Signer { key: &key, now_ms: 9_000, witness }).await.unwrap();
            let checkpoints: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM audit_checkpoints").fetch_one(&store.pool()).await.unwrap();
            store.close().await;
            (signing, checkpoints)
        };
        let refused = |record_id: Option<i64>, problem: &str| Signing::Refused { record_id, problem: problem.to_owned() };
        // Intact: the head is signed.
        assert_eq!(attempt("SELECT 1", Witness::Starting).await, (Signing::Signed(6), 2));
        // Ids moved past the checkpoint (hashes kept).
        assert_eq!(
            attempt("UPDATE audit SET id = id + 100", Witness::Starting).await,
            (refused(Some(101), "the chain does not start where checkpoint 1 signed it"), 1)
        );
        assert_eq!(
            attempt("UPDATE audit SET id = id + 100 WHERE id > 2", Witness::Starting).await,
            (refused(Some(4), "record 4 no longer has the hash checkpoint 1 signed"), 1)
        );
        // A record after the checkpoint changed, or its link removed.
        assert_eq!(
            attempt("UPDATE audit SET outcome = 'denied' WHERE id = 6", Witness::Starting).await,
            (refused(Some(6), "record 6 does not continue the chain checkpoint 1 signed"), 1)
        );
        assert_eq!(
            attempt("UPDATE audit SET hash = NULL, prev_hash = NULL", Witness::Starting).await,
            (refused(None, "the chain does not start where checkpoint 1 signed it"), 1)
        );
        // Every checkpoint removed: found so at start, or the one this daemon signed missed.
        assert_eq!(
            attempt("DELETE FROM audit_checkpoints", Witness::Starting).await,
            (refused(None, "no checkpoint signs the 6 records the store holds"), 0)
        );
        assert_eq!(
            attempt("DELETE FROM audit_checkpoints", Witness::SignedTo(4)).await,
            (refused(Some(4), "the checkpoint this daemon signed at record 4 was removed"), 0)
        );
        // A checkpoint the key did not sign.
        assert_eq!(
            attempt("UPDATE audit_checkpoints SET records = 3", Witness::Starting).await,
            (refused(None, "checkpoint 1 is not signed by this daemon's key"), 1)
        );
    }
}
