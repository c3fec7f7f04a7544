//! A scripted MCP server (stdio, protocol 2025-11-25) for the demo, the tests and the benchmarks.
//!
//! Run without arguments it serves three demo tools. With a JSON script as its only argument it
//! can paginate, change its tool set between two pages, send list_changed (once, on a file
//! change, or in a storm), crash, hang, write garbage, leave out the tools capability, send
//! requests toolhost never advertised, and log every message it receives. Uses std and
//! serde_json only, so it starts in about a millisecond.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

/// Everything the server can be told to do; every field is optional.
#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Script {
    tools: Option<Vec<Value>>,
    /// Read the tool set from this file at the start of every listing.
    tools_file: Option<String>,
    /// Poll `tools_file` and send list_changed when it changes.
    watch_tools_file: bool,
    /// Tools per page; 0 serves everything in one page.
    page_size: usize,
    cursor_prefix: Option<String>,
    protocol_version: Option<String>,
    capabilities: Option<Value>,
    server_info: Option<Value>,
    /// Append every line received to this file.
    log_file: Option<String>,
    /// Count launches here, for `crash_on_launch`.
    state_dir: Option<String>,
    /// Exit with status 3 right after `notifications/initialized` on these launches (1-based).
    crash_on_launch: Vec<u64>,
    /// Never answer these methods.
    hang_methods: Vec<String>,
    /// Write a line that is not JSON before every response.
    garbage_before_response: bool,
    /// In the first listing, after serving this page, switch to this tool set and send list_changed.
    mutate_after_page: Option<Mutation>,
    /// Always answer with the same nextCursor.
    repeat_cursor: bool,
    /// Answer the first request that carries a cursor with -32602.
    reject_cursor_once: bool,
    /// Send this many list_changed notifications right after initialized.
    list_changed_storm: usize,
    /// Start the storm once the first tools/list is answered instead, so that the first listing
    /// is sure to reach the server before any notification does.
    storm_after_first_list: bool,
    /// When the storm is over, write the time (Unix milliseconds) to this file.
    storm_done_file: Option<String>,
    /// Write this many lines to stderr at start.
    stderr_lines: usize,
    /// Send these requests to the client after initialized.
    server_requests: Vec<String>,
    /// Calls to these tools answer -32602 "Unknown tool" although they are listed.
    unknown_tools_on_call: Vec<String>,
    /// Delay before answering each tools/list page.
    list_delay_ms: u64,
    /// Delay before reading anything (a server slow to start, as a launcher fetching it is).
    start_delay_ms: u64,
    /// Write one line of this many bytes at start.
    oversized_line_bytes: usize,
    /// Append this process's pid to this file at start.
    pid_file: Option<String>,
    /// Keep running this long after stdin closes (to exercise SIGTERM in the shutdown sequence).
    linger_after_eof_ms: u64,
    /// Start a `sleep` child (a grandchild of toolhost) and append its pid to `pid_file`.
    spawn_grandchild: bool,
    /// "modern": speak 2026-07-28 only (server/discover, `_meta` on every request,
    /// subscriptions/listen); anything else: the legacy protocol.
    era: Option<String>,
    /// Modern: answer the first server/discover with -32022.
    discover_unsupported_once: bool,
    /// Modern: the `ttlMs` of listings.
    ttl_ms: Option<u64>,
    /// Modern: the `cacheScope` of listings (default "public").
    cache_scope: Option<String>,
    /// Add a tool named "deep" whose inputSchema nests this many arrays (sent as raw text:
    /// deeper than any JSON parser's default limit).
    deep_tool_depth: usize,
    /// Write this many lines that are not JSON-RPC right after initialized.
    garbage_lines: usize,
    /// Write this many responses with ids toolhost never issued right after initialized.
    foreign_responses: usize,
    /// Append "start ID" and "end ID" for every `sleep` call to this file.
    calls_file: Option<String>,
    /// Calls to these tools answer -32602 about an unknown argument field.
    invalid_params_on_call: Vec<String>,
    /// Write this process's environment (NAME=value lines) to this file at start.
    env_file: Option<String>,
    /// Append "launch N" to the file this environment variable names at start (`${data}/…`);
    /// exit, saying why on stderr, if it cannot.
    append_to_env_file: Option<String>,
    /// Write this file at start; exit, saying why on stderr, if it cannot.
    write_at_start: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Mutation {
    page: usize,
    tools: Vec<Value>,
}

