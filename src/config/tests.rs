//! Configuration parsing and validation, checked against the messages an operator sees.

use std::path::Path;

use super::*;

fn load(name: &str, text: &str) -> Result<Config, ConfigError> {
    Config::parse(&Path::new("/etc/toolhost").join(name), text)
}

#[test]
fn a_full_toml_file_resolves_paths_against_its_directory() {
    let config = load(
        "toolhost.toml",
        r#"
        [store]
        path = "state/catalog.db"
        [grpc]
        listen = ["unix:run/toolhost.sock", "127.0.0.1:7000"]
        [servers.files]
        command = "./bin/files-server"
        args = ["--root", "/srv"]
        env = { LOG = "1" }
        cwd = "work"
        request_timeout = "5s"
        restart = { initial_backoff = "100ms", max_backoff = "10s" }
        [servers.remote]
        url = "https://mcp.example.test/mcp"
        headers = { Authorization = "Bearer x" }
        enabled = false
        "#,
    )
    .unwrap();
    assert_eq!(config.store.path, Path::new("/etc/toolhost/state/catalog.db"));
    assert_eq!(
        config.grpc.listen.iter().map(|l| l.addr.clone()).collect::<Vec<_>>(),
        vec![ListenAddr::Unix("/etc/toolhost/run/toolhost.sock".into()), ListenAddr::Tcp("127.0.0.1:7000".parse().unwrap())]
    );
    let files = &config.servers["files"];
    let Transport::Stdio(stdio) = &files.transport else { panic!("stdio expected") };
    assert_eq!(stdio.command, Path::new("/etc/toolhost/./bin/files-server"));
    assert_eq!(stdio.cwd.as_deref(), Some(Path::new("/etc/toolhost/work")));
    assert_eq!(files.request_timeout, Duration::from_secs(5));
    assert_eq!(files.restart.initial_backoff, Duration::from_millis(100));
    assert!(!config.servers["remote"].enabled);
}

#[test]
fn a_desktop_json_file_is_read_as_those_clients_write_it() {
    let config = load(
        "claude_desktop_config.json",
        r#"{"mcpServers": {
            "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "env": {"A": "b"}},
            "off": {"command": "uvx", "args": ["thing"], "disabled": true, "alwaysAllow": ["x"]}
        }}"#,
    )
    .unwrap();
    let Transport::Stdio(memory) = &config.servers["memory"].transport else { panic!("stdio expected") };
    assert_eq!(memory.command, Path::new("npx"));
    assert_eq!(memory.args, ["-y", "@modelcontextprotocol/server-memory"]);
    assert!(!config.servers["off"].enabled);
    // No listeners, no store: Unix sockets in the runtime directory (they identify this user
    // without a token), the store in the state directory, never beside a desktop client's file.
    let runtime = super::places::runtime_dir();
    assert_eq!(config.grpc.listen.iter().map(|l| l.addr.clone()).collect::<Vec<_>>(), [ListenAddr::Unix(runtime.join("toolhost.sock"))]);
    assert_eq!(config.mcp.listen.iter().map(|l| l.addr.clone()).collect::<Vec<_>>(), [ListenAddr::Unix(runtime.join("mcp.sock"))]);
    assert_eq!(config.store.path, super::places::state_dir().join("toolhost.db"));
    assert!(!config.store.path.starts_with("/etc/toolhost"), "{:?}", config.store.path);
}

#[test]
fn a_file_that_names_one_listener_gets_no_other() {
    let config = load("toolhost.toml", "[grpc]\nlisten = [\"unix:/run/x/api.sock\"]\n").unwrap();
    assert!(config.mcp.listen.is_empty(), "the MCP endpoint is served only where the file says");
    let config = load("toolhost.toml", "[mcp]\nlisten = [\"127.0.0.1:50052\"]\n").unwrap();
    assert_eq!(config.grpc.listen[0].addr, ListenAddr::Unix(super::places::runtime_dir().join("toolhost.sock")));
}

