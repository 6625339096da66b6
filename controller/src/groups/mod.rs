//! Controllers of cloud scaling groups: ScalingGroup images, PendingNode goals and deadlines, the cluster-autoscaler's pause.

pub mod autoscaler;
pub mod condition;
pub mod group_lists;
pub mod instances;
pub mod outdated;
pub mod pending_node;
pub mod scaling_group;
pub mod unrecorded;

use crate::events::Events;
use crate::leadership::{Leadership, Term};
use crate::nodes::SlimNode;
use cloud::{CloudProvider, Retry};
use futures::StreamExt;
use kube::Client;
use kube::runtime::reflector::Store;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a joining instance may take to become a Ready Node when its PendingNode names no deadline
/// (the rollout policy's `joinTimeout` later), as Constellation.
pub const DEFAULT_JOIN_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How long a leaving instance may take to be terminated when its PendingNode names no deadline (the rollout
/// policy's `leaveTimeout` later).
pub const DEFAULT_LEAVE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// [`CloudOptions::create_in_flight`] for the default call policy, with the clients' 30 s per-request timeout
/// (`cloud::aws::REQUEST_TIMEOUT`, `cloud::azure::DEFAULT_TIMEOUT`, `cloud::simulated::DEFAULT_TIMEOUT`): 3.5 min.
pub fn default_create_in_flight() -> Duration {
    cloud::CallPolicy::default().longest_call(Duration::from_secs(30))
}

/// The cloud the scaling-group controllers talk to, and their settings.
#[derive(Clone)]
pub struct CloudOptions {
    /// The provider, normally wrapped in [`cloud::Governed`] (rate limit and retries).
    pub provider: Arc<dyn CloudProvider>,
    /// The deadline of a joining PendingNode without `spec.deadline`, counted from its creation.
    pub join_timeout: Duration,
    /// The deadline of a leaving PendingNode without `spec.deadline`, counted from its creation.
    pub leave_timeout: Duration,
    /// Metrics of the controllers.
    pub metrics: GroupMetrics,
    /// etcd, whose member a replaced control-plane node leaves before its Node is deleted.
    pub etcd: Option<crate::etcd::EtcdConfig>,
    /// The control-plane nodes run no etcd member (external etcd, a managed control plane): nothing to remove.
    /// Without it and without `etcd`, a drained control-plane donor is held (`EtcdUnavailable`), never deleted.
    pub external_etcd: bool,
    /// How long after an instance request (the donor's `instance-requested` mark) a create sent for it may still
    /// make an instance ([`cloud::CallPolicy::longest_call`] of the provider's policy): an unrecorded request is
    /// taken as having made none only after that, whatever the group's list shows before.
    pub create_in_flight: Duration,
}

impl std::fmt::Debug for CloudOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudOptions")
            .field("cloud", &self.provider.cloud())
            .field("join_timeout", &self.join_timeout)
            .field("leave_timeout", &self.leave_timeout)
            .field("create_in_flight", &self.create_in_flight)
            .finish_non_exhaustive()
    }
}

impl CloudOptions {
    /// Options with the default timeouts and unregistered metrics.
    pub fn new(provider: Arc<dyn CloudProvider>) -> CloudOptions {
        CloudOptions {
            provider,
            join_timeout: DEFAULT_JOIN_TIMEOUT,
            leave_timeout: DEFAULT_LEAVE_TIMEOUT,
            metrics: GroupMetrics::default(),
            etcd: None,
            external_etcd: false,
            create_in_flight: default_create_in_flight(),
        }
    }

    /// These options for a control plane that runs no etcd member (see [`CloudOptions::external_etcd`]).
    pub fn with_external_etcd(mut self) -> CloudOptions {
        self.external_etcd = true;
        self
    }
}

/// The `group` label of scaling-group metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    /// The scaling group's cloud ID.
    pub group: String,
}

/// Metrics of the scaling-group controllers.
#[derive(Clone, Debug, Default)]
pub struct GroupMetrics {
    /// Instances that did not join before their deadline (or failed at the cloud) and were deleted: failed
    /// replacements, by group.
    pub failed_joins: Family<GroupLabels, Counter>,
    /// Leaving instances still not terminated at their deadline, by group (each deadline pass counts once).
    pub overdue_leaves: Family<GroupLabels, Counter>,
}

impl GroupMetrics {
    /// Registers the metrics in `registry`.
    pub fn register(registry: &mut Registry) -> GroupMetrics {
        let m = GroupMetrics::default();
        registry.register(
            "pending_node_failed_joins",
            "Instances deleted because they did not join in time (failed replacements), by group",
            m.failed_joins.clone(),
        );
        registry.register(
            "pending_node_overdue_leaves",
            "Leaving instances not terminated by their deadline, by group",
            m.overdue_leaves.clone(),
        );
        m
    }
}