struct Server {
    script: Script,
    out: Arc<Mutex<std::io::Stdout>>,
    /// Modern: the id of the open subscriptions/listen request, which tags list_changed.
    subscription: Arc<Mutex<Option<Value>>>,
    discover_refused: bool,
    tools: Vec<Value>,
    pages_served_in_first_listing: usize,
    mutated: bool,
    cursor_rejected: bool,
    announce_after_response: bool,
    /// A storm waits for the first tools/list answer (`storm_after_first_list`).
    storm_pending: bool,
    /// Modern `confirm`: every requestState issued.
    states: Vec<String>,
}

fn main() {
    let script: Script = match std::env::args().nth(1) {
        None => Script::default(),
        Some(path) => {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|err| fail(&format!("cannot read {path}: {err}")));
            serde_json::from_str(&text).unwrap_or_else(|err| fail(&format!("bad script {path}: {err}")))
        }
    };
    std::thread::sleep(Duration::from_millis(script.start_delay_ms));
    let launch = count_launch(script.state_dir.as_deref());
    if let Some(path) = &script.env_file {
        let lines: String = std::env::vars().map(|(name, value)| format!("{name}={value}\n")).collect();
        let _ = std::fs::write(path, lines);
    }
    if let Some(variable) = &script.append_to_env_file {
        let path = std::env::var(variable).unwrap_or_else(|_| fail(&format!("{variable} is not set")));
        let appended =
            std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut file| writeln!(file, "launch {launch}"));
        appended.unwrap_or_else(|err| fail(&format!("cannot append to {path}: {err}")));
    }
    if let Some(path) = &script.write_at_start {
        std::fs::write(path, "written at start\n").unwrap_or_else(|err| fail(&format!("cannot write {path}: {err}")));
    }
    if let Some(path) = &script.pid_file {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|err| fail(&format!("cannot open {path}: {err}")));
        // In a sandbox the pid is the PID namespace's: the line names the namespace and the
        // process's start time too (namespace numbers are reused), so that a test can find the
        // process as the host numbers it.
        let namespace = std::fs::read_link("/proc/self/ns/pid").map(|link| link.display().to_string()).unwrap_or_default();
        let _ = writeln!(file, "{namespace} {} {}", std::process::id(), start_time(std::process::id()));
        if script.spawn_grandchild {
            let grandchild = std::process::Command::new("sleep")
                .arg("600")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn();
            if let Ok(grandchild) = grandchild {
                let _ = writeln!(file, "{namespace} {} {}", grandchild.id(), start_time(grandchild.id()));
            }
        }
    }
    let out = Arc::new(Mutex::new(std::io::stdout()));
    for i in 0..script.stderr_lines {
        eprintln!("scripted-mcp-server chatter line {i}");
    }
    if script.oversized_line_bytes > 0 {
        write_line(&out, &"x".repeat(script.oversized_line_bytes));
    }
    let tools = script.tools.clone().unwrap_or_else(demo_tools);
    let mut server = Server {
        script,
        out,
        subscription: Arc::default(),
        discover_refused: false,
        tools,
        pages_served_in_first_listing: 0,
        mutated: false,
        cursor_rejected: false,
        announce_after_response: false,
        storm_pending: false,
        states: Vec::new(),
    };
    if let (true, Some(path)) = (server.script.watch_tools_file, server.script.tools_file.clone()) {
        let out = server.out.clone();
        let subscription = server.modern().then(|| server.subscription.clone());
        // What the file holds now is read here, before the first request is read: a thread
        // not yet scheduled when a test changes the file would take the new content for the
        // old and never announce it.
        let first = file_state(&path);
        std::thread::spawn(move || watch_file(&path, first, &out, subscription.as_deref()));
    }
    let stdin = std::io::stdin();
    let mut log = server.script.log_file.as_ref().map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|err| fail(&format!("cannot open log {path}: {err}")))
    });
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if let Some(log) = log.as_mut() {
            let _ = writeln!(log, "{line}");
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
        server.handle(&message, launch);
    }
    std::thread::sleep(Duration::from_millis(server.script.linger_after_eof_ms));
}

