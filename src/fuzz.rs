//! Property-based fuzzing of every parser of untrusted bytes (proptest, stable toolchain): JSON-RPC
//! line classification, the SSE decoder, line framing, `tools/list` pages through
//! canonicalisation, `_meta` splicing, configuration files, page tokens, qualified names and
//! `WWW-Authenticate` challenges (the endpoint's messages: `endpoint::message`'s own tests).
//!
//! Each target feeds both raw bytes and inputs built from protocol fragments (which reach much
//! deeper than random bytes), and checks more than "no panic" where a property exists. The test
//! suite runs a short campaign; `PROPTEST_CASES=200000 cargo test --release --lib fuzz::` runs a
//! long one (FUZZING.md has the figures).

use proptest::prelude::*;
use serde_json::value::RawValue;

use crate::catalog::model::{Listing, canonical_json, define_entries};
use crate::catalog::names::{qualify, server_of};
use crate::door::paging::Position;
use crate::mcp::{jsonrpc, modern, sse, tools};

/// Cases per target in the test suite's short campaign, unless `PROPTEST_CASES` says otherwise.
const SHORT_CAMPAIGN: u32 = 512;

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(SHORT_CAMPAIGN);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// Pieces of MCP and JSON-RPC text, glued together at random: mostly well-formed prefixes with
/// the odd broken joint, which is where parsers go wrong.
const FRAGMENTS: &[&str] = &[
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
    "1e999",
    "18446744073709551616",
    "-9223372036854775809",
    "0.1",
    "\"jsonrpc\":\"2.0\"",
    "\"id\":",
    "\"id\":1",
    "\"id\":\"x\"",
    "\"id\":null",
    "\"method\":",
    "\"method\":\"tools/list\"",
    "\"method\":\"notifications/tools/list_changed\"",
    "\"method\":\"ping\"",
    "\"result\":",
    "\"error\":",
    "\"code\":-32601",
    "\"message\":\"m\"",
    "\"params\":",
    "\"_meta\":",
    "\"tools\":",
    "\"name\":",
    "\"name\":\"t\"",
    "\"inputSchema\":",
    "\"nextCursor\":",
    "\"nextCursor\":\"\"",
    "\"ttlMs\":",
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

fn fragments() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..48).prop_map(|parts| parts.concat())
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![prop::collection::vec(any::<u8>(), 0..512), fragments().prop_map(String::into_bytes)]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), fragments()]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn jsonrpc_lines_are_classified_without_panicking(line in bytes()) {
        let _ = jsonrpc::parse_line(&line);
    }

    #[test]
    fn sse_events_do_not_depend_on_how_the_stream_is_chunked(stream in bytes(), split in 1usize..64) {
        let mut whole = sse::Decoder::default();
        let at_once = whole.feed(&stream, 1 << 20);
        let mut chunked = sse::Decoder::default();
        let mut pieces = Vec::new();
        let mut failed = false;
        for chunk in stream.chunks(split) {
            match chunked.feed(chunk, 1 << 20) {
                Ok(events) => pieces.extend(events),
                Err(_) => failed = true,
            }
        }
        if let (Ok(events), false) = (at_once, failed) {
            prop_assert_eq!(events, pieces);
            prop_assert_eq!(whole.last_event_id, chunked.last_event_id);
        }
    }

    #[test]
    fn tool_pages_are_read_and_canonicalised_without_panicking(page in text()) {
        if let Ok(raw) = RawValue::from_string(page) {
            let _ = tools::peek_page(&raw);
            let _ = tools::parse_call_result(&raw);
            if let Ok(page) = tools::parse_list_page(&raw) {
                let listing = Listing::from_entries(define_entries(page.tools));
                for tool in &listing.tools {
                    // The canonical form is a fixed point: hashing it again changes nothing.
                    let value: serde_json::Value = serde_json::from_str(&tool.definition).expect("canonical JSON parses");
                    prop_assert_eq!(canonical_json(&value), tool.definition.to_string());
                }
            }
        }
    }

    #[test]
    fn generated_tool_definitions_canonicalise_to_a_fixed_point(value in json_value(4)) {
        let tool = serde_json::json!({"name": "t", "inputSchema": value});
        let canonical = canonical_json(&tool);
        let again: serde_json::Value = serde_json::from_str(&canonical).expect("canonical JSON parses");
        prop_assert_eq!(canonical_json(&again), canonical);
    }

    #[test]
    fn meta_splicing_keeps_every_other_member(params in text()) {
        let meta = modern::request_meta(modern::VERSION);
        if let Ok(raw) = RawValue::from_string(params)
            && let Some(merged) = modern::with_meta(Some(&raw), &meta)
        {
            let merged: serde_json::Map<String, serde_json::Value> = serde_json::from_str(merged.get()).expect("an object comes out");
            let original: serde_json::Map<String, serde_json::Value> = serde_json::from_str(raw.get()).expect("an object went in");
            for (key, value) in &original {
                if key != "_meta" {
                    prop_assert_eq!(merged.get(key), Some(value));
                }
            }
            prop_assert!(merged["_meta"]["io.modelcontextprotocol/protocolVersion"] == modern::VERSION || original.contains_key("_meta"));
        }
    }

    #[test]
    fn configuration_files_never_panic_and_errors_name_the_file(body in text(), json in any::<bool>()) {
        let file = std::path::Path::new(if json { "/etc/toolhost/servers.json" } else { "/etc/toolhost/toolhost.toml" });
        if let Err(error) = crate::config::Config::parse(file, &body) {
            prop_assert!(error.to_string().starts_with(&file.display().to_string()));
        }
    }

    #[test]
    fn configuration_values_never_panic(key in prop::sample::select(CONFIG_KEYS), value in text()) {
        let body = format!("[servers.a]\ncommand = \"x\"\n{key} = {value:?}\n");
        let _ = crate::config::Config::parse(std::path::Path::new("/etc/toolhost/toolhost.toml"), &body);
    }

    #[test]
    fn page_tokens_round_trip_and_garbage_is_refused_quietly(
        revision in any::<u64>(), caller in text(), server in any::<usize>(), tool in any::<usize>(), garbage in text()
    ) {
        let position = Position { revision, server, tool };
        let binding = crate::door::paging::Binding::of(&[&caller]);
        let token = binding.token(position);
        prop_assert_eq!(binding.resume(&token), Ok(position));
        let _ = binding.resume(&garbage);
    }

    #[test]
    fn qualified_names_fit_and_map_back_to_their_server(server in "[a-z][a-z0-9-]{0,31}", tool in text()) {
        let qualified = qualify(&server, &tool);
        prop_assert!(qualified.len() <= 64 || server.len() + 2 + tool.len() > 64 && qualified.len() <= server.len() + 11);
        prop_assert_eq!(server_of(&qualified), Some(server.as_str()));
        prop_assert_eq!(qualify(&server, &tool), qualified, "deterministic");
        let _ = server_of(&tool);
    }

    #[test]
    fn line_framing_does_not_depend_on_read_sizes(stream in bytes(), capacity in 1usize..32, max in 1usize..64) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        let read_all = |capacity: usize| {
            runtime.block_on(async {
                let mut reader = tokio::io::BufReader::with_capacity(capacity, stream.as_slice());
                let mut buf = Vec::new();
                let mut lines = Vec::new();
                loop {
                    let line = crate::mcp::lines::read_line(&mut reader, &mut buf, max).await.expect("reading a slice");
                    if line == crate::mcp::lines::Line::Eof {
                        return lines;
                    }
                    lines.push((format!("{line:?}"), buf.clone()));
                }
            })
        };
        prop_assert_eq!(read_all(capacity), read_all(4096));
    }
}

