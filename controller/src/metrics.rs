//! Prometheus metrics of the controller.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// up_to_date, outdated, in_progress, failed or blocked.
    pub situation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// The plan's reason (PascalCase), the same as the Event reason.
    pub reason: String,
    /// ok or error.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictionLabels {
    /// accepted, refused (429) or error.
    pub result: &'static str,
}

/// The controller's metrics, registered once at startup.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Selected nodes per situation, as in the NodeVersion status.
    pub nodes: Family<NodeLabels, Gauge>,
    /// Node actions taken, by reason and result.
    pub actions: Family<ActionLabels, Counter>,
    /// Eviction requests, by result.
    pub evictions: Family<EvictionLabels, Counter>,
    /// Reconciles run.
    pub reconciles: Counter,
    /// Time from the start of a reconcile to its writes being done.
    pub reconcile_seconds: Histogram,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            nodes: Family::default(),
            actions: Family::default(),
            evictions: Family::default(),
            reconciles: Counter::default(),
            reconcile_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            leader: Gauge::default(),
        }
    }
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics::default();
        registry.register("nodes", "Selected nodes per situation", m.nodes.clone());
        registry.register("node_actions", "Node actions taken, by reason and result", m.actions.clone());
        registry.register("evictions", "Eviction requests, by result", m.evictions.clone());
        registry.register("reconciles", "Reconciles run", m.reconciles.clone());
        registry.register(
            "reconcile_seconds",
            "Duration of a reconcile including its writes",
            m.reconcile_seconds.clone(),
        );
        registry.register("leader", "1 while this replica holds the leader lease", m.leader.clone());
        m
    }
}