impl Server {
    fn modern(&self) -> bool {
        self.script.era.as_deref() == Some("modern")
    }

    fn handle(&mut self, message: &Value, launch: u64) {
        let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
        let id = message.get("id").cloned();
        if self.modern() {
            return self.handle_modern(message, method, id);
        }
        if method == "notifications/initialized" {
            self.after_initialized(launch);
            return;
        }
        let Some(id) = id else { return };
        if method.is_empty() || self.script.hang_methods.iter().any(|m| m == method) {
            return;
        }
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let reply = match method {
            "initialize" => Ok(self.initialize_result(&params)),
            "ping" => Ok(json!({})),
            "tools/list" if self.script.deep_tool_depth > 0 => {
                let result = self.list(&params).map(|result| result.to_string());
                return match result {
                    Ok(text) => write_line(
                        &self.out,
                        &format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{}}}"#, with_deep_tool(&text, self.script.deep_tool_depth)),
                    ),
                    Err(error) => self.respond(id, Err(error)),
                };
            }
            "tools/list" => self.list(&params),
            "tools/call" => return self.call(id, &params),
            _ => Err((-32601, format!("method not found: {method}"))),
        };
        self.respond(id, reply);
        if std::mem::take(&mut self.announce_after_response) {
            write_line(&self.out, LIST_CHANGED);
        }
        if method == "tools/list" && std::mem::take(&mut self.storm_pending) {
            self.start_storm();
        }
    }

    fn handle_modern(&mut self, message: &Value, method: &str, id: Option<Value>) {
        if method == "notifications/cancelled" {
            let mut subscription = self.subscription.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if subscription.as_ref() == message["params"].get("requestId") {
                *subscription = None;
            }
            return;
        }
        let Some(id) = id else { return };
        if self.script.hang_methods.iter().any(|m| m == method) {
            return;
        }
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let meta = &params["_meta"];
        let has_meta = meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
            && meta["io.modelcontextprotocol/clientCapabilities"].is_object();
        if method != "initialize" && !has_meta {
            return self.respond(id, Err((-32602, "missing or unsupported _meta protocolVersion / clientCapabilities".to_owned())));
        }
        let complete = |mut result: Value| {
            result["resultType"] = json!("complete");
            result
        };
        let refuse_version = |id: &Value| {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32022, "message": "Unsupported protocol version", "data": {"supported": ["2026-07-28"]}}}).to_string()
        };
        let reply = match method {
            "initialize" => return write_line(&self.out, &refuse_version(&id)),
            "server/discover" if self.script.discover_unsupported_once && !self.discover_refused => {
                self.discover_refused = true;
                return write_line(&self.out, &refuse_version(&id));
            }
            "server/discover" => Ok(complete(json!({
                "supportedVersions": ["2026-07-28"],
                "capabilities": self.script.capabilities.clone().unwrap_or_else(|| json!({"tools": {"listChanged": true}})),
                "ttlMs": 0, "cacheScope": "public",
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted-modern", "version": "1"}},
            }))),
            "subscriptions/listen" => {
                *self.subscription.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(id.clone());
                let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id}, "notifications": {"toolsListChanged": true}}});
                return write_line(&self.out, &ack.to_string());
            }
            "tools/list" => self.list(&params).map(|mut result| {
                result["ttlMs"] = json!(self.script.ttl_ms.unwrap_or(60_000));
                result["cacheScope"] = json!(self.script.cache_scope.as_deref().unwrap_or("public"));
                complete(result)
            }),
            "tools/call" if params["name"] == "confirm" => Ok(self.confirm(&params)),
            "tools/call" => {
                let arguments = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
                Ok(complete(json!({"content": [{"type": "text", "text": arguments.to_string()}]})))
            }
            _ => Err((-32601, format!("method not found: {method}"))),
        };
        self.respond(id, reply);
    }

    /// Modern `confirm`: a multi-round-trip call. Without answers it asks for a confirmation
    /// (an `elicitation/create` input request) with a fresh `requestState`; with answers and a
    /// state it issued, it finishes and reports what it got and which client capabilities the
    /// first round declared.
    fn confirm(&mut self, params: &Value) -> Value {
        let Some(responses) = params.get("inputResponses") else {
            let state = format!("state-{}-{}", self.states.len(), params["_meta"]["io.modelcontextprotocol/clientCapabilities"]);
            self.states.push(state.clone());
            let ask = json!({"method": "elicitation/create", "params": {"message": "Proceed?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}});
            return json!({"resultType": "input_required", "inputRequests": {"confirm": ask}, "requestState": state});
        };
        let state = params.get("requestState").and_then(Value::as_str).unwrap_or_default();
        let text = match self.states.iter().position(|issued| issued == state) {
            Some(round) => {
                format!("confirmed round {round}: {} with {}", responses["confirm"], state.splitn(3, '-').nth(2).unwrap_or_default())
            }
            None => format!("unknown requestState {state:?}"),
        };
        json!({"resultType": "complete", "content": [{"type": "text", "text": text}], "isError": !text.starts_with("confirmed")})
    }

    fn initialize_result(&self, params: &Value) -> Value {
        let requested = params.get("protocolVersion").and_then(Value::as_str).unwrap_or("2025-11-25");
        let known = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
        let version = self
            .script
            .protocol_version
            .clone()
            .unwrap_or_else(|| if known.contains(&requested) { requested.to_owned() } else { "2025-11-25".to_owned() });
        json!({
            "protocolVersion": version,
            "capabilities": self.script.capabilities.clone().unwrap_or_else(|| json!({"tools": {"listChanged": true}})),
            "serverInfo": self.script.server_info.clone().unwrap_or_else(|| json!({"name": "scripted-mcp-server", "version": "1.0.0"})),
        })
    }

    fn after_initialized(&mut self, launch: u64) {
        if self.script.crash_on_launch.contains(&launch) {
            std::process::exit(3);
        }
        for i in 0..self.script.garbage_lines {
            write_line(&self.out, &format!("garbage line {i}: this is not JSON-RPC"));
        }
        for i in 0..self.script.foreign_responses {
            write_line(&self.out, &json!({"jsonrpc": "2.0", "id": 1_000_000 + i, "result": {}}).to_string());
        }
        for (i, method) in self.script.server_requests.iter().enumerate() {
            write_line(&self.out, &json!({"jsonrpc": "2.0", "id": format!("srv-{i}"), "method": method, "params": {}}).to_string());
        }
        if self.script.list_changed_storm > 0 {
            match self.script.storm_after_first_list {
                true => self.storm_pending = true,
                false => self.start_storm(),
            }
        }
    }

    /// `list_changed_storm` notifications, 0.5 ms apart, on a thread of their own; then the time
    /// is written to `storm_done_file`.
    fn start_storm(&self) {
        let out = self.out.clone();
        let count = self.script.list_changed_storm;
        let done_file = self.script.storm_done_file.clone();
        std::thread::spawn(move || {
            for _ in 0..count {
                write_line(&out, LIST_CHANGED);
                std::thread::sleep(Duration::from_micros(500));
            }
            if let Some(path) = done_file {
                let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis();
                let _ = std::fs::write(path, now.to_string());
            }
        });
    }

    fn list(&mut self, params: &Value) -> Result<Value, (i64, String)> {
        std::thread::sleep(Duration::from_millis(self.script.list_delay_ms));
        let prefix = self.script.cursor_prefix.clone().unwrap_or_else(|| "cursor-".to_owned());
        let offset = match params.get("cursor").and_then(Value::as_str) {
            None => {
                if let Some(tools) = self.script.tools_file.as_deref().and_then(read_tools) {
                    self.tools = tools;
                }
                0
            }
            Some(cursor) => {
                if self.script.reject_cursor_once && !self.cursor_rejected {
                    self.cursor_rejected = true;
                    return Err((-32602, "invalid cursor".to_owned()));
                }
                cursor.strip_prefix(&prefix).and_then(|n| n.parse::<usize>().ok()).ok_or((-32602, "invalid cursor".to_owned()))?
            }
        };
        let size = if self.script.page_size == 0 { self.tools.len().max(1) } else { self.script.page_size };
        let end = (offset + size).min(self.tools.len());
        let page: Vec<Value> = self.tools.get(offset..end).map(<[Value]>::to_vec).unwrap_or_default();
        let mut result = json!({ "tools": page });
        if end < self.tools.len() || self.script.repeat_cursor {
            let next = if self.script.repeat_cursor { format!("{prefix}0") } else { format!("{prefix}{end}") };
            result["nextCursor"] = json!(next);
        }
        self.pages_served_in_first_listing += 1;
        if let Some(mutation) = &self.script.mutate_after_page
            && !self.mutated
            && self.pages_served_in_first_listing == mutation.page
        {
            // Answer first, then change and announce it: the client holds page N of the old
            // set and a cursor into it, and the announcement precedes its next request.
            self.mutated = true;
            self.tools = mutation.tools.clone();
            self.announce_after_response = true;
        }
        Ok(result)
    }

    fn call(&mut self, id: Value, params: &Value) {
        let name = params.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let arguments = params.get("arguments").cloned().unwrap_or_else(|| json!({}));
        let listed = self.tools.iter().any(|tool| tool.get("name").and_then(Value::as_str) == Some(name.as_str()));
        if !listed || self.script.unknown_tools_on_call.contains(&name) {
            return self.respond(id, Err((-32602, format!("Unknown tool: {name}"))));
        }
        if self.script.invalid_params_on_call.contains(&name) {
            return self.respond(id, Err((-32602, "Invalid params: unknown field `extra`, expected `text`".to_owned())));
        }
        match name.as_str() {
            "crash" => std::process::exit(3),
            "sleep" => self.sleep(id, params, &arguments),
            "fail" => self.respond(id, Ok(json!({"content": [{"type": "text", "text": "the tool failed, as asked"}], "isError": true}))),
            // Writes `content` to `path`; a refusal is a tool error in the OS's words, as a
            // filesystem server says it.
            "write_file" => {
                let path = arguments.get("path").and_then(Value::as_str).unwrap_or_default();
                let content = arguments.get("content").and_then(Value::as_str).unwrap_or_default();
                let result = match std::fs::write(path, content) {
                    Ok(()) => json!({"content": [{"type": "text", "text": format!("wrote {path}")}]}),
                    Err(err) => {
                        json!({"content": [{"type": "text", "text": format!("Error: cannot write {path}: {err}")}], "isError": true})
                    }
                };
                self.respond(id, Ok(result));
            }
            // Fails with whatever it is told to say (a hostile server's words): a tool error, or
            // with `rpc` a JSON-RPC error.
            "say_error" => {
                let text = arguments.get("text").and_then(Value::as_str).unwrap_or_default().to_owned();
                match arguments.get("rpc").and_then(Value::as_bool).unwrap_or(false) {
                    true => self.respond(id, Err((-32603, text))),
                    false => self.respond(id, Ok(json!({"content": [{"type": "text", "text": text}], "isError": true}))),
                }
            }
            // The conformance suite's tasks fixtures (a sync tool, a slow one, a tool error and a
            // protocol error, the last three after a while).
            "greet" => {
                let name = arguments.get("name").and_then(Value::as_str).unwrap_or("there");
                self.respond(id, Ok(json!({"content": [{"type": "text", "text": format!("Hello, {name}!")}]})));
            }
            "slow_compute" | "failing_job" | "protocol_error_job" => self.job(id, &name, &arguments),
            "test_tool_with_progress" => {
                if let Some(token) = params.pointer("/_meta/progressToken") {
                    for progress in [0, 50, 100] {
                        let params = json!({"progressToken": token, "progress": progress, "total": 100});
                        write_line(&self.out, &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}).to_string());
                    }
                }
                self.respond(id, Ok(json!({"content": [{"type": "text", "text": "progress done"}]})));
            }
            name if name.starts_with("test_") => self.respond(id, Ok(conformance_result(name))),
            "add" => {
                let sum =
                    arguments.get("a").and_then(Value::as_f64).unwrap_or(0.0) + arguments.get("b").and_then(Value::as_f64).unwrap_or(0.0);
                self.respond(id, Ok(json!({"content": [{"type": "text", "text": sum.to_string()}], "structuredContent": {"sum": sum}})));
            }
            _ => {
                let text = arguments.to_string();
                self.respond(id, Ok(json!({"content": [{"type": "text", "text": text}], "structuredContent": arguments})));
            }
        }
    }

    /// `sleep`: answers after `ms` (or once the pipe `until` opens), from a thread, so that
    /// other calls are answered meanwhile; with a progress token, one progress notification
    /// halfway through.
    fn sleep(&self, id: Value, params: &Value, arguments: &Value) {
        let millis = arguments.get("ms").and_then(Value::as_u64).unwrap_or(1000);
        let out = self.out.clone();
        let calls_file = self.script.calls_file.clone();
        // With a progress token, one progress notification halfway through.
        let progress_token = params.pointer("/_meta/progressToken").cloned();
        let until = arguments.get("until").and_then(Value::as_str).map(str::to_owned);
        append(calls_file.as_deref(), &format!("start {id}"));
        // When to tell the progress, and what (a test may make it hostile).
        let halfway = arguments.get("progress_after_ms").and_then(Value::as_u64).unwrap_or(millis / 2).min(millis);
        let message = arguments.get("message").and_then(Value::as_str).unwrap_or("halfway").to_owned();
        std::thread::spawn(move || {
            if let Some(until) = &until {
                // Until the test says so: opening a named pipe for reading blocks until
                // its writer opens it (the test's event), no clock involved.
                let _ = std::fs::File::open(until);
            } else if let Some(token) = progress_token {
                std::thread::sleep(Duration::from_millis(halfway));
                let params = json!({"progressToken": token, "progress": 1, "total": 2, "message": message});
                write_line(&out, &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}).to_string());
                std::thread::sleep(Duration::from_millis(millis - halfway));
            } else {
                std::thread::sleep(Duration::from_millis(millis));
            }
            append(calls_file.as_deref(), &format!("end {id}"));
            let result = json!({"content": [{"type": "text", "text": format!("slept {millis} ms")}]});
            write_line(&out, &json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string());
        });
    }

    /// The conformance suite's slow jobs: answered from a thread after a while.
    fn job(&self, id: Value, name: &str, arguments: &Value) {
        let millis = match name {
            "slow_compute" => arguments.get("seconds").and_then(Value::as_f64).map_or(1000, |s| (s.max(0.0) * 1000.0) as u64),
            _ => 1000,
        };
        let (out, name) = (self.out.clone(), name.to_owned());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(millis));
            let line = match name.as_str() {
                "slow_compute" => {
                    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": format!("computed in {millis} ms")}]}})
                }
                "failing_job" => {
                    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "the job failed"}], "isError": true}})
                }
                _ => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "the job broke"}}),
            };
            write_line(&out, &line.to_string());
        });
    }

    fn respond(&self, id: Value, reply: Result<Value, (i64, String)>) {
        if self.script.garbage_before_response {
            write_line(&self.out, "this is not JSON-RPC");
        }
        let message = match reply {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}),
        };
        write_line(&self.out, &message.to_string());
    }
}

