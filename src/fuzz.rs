//! Property-based fuzzing of every parser of untrusted bytes (proptest, stable toolchain): a
//! server's JSON-RPC lines, its `tools/list` pages through canonicalisation, `tools/call`
//! results, handshakes and task shapes, the SSE decoder, line framing, `_meta` splicing,
//! `x-mcp-header` annotations and values, `WWW-Authenticate` challenges, OAuth token answers,
//! audit records read back from the fleet, configuration files (TOML and desktop JSON), page
//! tokens, qualified names and the Unix socket's HTTP/2 adapter. Beside their parsers: the
//! endpoint's messages (`endpoint::message`), the proxy's request heads (`upstream::egress`),
//! OAuth metadata (`upstream::oauth::discovery`).
//!
//! Each target feeds both raw bytes and inputs built from protocol fragments
//! (`mcp::fuzzing`, shared by every target), and checks more than "no panic" where a property
//! exists. The test suite runs a short campaign; `PROPTEST_CASES=200000 cargo test --release
//! --lib -- fuzz:: without_panicking` runs a long one of every target, the three beside their
//! parsers too (their names end `without_panicking`; FUZZING.md has the figures).

use proptest::prelude::*;
use serde_json::value::RawValue;

use crate::catalog::model::{Listing, canonical_json, define_entries};
use crate::catalog::names::{qualify, server_of};
use crate::door::paging::Position;
use crate::mcp::fuzzing::{MCP, campaign as config, glued_or_any, glued_or_any_bytes};
use crate::mcp::{jsonrpc, modern, sse, tools};

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    glued_or_any_bytes(MCP, 48)
}

