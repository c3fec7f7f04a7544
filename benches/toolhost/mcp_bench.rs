//! The MCP endpoint's call path, side by side with the direct stdio call and the gRPC API in
//! one run: the same `tools/call` to the same server program, interleaved in blocks.
//!
//! Pinned (when the machine has two CPUs or more and `taskset` exists): this process, the
//! agent, on CPU 0; the direct server, and the daemon with its servers, on the last CPU. A
//! direct call then always crosses cores, as a call through the daemon does, instead of
//! landing bimodally on whichever core the scheduler picks.

use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::daemon::{self, Daemon};
use crate::scenarios::{bench_dir, call_request, direct_session_with, micros, percentile};

const ROUNDS: usize = 10;
const PER_ROUND: usize = 2000;

/// The last CPU, if this process can be pinned to CPU 0 and children to that one.
pub(crate) fn pin() -> Option<usize> {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    if cpus < 2 {
        return None;
    }
    let pinned = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", "0", &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    pinned.then_some(cpus - 1)
}

/// One row per path: p50, p90, p99 and the p50 as a multiple of the first path's (the direct
/// stdio call).
pub(crate) fn print_table(names: &[&str], times: &mut [Vec<Duration>]) {
    for series in times.iter_mut() {
        series.sort();
    }
    let direct_p50 = percentile(&times[0], 0.5);
    println!("| path | p50 µs | p90 µs | p99 µs | p50 ÷ direct stdio |");
    println!("|---|---:|---:|---:|---:|");
    for (name, series) in names.iter().zip(times.iter()) {
        let p50 = percentile(series, 0.5);
        println!(
            "| {name} | {} | {} | {} | {:.2}× |",
            micros(p50),
            micros(percentile(series, 0.9)),
            micros(percentile(series, 0.99)),
            p50.as_secs_f64() / direct_p50.as_secs_f64()
        );
    }
}

/// `program` under `taskset -c CPU` when pinning, else as it is.
pub(crate) fn pinned(cpu: Option<usize>, program: &str) -> std::process::Command {
    match cpu {
        Some(cpu) => {
            let mut command = std::process::Command::new("taskset");
            command.args(["-c", &cpu.to_string(), program]);
            command
        }
        None => std::process::Command::new(program),
    }
}

/// A client on the MCP Unix socket: one line out, one line back.
pub(crate) struct SocketClient {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
    line: String,
    next_id: u64,
}

impl SocketClient {
    pub(crate) async fn connect(path: &std::path::Path) -> SocketClient {
        let deadline = Instant::now() + Duration::from_secs(30);
        let stream = loop {
            match tokio::net::UnixStream::connect(path).await {
                Ok(stream) => break stream,
                Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(error) => panic!("the MCP socket: {error}"),
            }
        };
        let (read, writer) = stream.into_split();
        SocketClient { reader: BufReader::new(read), writer, line: String::new(), next_id: 1 }
    }

    pub(crate) async fn call(&mut self, tool: &str) {
        self.next_id += 1;
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"x":1}}}}}}"#,
            self.next_id
        );
        self.writer.write_all(request.as_bytes()).await.expect("write");
        self.writer.write_all(b"\n").await.expect("write");
        self.line.clear();
        self.reader.read_line(&mut self.line).await.expect("read");
        assert!(self.line.contains(r#""result""#), "{}", self.line);
    }
}

/// A keep-alive HTTP/1.1 client of a 2025 session at `/mcp`.
pub(crate) struct HttpClient {
    stream: BufReader<tokio::net::TcpStream>,
    session: String,
    next_id: u64,
    head: String,
    body: Vec<u8>,
}

