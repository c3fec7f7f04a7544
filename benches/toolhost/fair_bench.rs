//! Fair share: what an agent entry's limits cost a call, and what the fair queue gives a polite
//! agent sharing a slow server with one that floods it.

use std::time::{Duration, Instant};

use toolhost::api::pb::tool_host_client::ToolHostClient;

use crate::daemon::{self, Bearer, Daemon};
use crate::fast_server::SLOW_CALL;
use crate::scenarios::{bench_dir, call_request, micros, percentile};

type Client = ToolHostClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>>;

async fn agent(daemon: &Daemon, token: &str) -> Client {
    ToolHostClient::with_interceptor(daemon.channel().await, Bearer::new(token))
}

/// `[access]` with one agent entry per `(name, token, limits)`.
fn access(dir: &std::path::Path, agents: &[(&str, &str, &str)]) -> String {
    use std::os::unix::fs::MetadataExt;
    let mut text = String::from("[access]\n");
    for (name, token, limits) in agents {
        let file = dir.join(format!("{name}.token"));
        std::fs::create_dir_all(dir).expect("bench dir");
        std::fs::write(&file, token).expect("token file");
        text.push_str(&format!(
            "[[access.agents]]\nname = \"{name}\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n{limits}\n",
            file.display()
        ));
    }
    // The bench itself (ListServers while it waits) is the operator: last, since the first
    // entry that matches wins and the agents' calls come from the same uid.
    let uid = std::fs::metadata("/proc/self").map(|meta| meta.uid()).expect("own uid");
    text.push_str(&format!("[[access.agents]]\nname = \"operator\"\nuids = [{uid}]\nallow = [\"*\"]\nadmin = true\n"));
    text
}

const TOKEN: &str = "bench-agent-token-0123456789abcdef";

pub async fn fair() {
    limiter_cost().await;
    fair_queue().await;
}

/// The same calls through three daemons whose only difference is the caller's entry: no limits
/// set, a rate and a concurrency limit, and those plus a quota (counted in the store).
async fn limiter_cost() {
    const ROUNDS: usize = 10;
    const PER_ROUND: usize = 2000;
    let setups = [
        ("no limits set", ""),
        ("rate + concurrency", "rate = { calls = 1000000, per = \"1s\", burst = 1000000 }\nconcurrency = 64"),
        (
            "rate + concurrency + quota",
            "rate = { calls = 1000000, per = \"1s\", burst = 1000000 }\nconcurrency = 64\n\
             quota = { tools = [\"bench__*\"], calls = 1000000000, per = \"1d\" }",
        ),
    ];
    let mut daemons = Vec::new();
    for (index, (_, limits)) in setups.iter().enumerate() {
        let dir = bench_dir(&format!("limits-{index}"));
        let sections = access(&dir, &[("bench-agent", TOKEN, limits)]);
        let daemon = Daemon::start_with(&dir, &sections, &daemon::servers(&["bench".to_owned()], 10, ""), None);
        daemon.wait_ready(1, Instant::now()).await;
        let mut client = agent(&daemon, TOKEN).await;
        for _ in 0..PER_ROUND {
            client.call_tool(call_request("bench__tool_1")).await.expect("warm-up call");
        }
        daemons.push((daemon, client));
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(ROUNDS * PER_ROUND); setups.len()];
    let mut cpu = vec![Duration::ZERO; setups.len()];
    for round in 0..ROUNDS {
        // Each round starts with a different daemon, so none always runs first.
        for offset in 0..setups.len() {
            let index = (round + offset) % setups.len();
            let (daemon, client) = &mut daemons[index];
            let cpu_before = daemon.cpu_time();
            for _ in 0..PER_ROUND {
                let started = Instant::now();
                client.call_tool(call_request("bench__tool_1")).await.expect("call");
                times[index].push(started.elapsed());
            }
            cpu[index] += daemon.cpu_time() - cpu_before;
        }
    }
    println!("### What an agent's limits cost a call\n");
    println!("{} calls per setup over the Unix socket, interleaved in blocks of {PER_ROUND}.\n", ROUNDS * PER_ROUND);
    println!("| the caller's entry | p50 µs | p90 µs | p99 µs | daemon CPU per call µs |");
    println!("|---|---:|---:|---:|---:|");
    let calls = u32::try_from(ROUNDS * PER_ROUND).unwrap_or(u32::MAX);
    for (index, (label, _)) in setups.iter().enumerate() {
        times[index].sort();
        let sorted = &times[index];
        println!(
            "| {label} | {} | {} | {} | {} |",
            micros(percentile(sorted, 0.5)),
            micros(percentile(sorted, 0.9)),
            micros(percentile(sorted, 0.99)),
            micros(cpu[index] / calls)
        );
    }
    println!();
    for (daemon, _) in daemons {
        daemon.stop();
    }
}

