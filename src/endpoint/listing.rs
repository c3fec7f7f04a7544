//! `tools/list` over one registry snapshot: pages with toolhost's own cursors (bound to the
//! catalog revision they were cut from, and to the caller and its profile), each tool rendered
//! once per generation and reused by every page and every client, and the change watch that
//! tells a session its view changed.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::watch;

use super::{Endpoint, Era, LIST_TTL_MS, META_GENERATION, META_HASH, META_NAME, META_SERVER, View};
use crate::door::Door;
use crate::door::model::ToolDef;
use crate::door::paging::{self, Binding, Position, TokenError};
use crate::door::view::{Catalog, Server};

/// Servers (per naming) whose rendered tools are kept.
const RENDERED_KEPT: usize = 8192;
/// Version tag of toolhost's cursor format.
const CURSOR_TAG: &str = "th1";
/// At most one notification per session this often: the first change after a quiet spell is
/// announced at once, and changes that follow within this time cost one more notification
/// between them (servers that publish together, a boot).
const SETTLE: Duration = Duration::from_millis(5);

/// One server's tools as MCP tool objects, in generation order.
type Entries = Arc<[Box<str>]>;
/// A server and whether its tools show under their original names.
type Key = (Arc<str>, bool);

/// Why a cursor cannot continue a listing (-32602): the client lists again from the start.
#[derive(Debug, thiserror::Error)]
pub(super) enum CursorError {
    #[error("the cursor is not one toolhost issued; list again without a cursor")]
    Malformed,
    #[error("the cursor was issued to another caller or for another profile; list again without a cursor")]
    OtherCaller,
    #[error("the cursor has expired (the catalog changed too often since); list again without a cursor")]
    Expired,
}

/// Rendered tool entries, per server and naming (qualified or original), with the generation
/// they were rendered from.
#[derive(Default)]
pub(super) struct Cache {
    rendered: Mutex<HashMap<Key, (u64, Entries)>>,
}

