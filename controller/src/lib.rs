//! The update-operator controller: watches NodeVersions and Nodes and drives rollouts.

mod metrics;

pub use metrics::Metrics;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use shared::crd::NodeVersion;
use shared::probes::Readiness;
use tokio_util::sync::CancellationToken;

/// Errors that stop the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A watch ended for good (kube-runtime's watcher retries transient errors itself).
    #[error("the {0} watch ended")]
    WatchEnded(&'static str),
}

/// Runs the controller until `shutdown` is cancelled.
pub async fn run(
    client: Client,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let (nodes, nodes_writer) = reflector::store::<Node>();
    let (versions, versions_writer) = reflector::store::<NodeVersion>();
    let node_events = reflector(nodes_writer, watcher(Api::<Node>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    let version_events =
        reflector(versions_writer, watcher(Api::<NodeVersion>::all(client), watcher::Config::default()))
            .default_backoff()
            .applied_objects();
    tracing::info!("watching nodes and nodeversions.update.edgeless.systems");
    let mut node_events = std::pin::pin!(node_events);
    let mut version_events = std::pin::pin!(version_events);
    let ready_nodes = nodes.clone();
    let ready_versions = versions.clone();
    let synced = async move {
        // Both stores fail to become ready only when their writers are dropped, i.e. never here.
        let _ = ready_nodes.wait_until_ready().await;
        let _ = ready_versions.wait_until_ready().await;
    };
    let mut synced = std::pin::pin!(synced);
    let mut is_synced = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = node_events.next() => if event.is_none() { return Err(Error::WatchEnded("nodes")) },
            event = version_events.next() => if event.is_none() { return Err(Error::WatchEnded("nodeversions")) },
            () = &mut synced, if !is_synced => {
                is_synced = true;
            let managed = nodes.state().iter().filter(|n| shared::protocol::is_managed(n.metadata.labels.as_ref())).count();
            metrics.managed_nodes.set(managed as i64);
            tracing::info!(nodes = nodes.state().len(), managed, nodeversions = versions.state().len(), "caches synced");
                readiness.set(true);
            }
        }
    }
}
pub mod policy;