#[test]
fn every_error_names_the_file_the_key_and_the_problem() {
    let cases = [
        ("[servers.a]\ncomand = \"x\"\n", "/etc/toolhost/t.toml: servers.a.comand: unknown field `comand`"),
        ("[servers.a]\nargs = []\n", "/etc/toolhost/t.toml: servers.a.command: missing"),
        ("[servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n", "servers.a.url: give either command"),
        ("[servers.a]\nurl = \"ftp://h\"\n", "servers.a.url: \"ftp://h\" is not an http"),
        ("[servers.a]\ncommand = \"x\"\nrequest_timeout = \"soon\"\n", "servers.a.request_timeout: \"soon\" is not a duration"),
        ("[servers.a]\ncommand = \"x\"\nmax_pages = 0\n", "servers.a.max_pages: must be greater than 0"),
        ("[servers.\"a b\"]\ncommand = \"x\"\n", "servers.a b: a server name must be"),
        ("[grpc]\nlisten = \"localhost\"\n", "grpc.listen[0]: \"localhost\" is neither"),
        ("[servers.a]\ncommand = 5\n", "servers.a.command: invalid type"),
        ("[servers.a\ncommand = \"x\"\n", "/etc/toolhost/t.toml: line 1, column"),
    ];
    for (text, expected) in cases {
        let message = load("t.toml", text).unwrap_err().to_string();
        assert!(message.contains(expected), "{message:?} should contain {expected:?}");
    }
    let message = load("c.json", r#"{"mcpServers": {"a": {"args": 3}}}"#).unwrap_err().to_string();
    assert!(message.contains("mcpServers.a.args: invalid type"), "{message}");
    let message = load("c.json", r#"{"servers": {}}"#).unwrap_err().to_string();
    assert!(message.contains("missing field `mcpServers`"), "{message}");
}

#[test]
fn durations_take_a_unit() {
    assert_eq!(parse_duration("250ms", DAY), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("2m", DAY), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("1h 30m", DAY), Ok(Duration::from_secs(5400)));
    assert!(parse_duration("10", DAY).is_err());
    assert!(parse_duration("0s", DAY).is_err());
    assert!(parse_duration("-1s", DAY).is_err());
    assert!(parse_duration("25h", DAY).unwrap_err().to_string().contains("limit of 1day"));
}

#[test]
fn huge_durations_are_refused_with_the_key_and_the_limit() {
    let huge = "9999999999999999999s";
    for (table, key) in [
        ("[daemon]\nshutdown_timeout", "daemon.shutdown_timeout"),
        ("[servers.a]\ncommand = \"x\"\nrequest_timeout", "servers.a.request_timeout"),
        ("[servers.a]\ncommand = \"x\"\nenumeration_timeout", "servers.a.enumeration_timeout"),
        ("[servers.a]\ncommand = \"x\"\nshutdown_grace", "servers.a.shutdown_grace"),
        ("[servers.a]\ncommand = \"x\"\nrestart.max_backoff", "servers.a.restart.max_backoff"),
        ("[servers.a]\ncommand = \"x\"\nrestart.stable_after", "servers.a.restart.stable_after"),
        ("[telemetry]\nmetrics_interval", "telemetry.metrics_interval"),
    ] {
        let error = load("toolhost.toml", &format!("{table} = \"{huge}\"\n")).unwrap_err().to_string();
        assert!(error.contains(key), "{error}");
    }
    let error = load("toolhost.toml", "[servers.a]\ncommand = \"x\"\nrequest_timeout = \"400d\"\n").unwrap_err().to_string();
    assert!(error.contains("servers.a.request_timeout") && error.contains("limit"), "{error}");
}

#[test]
fn an_empty_or_comment_only_file_is_refused() {
    for text in ["", "  \n\n", "# nothing here\n"] {
        let error = load("toolhost.toml", text).unwrap_err().to_string();
        assert!(error.contains("empty"), "{error}");
    }
    assert!(load("servers.json", "").unwrap_err().to_string().contains("empty"));
}

#[test]
fn a_unix_listener_takes_a_mode_and_a_group() {
    let config = load(
        "toolhost.toml",
        "[grpc]\nlisten = [\"127.0.0.1:1\", { address = \"unix:/run/t.sock\", mode = \"0666\", group = \"root\" }]\n",
    )
    .unwrap();
    let socket = &config.grpc.listen[1].socket;
    assert_eq!((socket.mode, socket.group.as_ref().map(|g| g.gid)), (0o666, Some(0)));
    assert_eq!(config.grpc.listen[0].socket, SocketAccess::default());
    for (listen, expected) in [
        ("{ address = \"unix:/t.sock\", group = \"no-such-group-here\" }", "there is no group"),
        ("{ address = \"unix:/t.sock\", mode = \"0999\" }", "not octal"),
        ("{ address = \"unix:/t.sock\", mode = \"0066\" }", "own user"),
        ("{ address = \"127.0.0.1:1\", mode = \"0660\" }", "unix: sockets only"),
    ] {
        let error = load("toolhost.toml", &format!("[grpc]\nlisten = [{listen}]\n")).unwrap_err().to_string();
        assert!(error.contains("grpc.listen[0]") && error.contains(expected), "{error}");
    }
}

#[test]
fn access_policies_are_checked_against_the_servers_and_name_the_key() {
    let server = "[servers.files]\ncommand = \"x\"\n";
    let agent = |body: &str| format!("{server}[access]\n[[access.agents]]\nname = \"bot\"\n{body}\n");
    for (body, key, expected) in [
        ("allow = [\"filez__read\"]", "access.agents[0].allow", "not configured"),
        ("deny = [\"files__read file\"]", "access.agents[0].deny", "not a glob"),
        ("tokens = [\"${file:/nonexistent/toolhost.token}\"]", "access.agents[0].tokens[0]", "cannot read"),
        ("tokens = [\"inline-token-that-is-long-enough\"]", "access.agents[0].tokens[0]", "by reference"),
        ("users = [\"no-such-user-anywhere\"]", "access.agents[0].users", "no user"),
        ("units = [\"bad unit\"]", "access.agents[0].units", "not a glob"),
    ] {
        let error = load("toolhost.toml", &agent(body)).unwrap_err().to_string();
        assert!(error.contains(key) && error.contains(expected), "{body}: {error}");
    }
    let twice = format!("{server}[access]\n[[access.agents]]\nname = \"a\"\n[[access.agents]]\nname = \"a\"\n");
    assert!(load("toolhost.toml", &twice).unwrap_err().to_string().contains("names two entries"));
    let ok = load("toolhost.toml", &agent("allow = [\"files__read_*\", \"*__search\"]\nusers = [\"root\"]\nadmin = true")).unwrap();
    assert!(ok.access.configured && ok.access.agents[0].uids == [0] && ok.access.agents[0].admin);
    assert!(!load("toolhost.toml", server).unwrap().access.configured);
}

#[test]
fn the_api_listens_on_loopback_or_a_unix_socket_only() {
    let error = load("toolhost.toml", "[grpc]\nlisten = [\"0.0.0.0:50051\"]\n").unwrap_err().to_string();
    assert!(error.contains("grpc.listen[0]") && error.contains("not a loopback address"), "{error}");
    assert!(load("toolhost.toml", "[grpc]\nlisten = [\"[::1]:50051\", \"127.0.0.2:1\"]\n").is_ok());
}

#[test]
fn the_mcp_section_is_checked_key_by_key() {
    let base = "[servers.files]\ncommand = \"f\"\n[servers.web]\ncommand = \"w\"\n";
    let with = |mcp: &str| load("toolhost.toml", &format!("{base}\n{mcp}"));
    let config = with(
        "[mcp]\nlisten = [\"127.0.0.1:50052\", \"unix:mcp.sock\"]\npage_size = 50\nallowed_origins = [\"https://App.example/\"]\n\
         [mcp.profiles.files]\ntools = [\"files__*\"]\nnames = \"original\"\n[mcp.profiles.mixed]\ntools = [\"files__read\", \"web__*\"]\n",
    )
    .unwrap();
    assert_eq!(config.mcp.page_size, 50);
    assert_eq!(config.mcp.listen[1].addr, ListenAddr::Unix("/etc/toolhost/mcp.sock".into()));
    assert_eq!(config.mcp.allowed_origins, ["https://app.example"]);
    assert_eq!(config.mcp.profiles["files"].original_names.as_deref(), Some("files"));
    assert_eq!(config.mcp.profiles["mixed"].original_names, None);
    assert!(with("[grpc]\nlisten = [\"unix:api.sock\"]\n").unwrap().mcp.listen.is_empty(), "off when only the API is placed");
    let lazy = with("[mcp]\nlisten = [\"unix:a\"]\n[mcp.profiles.lazy]\nlazy = true\n").unwrap();
    assert_eq!(lazy.mcp.profiles["lazy"].lazy, Some(vec!["*".to_owned()]), "a lazy profile may pin no tool and finds everything");

    for (mcp, expected) in [
        ("[mcp]\nlisten = [\"127.0.0.1:1\"]\npage_size = 0\n", "mcp.page_size: 0 is not between 1 and 10000"),
        ("[mcp]\nlisten = [\"10.0.0.1:50052\"]\n", "mcp.listen[0]: \"10.0.0.1:50052\" is not a loopback address"),
        (
            "[grpc]\nlisten = [\"127.0.0.1:50051\"]\n[mcp]\nlisten = [\"127.0.0.1:50051\"]\n",
            "mcp.listen: Tcp(127.0.0.1:50051) is also a [grpc] listener",
        ),
        ("[mcp]\nlisten = [\"unix:a\", \"unix:a\"]\n", "mcp.listen[1]: names the same address twice"),
        ("[mcp]\nlisten = [\"unix:a\"]\nallowed_origins = [\"evil.example\"]\n", "mcp.allowed_origins[0]"),
        (
            "[mcp]\nlisten = [\"unix:a\"]\n[mcp.profiles.x]\ntools = [\"nope__*\"]\n",
            "mcp.profiles.x.tools: \"nope__*\" names the server \"nope\"",
        ),
        (
            "[mcp]\nlisten = [\"unix:a\"]\n[mcp.profiles.x]\ntools = [\"files__*\", \"web__*\"]\nnames = \"original\"\n",
            "mcp.profiles.x.names",
        ),
        ("[mcp]\nlisten = [\"unix:a\"]\n[mcp.profiles.x]\ntools = []\n", "mcp.profiles.x.tools: lists no tools"),
        ("[mcp]\nlisten = [\"unix:a\"]\n[mcp.profiles.\"a b\"]\ntools = [\"*\"]\n", "a profile name is 1 to 64"),
        (
            "[grpc]\nlisten = [\"unix:api\"]\n[mcp.profiles.x]\ntools = [\"*\"]\n",
            "profiles are configured but the endpoint listens nowhere",
        ),
        (
            "[mcp]\nlisten = [\"unix:a\"]\n[mcp.profiles.x]\ntools = [\"*\"]\nfind = [\"*\"]\n",
            "mcp.profiles.x.find: applies to lazy profiles only",
        ),
        (
            "[mcp]\nlisten = [\"unix:a\"]\n[mcp.profiles.x]\nlazy = true\nfind = [\"nope__*\"]\n",
            "mcp.profiles.x.find: \"nope__*\" names the server",
        ),
        (
            "[mcp]\nlisten = [\"unix:a\"]\n[mcp.profiles.x]\nlazy = true\ntools = [\"files__*\"]\nnames = \"original\"\n",
            "mcp.profiles.x.lazy",
        ),
    ] {
        let error = with(mcp).expect_err(mcp).to_string();
        assert!(error.contains(expected), "{mcp}\n  gave: {error}\n  expected: {expected}");
    }
}

#[test]
fn the_fleet_section_is_checked_and_server_identities_are_stable() {
    let config = load(
        "toolhost.toml",
        r#"
        [fleet]
        url = "postgres://toolhost:s3cret-fleet@db.example.test/fleet"
        host_id = "agents-07"
        share = ["audit"]
        [servers.remote]
        url = "https://user:pw@mcp.example.test/mcp?token=abc"
        [servers.files]
        command = "npx"
        args = ["-y", "@modelcontextprotocol/server-filesystem@2026.1.14", "/srv"]
        [servers.named]
        command = "x"
        fleet_identity = "the-files-server"
        "#,
    )
    .unwrap();
    let fleet = config.fleet.as_ref().unwrap();
    assert_eq!(fleet.host_id, "agents-07");
    assert!(fleet.share_audit && !fleet.share_approvals && !fleet.share_drift);
    assert!(!format!("{fleet:?}").contains("s3cret-fleet"), "the password is never printed");
    assert!(!crate::secrets::redact("s3cret-fleet").contains("s3cret"), "a literal password is scrubbed from output too");
    assert_eq!(config.servers["remote"].fleet_identity(), "url:https://mcp.example.test/mcp", "no credentials, no query");
    assert_eq!(config.servers["files"].fleet_identity(), "stdio:npx -y @modelcontextprotocol/server-filesystem@2026.1.14 /srv");
    assert_eq!(config.servers["named"].fleet_identity(), "the-files-server");

    for (fleet, key, problem) in [
        ("url = \"mysql://x\"", "fleet.url", "postgres://"),
        ("url = \"postgres://h/db\"\nshare = [\"catalog\"]", "fleet.share", "\"catalog\""),
        ("url = \"postgres://h/db\"\nhost_id = \"has space\"", "fleet.host_id", "visible ASCII"),
        ("url = \"postgres://h/db\"\nconnect_timeout = \"9999h\"", "fleet.connect_timeout", ""),
        ("url = \"${file:/nonexistent/fleet-url}\"", "fleet.url", "/nonexistent/fleet-url"),
    ] {
        let error = load("toolhost.toml", &format!("[fleet]\n{fleet}\n")).unwrap_err().to_string();
        assert!(error.contains(key) && error.contains(problem), "{fleet}: {error}");
    }
}

#[test]
fn an_auth_table_takes_a_grant_its_credentials_and_names_what_is_wrong() {
    let http = |auth: &str| {
        format!(
            "[store]\npath = \"/var/lib/toolhost/catalog.db\"\n[servers.remote]\nurl = \"https://mcp.example/mcp\"\nauth = {{ {auth} }}\n"
        )
    };
    let oauth = |text: &str| match load("t.toml", text).unwrap().servers["remote"].transport.clone() {
        Transport::Http(HttpSpec { auth: Some(auth::AuthSpec::OAuth(spec)), .. }) => spec,
        other => panic!("not OAuth: {other:?}"),
    };
    let code = oauth(&http("grant = \"authorization_code\", scopes = [\"files:read\", \"offline_access\"]"));
    assert_eq!(code.grant, auth::Grant::AuthorizationCode);
    assert_eq!(code.scopes.as_deref(), Some("files:read offline_access"));
    assert_eq!(code.redirect_uri, auth::DEFAULT_REDIRECT_URI);
    assert_eq!(code.token_file, Path::new("/var/lib/toolhost/remote.oauth.json"));
    assert_eq!(code.refresh_before, Duration::from_secs(60));
    // A loopback redirect without a port: each login picks one (RFC 8252 section 7.3).
    let any_port = oauth(&http("grant = \"authorization_code\", redirect_uri = \"http://127.0.0.1/cb\""));
    assert!(auth::has_variable_port(&any_port.redirect_uri));
    assert_eq!(auth::with_port(&any_port.redirect_uri, 40123), "http://127.0.0.1:40123/cb");
    assert_eq!(auth::with_port("http://[::1]/cb", 7), "http://[::1]:7/cb");
    assert_eq!(auth::with_port(auth::DEFAULT_REDIRECT_URI, 7), auth::DEFAULT_REDIRECT_URI, "a port of its own is kept");
    let credentials = oauth(&http(
        "grant = \"client_credentials\", client_id = \"svc\", client_secret = \"literal-secret\", token_file = \"t.json\", issuer = \"https://login.example\"",
    ));
    assert_eq!(credentials.token_file, Path::new("/etc/toolhost/t.json"));
    assert!(!format!("{credentials:?}").contains("literal-secret"), "a secret written in the file is never printed");
    match &load("t.toml", &http("token = \"tok-123456\"")).unwrap().servers["remote"].transport {
        Transport::Http(HttpSpec { auth: Some(auth::AuthSpec::Bearer(token)), .. }) => assert_eq!(token.expose(), "tok-123456"),
        other => panic!("not a bearer token: {other:?}"),
    }
    let cases = [
        ("grant = \"implicit\"", "servers.remote.auth.grant: \"implicit\" is not one of"),
        ("client_id = \"x\"", "servers.remote.auth.grant: give grant"),
        ("grant = \"client_credentials\"", "servers.remote.auth.client_id: the client credentials grant needs"),
        ("grant = \"authorization_code\", client_secret = \"s\"", "servers.remote.auth.client_id: missing"),
        ("grant = \"client_credentials\", client_id = \"a\", private_key = \"not pem\"", "servers.remote.auth.private_key: is not a PEM"),
        ("grant = \"authorization_code\", redirect_uri = \"http://example.com/cb\"", "servers.remote.auth.redirect_uri:"),
        (
            "grant = \"authorization_code\", client_metadata_url = \"http://x/c.json\"",
            "auth.client_metadata_url: \"http://x/c.json\" is not an https",
        ),
        ("grant = \"authorization_code\", scopes = [\"a b\"]", "servers.remote.auth.scopes: each scope"),
        ("grant = \"authorization_code\", refresh_before = \"2y\"", "servers.remote.auth.refresh_before:"),
        ("grant = \"client_credentials\", token = \"t\"", "servers.remote.auth.token: only grant = \"bearer\""),
        ("token = \"has space\"", "servers.remote.auth.token: must be a non-empty token"),
        ("grant = \"authorization_code\", colour = 1", "unknown field `colour`"),
        // A pre-shared credential goes only to an authorization server the operator named.
        ("grant = \"client_credentials\", client_id = \"a\", client_secret = \"s\"", "servers.remote.auth.issuer: missing"),
        ("grant = \"authorization_code\", client_id = \"a\", client_secret = \"s\"", "servers.remote.auth.issuer: missing"),
    ];
    for (auth, expected) in cases {
        let message = load("t.toml", &http(auth)).unwrap_err().to_string();
        assert!(message.contains(expected), "{message:?} should contain {expected:?}");
    }
    let first_seen = oauth(&http("grant = \"client_credentials\", client_id = \"a\", client_secret = \"s\", trust_first_issuer = true"));
    assert!(first_seen.trust_first_issuer && first_seen.issuer.is_none());
    let plain = "[servers.remote]\nurl = \"http://mcp.example/mcp\"\nauth = { grant = \"authorization_code\" }\n";
    assert!(load("t.toml", plain).unwrap_err().to_string().contains("servers.remote.url: OAuth tokens are sent over HTTPS only"));
    let both = "[servers.remote]\nurl = \"https://h\"\nheaders = { Authorization = \"Bearer x\" }\nauth = { token = \"y-123456\" }\n";
    assert!(load("t.toml", both).unwrap_err().to_string().contains("either auth or an Authorization header"));
    let stdio = "[servers.local]\ncommand = \"x\"\nauth = { token = \"y-123456\" }\n";
    assert!(load("t.toml", stdio).unwrap_err().to_string().contains("only HTTP servers (url) take headers, auth and ca_file"));
}

#[test]
fn the_credential_fingerprint_follows_the_authorization() {
    let fingerprint = |auth: &str| {
        let text = format!("[servers.remote]\nurl = \"https://mcp.example/mcp\"\n{auth}\n");
        load("t.toml", &text).unwrap().servers["remote"].credential_fingerprint("remote")
    };
    let none = fingerprint("");
    let alice = fingerprint(
        "auth = { grant = \"client_credentials\", client_id = \"alice\", client_secret = \"secret-1\", issuer = \"https://login.example\" }",
    );
    let bob = fingerprint(
        "auth = { grant = \"client_credentials\", client_id = \"bob\", client_secret = \"secret-1\", issuer = \"https://login.example\" }",
    );
    let login = fingerprint("auth = { grant = \"authorization_code\" }");
    let other_login = fingerprint("auth = { grant = \"authorization_code\", token_file = \"other.json\" }");
    let token = fingerprint("auth = { token = \"token-123456\" }");
    let all = [&none, &alice, &bob, &login, &other_login, &token];
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_eq!(
        alice,
        fingerprint(
            "auth = { grant = \"client_credentials\", client_id = \"alice\", client_secret = \"secret-1\", issuer = \"https://login.example\" }"
        )
    );
}

#[test]
fn the_console_listens_on_loopback_or_a_socket_and_on_its_own_address() {
    let config = load(
        "toolhost.toml",
        "[grpc]\nlisten = [\"unix:api.sock\"]\n[console]\nlisten = [\"127.0.0.1:7070\", \"unix:console.sock\"]\nallowed_origins = [\"https://Tools.example/\"]\nsession_ttl = \"2h\"\n",
    )
    .unwrap();
    assert_eq!(config.console.listen.len(), 2);
    assert_eq!(config.console.allowed_origins, ["https://tools.example"]);
    assert_eq!(config.console.session_ttl, Duration::from_secs(7200));
    assert!(load("toolhost.toml", "[grpc]\nlisten = [\"unix:api.sock\"]\n").unwrap().console.listen.is_empty(), "off by default");
    let public = load("toolhost.toml", "[console]\nlisten = [\"0.0.0.0:7070\"]\n").unwrap_err().to_string();
    assert!(public.contains("console.listen[0]") && public.contains("not a loopback address"), "{public}");
    let shared =
        load("toolhost.toml", "[mcp]\nlisten = [\"127.0.0.1:7070\"]\n[console]\nlisten = [\"127.0.0.1:7070\"]\n").unwrap_err().to_string();
    assert!(shared.contains("give the console its own address"), "{shared}");
    let long = load("toolhost.toml", "[console]\nlisten = [\"127.0.0.1:7070\"]\nsession_ttl = \"30d\"\n").unwrap_err().to_string();
    assert!(long.contains("console.session_ttl"), "{long}");
    let origin = load("toolhost.toml", "[console]\nallowed_origins = [\"tools.example\"]\n").unwrap_err().to_string();
    assert!(origin.contains("console.allowed_origins[0]"), "{origin}");
}

#[test]
fn a_launcher_setting_with_a_credential_is_told_apart() {
    for safe in ["http://proxy.internal:3128", "https://registry.npmjs.org/", "localhost,127.0.0.1,.internal", ""] {
        assert!(!super::carries_credentials(safe), "{safe}");
    }
    for secret in ["http://user:pass@proxy:3128", "https://__token__:pypi-abc@pypi.internal/simple", "x, http://u@h"] {
        assert!(super::carries_credentials(secret), "{secret}");
    }
}

#[test]
fn audit_sinks_and_the_signing_key_are_checked_key_by_key() {
    let config = load(
        "toolhost.toml",
        r#"
        [audit]
        key = "/etc/toolhost/audit.key"
        export = [
            { file = "/var/log/toolhost/audit.jsonl" },
            { syslog = "siem.example.test:6514", tls = true, ca = "/etc/toolhost/siem-ca.pem" },
            { syslog = "127.0.0.1:514" },
            { otlp = "http://127.0.0.1:4317/" },
        ]
        "#,
    )
    .unwrap();
    let tls = SyslogTls { ca: Some("/etc/toolhost/siem-ca.pem".into()) };
    assert_eq!(
        config.audit.exports,
        [
            AuditExport::File("/var/log/toolhost/audit.jsonl".into()),
            AuditExport::Syslog { addr: "siem.example.test:6514".into(), tls: Some(tls) },
            AuditExport::Syslog { addr: "127.0.0.1:514".into(), tls: None },
            AuditExport::Otlp("http://127.0.0.1:4317".into()),
        ]
    );
    let place = config.audit.key_place(Path::new("/var/lib/toolhost/catalog.db"));
    assert_eq!(
        place,
        KeyPlace { path: "/etc/toolhost/audit.key".into(), made_if_missing: false },
        "a key the operator gives is never made"
    );
    for (audit, key, problem) in [
        ("key = \"audit.key\"", "audit.key", "absolute path"),
        ("export = [{ otlp = \"grpc://collector:4317\" }]", "audit.export[0]", "http://host:port"),
        ("export = [{ file = \"/x\", tls = true }]", "audit.export[0]", "syslog sink only"),
        ("export = [{ syslog = \"h:514\", ca = \"/ca.pem\" }]", "audit.export[0]", "add tls = true"),
        ("export = [{ syslog = \"h:514\", tls = true, ca = \"ca.pem\" }]", "audit.export[0]", "not an absolute path"),
        ("export = [{ syslog = \"nohost\" }]", "audit.export[0]", "not host:port"),
        ("export = [{ file = \"/x\", unix = \"/y\" }]", "audit.export[0]", "give one of"),
    ] {
        let error = load("toolhost.toml", &format!("[audit]\n{audit}\n")).unwrap_err().to_string();
        assert!(error.contains(key) && error.contains(problem), "{audit}: {error}");
    }
}
