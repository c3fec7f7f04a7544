//! The packed form of one server's current tools (`current_snapshots`): `THS1`, the tool count,
//! then each tool's name, hash and definition with their lengths (u32, little-endian), then a
//! 64-bit checksum of everything before it. Decoding checks every length, the UTF-8 and the
//! checksum, so a damaged snapshot is noticed and the tool versions are read instead.

use std::sync::Arc;

use crate::catalog::model::ToolDef;

const MAGIC: &[u8; 4] = b"THS1";

/// Packs `tools` (in the order given).
pub(super) fn encode(tools: &[ToolDef]) -> Vec<u8> {
    let size: usize = tools.iter().map(|t| 12 + t.name.len() + t.hash.len() + t.definition.len()).sum();
    let mut out = Vec::with_capacity(16 + size);
    out.extend_from_slice(MAGIC);
    push_len(&mut out, tools.len());
    for tool in tools {
        for field in [tool.name.as_bytes(), tool.hash.as_bytes(), tool.definition.as_bytes()] {
            push_len(&mut out, field.len());
            out.extend_from_slice(field);
        }
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Unpacks a snapshot, or `None` if it is damaged in any way.
pub(super) fn decode(bytes: &[u8]) -> Option<Vec<ToolDef>> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if checksum(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut rest = body.strip_prefix(MAGIC)?;
    let count = take_len(&mut rest)?;
    // Every tool takes at least its three lengths: a count beyond that is damage, not a hint.
    if count > rest.len() / 12 {
        return None;
    }
    let mut tools = Vec::with_capacity(count);
    for _ in 0..count {
        let name = take_str(&mut rest)?;
        let hash = take_str(&mut rest)?;
        let definition = take_str(&mut rest)?;
        tools.push(ToolDef::from_parts(name.to_owned(), Arc::from(definition), hash.to_owned()));
    }
    rest.is_empty().then_some(tools)
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn take_len(rest: &mut &[u8]) -> Option<usize> {
    let (len, after) = rest.split_first_chunk::<4>()?;
    *rest = after;
    usize::try_from(u32::from_le_bytes(*len)).ok()
}

fn take_str<'a>(rest: &mut &'a [u8]) -> Option<&'a str> {
    let len = take_len(rest)?;
    let (field, after) = rest.split_at_checked(len)?;
    *rest = after;
    std::str::from_utf8(field).ok()
}

/// A fast 64-bit checksum (eight bytes a step), enough to notice a damaged blob.
fn checksum(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut sum: u64 = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        sum = (sum ^ word).wrapping_mul(K).rotate_left(29);
    }
    for (shift, byte) in chunks.remainder().iter().enumerate() {
        sum ^= u64::from(*byte) << (shift * 8);
    }
    sum.wrapping_mul(K)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, definition: &str) -> ToolDef {
        ToolDef::from_stored(name.to_owned(), definition.to_owned(), format!("{name}-hash"))
    }

    #[test]
    fn a_snapshot_round_trips_and_any_damage_is_noticed() {
        let tools = vec![tool("a", r#"{"name":"a"}"#), tool("é", r#"{"description":"ü","name":"é"}"#)];
        let packed = encode(&tools);
        let back = decode(&packed).unwrap();
        assert_eq!(
            back.iter().map(|t| (&t.name, &*t.definition, &t.hash)).collect::<Vec<_>>(),
            tools.iter().map(|t| (&t.name, &*t.definition, &t.hash)).collect::<Vec<_>>()
        );
        assert!(decode(&encode(&[])).unwrap().is_empty());
        for cut in 0..packed.len() {
            assert!(decode(&packed[..cut]).is_none(), "truncated at {cut}");
        }
        for at in 0..packed.len() {
            let mut flipped = packed.clone();
            flipped[at] ^= 0x40;
            assert!(decode(&flipped).is_none(), "a flipped bit at {at}");
        }
    }
}

#[cfg(test)]
mod store_tests {
    use serde_json::json;

    use crate::catalog::model::Listing;
    use crate::catalog::record::{EnumerationReason, EnumerationRecord};
    use crate::store::Store;

    async fn names_after_restart(path: &std::path::Path) -> Vec<String> {
        let store = Store::open(path, 10).await.unwrap();
        let loaded = store.generations().load_all_current().await.unwrap();
        store.close().await;
        loaded["files"].generation.tools.iter().map(|t| format!("{}:{}", t.name, &t.hash[..8])).collect()
    }

    #[tokio::test]
    async fn a_restart_reads_the_snapshot_and_ignores_a_stale_or_damaged_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.db");
        let store = Store::open(&path, 10).await.unwrap();
        let listing =
            |description: &str| Listing::from_raw(vec![json!({"name": "read", "description": description}), json!({"name": "list"})]);
        store.generations().commit("files", listing("one"), EnumerationRecord::unmeasured(EnumerationReason::Initial), None).await.unwrap();
        store
            .generations()
            .commit("files", listing("two"), EnumerationRecord::unmeasured(EnumerationReason::ListChanged), None)
            .await
            .unwrap();
        let expected: Vec<String> = {
            let tools: Vec<(String, String)> =
                sqlx::query_as("SELECT name, hash FROM tool_versions WHERE server = 'files' AND last_generation IS NULL ORDER BY name")
                    .fetch_all(&store.pool())
                    .await
                    .unwrap();
            tools.into_iter().map(|(name, hash)| format!("{name}:{}", &hash[..8])).collect()
        };
        let packed: i64 =
            sqlx::query_scalar("SELECT generation FROM current_snapshots WHERE server = 'files'").fetch_one(&store.pool()).await.unwrap();
        assert_eq!(packed, 2, "written with the generation");
        store.close().await;
        assert_eq!(names_after_restart(&path).await, expected);

        // A snapshot of another generation (an older one, say) is not served.
        let old = super::encode(&listing("one").tools);
        let store = Store::open(&path, 10).await.unwrap();
        sqlx::query("UPDATE current_snapshots SET tools = ?, generation = 1").bind(&old).execute(&store.pool()).await.unwrap();
        store.close().await;
        assert_eq!(names_after_restart(&path).await, expected, "stale: the tool versions are read");

        // A damaged one is not either.
        let store = Store::open(&path, 10).await.unwrap();
        let mut damaged = super::encode(&listing("two").tools);
        let middle = damaged.len() / 2;
        damaged[middle] ^= 1;
        sqlx::query("UPDATE current_snapshots SET tools = ?, generation = 2").bind(&damaged).execute(&store.pool()).await.unwrap();
        store.close().await;
        assert_eq!(names_after_restart(&path).await, expected, "damaged: the tool versions are read");

        // An unchanged listing writes the snapshot back.
        let store = Store::open(&path, 10).await.unwrap();
        sqlx::query("DELETE FROM current_snapshots").execute(&store.pool()).await.unwrap();
        store
            .generations()
            .commit("files", listing("two"), EnumerationRecord::unmeasured(EnumerationReason::Reconnect), None)
            .await
            .unwrap();
        let packed: i64 =
            sqlx::query_scalar("SELECT generation FROM current_snapshots WHERE server = 'files'").fetch_one(&store.pool()).await.unwrap();
        assert_eq!(packed, 2);
        store.close().await;
    }
}
