//! What toolhost costs an agent, measured side by side in one run.
//!
//! `cargo bench --bench toolhost` runs every scenario; name some to run only those:
//! `cargo bench --bench toolhost -- overhead throughput propagation scale storm`.
//! The daemon under test is the real `toolhost serve` process, reached over a Unix socket; the
//! MCP servers are this binary in `--serve-mcp N` mode (see `fast_server`).

#![allow(clippy::print_stdout, clippy::print_stderr, unreachable_pub)]
// The 100-line limit is for the daemon (src/); a scenario reads best as one straight script.
#![allow(clippy::too_many_lines)]

mod audit_bench;
mod daemon;
mod fair_bench;
mod fast_server;
mod launcher_bench;
mod mcp_bench;
mod peers;
mod peers_propagation;
mod scenarios;
mod search_bench;
mod search_corpus;
mod tasks_bench;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve-mcp-http") {
        fast_server::serve_http();
        return;
    }
    if args.get(1).map(String::as_str) == Some("--serve-bare-grpc") {
        scenarios::serve_bare_grpc(args.get(2).map_or("bare.sock", String::as_str));
        return;
    }
    if args.get(1).map(String::as_str) == Some("--serve-mcp") {
        let tools = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(10);
        fast_server::serve(tools);
        return;
    }
    let wanted: Vec<&str> = args.iter().skip(1).map(String::as_str).filter(|a| !a.starts_with('-')).collect();
    // `cargo bench` passes --bench; anything else (such as `cargo test --all-targets`) only
    // checks that the harness starts, instead of running minutes of unoptimised measurements.
    if !args.iter().any(|a| a == "--bench") && wanted.is_empty() {
        println!("toolhost benchmarks: run them with `cargo bench --bench toolhost`");
        return;
    }
    let all = [
        "overhead",
        "mcp",
        "peers",
        "throughput",
        "propagation",
        "storm",
        "sustained",
        "scale",
        "policy",
        "search",
        "sandbox",
        "fair",
        "tasks",
        "chain",
        "npx",
    ];
    let chosen: Vec<&str> = if wanted.is_empty() { all.to_vec() } else { wanted };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    for scenario in chosen {
        println!("\n## {scenario}\n");
        runtime.block_on(async {
            match scenario {
                "overhead" => scenarios::overhead().await,
                "mcp" => mcp_bench::mcp().await,
                "peers" => peers::peers().await,
                "throughput" => scenarios::throughput().await,
                "propagation" => scenarios::propagation().await,
                "storm" => scenarios::storm().await,
                "sustained" => scenarios::sustained().await,
                "scale" => scenarios::scale().await,
                "policy" => scenarios::policy().await,
                "search" => search_bench::search().await,
                "sandbox" => scenarios::sandbox().await,
                "fair" => fair_bench::fair().await,
                "tasks" => tasks_bench::tasks().await,
                "chain" => audit_bench::chain().await,
                "npx" => launcher_bench::npx().await,
                other => eprintln!("unknown scenario {other:?}; known: {all:?}"),
            }
        });
    }
}