impl HttpClient {
    pub(crate) async fn connect(addr: std::net::SocketAddr) -> HttpClient {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("the MCP HTTP listener");
        stream.set_nodelay(true).expect("nodelay");
        let mut client =
            HttpClient { stream: BufReader::new(stream), session: String::new(), next_id: 1, head: String::new(), body: Vec::new() };
        client.post(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#).await;
        client.session = client.head.lines().find_map(|l| l.strip_prefix("mcp-session-id: ")).expect("a session").trim().to_owned();
        client
    }

    async fn post(&mut self, body: &str) {
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {}\r\nContent-Length: {}\r\n\r\n{body}",
            self.session,
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes()).await.expect("write");
        self.head.clear();
        loop {
            let before = self.head.len();
            self.stream.read_line(&mut self.head).await.expect("read");
            if self.head.len() - before <= 2 {
                break;
            }
        }
        let length: usize =
            self.head.lines().find_map(|l| l.strip_prefix("content-length: ")).and_then(|n| n.trim().parse().ok()).expect("a length");
        self.body.resize(length, 0);
        self.stream.read_exact(&mut self.body).await.expect("body");
    }

    pub(crate) async fn call(&mut self, tool: &str) {
        self.next_id += 1;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"x":1}}}}}}"#,
            self.next_id
        );
        self.post(&body).await;
        assert!(self.head.starts_with("HTTP/1.1 200"), "{}", self.head);
    }
}

/// A gRPC client on one HTTP/2 connection driven directly: tonic's codec over hyper's
/// `SendRequest`, without the `Channel`'s buffer task between the caller and the connection.
async fn direct_grpc(
    socket: &std::path::Path,
) -> toolhost::api::pb::tool_host_client::ToolHostClient<
    impl tonic::client::GrpcService<tonic::body::Body, ResponseBody = hyper::body::Incoming, Error = hyper::Error, Future: Send> + Clone + use<>,
> {
    let stream = tokio::net::UnixStream::connect(socket).await.expect("the daemon's socket");
    let (sender, connection) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
        .handshake::<_, tonic::body::Body>(hyper_util::rt::TokioIo::new(stream))
        .await
        .expect("an HTTP/2 connection");
    tokio::spawn(connection);
    let service = tower::service_fn(move |mut request: http::Request<tonic::body::Body>| {
        // The origin a Channel would have filled in.
        *request.uri_mut() = format!("http://localhost{}", request.uri().path()).parse().expect("a URI");
        let mut sender = sender.clone();
        async move { sender.send_request(request).await }
    });
    toolhost::api::pb::tool_host_client::ToolHostClient::new(service)
}

