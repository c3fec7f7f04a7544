//! What the sandbox costs a package launcher's start, cache warm: the filesystem server through
//! `npx -y` (pinned), started, handshaken and listed, sandboxed (its own home, npm's registry
//! through the daemon's proxy) against the same entry with `sandbox = "off"`, interleaved so
//! both see the same machine. Each started once first, to fill its cache.

use std::sync::Arc;
use std::time::Duration;

use toolhost::config::Config;
use toolhost::supervisor::probe::{Probed, probe};
use toolhost::upstream::reaper::Reaper;

use crate::scenarios::{bench_dir, percentile};

const ROUNDS: usize = 10;

pub async fn npx() {
    if !std::path::Path::new("/usr/bin/npx").exists() {
        println!("skipped: no /usr/bin/npx");
        return;
    }
    let dir = bench_dir("npx");
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).expect("the bench directory");
    let entry = |extra: &str| {
        format!(
            "[servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-filesystem@2026.8.31\", {:?}]\nrequest_timeout = \"120s\"\n{extra}\n",
            shared.display().to_string()
        )
    };
    let config = |name: &str, extra: &str| {
        let text = format!("[store]\npath = \"{name}/catalog.db\"\n\n{}", entry(extra));
        Config::parse(&dir.join(format!("{name}.toml")), &text).expect("bench config")
    };
    let (sandboxed, unsandboxed) = (config("sandboxed", ""), config("off", "sandbox = \"off\""));
    let reaper = Arc::new(Reaper::spawn(std::path::Path::new(env!("CARGO_BIN_EXE_toolhost"))).expect("the orphan guard"));
    let mut times: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for round in 0..=ROUNDS {
        for (idx, config) in [&sandboxed, &unsandboxed].into_iter().enumerate() {
            match probe("files", &config.servers["files"], reaper.clone()).await {
                // The first round fills the caches.
                Probed::Works { took, .. } if round > 0 => times[idx].push(took),
                Probed::Works { .. } => {}
                other => {
                    println!("skipped: the server did not start ({other:?})");
                    reaper.stop().await;
                    return;
                }
            }
        }
    }
    reaper.stop().await;
    for list in &mut times {
        list.sort();
    }
    let ms = |d: Duration| format!("{:.0}", d.as_secs_f64() * 1000.0);
    println!("{ROUNDS} starts each, cache warm, interleaved: start, handshake and full listing.\n");
    println!("| entry | p50 ms | min ms | max ms |");
    println!("|---|---:|---:|---:|");
    for (name, list) in [("sandboxed (default: home, registry through the proxy)", &times[0]), ("`sandbox = \"off\"`", &times[1])] {
        println!("| {name} | {} | {} | {} |", ms(percentile(list, 0.5)), ms(list[0]), ms(list[list.len() - 1]));
    }
    let ratio = percentile(&times[0], 0.5).as_secs_f64() / percentile(&times[1], 0.5).as_secs_f64();
    println!("\nsandboxed / unsandboxed at p50: {ratio:.2}×");
    let _ = std::fs::remove_dir_all(&dir);
}
