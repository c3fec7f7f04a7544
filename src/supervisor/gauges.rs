//! The registry's gauges, read at each metrics collection: servers by state, tools per server,
//! held tools.

use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, ObservableGauge};

use crate::registry::{Registry, ServerState};

/// Gauges read from the registry at each collection; dropping them unregisters the callbacks.
pub struct RegistryGauges {
    _sessions: ObservableGauge<u64>,
    _tools: ObservableGauge<u64>,
    _held: ObservableGauge<u64>,
}

/// Registers `toolhost.sessions` (servers by state) and `toolhost.tools` (tools per server).
pub fn register(meter: &Meter, registry: Arc<Registry>) -> RegistryGauges {
    let for_sessions = registry.clone();
    let sessions = meter
        .u64_observable_gauge("toolhost.sessions")
        .with_description("Servers by state")
        .with_callback(move |observer| {
            let snapshot = for_sessions.snapshot();
            for state in ServerState::ALL {
                let count = snapshot.servers.values().filter(|view| view.state() == state).count() as u64;
                observer.observe(count, &[KeyValue::new("toolhost.server.state", state.name())]);
            }
        })
        .build();
    let for_held = registry.clone();
    let held = meter
        .u64_observable_gauge("toolhost.tools.held")
        .with_description("Tools whose offered definition is not the approved one (not callable until approved)")
        .with_callback(move |observer| {
            for view in for_held.snapshot().servers.values() {
                let count = view.integrity().iter().filter(|state| state.held.is_some()).count() as u64;
                observer.observe(count, &[KeyValue::new("toolhost.server", view.name().to_string())]);
            }
        })
        .build();
    let tools = meter
        .u64_observable_gauge("toolhost.tools")
        .with_description("Tools in each server's current generation")
        .with_callback(move |observer| {
            for view in registry.snapshot().servers.values() {
                let count = view.generation().map_or(0, |g| g.tools.len() as u64);
                observer.observe(
                    count,
                    &[
                        KeyValue::new("toolhost.server", view.name().to_string()),
                        KeyValue::new("toolhost.server.available", view.is_available()),
                    ],
                );
            }
        })
        .build();
    RegistryGauges { _sessions: sessions, _tools: tools, _held: held }
}
