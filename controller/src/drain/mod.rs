//! Drains: cordoned nodes are emptied through the Eviction API, one background task per node, the
//! way `kubectl drain` empties them.
//!
//! # Guarantees
//! - **Classified before evicted**: no eviction starts until every pod on the node has been
//!   classified (after the pod list synced, the DaemonSets of DaemonSet pods looked up, and the
//!   PodDisruptionBudgets of the pods' namespaces listed). If any pod blocks the drain, it fails
//!   naming every blocking pod, having evicted nothing. A pod that shows up later and could not be
//!   evicted does not fail the drain: it is waited for (the drain timeout then decides).
//! - Pods are only ever evicted (never deleted), so PodDisruptionBudgets are respected; answers are
//!   read as kubectl reads them ([`eviction`]): refusals are retried every [`EVICTION_RETRY`] (or
//!   as soon as a budget changes), a pod under several budgets fails the drain naming them, a gone
//!   pod is done.
//! - **Only from a cordoned node**: an eviction starts only while the controller's cache shows the
//!   node unschedulable. If the node turns schedulable after the drain saw it cordoned (someone
//!   uncordoned it), the drain stops evicting at once and reports [`DrainProgress::Uncordoned`].
//! - **Only within the leadership term**: each eviction is fenced by the term that started the
//!   drain, and the task ends when the term does.
//! - The eviction client has automatic retries off and a request timeout, so a 429 comes back at
//!   once instead of after minutes of hidden retries.
//! - A drain counts as finished only when every pod that had to go is gone from the node (deleted,
//!   or replaced by a pod with another UID), as `kubectl drain` waits.
//! - A drain that waits says on what: in [`DrainProgress::Running`] (which the status shows) and
//!   in the log, once it has waited [`WAIT_LOG_AFTER`] and then at most every [`WAIT_LOG_EVERY`].
//! - Only nodes in the `drain` step have a task; the reconciler stops the others.

pub mod eviction;
pub mod filters;

use crate::leadership::Term;
use crate::metrics::Metrics;
use crate::nodes::SlimNode;
use crate::policy::DrainProgress;
use eviction::Outcome;
use filters::{
    DaemonSetLookup, PodContext, PodVerdict, budgets_matter, budgets_selecting, classify_with, daemon_set_of, pod_name,
};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use shared::crd::DrainOptions;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long to wait before retrying an eviction the API server refused; `kubectl drain` waits 5 s
/// too.
pub const EVICTION_RETRY: Duration = Duration::from_secs(5);
/// The longest one eviction (or lookup) request may take: far above a healthy server's answer,
/// short enough that a hung request does not hold an eviction slot for long.
pub const EVICTION_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A drain that waits this long says on what in the log...
pub const WAIT_LOG_AFTER: Duration = Duration::from_secs(10);
/// ...and then at most this often, per node.
pub const WAIT_LOG_EVERY: Duration = Duration::from_secs(60);
/// Evictions in flight per node at once; enough for nodes with dozens of pods without flooding the
/// API server when many nodes drain together.
const EVICTIONS_PER_NODE: usize = 8;

/// How a drain empties a node: a NodeVersion's [`DrainOptions`], and what a Kairos NodeOp's
/// `drainOptions` add, as `kubectl drain` has them. From [`DrainOptions`] alone: each pod keeps its
/// own grace period and DaemonSet pods are left in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainSettings {
    pub options: DrainOptions,
    /// `deleteOptions.gracePeriodSeconds` of each eviction (`kubectl drain --grace-period`); None:
    /// each pod's own termination grace period.
    pub grace_period_seconds: Option<i64>,
    /// Leave the pods of existing DaemonSets in place (`kubectl drain --ignore-daemonsets`);
    /// without it such a pod fails the drain before anything is evicted.
    pub ignore_daemon_sets: bool,
}

impl From<DrainOptions> for DrainSettings {
    fn from(options: DrainOptions) -> Self {
        DrainSettings { options, grace_period_seconds: None, ignore_daemon_sets: true }
    }
}

/// What a drain task reads and uses, shared by every task.
#[derive(Clone)]
pub struct DrainContext {
    /// For evictions and lookups; must have `default_retry` off.
    pub eviction_client: Client,
    /// For the pod watch.
    pub watch_client: Client,
    /// The controller's node cache, to see that a node is (still) cordoned.
    pub nodes: Store<SlimNode>,
    /// Bumped on every Node change.
    pub node_changes: watch::Receiver<u64>,
    /// Bumped on every PodDisruptionBudget change.
    pub pdb_changes: watch::Receiver<u64>,
    /// Woken when a drain finishes or fails, so that the reconciler plans again.
    pub reconcile: Arc<Notify>,
    pub metrics: Metrics,
}

