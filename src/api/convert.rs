//! Conversions from domain types to protobuf messages. The only place that builds them.

use crate::api::pb;
use crate::door::model::{Approval, CatalogChange, CatalogEvent, ConfigChange, EnumerationRecord, GenerationSummary, ServerState, redact};
use crate::door::view::{Server, Shown};

pub(crate) fn server(view: Server<'_>) -> pb::Server {
    let hello = view.hello();
    let races = view.races();
    let queue = view.queue();
    pb::Server {
        name: view.name().to_owned(),
        state: state(view.state()) as i32,
        available: view.available(),
        transport: view.transport().to_owned(),
        protocol_version: hello.map(|h| h.protocol_version.clone()).unwrap_or_default(),
        server_info_json: hello.and_then(|h| h.server_info.clone()).unwrap_or_default(),
        generation: view.generation(),
        tool_count: u32::try_from(view.tool_count()).unwrap_or(u32::MAX),
        revalidating: view.revalidating(),
        last_verified_unix_ms: view.last_verified_at_ms().unwrap_or(0),
        last_enumeration: view.last_enumeration().map(enumeration),
        last_error: view.last_error().map(|error| redact(error).into_owned()).unwrap_or_default(),
        restarts: view.restarts(),
        worker_panics: view.worker_panics(),
        era: hello.map(|h| h.era.as_str().to_owned()).unwrap_or_default(),
        stale_tool_races: Some(pb::StaleToolRaces {
            removed_before_call: races.removed_before_call,
            changed_since_listed: races.changed_since_listed,
            upstream_unknown_tool: races.upstream_unknown_tool,
        }),
        calls_in_flight: u32::try_from(queue.running).unwrap_or(u32::MAX),
        calls_waiting: u32::try_from(queue.waiting).unwrap_or(u32::MAX),
        sandbox: view.sandbox().map(|sandbox| {
            let limits = sandbox.limits();
            let egress = view.egress();
            pb::Sandbox {
                enabled: sandbox.enabled(),
                network: sandbox.network().to_owned(),
                memory_bytes: limits.memory_bytes,
                processes: limits.processes,
                open_files: limits.open_files,
                cpu_seconds: limits.cpu_seconds,
                last_limit: sandbox.last_limit().unwrap_or_default().to_owned(),
                tmp_bytes: limits.tmp_bytes,
                enforcement: if sandbox.enabled() { sandbox.enforcement().to_owned() } else { String::new() },
                enforcement_detail: if sandbox.enabled() { sandbox.enforcement_detail() } else { String::new() },
                read: sandbox.read().iter().map(|path| path.display().to_string()).collect(),
                write: sandbox.write().iter().map(|path| path.display().to_string()).collect(),
                home: sandbox.home().map(|home| home.display().to_string()).unwrap_or_default(),
                data: sandbox.data().map(|data| data.display().to_string()).unwrap_or_default(),
                allow: sandbox.allow().to_vec(),
                egress_tunnels: egress.tunnels,
                egress_denied: egress.denied,
                last_denied: egress.last_denied.unwrap_or_default(),
                reaches: sandbox.reaches().iter().map(|(host, why)| pb::Reach { host: host.clone(), why: why.clone() }).collect(),
                last_denied_fix: egress.last_fix.unwrap_or_default(),
            }
        }),
        history: Vec::new(),
    }
}

/// A server with what happened to it, newest first, for a view of that server alone.
pub(crate) fn server_with_history(view: Server<'_>) -> pb::Server {
    let history = view
        .history()
        .into_iter()
        .map(|happening| pb::ServerEvent {
            at_unix_ms: happening.at_ms,
            state: state(happening.state) as i32,
            what: redact(&happening.what).into_owned(),
        })
        .collect();
    pb::Server { history, ..server(view) }
}

pub(crate) fn state(state: ServerState) -> pb::ServerState {
    match state {
        ServerState::Starting => pb::ServerState::Starting,
        ServerState::Ready => pb::ServerState::Ready,
        ServerState::NoTools => pb::ServerState::NoTools,
        ServerState::Reconnecting => pb::ServerState::Reconnecting,
        ServerState::Backoff => pb::ServerState::Backoff,
        ServerState::CrashLoop => pb::ServerState::CrashLoop,
        ServerState::Failed => pb::ServerState::Failed,
        ServerState::Disabled => pb::ServerState::Disabled,
        ServerState::Stopped => pb::ServerState::Stopped,
        ServerState::AuthFailed => pb::ServerState::AuthFailed,
        ServerState::AuthRequired => pb::ServerState::AuthRequired,
    }
}

