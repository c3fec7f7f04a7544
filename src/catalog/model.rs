//! The catalog's vocabulary: tool definitions with canonical hashes, listings built from raw
//! pages, and the diff between two generations. No I/O.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, OnceLock};

use serde_json::Value;
use serde_json::value::RawValue;

/// Skipped entries described one by one in a listing; past that they are only counted, so a
/// server that sends a hundred thousand bad entries costs one line, not a hundred thousand.
pub const DIAGNOSTICS_KEPT: usize = 20;

/// One tool as a server defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDef {
    pub name: String,
    /// The whole definition as canonical JSON (object keys sorted, no insignificant whitespace):
    /// every field the server sent, known to toolhost or not.
    pub definition: Arc<str>,
    /// Hex SHA-256 of `definition`.
    pub hash: String,
    /// Fields agents read often, extracted once rather than on every listing; lazily for
    /// definitions loaded from the store, so that a restart serves the catalog at once.
    fields: Arc<OnceLock<ToolFields>>,
}

/// The parts of a definition an agent-facing listing shows, as JSON text where they are JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFields {
    /// `title`, else `annotations.title`, else empty (display falls back to the name).
    pub title: String,
    pub description: String,
    pub input_schema: String,
    /// Empty when the tool declares none.
    pub output_schema: String,
    /// Empty when the tool declares none.
    pub annotations: String,
    /// `execution.taskSupport` is `"required"`: the tool cannot be called without MCP tasks.
    pub task_required: bool,
    /// `execution.taskSupport` is `"optional"` or `"required"`: its server says it may run long.
    pub task_supporting: bool,
}

/// A complete, validated tool set, sorted by name, as one enumeration produced it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub tools: Vec<ToolDef>,
    /// Why entries were skipped (duplicates, entries without a name, unreadable entries): the
    /// first [`DIAGNOSTICS_KEPT`], then one line counting the rest.
    pub diagnostics: Vec<String>,
    /// How many entries were skipped in all.
    pub skipped: usize,
}

/// What changed from one tool set to the next, by tool name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

/// A committed generation of one server's tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    pub number: u64,
    /// Unix milliseconds of the commit.
    pub committed_at_ms: i64,
    /// Sorted by name, unique names.
    pub tools: Vec<ToolDef>,
}

// === impl ToolDef ===

impl ToolDef {
    /// Builds a definition from a tool object exactly as received.
    pub fn from_value(name: String, value: &Value) -> ToolDef {
        let definition = canonical_json(value);
        let hash = sha256_hex(definition.as_bytes());
        ToolDef { name, definition: definition.into(), hash, fields: Arc::new(OnceLock::from(ToolFields::extract(value))) }
    }

    /// Rebuilds a definition read back from the store.
    pub fn from_stored(name: String, definition: String, hash: String) -> ToolDef {
        ToolDef::from_parts(name, definition.into(), hash)
    }

    /// [`ToolDef::from_stored`] with the definition already shared (one allocation fewer).
    pub fn from_parts(name: String, definition: Arc<str>, hash: String) -> ToolDef {
        ToolDef { name, definition, hash, fields: Arc::default() }
    }

    /// Title, description, schemas and annotations, extracted on first use.
    pub fn fields(&self) -> &ToolFields {
        self.fields.get_or_init(|| {
            ToolFields::from_canonical(&self.definition).unwrap_or_else(|| {
                serde_json::from_str::<Value>(&self.definition).map(|value| ToolFields::extract(&value)).unwrap_or_default()
            })
        })
    }
}

// === impl ToolFields ===

/// The members of a definition the listing shows, borrowed from its canonical text.
#[derive(serde::Deserialize)]
struct BorrowedFields<'a> {
    #[serde(borrow, default)]
    title: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    description: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "inputSchema", borrow, default)]
    input_schema: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "outputSchema", borrow, default)]
    output_schema: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    annotations: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    execution: Option<&'a serde_json::value::RawValue>,
}

#[derive(serde::Deserialize)]
struct Titled<'a> {
    #[serde(borrow, default)]
    title: Option<std::borrow::Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct Execution<'a> {
    #[serde(rename = "taskSupport", borrow, default)]
    task_support: Option<std::borrow::Cow<'a, str>>,
}

