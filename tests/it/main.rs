//! The integration tests: one binary, real child processes, a real SQLite file.

// Test modules share helpers with `pub`; the binary exports nothing.
#![allow(unreachable_pub)]
// The 100-line limit is for the daemon (src/); a test reads best as one straight script.
#![allow(clippy::too_many_lines)]

mod harness;

mod access;
mod approvals;
mod approvals_visible;
mod audit_chain;
mod audit_fleet;

mod calls;
mod catalog_api;
mod cli;
mod collector;
mod config_cli;
mod console;
mod console_pages;
mod daemon;
mod data_dir;
mod egress;
mod enumeration;
mod fair_share;
mod fleet;
mod hardening;
mod http;
mod http_server;
mod integrity;
mod interop;
mod lifecycle;
mod mcp_clients;
mod mcp_endpoint;
mod modern;
mod mrtr;
mod oauth;
mod real_packages;
mod registry_reach;
mod restart;
mod sandbox;
mod sandbox_life;
mod search;
mod semconv;
mod store_faults;
mod tasks;
mod telemetry;
mod unix_socket;
mod visibility;
mod write_hint;