const LIST_CHANGED: &str = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;

fn write_line(out: &Mutex<std::io::Stdout>, line: &str) {
    let mut out = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A watched file's modification time and content.
fn file_state(path: &str) -> (SystemTime, Vec<u8>) {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH);
    (modified, std::fs::read(path).unwrap_or_default())
}

fn watch_file(path: &str, first: (SystemTime, Vec<u8>), out: &Mutex<std::io::Stdout>, subscription: Option<&Mutex<Option<Value>>>) {
    let mut last = first;
    loop {
        std::thread::sleep(Duration::from_millis(10));
        let now = file_state(path);
        if now != last {
            last = now;
            match subscription {
                // Modern servers announce changes only on an open subscription, tagged with its id.
                Some(subscription) => {
                    let id = subscription.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                    if let Some(id) = id {
                        let tagged = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id}}});
                        write_line(out, &tagged.to_string());
                    }
                }
                None => write_line(out, LIST_CHANGED),
            }
        }
    }
}

/// The `tools/list` result `text` with a tool nested `depth` levels deep added first.
fn with_deep_tool(text: &str, depth: usize) -> String {
    let deep = format!(r#"{{"name":"deep","inputSchema":{}{}}}"#, "[".repeat(depth), "]".repeat(depth));
    match text.find(r#""tools":["#) {
        Some(at) => {
            let insert_at = at + r#""tools":["#.len();
            let separator = if text[insert_at..].starts_with(']') { "" } else { "," };
            format!("{}{deep}{separator}{}", &text[..insert_at], &text[insert_at..])
        }
        None => text.to_owned(),
    }
}

fn append(path: Option<&str>, line: &str) {
    if let Some(path) = path
        && let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        // One write of the whole line: appends from several threads never interleave.
        let _ = file.write_all(format!("{line}\n").as_bytes());
    }
}

