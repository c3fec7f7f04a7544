//! The command line refuses bad configuration with exit code 64 and one clear message.

use std::process::Command;

use crate::harness::TestDir;

fn toolhost(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toolhost")).args(args).output().expect("run toolhost")
}

#[test]
fn a_bad_configuration_exits_64_naming_file_key_and_problem() {
    let dir = TestDir::new();
    let path = dir.path("bad.toml");
    std::fs::write(&path, "[servers.files]\ncommand = \"x\"\nrequest_timeout = \"forever\"\n").unwrap();
    for subcommand in ["serve", "check-config"] {
        let output = toolhost(&[subcommand, "--config", path.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(64), "{subcommand}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("bad.toml") && stderr.contains("servers.files.request_timeout") && stderr.contains("\"forever\""),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one message: {stderr}");
    }
    let missing = toolhost(&["serve", "--config", dir.path("absent.toml").to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(64));
    assert!(!dir.path("catalog.db").exists() && !dir.path("toolhost.db").exists(), "nothing was started");
}

#[test]
fn the_shipped_demo_configuration_is_valid() {
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/demo.toml");
    let output = toolhost(&["check-config", "--config", demo]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
}

/// `check-config --probe` starts each server once as the daemon would (in its sandbox), lists
/// its tools and stops it: one that works is counted, one that fails says why in the daemon's
/// words (its exit, its stderr, the fix), a disabled one is not started; exit 1 when one fails.
#[test]
fn check_config_probe_starts_each_server_once_and_says_why_one_fails() {
    use serde_json::json;
    let dir = TestDir::new();
    let works = crate::harness::server_table("works", &dir.script("works", json!({})), "");
    let broken = dir.path("broken.py");
    std::fs::write(&broken, "import helpers_that_are_not_there\n").unwrap();
    let text = format!(
        "[store]\npath = \"catalog.db\"\n\n{works}\n[servers.broken]\ncommand = {:?}\nargs = [{:?}]\n\n[servers.off]\ncommand = {:?}\nenabled = false\n",
        crate::sandbox::PYTHON,
        broken.display().to_string(),
        crate::sandbox::PYTHON,
    );
    let path = dir.path("toolhost.toml");
    std::fs::write(&path, text).unwrap();
    let output = toolhost(&["check-config", "--probe", "--config", path.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{said}{}", String::from_utf8_lossy(&output.stderr));
    assert!(said.lines().any(|line| line.starts_with("works: probe: works: ") && line.contains(" tools, protocol ")), "{said}");
    let fails = said.lines().find(|line| line.starts_with("warning: broken: probe: fails: ")).unwrap_or_else(|| panic!("{said}"));
    assert!(fails.contains("exited with status 1") && fails.contains("No module named 'helpers_that_are_not_there'"), "{fails}");
    assert!(said.lines().any(|line| line == "off: probe: not started: disabled"), "{said}");
    // Nothing it started outlives it.
    assert!(
        std::fs::read_to_string(dir.path("works.pids"))
            .unwrap_or_default()
            .lines()
            .all(|pid| { !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists() })
    );
}

/// `check-config` names the tool globs that gate nothing: a server's `approve` written as
/// another server's qualified name (from the file alone) and, with `--probe`, an entry that
/// matches none of the tools its server serves; entries that do match (by a tool's own name,
/// escaped when served) are not named.
#[test]
fn check_config_names_policy_globs_that_can_never_match() {
    use serde_json::json;
    let dir = TestDir::new();
    let tools_file = dir.path("tools.json");
    let tool = |name: &str| json!({"name": name, "description": "Does it.", "inputSchema": {"type": "object"}});
    std::fs::write(&tools_file, json!([tool("refund.now"), tool("list")]).to_string()).unwrap();
    let pay = crate::harness::server_table(
        "pay",
        &dir.script("pay", json!({"tools_file": tools_file})),
        "approve = [\"refund.now\", \"refund_later\", \"books__close\"]\n",
    );
    let books = crate::harness::server_table("books", &dir.script("books", json!({})), "");
    let access = "[access]\n[[access.agents]]\nname = \"bot\"\nuids = [4242]\nallow = [\"pay__refund.now\", \"pay__nothing*\"]\n";
    let path = dir.path("toolhost.toml");
    std::fs::write(&path, format!("[store]\npath = \"catalog.db\"\n\n{access}\n{pay}\n{books}")).unwrap();

    let output = toolhost(&["check-config", "--config", path.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}{}", String::from_utf8_lossy(&output.stderr));
    let qualified = said.lines().find(|line| line.contains("\"books__close\"")).unwrap_or_else(|| panic!("{said}"));
    assert!(
        qualified.starts_with("warning: pay: servers.pay.approve: ") && qualified.contains("put \"close\" in [servers.books] approve"),
        "{qualified}"
    );
    assert!(!said.contains("refund_later"), "unknowable without the tools: {said}");

    let output = toolhost(&["check-config", "--probe", "--config", path.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}{}", String::from_utf8_lossy(&output.stderr));
    let never: Vec<&str> = said.lines().filter(|line| line.contains("matches none of the tools")).collect();
    assert_eq!(never.len(), 3, "{said}");
    assert!(never.iter().any(|line| line.starts_with("warning: pay: servers.pay.approve: \"refund_later\" ")), "{said}");
    assert!(never.iter().any(|line| line.starts_with("warning: pay: servers.pay.approve: \"books__close\" ")), "{said}");
    assert!(never.iter().any(|line| line.starts_with("warning: pay: access.agents[0] (\"bot\").allow: \"pay__nothing*\" ")), "{said}");
}

/// An entry that shows a server far more than it needs (`cwd = "/"`, a home as a grant) is
/// shown as asked, and `check-config` says what it holds; a grant of a project's directory is
/// not named.
#[test]
fn check_config_names_a_cwd_or_grant_that_shows_a_whole_home_or_the_root() {
    let dir = TestDir::new();
    let project = dir.path("project");
    std::fs::create_dir_all(&project).unwrap();
    let wide = crate::harness::server_table(
        "wide",
        &dir.script("wide", serde_json::json!({})),
        &format!("cwd = \"/\"\nread = [\"/root\", {:?}]\n", project.display().to_string()),
    );
    let path = dir.path("toolhost.toml");
    std::fs::write(&path, format!("[store]\npath = \"catalog.db\"\n\n{wide}")).unwrap();
    let output = toolhost(&["check-config", "--config", path.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}{}", String::from_utf8_lossy(&output.stderr));
    let wide: Vec<&str> = said.lines().filter(|line| line.contains("shows the server all of that directory")).collect();
    assert!(wide.iter().any(|line| line.starts_with("warning: wide: cwd / shows")), "{said}");
    assert!(wide.iter().any(|line| line.starts_with("warning: wide: read /root shows")), "{said}");
    assert_eq!(wide.len(), 2, "the project's directory is not named: {said}");
}
