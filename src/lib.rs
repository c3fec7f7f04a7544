//! toolhost: one trustworthy view of the tools a host's MCP servers offer.
//!
//! ARCHITECTURE.md is the map: each module in one line, each invariant with the test that holds
//! it. The modules by layer, lowest first (a module names only modules of lower layers, which
//! `.ci/import-cycles` checks):
//!
//! - leaves: `mcp` (the protocol without I/O), `secrets`, `digest`, `deadline`, `faults`,
//!   `sandbox` (the servers' sandbox), `signals`, `systemd`, `instance`, `tls_client`;
//!   `oauth_core`.
//! - `config` (the typed configuration), `telemetry` (logs, traces, metrics), `listen` (the
//!   doors' sockets and per-peer shares).
//! - `catalog` (definitions, listings, diffs), then `store` (the SQLite repositories).
//! - `access` (who a caller is and what it may use), `upstream` (sessions with MCP servers).
//! - `registry` (the live, immutable snapshots), then `supervisor` (a worker per server) and
//!   `audit` (the signed trail and its exports), then `calls` (the one call path).
//! - `door` (what the front doors share) and `fleet` (the shared PostgreSQL store).
//! - the front doors: `api` (gRPC), `endpoint` (MCP), `console` (HTML).
//! - `app` (the composition root, which owns shutdown), `fuzz` (test-only targets), then `cli`.

pub mod access;
pub mod api;
pub mod app;
pub mod audit;
pub mod calls;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod console;
pub mod deadline;
pub mod digest;
pub mod door;
pub mod endpoint;
pub mod faults;
pub mod fleet;
#[cfg(test)]
mod fuzz;
pub mod instance;
pub mod listen;
pub mod mcp;
pub mod oauth_core;
pub mod registry;
pub mod sandbox;
pub mod secrets;
pub mod signals;
pub mod store;
pub mod supervisor;
pub mod systemd;
pub mod telemetry;
pub mod tls_client;
pub mod upstream;