/// The tools in `path`, or `None` while it holds no JSON array: a file caught half-written (a
/// test rewriting it) keeps the tools it had, never reads as "no tools".
fn read_tools(path: &str) -> Option<Vec<Value>> {
    std::fs::read_to_string(path).ok().and_then(|text| serde_json::from_str(&text).ok())
}

fn count_launch(state_dir: Option<&str>) -> u64 {
    let Some(dir) = state_dir else { return 1 };
    let path = std::path::Path::new(dir).join("launches");
    let launches = std::fs::read_to_string(&path).ok().and_then(|text| text.trim().parse::<u64>().ok()).unwrap_or(0) + 1;
    let _ = std::fs::write(&path, launches.to_string());
    launches
}

/// What the official conformance suite's server scenarios expect of their tools.
fn conformance_result(name: &str) -> Value {
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
    const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";
    let text = json!({"type": "text", "text": "This is a simple text response for testing."});
    let image = json!({"type": "image", "data": PNG, "mimeType": "image/png"});
    let resource = json!({"type": "resource", "resource": {"uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}});
    match name {
        "test_image_content" => json!({"content": [image]}),
        "test_audio_content" => json!({"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]}),
        "test_embedded_resource" => json!({"content": [resource]}),
        "test_multiple_content_types" => json!({"content": [text, image, resource]}),
        "test_error_handling" => {
            json!({"content": [{"type": "text", "text": "This tool intentionally returns an error for testing"}], "isError": true})
        }
        _ => json!({"content": [text]}),
    }
}

fn demo_tools() -> Vec<Value> {
    let object = |properties: Value, required: Value| json!({"type": "object", "properties": properties, "required": required});
    vec![
        json!({"name": "echo", "title": "Echo", "description": "Returns its arguments.", "inputSchema": object(json!({"text": {"type": "string"}}), json!(["text"]))}),
        json!({"name": "add", "title": "Add", "description": "Adds two numbers.", "inputSchema": object(json!({"a": {"type": "number"}, "b": {"type": "number"}}), json!(["a", "b"])),
               "outputSchema": object(json!({"sum": {"type": "number"}}), json!(["sum"])), "annotations": {"readOnlyHint": true}}),
        json!({"name": "sleep", "description": "Waits `ms` milliseconds, then answers.", "inputSchema": object(json!({"ms": {"type": "integer"}}), json!([]))}),
        json!({"name": "fail", "description": "Always reports a tool error (isError).", "inputSchema": object(json!({}), json!([]))}),
    ]
}

fn fail(message: &str) -> ! {
    eprintln!("scripted-mcp-server: {message}");
    std::process::exit(2);
}

/// A process's start time (clock ticks since boot, the same in every PID namespace), field 22
/// of `/proc/PID/stat`.
fn start_time(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rfind(')').and_then(|end| stat[end + 2..].split(' ').nth(19)).unwrap_or("0").to_owned()
}