pub async fn mcp() {
    let cpu = pin();
    let dir = bench_dir("mcp");
    let sections = "[mcp]\nlisten = [\"127.0.0.1:0\", \"unix:mcp.sock\"]\n";
    // A fixed port is not known in advance: read the bound one from the daemon's log instead of
    // guessing; the simplest is to give it one that is free now.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port();
    let sections = sections.replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    let daemon = Daemon::start_with(&dir, &sections, &daemon::servers(&["bench".to_owned()], 10, ""), cpu);
    daemon.wait_ready(1, Instant::now()).await;
    let mut grpc = daemon.client().await;
    let mut grpc_direct = direct_grpc(&daemon.socket).await;
    let mut socket = SocketClient::connect(&dir.join("mcp.sock")).await;
    let mut http = HttpClient::connect(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await;
    let direct = direct_session_with(10, cpu).await;
    // The thinnest HTTP MCP server, pinned like the others, for the direct HTTP baseline.
    let mut http_server = {
        let exe = std::env::current_exe().expect("the bench binary").display().to_string();
        pinned(cpu, &exe).arg("--serve-mcp-http").stdout(std::process::Stdio::piped()).spawn().expect("the HTTP bench server")
    };
    let http_port: u16 = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(http_server.stdout.take().expect("stdout")).read_line(&mut line).expect("its port");
        line.trim().parse().expect("a port")
    };
    let mut direct_http = HttpClient::connect(std::net::SocketAddr::from(([127, 0, 0, 1], http_port))).await;
    let session = direct.handle().clone();
    let params = RawValue::from_string(r#"{"name":"tool_1","arguments":{"x":1}}"#.to_owned()).expect("params");

    let mut times: [Vec<Duration>; 6] = Default::default();
    for round in 0..=ROUNDS {
        for leg in 0..6 {
            let path = (round + leg) % 6;
            for _ in 0..PER_ROUND {
                let started = Instant::now();
                match path {
                    0 => drop(session.request("tools/call", Some(&params), Duration::from_secs(10), true).await.expect("direct call")),
                    1 => socket.call("bench__tool_1").await,
                    2 => http.call("bench__tool_1").await,
                    3 => direct_http.call("tool_1").await,
                    4 => drop(grpc.call_tool(call_request("bench__tool_1")).await.expect("gRPC call")),
                    _ => drop(grpc_direct.call_tool(call_request("bench__tool_1")).await.expect("gRPC call, direct HTTP/2")),
                }
                // Round 0 warms every path up and is not counted.
                if round > 0 {
                    times[path].push(started.elapsed());
                }
            }
        }
    }
    let names = [
        "direct stdio session (Rust client)",
        "toolhost MCP, Unix socket",
        "toolhost MCP, Streamable HTTP (2025 session)",
        "direct Streamable HTTP (the same HTTP client, a thin std HTTP server)",
        "toolhost gRPC, Unix socket (tonic Channel)",
        "toolhost gRPC, Unix socket (tonic over a bare HTTP/2 connection)",
    ];
    let pinned = match cpu {
        Some(cpu) => format!("agent on CPU 0, servers and daemon on CPU {cpu}"),
        None => "no (one CPU, or no taskset)".to_owned(),
    };
    println!("{} calls per path, interleaved in blocks of {PER_ROUND}; pinned: {pinned}.\n", ROUNDS * PER_ROUND);
    print_table(&names, &mut times);
    direct.shutdown().await;
    let _ = http_server.kill();
    let _ = http_server.wait();
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
    listing(cpu).await;
}

/// `tools/list` of about 10,000 tools over the socket, every page: the first listing renders
/// each tool once per generation; later ones only copy rendered entries into the page.
async fn listing(cpu: Option<usize>) {
    const SERVERS: usize = 100;
    let dir = bench_dir("mcp-list");
    let names: Vec<String> = (0..SERVERS).map(|i| format!("s{i:03}")).collect();
    let sections = "[mcp]\nlisten = [\"unix:mcp.sock\"]\npage_size = 500\n";
    let daemon = Daemon::start_with(&dir, sections, &daemon::servers(&names, 100, ""), cpu);
    daemon.wait_ready(SERVERS, Instant::now()).await;
    let mut socket = SocketClient::connect(&dir.join("mcp.sock")).await;
    let rss_before = daemon.rss_kib();
    let mut runs = Vec::new();
    let mut tools = 0;
    for _ in 0..21 {
        let started = Instant::now();
        let (mut cursor, mut count, mut bytes) = (None::<String>, 0usize, 0usize);
        loop {
            let params = cursor.as_ref().map_or_else(String::new, |c| format!(r#","params":{{"cursor":"{c}"}}"#));
            let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list"{params}}}"#);
            socket.writer.write_all(line.as_bytes()).await.expect("write");
            socket.writer.write_all(b"\n").await.expect("write");
            socket.line.clear();
            socket.reader.read_line(&mut socket.line).await.expect("read");
            bytes += socket.line.len();
            let page: serde_json::Value = serde_json::from_str(&socket.line).expect("a page");
            count += page["result"]["tools"].as_array().map_or(0, Vec::len);
            match page["result"]["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        tools = count;
        runs.push((started.elapsed(), bytes));
    }
    let first = runs[0];
    let mut later: Vec<Duration> = runs[1..].iter().map(|(d, _)| *d).collect();
    later.sort();
    println!(
        "\n`tools/list` of {tools} tools ({SERVERS} servers), every page of 500, over the socket ({} KiB in all), timed in the client:\n",
        first.1 / 1024
    );
    println!("| listing | whole listing ms |");
    println!("|---|---:|");
    println!("| first (renders every tool once) | {:.1} |", first.0.as_secs_f64() * 1e3);
    println!("| later, p50 of 20 | {:.1} |", percentile(&later, 0.5).as_secs_f64() * 1e3);
    println!("\nDaemon RSS: {} MiB before the first listing, {} MiB after all of them.", rss_before / 1024, daemon.rss_kib() / 1024);
    daemon.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
