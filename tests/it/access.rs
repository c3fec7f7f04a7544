//! Who may call what, for real: CLI processes running as other users on the Unix socket, TCP
//! callers with and without tokens, one policy for listing and calling, and the audit trail.

use std::process::{Command, Output};

use serde_json::{Value, json};
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The CLI against `addr` with `args`, presenting `token` (`TOOLHOST_TOKEN`) or none at all.
fn cli_with_token(args: &[&str], addr: &str, token: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    command.args(args).args(["--addr", addr]).env_remove("TOOLHOST_TOKEN");
    if let Some(token) = token {
        command.env("TOOLHOST_TOKEN", token);
    }
    command.output().unwrap()
}

fn listed(output: &Output) -> Vec<String> {
    let tools: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| panic!("not JSON: {}", stderr(output)));
    let mut names: Vec<String> = tools.as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect();
    names.sort();
    names
}

const POLICY: &str = r#"
[access]
default = "deny"

[[access.agents]]
name = "reader"
uids = [4301]
allow = ["demo__echo", "demo__add"]

[[access.agents]]
name = "sleeper"
uids = [4302]
allow = ["demo__*"]
deny = ["demo__add", "demo__fail"]

[[access.agents]]
name = "operator"
uids = [0]
allow = ["*"]
admin = true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_local_user_sees_and_calls_exactly_what_its_entry_allows_and_the_audit_shows_it() {
    if !requires_root("to switch users") {
        return;
    }
    let dir = TestDir::new();
    open_to_all(&dir.path(""));
    let script = dir.script("demo", json!({}));
    let config_path = dir.path("toolhost.toml");
    std::fs::write(
        &config_path,
        format!(
            "[store]\npath = \"catalog.db\"\n[grpc]\nlisten = [{{ address = \"unix:toolhost.sock\", mode = \"0666\" }}]\n{POLICY}\n{}",
            server_table("demo", &script, "audit_arguments = \"hash\"")
        ),
    )
    .unwrap();
    let app = start(toolhost::config::Config::load(&config_path).unwrap()).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let socket = dir.path("toolhost.sock");

    let reader = cli_as(4301, None, &socket, &["tools", "--json"]).await;
    assert_eq!(listed(&reader), ["demo__add", "demo__echo"], "{}", stderr(&reader));
    let sleeper = cli_as(4302, None, &socket, &["tools", "--json"]).await;
    assert_eq!(listed(&sleeper), ["demo__echo", "demo__sleep"], "{}", stderr(&sleeper));

    let allowed = cli_as(4301, None, &socket, &["call", "demo__echo", "--args", r#"{"text":"hi"}"#]).await;
    assert!(allowed.status.success(), "{}", stderr(&allowed));
    // A tool the agent may not use answers exactly like one that does not exist.
    let refused = cli_as(4301, None, &socket, &["call", "demo__sleep", "--args", r#"{"ms":1}"#]).await;
    let missing = cli_as(4301, None, &socket, &["call", "demo__nope"]).await;
    assert_eq!(refused.status.code(), Some(3));
    // The error is the same; a "did you mean" offers only tools this agent may use.
    let error_line = |output: &Output| stderr(output).lines().next().unwrap_or_default().to_owned();
    assert_eq!(error_line(&refused).replace("sleep", "X"), error_line(&missing).replace("nope", "X"), "no existence oracle");
    assert!(!stderr(&refused).contains("demo__fail") && !stderr(&missing).contains("demo__sleep"), "{}", stderr(&missing));
    assert!(stderr(&refused).contains("NOT_FOUND (UNKNOWN_TOOL)"), "{}", stderr(&refused));
    let by_server = cli_as(4302, None, &socket, &["call", "demo/add", "--args", r#"{"a":1,"b":2}"#]).await;
    assert!(stderr(&by_server).contains("UNKNOWN_TOOL"), "{}", stderr(&by_server));

    let stranger = cli_as(4303, None, &socket, &["servers"]).await;
    assert!(stderr(&stranger).contains("PERMISSION_DENIED (NO_MATCHING_AGENT)"), "{}", stderr(&stranger));
    let not_admin = cli_as(4301, None, &socket, &["refresh", "demo"]).await;
    assert!(stderr(&not_admin).contains("PERMISSION_DENIED (ADMIN_REQUIRED)"), "{}", stderr(&not_admin));
    let not_admin = cli_as(4301, None, &socket, &["reload"]).await;
    assert!(stderr(&not_admin).contains("PERMISSION_DENIED (ADMIN_REQUIRED)"), "an agent cannot reload: {}", stderr(&not_admin));
    let whoami = cli_as(4302, None, &socket, &["whoami", "--json"]).await;
    let whoami: Value = serde_json::from_slice(&whoami.stdout).unwrap();
    assert_eq!(
        (whoami["agent"].as_str(), whoami["uid"].as_u64(), whoami["visible_tools"].as_u64()),
        (Some("sleeper"), Some(4302), Some(2))
    );

    // The operator (root, this test) sees the audit of both agents, denied calls included.
    let records = wait_for_audit(&app, 4).await;
    let line = |agent: &str, name: &str| records.iter().find(|r| r.agent == agent && r.qualified_name == name).cloned();
    let ok = line("reader", "demo__echo").expect("the allowed call is audited");
    assert_eq!((ok.outcome.as_str(), ok.generation, ok.transport.as_str()), ("ok", 1, "unix"));
    assert!(ok.caller.contains("uid 4301") && ok.arguments.starts_with("sha256:"), "{ok:?}");
    assert_eq!(line("reader", "demo__sleep").expect("the refused call is audited").outcome, "denied");
    assert_eq!(line("sleeper", "demo__add").expect("by server/name too").outcome, "denied");
    app.shutdown().await;
}

/// The audit records once at least `count` are stored (the writer batches off the call path).
async fn wait_for_audit(app: &toolhost::app::App, count: usize) -> Vec<pb::AuditRecord> {
    let mut client = client(app).await;
    eventually(&format!("{count} audit records"), async || {
        let records = client.query_audit(pb::QueryAuditRequest { limit: 100, ..Default::default() }).await.unwrap().into_inner().records;
        if records.len() >= count { Ok(records) } else { Err(format!("{records:#?}")) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_callers_need_the_right_token() {
    let dir = TestDir::new();
    let token = "tcp-token-0123456789abcdef";
    std::fs::write(dir.path("agent.token"), token).unwrap();
    let script = dir.script("demo", json!({}));
    let policy = format!(
        "[access]\n[[access.agents]]\nname = \"remote\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"demo__echo\"]\n",
        dir.path("agent.token").display()
    );
    let app = start(dir.config(&format!("{policy}\n{}", server_table("demo", &script, "")))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let addr = tcp_addr(&app).to_string();
    let cli = |token: Option<&str>| cli_with_token(&["tools", "--json"], &addr, token);
    let anonymous = cli(None);
    assert!(stderr(&anonymous).contains("UNAUTHENTICATED: "), "{}", stderr(&anonymous));
    let wrong = cli(Some("tcp-token-not-the-right-one"));
    assert!(stderr(&wrong).contains("UNAUTHENTICATED"), "{}", stderr(&wrong));
    assert!(!stderr(&wrong).contains("not-the-right-one"), "a token is never echoed");
    let right = cli(Some(token));
    assert_eq!(listed(&right), ["demo__echo"], "{}", stderr(&right));
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_a_new_policy_to_open_watch_streams() {
    let dir = TestDir::new();
    let script = dir.script("demo", json!({}));
    let mut app = start(dir.config(&server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let mut stream = client.watch_catalog(pb::WatchCatalogRequest { from_revision: 0, servers: vec![] }).await.unwrap().into_inner();
    // The new configuration removes the server (a catalog change every watcher hears of) and
    // brings a policy with no entry for this user.
    let mut config = toolhost::config::Config::load(&dir.path("toolhost.toml")).unwrap();
    config.servers.clear();
    config.access = toolhost::config::AccessConfig {
        configured: true,
        default_allow: false,
        agents: vec![],
        audit_retention: std::time::Duration::from_secs(3600),
        audit_max_records: 100,
        approve_everyone: vec![],
    };
    app.reload(config).await.unwrap();
    let ended = tokio::time::timeout(WAIT, stream.message()).await.expect("the stream answers at once");
    let status = ended.expect_err("the open stream is judged by the new policy");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    let refused = client.list_servers(pb::ListServersRequest::default()).await.expect_err("and so are new requests");
    assert_eq!(error_info(&refused).0, "NO_MATCHING_AGENT");
    app.shutdown().await;
}

/// A CA, a server certificate for 127.0.0.1, and a client certificate the CA signed, as PEM files.
struct Pki {
    server_cert: std::path::PathBuf,
    server_key: std::path::PathBuf,
    client_ca: std::path::PathBuf,
    server_ca_pem: String,
    client_chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    client_key: rustls::pki_types::PrivateKeyDer<'static>,
}

fn pki(dir: &TestDir) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let server = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "toolhost test agents CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params.distinguished_name.push(DnType::CommonName, "research-bot");
    client_params.distinguished_name.push(DnType::OrganizationName, "Example");
    let client_cert = client_params.signed_by(&client_key, &ca).unwrap();
    let write = |name: &str, text: String| {
        let path = dir.path(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    Pki {
        server_cert: write("server.pem", server.cert.pem()),
        server_key: write("server.key", server.signing_key.serialize_pem()),
        client_ca: write("agents-ca.pem", ca.pem()),
        server_ca_pem: server.cert.pem(),
        client_chain: vec![client_cert.der().clone()],
        client_key: rustls::pki_types::PrivateKeyDer::try_from(client_key.serialize_der()).unwrap(),
    }
}

/// A gRPC client over TLS to `addr`, trusting `server_ca_pem`, with a client certificate if given.
async fn tls_client(
    addr: std::net::SocketAddr,
    server_ca_pem: &str,
    identity: Option<(Vec<rustls::pki_types::CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>)>,
) -> pb::tool_host_client::ToolHostClient<tonic::transport::Channel> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from_pem_slice(server_ca_pem.as_bytes()).unwrap()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
                connector.connect(name, tcp).await.map(hyper_util::rt::TokioIo::new)
            }
        }))
        .await
        .unwrap();
    pb::tool_host_client::ToolHostClient::new(channel)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_client_certificate_is_the_callers_identity() {
    let dir = TestDir::new();
    let pki = pki(&dir);
    let script = dir.script("demo", json!({}));
    let config_path = dir.path("toolhost.toml");
    std::fs::write(
        &config_path,
        format!(
            "[store]\npath = \"catalog.db\"\n[grpc]\nlisten = [\"unix:toolhost.sock\", {{ address = \"127.0.0.1:0\", tls = {{ cert = {:?}, key = {:?}, client_ca = {:?} }} }}]\n\
             [access]\n[[access.agents]]\nname = \"research\"\nsubjects = [\"O=Example,CN=research-bot\"]\nallow = [\"demo__echo\"]\n\
             [[access.agents]]\nname = \"operator\"\nusers = [\"root\"]\nallow = [\"*\"]\nadmin = true\n{}",
            pki.server_cert,
            pki.server_key,
            pki.client_ca,
            server_table("demo", &script, "")
        ),
    )
    .unwrap();
    let app = start(toolhost::config::Config::load(&config_path).unwrap()).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let addr = tcp_addr(&app);

    let mut with_cert = tls_client(addr, &pki.server_ca_pem, Some((pki.client_chain.clone(), pki.client_key.clone_key()))).await;
    let who = with_cert.who_am_i(pb::WhoAmIRequest {}).await.unwrap().into_inner();
    assert_eq!((who.agent.as_str(), who.transport.as_str()), ("research", "tls"));
    assert_eq!(who.certificate_subject, "O=Example,CN=research-bot", "the subject in RFC 4514 form");
    let tools = with_cert.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner().tools;
    assert_eq!(tools.iter().map(|t| t.qualified_name.as_str()).collect::<Vec<_>>(), ["demo__echo"]);

    let mut without_cert = tls_client(addr, &pki.server_ca_pem, None).await;
    let refused = without_cert.list_tools(pb::ListToolsRequest::default()).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    app.shutdown().await;
}

#[test]
fn off_loopback_the_api_needs_tls() {
    let dir = TestDir::new();
    let pki = pki(&dir);
    let path = dir.path("open.toml");
    std::fs::write(&path, "[grpc]\nlisten = [\"0.0.0.0:50999\"]\n").unwrap();
    let refused = toolhost::config::Config::load(&path).unwrap_err().to_string();
    assert!(refused.contains("grpc.listen[0]") && refused.contains("needs tls"), "{refused}");
    std::fs::write(
        &path,
        format!(
            "[grpc]\nlisten = [{{ address = \"0.0.0.0:50999\", tls = {{ cert = {:?}, key = {:?} }} }}]\n",
            pki.server_cert, pki.server_key
        ),
    )
    .unwrap();
    assert!(toolhost::config::Config::load(&path).is_ok(), "with TLS it is accepted");
}

/// A daemon that runs as an unprivileged user and cannot see other users' processes (`/proc`
/// mounted `hidepid=invisible`, as systemd's `ProtectProc=invisible` does) still admits an agent
/// through its supplementary group: the user database says what `/proc` does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_admitted_by_its_group_gets_in_where_proc_hides_it() {
    if !requires_root("for a mount namespace") {
        return;
    }
    let dir = TestDir::new();
    std::fs::set_permissions(dir.path(""), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // The daemon's user (4400) and an agent (4401) in group `agents` (4500), in a user database
    // that only the daemon's mount namespace sees.
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap()
        + "toolhost-daemon:x:4400:4400::/nonexistent:/usr/sbin/nologin\ntoolhost-agent:x:4401:4401::/nonexistent:/usr/sbin/nologin\n";
    let group =
        std::fs::read_to_string("/etc/group").unwrap() + "toolhost-daemon:x:4400:\ntoolhost-agent:x:4401:\nagents:x:4500:toolhost-agent\n";
    std::fs::write(dir.path("passwd"), passwd).unwrap();
    std::fs::write(dir.path("group"), group).unwrap();
    let script = dir.script("demo", json!({}));
    std::fs::write(
        dir.path("toolhost.toml"),
        format!(
            "[store]\npath = \"catalog.db\"\n[grpc]\nlisten = [{{ address = \"unix:toolhost.sock\", mode = \"0666\" }}]\n\
             [access]\ndefault = \"deny\"\n[[access.agents]]\nname = \"by-group\"\ngids = [4500]\nallow = [\"*\"]\n{}",
            server_table("demo", &script, "")
        ),
    )
    .unwrap();
    let shell = format!(
        "mount -t proc -o hidepid=invisible proc /proc && mount --bind {passwd} /etc/passwd && mount --bind {group} /etc/group \
         && exec setpriv --reuid 4400 --regid 4400 --clear-groups {toolhost} serve --config {config}",
        passwd = dir.path("passwd").display(),
        group = dir.path("group").display(),
        toolhost = env!("CARGO_BIN_EXE_toolhost"),
        config = dir.path("toolhost.toml").display(),
    );
    let log = std::fs::File::create(dir.path("daemon.log")).unwrap();
    let mut daemon = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c", &shell])
        .stderr(log)
        .spawn()
        .expect("unshare runs");
    let socket = dir.path("toolhost.sock");
    // Once the daemon listens, the agent's first answer is the verdict.
    let whoami = eventually("the daemon answers", async || {
        let output = cli_as_blocking(4401, Some("4500"), &socket, &["whoami", "--json"]);
        (output.status.success() || stderr(&output).contains("NO_MATCHING_AGENT")).then_some(output)
    })
    .await;
    let _ = daemon.kill();
    let _ = daemon.wait();
    let log = std::fs::read_to_string(dir.path("daemon.log")).unwrap_or_default();
    assert!(whoami.status.success(), "{}\ndaemon log:\n{log}", stderr(&whoami));
    let who: Value = serde_json::from_slice(&whoami.stdout).unwrap();
    assert_eq!(who["agent"], "by-group", "{who}");
    assert_eq!(who["uid"], 4401);
}

/// One rule on every door: this process's uid names the operator's entry, listed first; a token
/// it presents still decides (over the gRPC Unix socket, gRPC over TCP, and MCP over HTTP), and a
/// token nobody's entry lists admits nobody rather than falling back to the uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_presented_decides_on_every_door_before_the_kernels_word() {
    let dir = TestDir::new();
    let token = "viewer-token-0123456789abcdef";
    std::fs::write(dir.path("viewer.token"), token).unwrap();
    let script = dir.script("demo", json!({}));
    let policy = format!(
        "[access]\ndefault = \"deny\"\n[[access.agents]]\nname = \"operator\"\nuids = [{}]\nallow = [\"*\"]\nadmin = true\n\
         [[access.agents]]\nname = \"viewer\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"demo__echo\"]\n",
        nix::unistd::getuid(),
        dir.path("viewer.token").display()
    );
    let app =
        start(dir.config_with(&format!("{}\n{policy}", crate::mcp_endpoint::mcp_section("")), &server_table("demo", &script, ""))).await;
    wait_for_server(app.registry(), "demo", "ready", |v| v.state() == ServerState::Ready).await;
    let unix = format!("unix:{}", dir.path("toolhost.sock").display());
    let tcp = tcp_addr(&app).to_string();
    for addr in [&unix, &tcp] {
        let whoami = |token: Option<&str>| cli_with_token(&["whoami", "--json"], addr, token);
        let viewer = whoami(Some(token));
        let said: Value = serde_json::from_slice(&viewer.stdout).unwrap_or_else(|_| panic!("{addr}: {}", stderr(&viewer)));
        assert_eq!(said["agent"], "viewer", "{addr}: {said}");
        let wrong = whoami(Some("nobodys-token-0123456789"));
        assert!(stderr(&wrong).contains("UNAUTHENTICATED"), "{addr}: a wrong token never falls back to the uid: {}", stderr(&wrong));
        if addr == &unix {
            let operator = whoami(None);
            let said: Value = serde_json::from_slice(&operator.stdout).unwrap();
            assert_eq!(said["agent"], "operator", "no token: the kernel's word");
        }
    }
    // MCP over HTTP from this process, the operator's uid, with the viewer's token.
    let mcp = crate::mcp_endpoint::mcp_http(&app);
    let bearer = format!("Bearer {token}");
    let headers = [crate::mcp_endpoint::JSON_HEADERS[0], crate::mcp_endpoint::JSON_HEADERS[1], ("Authorization", bearer.as_str())];
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let modern = [headers[0], headers[1], headers[2], ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")];
    let (status, _, body) = crate::mcp_endpoint::http(mcp, "POST", "/mcp", &modern, list).await;
    assert_eq!(status, 200, "{body}");
    let names: Vec<String> = serde_json::from_str::<Value>(&body).unwrap()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["demo__echo"], "the viewer's tools, not the operator's: {body}");
    app.shutdown().await;
}

/// Allow and deny name a tool by its qualified name or by its server's and its own
/// (`pay__refund.now`, whose served name is `pay__refund_now_…`), for listing and calling
/// alike, and a glob for one server never reaches another server's tool of the same name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_and_deny_name_escaped_tools_by_their_own_names_and_never_reach_another_server() {
    let dir = TestDir::new();
    let (clerk, sender) = ("clerk-token-0123456789abcdef", "sender-token-0123456789abcdef");
    std::fs::write(dir.path("clerk.token"), clerk).unwrap();
    std::fs::write(dir.path("sender.token"), sender).unwrap();
    let tool = |name: &str| json!({"name": name, "description": "Does it.", "inputSchema": {"type": "object"}});
    let tools_file = dir.path("tools.json");
    std::fs::write(&tools_file, json!([tool("refund.now"), tool("ns:send"), tool("list")]).to_string()).unwrap();
    let servers = ["pay", "payroll"].map(|name| server_table(name, &dir.script(name, json!({"tools_file": tools_file})), "")).join("\n");
    let policy = format!(
        "[access]\n\
         [[access.agents]]\nname = \"clerk\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"pay__*\", \"payroll__*\"]\ndeny = [\"pay__refund.now\"]\n\
         [[access.agents]]\nname = \"sender\"\ntokens = [\"${{file:{}}}\"]\nallow = [\"pay__ns:send\"]\n",
        dir.path("clerk.token").display(),
        dir.path("sender.token").display()
    );
    let app = start(dir.config(&format!("{policy}\n{servers}"))).await;
    for server in ["pay", "payroll"] {
        wait_for_server(app.registry(), server, "ready", |v| v.state() == ServerState::Ready).await;
    }
    let qualify = toolhost::catalog::names::qualify;
    let listed = async |token: &str| {
        let tools = agent_client(&app, token).await.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner().tools;
        let mut names: Vec<String> = tools.into_iter().map(|tool| tool.qualified_name).collect();
        names.sort();
        names
    };
    let call = |qualified: &str, server: &str, name: &str| pb::CallToolRequest {
        qualified_name: qualified.into(),
        server: server.into(),
        name: name.into(),
        arguments_json: "{}".into(),
        ..Default::default()
    };
    let refunds = |server: &str| {
        dir.received(server).into_iter().filter(|m| m["method"] == "tools/call" && m["params"]["name"] == "refund.now").count()
    };

    let mut expected = vec![
        "pay__list".to_owned(),
        qualify("pay", "ns:send"),
        "payroll__list".to_owned(),
        qualify("payroll", "ns:send"),
        qualify("payroll", "refund.now"),
    ];
    expected.sort();
    assert_eq!(listed(clerk).await, expected, "the deny hides pay's refund.now, and payroll's stays");
    for denied in [call(&qualify("pay", "refund.now"), "", ""), call("", "pay", "refund.now")] {
        let refused = agent_client(&app, clerk).await.call_tool(denied).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::NotFound, "denied answers as missing: {refused:?}");
    }
    assert_eq!(refunds("pay"), 0, "a denied tool never runs");
    agent_client(&app, clerk).await.call_tool(call("", "payroll", "refund.now")).await.unwrap();
    assert_eq!(refunds("payroll"), 1);

    assert_eq!(listed(sender).await, [qualify("pay", "ns:send")], "allowed by its own name, on its own server only");
    agent_client(&app, sender).await.call_tool(call(&qualify("pay", "ns:send"), "", "")).await.unwrap();
    let refused = agent_client(&app, sender).await.call_tool(call("pay__list", "", "")).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");
    app.shutdown().await;
}
