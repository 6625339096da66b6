//! Prometheus metrics of the controller.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The controller's metrics, registered once at startup.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Nodes that carry the opt-in label.
    pub managed_nodes: Gauge,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Metrics::default();
        registry.register("managed_nodes", "Nodes that carry the opt-in label", metrics.managed_nodes.clone());
        metrics
    }
}
