//! Hooks that observe cloud calls, with an in-memory tally and Prometheus counters.

use crate::error::Outcome;
use crate::provider::Operation;
use crate::provider_id::Cloud;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Observes the requests [`crate::Governed`] makes. Called on the calling task; must not block.
pub trait CallObserver: Send + Sync {
    /// One request (one attempt of a call) to `cloud` ended with `outcome` after `elapsed`.
    fn request(&self, cloud: Cloud, operation: Operation, outcome: Outcome, elapsed: Duration);

    /// The rate limiter held a call back for `waited`.
    fn rate_limited(&self, cloud: Cloud, operation: Operation, waited: Duration) {
        let _ = (cloud, operation, waited);
    }
}

/// Observes nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl CallObserver for NoObserver {
    fn request(&self, _: Cloud, _: Operation, _: Outcome, _: Duration) {}
}

/// Counts requests by operation and outcome, in memory (tests and benchmarks). Clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct CallCounts {
    counts: Arc<Mutex<BTreeMap<(Operation, Outcome), u64>>>,
}

impl CallCounts {
    /// Requests of `operation` that ended with `outcome`.
    pub fn get(&self, operation: Operation, outcome: Outcome) -> u64 {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner).get(&(operation, outcome)).copied().unwrap_or(0)
    }

    /// Requests of `operation`, whatever their outcome.
    pub fn of(&self, operation: Operation) -> u64 {
        Outcome::ALL.iter().map(|outcome| self.get(operation, *outcome)).sum()
    }

    /// Every request.
    pub fn total(&self) -> u64 {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner).values().sum()
    }
}

impl CallObserver for CallCounts {
    fn request(&self, _: Cloud, operation: Operation, outcome: Outcome, _: Duration) {
        *self.counts.lock().unwrap_or_else(PoisonError::into_inner).entry((operation, outcome)).or_insert(0) += 1;
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    cloud: &'static str,
    operation: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    cloud: &'static str,
    operation: &'static str,
}

/// Prometheus metrics of cloud calls:
/// - `cloud_requests_total{cloud, operation, outcome}`: requests (attempts) and how they ended;
/// - `cloud_request_duration_seconds{cloud, operation}`: how long each took;
/// - `cloud_rate_limited_seconds_total{cloud, operation}`: time calls waited for the client-side rate limit.
#[derive(Clone)]
pub struct PrometheusCalls {
    requests: Family<RequestLabels, Counter>,
    durations: Family<OperationLabels, Histogram>,
    waited: Family<OperationLabels, Counter<f64>>,
}

impl PrometheusCalls {
    /// Registers the metrics in `registry`.
    pub fn register(registry: &mut Registry) -> PrometheusCalls {
        let requests = Family::<RequestLabels, Counter>::default();
        // 10 ms to ~82 s: cloud calls range from fast reads to slow mutations.
        let durations = Family::<OperationLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(0.01, 2.0, 14))
        });
        let waited = Family::<OperationLabels, Counter<f64>>::default();
        registry.register("cloud_requests", "Requests to the cloud provider's API by outcome", requests.clone());
        registry.register_with_unit(
            "cloud_request_duration",
            "Duration of requests to the cloud provider's API",
            prometheus_client::registry::Unit::Seconds,
            durations.clone(),
        );
        registry.register_with_unit(
            "cloud_rate_limited",
            "Time cloud calls waited for the client-side rate limit",
            prometheus_client::registry::Unit::Seconds,
            waited.clone(),
        );
        PrometheusCalls { requests, durations, waited }
    }
}

impl CallObserver for PrometheusCalls {
    fn request(&self, cloud: Cloud, operation: Operation, outcome: Outcome, elapsed: Duration) {
        let labels = RequestLabels { cloud: cloud.scheme(), operation: operation.as_str(), outcome: outcome.as_str() };
        self.requests.get_or_create(&labels).inc();
        let labels = OperationLabels { cloud: cloud.scheme(), operation: operation.as_str() };
        self.durations.get_or_create(&labels).observe(elapsed.as_secs_f64());
    }

    fn rate_limited(&self, cloud: Cloud, operation: Operation, waited: Duration) {
        let labels = OperationLabels { cloud: cloud.scheme(), operation: operation.as_str() };
        self.waited.get_or_create(&labels).inc_by(waited.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_kept_by_operation_and_outcome() {
        let counts = CallCounts::default();
        let observer: &dyn CallObserver = &counts;
        observer.request(Cloud::Aws, Operation::CreateInstance, Outcome::Throttled, Duration::ZERO);
        observer.request(Cloud::Aws, Operation::CreateInstance, Outcome::Ok, Duration::ZERO);
        observer.request(Cloud::Aws, Operation::InstanceState, Outcome::Ok, Duration::ZERO);
        assert_eq!(counts.get(Operation::CreateInstance, Outcome::Throttled), 1);
        assert_eq!(counts.of(Operation::CreateInstance), 2);
        assert_eq!(counts.clone().total(), 3);
    }

    #[test]
    fn prometheus_metrics_carry_cloud_operation_and_outcome() {
        let mut registry = Registry::default();
        let metrics = PrometheusCalls::register(&mut registry);
        metrics.request(Cloud::Gce, Operation::DeleteInstance, Outcome::Transient, Duration::from_millis(30));
        metrics.rate_limited(Cloud::Gce, Operation::DeleteInstance, Duration::from_millis(500));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"cloud_requests_total{cloud="gce",operation="delete_instance",outcome="Transient"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"cloud_rate_limited_seconds_total{cloud="gce",operation="delete_instance"} 0.5"#));
        assert!(text.contains("cloud_request_duration_seconds_count"), "{text}");
    }
}
