//! Lazy exposure, for profiles with `lazy = true`: the model sees the profile's pinned tools and
//! two meta-tools, `find_tools` (search under the caller's policy, through the same
//! `Door::search` as the gRPC API) and `call_tool` (a call by qualified name through the same
//! `Door::call`, with the same race checks). Results come from the current catalog, so they are
//! never stale.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{Era, View, reply};
use crate::door::model::{CallError, ToolRef};
use crate::door::view::Tool;
use crate::door::{Door, Presentation};
use crate::mcp::jsonrpc::code::INVALID_PARAMS;

pub(super) const FIND_TOOLS: &str = "find_tools";
pub(super) const CALL_TOOL: &str = "call_tool";
const DEFAULT_FOUND: usize = 5;
const MAX_FOUND: usize = 20;

/// The two meta-tools as `tools/list` entries (their names hold no `__`, so no qualified name
/// can be one of them).
pub(super) fn meta_tools() -> [String; 2] {
    let find = json!({
        "name": FIND_TOOLS,
        "title": "Find tools",
        "description": "Search the tools available here by what they do. Returns the best matches with their names, \
                        descriptions and input schemas; then call one with call_tool.",
        "inputSchema": {"type": "object", "properties": {
            "query": {"type": "string", "description": "What the tool should do, in a few words"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_FOUND, "description": "How many tools to return (default 5)"}
        }, "required": ["query"]},
        "annotations": {"readOnlyHint": true}
    });
    let call = json!({
        "name": CALL_TOOL,
        "title": "Call a tool",
        "description": "Call a tool that find_tools returned, by its name, with arguments matching its input schema. \
                        Pass the definition_hash find_tools gave to be told, instead of running it, if the tool changed since.",
        "inputSchema": {"type": "object", "properties": {
            "name": {"type": "string", "description": "The tool's name, as find_tools returned it"},
            "arguments": {"type": "object", "description": "The tool's arguments"},
            "definition_hash": {"type": "string", "description": "The definitionHash find_tools returned (optional)"}
        }, "required": ["name"]}
    });
    [find.to_string(), call.to_string()]
}

#[derive(Deserialize)]
struct FindArgs {
    query: String,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
struct CallArgs<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default)]
    definition_hash: Option<Cow<'a, str>>,
}

/// What a `tools/call` means under a lazy profile.
pub(super) enum Target<'a> {
    /// `find_tools`, answered (or a call_tool whose arguments were refused).
    Answered(String),
    /// `call_tool`: a call of this tool, made on the common call path.
    Call { tool: ToolRef, arguments: Option<&'a RawValue>, definition_hash: Option<Cow<'a, str>> },
    /// Not a meta-tool, or not a lazy profile.
    NotLazy,
}

/// Reads a call to `find_tools` (answered here) or `call_tool` (turned into its target).
pub(super) async fn target<'a>(
    door: &Door,
    view: &View,
    id: &RawValue,
    name: &str,
    arguments: Option<&'a RawValue>,
    era: Era,
) -> Target<'a> {
    let Some(scope) = view.profile.as_ref().and_then(|profile| profile.lazy.as_ref()) else { return Target::NotLazy };
    let in_scope = |tool: &crate::door::model::names::ToolName<'_>| scope.iter().any(|glob| glob.matches(tool));
    let arguments = arguments.map_or("{}", RawValue::get);
    let line = match name {
        FIND_TOOLS => {
            let args: FindArgs = match serde_json::from_str(arguments) {
                Ok(args) => args,
                Err(error) => return Target::Answered(reply::error(id, INVALID_PARAMS, &format!("find_tools arguments: {error}"), None)),
            };
            let limit = args.limit.unwrap_or(DEFAULT_FOUND).clamp(1, MAX_FOUND);
            let also = |tool: Tool<'_>| tool.server().available() && in_scope(&tool.policy_name());
            match door.search(&view.caller, &args.query, &[], limit, Presentation::Callable, also).await {
                Ok((_, hits)) => {
                    let found: Vec<Value> = hits
                        .iter()
                        .filter_map(|hit| {
                            let found = hit.tool()?;
                            let tool = found.def();
                            let fields = tool.fields();
                            Some(json!({
                                "name": found.qualified(),
                                "title": fields.title,
                                "description": fields.description,
                                "inputSchema": serde_json::from_str::<Value>(&fields.input_schema).unwrap_or(json!({"type": "object"})),
                                "definitionHash": tool.hash,
                                "server": found.server().name(),
                            }))
                        })
                        .collect();
                    let text = serde_json::to_string(&found).unwrap_or_default();
                    let mut result = json!({"content": [{"type": "text", "text": text}], "structuredContent": {"tools": found}});
                    if era == Era::Modern {
                        result["resultType"] = json!("complete");
                    }
                    reply::result(id, &result.to_string())
                }
                Err(error) => reply::error(id, reply::SERVER_ERROR, &error.to_string(), None),
            }
        }
        CALL_TOOL => {
            let args: CallArgs<'a> = match serde_json::from_str(arguments) {
                Ok(args) => args,
                Err(error) => return Target::Answered(reply::error(id, INVALID_PARAMS, &format!("call_tool arguments: {error}"), None)),
            };
            let tool = ToolRef::Qualified(args.name.to_string());
            if !door.snapshot().judge(&tool, in_scope) {
                let error = CallError::UnknownTool { server: None, tool: args.name.into_owned() };
                return Target::Answered(reply::call_error(id, &error));
            }
            return Target::Call {
                tool: ToolRef::Qualified(args.name.into_owned()),
                arguments: args.arguments,
                definition_hash: args.definition_hash,
            };
        }
        _ => return Target::NotLazy,
    };
    Target::Answered(line)
}
