//! How every controller runs: a keyed unit of work ([`Reconciler`]) over a work queue, behind its gate, retried
//! when it fails; the queueing of changed objects, and the status writes that wait until the cache shows them.

use super::informer::Informer;
use super::informers::Informers;
use super::objects::{self, Typed};
use super::queue::WorkQueue;
use crate::apiserver::object::{ObjectKey, object_key};
use crate::apiserver::store::Store;
use crate::apiserver::{ApiError, ControllerGate};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long a controller waits for its cache to show its own write before it goes on regardless (the cache
/// catches up within milliseconds unless the store is overloaded).
pub(crate) const READ_YOUR_WRITES: Duration = Duration::from_secs(10);

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
