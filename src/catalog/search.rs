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

/// The FTS5 query for what a searcher typed: its words (letters and digits only, so no FTS5
/// syntax can get through), each as a quoted prefix term, any of which may match. `None` when
/// nothing searchable is left.
pub fn fts_query(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .take(MAX_QUERY_WORDS)
        .map(|word| format!("\"{}\"*", word.to_lowercase()))
        .collect();
    (!words.is_empty()).then(|| words.join(" OR "))
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
        assert_eq!(fts_query("read a File").as_deref(), Some(r#""read"* OR "a"* OR "file"*"#));
        assert_eq!(fts_query(r#"x" OR NEAR(a b) * ( "#).as_deref(), Some(r#""x"* OR "or"* OR "near"* OR "a"* OR "b"*"#));
        assert_eq!(fts_query("  *** () \"\" "), None);
        assert_eq!(fts_query(&"w ".repeat(100)).unwrap().matches('*').count(), MAX_QUERY_WORDS);
    }
}
