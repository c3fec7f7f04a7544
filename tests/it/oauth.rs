//! Remote servers behind OAuth, against a real authorization server (`fixtures/oauth_server.py`,
//! which also serves the MCP endpoint it protects) issuing 2-second tokens: `toolhost login`
//! through the loopback redirect, refreshes across many expiries with no failed call, a restart
//! that needs no new login, a revoked refresh token that turns into `auth_required` with the
//! tools still listed, and the client credentials grant.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use toolhost::api::pb;
use toolhost::registry::ServerState;

use crate::harness::*;

/// The fixture, killed when dropped.
struct AuthServer {
    child: Child,
    base: String,
}

impl AuthServer {
    fn start(args: &[&str]) -> AuthServer {
        AuthServer::start_in_mode(args, "")
    }

    fn start_in_mode(args: &[&str], mode: &str) -> AuthServer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/oauth_server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(args)
            .env("OAUTH_FIXTURE_MODE", mode)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the fixture");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        AuthServer { child, base: line.trim().to_owned() }
    }

    fn stats(&self) -> Value {
        serde_json::from_str(&http("GET", &format!("{}/admin/stats", self.base)).2).unwrap()
    }

    fn stat(&self, name: &str) -> u64 {
        self.stats()[name].as_u64().unwrap()
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 exchange over a plain socket: `(status, Location, body)`. The test is the browser.
fn http(method: &str, url: &str) -> (u16, Option<String>, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_once('/').map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let location = head.lines().find_map(|l| l.strip_prefix("Location: ").or_else(|| l.strip_prefix("location: "))).map(str::to_owned);
    (status, location, body.to_owned())
}

/// `toolhost logout remote`: everything it printed.
fn logout(dir: &TestDir, app_addr: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["logout", "remote", "--config"])
        .arg(dir.path("toolhost.toml"))
        .args(["--addr", app_addr])
        .output()
        .unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&output.stderr), String::from_utf8_lossy(&output.stdout));
    assert!(output.status.success(), "logout failed: {printed}");
    printed
}

fn check_config(dir: &TestDir) -> String {
    let output =
        Command::new(env!("CARGO_BIN_EXE_toolhost")).arg("check-config").arg("--config").arg(dir.path("toolhost.toml")).output().unwrap();
    assert!(output.status.success());
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `toolhost login remote`, with the test approving in place of the operator's browser. Returns
/// everything it printed.
fn login(config: &std::path::Path, app_addr: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["login", "remote", "--config"])
        .arg(config)
        .args(["--addr", app_addr])
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut before = String::new();
    let url = loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "login ended without printing a URL: {before}");
        if let Some(url) = line.trim().strip_prefix("http") {
            break format!("http{url}");
        }
        before.push_str(&line);
    };
    let (status, location, _) = http("GET", &url);
    assert_eq!(status, 302, "the authorization server approves at once");
    let (status, _, page) = http("GET", &location.expect("a redirect to toolhost's loopback listener"));
    assert_eq!(status, 200, "{page}");
    let output = child.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "login failed: {printed}");
    assert!(printed.contains("logged in"), "{printed}");
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    format!("{before}{url}\n{rest}{printed}")
}

fn config(dir: &TestDir, base: &str, auth: &str) -> toolhost::config::Config {
    dir.config(&format!(
        "[servers.remote]\nurl = \"{base}/mcp\"\nrequest_timeout = \"5s\"\n\
         restart = {{ initial_backoff = \"100ms\", max_backoff = \"400ms\" }}\nauth = {{ {auth} }}\n"
    ))
}