/// The drain tasks of all nodes and what they report.
pub struct Drains {
    context: DrainContext,
    /// Running tasks by node: the task's cancellation and the number of the term it runs in.
    tasks: Mutex<HashMap<String, (CancellationToken, u64)>>,
    progress: Arc<Mutex<HashMap<String, DrainProgress>>>,
}

impl Drains {
    pub fn new(context: DrainContext) -> Self {
        Drains { context, tasks: Mutex::default(), progress: Arc::default() }
    }

    /// What the drain of `node` has achieved.
    pub fn progress(&self, node: &str) -> DrainProgress {
        self.progress.lock().get(node).cloned().unwrap_or_default()
    }

    /// What every drain task has achieved, by node (a node without one is [`DrainProgress::NotRunning`]).
    pub fn all_progress(&self) -> HashMap<String, DrainProgress> {
        self.progress.lock().clone()
    }

    /// Starts draining `node` within `term`, unless a drain task of this term already runs for it.
    pub fn ensure(&self, node: &str, settings: impl Into<DrainSettings>, term: &Term) {
        let mut tasks = self.tasks.lock();
        if tasks.get(node).is_some_and(|(_, number)| *number == term.number()) {
            return;
        }
        if let Some((stale, _)) = tasks.remove(node) {
            stale.cancel();
        }
        let cancel = CancellationToken::new();
        tasks.insert(node.to_owned(), (cancel.clone(), term.number()));
        self.progress.lock().insert(node.to_owned(), DrainProgress::Running { waiting_on: None });
        let task = DrainTask {
            node: node.to_owned(),
            settings: settings.into(),
            term: term.clone(),
            context: self.context.clone(),
            progress: self.progress.clone(),
        };
        tracing::info!(node, "drain started");
        let term = term.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = term.ended() => {}
                () = task.run() => {}
            }
        });
    }

    /// Stops the drain of `node` (if any) and forgets its progress.
    pub fn stop(&self, node: &str) {
        if let Some((cancel, _)) = self.tasks.lock().remove(node) {
            cancel.cancel();
            tracing::info!(node, "drain stopped");
        }
        self.progress.lock().remove(node);
    }

    /// Stops every drain whose node `keep` rejects.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self.tasks.lock().keys().filter(|n| !keep(n)).cloned().collect();
        for node in gone {
            self.stop(&node);
        }
    }

    /// Stops every drain (on shutdown or when leadership is lost).
    pub fn stop_all(&self) {
        self.retain(|_| false);
    }
}

/// An eviction's state for one pod (by UID).
#[derive(Debug, Default)]
struct Eviction {
    in_flight: bool,
    accepted: bool,
    retry_at: Option<Instant>,
    last_refusal: Option<String>,
}

/// Whether the node may be drained, as the controller's cache shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cordon {
    /// Unschedulable (or no longer in the cache: the reconciler stops the drain).
    Cordoned,
    /// Schedulable, and the drain never saw it cordoned: the cache has not caught up with the
    /// cordon yet.
    NotYet,
    /// Schedulable after the drain saw it cordoned: someone uncordoned it.
    Uncordoned,
}

struct DrainTask {
    node: String,
    settings: DrainSettings,
    term: Term,
    context: DrainContext,
    progress: Arc<Mutex<HashMap<String, DrainProgress>>>,
}

/// The evolving state of one drain.
#[derive(Default)]
struct DrainState {
    evictions: HashMap<String, Eviction>,
    daemon_sets: HashMap<(String, String), DaemonSetLookup>,
    /// The budgets of the pods' namespaces, listed for the first classification.
    budgets: HashMap<String, Vec<PodDisruptionBudget>>,
    /// Every pod was classified and none blocked: evictions may start.
    cleared: bool,
    seen_cordoned: bool,
}

/// When a waiting drain says in the log what it waits on: once it has waited [`WAIT_LOG_AFTER`],
/// then at most every [`WAIT_LOG_EVERY`].
#[derive(Debug)]
struct WaitLog {
    started: Instant,
    last: Option<Instant>,
}

impl WaitLog {
    fn new(started: Instant) -> Self {
        WaitLog { started, last: None }
    }

