//! What toolhost knows about the Model Context Protocol, without any I/O.
//!
//! `jsonrpc` frames messages; `lifecycle` builds and checks the legacy handshake; `tools` reads
//! `tools/list` pages and `tools/call` results.

// The fuzz targets' inputs and campaign (FUZZING.md), for every module's tests.
#[cfg(test)]
pub(crate) mod fuzzing;
pub mod headers;
pub mod jsonrpc;
pub mod lifecycle;
pub mod lines;
pub mod modern;
pub mod sse;
pub mod tasks;
pub mod tools;
