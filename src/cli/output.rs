//! How the command line prints: aligned tables for people, JSON for programs.

#![allow(clippy::print_stdout)]

use std::borrow::Cow;
use std::io::Write;

use serde_json::{Value, json};

use crate::api::pb;

pub(crate) struct Printer {
    json: bool,
    out: Terminal<std::io::Stdout>,
}

/// Whether a terminal must not get `c` as it is: a control character but newline and tab
/// (ESC, CR, BEL, backspace, DEL, the C1 controls), or an invisible or bidirectional-control one.
fn unsafe_for_a_terminal(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || crate::catalog::integrity::is_invisible(c)
}

/// Text as a terminal should get it: every character [`unsafe_for_a_terminal`] written as its
/// escape (`\u{1b}`), so that nothing a server wrote (a description, an error) can move the
/// cursor, clear the screen, recolour, hide or reorder text, or plant a hyperlink.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    escape_with(text, |c, out| out.extend(c.escape_unicode()))
}

/// JSON as a terminal should get it: the same characters as JSON escapes (`\u202e`, surrogate
/// pairs above U+FFFF), which only ever stand inside JSON strings, so the JSON stays valid and
/// means the same. serde_json escapes the C0 controls itself, but not DEL, C1 or the invisibles.
fn printable_json(text: &str) -> Cow<'_, str> {
    escape_with(text, |c, out| {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            let _ = std::fmt::Write::write_fmt(out, format_args!("\\u{unit:04x}"));
        }
    })
}

fn escape_with(text: &str, escape: impl Fn(char, &mut String)) -> Cow<'_, str> {
    if !text.chars().any(unsafe_for_a_terminal) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_for_a_terminal(c) {
            escape(c, &mut escaped);
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}

/// A writer that passes what it is given through [`printable`], or [`printable_json`] for a
/// `--json` caller.
pub(crate) struct Terminal<W> {
    out: W,
    json: bool,
}

