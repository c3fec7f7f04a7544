//! The fleet link's gauges, read at each metrics collection.

use opentelemetry::metrics::{Meter, ObservableGauge};

/// The fleet store's gauges; dropping them unregisters the callbacks.
pub struct FleetGauges {
    _connected: ObservableGauge<u64>,
    _pending: ObservableGauge<u64>,
    _drift: ObservableGauge<u64>,
}

/// `toolhost.fleet.connected` (0 or 1), `toolhost.fleet.audit.pending` (records in this host's
/// spool) and `toolhost.fleet.drift.tools` (this host's tools another host sees differently).
pub fn register(meter: &Meter, fleet: super::Fleet) -> FleetGauges {
    let (a, b, c) = (fleet.clone(), fleet.clone(), fleet);
    FleetGauges {
        _connected: meter
            .u64_observable_gauge("toolhost.fleet.connected")
            .with_description("Whether the link to the fleet store is up")
            .with_callback(move |observer| observer.observe(u64::from(a.is_connected()), &[]))
            .build(),
        _pending: meter
            .u64_observable_gauge("toolhost.fleet.audit.pending")
            .with_description("Audit records waiting in this host's spool for the fleet store")
            .with_callback(move |observer| observer.observe(b.audit_pending(), &[]))
            .build(),
        _drift: meter
            .u64_observable_gauge("toolhost.fleet.drift.tools")
            .with_description("Tools of this host's servers that another host sees with a different definition")
            .with_callback(move |observer| observer.observe(c.drifted_tools(), &[]))
            .build(),
    }
}