/// What the scaling-group controllers share: clients, the cloud, Events, and the autoscaler's pause signal.
#[derive(Clone)]
pub struct Context {
    /// The API client.
    pub client: Client,
    /// Cloud and settings.
    pub cloud: CloudOptions,
    /// The Event publisher.
    pub events: Events,
    /// The leadership term the controllers run in: every write to the API or the cloud starts only while it is
    /// valid and is cancelled when it ends ([`fenced`]). `run` sets it for each term; without one, nothing is
    /// written.
    pub term: Option<Term>,
    /// The controller's cache of Nodes (slim: what the controller reads of them), synced.
    pub nodes: Store<SlimNode>,
    /// Bumped on every event of the Node watch that fills `nodes`.
    pub node_changes: tokio::sync::watch::Receiver<u64>,
    /// The controller's caches of NodeVersions, ScalingGroups and PendingNodes (the reconciler's and the
    /// replacer's), synced before the controller says it is ready.
    pub versions: Store<shared::crd::NodeVersion>,
    /// See `versions`.
    pub scaling_groups: Store<shared::crd::ScalingGroup>,
    /// See `versions`.
    pub pending: Store<shared::crd::PendingNode>,
    /// Bumped on every event of the watches that fill `versions`, `scaling_groups` and `pending`.
    pub resource_changes: tokio::sync::watch::Receiver<u64>,
    /// What the cloud said about the instances (shared with the rollout's replacer).
    pub instances: instances::Instances,
    /// The autoscaler's pause request, one for the process: the pause driver ([`outdated::drive`]) sends it, the
    /// AutoscalingStrategy controller follows it, and the rollouts' replacer reads it (a pause being lifted closes
    /// their autoscaler gate at once, before the strategy's status says so). Reset to unknown with each term.
    pub pause: Arc<autoscaler::PauseSender>,
}

/// Runs `write` (an API or cloud call that changes something) only while the context's term is valid, and
/// cancels it when the term ends.
pub(crate) async fn fenced<F: std::future::Future>(ctx: &Context, write: F) -> Result<F::Output, Error> {
    fence_write(ctx.term.as_ref(), write).await
}

async fn fence_write<F: std::future::Future>(term: Option<&Term>, write: F) -> Result<F::Output, Error> {
    let term = term.ok_or(Error::Fenced)?;
    term.fence(write).await.map_err(|_| Error::Fenced)
}

/// Runs the three controllers (and the default pause driver of the autoscaler) while this replica leads:
/// they start with each leadership term and stop when it ends or `shutdown` is cancelled.
pub async fn run(context: Context, leadership: Leadership, shutdown: CancellationToken) {
    let mut terms = leadership.subscribe();
    loop {
        // Wait for a term.
        let Some(term) = Leadership::next_term(&mut terms, &shutdown).await else { return };
        let context = Context { term: Some(term.clone()), ..context.clone() };
        tracing::info!("leading: starting the ScalingGroup, PendingNode and AutoscalingStrategy controllers");
        let term_tasks = shutdown.child_token();
        // Unknown until the driver of this term knows: no replica count changes, and the rollouts' gate is closed.
        context.pause.send_replace(None);
        let (pause, pause_rx) = (context.pause.clone(), context.pause.subscribe());
        let tasks = [
            tokio::spawn(scaling_group::run(context.clone(), term_tasks.clone())),
            tokio::spawn(pending_node::run(context.clone(), term_tasks.clone())),
            tokio::spawn(autoscaler::run(context.clone(), pause_rx, term_tasks.clone())),
            tokio::spawn(outdated::drive(context.clone(), pause, term_tasks.clone())),
        ];
        let stop = term_tasks;
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = term.ended() => {}
        }
        stop.cancel();
        for task in futures::stream::iter(tasks).then(|t| t).collect::<Vec<_>>().await {
            if let Err(error) = task {
                tracing::error!(%error, "a scaling-group controller task failed");
            }
        }
        if shutdown.is_cancelled() {
            return;
        }
        tracing::info!("lost the lead: stopped the scaling-group controllers");
    }
}

/// Errors of a reconcile that the API server caused (cloud errors are decisions, not errors): retried with
/// backoff by each controller's error policy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This replica's leadership ended before the write could start (or while it ran).
    #[error("leadership ended; the write was not made")]
    Fenced,
    /// A read or write of the API failed.
    #[error("{kind} {name}: {source}")]
    Kube {
        /// The kind of the object reconciled.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Runs a controller's result stream to its end, logging failed reconciles of `kind` (the error policy logs
/// and requeues them; this only keeps the stream going).
async fn log_results<S, O, E>(kind: &'static str, results: S)
where
    S: futures::Stream<Item = Result<O, E>>,
    E: std::fmt::Display,
{
    results
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, kind, "reconcile");
            }
        })
        .await;
}

