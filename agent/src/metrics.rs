//! Prometheus metrics of the agent.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostOpLabels {
    /// stage, reboot or release.
    pub operation: &'static str,
    /// ok, error or cancelled for `host_operations`; retry for `host_operation_retries`.
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
    /// Retries of host operations after transient errors, by operation.
    pub host_retries: Family<HostOpLabels, Counter>,
    /// Failed reads of the host's facts.
    pub facts_failures: Counter,
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
        registry.register(
            "host_operation_retries",
            "Retries of host operations after transient errors, by operation",
            metrics.host_retries.clone(),
        );
        registry.register("host_facts_failures", "Failed reads of the host's facts", metrics.facts_failures.clone());
        metrics
    }
}