impl<W: Write> Write for Terminal<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter writes whole `str`s; a split character would be replaced, never passed raw.
        let text = String::from_utf8_lossy(buf);
        let shown = if self.json { printable_json(&text) } else { printable(&text) };
        self.out.write_all(shown.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl Printer {
    pub(crate) fn new(json: bool) -> Printer {
        Printer { json, out: Terminal { out: std::io::stdout(), json } }
    }

    pub(crate) fn servers(&mut self, servers: &[pb::Server], store: Option<&pb::StoreStatus>) -> std::io::Result<()> {
        let degraded = store.filter(|store| store.degraded).map(|store| match store.reason.as_str() {
            "" => "degraded".to_owned(),
            reason => format!("degraded: {reason}"),
        });
        if self.json {
            let rows: Vec<Value> = servers.iter().map(|s| server_json(s, degraded.as_deref())).collect();
            return self.json_line(&Value::Array(rows));
        }
        let rows: Vec<Vec<String>> = servers
            .iter()
            .map(|s| {
                let races = s.stale_tool_races.unwrap_or_default();
                let race_total = races.removed_before_call + races.changed_since_listed + races.upstream_unknown_tool;
                vec![
                    s.name.clone(),
                    state_name(s.state).to_owned(),
                    s.generation.to_string(),
                    s.tool_count.to_string(),
                    s.protocol_version.clone(),
                    s.restarts.to_string(),
                    race_total.to_string(),
                    format!("{}/{}", s.calls_in_flight, s.calls_waiting),
                    sandbox_summary(s.sandbox.as_ref()),
                    s.last_error.clone(),
                ]
            })
            .collect();
        self.table(&["SERVER", "STATE", "GEN", "TOOLS", "PROTOCOL", "RESTARTS", "RACES", "CALLS", "SANDBOX", "LAST ERROR"], &rows)?;
        match degraded {
            Some(degraded) => writeln!(self.out, "\nstore: {degraded} (the stored catalog is served; changes wait for room)"),
            None => Ok(()),
        }
    }

    pub(crate) fn tools(&mut self, tools: &[pb::Tool]) -> std::io::Result<()> {
        if self.json {
            let rows: Vec<Value> = tools
                .iter()
                .map(|t| {
                    json!({"name": t.qualified_name, "server": t.server, "tool": t.name, "title": t.title, "description": t.description,
                           "generation": t.generation, "hash": t.definition_hash, "available": t.available,
                           "state": t.state, "hold_reason": t.hold_reason, "approved_hash": approved_hash(t), "flags": t.flags,
                           "input_schema": parse_or_null(&t.input_schema_json), "definition": parse_or_null(&t.definition_json)})
                })
                .collect();
            return self.json_line(&Value::Array(rows));
        }
        let rows: Vec<Vec<String>> = tools
            .iter()
            .map(|t| {
                let state = match (t.state.as_str(), t.flags.is_empty()) {
                    ("held", _) => format!("HELD ({})", t.hold_reason),
                    (_, false) => format!("ok, flagged: {}", t.flags.join(",")),
                    _ => "ok".to_owned(),
                };
                vec![
                    t.qualified_name.clone(),
                    t.generation.to_string(),
                    t.definition_hash[..12.min(t.definition_hash.len())].to_owned(),
                    state,
                    first_line(&t.description),
                ]
            })
            .collect();
        self.table(&["TOOL", "GEN", "HASH", "STATE", "DESCRIPTION"], &rows)
    }

    pub(crate) fn approved(&mut self, server: &str, approved: &[pb::ApprovedTool]) -> std::io::Result<()> {
        if self.json {
            let rows: Vec<Value> = approved.iter().map(|a| json!({"server": server, "tool": a.name, "hash": a.hash})).collect();
            return self.json_line(&Value::Array(rows));
        }
        for tool in approved {
            writeln!(self.out, "approved {server}/{} sha256:{}", tool.name, tool.hash)?;
        }
        Ok(())
    }

    pub(crate) fn diff(&mut self, server: &str, tool: &str, diff: &pb::DiffToolResponse) -> std::io::Result<()> {
        if self.json {
            return self.json_line(&json!({
                "server": server, "tool": tool, "state": diff.state, "hold_reason": diff.hold_reason, "flags": diff.flags,
                "offered_hash": diff.offered_hash, "approved_hash": diff.approved_hash, "approved_by": diff.approved_by,
                "approved_unix_ms": diff.approved_unix_ms, "changes": diff.changes,
                "offered": parse_or_null(&diff.offered_definition_json), "approved": parse_or_null(&diff.approved_definition_json),
            }));
        }
        let state = if diff.state == "held" { format!("HELD ({})", diff.hold_reason) } else { "ok".to_owned() };
        writeln!(self.out, "{server}/{tool}: {state}")?;
        writeln!(self.out, "offered:  sha256:{}", diff.offered_hash)?;
        if diff.approved_hash.is_empty() {
            writeln!(self.out, "approved: never (the whole definition is new)")?;
        } else {
            let when = if diff.approved_unix_ms > 0 { format!(" at {}", rfc3339(diff.approved_unix_ms)) } else { String::new() };
            writeln!(self.out, "approved: sha256:{} by {}{when}", diff.approved_hash, diff.approved_by)?;
        }
        if !diff.flags.is_empty() {
            writeln!(self.out, "flags:    {}", diff.flags.join(", "))?;
        }
        if diff.changes.is_empty() {
            writeln!(self.out, "no changes")?;
        }
        for change in &diff.changes {
            writeln!(self.out, "{change}")?;
        }
        Ok(())
    }

    pub(crate) fn call(&mut self, result: &pb::CallToolResponse) -> std::io::Result<()> {
        let content = parse_or_null(&result.content_json);
        let input = result.input_required.as_ref().map(|input| {
            json!({"inputRequests": parse_or_null(&input.input_requests_json), "continuation": input.continuation_token,
                "expiresAtUnixMs": input.expires_at_unix_ms})
        });
        if self.json {
            return self.json_line(&json!({
                "content": content, "structuredContent": parse_or_null(&result.structured_content_json), "isError": result.is_error,
                "server": result.server, "tool": result.name, "generation": result.generation, "hash": result.definition_hash,
                "inputRequired": input,
            }));
        }
        if let Some(input) = input {
            writeln!(self.out, "the server needs input before it can finish; answer with --continuation and --responses:")?;
            return writeln!(self.out, "{input:#}");
        }
        for block in content.as_array().into_iter().flatten() {
            writeln!(self.out, "{}", content_block(block))?;
        }
        Ok(())
    }

    /// `toolhost watch`'s first lines: each server as it stands at `revision`.
    pub(crate) fn current(&mut self, revision: u64, servers: &[pb::Server]) -> std::io::Result<()> {
        for s in servers {
            if self.json {
                self.json_line(&json!({"revision": revision, "type": "current", "server": s.name, "state": state_name(s.state),
                    "generation": s.generation, "tool_count": s.tool_count, "available": s.available}))?;
            } else {
                writeln!(
                    self.out,
                    "r{revision} {} is {}: generation {}, {} tools",
                    s.name,
                    state_name(s.state),
                    s.generation,
                    s.tool_count
                )?;
            }
        }
        self.out.flush()
    }

    pub(crate) fn event(&mut self, event: &pb::CatalogEvent) -> std::io::Result<()> {
        use pb::catalog_event::Event;
        let value = match &event.event {
            Some(Event::GenerationPublished(g)) => json!({"revision": event.revision, "type": "generation_published", "server": g.server,
                "generation": g.generation, "previous_generation": g.previous_generation, "added": g.added, "removed": g.removed, "changed": g.changed}),
            Some(Event::ServerStateChanged(s)) => json!({"revision": event.revision, "type": "server_state_changed", "server": s.server,
                "state": state_name(s.state), "previous_state": state_name(s.previous_state), "available": s.available, "error": s.error}),
            Some(Event::Resync(r)) => json!({"revision": event.revision, "type": "resync", "reason": r.reason}),
            Some(Event::ServerConfigChanged(c)) => {
                json!({"revision": event.revision, "type": "server_config_changed", "server": c.server, "change": c.change})
            }
            Some(Event::IntegrityChanged(i)) => {
                json!({"revision": event.revision, "type": "integrity_changed", "server": i.server, "held": i.held, "released": i.released})
            }
            Some(Event::ApprovalRequested(a)) => {
                json!({"revision": event.revision, "type": "approval_requested", "approval_id": a.approval_id,
                "tool": a.qualified_name, "agent": a.agent, "caller": a.caller, "requested_at_unix_ms": a.requested_at_unix_ms,
                "expires_at_unix_ms": a.expires_at_unix_ms, "approve_command": format!("toolhost approvals approve {}", a.approval_id)})
            }
            None => json!({"revision": event.revision, "type": "unknown"}),
        };
        if self.json {
            return self.json_line(&value);
        }
        let line = match &event.event {
            Some(Event::GenerationPublished(g)) => format!(
                "r{} {} generation {} (+{} -{} ~{})",
                event.revision,
                g.server,
                g.generation,
                g.added.len(),
                g.removed.len(),
                g.changed.len()
            ),
            Some(Event::ServerStateChanged(s)) => {
                format!("r{} {} {} -> {}", event.revision, s.server, state_name(s.previous_state), state_name(s.state))
            }
            Some(Event::Resync(r)) => format!("r{} resync: {}", event.revision, r.reason),
            Some(Event::ServerConfigChanged(c)) => format!("r{} {} configuration {}", event.revision, c.server, c.change),
            Some(Event::IntegrityChanged(i)) => {
                format!("r{} {} held: [{}] released: [{}]", event.revision, i.server, i.held.join(", "), i.released.join(", "))
            }
            Some(Event::ApprovalRequested(a)) => format!(
                "r{} approval requested: {} for {} ({}), expires {}; `toolhost approvals approve {}`",
                event.revision,
                a.qualified_name,
                a.agent,
                a.caller,
                rfc3339(a.expires_at_unix_ms),
                a.approval_id
            ),
            None => format!("r{} (unknown event)", event.revision),
        };
        writeln!(self.out, "{line}")?;
        self.out.flush()
    }

    pub(crate) fn history(&mut self, history: &pb::HistoryResponse) -> std::io::Result<()> {
        if self.json {
            let generations: Vec<Value> = history
                .generations
                .iter()
                .map(|g| json!({"generation": g.generation, "committed_unix_ms": g.committed_unix_ms, "reason": g.reason, "tool_count": g.tool_count, "added": g.added, "removed": g.removed, "changed": g.changed}))
                .collect();
            let enumerations: Vec<Value> = history.enumerations.iter().map(enumeration_json).collect();
            let approvals: Vec<Value> = history
                .approvals
                .iter()
                .map(|a| json!({"tool": a.name, "hash": a.hash, "approved_by": a.approved_by, "approved_unix_ms": a.approved_unix_ms}))
                .collect();
            return self.json_line(&json!({"generations": generations, "enumerations": enumerations, "approvals": approvals}));
        }
        let rows: Vec<Vec<String>> = history
            .generations
            .iter()
            .map(|g| {
                vec![
                    g.generation.to_string(),
                    g.reason.clone(),
                    g.tool_count.to_string(),
                    g.added.join(","),
                    g.removed.join(","),
                    g.changed.join(","),
                ]
            })
            .collect();
        self.table(&["GEN", "REASON", "TOOLS", "ADDED", "REMOVED", "CHANGED"], &rows)?;
        if history.approvals.is_empty() {
            return Ok(());
        }
        writeln!(self.out)?;
        let approvals: Vec<Vec<String>> = history
            .approvals
            .iter()
            .map(|a| vec![rfc3339(a.approved_unix_ms), a.name.clone(), a.hash[..12.min(a.hash.len())].to_owned(), a.approved_by.clone()])
            .collect();
        self.table(&["APPROVED AT", "TOOL", "HASH", "BY"], &approvals)
    }

    pub(crate) fn search(&mut self, query: &str, results: &[pb::SearchResult]) -> std::io::Result<()> {
        if self.json {
            let list: Vec<Value> = results
                .iter()
                .filter_map(|r| r.tool.as_ref().map(|t| (t, r.score)))
                .map(|(t, score)| {
                    json!({"name": t.qualified_name, "server": t.server, "tool": t.name, "score": score, "hash": t.definition_hash,
                           "generation": t.generation, "title": t.title, "description": t.description,
                           "input_schema": parse_or_null(&t.input_schema_json), "available": t.available})
                })
                .collect();
            return self.json_line(&Value::from(list));
        }
        let rows: Vec<Vec<String>> = results
            .iter()
            .filter_map(|r| r.tool.as_ref().map(|t| (t, r.score)))
            .map(|(t, score)| vec![format!("{score:.2}"), t.qualified_name.clone(), first_line(&t.description)])
            .collect();
        if rows.is_empty() {
            return writeln!(self.out, "no tool you may use matches {query:?} (try other words, or `toolhost tools`)");
        }
        self.table(&["SCORE", "NAME", "DESCRIPTION"], &rows)
    }

    pub(crate) fn whoami(&mut self, who: &pb::WhoAmIResponse) -> std::io::Result<()> {
        let value = json!({
            "transport": who.transport, "uid": who.uid, "gid": who.gid, "pid": who.pid, "groups": who.groups, "unit": who.unit,
            "token_presented": who.token_presented, "agent": who.agent, "admin": who.admin,
            "visible_servers": who.visible_servers, "visible_tools": who.visible_tools, "callable_tools": who.callable_tools,
            "limits": who.limits.as_ref().map(|l| json!({"concurrency": l.concurrency, "in_flight": l.in_flight,
                "rate": (l.rate_calls > 0).then(|| json!({"calls": l.rate_calls, "per_ms": l.rate_per_ms, "burst": l.rate_burst, "available": l.rate_available})),
                "quotas": l.quotas.iter().map(|q| json!({"tools": q.tools, "calls": q.calls, "per_ms": q.per_ms, "used": q.used,
                    "left": q.calls.saturating_sub(q.used), "resets_at_unix_ms": q.resets_at_unix_ms})).collect::<Vec<_>>()})),
        });
        if self.json {
            return self.json_line(&value);
        }
        let caller = if who.transport == "unix" {
            let unit = if who.unit.is_empty() { String::new() } else { format!(" unit {}", who.unit) };
            let groups = match who.groups.is_empty() {
                true => String::new(),
                false => format!(", groups {}", who.groups.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")),
            };
            format!("uid {} gid {}{groups} pid {}{unit}", who.uid, who.gid, who.pid)
        } else {
            "a TCP caller".to_owned()
        };
        let token = if who.token_presented { " with a bearer token" } else { "" };
        writeln!(self.out, "caller:  {caller}{token}")?;
        writeln!(self.out, "agent:   {}{}", who.agent, if who.admin { " (operator)" } else { "" })?;
        writeln!(
            self.out,
            "tools:   {} visible on {} servers, {} callable now",
            who.visible_tools, who.visible_servers, who.callable_tools
        )?;
        let Some(limits) = &who.limits else { return Ok(()) };
        let rate = match limits.rate_calls {
            0 => "no rate limit".to_owned(),
            calls => format!(
                "{calls} calls per {} (burst {}), {} could start now",
                humantime::format_duration(std::time::Duration::from_millis(limits.rate_per_ms)),
                limits.rate_burst,
                limits.rate_available
            ),
        };
        writeln!(self.out, "limits:  {} of {} calls in flight; {rate}", limits.in_flight, limits.concurrency)?;
        for quota in &limits.quotas {
            writeln!(
                self.out,
                "quota:   {} of {} calls per {} to {} used, {} left",
                quota.used,
                quota.calls,
                humantime::format_duration(std::time::Duration::from_millis(quota.per_ms)),
                quota.tools.join(", "),
                quota.calls.saturating_sub(quota.used)
            )?;
        }
        Ok(())
    }

    pub(crate) fn audit(&mut self, records: &[pb::AuditRecord]) -> std::io::Result<()> {
        if self.json {
            let list: Vec<Value> = records
                .iter()
                .map(|r| {
                    json!({"at_unix_ms": r.at_unix_ms, "agent": r.agent, "caller": r.caller, "transport": r.transport,
                           "name": r.qualified_name, "server": r.server, "tool": r.tool, "generation": r.generation,
                           "hash": r.definition_hash, "outcome": r.outcome, "duration_us": r.duration_us,
                           "arguments": if r.arguments.is_empty() { Value::Null } else { Value::from(r.arguments.clone()) },
                           "host": if r.host_id.is_empty() { Value::Null } else { Value::from(r.host_id.clone()) }})
                })
                .collect();
            return self.json_line(&Value::from(list));
        }
        let rows: Vec<Vec<String>> = records
            .iter()
            .map(|r| {
                vec![
                    rfc3339(r.at_unix_ms),
                    r.agent.clone(),
                    r.qualified_name.clone(),
                    r.generation.to_string(),
                    r.outcome.clone(),
                    format!("{:.1} ms", r.duration_us as f64 / 1000.0),
                    r.caller.clone(),
                    r.host_id.clone(),
                ]
            })
            .collect();
        self.table(&["AT", "AGENT", "TOOL", "GEN", "OUTCOME", "TOOK", "CALLER", "HOST"], &rows)
    }

    pub(crate) fn fleet(&mut self, fleet: &pb::FleetStatusResponse) -> std::io::Result<()> {
        let hosts: Vec<Value> = fleet
            .hosts
            .iter()
            .map(|h| {
                let servers: Vec<Value> = h
                    .servers
                    .iter()
                    .map(|s| json!({"server": s.server, "identity": s.identity, "state": s.state, "generation": s.generation, "tools": s.tools}))
                    .collect();
                json!({"host": h.host_id, "version": h.version, "last_seen_unix_ms": h.last_seen_unix_ms, "servers": servers})
            })
            .collect();
        let drift: Vec<Value> = fleet
            .drift
            .iter()
            .map(|d| {
                let variants: Vec<Value> = d.variants.iter().map(|v| json!({"hash": v.definition_hash, "hosts": v.hosts})).collect();
                json!({"identity": d.identity, "tool": d.tool, "variants": variants})
            })
            .collect();
        if self.json {
            return self.json_line(&json!({"host": fleet.host_id, "connected": fleet.connected, "last_error": fleet.last_error,
                "audit_pending": fleet.audit_pending, "drifted_tools": fleet.drifted_tools, "hosts": hosts, "drift": drift}));
        }
        writeln!(self.out, "this host: {} ({} audit records waiting to ship)", fleet.host_id, fleet.audit_pending)?;
        let rows: Vec<Vec<String>> = fleet
            .hosts
            .iter()
            .flat_map(|h| {
                h.servers.iter().map(move |s| {
                    vec![
                        h.host_id.clone(),
                        rfc3339(h.last_seen_unix_ms),
                        s.server.clone(),
                        s.state.clone(),
                        s.generation.to_string(),
                        s.tools.to_string(),
                        s.identity.clone(),
                    ]
                })
            })
            .collect();
        self.table(&["HOST", "LAST SEEN", "SERVER", "STATE", "GEN", "TOOLS", "IDENTITY"], &rows)?;
        if fleet.drift.is_empty() {
            return writeln!(self.out, "no drift: every host sees the same definitions");
        }
        writeln!(self.out, "drift: tools that hosts see with different definitions")?;
        for d in &fleet.drift {
            writeln!(self.out, "  {} {}", d.identity, d.tool)?;
            for v in &d.variants {
                writeln!(self.out, "    {} on {}", v.definition_hash, v.hosts.join(", "))?;
            }
        }
        Ok(())
    }

    pub(crate) fn done(&mut self, message: &str) -> std::io::Result<()> {
        if self.json {
            return self.json_line(&json!({"ok": true}));
        }
        writeln!(self.out, "{message}")
    }

    /// Whether the caller asked for JSON.
    pub(crate) fn is_json(&self) -> bool {
        self.json
    }

    /// One line of text for a person.
    pub(crate) fn line(&mut self, text: &str) -> std::io::Result<()> {
        writeln!(self.out, "{text}")
    }

    pub(crate) fn json_line(&mut self, value: &Value) -> std::io::Result<()> {
        writeln!(self.out, "{value}")?;
        self.out.flush()
    }

    pub(crate) fn table(&mut self, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let padded: Vec<String> = cells.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
            padded.join("  ").trim_end().to_owned()
        };
        writeln!(self.out, "{}", line(header.to_vec()))?;
        for row in rows {
            writeln!(self.out, "{}", line(row.iter().map(String::as_str).collect()))?;
        }
        Ok(())
    }
}

/// One server as `toolhost servers --json` shows it (`store`: the store's state, when degraded).
pub(crate) fn server_json(s: &pb::Server, store: Option<&str>) -> Value {
    let races = s.stale_tool_races.unwrap_or_default();
    json!({
        "name": s.name, "state": state_name(s.state), "available": s.available, "transport": s.transport,
        "protocol_version": s.protocol_version, "era": s.era, "generation": s.generation, "tool_count": s.tool_count,
        "revalidating": s.revalidating, "restarts": s.restarts, "last_error": s.last_error,
        "stale_tool_races": {"removed_before_call": races.removed_before_call, "changed_since_listed": races.changed_since_listed, "upstream_unknown_tool": races.upstream_unknown_tool},
        "last_enumeration": s.last_enumeration.as_ref().map(enumeration_json),
        "store": store.unwrap_or("ok"),
        "calls_in_flight": s.calls_in_flight, "calls_waiting": s.calls_waiting,
        "sandbox": s.sandbox.as_ref().map(|b| json!({"enabled": b.enabled, "network": b.network, "memory_bytes": b.memory_bytes,
            "processes": b.processes, "open_files": b.open_files, "cpu_seconds": b.cpu_seconds, "tmp_bytes": b.tmp_bytes,
            "last_limit": b.last_limit, "enforcement": Some(&b.enforcement).filter(|e| !e.is_empty()),
            "enforcement_detail": Some(&b.enforcement_detail).filter(|e| !e.is_empty()),
            "read": b.read, "write": b.write, "home": Some(&b.home).filter(|home| !home.is_empty()),
            "allow": b.allow, "egress_tunnels": b.egress_tunnels, "egress_denied": b.egress_denied,
            "last_denied": Some(&b.last_denied).filter(|host| !host.is_empty()),
            "reaches": b.reaches.iter().map(|reach| json!({"host": reach.host, "why": reach.why})).collect::<Vec<_>>(),
            "last_denied_fix": Some(&b.last_denied_fix).filter(|fix| !fix.is_empty())})),
    })
}

pub(crate) fn enumeration_json(e: &pb::Enumeration) -> Value {
    json!({"started_unix_ms": e.started_unix_ms, "duration_ms": e.duration_ms, "reason": e.reason, "outcome": e.outcome,
           "pages": e.pages, "tools": e.tools, "bytes": e.bytes, "generation": e.generation, "error": e.error, "diagnostics": e.diagnostics})
}

fn parse_or_null(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 80 { format!("{}…", line.chars().take(79).collect::<String>()) } else { line.to_owned() }
}

pub(crate) fn state_name(state: i32) -> &'static str {
    match pb::ServerState::try_from(state).unwrap_or(pb::ServerState::Unspecified) {
        pb::ServerState::Unspecified => "unknown",
        pb::ServerState::Starting => "starting",
        pb::ServerState::Ready => "ready",
        pb::ServerState::NoTools => "no_tools",
        pb::ServerState::Reconnecting => "reconnecting",
        pb::ServerState::Backoff => "backoff",
        pb::ServerState::CrashLoop => "crash_loop",
        pb::ServerState::Failed => "failed",
        pb::ServerState::Disabled => "disabled",
        pb::ServerState::Stopped => "stopped",
        pb::ServerState::AuthFailed => "auth_failed",
        pb::ServerState::AuthRequired => "auth_required",
    }
}