/// When to try again after a cloud error, on the `attempt`th failure in a row (from 1): the API's
/// `Retry-After`; exponential backoff from 1 s doubling to 150 s with jitter (`backon`'s: up to the delay again,
/// so objects that failed together do not retry together), at most 5 min; a quota refusal not before 5 min; an
/// error a retry does not cure after 10 min (the object or its permissions may be fixed meanwhile).
pub fn retry_delay(retry: Retry, attempt: u32) -> Duration {
    const MAX: Duration = Duration::from_secs(300);
    match retry {
        Retry::After(after) => after.max(Duration::from_millis(100)),
        Retry::Backoff => {
            use backon::BackoffBuilder;
            let mut delays = backon::ExponentialBuilder::default()
                .with_min_delay(Duration::from_secs(1))
                .with_max_delay(MAX / 2)
                .with_jitter()
                .without_max_times()
                .build();
            // The delay of the attempt-th failure: past 9 doublings the delay is the longest.
            let steps = attempt.saturating_sub(1).min(10) as usize;
            delays.nth(steps).unwrap_or(MAX).min(MAX)
        }
        Retry::Later => MAX,
        Retry::Never => Duration::from_secs(600),
    }
}

/// Counts failures in a row per object, for [`retry_delay`].
#[derive(Debug, Default)]
pub struct Attempts(std::sync::Mutex<std::collections::HashMap<String, u32>>);

impl Attempts {
    /// Records one more failure of `key` and returns how many in a row.
    pub fn failed(&self, key: &str) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(key.to_owned()).or_default();
        *n = n.saturating_add(1);
        *n
    }

    /// Forgets the failures of `key` after a success.
    pub fn succeeded(&self, key: &str) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_follow_what_the_error_says() {
        assert_eq!(retry_delay(Retry::After(Duration::from_secs(7)), 1), Duration::from_secs(7));
        assert_eq!(retry_delay(Retry::After(Duration::ZERO), 3), Duration::from_millis(100));
        let within = |attempt: u32, low: u64, high: u64| {
            let delay = retry_delay(Retry::Backoff, attempt);
            assert!(delay >= Duration::from_secs(low) && delay <= Duration::from_secs(high), "{attempt}: {delay:?}");
        };
        within(1, 1, 2);
        within(2, 2, 4);
        within(5, 16, 32);
        within(40, 150, 300);
        within(u32::MAX, 150, 300);
        assert_eq!(retry_delay(Retry::Later, 1), Duration::from_secs(300));
        assert_eq!(retry_delay(Retry::Never, 1), Duration::from_secs(600));
    }

    /// Issue 27 item 5: the backoff has jitter, so that the objects a cloud outage failed together do not all
    /// retry in the same second.
    #[test]
    fn backoff_delays_are_spread_by_jitter() {
        for attempt in [1, 3, 12] {
            let drawn: std::collections::HashSet<Duration> =
                (0..50).map(|_| retry_delay(Retry::Backoff, attempt)).collect();
            assert!(drawn.len() > 1, "attempt {attempt}: always {drawn:?}");
        }
    }

    #[test]
    fn attempts_count_failures_in_a_row_per_object() {
        let attempts = Attempts::default();
        assert_eq!(attempts.failed("a"), 1);
        assert_eq!(attempts.failed("a"), 2);
        assert_eq!(attempts.failed("b"), 1);
        attempts.succeeded("a");
        assert_eq!(attempts.failed("a"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn writes_start_only_within_a_valid_term() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let written = AtomicBool::new(false);
        let write = || async { written.store(true, Ordering::SeqCst) };
        assert!(matches!(fence_write(None, write()).await, Err(Error::Fenced)));
        assert!(!written.load(Ordering::SeqCst), "no term: nothing is written");
        let leadership = Leadership::new();
        let term = leadership.begin(tokio::time::Instant::now() + Duration::from_secs(10));
        assert!(fence_write(Some(&term), write()).await.is_ok());
        assert!(written.swap(false, Ordering::SeqCst));
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(matches!(fence_write(Some(&term), write()).await, Err(Error::Fenced)));
        assert!(!written.load(Ordering::SeqCst), "a lapsed term writes nothing");
        let next = leadership.begin(tokio::time::Instant::now() + Duration::from_secs(10));
        leadership.end();
        assert!(matches!(fence_write(Some(&next), write()).await, Err(Error::Fenced)));
        assert!(!written.load(Ordering::SeqCst), "an ended term writes nothing");
    }
}
