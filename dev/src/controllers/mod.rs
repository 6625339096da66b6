//! The built-in controllers of the dev cluster: what kube-controller-manager, kube-scheduler and the kubelets do
//! in a real cluster, as tokio tasks against the in-process [`Store`].
//!
//! Each controller writes with its own identity (`dev/<name>`, the User-Agent in the request metrics) and
//! consults its [`crate::apiserver::ControllerGate`] (named [`names`]) before every unit of work, so tests can
//! pause it with `Faults::pause_controller`. All of them read shared caches ([`Informers`]) that list and watch
//! the store; nothing polls.
//!
//! | Controller | Gate | Identity | Does |
//! |---|---|---|---|
//! | [`disruption`] | `disruption` | `dev/disruption-controller` | PDB status (§4.3) |
//! | [`deployment`] | `deployment` | `dev/deployment-controller` | Deployment → ReplicaSets, rollouts |
//! | [`replicaset`] | `replicaset` | `dev/replicaset-controller` | ReplicaSet → pods |
//! | [`statefulset`] | `statefulset` | `dev/statefulset-controller` | StatefulSet → `<name>-<ordinal>` pods |
//! | [`daemonset`] | `daemonset` | `dev/daemonset-controller` | one pod per eligible node |
//! | [`job`] | `job` | `dev/job-controller` | Job → pods run to completion, Job status |
//! | [`scheduler`] | `scheduler` | `dev/scheduler` | binds pending pods |
//! | [`kubelet`] | `kubelet` | `dev/kubelet` | pod lifecycle, node status, leases, hosts |
//! | [`gc`] | `garbage-collector` | `dev/garbage-collector` | ownerReference cascades |
//! | [`podgc`] | `pod-garbage-collector` | `dev/pod-garbage-collector` | pods of nodes that are gone |
//! | [`clusterroleaggregation`] | `clusterrole-aggregation` | `dev/clusterrole-aggregation-controller` | aggregated ClusterRoles' rules |
//!
//! # Guarantees
//! - A paused controller writes nothing; its cache keeps following the store, and the work that arrives
//!   meanwhile (deduplicated per object) is done once it is resumed.
//! - Every controller waits for the first list of every cache before its first unit of work, and after a write
//!   waits (bounded) until its cache shows it, so it never acts twice on a stale view of its own writes.
//! - A failed unit of work is retried (after 20 ms on a conflict, after 500 ms otherwise); nothing is dropped.

pub mod clusterroleaggregation;
pub mod daemonset;
pub mod deployment;
pub mod disruption;
pub mod gc;
pub mod informer;
pub mod intern;
pub mod job;
pub mod kubelet;
pub mod objects;
pub mod podgc;
pub mod queue;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
mod workload;

use crate::apiserver::object::{ObjectKey, object_key};
use crate::apiserver::store::Store;
use crate::apiserver::{ApiError, ControllerGate, Gvr};
use crate::hosts::Hosts;
use crate::timing::Timing;
use informer::Informer;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRole;
use objects::{MetaOnly, NodeInfo, PodInfo, Typed};
use queue::WorkQueue;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The gate names of the controllers (for `Faults::pause_controller`).
pub mod names {
    /// PDB status.
    pub const DISRUPTION: &str = "disruption";
    /// Deployments.
    pub const DEPLOYMENT: &str = "deployment";
    /// ReplicaSets.
    pub const REPLICASET: &str = "replicaset";
    /// StatefulSets.
    pub const STATEFULSET: &str = "statefulset";
    /// DaemonSets.
    pub const DAEMONSET: &str = "daemonset";
    /// Jobs.
    pub const JOB: &str = "job";
    /// The scheduler.
    pub const SCHEDULER: &str = "scheduler";
    /// Every kubelet (pods, node status, leases).
    pub const KUBELET: &str = "kubelet";
    /// The garbage collector.
    pub const GARBAGE_COLLECTOR: &str = "garbage-collector";
    /// The pod garbage collector (pods of nodes that are gone).
    pub const POD_GARBAGE_COLLECTOR: &str = "pod-garbage-collector";
    /// The ClusterRole aggregation controller.
    pub const CLUSTERROLE_AGGREGATION: &str = "clusterrole-aggregation";
    /// Every name, in start order.
    pub const ALL: [&str; 11] = [
        DISRUPTION,
        DEPLOYMENT,
        REPLICASET,
        STATEFULSET,
        DAEMONSET,
        JOB,
        SCHEDULER,
        KUBELET,
        GARBAGE_COLLECTOR,
        POD_GARBAGE_COLLECTOR,
        CLUSTERROLE_AGGREGATION,
    ];
}

