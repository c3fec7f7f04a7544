//! Tool search: relevance on the test set, latency at 100,000 tools, what the index adds to a
//! commit and to the file.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolhost::catalog::model::{Generation, Listing};
use toolhost::catalog::names::qualify;
use toolhost::catalog::record::{EnumerationReason, EnumerationRecord};
use toolhost::store::{CommitOutcome, Store};

use crate::search_corpus::{QUERIES, catalog};

/// Commits `tools` grouped by server; returns each server's generation.
async fn build(store: &Store, tools: Vec<(String, Value)>) -> BTreeMap<String, Generation> {
    let mut by_server: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (server, tool) in tools {
        by_server.entry(server).or_default().push(tool);
    }
    let mut generations = BTreeMap::new();
    for (server, tools) in by_server {
        match store
            .generations()
            .commit(&server, Listing::from_raw(tools), EnumerationRecord::unmeasured(EnumerationReason::ListChanged), None)
            .await
            .expect("commit")
        {
            CommitOutcome::Committed { generation, .. } => {
                generations.insert(server, (*generation).clone());
            }
            CommitOutcome::Unchanged { .. } => unreachable!("a fresh store"),
        }
    }
    generations
}

/// What `SearchTools` does: the first round of queries that matches anything answers.
async fn run_search(store: &Store, query: &str, generations: &[(&str, u64)], limit: u32) -> Vec<(String, String, f64)> {
    let mut hits = store.generations().search_words(query, generations, limit).await.expect("search");
    hits.truncate(limit as usize);
    hits
}

fn numbers(generations: &BTreeMap<String, Generation>) -> Vec<(&str, u64)> {
    generations.iter().map(|(server, generation)| (server.as_str(), generation.number)).collect()
}

fn file_size(path: &std::path::Path) -> u64 {
    ["", "-wal"].iter().map(|suffix| std::fs::metadata(format!("{}{suffix}", path.display())).map_or(0, |m| m.len())).sum()
}

pub async fn search() {
    let dir = std::env::temp_dir().join(format!("toolhost-bench-{}-search", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");

    // Relevance over 1,000 tools.
    let store = Store::open(&dir.join("relevance.db"), 50).await.expect("store");
    let generations = build(&store, catalog(1_000)).await;
    let (mut top1, mut top5) = (0, 0);
    let mut misses = Vec::new();
    for (query, expected) in QUERIES {
        let hits = run_search(&store, query, &numbers(&generations), 5).await;
        let names: Vec<String> = hits.iter().map(|(server, name, _)| qualify(server, name)).collect();
        top1 += usize::from(names.first().is_some_and(|n| n == expected));
        top5 += usize::from(names.iter().any(|n| n == expected));
        if !names.iter().any(|n| n == expected) {
            misses.push(format!("{query:?} → {names:?}"));
        }
    }
    println!("| relevance, {} queries over 1,000 tools | top-1 {top1}/{n} | top-5 {top5}/{n} |", QUERIES.len(), n = QUERIES.len());
    for miss in misses {
        println!("  missed: {miss}");
    }
    store.close().await;

    // 100,000 tools, with and without the index.
    let indexed_path = dir.join("indexed.db");
    let plain_path = dir.join("plain.db");
    let indexed = Store::open(&indexed_path, 50).await.expect("store");
    let plain = Store::open_without_search_index(&plain_path, 50).await.expect("store");
    let started = Instant::now();
    let generations = build(&indexed, catalog(100_000)).await;
    let indexed_build = started.elapsed();
    let started = Instant::now();
    let plain_generations = build(&plain, catalog(100_000)).await;
    let plain_build = started.elapsed();
    println!(
        "| first commit of 100,000 tools | with index {:.1} s | without {:.1} s |",
        indexed_build.as_secs_f64(),
        plain_build.as_secs_f64()
    );

    let words = [
        "file",
        "invoice",
        "customer report",
        "delete ticket",
        "sync order history",
        "export",
        "payment",
        "user account",
        "git",
        "slack message",
    ];
    let mut latencies = Vec::new();
    let mut slowest = Vec::new();
    for round in 0..500 {
        let query = if round % 2 == 0 { QUERIES[round / 2 % QUERIES.len()].0 } else { words[round % words.len()] };
        let started = Instant::now();
        let hits = run_search(&indexed, query, &numbers(&generations), 40).await;
        latencies.push(started.elapsed());
        slowest.push((started.elapsed(), query));
        assert!(!hits.is_empty() || round % 2 == 0);
    }
    slowest.sort();
    slowest.dedup_by_key(|(_, query)| *query);
    for (took, query) in slowest.iter().rev().take(5) {
        println!("  slow: {query:?} {:.1} ms", took.as_secs_f64() * 1e3);
    }
    latencies.sort();
    let at = |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!(
        "| search at 100,000 tools (500 queries, 40 hits each) | p50 {:.2} ms | p99 {:.2} ms |",
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3
    );

    // A one-tool change on a 10,000-tool server, 40 times each, alternating the two stores.
    let mut with_index = Vec::new();
    let mut without = Vec::new();
    let mut current = (generations["crm"].clone(), plain_generations["crm"].clone());
    for round in 0..40 {
        let changed = |generation: &Generation| {
            let mut tools: Vec<Value> = generation.tools.iter().map(|t| serde_json::from_str(&t.definition).expect("json")).collect();
            tools[round * 7]["description"] = Value::from(format!("Changed in round {round}."));
            Listing::from_raw(tools)
        };
        for (store, previous, times) in [(&indexed, &mut current.0, &mut with_index), (&plain, &mut current.1, &mut without)] {
            let listing = changed(previous);
            let started = Instant::now();
            let outcome = store
                .generations()
                .commit("crm", listing, EnumerationRecord::unmeasured(EnumerationReason::ListChanged), Some(previous))
                .await
                .expect("commit");
            times.push(started.elapsed());
            if let CommitOutcome::Committed { generation, .. } = outcome {
                *previous = (*generation).clone();
            }
        }
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let (with_ms, without_ms) = (median(&mut with_index).as_secs_f64() * 1e3, median(&mut without).as_secs_f64() * 1e3);
    println!(
        "| commit of a 1-tool change at 100,000 tools (median of 40) | with index {with_ms:.2} ms | without {without_ms:.2} ms | +{:.1} % |",
        (with_ms / without_ms - 1.0) * 100.0
    );
    indexed.close().await;
    plain.close().await;
    let (indexed_bytes, plain_bytes) = (file_size(&indexed_path), file_size(&plain_path));
    println!(
        "| index size | {:.0} bytes per tool ({:.1} MiB with, {:.1} MiB without) |",
        (indexed_bytes.saturating_sub(plain_bytes)) as f64 / 100_000.0,
        indexed_bytes as f64 / 1048576.0,
        plain_bytes as f64 / 1048576.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}
