//! `tools/list` pages and `tools/call` results, read without losing a field.

use serde::Deserialize;
use serde_json::value::RawValue;

/// One `tools/list` result page.
#[derive(Debug)]
pub struct ListPage {
    /// Each entry exactly as the server sent it, unparsed (reading raw entries has no nesting
    /// limit, so one absurdly deep entry cannot fail the page); validated by the enumerator.
    pub tools: Vec<Box<RawValue>>,
    /// `None` ends the listing. `Some("")` continues it (an empty cursor is a valid cursor).
    pub next_cursor: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawListPage {
    tools: Vec<Box<RawValue>>,
    #[serde(default)]
    next_cursor: Option<String>,
}

/// What is wrong with a server's result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResultError {
    /// Not the shape the method's result has (the JSON parser's words).
    #[error("{0}")]
    Shape(String),
    #[error("`tools` is not an array")]
    ToolsNotAnArray,
    #[error("resultType {0:?} is not one toolhost knows here")]
    UnknownResultType(String),
    #[error("input_required without an inputRequests object")]
    NoInputRequests,
}

/// Reads a `tools/list` result.
///
/// # Errors
/// A description of what is wrong when the result is not a `ListToolsResult`.
pub fn parse_list_page(result: &RawValue) -> Result<ListPage, ResultError> {
    let page: RawListPage = serde_json::from_str(result.get()).map_err(|err| ResultError::Shape(err.to_string()))?;
    Ok(ListPage { tools: page.tools, next_cursor: page.next_cursor })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ShallowListPage<'a> {
    #[serde(borrow)]
    tools: &'a RawValue,
    #[serde(default)]
    next_cursor: Option<String>,
    #[serde(default)]
    ttl_ms: Option<i64>,
    #[serde(default)]
    result_type: Option<String>,
    #[serde(default)]
    cache_scope: Option<String>,
}

/// What the enumerator needs from a page before its tools are processed.
#[derive(Debug, PartialEq, Eq)]
pub struct PagePeek {
    pub next_cursor: Option<String>,
    /// 2026-07-28 freshness hint; negative counts as 0, absent as "none given".
    pub ttl_ms: Option<u64>,
    /// `cacheScope: "private"`: the listing is only for the authorization context that got it.
    pub private: bool,
}

/// Reads a page's cursor and `ttlMs`, checks `tools` is an array and `resultType` (absent means
/// complete; anything else is not a listing).
///
/// # Errors
/// A description of what is wrong.
pub fn peek_page(result: &RawValue) -> Result<PagePeek, ResultError> {
    let page: ShallowListPage<'_> = serde_json::from_str(result.get()).map_err(|err| ResultError::Shape(err.to_string()))?;
    if !page.tools.get().starts_with('[') {
        return Err(ResultError::ToolsNotAnArray);
    }
    match page.result_type.as_deref() {
        None | Some("complete") => {}
        Some(other) => return Err(ResultError::UnknownResultType(other.to_owned())),
    }
    Ok(PagePeek {
        next_cursor: page.next_cursor,
        ttl_ms: page.ttl_ms.map(|ttl| u64::try_from(ttl).unwrap_or(0)),
        private: page.cache_scope.as_deref() == Some("private"),
    })
}

/// The `params` of a `tools/list` request for the page after `cursor` (or the first page).
pub fn list_params(cursor: Option<&str>) -> Option<Box<RawValue>> {
    let cursor = cursor?;
    let json = serde_json::json!({ "cursor": cursor }).to_string();
    RawValue::from_string(json).ok()
}

/// A `tools/call` result, with its payload kept as raw JSON for the agent.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The `content` array as received (`[]` when the server left it out).
    pub content: Box<RawValue>,
    pub structured_content: Option<Box<RawValue>>,
    pub is_error: bool,
    /// `resultType: "input_required"` (2026-07-28): the call is not finished; the server asks
    /// these questions first.
    pub input_required: Option<InputRequired>,
}

impl CallOutcome {
    /// How the call came out, as the audit trail and the metrics name it: `ok`, `tool_error`
    /// (`isError`), or `input_required` (not finished yet).
    pub fn label(&self) -> &'static str {
        match (&self.input_required, self.is_error) {
            (Some(_), _) => "input_required",
            (None, true) => "tool_error",
            (None, false) => "ok",
        }
    }
}