/// How long a controller waits for its cache to show its own write before it goes on regardless (the cache
/// catches up within milliseconds unless the store is overloaded).
const READ_YOUR_WRITES: Duration = Duration::from_secs(10);

/// Pause before a failed unit of work is tried again.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(500);

/// Pause before a unit of work that lost an optimistic-concurrency race is tried again (the cache needs a moment
/// to show the newer version).
const RETRY_AFTER_CONFLICT: Duration = Duration::from_millis(20);

/// Why one unit of work of a controller failed; every failure is retried.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The store refused a read or write.
    #[error("{0}")]
    Api(#[from] ApiError),
    /// An object could not be turned into what the store takes.
    #[error("cannot encode an object: {0}")]
    Encode(#[from] serde_json::Error),
}

impl SyncError {
    fn is_conflict(&self) -> bool {
        matches!(self, SyncError::Api(error) if error.code == 409)
    }
}

/// What a unit of work asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing until something changes.
    Done,
    /// Look at the key again after this long (something is due then).
    RequeueAfter(Duration),
}

impl Outcome {
    /// The earlier of two requests.
    pub fn min(self, other: Outcome) -> Outcome {
        match (self, other) {
            (Outcome::Done, o) | (o, Outcome::Done) => o,
            (Outcome::RequeueAfter(a), Outcome::RequeueAfter(b)) => Outcome::RequeueAfter(a.min(b)),
        }
    }
}

/// One controller: a keyed unit of work over its caches.
pub(crate) trait Reconciler: Send + 'static {
    /// What the work queue holds.
    type Key: Clone + Eq + Hash + Debug + Send + Sync + 'static;

    /// Brings the object at `key` to its desired state.
    fn sync(&mut self, key: &Self::Key) -> impl Future<Output = Result<Outcome, SyncError>> + Send;
}

/// Runs `reconciler` over `queue` until `shutdown`, consulting `gate` before each unit of work.
pub(crate) async fn run<R: Reconciler>(
    mut reconciler: R,
    queue: WorkQueue<R::Key>,
    mut gate: ControllerGate,
    shutdown: CancellationToken,
) {
    loop {
        let key = tokio::select! {
            () = shutdown.cancelled() => return,
            key = queue.next() => key,
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = gate.wait_until_running() => {}
        }
        match reconciler.sync(&key).await {
            Ok(Outcome::Done) => {}
            Ok(Outcome::RequeueAfter(delay)) => queue.add_after(key, delay),
            Err(error) if error.is_conflict() => queue.add_after(key, RETRY_AFTER_CONFLICT),
            Err(error) => {
                tracing::debug!(controller = gate.name(), ?key, %error, "sync failed; retrying");
                queue.add_after(key, RETRY_AFTER_ERROR);
            }
        }
    }
}

/// The worker of a controller: waits for the first list of every cache, then runs `reconciler` over `queue`.
pub(crate) fn worker<R: Reconciler>(
    reconciler: R,
    queue: WorkQueue<R::Key>,
    gate: ControllerGate,
    informers: &Informers,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let informers = informers.clone();
    async move {
        informers.wait_listed().await;
        run(reconciler, queue, gate, shutdown).await;
    }
}

/// Queues the key of every changed object of `informer`.
pub(crate) fn queue_changes<T: objects::Cached>(informer: &Informer<T>, queue: &WorkQueue<ObjectKey>) {
    let queue = queue.clone();
    informer.subscribe(move |change| queue.add(change.object().meta().key.clone()));
}

