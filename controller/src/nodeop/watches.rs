//! The watches the NodeOp controllers read: NodeOps, NodeOpUpgrades, the Jobs they run and the pods of preflight
//! checks, each change (and each change of the nodes) waking the controllers.

use super::job;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use shared::crd::nodeop::{NodeOp, NodeOpUpgrade};
use std::sync::Arc;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// The caches of the watches.
pub(super) struct Caches {
    pub ops: Store<NodeOp>,
    pub upgrades: Store<NodeOpUpgrade>,
    pub jobs: Store<Job>,
    pub preflight_pods: Store<Pod>,
}

/// Starts the watches, each change (and each change of `node_changes`) notifying `trigger`, until `shutdown`.
/// Returns once every cache is synced; `None` on shutdown or when a watch ended first.
pub(super) async fn watch_all(
    client: &Client,
    node_changes: watch::Receiver<u64>,
    trigger: &Arc<Notify>,
    shutdown: &CancellationToken,
) -> Option<Caches> {
    let (ops, ops_writer) = reflector::store::<NodeOp>();
    let (upgrades, upgrades_writer) = reflector::store::<NodeOpUpgrade>();
    let (jobs, jobs_writer) = reflector::store::<Job>();
    let (preflight_pods, pods_writer) = reflector::store::<Pod>();
    let jobs_config =
        watcher::Config::default().labels(&format!("{}={}", job::MANAGED_BY_LABEL, job::MANAGED_BY_VALUE));
    fn on_change<K>(trigger: &Arc<Notify>) -> impl Fn(&watcher::Event<K>) + Send + 'static {
        let trigger = trigger.clone();
        move |_| trigger.notify_one()
    }
    crate::spawn_watch(
        "nodeops",
        reflector(ops_writer, watcher(Api::<NodeOp>::all(client.clone()), watcher::Config::default()))
            .default_backoff(),
        on_change(trigger),
        shutdown.clone(),
    );
    crate::spawn_watch(
        "nodeopupgrades",
        reflector(upgrades_writer, watcher(Api::<NodeOpUpgrade>::all(client.clone()), watcher::Config::default()))
            .default_backoff(),
        on_change(trigger),
        shutdown.clone(),
    );
    crate::spawn_watch(
        "nodeop jobs",
        reflector(jobs_writer, watcher(Api::<Job>::all(client.clone()), jobs_config)).default_backoff(),
        on_change(trigger),
        shutdown.clone(),
    );
    // Only the pods of preflight checks, whose termination message is the verdict.
    let pods_config = watcher::Config::default().labels(&format!(
        "{}={},{}=true",
        job::MANAGED_BY_LABEL,
        job::MANAGED_BY_VALUE,
        job::PREFLIGHT_LABEL
    ));
    crate::spawn_watch(
        "nodeop preflight pods",
        reflector(pods_writer, watcher(Api::<Pod>::all(client.clone()), pods_config)).default_backoff(),
        on_change(trigger),
        shutdown.clone(),
    );
    crate::notify_on_change(node_changes, trigger.clone(), shutdown.clone());
    tokio::select! {
        () = shutdown.cancelled() => None,
        synced = async {
            ops.wait_until_ready().await?;
            upgrades.wait_until_ready().await?;
            preflight_pods.wait_until_ready().await?;
            jobs.wait_until_ready().await
        } => match synced {
            Ok(()) => Some(Caches { ops, upgrades, jobs, preflight_pods }),
            Err(_) => {
                tracing::error!("the NodeOp watches ended before they synced");
                None
            }
        },
    }
}
