//! A sandboxed server's way out by name (`network = { allow = [...] }`): it reaches exactly the
//! hosts its entry allows, through the daemon's proxy, the only route out of its own network
//! namespace; a host not allowed is refused (403), counted and named in `toolhost servers`; an
//! allowed name never leads back into the machine; nothing else has a route out.

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;
use crate::sandbox::{PYTHON, TOOLHOST};
use crate::sandbox_life::python_server;

/// The tool `reach`: a CONNECT to `target` through the proxy its environment names, then one
/// line each way; or, with `direct`, a plain connection to `target` (which must fail); or, with
/// `url`, a plain HTTP GET as `urllib` makes it through `HTTP_PROXY`.
const REACH: &str = r#"args = message["params"].get("arguments", {})
host, port = args.get("target", "x:0").rsplit(":", 1)
if args.get("url"):
    # A plain http:// URL, fetched as Python fetches one: through the proxy HTTP_PROXY names.
    try:
        with urllib.request.urlopen(args["url"], timeout=10) as response:
            said = "%d | %s" % (response.status, response.read().decode().strip())
    except urllib.error.HTTPError as error:
        said = "%d | %s" % (error.code, error.read().decode(errors="replace").strip())
    except Exception as error:
        said = "failed: " + repr(error)
elif args.get("direct"):
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=3)
        said = "connected directly"
    except OSError as error:
        said = "no route: " + type(error).__name__
else:
    proxy = os.environ.get("HTTPS_PROXY", "")
    phost, pport = proxy.rsplit("/", 1)[-1].rsplit(":", 1)
    conn = socket.create_connection((phost, int(pport)), timeout=10)
    conn.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (args["target"], args["target"])).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(1)
        if not chunk:
            break
        head += chunk
    status = head.split(b"\r\n", 1)[0].decode()
    said = status
    if " 200 " in status:
        conn.sendall(b"ping\n")
        said += " | " + conn.makefile().readline().strip()
    else:
        said += " | " + conn.recv(4096).decode(errors="replace").strip()
result = {"content": [{"type": "text", "text": said}]}"#;

async fn reach(
    grpc: &mut toolhost::api::pb::tool_host_client::ToolHostClient<tonic::transport::Channel>,
    target: &str,
    direct: bool,
) -> String {
    let call = pb::CallToolRequest {
        qualified_name: "out__reach".into(),
        arguments_json: json!({"target": target, "direct": direct}).to_string(),
        ..Default::default()
    };
    said(grpc, call).await
}

async fn fetch(grpc: &mut toolhost::api::pb::tool_host_client::ToolHostClient<tonic::transport::Channel>, url: &str) -> String {
    let call =
        pb::CallToolRequest { qualified_name: "out__reach".into(), arguments_json: json!({"url": url}).to_string(), ..Default::default() };
    said(grpc, call).await
}

