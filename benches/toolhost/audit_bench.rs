//! What the audit chain costs: the CPU its hash adds to each record (RFC 8785 canonical JSON and
//! SHA-256, chained), the whole chained write per record, and, in the same run, the daemon's CPU
//! per call at saturation, which the hash is measured against: the trail is written off the
//! call path, so on a CPU-bound host the chain's cost to throughput is its share of that CPU.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use toolhost::api::pb;
use toolhost::audit::AuditRecord;
use toolhost::store::Store;
use toolhost::store::audit_chain::{self, Fields, GENESIS};

use crate::daemon::{self, Daemon};
use crate::scenarios::{bench_dir, call_request};

const RECORDS: usize = 50_000;

fn record(n: usize) -> AuditRecord {
    AuditRecord {
        at_ms: 1_764_000_000_000 + n as i64,
        agent: "agent-7".into(),
        caller: "uid 2007 pid 41234 unit agent-7.service".into(),
        transport: "unix",
        qualified_name: format!("github__search_issues_{}", n % 50),
        server: "github".into(),
        tool: format!("search_issues_{}", n % 50),
        generation: 12,
        definition_hash: "3f".repeat(32),
        outcome: "ok".into(),
        duration_us: 1_234,
        arguments: None,
    }
}

pub async fn chain() {
    let records: Vec<AuditRecord> = (0..RECORDS).map(record).collect();
    // The chain's own work per record, alone.
    let started = Instant::now();
    let mut prev = GENESIS.to_owned();
    for r in &records {
        prev = audit_chain::record_hash(&prev, &Fields::of(r));
    }
    let hash_per_record = started.elapsed() / RECORDS as u32;
    // The whole chained write, in the writer's batches.
    let dir = bench_dir("chain");
    std::fs::create_dir_all(&dir).unwrap();
    let store = Store::open(&dir.join("store.db"), 10).await.unwrap();
    let started = Instant::now();
    for batch in records.chunks(512) {
        store.audit().append(batch).await.unwrap();
    }
    let write_per_record = started.elapsed() / RECORDS as u32;
    store.close().await;
    // The daemon's CPU per call at saturation, in this run.
    let (calls_per_second, daemon_per_call) = saturation(&dir).await;
    let share = hash_per_record.as_secs_f64() / daemon_per_call.as_secs_f64() * 100.0;
    println!("{RECORDS} records; the daemon at 64 concurrent agents for 3 s.\n");
    println!("| measure | value |");
    println!("|---|---:|");
    println!("| the chain's hash, per record (canonical JSON + SHA-256) | {:.2} µs |", hash_per_record.as_secs_f64() * 1e6);
    println!("| the whole chained write, per record (batches of 512) | {:.2} µs |", write_per_record.as_secs_f64() * 1e6);
    println!("| daemon CPU per call at saturation ({calls_per_second:.0} calls/s) | {:.2} µs |", daemon_per_call.as_secs_f64() * 1e6);
    println!("| **the chain's share of a call's CPU** (its cost to calls/s when CPU-bound) | **{share:.1} %** |");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Calls per second and the daemon's CPU per call with 64 agents over 4 connections.
async fn saturation(dir: &std::path::Path) -> (f64, Duration) {
    const SECONDS: u64 = 3;
    let names: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
    let daemon = Daemon::start(&dir.join("daemon"), &daemon::servers(&names, 10, "max_concurrent_calls = 256"));
    daemon.wait_ready(names.len(), Instant::now()).await;
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(daemon.channel().await);
    }
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let before = daemon.cpu_time();
    let mut tasks = Vec::new();
    for agent in 0..64 {
        let mut client = pb::tool_host_client::ToolHostClient::new(channels[agent % channels.len()].clone());
        let (done, tool) = (done.clone(), format!("s{}__tool_1", agent % names.len()));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                if client.call_tool(call_request(&tool)).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("agent task");
    }
    let calls = done.load(Ordering::Relaxed).max(1);
    let cpu = daemon.cpu_time() - before;
    daemon.stop();
    (calls as f64 / SECONDS as f64, cpu / u32::try_from(calls).unwrap_or(u32::MAX))
}
