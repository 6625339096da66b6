//! Prometheus metrics of the agent.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// The agent's metrics, registered once at startup.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Watch events received for the agent's own Node.
    pub node_events: Counter,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Metrics::default();
        registry.register("node_events", "Watch events received for the agent's own Node", metrics.node_events.clone());
        metrics
    }
}