/// An HTTP/2 client preface followed by frames of any type, flags and payload (HEADERS among them,
/// with HPACK bytes that may or may not decode).
fn http2_stream() -> impl Strategy<Value = Vec<u8>> {
    let frame = (prop::sample::select(&[0u8, 1, 1, 1, 4, 8, 9, 0xff][..]), any::<u8>(), 0u32..8, prop::collection::vec(any::<u8>(), 0..64));
    prop::collection::vec(frame, 0..12).prop_map(|frames| {
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        for (kind, flags, stream, payload) in frames {
            let len = (payload.len() as u32).to_be_bytes();
            out.extend_from_slice(&[len[1], len[2], len[3], kind, flags]);
            out.extend_from_slice(&stream.to_be_bytes());
            out.extend_from_slice(&payload);
        }
        out
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn the_authority_adapter_never_panics_and_never_loses_bytes_it_does_not_rewrite(
        stream in prop_oneof![http2_stream(), bytes()], chunk in 1usize..40
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let out = runtime.block_on(async {
            let (mut client, server) = tokio::io::duplex(1 << 20);
            for piece in stream.chunks(chunk) {
                client.write_all(piece).await.expect("write");
            }
            drop(client);
            let mut fixed = crate::api::authority::AuthorityFix::new(server);
            let mut out = Vec::new();
            fixed.read_to_end(&mut out).await.expect("read");
            out
        });
        // Without a header block to rewrite (random HPACK rarely decodes), every byte comes out.
        if out.len() != stream.len() {
            prop_assert!(stream.windows(4).any(|w| w[3] == 1), "only a HEADERS frame can change the stream");
        }
    }
}

/// Pieces of `WWW-Authenticate` values: schemes, parameters, quoting and its escapes.
const CHALLENGE_FRAGMENTS: &[&str] = &[
    "Bearer",
    "bearer",
    "Basic",
    "DPoP",
    " ",
    ",",
    "=",
    "\"",
    "\\",
    "realm=",
    "scope=",
    "error=",
    "resource_metadata=",
    "\"https://a.example/.well-known/oauth-protected-resource\"",
    "\"read write\"",
    "invalid_token",
    "\u{0}",
    "\u{1b}[2J",
    "é",
    "\r\n",
];

fn challenge() -> impl Strategy<Value = String> {
    let pieces = prop::collection::vec(prop::sample::select(CHALLENGE_FRAGMENTS), 0..40).prop_map(|parts| parts.concat());
    prop_oneof![pieces, any::<String>()]
}

proptest! {
    #![proptest_config(config())]

    /// A `WWW-Authenticate` value comes from the remote server: whatever it holds, the parse
    /// never panics, and what it finds was in the header.
    #[test]
    fn www_authenticate_challenges_are_read_without_panicking(header in challenge()) {
        if let Some(found) = crate::upstream::oauth::Challenge::parse(&header) {
            prop_assert!(header.to_ascii_lowercase().contains("bearer"));
            for value in [&found.scope, &found.error, &found.resource_metadata].into_iter().flatten() {
                prop_assert!(value.len() <= header.len());
            }
        }
    }
}

/// Keys whose values are parsed (durations, numbers, enums, paths).
const CONFIG_KEYS: &[&str] = &[
    "request_timeout",
    "enumeration_timeout",
    "shutdown_grace",
    "restart.initial_backoff",
    "restart.max_backoff",
    "restart.stable_after",
    "protocol",
    "cwd",
    "type",
];

/// Arbitrary JSON values up to `depth`, with the awkward numbers and strings.
fn json_value(depth: u32) -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(depth, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
            prop::collection::btree_map(any::<String>(), inner, 0..8).prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}