    /// Whether to log now (and if so, counts it as logged).
    fn due(&mut self, now: Instant) -> bool {
        let due = now.duration_since(self.started) >= WAIT_LOG_AFTER
            && self.last.is_none_or(|at| now.duration_since(at) >= WAIT_LOG_EVERY);
        if due {
            self.last = Some(now);
        }
        due
    }
}

impl DrainTask {
    async fn run(mut self) {
        let (store, writer) = reflector::store::<Pod>();
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        // The raw events, not `touched_objects()`: the drain may judge the node only after
        // `InitDone`, which tells an empty node from a list not yet received.
        let watch_pods: Api<Pod> = Api::all(self.context.watch_client.clone());
        let events = reflector(writer, watcher(watch_pods, config)).default_backoff();
        let mut events = std::pin::pin!(events);
        let mut state = DrainState::default();
        let mut running: JoinSet<(String, Option<Outcome>)> = JoinSet::new();
        let limit = Arc::new(Semaphore::new(EVICTIONS_PER_NODE));
        let mut wait_log = WaitLog::new(Instant::now());
        let mut synced = false;
        let mut tick = tokio::time::interval(WAIT_LOG_AFTER);
        // Until the first list of its pods arrives, that is what the drain waits on (an API server that does not
        // answer it leaves a timed-out drain named, not silent).
        let listing = format!("the pods of node {} to be listed", self.node);
        self.report_wait(&mut wait_log, Some(listing.clone()));
        loop {
            let next_retry = state.evictions.values().filter_map(|e| e.retry_at).min();
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(watcher::Event::InitDone)) => synced = true,
                    Some(Ok(_)) => {}
                    Some(Err(error)) => tracing::warn!(node = %self.node, %error, "pod watch of the drain failed; retrying"),
                    None => return,
                },
                Some(joined) = running.join_next(), if !running.is_empty() => {
                    if let Ok((uid, Some(outcome))) = joined {
                        let e = state.evictions.entry(uid).or_default();
                        e.in_flight = false;
                        match outcome {
                            Outcome::Accepted | Outcome::Gone => e.accepted = true,
                            Outcome::Retry(why) => {
                                e.retry_at = Some(Instant::now() + EVICTION_RETRY);
                                e.last_refusal = Some(why);
                            }
                            Outcome::Failed(message) => {
                                self.finish(DrainProgress::Failed { message });
                                return;
                            }
                        }
                    } else if let Ok((uid, None)) = joined {
                        // Not sent (the node turned schedulable): looked at again below.
                        state.evictions.entry(uid).or_default().in_flight = false;
                    }
                }
                () = tokio::time::sleep_until(next_retry.unwrap_or_else(Instant::now)), if next_retry.is_some() => {}
                Ok(()) = self.context.pdb_changes.changed() => {
                    // A budget changed: refused evictions may pass now.
                    for e in state.evictions.values_mut() {
                        e.retry_at = e.retry_at.map(|_| Instant::now());
                    }
                }
                Ok(()) = self.context.node_changes.changed() => {}
                _ = tick.tick() => {}
            }
            if !synced {
                self.report_wait(&mut wait_log, Some(listing.clone()));
                continue;
            }
            let waiting_on = match self.cordon(&mut state) {
                Cordon::Uncordoned => {
                    self.finish(DrainProgress::Uncordoned);
                    return;
                }
                Cordon::NotYet => Some(format!("node {} to show as cordoned", self.node)),
                Cordon::Cordoned => {
                    self.look_up(&store, &mut state).await;
                    match self.step(&store, &mut state, &mut running, &limit) {
                        Pass::Done(progress) => {
                            self.finish(progress);
                            return;
                        }
                        Pass::Waiting(waiting_on) => waiting_on,
                    }
                }
            };
            self.report_wait(&mut wait_log, waiting_on);
        }
    }

    fn cordon(&self, state: &mut DrainState) -> Cordon {
        let Some(node) = self.context.nodes.get(&reflector::ObjectRef::new(&self.node)) else {
            return Cordon::Cordoned;
        };
        // The controller cordons and records it in one write: the record on a schedulable node
        // means someone else uncordoned it.
        let recorded = node
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| shared::protocol::ControllerAnnotations::parse(a).is_ok_and(|c| c.cordoned_by_us));
        match (node.unschedulable(), state.seen_cordoned || recorded) {
            (true, _) => {
                state.seen_cordoned = true;
                Cordon::Cordoned
            }
            (false, false) => Cordon::NotYet,
            (false, true) => Cordon::Uncordoned,
        }
    }

    /// Looks up what classification needs and does not know yet: the DaemonSets of DaemonSet
    /// pods and, before the first classification, the budgets of the pods' namespaces.
    async fn look_up(&self, store: &Store<Pod>, state: &mut DrainState) {
        let pods = store.state();
        let unknown: BTreeSet<(String, String)> = pods
            .iter()
            .filter_map(|pod| daemon_set_of(pod).map(|ds| (pod.namespace().unwrap_or_default(), ds.name.clone())))
            .filter(|key| {
                !matches!(state.daemon_sets.get(key), Some(DaemonSetLookup::Exists | DaemonSetLookup::Missing))
            })
            .collect();
        for (namespace, name) in unknown {
            let api: Api<DaemonSet> = Api::namespaced(self.context.eviction_client.clone(), &namespace);
            let lookup = match self.term.fence(api.get_opt(&name)).await {
                Ok(Ok(Some(_))) => DaemonSetLookup::Exists,
                Ok(Ok(None)) => DaemonSetLookup::Missing,
                Ok(Err(error)) => DaemonSetLookup::Unknown(error.to_string()),
                Err(fenced) => DaemonSetLookup::Unknown(fenced.to_string()),
            };
            state.daemon_sets.insert((namespace, name), lookup);
        }
        if state.cleared {
            return;
        }
        let namespaces: BTreeSet<String> = pods
            .iter()
            .filter(|p| budgets_matter(p))
            .filter_map(|p| p.namespace())
            .filter(|ns| !state.budgets.contains_key(ns))
            .collect();
        for namespace in namespaces {
            let api: Api<PodDisruptionBudget> = Api::namespaced(self.context.eviction_client.clone(), &namespace);
            match self.term.fence(api.list(&ListParams::default())).await {
                Ok(Ok(list)) => {
                    state.budgets.insert(namespace, list.items);
                }
                Ok(Err(error)) => {
                    tracing::warn!(node = %self.node, namespace, %error, "cannot list PodDisruptionBudgets; retrying")
                }
                Err(_) => return,
            }
        }
    }

    /// One pass over the node's pods: classify them all, then evict what may go.
    fn step(
        &self,
        store: &Store<Pod>,
        state: &mut DrainState,
        running: &mut JoinSet<(String, Option<Outcome>)>,
        limit: &Arc<Semaphore>,
    ) -> Pass {
        let pods = store.state();
        let verdicts: Vec<(&Arc<Pod>, PodVerdict)> = pods
            .iter()
            .map(|pod| {
                let namespace = pod.namespace().unwrap_or_default();
                let context = PodContext {
                    daemon_set: daemon_set_of(pod)
                        .and_then(|ds| state.daemon_sets.get(&(namespace.clone(), ds.name.clone())).cloned()),
                    budgets: (!state.cleared)
                        .then(|| state.budgets.get(&namespace).map(|b| budgets_selecting(b, pod)))
                        .flatten(),
                };
                (pod, classify_with(pod, &self.settings, &context))
            })
            .collect();
        if !state.cleared {
            let blocking: Vec<&str> = verdicts
                .iter()
                .filter_map(|(_, v)| match v {
                    PodVerdict::Block(message) => Some(message.as_str()),
                    _ => None,
                })
                .collect();
            if !blocking.is_empty() {
                return Pass::Done(DrainProgress::Failed { message: blocking.join("; ") });
            }
            let unlisted = pods
                .iter()
                .filter(|p| budgets_matter(p))
                .filter_map(|p| p.namespace())
                .find(|ns| !state.budgets.contains_key(ns));
            let undecided = verdicts.iter().find_map(|(_, v)| match v {
                PodVerdict::Undecided(why) => Some(why.clone()),
                _ => None,
            });
            if let Some(why) = undecided {
                return Pass::Waiting(Some(why));
            }
            if let Some(namespace) = unlisted {
                return Pass::Waiting(Some(format!("the PodDisruptionBudgets of namespace {namespace} to be listed")));
            }
            state.cleared = true;
            state.budgets.clear();
        }
        let mut waiting_on: Option<String> = None;
        let mut remaining = 0;
        for (pod, verdict) in verdicts {
            match verdict {
                PodVerdict::Skip(_) => {}
                PodVerdict::Block(message) => {
                    // It showed up after evictions started: wait for it rather than fail a drain
                    // that already evicted pods (the drain timeout decides).
                    remaining += 1;
                    waiting_on.get_or_insert(format!("a pod that arrived during the drain: {message}"));
                }
                PodVerdict::Wait(why) | PodVerdict::Undecided(why) => {
                    remaining += 1;
                    waiting_on.get_or_insert(why);
                }
                PodVerdict::Evict => {
                    remaining += 1;
                    let uid = pod.uid().unwrap_or_default();
                    let e = state.evictions.entry(uid.clone()).or_default();
                    let due = e.retry_at.is_none_or(|at| at <= Instant::now());
                    if !e.in_flight && !e.accepted && due {
                        e.in_flight = true;
                        e.retry_at = None;
                        running.spawn(self.eviction(uid, pod.clone(), limit.clone()));
                    }
                    if let Some(why) = &e.last_refusal {
                        waiting_on.get_or_insert_with(|| why.clone());
                    } else if e.accepted {
                        waiting_on.get_or_insert_with(|| format!("pod {} to be deleted", pod_name(pod)));
                    } else if e.in_flight {
                        // Sent and not answered yet (an API server that holds the request, up to
                        // EVICTION_REQUEST_TIMEOUT).
                        waiting_on
                            .get_or_insert_with(|| format!("the eviction of pod {} to be answered", pod_name(pod)));
                    }
                }
            }
        }
        if remaining == 0 {
            return Pass::Done(DrainProgress::Drained);
        }
        Pass::Waiting(waiting_on)
    }

    /// Evicts `pod` once a slot is free, if the node is still cordoned and the term still valid
    /// at that moment; None when it was not sent.
    fn eviction(
        &self,
        uid: String,
        pod: Arc<Pod>,
        limit: Arc<Semaphore>,
    ) -> impl Future<Output = (String, Option<Outcome>)> + Send + 'static {
        let (client, metrics, term) =
            (self.context.eviction_client.clone(), self.context.metrics.clone(), self.term.clone());
        let (nodes, node) = (self.context.nodes.clone(), self.node.clone());
        let grace_period_seconds = self.settings.grace_period_seconds;
        async move {
            let _permit = limit.acquire_owned().await;
            // IMPORTANT: checked right before the request: a node uncordoned meanwhile, or a term
            // that ended, sends nothing.
            let cordoned =
                nodes.get(&reflector::ObjectRef::new(&node)).is_none_or(|n: Arc<SlimNode>| n.unschedulable());
            if !cordoned {
                return (uid, None);
            }
            match term.fence(eviction::evict(&client, &pod, grace_period_seconds, &metrics)).await {
                Ok(outcome) => (uid, Some(outcome)),
                Err(_) => (uid, None),
            }
        }
    }

    /// Publishes what the drain waits on, and logs it when `wait_log` says so.
    fn report_wait(&self, wait_log: &mut WaitLog, waiting_on: Option<String>) {
        self.progress.lock().insert(self.node.clone(), DrainProgress::Running { waiting_on: waiting_on.clone() });
        let now = Instant::now();
        if let Some(waiting_on) = waiting_on
            && wait_log.due(now)
        {
            let waited_seconds = now.duration_since(wait_log.started).as_secs();
            tracing::info!(node = %self.node, waited_seconds, waiting_on, "drain waiting");
        }
    }

    fn finish(&self, progress: DrainProgress) {
        match &progress {
            DrainProgress::Drained => tracing::info!(node = %self.node, "drained"),
            DrainProgress::Failed { message } => {
                tracing::warn!(node = %self.node, detail = message, "drain cannot finish")
            }
            DrainProgress::Uncordoned => {
                tracing::warn!(node = %self.node, "node uncordoned during the drain; stopped evicting")
            }
            _ => {}
        }
        self.progress.lock().insert(self.node.clone(), progress);
        self.context.reconcile.notify_one();
    }
}

/// Where a pass over the pods left the drain.
enum Pass {
    Done(DrainProgress),
    Waiting(Option<String>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_drain_logs_after_a_while_and_then_once_a_minute() {
        let start = Instant::now();
        let mut log = WaitLog::new(start);
        let at = |secs: u64| start + Duration::from_secs(secs);
        assert!(!log.due(at(0)) && !log.due(at(9)), "a short wait is not logged");
        assert!(log.due(at(10)));
        assert!(!log.due(at(11)) && !log.due(at(69)));
        assert!(log.due(at(70)));
        assert!(!log.due(at(100)));
        assert!(log.due(at(130)));
    }
}
