//! The benchmark's MCP server: stdio, protocol 2025-11-25, answers at once. `tools/list` pages
//! 100 tools at a time (`tool_0` … plus `mutate` and `storm`); calling `mutate` changes tool 0's
//! description and then sends `notifications/tools/list_changed`; `storm` sends 1,000
//! list_changed over about one second; `slow` answers after [`SLOW_CALL`].

use std::io::{BufRead, BufWriter, Write};

use serde::Deserialize;
use serde_json::value::RawValue;

const PAGE: usize = 100;
/// How long the `slow` tool works.
pub const SLOW_CALL: std::time::Duration = std::time::Duration::from_millis(2);

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<&'a str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(default)]
    cursor: Option<&'a str>,
    #[serde(default)]
    name: Option<&'a str>,
}

pub(crate) fn serve(tool_count: usize) {
    let stdin = std::io::stdin();
    // Not locked for the whole loop: the storm thread writes too (each flush is one locked write).
    let mut out = BufWriter::new(std::io::stdout());
    let mut version: u64 = 0;
    let mut line = String::new();
    let mut input = stdin.lock();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Ok(message) = serde_json::from_str::<Message<'_>>(&line) else { continue };
        let (Some(id), Some(method)) = (message.id, message.method) else { continue };
        let params: Option<Params<'_>> = message.params.and_then(|p| serde_json::from_str(p.get()).ok());
        let id = id.get();
        match method {
            "initialize" => {
                let _ = writeln!(
                    out,
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"protocolVersion":"2025-11-25","capabilities":{{"tools":{{"listChanged":true}}}},"serverInfo":{{"name":"bench-server","version":"1"}}}}}}"#
                );
            }
            "tools/list" => {
                let offset = params.as_ref().and_then(|p| p.cursor).and_then(|c| c.parse::<usize>().ok()).unwrap_or(0);
                let end = (offset + PAGE).min(tool_count);
                let mut page = String::with_capacity(PAGE * 120);
                for i in offset..end {
                    if i > offset {
                        page.push(',');
                    }
                    // `mutate` changes tool 0's description only: a one-tool diff in an N-tool listing.
                    let revision = if i == 0 { version } else { 0 };
                    page.push_str(&format!(
                        r#"{{"name":"tool_{i}","description":"benchmark tool {i} r{revision}","inputSchema":{{"type":"object","properties":{{"x":{{"type":"integer"}}}}}}}}"#
                    ));
                }
                if end == tool_count {
                    page.push_str(r#",{"name":"mutate","inputSchema":{"type":"object"}},{"name":"storm","inputSchema":{"type":"object"}},{"name":"drizzle","inputSchema":{"type":"object"}},{"name":"slow","inputSchema":{"type":"object"}}"#);
                }
                let next = if end < tool_count { format!(r#","nextCursor":"{end}""#) } else { String::new() };
                let _ = writeln!(out, r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{page}]{next}}}}}"#);
            }
            "tools/call" => {
                let name = params.as_ref().and_then(|p| p.name).unwrap_or_default();
                if name == "slow" {
                    // A tool that works for a while: what a fair queue shares.
                    std::thread::sleep(SLOW_CALL);
                }
                let _ = writeln!(out, r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"ok"}}]}}}}"#);
                if name == "mutate" {
                    version += 1;
                    let _ = writeln!(out, r#"{{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}}"#);
                } else if name == "drizzle" {
                    // A sustained rate: list_changed 20 times a second for five seconds.
                    let _ = out.flush();
                    std::thread::spawn(|| {
                        let stdout = std::io::stdout();
                        for _ in 0..100 {
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            let mut out = stdout.lock();
                            let _ = writeln!(out, r#"{{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}}"#);
                            let _ = out.flush();
                        }
                    });
                } else if name == "storm" {
                    let _ = out.flush();
                    std::thread::spawn(|| {
                        let stdout = std::io::stdout();
                        for _ in 0..1000 {
                            let mut out = stdout.lock();
                            let _ = writeln!(out, r#"{{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}}"#);
                            let _ = out.flush();
                            drop(out);
                            std::thread::sleep(std::time::Duration::from_millis(1));
                        }
                    });
                }
            }
            "ping" => {
                let _ = writeln!(out, r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#);
            }
            _ => {
                let _ = writeln!(out, r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32601,"message":"method not found"}}}}"#);
            }
        }
        let _ = out.flush();
    }
}

/// The same server over Streamable HTTP (2025 shape, JSON answers, keep-alive), with std's
/// blocking sockets: one thread per connection, as thin as an HTTP MCP server gets. Prints its
/// port on stdout.
pub(crate) fn serve_http() {
    use std::io::{BufReader, Read};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("{}", listener.local_addr().expect("addr").port());
    let _ = std::io::stdout().flush();
    for stream in listener.incoming().flatten() {
        let _ = stream.set_nodelay(true);
        std::thread::spawn(move || {
            let mut writer = stream.try_clone().expect("clone");
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            loop {
                let mut length = 0usize;
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let Ok(message) = serde_json::from_slice::<Message<'_>>(&body) else { return };
                let response = match (message.id, message.method) {
                    (Some(id), Some("initialize")) => format!(
                        r#"{{"jsonrpc":"2.0","id":{},"result":{{"protocolVersion":"2025-11-25","capabilities":{{"tools":{{}}}},"serverInfo":{{"name":"bench-http","version":"1"}}}}}}"#,
                        id.get()
                    ),
                    (Some(id), Some(_)) => {
                        format!(r#"{{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":"ok"}}]}}}}"#, id.get())
                    }
                    _ => String::new(),
                };
                let head = if response.is_empty() {
                    "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_owned()
                } else {
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: bench\r\ncontent-length: {}\r\n\r\n",
                        response.len()
                    )
                };
                if writer.write_all(format!("{head}{response}").as_bytes()).is_err() {
                    return;
                }
            }
        });
    }
}