impl ToolFields {
    /// The fields of a stored definition, which is canonical (RFC 8785) text: every member is
    /// already in canonical form, so schemas and annotations are sliced out, not re-encoded.
    /// `None` for a definition whose shape needs the general path (a title that is not a
    /// string, say).
    pub fn from_canonical(definition: &str) -> Option<ToolFields> {
        let fields: BorrowedFields<'_> = serde_json::from_str(definition).ok()?;
        let raw =
            |value: Option<&serde_json::value::RawValue>| value.map(|v| v.get()).filter(|v| *v != "null").unwrap_or_default().to_owned();
        // As the general path reads them: a string, or empty for null; anything else goes there.
        let text = |value: &serde_json::value::RawValue| match value.get() {
            "null" => Some(String::new()),
            text => serde_json::from_str::<std::borrow::Cow<'_, str>>(text).ok().map(std::borrow::Cow::into_owned),
        };
        let title = match fields.title {
            Some(title) => text(title)?,
            None => match fields.annotations {
                Some(annotations) => {
                    serde_json::from_str::<Titled<'_>>(annotations.get()).ok()?.title.map(|t| t.into_owned()).unwrap_or_default()
                }
                None => String::new(),
            },
        };
        let task_support = match fields.execution {
            Some(execution) => serde_json::from_str::<Execution<'_>>(execution.get()).ok()?.task_support.map(std::borrow::Cow::into_owned),
            None => None,
        };
        let task_required = task_support.as_deref() == Some("required");
        let task_supporting = matches!(task_support.as_deref(), Some("required" | "optional"));
        Some(ToolFields {
            title,
            description: match fields.description {
                Some(description) => text(description)?,
                None => String::new(),
            },
            input_schema: raw(fields.input_schema),
            output_schema: raw(fields.output_schema),
            annotations: raw(fields.annotations),
            task_required,
            task_supporting,
        })
    }

    pub fn extract(value: &Value) -> ToolFields {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
        let json = |v: Option<&Value>| v.filter(|v| !v.is_null()).map(canonical_json).unwrap_or_default();
        let annotations = value.get("annotations");
        // A null title counts as none (the annotations' title then applies).
        let title = value.get("title").filter(|t| !t.is_null()).or_else(|| annotations.and_then(|a| a.get("title")));
        ToolFields {
            title: text(title),
            description: text(value.get("description")),
            input_schema: json(value.get("inputSchema")),
            output_schema: json(value.get("outputSchema")),
            annotations: json(annotations),
            task_required: value.pointer("/execution/taskSupport").and_then(Value::as_str) == Some("required"),
            task_supporting: matches!(value.pointer("/execution/taskSupport").and_then(Value::as_str), Some("required" | "optional")),
        }
    }
}

// === impl Listing ===

impl Listing {
    /// Validates `tools` entries from every page of one enumeration (tests and tools that
    /// already hold values).
    pub fn from_raw(raw_tools: Vec<Value>) -> Listing {
        let raw = raw_tools.iter().filter_map(|value| serde_json::value::to_raw_value(value).ok()).collect();
        Listing::from_entries(define_entries(raw))
    }

    /// Assembles a listing from entries already defined page by page (see [`define_entries`]),
    /// in the order the server sent them. When a name repeats, the first occurrence wins
    /// (deterministic, as the server ordered it) and the rest are reported.
    pub fn from_entries(entries: impl IntoIterator<Item = Result<ToolDef, EntryError>>) -> Listing {
        let mut listing = Listing::default();
        let mut seen = HashSet::new();
        for (idx, entry) in entries.into_iter().enumerate() {
            match entry {
                Err(reason) => listing.skip(format!("entry {idx} skipped: {reason}")),
                Ok(tool) if !seen.insert(tool.name.clone()) => {
                    listing.skip(format!("entry {idx} skipped: duplicate tool name {:?} (the first one is kept)", tool.name));
                }
                Ok(tool) => listing.tools.push(tool),
            }
        }
        if listing.skipped > DIAGNOSTICS_KEPT {
            listing.diagnostics.push(format!("… and {} more entries skipped", listing.skipped - DIAGNOSTICS_KEPT));
        }
        listing.tools.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        listing
    }

    fn skip(&mut self, diagnostic: String) {
        self.skipped += 1;
        if self.diagnostics.len() < DIAGNOSTICS_KEPT {
            self.diagnostics.push(diagnostic);
        }
    }
}

/// Defines each raw entry of one page, or says why it cannot be a tool (not an object with a
/// string `name`, not readable JSON, nested beyond the parser's limit). This is the CPU-heavy
/// part of an enumeration (canonical JSON and hashing), kept separate so that it can run while
/// the next page is fetched.
pub fn define_entries(raw_tools: Vec<Box<RawValue>>) -> Vec<Result<ToolDef, EntryError>> {
    raw_tools.into_iter().map(|raw| define_entry(&raw)).collect()
}

/// Why an entry of a server's `tools/list` is not a tool (the listing keeps the others).
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error("nested too deeply to be read (more than 128 levels)")]
    TooDeep,
    #[error("unreadable: {0}")]
    Unreadable(serde_json::Error),
    #[error("not an object with a string \"name\"")]
    NoName,
    /// Its header annotations break SEP-2243's rules: it could not be called as the spec
    /// requires over HTTP.
    #[error("tool {name:?}: {problem}")]
    HeaderAnnotation { name: String, problem: crate::mcp::headers::HeaderAnnotationError },
}

