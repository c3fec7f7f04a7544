//! The benchmark scenarios. Each prints a small Markdown table.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use toolhost::api::pb;
use toolhost::config::Config;
use toolhost::upstream::reaper::Reaper;
use toolhost::upstream::{self, Connection, SessionSettings};

use crate::daemon::{self, Daemon};

pub(crate) fn bench_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("toolhost-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A direct session with a benchmark server: a Rust MCP client on its own stdio pipe.
async fn direct_session(tools: usize) -> Connection {
    direct_session_with(tools, None).await
}

/// [`direct_session`] with the server pinned to one CPU. The baseline is a plain child process:
/// no sandbox.
pub(crate) async fn direct_session_with(tools: usize, cpu: Option<usize>) -> Connection {
    let mut text = daemon::servers(&["direct".to_owned()], tools, "sandbox = \"off\"");
    if let Some(cpu) = cpu {
        let exe = std::env::current_exe().expect("the bench binary's path");
        text = format!(
            "[servers.direct]\ncommand = \"taskset\"\nargs = [\"-c\", \"{cpu}\", {:?}, \"--serve-mcp\", \"{tools}\"]\nsandbox = \"off\"\n",
            exe.display().to_string()
        );
    }
    let config = Config::parse(std::path::Path::new("/bench/direct.toml"), &text).expect("bench config");
    let spec = &config.servers["direct"];
    let settings = SessionSettings {
        request_timeout: Duration::from_secs(30),
        max_message_bytes: 64 << 20,
        shutdown_grace: Duration::from_secs(1),
        reaper: Arc::new(Reaper::disabled()),
        authorizer: None,
        operations: toolhost::telemetry::metrics::Metrics::global().client_operation_duration,
        egress: Arc::default(),
    };
    upstream::connect(&"direct".into(), spec, &settings, Some(toolhost::mcp::lifecycle::Era::Legacy)).await.expect("direct session")
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

pub(crate) fn micros(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

fn millis(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

pub(crate) fn call_request(tool: &str) -> pb::CallToolRequest {
    pb::CallToolRequest { qualified_name: tool.to_owned(), arguments_json: r#"{"x":1}"#.to_owned(), ..Default::default() }
}

/// A bare tonic server answering `grpc.health.v1.Health/Check` on a Unix socket and nothing
/// else, on the daemon's kind of runtime: the floor of one gRPC hop (this binary run with
/// `--serve-bare-grpc PATH`).
pub fn serve_bare_grpc(path: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
        let listener = tokio::net::UnixListener::bind(path).expect("bind the bare gRPC socket");
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming).await.expect("the bare gRPC server");
    });
}

/// The bare tonic server's process: killed and reaped when dropped.
struct BareGrpc(std::process::Child);

impl Drop for BareGrpc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The bare tonic server of [`serve_bare_grpc`] as a child pinned to `cpu`, and a client of it.
async fn bare_grpc(
    dir: &std::path::Path,
    cpu: usize,
) -> (BareGrpc, tonic_health::pb::health_client::HealthClient<tonic::transport::Channel>) {
    let socket = dir.join("bare.sock");
    let exe = std::env::current_exe().expect("the bench binary's path");
    let child = std::process::Command::new("taskset")
        .args(["-c", &cpu.to_string()])
        .arg(exe)
        .arg("--serve-bare-grpc")
        .arg(&socket)
        .spawn()
        .map(BareGrpc)
        .expect("start the bare gRPC server");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(channel) = toolhost::cli::connect(&toolhost::config::ListenAddr::Unix(socket.clone())).await {
            return (child, tonic_health::pb::health_client::HealthClient::new(channel));
        }
        assert!(Instant::now() < deadline, "the bare gRPC server never listened");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Per-call latency, direct vs through toolhost, interleaved in blocks so both see the same noise,
/// beside the floors of the two hops a gRPC call through toolhost crosses: the direct stdio call
/// and a bare tonic server's no-op RPC. Every server process (the daemon and its server, the
/// direct server, the bare tonic server) is pinned to the last CPU; run the bench itself on
/// another (`taskset -c 0`).
pub async fn overhead() {
    const ROUNDS: usize = 10;
    const PER_ROUND: usize = 2000;
    let dir = bench_dir("overhead");
    let cpu = std::thread::available_parallelism().map_or(1, usize::from).saturating_sub(1);
    let daemon = Daemon::start_with(&dir, "", &daemon::servers(&["bench".to_owned()], 10, ""), Some(cpu));
    daemon.wait_ready(1, Instant::now()).await;
    let mut client = daemon.client().await;
    let direct = direct_session_with(10, Some(cpu)).await;
    let (bare_server, mut bare) = bare_grpc(&dir, cpu).await;
    let params = RawValue::from_string(r#"{"name":"tool_1","arguments":{"x":1}}"#.to_owned()).expect("params");
    let session = direct.handle().clone();
    for _ in 0..PER_ROUND {
        session.request("tools/call", Some(&params), Duration::from_secs(10), true).await.expect("direct call");
        client.call_tool(call_request("bench__tool_1")).await.expect("call through toolhost");
    }
    let mut health = tonic_health::pb::health_client::HealthClient::new(daemon.channel().await);
    let health_check = tonic_health::pb::HealthCheckRequest { service: String::new() };
    let mut direct_times = Vec::with_capacity(ROUNDS * PER_ROUND);
    let mut through_times = Vec::with_capacity(ROUNDS * PER_ROUND);
    let mut floor_times = Vec::with_capacity(ROUNDS * PER_ROUND);
    let mut bare_times = Vec::with_capacity(ROUNDS * PER_ROUND);
    let mut daemon_cpu = Duration::ZERO;
    for round in 0..ROUNDS {
        for leg in 0..2 {
            if (round + leg) % 2 == 0 {
                for _ in 0..PER_ROUND {
                    let started = Instant::now();
                    session.request("tools/call", Some(&params), Duration::from_secs(10), true).await.expect("direct call");
                    direct_times.push(started.elapsed());
                }
            } else {
                let cpu_before = daemon.cpu_time();
                for _ in 0..PER_ROUND {
                    let started = Instant::now();
                    client.call_tool(call_request("bench__tool_1")).await.expect("call through toolhost");
                    through_times.push(started.elapsed());
                }
                daemon_cpu += daemon.cpu_time() - cpu_before;
            }
        }
        for _ in 0..PER_ROUND / 4 {
            let started = Instant::now();
            health.check(health_check.clone()).await.expect("health check");
            floor_times.push(started.elapsed());
            let started = Instant::now();
            bare.check(health_check.clone()).await.expect("bare health check");
            bare_times.push(started.elapsed());
        }
    }
    floor_times.sort();
    bare_times.sort();
    direct_times.sort();
    through_times.sort();
    let (d50, d99) = (percentile(&direct_times, 0.5), percentile(&direct_times, 0.99));
    let (t50, t99) = (percentile(&through_times, 0.5), percentile(&through_times, 0.99));
    println!("{} calls each, interleaved in blocks of {PER_ROUND}.\n", ROUNDS * PER_ROUND);
    println!("| path | p50 µs | p90 µs | p99 µs |");
    println!("|---|---:|---:|---:|");
    println!("| direct stdio session (Rust client) | {} | {} | {} |", micros(d50), micros(percentile(&direct_times, 0.9)), micros(d99));
    println!("| through toolhost (gRPC, Unix socket) | {} | {} | {} |", micros(t50), micros(percentile(&through_times, 0.9)), micros(t99));
    println!("| **added by toolhost** | **{}** | | **{}** |", micros(t50.saturating_sub(d50)), micros(t99.saturating_sub(d99)));
    println!(
        "| gRPC floor: a Health/Check round trip on the same socket | {} | {} | {} |",
        micros(percentile(&floor_times, 0.5)),
        micros(percentile(&floor_times, 0.9)),
        micros(percentile(&floor_times, 0.99))
    );
    let b50 = percentile(&bare_times, 0.5);
    println!(
        "| gRPC floor: a bare tonic server's Health/Check (its own process) | {} | {} | {} |",
        micros(b50),
        micros(percentile(&bare_times, 0.9)),
        micros(percentile(&bare_times, 0.99))
    );
    println!(
        "\nratio at p50: {:.2}x the direct call; {:.2}x the floor (direct stdio + bare tonic, {} µs); daemon CPU per call: {} µs",
        t50.as_secs_f64() / d50.as_secs_f64(),
        t50.as_secs_f64() / (d50 + b50).as_secs_f64(),
        micros(d50 + b50),
        micros(daemon_cpu / (ROUNDS * PER_ROUND / 2 * 2) as u32)
    );
    drop(bare_server);
    direct.shutdown().await;
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Calls per second with many concurrent agents over several servers.
pub async fn throughput() {
    const SERVERS: usize = 4;
    const SECONDS: u64 = 4;
    let dir = bench_dir("throughput");
    let names: Vec<String> = (0..SERVERS).map(|i| format!("s{i}")).collect();
    let daemon = Daemon::start(&dir, &daemon::servers(&names, 10, "max_concurrent_calls = 256"));
    daemon.wait_ready(SERVERS, Instant::now()).await;
    let mut channels = Vec::new();
    for _ in 0..4 {
        channels.push(daemon.channel().await);
    }
    println!(
        "{SERVERS} servers, {SECONDS} s per level, 4 HTTP/2 connections shared by the agents; the load generator shares the 2 cores.\n"
    );
    println!("| concurrent agents | calls/s | p50 µs | p99 µs | daemon CPU µs/call | servers CPU µs/call | client CPU µs/call |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for agents in [1, 8, 32, 128] {
        let done = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs(SECONDS);
        let servers_before: Duration = daemon::children_of(daemon.pid()).iter().map(|p| daemon::cpu_time_of(*p)).sum();
        let daemon_before = daemon.cpu_time();
        let client_before = daemon::cpu_time_of(std::process::id() as i32);
        let mut tasks = Vec::new();
        for agent in 0..agents {
            let mut client = pb::tool_host_client::ToolHostClient::new(channels[agent % channels.len()].clone());
            let done = done.clone();
            let tool = format!("s{}__tool_1", agent % SERVERS);
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let started = Instant::now();
                    if client.call_tool(call_request(&tool)).await.is_ok() {
                        latencies.push(started.elapsed());
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
                latencies
            }));
        }
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await.expect("agent task"));
        }
        latencies.sort();
        let calls = done.load(Ordering::Relaxed).max(1);
        let servers_cpu: Duration =
            daemon::children_of(daemon.pid()).iter().map(|p| daemon::cpu_time_of(*p)).sum::<Duration>().saturating_sub(servers_before);
        let per_call = |d: Duration| micros(d / calls as u32);
        println!(
            "| {agents} | {:.0} | {} | {} | {} | {} | {} |",
            calls as f64 / SECONDS as f64,
            micros(percentile(&latencies, 0.5)),
            micros(percentile(&latencies, 0.99)),
            per_call(daemon.cpu_time() - daemon_before),
            per_call(servers_cpu),
            per_call(daemon::cpu_time_of(std::process::id() as i32) - client_before),
        );
    }
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Time from list_changed to a watcher seeing the new generation, against the server's own
/// time to serve the full listing.
pub async fn propagation() {
    println!("Median of 7 isolated changes (300 ms apart). The change is one tool's description; pages hold 100 tools.\n");
    println!("| tools | pages | server's full listing ms | list_changed → watcher ms | goal (1.2 × listing + 2 ms) | met |");
    println!("|---:|---:|---:|---:|---:|:---:|");
    for tools in [10usize, 1_000, 10_000] {
        let direct = direct_session(tools).await;
        let mut listing_times = Vec::new();
        for _ in 0..7 {
            let started = Instant::now();
            let mut cursor: Option<String> = None;
            loop {
                let params = toolhost::mcp::tools::list_params(cursor.as_deref());
                let result = direct.handle().request("tools/list", params.as_deref(), Duration::from_secs(30), true).await.expect("list");
                let page = toolhost::mcp::tools::parse_list_page(&result).expect("page");
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            listing_times.push(started.elapsed());
        }
        direct.shutdown().await;
        listing_times.sort();
        let listing = listing_times[listing_times.len() / 2];

        let dir = bench_dir(&format!("propagation-{tools}"));
        let daemon = Daemon::start(&dir, &daemon::servers(&["p".to_owned()], tools, "request_timeout = \"60s\""));
        daemon.wait_ready(1, Instant::now()).await;
        let mut client = daemon.client().await;
        let mut watch = client.watch_catalog(pb::WatchCatalogRequest::default()).await.expect("watch").into_inner();
        let mut latencies = Vec::new();
        for _ in 0..7 {
            // Isolated changes (none other in the 100 ms before), three a second: each is listed
            // at once. A burst waits for quiet by design; the storm scenario measures that.
            tokio::time::sleep(Duration::from_millis(300)).await;
            client.call_tool(call_request("p__mutate")).await.expect("mutate");
            let started = Instant::now();
            loop {
                let event = watch.message().await.expect("watch stream").expect("an event");
                if let Some(pb::catalog_event::Event::GenerationPublished(_)) = event.event {
                    break;
                }
            }
            latencies.push(started.elapsed());
        }
        latencies.sort();
        let latency = latencies[latencies.len() / 2];
        let goal = listing.mul_f64(1.2) + Duration::from_millis(2);
        println!(
            "| {tools} | {} | {} | {} | {} | {} |",
            tools / 100 + 1,
            millis(listing),
            millis(latency),
            millis(goal),
            if latency <= goal { "yes" } else { "no" }
        );
        daemon.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// 1,000 list_changed notifications in about one second from one server.
pub async fn storm() {
    let dir = bench_dir("storm");
    let daemon = Daemon::start(&dir, &daemon::servers(&["storm".to_owned()], 100, ""));
    daemon.wait_ready(1, Instant::now()).await;
    let mut client = daemon.client().await;
    let since = toolhost::catalog::record::now_ms();
    client.call_tool(call_request("storm__storm")).await.expect("storm");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let history = client.history(pb::HistoryRequest { server: "storm".into(), limit: 1 }).await.expect("history").into_inner();
    let during: Vec<_> = history.enumerations.iter().filter(|e| e.started_unix_ms >= since).collect();
    let count = |outcome: &str| during.iter().filter(|e| e.outcome == outcome).count();
    println!("| notifications | enumerations started | completed (unchanged or committed) | superseded | goal | met |");
    println!("|---:|---:|---:|---:|---:|:---:|");
    println!(
        "| 1000 | {} | {} | {} | ≤ 3 | {} |",
        during.len(),
        count("unchanged") + count("committed"),
        count("superseded"),
        if during.len() <= 3 { "yes" } else { "no" }
    );
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sustained rate: 20 list_changed a second for five seconds, from a server of 10,000 tools
/// (a full listing takes it about 13 ms). Listing every one would take a quarter of its time;
/// the goal is at most a tenth.
pub async fn sustained() {
    let dir = bench_dir("sustained");
    let daemon = Daemon::start(&dir, &daemon::servers(&["drizzle".to_owned()], 10_000, "request_timeout = \"60s\""));
    daemon.wait_ready(1, Instant::now()).await;
    let mut client = daemon.client().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let since = toolhost::catalog::record::now_ms();
    client.call_tool(call_request("drizzle__drizzle")).await.expect("drizzle");
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let history = client.history(pb::HistoryRequest { server: "drizzle".into(), limit: 200 }).await.expect("history").into_inner();
    let during: Vec<_> = history.enumerations.iter().filter(|e| e.started_unix_ms >= since).collect();
    let busy_ms: u64 = during.iter().map(|e| e.duration_ms).sum();
    let share = busy_ms as f64 / 5_000.0;
    println!("| notifications | enumerations | listing time | share of the server's time | goal | met |");
    println!("|---:|---:|---:|---:|---:|:---:|");
    println!(
        "| 100 in 5 s (20/s) | {} | {busy_ms} ms | {:.1} % | ≤ 10 % | {} |",
        during.len(),
        share * 100.0,
        if share <= 0.10 { "yes" } else { "no" }
    );
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// 1,000 servers with 100 tools each.
pub async fn scale() {
    const SERVERS: usize = 1000;
    const TOOLS: usize = 100;
    let dir = bench_dir("scale");
    let baseline = Daemon::start(&dir.join("baseline"), "");
    baseline.wait_ready(0, Instant::now()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let base_rss = baseline.rss_kib();
    baseline.stop();

    let names: Vec<String> = (0..SERVERS).map(|i| format!("server{i:04}")).collect();
    let servers = daemon::servers(&names, TOOLS, "");
    let started = Instant::now();
    let daemon = Daemon::start(&dir, &servers);
    let cold = daemon.wait_ready(SERVERS, started).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = daemon.rss_kib();
    let mut client = daemon.client().await;
    let mut whole = Vec::new();
    let mut total_tools = 0;
    for _ in 0..5 {
        let started = Instant::now();
        let mut request = pb::ListToolsRequest { page_size: 5000, ..Default::default() };
        total_tools = 0;
        loop {
            let page = client.list_tools(request.clone()).await.expect("ListTools").into_inner();
            total_tools += page.tools.len();
            if page.next_page_token.is_empty() {
                break;
            }
            request.page_token = page.next_page_token;
        }
        whole.push(started.elapsed());
    }
    whole.sort();
    let mut one = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let page = client
            .list_tools(pb::ListToolsRequest { servers: vec!["server0500".into()], ..Default::default() })
            .await
            .expect("ListTools one")
            .into_inner();
        assert_eq!(page.tools.len(), TOOLS + 2);
        one.push(started.elapsed());
    }
    one.sort();
    daemon.stop();

    // Restart: how soon is the stored catalog served?
    let started = Instant::now();
    let restarted = Daemon::start(&dir, &servers);
    let mut client = restarted.client().await;
    let first_page = loop {
        let page = client.list_tools(pb::ListToolsRequest { page_size: 5000, ..Default::default() }).await.expect("ListTools").into_inner();
        if page.tools.len() == 5000 {
            break started.elapsed();
        }
    };
    let listening = started.elapsed();
    restarted.stop();

    println!("| measure | value | goal | met |");
    println!("|---|---:|---:|:---:|");
    println!("| servers × tools | {SERVERS} × {} = {total_tools} | | |", TOOLS + 2);
    println!("| cold start to every server enumerated | {:.2} s | | |", cold.as_secs_f64());
    let per_server_kib = (rss.saturating_sub(base_rss)) as f64 / SERVERS as f64;
    println!("| daemon RSS: baseline / with servers | {base_rss} KiB / {rss} KiB | | |");
    println!(
        "| daemon memory per server | {per_server_kib:.0} KiB | ≤ 1024 KiB | {} |",
        if per_server_kib <= 1024.0 { "yes" } else { "no" }
    );
    println!("| ListTools, whole catalog (pages of 5,000), median of 5 | {} ms | | |", millis(whole[whole.len() / 2]));
    println!("| ListTools, one server, p50 / p99 of 50 | {} / {} ms | | |", millis(percentile(&one, 0.5)), millis(percentile(&one, 0.99)));
    println!(
        "| restart to the stored catalog served (process start → first page) | {} ms | ≤ 100 ms | {} |",
        millis(first_page),
        if first_page <= Duration::from_millis(100) { "yes" } else { "no" }
    );
    let _ = listening;
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the access policy costs a call: admitting the caller and deciding on the tool, with a
/// policy of 20 agents and a handful of globs each, over 10,000 tool names (decisions cached
/// after the first call per name, as on the call path).
pub async fn policy() {
    use toolhost::access::{Access, Identity, UnixPeer};
    use toolhost::config::{AccessConfig, AgentConfig};
    let agents = (0..20)
        .map(|i| AgentConfig {
            name: format!("agent-{i}"),
            uids: vec![2000 + i],
            gids: vec![],
            units: vec![format!("agent-{i}-*.service")],
            tokens: vec![],
            subjects: vec![],
            allow: vec![format!("srv{i}__*"), "shared__read_*".to_owned(), "*__search".to_owned()],
            deny: vec!["*__delete_*".to_owned(), format!("srv{i}__admin_*")],
            admin: false,
            concurrency: toolhost::config::DEFAULT_CONCURRENCY,
            rate: None,
            quotas: Vec::new(),
            approve: Vec::new(),
        })
        .collect();
    let access = Access::new(&AccessConfig {
        configured: true,
        default_allow: false,
        agents,
        audit_retention: Duration::from_secs(3600),
        audit_max_records: 1000,
        approve_everyone: Vec::new(),
    });
    let names: Vec<String> = (0..10_000).map(|i| format!("srv19__tool_{i}")).collect();
    let peer = UnixPeer::new(2019, 2019, 1);
    // First pass: decisions computed; second: what every later call pays.
    for (label, rounds) in [("first decision per tool", 1), ("cached decision", 20)] {
        let started = Instant::now();
        let mut allowed = 0usize;
        for _ in 0..rounds {
            for name in &names {
                let caller = access.admit(Identity::unix(peer.clone())).expect("admitted");
                allowed += usize::from(caller.agent.may_use(&toolhost::catalog::names::ToolName::unresolved(name)));
            }
        }
        let per_call = started.elapsed() / u32::try_from(rounds * names.len()).unwrap_or(u32::MAX);
        println!("| {label} (admit + decide) | {} ns | allowed {allowed} |", per_call.as_nanos());
    }
}

/// What the sandbox costs a server's start (spawn to the end of the handshake) and a call, on
/// a direct session, sandboxed and not, interleaved.
pub async fn sandbox() {
    const STARTS: usize = 40;
    const ROUNDS: usize = 10;
    const PER_ROUND: usize = 2000;
    let reaper = Arc::new(Reaper::spawn(std::path::Path::new(env!("CARGO_BIN_EXE_toolhost"))).expect("the orphan guard"));
    let settings = SessionSettings {
        request_timeout: Duration::from_secs(30),
        max_message_bytes: 64 << 20,
        shutdown_grace: Duration::from_secs(1),
        reaper: reaper.clone(),
        authorizer: None,
        operations: toolhost::telemetry::metrics::Metrics::global().client_operation_duration,
        egress: Arc::default(),
    };
    let connect = |sandboxed: bool| {
        let extra = if sandboxed { "" } else { "sandbox = \"off\"" };
        let text = daemon::servers(&["direct".to_owned()], 10, extra);
        let config = Config::parse(std::path::Path::new("/bench/direct.toml"), &text).expect("bench config");
        let spec = config.servers["direct"].clone();
        let settings = settings.clone();
        async move {
            upstream::connect(&"direct".into(), &spec, &settings, Some(toolhost::mcp::lifecycle::Era::Legacy)).await.expect("a session")
        }
    };
    let (mut plain_starts, mut sandboxed_starts) = (Vec::new(), Vec::new());
    for i in 0..STARTS * 2 {
        let sandboxed = i % 2 == 1;
        let started = Instant::now();
        let connection = connect(sandboxed).await;
        let took = started.elapsed();
        if sandboxed {
            sandboxed_starts.push(took)
        } else {
            plain_starts.push(took)
        }
        connection.shutdown().await;
    }
    plain_starts.sort();
    sandboxed_starts.sort();
    let (plain, sandboxed) = (connect(false).await, connect(true).await);
    let params = RawValue::from_string(r#"{"name":"tool_1","arguments":{"x":1}}"#.to_owned()).expect("params");
    let (mut plain_calls, mut sandboxed_calls) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS * 2 {
        let (session, times) = if round % 2 == 0 { (plain.handle(), &mut plain_calls) } else { (sandboxed.handle(), &mut sandboxed_calls) };
        for _ in 0..PER_ROUND {
            let started = Instant::now();
            session.request("tools/call", Some(&params), Duration::from_secs(10), true).await.expect("a call");
            times.push(started.elapsed());
        }
    }
    plain_calls.sort();
    sandboxed_calls.sort();
    println!("{STARTS} starts each (spawn to the end of `initialize`), {} calls each, interleaved.\n", ROUNDS * PER_ROUND);
    println!("| | start p50 ms | start p90 ms | call p50 µs | call p99 µs |");
    println!("|---|---:|---:|---:|---:|");
    for (label, starts, calls) in
        [("plain child process", &plain_starts, &plain_calls), ("in its sandbox", &sandboxed_starts, &sandboxed_calls)]
    {
        println!(
            "| {label} | {} | {} | {} | {} |",
            millis(percentile(starts, 0.5)),
            millis(percentile(starts, 0.9)),
            micros(percentile(calls, 0.5)),
            micros(percentile(calls, 0.99))
        );
    }
    plain.shutdown().await;
    sandboxed.shutdown().await;
    reaper.stop().await;
}
