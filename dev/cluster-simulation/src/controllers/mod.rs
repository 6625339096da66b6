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
mod informers;
pub mod intern;
pub mod job;
pub mod kubelet;
pub mod names;
pub mod objects;
pub mod podgc;
pub mod queue;
mod reconciler;
pub mod replicaset;
pub mod scheduler;
pub mod statefulset;
mod workload;

pub use informers::Informers;
pub use reconciler::{Outcome, SyncError};
pub(crate) use reconciler::{
    READ_YOUR_WRITES, Reconciler, queue_changes, queue_controllers, rv_of, worker, write_status,
};

use crate::apiserver::store::Store;
use crate::hosts::Hosts;
use crate::timing::Timing;
use std::future::Future;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

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