fn text() -> impl Strategy<Value = String> {
    glued_or_any(MCP, 48)
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
    fn configuration_files_never_panic_and_errors_name_the_file(body in prop_oneof![text(), glued_or_any(CONFIG, 40)], json in any::<bool>()) {
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
    fn line_framing_does_not_depend_on_read_sizes(stream in bytes(), chunk in 1usize..32, max in 1usize..64) {
        use tokio_util::codec::Decoder;
        // The codec as `FramedRead` drives it: a decode after each read, `decode_eof` at the end.
        let read_all = |chunk: usize| {
            let mut codec = crate::mcp::lines::LineCodec::new(max);
            let mut buffer = bytes::BytesMut::new();
            let mut lines = Vec::new();
            for piece in stream.chunks(chunk) {
                buffer.extend_from_slice(piece);
                while let Some(line) = codec.decode(&mut buffer).expect("decoding") {
                    lines.push(line);
                }
                prop_assert!(buffer.len() <= max + chunk, "the buffer stays bounded");
            }
            while let Some(line) = codec.decode_eof(&mut buffer).expect("decoding") {
                lines.push(line);
            }
            Ok(lines)
        };
        let at_once = read_all(stream.len().max(1))?;
        prop_assert_eq!(read_all(chunk)?, at_once.clone());
        // And each line is the stream's: what is kept is at most `max` bytes, what is thrown
        // away is said with its length, and together they account for every byte.
        let mut total = 0;
        for line in &at_once {
            match line {
                crate::mcp::lines::Line::Complete(line) => { prop_assert!(line.len() <= max); total += line.len(); }
                crate::mcp::lines::Line::Oversized(len) => { prop_assert!(*len > max); total += len; }
                crate::mcp::lines::Line::Eof => prop_assert!(false, "the codec never says Eof"),
            }
        }
        // Every byte but the newlines, less at most one `\r` per line kept.
        let newlines = stream.iter().filter(|&&b| b == b'\n').count();
        let kept = at_once.iter().filter(|line| matches!(line, crate::mcp::lines::Line::Complete(_))).count();
        prop_assert!(total <= stream.len() - newlines && stream.len() - newlines <= total + kept);
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
    glued_or_any(CHALLENGE_FRAGMENTS, 40)
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

/// A tool whose input schema annotates its properties with `x-mcp-header` (SEP-2243): tokens,
/// near-tokens and anything, on properties of every type.
fn annotated_tool() -> impl Strategy<Value = serde_json::Value> {
    let annotation = prop_oneof![
        "[A-Za-z0-9!#$%&'*+.^_`|~-]{0,8}".prop_map(serde_json::Value::from),
        any::<String>().prop_map(serde_json::Value::from),
        json_value(1),
    ];
    let kind = prop::sample::select(&["string", "integer", "boolean", "number", "object", "array"][..]);
    prop::collection::vec(("[a-z]{1,3}", annotation, kind), 0..5).prop_map(|properties| {
        let properties: serde_json::Map<String, serde_json::Value> = properties
            .into_iter()
            .map(|(name, annotation, kind)| (name, serde_json::json!({"type": kind, "x-mcp-header": annotation})))
            .collect();
        serde_json::json!({"name": "t", "inputSchema": {"type": "object", "properties": properties}})
    })
}

/// Pieces of an OAuth token endpoint's answer (RFC 6749 §5.1).
const TOKEN_ANSWER: &[&str] = &[
    "{",
    "}",
    ",",
    ":",
    "null",
    "\"access_token\":",
    "\"token_type\":",
    "\"Bearer\"",
    "\"bearer\"",
    "\"DPoP\"",
    "\"expires_in\":",
    "3600",
    "\"3600\"",
    "-1",
    "0.5",
    "1e308",
    "1e999",
    "\"inf\"",
    "\"NaN\"",
    "\"refresh_token\":",
    "\"scope\":",
    "\"a\"",
    "\"a b\"",
    "\"t\\u0000\"",
    "\"é\"",
];

/// An audit record as another host shipped it to the fleet (or an export holds it): every
/// field the host's to choose, ids near each other or anywhere.
fn chain_record() -> impl Strategy<Value = crate::store::audit_chain::ChainRecord> {
    let id = prop_oneof![-2i64..8, any::<i64>()];
    let text = prop_oneof![Just(String::new()), "[a-f0-9]{0,64}", any::<String>()];
    (id.clone(), id, text.clone(), prop::option::of(text.clone()), prop::option::of(text.clone()), prop::option::of(text)).prop_map(
        |(id, number, word, arguments, prev_hash, hash)| crate::store::audit_chain::ChainRecord {
            id,
            at_ms: number,
            agent: word.clone(),
            caller: word.clone(),
            transport: word.clone(),
            qualified_name: word.clone(),
            server: word.clone(),
            tool: word.clone(),
            generation: number,
            definition_hash: word.clone(),
            outcome: word,
            duration_us: number,
            arguments,
            prev_hash,
            hash,
        },
    )
}

/// A checkpoint as the fleet kept it: a signature that is not the key's, numbers anywhere.
fn checkpoint() -> impl Strategy<Value = crate::store::audit_chain::CheckpointRecord> {
    let number = prop_oneof![-2i64..8, any::<i64>()];
    (number.clone(), number.clone(), number, "[a-f0-9]{0,128}", prop::option::of("[a-f0-9]{0,64}")).prop_map(
        |(id, record_id, records, signature, anchor)| crate::store::audit_chain::CheckpointRecord {
            id,
            record_id,
            head_hash: signature.chars().take(64).collect(),
            records,
            signed_at_ms: id,
            signature,
            anchor,
            kept_by_fleet: true,
        },
    )
}

proptest! {
    #![proptest_config(config())]

    /// A server's `x-mcp-header` annotations and an agent's arguments become HTTP headers: never
    /// a panic, and every header a call carries is a valid name and value, whatever the text.
    #[test]
    fn x_mcp_header_annotations_and_values_make_valid_headers(
        tool in annotated_tool(), values in prop::collection::vec(json_value(2), 5), text in text(), page in text()
    ) {
        if let Ok(page) = serde_json::from_str::<serde_json::Value>(&page) {
            let _ = crate::mcp::headers::param_headers(&page);
        }
        if let Ok(headers) = crate::mcp::headers::param_headers(&tool) {
            let arguments: serde_json::Map<String, serde_json::Value> =
                headers.iter().map(|(argument, _)| argument.clone()).zip(values).collect();
            for (name, value) in crate::mcp::headers::header_values(&headers, &arguments) {
                prop_assert!(http::HeaderName::from_bytes(name.as_bytes()).is_ok(), "{name}");
                prop_assert!(http::HeaderValue::from_str(&value).is_ok(), "{value:?}");
            }
        }
        prop_assert!(http::HeaderValue::from_str(&crate::mcp::headers::encode(&text)).is_ok());
    }

    /// A server's handshake (`initialize`, `server/discover`), its version error and its task
    /// shapes are read without panicking.
    #[test]
    fn handshake_and_task_results_are_read_without_panicking(result in text()) {
        if let Ok(raw) = RawValue::from_string(result) {
            let _ = crate::mcp::lifecycle::check_initialize_result(&raw);
            let _ = modern::check_discover_result(&raw);
            for task in [crate::mcp::tasks::created(&raw), crate::mcp::tasks::state(&raw)].into_iter().flatten() {
                let _ = task.status.is_terminal();
            }
            let error = jsonrpc::RpcError { code: modern::UNSUPPORTED_VERSION, message: String::new(), data: Some(raw) };
            let _ = modern::supported_versions(&error);
        }
    }

    /// An authorization server's token answer: never a panic; a token granted is one a header
    /// can carry, its lifetime at most a year.
    #[test]
    fn oauth_token_answers_are_read_without_panicking(body in prop_oneof![glued_or_any_bytes(TOKEN_ANSWER, 24), bytes()]) {
        if let Ok(granted) = crate::upstream::oauth::flow::granted(&body) {
            let header = format!("Bearer {}", granted.access_token);
            prop_assert!(http::HeaderValue::from_str(&header).is_ok(), "{header:?}");
            prop_assert!(granted.expires_in.is_none_or(|lifetime| lifetime <= std::time::Duration::from_secs(366 * 24 * 3600)));
        }
    }

    /// Records and checkpoints read back from the fleet (another host's) or an export: the
    /// chain check never panics whatever the numbers, and checkpoints not signed by the key
    /// never pass as intact.
    #[test]
    fn audit_records_read_back_are_checked_without_panicking(
        records in prop::collection::vec(chain_record(), 0..6),
        checkpoints in prop::collection::vec(checkpoint(), 0..3),
        anchor in prop::option::of("[a-f0-9]{0,64}"),
        to_head in any::<bool>(),
        line in json_value(3),
    ) {
        use crate::store::audit_chain::{Chain, Verdict, check};
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key();
        let chain = || Chain { anchor: anchor.as_deref(), records: &records, to_head };
        let verdict = check(chain(), &checkpoints, Some(&key));
        if !checkpoints.is_empty() {
            prop_assert!(matches!(verdict, Verdict::Broken { .. }), "{verdict:?}");
        }
        let _ = check(chain(), &[], None);
        let _ = crate::audit::format::parse(&line);
    }
}

/// Pieces of configuration files: TOML, and a desktop client's `mcpServers` JSON.
const CONFIG: &[&str] = &[
    "[servers.a]\n",
    "[servers.\"b c\"]\n",
    "[servers.a.sandbox]\n",
    "command = ",
    "args = ",
    "env = ",
    "url = ",
    "\"x\"",
    "[\"-y\", \"p\"]",
    "{ A = \"${A}\" }",
    "\"${file:/etc/x}\"",
    "\"${cred:k}\"",
    "\"https://h.example/mcp\"",
    "sandbox = \"off\"",
    "network = { allow = [\"h.example:443\"] }",
    "request_timeout = \"5s\"",
    "\"mcpServers\":",
    "\"command\":",
    "\"args\":",
    "\"env\":",
    "\"type\":\"http\"",
    "\"url\":",
    "\"disabled\":true",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "=",
    "\"",
    "\n",
    "1e999",
    "\u{feff}",
    "é",
];

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