/// What a server needs before it can finish a call (SEP-2322).
#[derive(Debug, Clone)]
pub struct InputRequired {
    /// `inputRequests`: a JSON object of key → `{method, params}`, as received.
    pub requests: Box<RawValue>,
    /// `requestState`, exactly as received, to be echoed on the retry; `None` when absent.
    pub request_state: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawCallResult {
    #[serde(default)]
    content: Option<Box<RawValue>>,
    #[serde(default)]
    structured_content: Option<Box<RawValue>>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(default)]
    result_type: Option<String>,
    #[serde(default)]
    input_requests: Option<Box<RawValue>>,
    #[serde(default)]
    request_state: Option<Box<RawValue>>,
}

/// Reads a `tools/call` result: complete (a `resultType` left out means complete), or
/// `input_required` with its questions and state.
///
/// # Errors
/// A [`ResultError`] when the result is neither.
pub fn parse_call_result(result: &RawValue) -> Result<CallOutcome, ResultError> {
    let raw: RawCallResult = serde_json::from_str(result.get()).map_err(|err| ResultError::Shape(err.to_string()))?;
    let input_required = match raw.result_type.as_deref() {
        None | Some("complete") => None,
        Some("input_required") => {
            let requests = raw.input_requests.filter(|r| r.get().starts_with('{')).ok_or(ResultError::NoInputRequests)?;
            Some(InputRequired { requests, request_state: raw.request_state.filter(|state| state.get() != "null") })
        }
        Some(other) => return Err(ResultError::UnknownResultType(other.to_owned())),
    };
    let content = match raw.content {
        Some(content) => content,
        None => RawValue::from_string("[]".to_owned()).map_err(|err| ResultError::Shape(err.to_string()))?,
    };
    Ok(CallOutcome { content, structured_content: raw.structured_content, is_error: raw.is_error.unwrap_or(false), input_required })
}

/// The `text` of a result's `content` items of type "text", in order; empty when `content` is
/// not an array of objects.
pub fn text_items(content: &RawValue) -> Vec<String> {
    #[derive(Deserialize)]
    struct Item {
        #[serde(rename = "type", default)]
        kind: Option<String>,
        #[serde(default)]
        text: Option<String>,
    }
    let items: Vec<Item> = serde_json::from_str(content.get()).unwrap_or_default();
    items.into_iter().filter(|item| item.kind.as_deref() == Some("text")).filter_map(|item| item.text).collect()
}

/// `result` (a `tools/call` result object) with one more text item at the end of its `content`
/// (made when it has none): toolhost's own word beside the server's, which keeps every field,
/// its order and every other item as sent. `None` when `result` is no object or its `content`
/// is no array.
pub fn with_text_item(result: &RawValue, text: &str) -> Option<Box<RawValue>> {
    let fields: Fields = serde_json::from_str(result.get()).ok()?;
    let item = format!(r#"{{"type":"text","text":{}}}"#, serde_json::to_string(text).ok()?);
    let mut out = String::with_capacity(result.get().len() + item.len() + 16);
    out.push('{');
    let mut added = false;
    for (at, (key, value)) in fields.0.iter().enumerate() {
        if at > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).ok()?);
        out.push(':');
        match key.as_str() {
            "content" if !added => {
                let array = value.get().trim();
                let inner = array.strip_prefix('[')?.strip_suffix(']')?;
                out.push('[');
                if !inner.trim().is_empty() {
                    out.push_str(inner);
                    out.push(',');
                }
                out.push_str(&item);
                out.push(']');
                added = true;
            }
            _ => out.push_str(value.get()),
        }
    }
    if !added {
        if !fields.0.is_empty() {
            out.push(',');
        }
        out.push_str("\"content\":[");
        out.push_str(&item);
        out.push(']');
    }
    out.push('}');
    RawValue::from_string(out).ok()
}