/// Queues the key of the controller of every changed object (before and after the change) when the controller
/// is a `kind`.
pub(crate) fn queue_controllers<T: objects::Cached>(
    informer: &Informer<T>,
    kind: &'static str,
    queue: &WorkQueue<ObjectKey>,
) {
    let queue = queue.clone();
    informer.subscribe(move |change| {
        for version in [&change.old, &change.new].into_iter().flatten() {
            let meta = version.meta();
            if let Some(owner) = meta.controller().filter(|o| &*o.kind == kind) {
                queue.add(object_key(meta.namespace.as_deref(), &owner.name));
            }
        }
    });
}

/// A kind whose status a controller writes.
pub(crate) trait HasStatus:
    kube::Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Its status type.
    type Status: PartialEq;
    /// The status, if any.
    fn status(&self) -> Option<&Self::Status>;
    /// Replaces the status.
    fn set_status(&mut self, status: Self::Status);
}

macro_rules! has_status {
    ($($kind:ty => $status:ty),* $(,)?) => {$(
        impl HasStatus for $kind {
            type Status = $status;
            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            fn set_status(&mut self, status: $status) {
                self.status = Some(status);
            }
        }
    )*};
}

has_status!(
    Deployment => k8s_openapi::api::apps::v1::DeploymentStatus,
    ReplicaSet => k8s_openapi::api::apps::v1::ReplicaSetStatus,
    StatefulSet => k8s_openapi::api::apps::v1::StatefulSetStatus,
    DaemonSet => k8s_openapi::api::apps::v1::DaemonSetStatus,
    Job => k8s_openapi::api::batch::v1::JobStatus,
    PodDisruptionBudget => k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus,
);

/// Writes `status` through `/status` with the object's resourceVersion (a concurrent write makes it conflict),
/// unless the object has it already; then waits until `informer` shows the write.
pub(crate) async fn write_status<K: HasStatus>(
    store: &Store,
    informer: &Informer<Typed<K>>,
    object: &Typed<K>,
    status: K::Status,
) -> Result<(), SyncError> {
    if object.object.status() == Some(&status) {
        return Ok(());
    }
    let mut updated = object.object.clone();
    updated.set_status(status);
    let written = store.api::<K>().update_status(
        object.meta.namespace.as_deref(),
        &updated,
        &kube::api::PostParams::default(),
    )?;
    informer.wait_for_rv(rv_of(written.meta()), READ_YOUR_WRITES).await;
    Ok(())
}

/// The resourceVersion of a written object (its `metadata.resourceVersion`).
pub(crate) fn rv_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version.as_deref().and_then(|rv| rv.parse().ok()).unwrap_or(0)
}

/// The shared caches every controller reads.
#[derive(Clone)]
pub struct Informers {
    /// Pods, indexed by owner, node and label.
    pub pods: Informer<PodInfo>,
    /// Nodes.
    pub nodes: Informer<NodeInfo>,
    /// PodDisruptionBudgets.
    pub pdbs: Informer<Typed<PodDisruptionBudget>>,
    /// Deployments.
    pub deployments: Informer<Typed<Deployment>>,
    /// ReplicaSets.
    pub replicasets: Informer<Typed<ReplicaSet>>,
    /// StatefulSets.
    pub statefulsets: Informer<Typed<StatefulSet>>,
    /// DaemonSets.
    pub daemonsets: Informer<Typed<DaemonSet>>,
    /// Jobs.
    pub jobs: Informer<Typed<Job>>,
    /// Node Leases and other Leases (for the garbage collector).
    pub leases: Informer<MetaOnly>,
    /// ClusterRoles (for the aggregation controller).
    pub cluster_roles: Informer<Typed<ClusterRole>>,
    /// Kinds only the garbage collector reads.
    pub others: Vec<Informer<MetaOnly>>,
}

