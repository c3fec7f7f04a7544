//! `toolhost servers NAME`: one server, everything the table leaves out: the whole last error
//! (its exit, its stderr lines, the hint), what happened to it, its last listing, what its
//! sandbox holds (reads, writes, home, data directory) and its limits.

use serde_json::json;

use super::output::{self, Printer, rfc3339, state_name};
use crate::api::pb;

/// Prints `server` whole, or as one JSON object.
pub(crate) fn server(out: &mut Printer, server: &pb::Server) -> std::io::Result<()> {
    if out.is_json() {
        let mut value = output::server_json(server, None);
        value["server_info"] = serde_json::from_str(&server.server_info_json).unwrap_or(serde_json::Value::Null);
        if let Some(sandbox) = server.sandbox.as_ref().filter(|sandbox| !sandbox.data.is_empty()) {
            value["sandbox"]["data"] = json!(sandbox.data);
        }
        value["history"] = server
            .history
            .iter()
            .map(|event| json!({"at": rfc3339(event.at_unix_ms), "state": state_name(event.state), "what": event.what}))
            .collect();
        return out.json_line(&value);
    }
    let mut lines = vec![
        format!("server      {}", server.name),
        format!("state       {}{}", state_name(server.state), if server.available { "" } else { " (not callable now)" }),
        format!("transport   {}", server.transport),
    ];
    if !server.protocol_version.is_empty() {
        lines.push(format!("protocol    {} ({})", server.protocol_version, server.era));
    }
    lines.push(format!("tools       {} in generation {}", server.tool_count, server.generation));
    lines.push(format!("restarts    {}   calls now {}, waiting {}", server.restarts, server.calls_in_flight, server.calls_waiting));
    if let Some(sandbox) = &server.sandbox {
        lines.push(format!("sandbox     {}", output::sandbox_summary(Some(sandbox))));
        if sandbox.enabled {
            lines.push(format!("  cpu       {} s   open files {}", sandbox.cpu_seconds, sandbox.open_files));
            if !sandbox.enforcement_detail.is_empty() {
                lines.push(format!("  limits    {}", sandbox.enforcement_detail));
            }
            if !sandbox.home.is_empty() {
                lines.push(format!("  home      {}", sandbox.home));
            }
            lines.extend(sandbox.read.iter().map(|path| format!("  reads     {path}")));
            lines.extend(sandbox.write.iter().map(|path| format!("  writes    {path}")));
            if !sandbox.reaches.is_empty() {
                // Each host with why (through toolhost's proxy).
                lines.extend(sandbox.reaches.iter().map(|reach| format!("  reaches   {} ({})", reach.host, reach.why)));
            } else if !sandbox.allow.is_empty() {
                lines.push(format!("  reaches   {} (through toolhost's proxy)", sandbox.allow.join(", ")));
            }
            if !sandbox.allow.is_empty() {
                lines.push(format!("  egress    {} connections made, {} refused", sandbox.egress_tunnels, sandbox.egress_denied));
            }
            if !sandbox.last_denied.is_empty() {
                lines.push(format!("  refused   {} (the last host asked for that it may not reach)", sandbox.last_denied));
            }
            if !sandbox.last_denied_fix.is_empty() {
                lines.push(format!("  fix       {}", sandbox.last_denied_fix));
            }
        }
        // Also with its sandbox off: where what it keeps lies.
        if !sandbox.data.is_empty() {
            lines.push(format!("  data      {} (${{data}} in its env; made at its start, kept)", sandbox.data));
        }
    }
    if let Some(listing) = &server.last_enumeration {
        lines.push(format!(
            "listing     {} ({}) at {}: {} tools in {} pages, {} ms",
            listing.outcome,
            listing.reason,
            rfc3339(listing.started_unix_ms),
            listing.tools,
            listing.pages,
            listing.duration_ms
        ));
        if !listing.error.is_empty() {
            lines.push(format!("  error     {}", listing.error));
        }
    }
    lines.push(String::new());
    match server.last_error.as_str() {
        "" => lines.push("last error  none since it last started".to_owned()),
        error => {
            lines.push("last error".to_owned());
            lines.extend(error.lines().map(|line| format!("  {line}")));
        }
    }
    if !server.history.is_empty() {
        lines.push(String::new());
        lines.push("history (newest first)".to_owned());
        for event in &server.history {
            let mut what = event.what.lines();
            lines.push(format!("  {}  {:<12}  {}", rfc3339(event.at_unix_ms), state_name(event.state), what.next().unwrap_or_default()));
            lines.extend(what.map(|line| format!("  {:24}  {:<12}  {line}", "", "")));
        }
    }
    for line in lines {
        out.line(&line)?;
    }
    Ok(())
}