/// One server with one slot and a tool that works for [`SLOW_CALL`]: a flooding agent keeps
/// `FLOOD` calls queued while a polite agent makes one call at a time. Without fairness the
/// polite call would wait behind the whole flood (`FLOOD` × the call); round-robin, behind at
/// most the call at the server and one more of the flood's.
async fn fair_queue() {
    const FLOOD: usize = 100;
    const POLITE_CALLS: usize = 200;
    const POLITE_TOKEN: &str = "bench-polite-token-0123456789abcdef";
    let dir = bench_dir("fair-queue");
    let sections = access(&dir, &[("flood", TOKEN, ""), ("polite", POLITE_TOKEN, "")]);
    let daemon = Daemon::start_with(&dir, &sections, &daemon::servers(&["bench".to_owned()], 10, "max_concurrent_calls = 1"), None);
    daemon.wait_ready(1, Instant::now()).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let mut flooders = tokio::task::JoinSet::new();
    let flood_times = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for _ in 0..FLOOD {
        let (mut client, stop, times) = (agent(&daemon, TOKEN).await, stop.clone(), flood_times.clone());
        flooders.spawn(async move {
            while !stop.is_cancelled() {
                let started = Instant::now();
                if client.call_tool(call_request("bench__slow")).await.is_ok() {
                    times.lock().expect("times").push(started.elapsed());
                }
            }
        });
    }
    // Let the flood fill the queue before the polite agent starts.
    tokio::time::sleep(SLOW_CALL * 20).await;
    let mut polite = agent(&daemon, POLITE_TOKEN).await;
    let mut polite_times = Vec::with_capacity(POLITE_CALLS);
    for _ in 0..POLITE_CALLS {
        let started = Instant::now();
        polite.call_tool(call_request("bench__slow")).await.expect("polite call");
        polite_times.push(started.elapsed());
    }
    stop.cancel();
    while flooders.join_next().await.is_some() {}
    daemon.stop();
    polite_times.sort();
    let mut flood_times = flood_times.lock().expect("times").clone();
    flood_times.sort();
    println!("### The fair queue: a polite agent beside a flood\n");
    println!(
        "One server, `max_concurrent_calls = 1`, a tool that works {} ms. The flooding agent keeps {FLOOD} calls in flight; \
         the polite agent makes {POLITE_CALLS} calls one at a time.\n",
        SLOW_CALL.as_millis()
    );
    println!("| agent | calls | p50 ms | p90 ms | p99 ms |");
    println!("|---|---:|---:|---:|---:|");
    let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
    for (label, sorted) in [("polite", &polite_times), ("flood", &flood_times)] {
        println!(
            "| {label} | {} | {} | {} | {} |",
            sorted.len(),
            ms(percentile(sorted, 0.5)),
            ms(percentile(sorted, 0.9)),
            ms(percentile(sorted, 0.99))
        );
    }
    println!(
        "\nThe polite agent's p99 is {:.1} calls' time ({} ms each); first come first served it would wait behind {FLOOD}.\n",
        percentile(&polite_times, 0.99).as_secs_f64() / SLOW_CALL.as_secs_f64(),
        SLOW_CALL.as_millis()
    );
}
