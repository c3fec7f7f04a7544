//! A model-based property test of the store: random sequences of listings for two servers
//! (additions, removals, changed definitions, duplicate names, empty listings, repeats) are
//! committed, and every kept generation read back, before and after reopening the file, equals
//! what a plain in-memory model says it must be.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::json;

use crate::catalog::model::Listing;
use crate::catalog::record::{EnumerationReason, EnumerationRecord};
use crate::store::{CommitOutcome, Store};

const HISTORY: u32 = 6;

/// One listing: (server 0 or 1, entries of (tool name index, definition variant)).
type Step = (usize, Vec<(u8, u8)>);

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let entry = (0u8..6, 0u8..3);
    prop::collection::vec((0usize..2, prop::collection::vec(entry, 0..7)), 1..14)
}

fn listing(entries: &[(u8, u8)]) -> Listing {
    Listing::from_raw(
        entries.iter().map(|(name, variant)| json!({"name": format!("t{name}"), "description": format!("v{variant}")})).collect(),
    )
}

/// What the server's tool set is after a listing: the first of each name wins.
fn model_of(entries: &[(u8, u8)]) -> BTreeMap<String, String> {
    let mut tools = BTreeMap::new();
    for (name, variant) in entries {
        tools.entry(format!("t{name}")).or_insert(format!("v{variant}"));
    }
    tools
}

async fn stored_tools(store: &Store, server: &str, generation: u64) -> BTreeMap<String, String> {
    let tools = store.generations().tools_at(server, generation).await.expect("read a generation");
    tools.iter().map(|tool| (tool.name.clone(), tool.fields().description.clone())).collect()
}

async fn check(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("catalog.db");
    let store = Store::open(&path, HISTORY).await.expect("open");
    let servers = ["alpha", "beta"];
    // Per server: every generation's tool set, generation 1 first.
    let mut model: [Vec<BTreeMap<String, String>>; 2] = [Vec::new(), Vec::new()];
    for (server, entries) in &steps {
        let expected = model_of(entries);
        let outcome = store
            .generations()
            .commit(servers[*server], listing(entries), EnumerationRecord::unmeasured(EnumerationReason::ListChanged), None)
            .await
            .expect("commit");
        let generations = &mut model[*server];
        match outcome {
            CommitOutcome::Committed { generation, .. } => {
                prop_assert!(generations.last() != Some(&expected) || generations.is_empty(), "a commit must change something");
                generations.push(expected);
                prop_assert_eq!(generation.number, generations.len() as u64, "numbers count up by one");
            }
            CommitOutcome::Unchanged { generation } => {
                prop_assert_eq!(generations.last(), Some(&expected), "unchanged means the same tool set");
                prop_assert_eq!(generation, generations.len() as u64);
            }
        }
    }
    for reopened in [false, true] {
        let store = if reopened { Store::open(&path, HISTORY).await.expect("reopen") } else { store.clone() };
        for (idx, server) in servers.iter().enumerate() {
            let generations = &model[idx];
            let kept = generations.len().saturating_sub(HISTORY as usize);
            for (number, tools) in generations.iter().enumerate().skip(kept) {
                prop_assert_eq!(&stored_tools(&store, server, number as u64 + 1).await, tools, "{} generation {}", server, number + 1);
                // The search index holds exactly that generation's tools, too.
                let indexed = store.generations().indexed_names(server, number as u64 + 1).await.expect("read the index");
                prop_assert_eq!(indexed, tools.keys().cloned().collect::<Vec<_>>(), "index of {} generation {}", server, number + 1);
            }
            let current = store.generations().load_current(server).await.expect("load");
            prop_assert_eq!(current.map(|c| c.generation.number).unwrap_or(0), generations.len() as u64);
            let history = store.generations().history(server, 100).await.expect("history");
            let numbers: Vec<u64> = history.iter().map(|g| g.generation).collect();
            let expected: Vec<u64> = (kept as u64 + 1..=generations.len() as u64).rev().collect();
            prop_assert_eq!(numbers, expected);
        }
        store.close().await;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_kept_generation_reads_back_as_the_model_says(steps in steps()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(check(steps))?;
    }
}
