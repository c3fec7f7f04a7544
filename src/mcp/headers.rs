//! `x-mcp-header` (SEP-2243, 2026-07-28 over Streamable HTTP): a tool's input schema may name
//! arguments that a client mirrors into `Mcp-Param-NAME` headers. Reading and checking the
//! annotations, and encoding the values. Sans-IO.

use serde_json::{Map, Value};

/// Headers a tool's call carries: `(argument, header name)`, in schema order.
pub type ParamHeaders = Vec<(String, String)>;

/// An `x-mcp-header` annotation that breaks SEP-2243's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderAnnotationError {
    #[error("x-mcp-header of {argument:?} is not a header name token: {annotation}")]
    NotAToken { argument: String, annotation: String },
    #[error("x-mcp-header {0:?} is used twice (header names are case-insensitive)")]
    Repeated(String),
    #[error("x-mcp-header on {0:?}, which is not an integer, string or boolean")]
    NotPrimitive(String),
}

/// The `x-mcp-header` annotations of a tool definition, checked as the spec says: a non-empty
/// RFC 9110 token, unique without regard to case, on a property of type integer, string or
/// boolean, directly under `inputSchema.properties`.
///
/// # Errors
/// Why the tool must be left out of the catalog.
pub fn param_headers(tool: &Value) -> Result<ParamHeaders, HeaderAnnotationError> {
    let Some(properties) = tool.pointer("/inputSchema/properties").and_then(Value::as_object) else { return Ok(Vec::new()) };
    let mut headers: ParamHeaders = Vec::new();
    for (argument, schema) in properties {
        let Some(annotation) = schema.get("x-mcp-header") else { continue };
        let Some(name) = annotation.as_str().filter(|name| !name.is_empty() && name.bytes().all(is_tchar)) else {
            return Err(HeaderAnnotationError::NotAToken { argument: argument.clone(), annotation: annotation.to_string() });
        };
        if headers.iter().any(|(_, other)| other.eq_ignore_ascii_case(name)) {
            return Err(HeaderAnnotationError::Repeated(name.to_owned()));
        }
        if !primitive(schema) {
            return Err(HeaderAnnotationError::NotPrimitive(argument.clone()));
        }
        headers.push((argument.clone(), name.to_owned()));
    }
    Ok(headers)
}

/// The `Mcp-Param-*` headers for these arguments: null or absent arguments send none.
pub fn header_values(headers: &ParamHeaders, arguments: &Map<String, Value>) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(argument, name)| {
            let value = match arguments.get(argument)? {
                Value::Null => return None,
                Value::String(text) => encode(text),
                Value::Bool(flag) => flag.to_string(),
                Value::Number(number) => number.to_string(),
                other => encode(&other.to_string()),
            };
            Some((format!("Mcp-Param-{name}"), value))
        })
        .collect()
}

/// A header value as the 2026-07-28 transport wants it: as is when it is visible ASCII (spaces
/// inside allowed) without surrounding whitespace, otherwise `=?base64?…?=`.
pub fn encode(value: &str) -> String {
    if value.bytes().all(|b| (0x20..0x7f).contains(&b)) && value.trim() == value {
        return value.to_owned();
    }
    use base64::Engine;
    let mut encoded = String::from("=?base64?");
    base64::engine::general_purpose::STANDARD.encode_string(value.as_bytes(), &mut encoded);
    encoded.push_str("?=");
    encoded
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A property whose type is integer, string or boolean (a list of types may add null).
fn primitive(schema: &Value) -> bool {
    let allowed = |kind: &str| matches!(kind, "integer" | "string" | "boolean");
    match schema.get("type") {
        Some(Value::String(kind)) => allowed(kind),
        Some(Value::Array(kinds)) => {
            let kinds: Vec<&str> = kinds.iter().filter_map(Value::as_str).filter(|kind| *kind != "null").collect();
            !kinds.is_empty() && kinds.iter().all(|kind| allowed(kind))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(properties: Value) -> Value {
        json!({"name": "t", "inputSchema": {"type": "object", "properties": properties}})
    }

    #[test]
    fn annotations_are_read_and_checked() {
        let ok = tool(
            json!({"region": {"type": "string", "x-mcp-header": "Region"}, "n": {"type": ["integer", "null"], "x-mcp-header": "N"}, "plain": {"type": "number"}}),
        );
        assert_eq!(param_headers(&ok).unwrap(), [("n".to_owned(), "N".to_owned()), ("region".to_owned(), "Region".to_owned())]);
        for bad in [
            json!({"a": {"type": "string", "x-mcp-header": ""}}),
            json!({"a": {"type": "string", "x-mcp-header": "Bad Name"}}),
            json!({"a": {"type": "string", "x-mcp-header": 7}}),
            json!({"a": {"type": "number", "x-mcp-header": "A"}}),
            json!({"a": {"type": "object", "x-mcp-header": "A"}}),
            json!({"a": {"type": "string", "x-mcp-header": "Dup"}, "b": {"type": "string", "x-mcp-header": "dup"}}),
        ] {
            assert!(param_headers(&tool(bad.clone())).is_err(), "{bad}");
        }
        assert!(param_headers(&json!({"name": "t"})).unwrap().is_empty());
    }

    #[test]
    fn values_are_encoded_as_the_spec_says() {
        let headers = vec![
            ("s".to_owned(), "S".to_owned()),
            ("i".to_owned(), "I".to_owned()),
            ("b".to_owned(), "B".to_owned()),
            ("e".to_owned(), "E".to_owned()),
            ("u".to_owned(), "U".to_owned()),
            ("w".to_owned(), "W".to_owned()),
            ("n".to_owned(), "N".to_owned()),
            ("missing".to_owned(), "M".to_owned()),
        ];
        let arguments = json!({"s": "us west 1", "i": 42, "b": false, "e": "", "u": "Hello, 世界", "w": " padded ", "n": null});
        let values = header_values(&headers, arguments.as_object().unwrap());
        assert_eq!(
            values,
            [
                ("Mcp-Param-S".to_owned(), "us west 1".to_owned()),
                ("Mcp-Param-I".to_owned(), "42".to_owned()),
                ("Mcp-Param-B".to_owned(), "false".to_owned()),
                ("Mcp-Param-E".to_owned(), String::new()),
                ("Mcp-Param-U".to_owned(), "=?base64?SGVsbG8sIOS4lueVjA==?=".to_owned()),
                ("Mcp-Param-W".to_owned(), "=?base64?IHBhZGRlZCA=?=".to_owned()),
            ]
        );
        assert_eq!(encode("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
    }
}
