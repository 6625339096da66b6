//! Drains: cordoned nodes are emptied through the Eviction API, one background task per node.
//!
//! # Guarantees
//! - Pods are only ever evicted (never deleted), so PodDisruptionBudgets are respected: the API
//!   server refuses an eviction that would break one (HTTP 429), and the drain retries it every
//!   [`EVICTION_RETRY`], or as soon as a PDB changes, until the node's drain timeout (enforced by
//!   the policy) runs out.
//! - The eviction client has the kube client's automatic retry turned off, so a 429 comes back at
//!   once instead of after minutes of hidden retries.
//! - A drain counts as finished only when every pod that had to go is gone from the node (deleted,
//!   or replaced by a pod with another UID), as `kubectl drain` waits.
//! - Only nodes in the `drain` step have a task; the reconciler stops the others.

pub mod filters;

use crate::metrics::Metrics;
use crate::policy::DrainProgress;
use filters::{PodVerdict, classify};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::EvictParams;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use shared::crd::DrainOptions;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long to wait before retrying an eviction the API server refused; `kubectl drain` waits 5 s
/// too.
pub const EVICTION_RETRY: Duration = Duration::from_secs(5);
/// Evictions in flight per node at once; enough for nodes with dozens of pods without flooding the
/// API server when many nodes drain together.
const EVICTIONS_PER_NODE: usize = 8;

/// The drain tasks of all nodes and what they report.
pub struct Drains {
    eviction_client: Client,
    watch_client: Client,
    tasks: Mutex<HashMap<String, CancellationToken>>,
    progress: Arc<Mutex<HashMap<String, DrainProgress>>>,
    /// Woken when a drain finishes or fails, so that the reconciler plans again.
    reconcile: Arc<Notify>,
    /// Bumped on every PodDisruptionBudget change.
    pdb_changes: watch::Receiver<u64>,
    metrics: Metrics,
}

impl Drains {
    /// `eviction_client` must have `default_retry` off.
    pub fn new(
        eviction_client: Client,
        watch_client: Client,
        reconcile: Arc<Notify>,
        pdb_changes: watch::Receiver<u64>,
        metrics: Metrics,
    ) -> Self {
        Drains {
            eviction_client,
            watch_client,
            tasks: Mutex::default(),
            progress: Arc::default(),
            reconcile,
            pdb_changes,
            metrics,
        }
    }

    /// What the drain of `node` has achieved.
    pub fn progress(&self, node: &str) -> DrainProgress {
        self.progress.lock().get(node).cloned().unwrap_or_default()
    }