async fn said(
    grpc: &mut toolhost::api::pb::tool_host_client::ToolHostClient<tonic::transport::Channel>,
    call: pb::CallToolRequest,
) -> String {
    let answer = grpc.call_tool(call).await.unwrap().into_inner();
    let content: Value = serde_json::from_str(&answer.content_json).unwrap();
    content[0]["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reaches_exactly_the_hosts_its_entry_allows_and_a_refusal_is_named() {
    // "Outside": a line echo server on the host's loopback, which the sandbox's own loopback
    // is not.
    let outside = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = outside.local_addr().unwrap().port();
    let echo = tokio::spawn(async move {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        while let Ok((stream, _)) = outside.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = tokio::io::BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = write.write_all(format!("outside says {line}\n").as_bytes()).await;
                }
            });
        }
    });
    // And a plain HTTP server there, answering one request per connection with what it was asked.
    let web = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let web_port = web.local_addr().unwrap().port();
    let pages = tokio::spawn(async move {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        while let Ok((stream, _)) = web.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = tokio::io::BufReader::new(read).lines();
                let (mut request, mut headers) = (String::new(), Vec::new());
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.is_empty() {
                        break;
                    }
                    if request.is_empty() { request = line } else { headers.push(line.to_ascii_lowercase()) }
                }
                let body = format!(
                    "{request} with {}",
                    headers
                        .iter()
                        .filter(|h| h.starts_with("connection") || h.starts_with("proxy"))
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let _ = write
                    .write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes())
                    .await;
            });
        }
    });
    let dir = TestDir::new();
    let script = dir.path("out.py");
    python_server(&script, "import os, socket, urllib.request, urllib.error", "reach", REACH);
    let table = format!(
        "[servers.out]\ncommand = {PYTHON:?}\nargs = [{:?}]\nnetwork = {{ allow = [\"127.0.0.1:{port}\", \"*.allowed.test\", \"localhost:{port}\", \"127.0.0.1:{web_port}\"] }}\n",
        script.display().to_string()
    );
    let app = start(dir.config(&table)).await;
    wait_for_server(app.registry(), "out", "ready", |v| v.state() == ServerState::Ready).await;
    let mut grpc = client(&app).await;

    // Allowed by address: through the proxy to the host's loopback, one line each way.
    let said = reach(&mut grpc, &format!("127.0.0.1:{port}"), false).await;
    assert_eq!(said, "HTTP/1.1 200 Connection established | outside says ping", "{said}");
    // Not allowed: refused and said so.
    let said = reach(&mut grpc, "example.org:443", false).await;
    assert!(said.starts_with("HTTP/1.1 403 Forbidden") && said.contains("example.org:443 is not in this server's network.allow"), "{said}");
    // Allowed by name, but the name leads back into the machine: refused as well.
    let said = reach(&mut grpc, &format!("localhost:{port}"), false).await;
    assert!(said.starts_with("HTTP/1.1 403 Forbidden"), "{said}");
    // Another port of an allowed address is another host.
    let said = reach(&mut grpc, &format!("127.0.0.1:{}", port.wrapping_add(1).max(1)), false).await;
    assert!(said.starts_with("HTTP/1.1 403 Forbidden"), "{said}");
    // A plain http:// URL goes through the same way, as one request in origin form with no
    // proxy headers; one not allowed is refused the same way.
    let page = fetch(&mut grpc, &format!("http://127.0.0.1:{web_port}/hello?x=1")).await;
    assert_eq!(page, "200 | GET /hello?x=1 HTTP/1.1 with connection: close", "{page}");
    let refused = fetch(&mut grpc, "http://example.org/").await;
    assert!(refused.starts_with("403 | toolhost: example.org:80 is not in this server's network.allow"), "{refused}");
    // No way around the proxy: its own namespace has no route to the host.
    let said = reach(&mut grpc, &format!("127.0.0.1:{port}"), true).await;
    assert!(said.starts_with("no route"), "{said}");

    // Counted and named: the table, the detail view, JSON.
    let output = std::process::Command::new(TOOLHOST).args(["servers", "out", "--json", "--addr", &cli_addr(&app)]).output().unwrap();
    let shown: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("{output:?}"));
    let sandbox = &shown["sandbox"];
    assert_eq!(sandbox["network"], "allow-list", "{shown}");
    assert_eq!(sandbox["egress_denied"], 4, "{shown}");
    assert_eq!(sandbox["egress_tunnels"], 2, "{shown}");
    assert_eq!(sandbox["last_denied"], "example.org:80", "{shown}");
    assert_eq!(
        sandbox["allow"],
        json!([format!("127.0.0.1:{port}"), "*.allowed.test:443", format!("localhost:{port}"), format!("127.0.0.1:{web_port}")]),
        "{shown}"
    );
    let output = std::process::Command::new(TOOLHOST).args(["servers", "--addr", &cli_addr(&app)]).output().unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("net=allow-list") && table.contains("denied=4"), "{table}");
    app.shutdown().await;
    echo.abort();
    pages.abort();
}

/// This machine's first IPv4 address other than loopback, from its interfaces.
pub(crate) fn this_machines_address() -> Option<std::net::Ipv4Addr> {
    nix::ifaddrs::getifaddrs()
        .ok()?
        .filter_map(|interface| interface.address?.as_sockaddr_in().map(|v4| v4.ip()))
        .find(|address| !address.is_loopback() && !address.is_link_local())
}

