//! The update-operator agent: watches its own Node and carries out the controller's intents.

pub mod decide;
pub mod host;
mod metrics;

pub use metrics::Metrics;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use shared::probes::Readiness;
use tokio_util::sync::CancellationToken;

/// Errors that stop the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The watch of the agent's Node ended for good.
    #[error("the watch of node {0} ended")]
    WatchEnded(String),
}

/// Runs the agent of node `node_name` until `shutdown` is cancelled.
pub async fn run(
    client: Client,
    node_name: String,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let config = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let events = watcher(Api::<Node>::all(client), config).default_backoff().applied_objects();
    tracing::info!(node = %node_name, "watching own node");
    let mut events = std::pin::pin!(events);
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = events.next() => event,
        };
        match event {
            None => return Err(Error::WatchEnded(node_name)),
            Some(Ok(node)) => {
                metrics.node_events.inc();
                if !readiness.is_ready() {
                    tracing::info!(node = %node_name, resource_version = ?node.metadata.resource_version, "own node seen");
                    readiness.set(true);
                }
            }
            Some(Err(error)) => tracing::warn!(%error, "watch of own node failed; retrying"),
        }
    }
}