/// Unix milliseconds as an RFC 3339 time (to the second, UTC).
pub(crate) fn rfc3339(unix_ms: i64) -> String {
    let since_epoch = std::time::Duration::from_millis(u64::try_from(unix_ms).unwrap_or(0));
    let at = std::time::UNIX_EPOCH.checked_add(since_epoch).unwrap_or(std::time::UNIX_EPOCH);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The definition that may be called: the API leaves it empty when it is the offered one.
fn approved_hash(tool: &pb::Tool) -> Option<&str> {
    match (tool.approved_hash.as_str(), tool.state.as_str()) {
        ("", "held") => None,
        ("", _) => Some(&tool.definition_hash),
        (hash, _) => Some(hash),
    }
}

/// A content block as a person reads it: text as it is, binary content (images, audio, embedded
/// blobs) summarised by kind, type and size rather than printed as base64 (`--json` has it all).
fn content_block(block: &Value) -> String {
    let text = |key: &str| block.get(key).and_then(Value::as_str);
    let kind = text("type").unwrap_or("content");
    if let Some(content) = text("text") {
        return content.to_owned();
    }
    let resource = block.get("resource");
    let data = text("data").or_else(|| resource.and_then(|r| r.get("blob")).and_then(Value::as_str));
    let mime = text("mimeType").or_else(|| resource.and_then(|r| r.get("mimeType")).and_then(Value::as_str)).unwrap_or("unknown type");
    if let Some(data) = data {
        // Base64 carries 3 bytes in 4 characters.
        let bytes = data.trim_end_matches('=').len() * 3 / 4;
        let uri = resource.and_then(|r| r.get("uri")).and_then(Value::as_str).map(|uri| format!(" {uri}")).unwrap_or_default();
        return format!("[{kind}{uri}: {mime}, {}]", human_bytes(bytes));
    }
    if let Some(text) = resource.and_then(|r| r.get("text")).and_then(Value::as_str) {
        return text.to_owned();
    }
    block.to_string()
}

fn human_bytes(bytes: usize) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// `net=none mem=1024M` for a sandboxed server, `OFF` without one, `-` for an HTTP server; a
/// limit that stopped it is named.
pub(crate) fn sandbox_summary(sandbox: Option<&pb::Sandbox>) -> String {
    match sandbox {
        None => "-".to_owned(),
        Some(sandbox) if !sandbox.enabled => "OFF".to_owned(),
        Some(sandbox) => {
            let mut text = format!(
                "net={} mem={}M procs={} tmp={}M",
                sandbox.network,
                sandbox.memory_bytes >> 20,
                sandbox.processes,
                sandbox.tmp_bytes >> 20
            );
            if !sandbox.enforcement.is_empty() {
                text.push_str(&format!(" limits={}", sandbox.enforcement));
            }
            if !sandbox.last_limit.is_empty() {
                text.push_str(&format!(" hit={}", sandbox.last_limit));
            }
            if sandbox.egress_denied > 0 {
                text.push_str(&format!(" denied={} ({})", sandbox.egress_denied, sandbox.last_denied));
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_gets_no_control_sequence_a_server_wrote() {
        let hostile = "Reads files\u{1b}[2J\u{1b}]8;;http://evil.example\u{7}click\u{1b}]8;;\u{7}\r\u{9b}31m\u{202e}txt.exe";
        let shown = printable(hostile);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
        assert!(shown.contains("\\u{1b}[2J") && shown.contains("\\u{d}") && shown.contains("\\u{202e}"), "{shown}");
        assert!(matches!(printable("plain\ttext\n"), Cow::Borrowed(_)));
        let mut out = Terminal { out: Vec::new(), json: false };
        write!(out, "{hostile}").unwrap();
        assert!(!out.out.contains(&0x1b) && !out.out.contains(&b'\r'));
        // As JSON: still JSON, and the same text once parsed.
        let mut out = Terminal { out: Vec::new(), json: true };
        write!(out, "{}", serde_json::json!({"description": hostile, "tag": "\u{E0041}"})).unwrap();
        let text = String::from_utf8(out.out).unwrap();
        assert!(!text.chars().any(unsafe_for_a_terminal), "{text}");
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["description"], hostile);
        assert_eq!(parsed["tag"], "\u{E0041}");
    }

    #[test]
    fn binary_content_is_summarised_and_text_printed() {
        assert_eq!(content_block(&json!({"type": "text", "text": "hello"})), "hello");
        let png = json!({"type": "image", "mimeType": "image/png", "data": "A".repeat(4096)});
        assert_eq!(content_block(&png), "[image: image/png, 3.0 KiB]");
        let audio = json!({"type": "audio", "mimeType": "audio/wav", "data": "AAAA"});
        assert_eq!(content_block(&audio), "[audio: audio/wav, 3 B]");
        let blob =
            json!({"type": "resource", "resource": {"uri": "file:///x.bin", "mimeType": "application/octet-stream", "blob": "AAAAAAAA"}});
        assert_eq!(content_block(&blob), "[resource file:///x.bin: application/octet-stream, 6 B]");
        assert_eq!(content_block(&json!({"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}})), "inside");
    }
}