async fn echo(client: &mut toolhost::api::pb::tool_host_client::ToolHostClient<tonic::transport::Channel>, n: usize) -> Result<(), String> {
    let text = format!("call {n}");
    let called = client
        .call_tool(pb::CallToolRequest {
            qualified_name: "remote__echo".into(),
            arguments_json: format!(r#"{{"text":"{text}"}}"#),
            ..Default::default()
        })
        .await
        .map_err(|status| status.message().to_owned())?
        .into_inner();
    match !called.is_error && called.content_json.contains(&text) {
        true => Ok(()),
        false => Err(called.content_json),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_then_refreshes_across_ten_expiries_a_restart_and_a_revocation() {
    let server = AuthServer::start(&["2"]);
    let dir = TestDir::new();
    // No port: each login listens on one the kernel gives it (RFC 8252 section 7.3).
    let auth = "grant = \"authorization_code\", redirect_uri = \"http://127.0.0.1/callback\", token_file = \"remote.tokens.json\"";
    let app = start(config(&dir, &server.base, auth)).await;

    // Never logged in: a state that says what to do, not an empty catalog.
    let view = wait_for_server(app.registry(), "remote", "auth required", |v| v.state() == ServerState::AuthRequired).await;
    assert!(view.last_error().unwrap_or_default().contains("toolhost login remote"), "{:?}", view.last_error());
    assert!(view.generation().is_none());
    // A redirect for a login nobody began is refused, and changes nothing. (Asked once the
    // server's worker runs: before that the daemon does not yet know how the server logs in.)
    let mut grpc = client(&app).await;
    let bogus = pb::CompleteLoginRequest { server: "remote".into(), login_id: "made-up".into(), redirect_query: "code=x&state=y".into() };
    let refused = grpc.complete_login(bogus).await.unwrap_err();
    assert_eq!((refused.code(), error_info(&refused).0.as_str()), (tonic::Code::FailedPrecondition, "AUTHORIZATION_FAILED"));
    let unknown = grpc.begin_login(pb::BeginLoginRequest { server: "nosuch".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!(error_info(&unknown).0, "UNKNOWN_SERVER");
    assert_eq!(app.registry().server("remote").map(|v| v.state()), Some(ServerState::AuthRequired));
    assert!(check_config(&dir).contains("remote: OAuth authorization code; not logged in yet: run `toolhost login remote`"));

    let (config_path, addr) = (dir.path("toolhost.toml"), cli_addr(&app));
    let printed = tokio::task::spawn_blocking(move || login(&config_path, &addr)).await.unwrap();
    let tokens = dir.path("remote.tokens.json");
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&tokens).unwrap()).unwrap();
    for token in [&stored["access_token"], &stored["refresh_token"]] {
        assert!(!printed.contains(token.as_str().unwrap()), "login printed a token: {printed}");
    }
    assert_eq!(std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(check_config(&dir).contains("remote: OAuth authorization code; logged in ("));
    let view = wait_for_server(app.registry(), "remote", "ready after the login", |v| v.state() == ServerState::Ready).await;
    assert_eq!(tool_names(&view), ["echo"]);

    // Eight agents call without pause until the authorization server has seen ten refreshes
    // (2 s tokens), so that every refresh point finds calls racing for it.
    let mut client = client(&app).await;
    let started = Instant::now();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut callers = tokio::task::JoinSet::new();
    for agent in 0..8 {
        let (mut client, stop) = (client.clone(), stop.clone());
        callers.spawn(async move {
            let (mut calls, mut pace) = (0, pace(Duration::from_millis(10)));
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                pace.tick().await;
                calls += 1;
                if let Err(error) = echo(&mut client, agent * 1_000_000 + calls).await {
                    return Err(format!("agent {agent}'s call {calls} failed after {:?}: {error}", started.elapsed()));
                }
            }
            Ok(calls)
        });
    }
    eventually_within(Duration::from_secs(90), "ten refreshes under load", async || (server.stat("refreshes") >= 10).then_some(())).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut calls = 0;
    while let Some(done) = callers.join_next().await {
        calls += done.unwrap().unwrap_or_else(|error| panic!("{error}"));
    }
    let stats = server.stats();
    assert!(stats["refreshes"].as_u64().unwrap() >= 10, "ten refreshes take far less than 90 s: {stats}");
    assert!(calls >= 100, "{calls} calls");
    // Every call carried a valid token; each token was refreshed once, shortly before it
    // expired, by one request (a second refresh with the same rotating token would be "reuse").
    assert_eq!(stats["expired_token_rejections"], 0, "{stats}");
    assert_eq!(stats["refresh_reuse"], 0, "{stats}");
    assert_eq!(stats["code_grants"], 1, "{stats}");
    for age in stats["refresh_ages"].as_array().unwrap() {
        assert!(age.as_f64().unwrap() >= 1.5, "a token was refreshed long before its expiry: {stats}");
    }
    let servers = client.list_servers(pb::ListServersRequest::default()).await.unwrap().into_inner();
    let shown = format!("{servers:?}");
    assert!(!shown.contains("at-") && !shown.contains("rt-"), "a token is shown: {shown}");
    // The tokens are in the token file and nowhere in the store.
    let stored: Value = serde_json::from_str(&std::fs::read_to_string(&tokens).unwrap()).unwrap();
    for token in [&stored["access_token"], &stored["refresh_token"]] {
        let token = token.as_str().unwrap().as_bytes();
        for file in ["catalog.db", "catalog.db-wal"] {
            let bytes = std::fs::read(dir.path(file)).unwrap_or_default();
            assert!(!bytes.windows(token.len()).any(|w| w == token), "a token is in {file}");
        }
    }
    app.shutdown().await;

    // A restart uses the stored tokens: no new login.
    let app = start(toolhost::config::Config::load(&dir.path("toolhost.toml")).unwrap()).await;
    wait_for_server(app.registry(), "remote", "ready after a restart", |v| v.state() == ServerState::Ready).await;
    let mut client = crate::harness::client(&app).await;
    echo(&mut client, 0).await.unwrap();
    assert_eq!(server.stat("authorizations"), 1);

    // Revoked: the next refresh fails, the server is auth_required, its tools stay listed.
    let generation = app.registry().snapshot().servers["remote"].generation().unwrap().number;
    assert_eq!(http("POST", &format!("{}/admin/revoke", server.base)).0, 200);
    eventually_within(Duration::from_secs(30), "the revocation noticed", async || {
        let view = app.registry().snapshot().servers["remote"].clone();
        if view.state() == ServerState::AuthRequired {
            return Ok(());
        }
        // Calls drive the refresh that finds the token revoked.
        let _ = echo(&mut client, 0).await;
        Err(format!("{view:?}"))
    })
    .await;
    let view = app.registry().snapshot().servers["remote"].clone();
    assert!(view.last_error().unwrap_or_default().contains("toolhost login remote"), "{:?}", view.last_error());
    assert_eq!(view.generation().unwrap().number, generation, "nothing is committed without authorization");
    assert_eq!(tool_names(&view), ["echo"]);
    let listed = client.list_tools(pb::ListToolsRequest::default()).await.unwrap().into_inner().tools;
    assert!(listed.iter().any(|t| t.qualified_name == "remote__echo" && !t.available), "{listed:?}");
    assert!(server.stat("refresh_revoked") >= 1);

    // A new login brings it back without restarting the daemon.
    let (config_path, addr) = (dir.path("toolhost.toml"), cli_addr(&app));
    tokio::task::spawn_blocking(move || login(&config_path, &addr)).await.unwrap();
    wait_for_server(app.registry(), "remote", "ready after a new login", |v| v.state() == ServerState::Ready).await;
    echo(&mut client, 1).await.unwrap();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_registration_is_made_again_at_the_next_login_and_logout_revokes() {
    let server = AuthServer::start(&["2"]);
    let dir = TestDir::new();
    let config = config(&dir, &server.base, "grant = \"authorization_code\", redirect_uri = \"http://127.0.0.1/callback\"");
    // Before the daemon runs: the login is done by the command itself, and the daemon finds the
    // token file when it starts.
    let (config_path, nowhere) = (dir.path("toolhost.toml"), format!("unix:{}", dir.path("no-daemon.sock").display()));
    let printed = tokio::task::spawn_blocking(move || login(&config_path, &nowhere)).await.unwrap();
    assert!(printed.contains("logging in from here") && printed.contains("the daemon was not told"), "{printed}");
    let app = start(config).await;
    wait_for_server(app.registry(), "remote", "ready", |v| v.state() == ServerState::Ready).await;
    assert_eq!(http("POST", &format!("{}/admin/forget-clients", server.base)).0, 200);
    // The next refresh (within 2 s) is refused with invalid_client.
    let view = wait_for_server(app.registry(), "remote", "auth required", |v| v.state() == ServerState::AuthRequired).await;
    assert!(view.last_error().unwrap_or_default().contains("invalid_client"), "{:?}", view.last_error());
    let (config_path, addr) = (dir.path("toolhost.toml"), cli_addr(&app));
    tokio::task::spawn_blocking(move || login(&config_path, &addr)).await.unwrap();
    wait_for_server(app.registry(), "remote", "ready after registering again", |v| v.state() == ServerState::Ready).await;
    assert_eq!(server.stat("registrations"), 2);

    // Logout through the daemon: both tokens revoked at the authorization server, the file gone,
    // the server auth_required at once.
    let printed = logout(&dir, &cli_addr(&app));
    assert!(printed.contains("logged out of remote: revoked at the authorization server"), "{printed}");
    assert_eq!(server.stat("revocations"), 2);
    assert!(!dir.path("remote.oauth.json").exists());
    let view =
        wait_for_server(app.registry(), "remote", "auth required after the logout", |v| v.state() == ServerState::AuthRequired).await;
    assert!(view.last_error().unwrap_or_default().contains("toolhost login remote"), "{:?}", view.last_error());
    app.shutdown().await;
    // Without a daemon, logout works on the file itself.
    let printed = logout(&dir, &format!("unix:{}", dir.path("no-daemon.sock").display()));
    assert!(printed.contains("logging out from here") && printed.contains("there was nothing to revoke"), "{printed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_credentials_grant_renews_before_expiry_and_wrong_credentials_are_auth_required() {
    let server = AuthServer::start(&["2", "daemon-client", "daemon-secret-value"]);
    let dir = TestDir::new();
    let auth = format!(
        "grant = \"client_credentials\", client_id = \"daemon-client\", client_secret = \"daemon-secret-value\", \
         token_endpoint_auth = \"client_secret_post\", issuer = \"{}\"",
        server.base
    );
    let app = start(config(&dir, &server.base, &auth)).await;
    wait_for_server(app.registry(), "remote", "ready", |v| v.state() == ServerState::Ready).await;
    let mut client = client(&app).await;
    let (mut calls, mut pace) = (0, pace(Duration::from_millis(20)));
    while server.stat("client_credentials") < 4 {
        pace.tick().await;
        calls += 1;
        echo(&mut client, calls).await.unwrap_or_else(|error| panic!("call {calls} failed: {error}"));
        assert!(calls < 5_000, "tokens are renewed: {}", server.stats());
    }
    assert_eq!(server.stat("expired_token_rejections"), 0, "{}", server.stats());
    // Client credentials keep no token in a file, and with a configured issuer nothing to pin.
    let kept = std::fs::read_to_string(dir.path("remote.oauth.json")).unwrap_or_default();
    assert!(!kept.contains("token") && !kept.contains("daemon-secret-value"), "{kept}");
    let refused = client.begin_login(pb::BeginLoginRequest { server: "remote".into(), ..Default::default() }).await.unwrap_err();
    assert_eq!((refused.code(), error_info(&refused).0.as_str()), (tonic::Code::FailedPrecondition, "LOGIN_NOT_APPLICABLE"));
    // Idle, the token is renewed all the same (2 s tokens): two renewals while no call is made.
    let (before, calls_before) = (server.stat("client_credentials"), server.stat("calls"));
    eventually_within(Duration::from_secs(30), "an idle server's token renewed twice", async || {
        (server.stat("client_credentials") >= before + 2).then_some(())
    })
    .await;
    assert_eq!(server.stat("calls"), calls_before, "no call drove those renewals");
    app.shutdown().await;

    let dir = TestDir::new();
    let wrong = format!(
        "grant = \"client_credentials\", client_id = \"daemon-client\", client_secret = \"not-the-secret\", issuer = \"{}\"",
        server.base
    );
    let app = start(config(&dir, &server.base, &wrong)).await;
    let view = wait_for_server(app.registry(), "remote", "auth required", |v| v.state() == ServerState::AuthRequired).await;
    let error = view.last_error().map(str::to_owned).unwrap_or_default();
    assert!(error.contains("invalid_client") && !error.contains("not-the-secret"), "{error}");
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_authorization_server_costs_its_own_server_only_with_a_specific_error() {
    let credentials = ["2", "daemon-client", "daemon-secret-value"];
    let slow = AuthServer::start_in_mode(&credentials, "slow-token");
    let huge = AuthServer::start_in_mode(&credentials, "huge-metadata");
    let garbage = AuthServer::start_in_mode(&credentials, "garbage-token");
    let healthy = AuthServer::start(&credentials);
    let dir = TestDir::new();
    let auth = "grant = \"client_credentials\", client_id = \"daemon-client\", client_secret = \"daemon-secret-value\"";
    let table = |name: &str, server: &AuthServer| {
        format!(
            "[servers.{name}]\nurl = \"{base}/mcp\"\nrequest_timeout = \"1s\"\nrestart = {{ initial_backoff = \"100ms\", max_backoff = \"400ms\" }}\n\
             auth = {{ {auth}, issuer = \"{base}\" }}\n",
            base = server.base
        )
    };
    let app =
        start(dir.config(&[table("slow", &slow), table("huge", &huge), table("garbage", &garbage), table("remote", &healthy)].concat()))
            .await;
    wait_for_server(app.registry(), "remote", "ready beside the hostile ones", |v| v.state() == ServerState::Ready).await;
    for (name, expected) in
        [("slow", "no answer within 1s"), ("huge", "larger than 262144 bytes"), ("garbage", "the token answer is not valid")]
    {
        let view = wait_for_server(app.registry(), name, expected, |v| {
            v.last_error().is_some_and(|error| error.contains(expected)) && v.state() != ServerState::Ready
        })
        .await;
        // The authorization server failed, not the credentials: retried at the backoff, not
        // waiting for an operator.
        assert_ne!(view.state(), ServerState::AuthRequired, "{name}: {view:?}");
        assert!(!view.last_error().unwrap_or_default().contains("daemon-secret-value"));
    }
    let mut client = client(&app).await;
    echo(&mut client, 1).await.unwrap();
    app.shutdown().await;
}

/// A POST with `body` to the fixture's admin endpoints.
fn post(url: &str, body: &str) {
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_once('/').map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    write!(stream, "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_go_only_to_the_pinned_authorization_server() {
    let credentials = ["60", "daemon-client", "daemon-secret-value"];
    let honest = AuthServer::start(&credentials);
    // Another authorization server that would take the same credentials.
    let rogue = AuthServer::start(&credentials);
    let dir = TestDir::new();
    // Trust on first use, as the operator may choose explicitly (check-config warns about it).
    let auth = "grant = \"client_credentials\", client_id = \"daemon-client\", client_secret = \"daemon-secret-value\", \
                trust_first_issuer = true";
    let app = start(config(&dir, &honest.base, auth)).await;
    wait_for_server(app.registry(), "remote", "ready", |v| v.state() == ServerState::Ready).await;
    let pinned = std::fs::read_to_string(dir.path("remote.oauth.json")).expect("the pin is kept in the token file");
    let pinned_issuer = serde_json::from_str::<Value>(&pinned).unwrap()["issuer"].clone();
    assert_eq!(pinned_issuer, honest.base.as_str(), "{pinned}");
    assert!(!pinned.contains("daemon-secret-value"), "{pinned}");

    // The MCP server now names another authorization server, and its tokens stop working.
    post(&format!("{}/admin/authorization-server", honest.base), &rogue.base);
    post(&format!("{}/admin/expire-access", honest.base), "");
    let mut client = client(&app).await;
    let _ = echo(&mut client, 1).await;
    let view = wait_for_server(app.registry(), "remote", "auth required", |v| v.state() == ServerState::AuthRequired).await;
    let error = view.last_error().map(str::to_owned).unwrap_or_default();
    assert!(error.contains(&rogue.base) && error.contains(&honest.base), "both issuers are named: {error}");
    assert_eq!(tool_names(&view), ["echo"], "the tools stay listed");
    // A restart keeps the pin; every backoff retry is refused before anything is sent.
    app.shutdown().await;
    let app = start(config(&dir, &honest.base, auth)).await;
    wait_for_server(app.registry(), "remote", "auth required after a restart", |v| {
        v.state() == ServerState::AuthRequired && v.num_restarts() >= 2
    })
    .await;
    app.shutdown().await;
    assert_eq!(rogue.stat("token_requests"), 0, "the rogue authorization server never saw a token request");

    // An operator who accepts the move says so in the configuration: then it gets them.
    let accepted = format!("{auth}, issuer = \"{}\"", rogue.base);
    let app = start(config(&dir, &honest.base, &accepted)).await;
    eventually("the configured issuer gets the token requests", async || (rogue.stat("token_requests") > 0).then_some(())).await;
    app.shutdown().await;

    // A configured issuer that the server does not name gets nothing sent anywhere.
    let fresh = AuthServer::start(&credentials);
    let dir = TestDir::new();
    let app = start(config(&dir, &fresh.base, &accepted)).await;
    let view = wait_for_server(app.registry(), "remote", "auth required", |v| v.state() == ServerState::AuthRequired).await;
    assert!(view.last_error().unwrap_or_default().contains("auth.issuer"), "{view:?}");
    assert_eq!(fresh.stat("token_requests"), 0);
    app.shutdown().await;
}