/// A JSON object's members in the order sent, each value raw.
struct Fields(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Fields, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Fields;
            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut fields = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    fields.push(member);
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    #[test]
    fn a_text_item_is_added_and_everything_the_server_sent_is_kept() {
        let sent = r#"{"isError":true, "content":[{"type":"text","text":"EROFS"},{"type":"image","data":"AA=="}],"_meta":{"n":1.50}}"#;
        let added = with_text_item(&raw(sent), "toolhost: \"hint\"\n").unwrap();
        assert_eq!(
            added.get(),
            r#"{"isError":true,"content":[{"type":"text","text":"EROFS"},{"type":"image","data":"AA=="},{"type":"text","text":"toolhost: \"hint\"\n"}],"_meta":{"n":1.50}}"#
        );
        assert_eq!(text_items(&parse_call_result(&added).unwrap().content), ["EROFS", "toolhost: \"hint\"\n"]);
        assert_eq!(
            with_text_item(&raw(r#"{"isError":true,"content":[ ]}"#), "t").unwrap().get(),
            r#"{"isError":true,"content":[{"type":"text","text":"t"}]}"#
        );
        assert_eq!(
            with_text_item(&raw(r#"{"isError":true}"#), "t").unwrap().get(),
            r#"{"isError":true,"content":[{"type":"text","text":"t"}]}"#
        );
        assert!(with_text_item(&raw(r#"{"content":"text"}"#), "t").is_none());
        assert!(with_text_item(&raw("[]"), "t").is_none());
        assert!(text_items(&raw(r#"["a", {"type":"text","text":"b"}]"#)).is_empty());
    }

    #[test]
    fn an_empty_cursor_continues_and_an_absent_one_ends() {
        let page = parse_list_page(&raw(r#"{"tools":[{"name":"a","x-extra":1}],"nextCursor":""}"#)).unwrap();
        assert_eq!(page.next_cursor.as_deref(), Some(""));
        assert_eq!(page.tools[0].get(), r#"{"name":"a","x-extra":1}"#);
        assert!(parse_list_page(&raw(r#"{"tools":[]}"#)).unwrap().next_cursor.is_none());
        assert!(parse_list_page(&raw(r#"{"nextCursor":"x"}"#)).is_err());
    }

    #[test]
    fn one_entry_nested_beyond_the_parser_limit_does_not_fail_the_page() {
        let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        let text = format!(r#"{{"tools":[{{"name":"deep","inputSchema":{deep}}},{{"name":"fine"}}]}}"#);
        let page = parse_list_page(&raw(&text)).unwrap();
        assert_eq!(page.tools.len(), 2);
        assert_eq!(page.tools[1].get(), r#"{"name":"fine"}"#);
    }

    #[test]
    fn call_results_keep_their_payload_and_read_input_required() {
        let outcome = parse_call_result(&raw(r#"{"content":[{"type":"text","text":"hi"}],"isError":true}"#)).unwrap();
        assert!(outcome.is_error);
        assert_eq!(outcome.content.get(), r#"[{"type":"text","text":"hi"}]"#);
        assert_eq!(parse_call_result(&raw(r#"{"structuredContent":5}"#)).unwrap().content.get(), "[]");
        assert!(parse_call_result(&raw(r#"{"resultType":"input_required"}"#)).is_err(), "no inputRequests");
        let asked = parse_call_result(&raw(
            r#"{"resultType":"input_required","inputRequests":{"q":{"method":"elicitation/create"}},"requestState":"s 1"}"#,
        ))
        .unwrap()
        .input_required
        .unwrap();
        assert_eq!(asked.requests.get(), r#"{"q":{"method":"elicitation/create"}}"#);
        assert_eq!(asked.request_state.unwrap().get(), r#""s 1""#);
        assert!(
            parse_call_result(&raw(r#"{"resultType":"input_required","inputRequests":{}}"#))
                .unwrap()
                .input_required
                .unwrap()
                .request_state
                .is_none()
        );
        assert!(parse_call_result(&raw(r#"{"resultType":"mystery"}"#)).is_err());
    }

    #[test]
    fn the_cursor_is_read_without_the_tools() {
        assert_eq!(peek_page(&raw(r#"{"tools":[{"name":"a"}],"nextCursor":"c1"}"#)).map(|p| p.next_cursor), Ok(Some("c1".to_owned())));
        assert_eq!(peek_page(&raw(r#"{"tools":[]}"#)).map(|p| p.next_cursor), Ok(None));
        assert!(peek_page(&raw(r#"{"tools":{}}"#)).is_err());
        assert!(peek_page(&raw(r#"{"nextCursor":"c"}"#)).is_err());
    }

    #[test]
    fn list_params_carry_the_cursor_verbatim() {
        assert!(list_params(None).is_none());
        assert_eq!(list_params(Some("a\"b")).unwrap().get(), r#"{"cursor":"a\"b"}"#);
    }
}
