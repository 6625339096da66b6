//! Prometheus metrics of the agent.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostOpLabels {
    /// stage or reboot.
    pub operation: &'static str,
    /// ok or error.
    pub result: &'static str,
}

/// The agent's metrics, registered once at startup.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Watch events received for the agent's own Node.
    pub node_events: Counter,
    /// Writes of the agent's report to its Node.
    pub writes: Counter,
    /// Host operations, by operation and result.
    pub host_operations: Family<HostOpLabels, Counter>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Metrics::default();
        registry.register("node_events", "Watch events received for the agent's own Node", metrics.node_events.clone());
        registry.register("node_writes", "Writes of the agent's report to its Node", metrics.writes.clone());
        registry.register(
            "host_operations",
            "Host operations, by operation and result",
            metrics.host_operations.clone(),
        );
        metrics
    }
}