/// A name for one of this machine's own addresses (not loopback) leads back into it as surely as
/// `localhost` does: a tunnel there reaches any service listening on `0.0.0.0`. The name here
/// is the address's 32-bit decimal form, which the allow-list takes for a name (no address
/// parses from it) and the resolver for that address (`inet_aton`), as a DNS name pointing
/// here would be. And a refused name a server wrote with terminal controls in it (C1's CSI and
/// NEL, a bidi override: what HTTP lets through) reaches the daemon's log escaped, never as a
/// terminal's control or a forged line; one with ESC or CR is no HTTP request at all (400).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_for_this_machines_own_address_is_refused_and_a_refused_name_is_logged_escaped() {
    let Some(own) = this_machines_address() else {
        return skipped("skipped: this machine has no IPv4 address but loopback, so no name can lead back to it another way");
    };
    // A service on every address of the machine.
    let service = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = service.local_addr().unwrap().port();
    let echo = tokio::spawn(async move {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        while let Ok((stream, _)) = service.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = tokio::io::BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = write.write_all(format!("inside says {line}\n").as_bytes()).await;
                }
            });
        }
    });
    let name = u32::from(own).to_string();
    let dir = TestDir::new();
    let script = dir.path("out.py");
    python_server(&script, "import os, socket, urllib.request, urllib.error", "reach", REACH);
    let config = dir.path("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = \"catalog.db\"\n[grpc]\nlisten = [\"unix:toolhost.sock\"]\n\n[servers.out]\ncommand = {PYTHON:?}\n\
             args = [{:?}]\nnetwork = {{ allow = [\"{name}:{port}\", \"*.allowed.test\"] }}\n",
            script.display().to_string()
        ),
    )
    .unwrap();
    let (mut daemon, mut grpc) = crate::telemetry::serve(&config, dir.path("toolhost.sock"), &[]).await;
    let log = || std::fs::read_to_string(config.with_extension("daemon.log")).unwrap_or_default();
    eventually("the server is ready", async || {
        let servers = grpc.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
        servers.iter().any(|server| server.name == "out" && server.state == pb::ServerState::Ready as i32).then_some(())
    })
    .await;

    // The first refusal is logged (a server's refusals are paced, a line a second).
    let hostile = "evil\u{9b}2J\u{202e}x\u{85}forged.allowed.test:443";
    let said = reach(&mut grpc, &hostile.replace(".allowed.test:443", ".elsewhere.test:443"), false).await;
    assert!(said.starts_with("HTTP/1.1 403 Forbidden"), "{said}");
    let logged = eventually("the refusal is logged", async || {
        let text = log();
        text.lines()
            .find(|line| line.contains("refused a connection") && line.contains("forged"))
            .map(str::to_owned)
            .ok_or_else(|| text.clone())
    })
    .await;
    assert!(logged.contains(r"evil\u{9b}2J\u{202e}x\u{85}forged.elsewhere.test:443"), "{logged}");
    let said = reach(&mut grpc, "evil\u{1b}[2J\u{1b}]8;;http://x\u{7}\rforged.allowed.test:443", false).await;
    assert!(said.starts_with("HTTP/1.1 400 Bad Request"), "{said}");
    let text = log();
    assert!(!text.contains(['\u{1b}', '\r', '\u{7}', '\u{9b}', '\u{202e}', '\u{85}']), "a control character reached the log raw: {text:?}");

    // The name of the machine's own address: refused, and said why.
    let said = reach(&mut grpc, &format!("{name}:{port}"), false).await;
    assert!(said.starts_with("HTTP/1.1 403 Forbidden") && said.contains("leads to this machine"), "{said}\n{}", log());
    let servers = grpc.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner().servers;
    let sandbox = servers.iter().find(|server| server.name == "out").and_then(|server| server.sandbox.clone()).unwrap();
    assert_eq!((sandbox.egress_denied, sandbox.egress_tunnels), (2, 0), "{sandbox:?}");
    assert_eq!(sandbox.last_denied, format!("{name}:{port}"));

    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.id() as i32), nix::sys::signal::Signal::SIGTERM);
    assert!(daemon.wait().unwrap().success(), "{}", log());
    echo.abort();
}
