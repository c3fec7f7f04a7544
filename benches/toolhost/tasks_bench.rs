//! Tasks: what running a call as a task costs beside the plain call, in one daemon, interleaved
//! in rounds. A task's round trip is StartTask (checked, admitted, stored) then GetTaskResult
//! (waits for the end, which is stored once): two RPCs and two store writes more than CallTool.

use std::time::Instant;

use toolhost::api::pb;

use crate::daemon::{self, Daemon};
use crate::scenarios::{bench_dir, call_request, micros, percentile};

pub async fn tasks() {
    const ROUNDS: usize = 10;
    const PER_ROUND: usize = 200;
    let dir = bench_dir("tasks");
    // Results stay kept for the whole run: room for all of them.
    let sections = "[tasks]\nmax_stored_bytes_per_agent = 1073741824\nmax_stored_bytes = 1073741824\n";
    let daemon = Daemon::start_with(&dir, sections, &daemon::servers(&["bench".to_owned()], 10, ""), None);
    daemon.wait_ready(1, Instant::now()).await;
    let mut client = daemon.client().await;
    for _ in 0..PER_ROUND {
        client.call_tool(call_request("bench__tool_1")).await.expect("warm-up call");
    }
    let (mut plain, mut task) = (Vec::with_capacity(ROUNDS * PER_ROUND), Vec::with_capacity(ROUNDS * PER_ROUND));
    for _ in 0..ROUNDS {
        for _ in 0..PER_ROUND {
            let started = Instant::now();
            client.call_tool(call_request("bench__tool_1")).await.expect("call");
            plain.push(started.elapsed());
        }
        for _ in 0..PER_ROUND {
            let started = Instant::now();
            let request = pb::StartTaskRequest { call: Some(call_request("bench__tool_1")), ttl_ms: 0 };
            let created = client.start_task(request).await.expect("start").into_inner();
            let done = client.get_task_result(pb::TaskRequest { task_id: created.task_id }).await.expect("result").into_inner();
            assert!(done.result.is_some(), "a completed task");
            task.push(started.elapsed());
        }
    }
    plain.sort_unstable();
    task.sort_unstable();
    println!("| path | p50 µs | p99 µs |\n|---|---:|---:|");
    for (name, times) in [("CallTool", &plain), ("StartTask + GetTaskResult", &task)] {
        println!("| {name} | {} | {} |", micros(percentile(times, 0.5)), micros(percentile(times, 0.99)));
    }
    let ratio = percentile(&task, 0.5).as_secs_f64() / percentile(&plain, 0.5).as_secs_f64().max(f64::EPSILON);
    println!("\ntask / plain at p50: {ratio:.2}× ({} calls each)", plain.len());
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}