fn define_entry(raw: &RawValue) -> Result<ToolDef, EntryError> {
    let value: Value = serde_json::from_str(raw.get()).map_err(|error| match error.to_string().contains("recursion limit") {
        true => EntryError::TooDeep,
        false => EntryError::Unreadable(error),
    })?;
    let name = value.get("name").and_then(Value::as_str).ok_or(EntryError::NoName)?;
    crate::mcp::headers::param_headers(&value).map_err(|problem| EntryError::HeaderAnnotation { name: name.to_owned(), problem })?;
    Ok(ToolDef::from_value(name.to_owned(), &value))
}

// === impl Diff ===

impl Diff {
    /// Compares an old tool set (name → hash) with a new one.
    pub fn between(old: &BTreeMap<String, String>, new: &[ToolDef]) -> Diff {
        Diff::between_sorted(old.iter().map(|(name, hash)| (name.as_str(), hash.as_str())), new)
    }

    /// Compares two tool sets that are both sorted by name, in one merge pass.
    pub fn between_sorted<'a>(old: impl IntoIterator<Item = (&'a str, &'a str)>, new: &[ToolDef]) -> Diff {
        let mut diff = Diff::default();
        let mut old = old.into_iter().peekable();
        let mut new = new.iter().peekable();
        loop {
            match (old.peek(), new.peek()) {
                (None, None) => return diff,
                (Some((name, _)), None) => {
                    diff.removed.push((*name).to_owned());
                    old.next();
                }
                (None, Some(tool)) => {
                    diff.added.push(tool.name.clone());
                    new.next();
                }
                (Some((name, hash)), Some(tool)) => match (*name).cmp(tool.name.as_str()) {
                    std::cmp::Ordering::Less => {
                        diff.removed.push((*name).to_owned());
                        old.next();
                    }
                    std::cmp::Ordering::Greater => {
                        diff.added.push(tool.name.clone());
                        new.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if *hash != tool.hash {
                            diff.changed.push(tool.name.clone());
                        }
                        old.next();
                        new.next();
                    }
                },
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

// === impl Generation ===

impl Generation {
    pub fn tool(&self, name: &str) -> Option<&ToolDef> {
        self.position(name).map(|idx| &self.tools[idx])
    }

    /// The index of tool `name` in `tools`.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.tools.binary_search_by(|tool| tool.name.as_str().cmp(name)).ok()
    }

    pub fn hashes(&self) -> BTreeMap<String, String> {
        self.tools.iter().map(|tool| (tool.name.clone(), tool.hash.clone())).collect()
    }
}

/// The RFC 8785 (JCS) canonical form of `value`: keys sorted by UTF-16 code units, numbers as
/// ECMAScript writes them, no insignificant whitespace. Anyone can recompute a definition's hash
/// with any JCS library: SHA-256 over this text.
pub fn canonical_json(value: &Value) -> String {
    // A serde_json value always serialises (no NaN, no non-string keys).
    serde_json_canonicalizer::to_string(value).unwrap_or_default()
}

pub use crate::digest::sha256_hex;

#[cfg(test)]
mod tests {

    #[test]
    fn fields_sliced_from_canonical_text_match_the_general_path() {
        for definition in [
            json!({"name": "a", "description": "d", "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}}),
            json!({"name": "b", "annotations": {"title": "From annotations", "readOnlyHint": true}, "outputSchema": {"type": "object"}}),
            json!({"name": "c", "title": "T", "annotations": {"title": "ignored"}, "execution": {"taskSupport": "required"}}),
            json!({"name": "d", "title": null, "description": null, "inputSchema": null, "annotations": {"title": "x"}}),
            json!({"name": "e", "description": "é \u{1F600} \"quoted\"", "execution": {"taskSupport": "optional"}}),
        ] {
            let canonical = canonical_json(&definition);
            assert_eq!(ToolFields::from_canonical(&canonical), Some(ToolFields::extract(&definition)), "{canonical}");
        }
        // Shapes the fast path leaves to the general one.
        assert_eq!(ToolFields::from_canonical(&canonical_json(&json!({"name": "f", "title": 5}))), None);
        assert_eq!(ToolFields::from_canonical(&canonical_json(&json!({"name": "g", "execution": "yes"}))), None);
    }

    use serde_json::json;

    use super::*;

    #[test]
    fn equal_definitions_hash_equally_whatever_the_key_order() {
        let a =
            ToolDef::from_value("t".into(), &json!({"name": "t", "inputSchema": {"type": "object", "b": 1, "a": [1, {"z": 0, "y": 1}]}}));
        let b: Value =
            serde_json::from_str(r#"{ "inputSchema": {"a": [1, {"y": 1, "z": 0}], "b": 1, "type": "object"}, "name": "t" }"#).unwrap();
        assert_eq!(a, ToolDef::from_value("t".into(), &b));
        assert_eq!(&*a.definition, r#"{"inputSchema":{"a":[1,{"y":1,"z":0}],"b":1,"type":"object"},"name":"t"}"#);
        assert_eq!(a.hash, sha256_hex(a.definition.as_bytes()), "the hash is SHA-256 over the JCS text");
        let c = ToolDef::from_value("t".into(), &json!({"name": "t", "inputSchema": {"type": "object"}, "x-vendor": true}));
        assert_ne!(a.hash, c.hash);
        assert!(c.definition.contains("x-vendor"), "unknown fields are kept");
    }

    #[test]
    fn the_canonical_form_is_rfc_8785() {
        // RFC 8785 §3.2.2 and §3.2.3: numbers as ECMAScript writes them, keys by UTF-16 units.
        let value: Value = serde_json::from_str(
            r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&value),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
        let keys: Value = serde_json::from_str(r#"{"\u20ac":"Euro Sign","\r":"Carriage Return","\ufb33":"Hebrew Letter Dalet With Dagesh","1":"One","\ud83d\ude00":"Emoji: Grinning Face","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis"}"#).unwrap();
        let canonical = canonical_json(&keys);
        let positions: Vec<usize> = ["Carriage Return", "One", "Control", "Latin Small", "Euro Sign", "Emoji", "Hebrew"]
            .iter()
            .map(|needle| canonical.find(needle).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "UTF-16 order: {canonical}");
    }

    #[test]
    fn a_tool_with_invalid_header_annotations_is_left_out_and_the_others_kept() {
        let listing = Listing::from_raw(vec![
            json!({"name": "ok", "inputSchema": {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "Region"}}}}),
            json!({"name": "bad", "inputSchema": {"type": "object", "properties": {"d": {"type": "object", "x-mcp-header": "Data"}}}}),
        ]);
        assert_eq!(listing.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["ok"]);
        assert!(listing.diagnostics[0].contains("x-mcp-header"), "{:?}", listing.diagnostics);
    }

    #[test]
    fn hashes_are_lowercase_hex_sha256() {
        assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn listings_skip_nameless_entries_and_keep_the_first_duplicate() {
        let listing = Listing::from_raw(vec![
            json!({"name": "b", "description": "first"}),
            json!({"name": "a"}),
            json!("not an object"),
            json!({"description": "no name"}),
            json!({"name": "b", "description": "second"}),
        ]);
        let names: Vec<&str> = listing.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(listing.tools[1].definition.contains("first"));
        assert_eq!(listing.diagnostics.len(), 3);
    }

    #[test]
    fn a_tool_nested_too_deeply_is_skipped_and_the_rest_kept() {
        let deep = RawValue::from_string(format!(r#"{{"name":"deep","inputSchema":{}{}}}"#, "[".repeat(300), "]".repeat(300))).unwrap();
        let fine = RawValue::from_string(r#"{"name":"fine"}"#.to_owned()).unwrap();
        let listing = Listing::from_entries(define_entries(vec![deep, fine]));
        assert_eq!(listing.tools.len(), 1);
        assert!(listing.diagnostics[0].contains("nested too deeply"), "{:?}", listing.diagnostics);
    }

    #[test]
    fn skipped_entries_are_counted_past_a_bound() {
        let listing = Listing::from_raw((0..1000).map(|i| json!(i)).collect());
        assert_eq!(listing.skipped, 1000);
        assert_eq!(listing.diagnostics.len(), DIAGNOSTICS_KEPT + 1);
        assert!(listing.diagnostics.last().unwrap().contains("980 more"));
    }

    #[test]
    fn diffs_name_added_removed_and_changed_tools() {
        let old = Listing::from_raw(vec![json!({"name": "keep"}), json!({"name": "gone"}), json!({"name": "edit", "v": 1})]);
        let new = Listing::from_raw(vec![json!({"name": "keep"}), json!({"name": "edit", "v": 2}), json!({"name": "new"})]);
        let old_generation = Generation { number: 1, committed_at_ms: 0, tools: old.tools };
        let diff = Diff::between(&old_generation.hashes(), &new.tools);
        assert_eq!(diff, Diff { added: vec!["new".into()], removed: vec!["gone".into()], changed: vec!["edit".into()] });
        assert!(Diff::between(&old_generation.hashes(), &old_generation.tools).is_empty());
        assert!(old_generation.tool("gone").is_some() && old_generation.tool("nope").is_none());
    }
}
