//! What the full-text index holds of a tool, and how a searcher's words become an FTS5 query.
//! No I/O: `store` keeps the index, in the same transaction as the generations.

use serde_json::Value;

use crate::catalog::model::ToolDef;
use crate::catalog::names;

/// The most words of a query that are searched for.
const MAX_QUERY_WORDS: usize = 16;
/// Property names and descriptions indexed per tool (a schema can be huge).
const MAX_PROPERTIES: usize = 64;

/// The indexed text of one tool version, one field per FTS5 column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchDoc {
    pub qualified: String,
    pub original: String,
    pub title: String,
    pub description: String,
    /// The input schema's top-level property names and descriptions.
    pub properties: String,
}

impl SearchDoc {
    pub fn of(server: &str, tool: &ToolDef) -> SearchDoc {
        let fields = tool.fields();
        let mut properties = String::new();
        if let Ok(Value::Object(schema)) = serde_json::from_str::<Value>(&fields.input_schema)
            && let Some(Value::Object(props)) = schema.get("properties")
        {
            for (name, property) in props.iter().take(MAX_PROPERTIES) {
                properties.push_str(&words_of_name(name));
                properties.push(' ');
                if let Some(description) = property.get("description").and_then(Value::as_str) {
                    properties.push_str(description);
                    properties.push(' ');
                }
            }
        }
        SearchDoc {
            qualified: words_of_name(&names::qualify(server, &tool.name)),
            original: words_of_name(&tool.name),
            title: fields.title.clone(),
            description: fields.description.clone(),
            properties,
        }
    }
}

/// A name as words: `readFile`, `read_file`, `read-file` and `read.file` all become `read file`
/// (the original kept too, so that an exact name still matches).
fn words_of_name(name: &str) -> String {
    let mut words = String::with_capacity(name.len() * 2 + 1);
    words.push_str(name);
    words.push(' ');
    let mut previous_lower = false;
    for c in name.chars() {
        if c.is_uppercase() && previous_lower {
            words.push(' ');
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        words.push(if c.is_alphanumeric() { c } else { ' ' });
    }
    words
}

/// Words too common to say anything about a tool.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "for", "from", "i", "in", "into", "is", "it", "me", "my", "of", "on",
    "or", "please", "some", "that", "the", "this", "to", "want", "we", "what", "with", "you",
];

/// The FTS5 queries for what a searcher typed, in rounds from the strictest: every word must
/// match; then (for three words or more) every word but one, each word left out in turn; then
/// any word. A round's matches are merged and the first round that matches anything answers:
/// relaxing a query one word at a time keeps its sense and stays cheap, where matching any word
/// ranks every tool that has one common word (about a microsecond and a half each at 100,000
/// tools). Words are letters and digits only (no FTS5 syntax gets through), each a quoted term,
/// the last one also a prefix for a searcher still typing; stop words are left out. Empty when
/// nothing searchable is left.
pub fn fts_queries(text: &str) -> Vec<Vec<String>> {
    let terms = terms(text);
    if terms.is_empty() {
        return Vec::new();
    }
    let mut rounds = vec![vec![terms.join(" AND ")]];
    if terms.len() >= 3 {
        let without = |skip: usize| terms.iter().enumerate().filter(|(idx, _)| *idx != skip).map(|(_, t)| t.as_str()).collect::<Vec<_>>();
        rounds.push((0..terms.len()).map(|skip| without(skip).join(" AND ")).collect());
    }
    if terms.len() >= 2 {
        rounds.push(vec![terms.join(" OR ")]);
    }
    rounds
}

fn terms(text: &str) -> Vec<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|word| !word.is_empty() && !STOP_WORDS.contains(&word.as_str()))
        .take(MAX_QUERY_WORDS)
        .collect();
    let last = words.len().saturating_sub(1);
    words
        .iter()
        .enumerate()
        .map(|(idx, word)| if idx == last && word.chars().count() >= 3 { format!("\"{word}\"*") } else { format!("\"{word}\"") })
        .collect()
}

/// The FTS5 query that matches any of the searcher's words; see [`fts_queries`].
pub fn fts_query(text: &str) -> Option<String> {
    let terms = terms(text);
    (!terms.is_empty()).then(|| terms.join(" OR "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn documents_split_names_and_keep_schema_words() {
        let tool = ToolDef::from_value(
            "readFile".into(),
            &json!({"name": "readFile", "description": "Reads a file.", "inputSchema": {"type": "object",
                "properties": {"file_path": {"type": "string", "description": "Where the file is"}}}}),
        );
        let doc = SearchDoc::of("files", &tool);
        assert!(doc.original.contains("read File") && doc.qualified.contains("files  read File"), "{doc:?}");
        assert!(doc.properties.contains("file path") && doc.properties.contains("Where the file is"));
        assert_eq!(doc.description, "Reads a file.");
    }

    #[test]
    fn queries_carry_words_and_never_syntax() {
        assert_eq!(fts_query("read a File").as_deref(), Some(r#""read" OR "file"*"#));
        assert_eq!(fts_query(r#"x" OR NEAR(abc b) * ( "#).as_deref(), Some(r#""x" OR "near" OR "abc" OR "b""#));
        assert_eq!(fts_query("  *** () \"\" "), None);
        assert_eq!(fts_query("the a of"), None, "stop words only");
        assert_eq!(fts_query(&"word ".repeat(100)).unwrap().matches(" OR ").count(), MAX_QUERY_WORDS - 1);
        assert_eq!(fts_queries("read file"), [vec![r#""read" AND "file"*"#], vec![r#""read" OR "file"*"#]]);
        assert_eq!(fts_queries("read"), [vec![r#""read"*"#]]);
        let rounds = fts_queries("time in tokyo timezone");
        assert_eq!(rounds[1], [r#""tokyo" AND "timezone"*"#, r#""time" AND "timezone"*"#, r#""time" AND "tokyo""#]);
        assert_eq!(rounds.len(), 3);
    }
}