impl Informers {
    fn new() -> Self {
        Informers {
            pods: Informer::with_label_index(Gvr::of::<Pod>()),
            nodes: Informer::new(Gvr::of::<Node>()),
            pdbs: Informer::new(Gvr::of::<PodDisruptionBudget>()),
            deployments: Informer::new(Gvr::of::<Deployment>()),
            replicasets: Informer::new(Gvr::of::<ReplicaSet>()),
            statefulsets: Informer::new(Gvr::of::<StatefulSet>()),
            daemonsets: Informer::new(Gvr::of::<DaemonSet>()),
            jobs: Informer::new(Gvr::of::<Job>()),
            leases: Informer::new(Gvr::of::<Lease>()),
            cluster_roles: Informer::new(Gvr::of::<ClusterRole>()),
            others: vec![
                Informer::new(Gvr::of::<ControllerRevision>()),
                Informer::new(Gvr::of::<ConfigMap>()),
                Informer::new(Gvr::of::<Secret>()),
                Informer::new(Gvr::of::<ServiceAccount>()),
                Informer::new(Gvr::of::<Service>()),
            ],
        }
    }

    fn spawn(&self, store: &Store, shutdown: &CancellationToken, tasks: &mut Vec<JoinHandle<()>>) {
        let store = store.with_identity("dev/informers");
        let (s, c) = (&store, shutdown);
        tasks.push(tokio::spawn(self.pods.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.nodes.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.pdbs.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.deployments.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.replicasets.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.statefulsets.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.daemonsets.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.jobs.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.leases.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.cluster_roles.clone().run(s.clone(), c.clone())));
        for other in &self.others {
            tasks.push(tokio::spawn(other.clone().run(s.clone(), c.clone())));
        }
    }

    /// Returns once every cache has its first list.
    pub async fn wait_listed(&self) {
        self.pods.wait_listed().await;
        self.nodes.wait_listed().await;
        self.pdbs.wait_listed().await;
        self.deployments.wait_listed().await;
        self.replicasets.wait_listed().await;
        self.statefulsets.wait_listed().await;
        self.daemonsets.wait_listed().await;
        self.jobs.wait_listed().await;
        self.leases.wait_listed().await;
        self.cluster_roles.wait_listed().await;
        for other in &self.others {
            other.wait_listed().await;
        }
    }
}

/// The running controllers. Dropping the handle does not stop them; [`RunningControllers::shutdown`] does.
pub struct RunningControllers {
    informers: Informers,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningControllers {
    /// Starts the caches and every controller against `store`; the kubelets run `hosts` and report
    /// `kubelet_version`.
    pub fn start(store: &Store, hosts: &Hosts, timing: &Timing, kubelet_version: &str) -> RunningControllers {
        let informers = Informers::new();
        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        // Controllers subscribe to the caches before the caches list, so they see every object.
        let controllers: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>> = vec![
            Box::pin(disruption::start(store, &informers, timing, shutdown.clone())),
            Box::pin(deployment::start(store, &informers, shutdown.clone())),
            Box::pin(replicaset::start(store, &informers, shutdown.clone())),
            Box::pin(statefulset::start(store, &informers, shutdown.clone())),
            Box::pin(daemonset::start(store, &informers, shutdown.clone())),
            Box::pin(job::start(store, &informers, timing, shutdown.clone())),
            Box::pin(scheduler::start(store, &informers, shutdown.clone())),
            Box::pin(kubelet::start(store, &informers, hosts, timing, kubelet_version, shutdown.clone())),
            Box::pin(gc::start(store, &informers, shutdown.clone())),
            Box::pin(podgc::start(store, &informers, timing.pod_gc_quarantine, shutdown.clone())),
            Box::pin(clusterroleaggregation::start(store, &informers, shutdown.clone())),
        ];
        informers.spawn(store, &shutdown, &mut tasks);
        for controller in controllers {
            tasks.push(tokio::spawn(controller));
        }
        RunningControllers { informers, shutdown, tasks }
    }

    /// The shared caches (what the controllers see).
    pub fn informers(&self) -> &Informers {
        &self.informers
    }

    /// Stops every controller and cache and waits for them.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for RunningControllers {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
