//! toolhost: one trustworthy view of the tools a host's MCP servers offer.
//!
//! See ARCHITECTURE.md for the codemap and the invariants. In short:
//!
//! - `config`: the typed configuration, loaded and validated before anything starts.
//! - `mcp`: protocol knowledge without I/O (JSON-RPC framing, the handshake, tools payloads).
//! - `upstream`: sessions with MCP servers (stdio children); knows nothing of the catalog.
//! - `catalog`: tool definitions, generations, diffs, and their SQLite store.
//! - `supervisor`: one worker per server; the live registry of states and generations.
//! - `app`: the composition root that wires the rest and owns shutdown.

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
pub mod supervisor;
pub mod systemd;
pub mod telemetry;
pub mod tls_client;
pub mod upstream;
