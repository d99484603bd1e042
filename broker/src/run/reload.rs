//! SIGHUP: read the config file again and apply what can change while running: new rings
//! are opened or created, and every tracked ring takes its new thresholds and policies (a
//! ring no longer in the file keeps running on the defaults, as any ring found on disk).
//! The broker group is bound into the control socket and `metrics_listen` into the
//! metrics listener, so a change to either is logged and waits for a restart. A file that does not parse or check leaves the running config as
//! it is.

use std::path::Path;

use tracing::{info, warn};

use super::registry::Broker;
use crate::config::Config;

/// Reload from `path` (`None`: running on the embedded default, nothing to reload).
pub fn reload(broker: &mut Broker, path: Option<&Path>) {
    let Some(path) = path else {
        info!("SIGHUP: running on the embedded default config, nothing to reload");
        return;
    };
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            warn!("SIGHUP: config not reloaded, the running one stays: {e}");
            return;
        }
    };
    match config.broker_gid() {
        Ok(gid) if gid != broker.gid => warn!(
            "SIGHUP: the broker group changed; the control socket, the namespace directory and the rings created from now on keep the old one until a restart"
        ),
        _ => {}
    }
    if config.broker.metrics_listen != broker.config.broker.metrics_listen {
        warn!("SIGHUP: metrics_listen changed; the metrics listener keeps its address until a restart");
    }
    broker.config = config;
    let names: Vec<String> = broker.rings.keys().cloned().collect();
    for name in names {
        let spec = broker.spec_for(&name);
        if let Some(t) = broker.rings.get_mut(&name) {
            t.counters.stall_threshold_ms = spec.stall_threshold.as_millis() as u64;
            t.counters.unblock_timeout_ms = spec.unblock_timeout.as_millis() as u64;
            t.spec = spec;
        }
    }
    broker.open_configured();
    broker.period = broker
        .rings
        .values()
        .map(|t| t.spec.sweep_period())
        .chain([broker.config.sweep_period()])
        .min()
        .unwrap_or(broker.period);
    info!(
        path = %path.display(),
        rings = broker.rings.len(),
        period = ?broker.period,
        "SIGHUP: config reloaded"
    );
}