pub(crate) fn enumeration(record: &EnumerationRecord) -> pb::Enumeration {
    pb::Enumeration {
        started_unix_ms: record.started_at_ms,
        duration_ms: u64::try_from(record.duration_ms).unwrap_or(0),
        reason: record.reason.as_str().to_owned(),
        outcome: record.outcome.as_str().to_owned(),
        pages: record.pages,
        tools: record.tools,
        bytes: record.bytes,
        generation: record.generation,
        error: record.error.clone().unwrap_or_default(),
        diagnostics: record.diagnostics.clone(),
    }
}

/// A tool as the API shows it, with its definition when `with_definition`.
pub(crate) fn tool(shown: &Shown<'_>, with_definition: bool) -> pb::Tool {
    let tool = &*shown.def;
    let fields = tool.fields();
    let integrity = shown.integrity;
    let held = shown.held();
    pb::Tool {
        qualified_name: shown.qualified.clone().into_owned(),
        server: shown.server.name().to_owned(),
        name: tool.name.clone(),
        title: fields.title.clone(),
        description: fields.description.clone(),
        input_schema_json: fields.input_schema.clone(),
        output_schema_json: fields.output_schema.clone(),
        annotations_json: fields.annotations.clone(),
        definition_hash: tool.hash.clone(),
        generation: shown.generation,
        available: shown.available(),
        definition_json: if with_definition { tool.definition.to_string() } else { String::new() },
        state: if held.is_some() { "held" } else { "ok" }.to_owned(),
        hold_reason: held.map(|hold| hold.as_str().to_owned()).unwrap_or_default(),
        // Empty when it is `definition_hash` (the common case, kept off the wire).
        approved_hash: match integrity.and_then(|state| state.approved(&tool.hash)) {
            Some(hash) if hash != tool.hash => hash.to_owned(),
            _ => String::new(),
        },
        flags: integrity.map(|state| state.flags.names().into_iter().map(str::to_owned).collect()).unwrap_or_default(),
    }
}

/// A definition approval of tool `name`, as a server's history shows it.
pub(crate) fn approval((name, approval): (String, Approval)) -> pb::Approval {
    pb::Approval { name, hash: approval.hash, approved_by: approval.approved_by, approved_unix_ms: approval.approved_at_ms }
}

pub(crate) fn generation_change(summary: GenerationSummary) -> pb::GenerationChange {
    pb::GenerationChange {
        generation: summary.generation,
        committed_unix_ms: summary.committed_at_ms,
        reason: summary.reason.as_str().to_owned(),
        tool_count: summary.tool_count,
        added: summary.added,
        removed: summary.removed,
        changed: summary.changed,
    }
}

pub(crate) fn event(event: CatalogEvent) -> pb::CatalogEvent {
    let inner = match event.change {
        CatalogChange::GenerationPublished { server, generation, previous, added, removed, changed } => {
            pb::catalog_event::Event::GenerationPublished(pb::GenerationPublished {
                server: server.to_string(),
                generation,
                previous_generation: previous,
                added,
                removed,
                changed,
            })
        }
        CatalogChange::StateChanged { server, state: now, previous, available, error } => {
            pb::catalog_event::Event::ServerStateChanged(pb::ServerStateChanged {
                server: server.to_string(),
                state: state(now) as i32,
                previous_state: state(previous) as i32,
                available,
                error: error.unwrap_or_default(),
            })
        }
        CatalogChange::IntegrityChanged { server, held, released } => {
            pb::catalog_event::Event::IntegrityChanged(pb::IntegrityChanged { server: server.to_string(), held, released })
        }
        CatalogChange::ConfigChanged { server, change } => pb::catalog_event::Event::ServerConfigChanged(pb::ServerConfigChanged {
            server: server.to_string(),
            change: match change {
                ConfigChange::Added => "added",
                ConfigChange::Removed => "removed",
                ConfigChange::Changed => "changed",
            }
            .to_owned(),
        }),
    };
    pb::CatalogEvent { revision: event.revision, event: Some(inner) }
}

pub(crate) fn resync(revision: u64, reason: &str) -> pb::CatalogEvent {
    pb::CatalogEvent { revision, event: Some(pb::catalog_event::Event::Resync(pb::Resync { reason: reason.to_owned() })) }
}
