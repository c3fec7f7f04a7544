//! Test support for the fuzz targets (FUZZING.md), in one place: a campaign's length, and inputs
//! glued together from protocol fragments (well-formed prefixes with broken joints, which reach
//! deeper into a parser than random bytes do) or anything at all. A leaf that names nothing of
//! toolhost's, so that every module's tests may use it, the doors' too.

use proptest::prelude::*;

/// Cases per target in the test suite's short campaign, unless `PROPTEST_CASES` says otherwise.
pub(crate) const SHORT_CAMPAIGN: u32 = 512;

/// A fuzz target's configuration: [`SHORT_CAMPAIGN`] cases, or `PROPTEST_CASES`; a failure is
/// printed shrunk, never written into the tree.
pub(crate) fn campaign() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(SHORT_CAMPAIGN);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// Up to `most` of `pieces`, glued at random.
pub(crate) fn glued(pieces: &'static [&'static str], most: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(pieces), 0..most).prop_map(|parts| parts.concat())
}

/// Glued `pieces`, or any string at all.
pub(crate) fn glued_or_any(pieces: &'static [&'static str], most: usize) -> impl Strategy<Value = String> {
    prop_oneof![glued(pieces, most), any::<String>()]
}

/// Glued `pieces` as bytes, or any bytes at all (up to 512).
pub(crate) fn glued_or_any_bytes(pieces: &'static [&'static str], most: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![glued(pieces, most).prop_map(String::into_bytes), prop::collection::vec(any::<u8>(), 0..512)]
}

/// Pieces of MCP and JSON-RPC messages (both eras, both directions) and of SSE streams.
pub(crate) const MCP: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "\\u0000",
    "\\ud800",
    "null",
    "true",
    "-0",
    "0.1",
    "1.5",
    "1e999",
    "18446744073709551616",
    "-9223372036854775809",
    "\"jsonrpc\":\"2.0\"",
    "\"id\":",
    "\"id\":1",
    "\"id\":\"x\"",
    "\"id\":null",
    "\"method\":",
    "\"method\":\"tools/list\"",
    "\"method\":\"tools/call\"",
    "\"method\":\"initialize\"",
    "\"method\":\"notifications/tools/list_changed\"",
    "\"method\":\"ping\"",
    "\"result\":",
    "\"error\":",
    "\"code\":-32601",
    "\"message\":\"m\"",
    "\"params\":",
    "\"_meta\":",
    "\"progressToken\":",
    "\"io.modelcontextprotocol/protocolVersion\":",
    "\"2026-07-28\"",
    "\"2025-06-18\"",
    "\"protocolVersion\":",
    "\"capabilities\":",
    "\"extensions\":",
    "\"serverInfo\":",
    "\"tools\":",
    "\"name\":",
    "\"name\":\"t\"",
    "\"arguments\":",
    "\"cursor\":",
    "\"inputSchema\":",
    "\"properties\":",
    "\"x-mcp-header\":",
    "\"type\":\"string\"",
    "\"nextCursor\":",
    "\"nextCursor\":\"\"",
    "\"ttlMs\":",
    "\"task\":{\"ttl\":",
    "\"taskId\":",
    "\"status\":\"working\"",
    "\"status\":\"completed\"",
    "\"pollInterval\":",
    "\"inputResponses\":",
    "\"requestState\":",
    "\"resultType\":\"complete\"",
    "\"resultType\":\"input_required\"",
    "\"content\":[]",
    "\"isError\":true",
    "\"é\"",
    "\u{202e}",
    "\u{e0041}",
    " ",
    "\n",
    "\r",
    "\r\n",
    "data: ",
    "event: message",
    "id: 7",
    "retry: 99999999999999999999",
    ": ping",
    "\u{feff}",
];
