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