    /// Starts draining `node` unless a drain task already runs for it.
    pub fn ensure(&self, node: &str, options: DrainOptions) {
        let mut tasks = self.tasks.lock();
        if tasks.contains_key(node) {
            return;
        }
        let cancel = CancellationToken::new();
        tasks.insert(node.to_owned(), cancel.clone());
        self.progress.lock().insert(node.to_owned(), DrainProgress::Running { waiting_on: None });
        let task = DrainTask {
            node: node.to_owned(),
            options,
            pods: Api::all(self.eviction_client.clone()),
            watch_pods: Api::all(self.watch_client.clone()),
            progress: self.progress.clone(),
            reconcile: self.reconcile.clone(),
            pdb_changes: self.pdb_changes.clone(),
            metrics: self.metrics.clone(),
        };
        tracing::info!(node, "drain started");
        tokio::spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                () = task.run() => {}
            }
        });
    }

    /// Stops the drain of `node` (if any) and forgets its progress.
    pub fn stop(&self, node: &str) {
        if let Some(cancel) = self.tasks.lock().remove(node) {
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

struct DrainTask {
    node: String,
    options: DrainOptions,
    pods: Api<Pod>,
    watch_pods: Api<Pod>,
    progress: Arc<Mutex<HashMap<String, DrainProgress>>>,
    reconcile: Arc<Notify>,
    pdb_changes: watch::Receiver<u64>,
    metrics: Metrics,
}

enum Outcome {
    Accepted,
    Gone,
    Refused(String),
}

impl DrainTask {
    async fn run(mut self) {
        let (store, writer) = reflector::store::<Pod>();
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        // The raw events, not `touched_objects()`: the drain may judge the node only after
        // `InitDone`, which tells an empty node from a list not yet received.
        let events = reflector(writer, watcher(self.watch_pods.clone(), config)).default_backoff();
        let mut events = std::pin::pin!(events);
        let mut evictions: HashMap<String, Eviction> = HashMap::new();
        let mut running: JoinSet<(String, Outcome)> = JoinSet::new();
        let limit = Arc::new(Semaphore::new(EVICTIONS_PER_NODE));
        let mut synced = false;
        loop {
            let next_retry = evictions.values().filter_map(|e| e.retry_at).min();
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(watcher::Event::InitDone)) => synced = true,
                    Some(Ok(_)) => {}
                    Some(Err(error)) => tracing::warn!(node = %self.node, %error, "pod watch of the drain failed; retrying"),
                    None => return,
                },
                Some(joined) = running.join_next(), if !running.is_empty() => {
                    if let Ok((uid, outcome)) = joined {
                        let e = evictions.entry(uid).or_default();
                        e.in_flight = false;
                        match outcome {
                            Outcome::Accepted | Outcome::Gone => e.accepted = true,
                            Outcome::Refused(why) => {
                                e.retry_at = Some(Instant::now() + EVICTION_RETRY);
                                e.last_refusal = Some(why);
                            }
                        }
                    }
                }
                () = tokio::time::sleep_until(next_retry.unwrap_or_else(Instant::now)), if next_retry.is_some() => {}
                Ok(()) = self.pdb_changes.changed() => {
                    // A budget changed: refused evictions may pass now.
                    for e in evictions.values_mut() {
                        e.retry_at = e.retry_at.map(|_| Instant::now());
                    }
                }
            }
            if !synced {
                continue;
            }
            if self.step(&store, &mut evictions, &mut running, &limit) {
                return;
            }
        }
    }

    /// One pass over the node's pods; true when the drain is over (drained or failed).
    fn step(
        &self,
        store: &Store<Pod>,
        evictions: &mut HashMap<String, Eviction>,
        running: &mut JoinSet<(String, Outcome)>,
        limit: &Arc<Semaphore>,
    ) -> bool {
        let pods = store.state();
        let mut waiting_on = None;
        let mut remaining = 0;
        for pod in &pods {
            let uid = pod.uid().unwrap_or_default();
            let verdict = classify(pod, &self.options);
            match verdict {
                PodVerdict::Skip(_) => continue,
                PodVerdict::Block(message) => {
                    self.finish(DrainProgress::Failed { message });
                    return true;
                }
                PodVerdict::Wait => remaining += 1,
                PodVerdict::Evict => {
                    remaining += 1;
                    let e = evictions.entry(uid.clone()).or_default();
                    if let Some(why) = &e.last_refusal {
                        waiting_on.get_or_insert_with(|| {
                            format!("pod {}/{}: {why}", pod.namespace().unwrap_or_default(), pod.name_any())
                        });
                    }
                    let due = e.retry_at.is_none_or(|at| at <= Instant::now());
                    if !e.in_flight && !e.accepted && due {
                        e.in_flight = true;
                        e.retry_at = None;
                        let pods = self.pods.clone();
                        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
                        let limit = limit.clone();
                        let metrics = self.metrics.clone();
                        running.spawn(async move {
                            let _permit = limit.acquire_owned().await;
                            (uid, evict(&pods, &namespace, &name, &metrics).await)
                        });
                    }
                }
            }
        }
        if remaining == 0 {
            self.finish(DrainProgress::Drained);
            return true;
        }
        self.progress.lock().insert(self.node.clone(), DrainProgress::Running { waiting_on });
        false
    }

    fn finish(&self, progress: DrainProgress) {
        match &progress {
            DrainProgress::Drained => tracing::info!(node = %self.node, "drained"),
            DrainProgress::Failed { message } => tracing::warn!(node = %self.node, message, "drain cannot finish"),
            _ => {}
        }
        self.progress.lock().insert(self.node.clone(), progress);
        self.reconcile.notify_one();
    }
}

/// Asks the API server to evict one pod.
async fn evict(pods: &Api<Pod>, namespace: &str, name: &str, metrics: &Metrics) -> Outcome {
    let api: Api<Pod> = Api::namespaced(pods.clone().into_client(), namespace);
    match api.evict(name, &EvictParams::default()).await {
        Ok(_) => {
            metrics.evictions.get_or_create(&crate::metrics::EvictionLabels { result: "accepted" }).inc();
            Outcome::Accepted
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Outcome::Gone,
        Err(kube::Error::Api(status)) => {
            let result = if status.code == 429 { "refused" } else { "error" };
            metrics.evictions.get_or_create(&crate::metrics::EvictionLabels { result }).inc();
            let causes: Vec<String> = status
                .details
                .as_ref()
                .map(|d| d.causes.iter().filter(|c| !c.message.is_empty()).map(|c| c.message.clone()).collect())
                .unwrap_or_default();
            let mut why = status.message.clone();
            if !causes.is_empty() {
                why = format!("{why} ({})", causes.join("; "));
            }
            Outcome::Refused(format!("eviction refused with {}: {why}", status.code))
        }
        Err(error) => {
            metrics.evictions.get_or_create(&crate::metrics::EvictionLabels { result: "error" }).inc();
            Outcome::Refused(format!("eviction request failed: {error}"))
        }
    }
}