impl Cache {
    /// One page of what `view` sees, as the `tools/list` result.
    ///
    /// # Errors
    /// A message for -32602 when the cursor is not one of toolhost's or its revision is no
    /// longer kept: the client starts its listing again.
    pub(super) fn page(
        &self,
        current: &Catalog,
        door: &Door,
        view: &View,
        cursor: Option<&str>,
        page_size: usize,
        era: Era,
    ) -> Result<String, CursorError> {
        // Cursors are bound to the caller and its profile: useless to anyone else.
        let binding = cursor_binding(view);
        let start = match cursor {
            None => Position::start(current),
            Some(cursor) => parse_cursor(cursor, &binding).map_err(|error| match error {
                TokenError::Malformed => CursorError::Malformed,
                TokenError::OtherCaller => CursorError::OtherCaller,
            })?,
        };
        let snapshot = match start.revision == current.revision() {
            true => current.clone(),
            false => door.snapshot_at(start.revision).ok_or(CursorError::Expired)?,
        };
        let original = view.original_names();
        let mut out = String::with_capacity(page_size.min(1000) * 512);
        out.push_str(r#"{"tools":["#);
        let mut written = false;
        // A lazy profile's meta-tools open the first page; they do not count against its size.
        if cursor.is_none() && view.profile.as_ref().is_some_and(|profile| profile.lazy.is_some()) {
            for entry in super::lazy::meta_tools() {
                if written {
                    out.push(',');
                }
                out.push_str(&entry);
                written = true;
            }
        }
        let mut rendered: Option<(Arc<str>, Entries)> = None;
        let next = paging::walk(
            &snapshot,
            start,
            page_size,
            |server| server.available() && self.in_view(view, server),
            // A held tool cannot be called, and an MCP client cannot see a state: not listed.
            |tool| view.shows(tool),
            |tool| {
                // The server's rendered entries, fetched once per server the page touches.
                let server = tool.server();
                if rendered.as_ref().is_none_or(|(name, _)| !Arc::ptr_eq(name, server.shared_name())) {
                    rendered = Some((server.shared_name().clone(), self.rendered(server, original)));
                }
                let Some(entry) = rendered.as_ref().and_then(|(_, entries)| entries.get(tool.idx())) else { return };
                if written {
                    out.push(',');
                }
                out.push_str(entry);
                written = true;
            },
        );
        out.push(']');
        if let Some(next) = next {
            out.push_str(&format!(r#","nextCursor":"{CURSOR_TAG}.{}""#, binding.token(next)));
        }
        if era == Era::Modern {
            // What a caller sees depends on who it is: never to be shared across callers.
            out.push_str(&format!(r#","resultType":"complete","ttlMs":{LIST_TTL_MS},"cacheScope":"private""#));
        }
        out.push('}');
        Ok(out)
    }

    /// A profile with original names shows one server only.
    fn in_view(&self, view: &View, server: Server<'_>) -> bool {
        match view.profile.as_ref().and_then(|profile| profile.original.as_deref()) {
            Some(only) => server.name() == only,
            None => true,
        }
    }

    /// The server's current tools as MCP tool objects, rendered once per generation.
    fn rendered(&self, server: Server<'_>, original: bool) -> Entries {
        let generation = server.generation();
        let key = (server.shared_name().clone(), original);
        if let Some((number, entries)) = self.rendered.lock().unwrap_or_else(PoisonError::into_inner).get(&key)
            && *number == generation
        {
            return entries.clone();
        }
        let entries: Entries = server
            .tools()
            .map(|tool| {
                let shown = if original { tool.name() } else { tool.qualified() };
                render(server.name(), generation, tool.def(), shown)
            })
            .collect();
        let mut rendered = self.rendered.lock().unwrap_or_else(PoisonError::into_inner);
        // Servers a reload removed leave entries behind: bounded, and rebuilt on demand.
        if rendered.len() >= RENDERED_KEPT && !rendered.contains_key(&key) {
            rendered.clear();
        }
        let keep = rendered.get(&key).is_none_or(|(number, _)| *number < generation);
        if keep {
            rendered.insert(key, (generation, entries.clone()));
        }
        entries
    }
}

/// A tool object as the server defined it, under the name this view shows, with toolhost's
/// facts added to its `_meta`.
fn render(server: &str, generation: u64, tool: &ToolDef, shown: &str) -> Box<str> {
    let mut object: Map<String, Value> = serde_json::from_str(&tool.definition).unwrap_or_default();
    object.insert("name".into(), Value::from(shown));
    // toolhost runs any call as a task (door::tasks), and a tool its server runs only as a task
    // as one there for any caller: to toolhost's callers every tool is task-optional.
    object.insert("execution".into(), serde_json::json!({ "taskSupport": "optional" }));
    let meta = object.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert(META_SERVER.into(), Value::from(server));
        meta.insert(META_GENERATION.into(), Value::from(generation));
        meta.insert(META_HASH.into(), Value::from(tool.hash.as_str()));
        meta.insert(META_NAME.into(), Value::from(tool.name.as_str()));
    }
    Value::Object(object).to_string().into_boxed_str()
}

/// What an MCP cursor is bound to: the caller's agent entry and the profile it lists through.
fn cursor_binding(view: &View) -> Binding {
    Binding::of(&[&view.caller.agent.name, view.profile.as_ref().map_or("", |profile| profile.name.as_str())])
}

fn parse_cursor(cursor: &str, binding: &Binding) -> Result<Position, TokenError> {
    let token = cursor.strip_prefix(CURSOR_TAG).and_then(|rest| rest.strip_prefix('.')).ok_or(TokenError::Malformed)?;
    binding.resume(token)
}

/// What `view` sees of `snapshot`, as one number: the names and definition hashes of the tools
/// it would list. Equal numbers, same listing.
fn fingerprint(snapshot: &Catalog, view: &View) -> u64 {
    let mut hasher = DefaultHasher::new();
    for tool in snapshot.servers().filter(|server| server.available()).flat_map(|server| server.tools()) {
        if view.shows(tool) {
            tool.qualified().hash(&mut hasher);
            tool.def().hash.hash(&mut hasher);
        }
    }
    hasher.finish()
}

/// Tells a session when the catalog it sees changes (not when other callers' parts do).
pub(super) struct ChangeWatch {
    revisions: watch::Receiver<u64>,
    seen: u64,
    /// When this session was last notified.
    last_sent: Option<tokio::time::Instant>,
}

impl ChangeWatch {
    pub(super) fn new(endpoint: &Endpoint, view: &View) -> ChangeWatch {
        let mut revisions = endpoint.door.revisions();
        revisions.borrow_and_update();
        ChangeWatch { revisions, seen: fingerprint(&endpoint.door.snapshot(), view), last_sent: None }
    }

    /// Sends `line` on `out` each time what `view` sees changes, until the registry or `out`
    /// goes: the one change stream behind every transport's notifications.
    pub(super) async fn forward(mut self, endpoint: &Endpoint, view: &View, line: &str, out: &tokio::sync::mpsc::Sender<String>) {
        loop {
            tokio::select! {
                () = out.closed() => return,
                changed = self.changed(endpoint, view) => {
                    if !changed || out.send(line.to_owned()).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Waits until what `view` sees differs from what it saw; `false` when the registry is gone.
    async fn changed(&mut self, endpoint: &Endpoint, view: &View) -> bool {
        loop {
            if self.revisions.changed().await.is_err() {
                return false;
            }
            // Right after a notification, changes gather for the rest of SETTLE; after quiet,
            // the first one goes out at once.
            if let Some(last) = self.last_sent {
                tokio::time::sleep_until(last.checked_add(SETTLE).unwrap_or(last)).await;
            }
            self.revisions.borrow_and_update();
            let now = fingerprint(&endpoint.door.snapshot(), view);
            if now != self.seen {
                self.seen = now;
                self.last_sent = Some(tokio::time::Instant::now());
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_strict_and_bound_to_their_caller() {
        let binding = Binding::of(&["agent", ""]);
        let cursor = format!("{CURSOR_TAG}.{}", binding.token(Position { revision: 7, server: 2, tool: 40 }));
        assert_eq!(parse_cursor(&cursor, &binding), Ok(Position { revision: 7, server: 2, tool: 40 }));
        assert_eq!(parse_cursor(&cursor, &Binding::of(&["another", ""])), Err(TokenError::OtherCaller));
        assert_eq!(parse_cursor(&cursor, &Binding::of(&["agent", "profile"])), Err(TokenError::OtherCaller));
        for bad in ["", "th1", "th1.7.2.40", "th1.7.2", "th2.x.7.2.40", "th1.x.-1.2.3", "th1.x.a.b.c", "x.th1.1.1.1"] {
            assert_eq!(parse_cursor(bad, &binding), Err(TokenError::Malformed), "{bad}");
        }
    }

    #[test]
    fn a_rendered_tool_keeps_its_definition_and_gains_toolhosts_facts() {
        let value = serde_json::json!({"name": "read", "description": "Reads", "inputSchema": {"type": "object"}, "_meta": {"x": 1}});
        let tool = ToolDef::from_value("read".into(), &value);
        let rendered: Value = serde_json::from_str(&render("files", 3, &tool, "files__read")).unwrap();
        assert_eq!(rendered["name"], "files__read");
        assert_eq!(rendered["description"], "Reads");
        assert_eq!(rendered["_meta"]["x"], 1);
        assert_eq!(rendered["_meta"][META_GENERATION], 3);
        assert_eq!(rendered["_meta"][META_HASH], tool.hash.as_str());
        assert_eq!(rendered["_meta"][META_NAME], "read");
    }
}
