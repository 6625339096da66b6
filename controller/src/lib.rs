//! The update-operator controller: watches Nodes, the NodeVersion and PodDisruptionBudgets, and
//! drives rollouts through the node annotation protocol while it holds the leader lease.

pub mod agent_policy;
pub mod drain;
pub mod events;
pub mod executor;
pub mod leader;
pub mod metrics;
pub mod nodes;
pub mod policy;
pub mod reconciler;
pub mod status;

pub use metrics::Metrics;

use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use nodes::SlimNode;
use shared::crd::NodeVersion;
use shared::probes::Readiness;
use std::sync::Arc;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// Errors that stop the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes client could not be built from the configuration.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// A cache never synced because its watch ended.
    #[error("the {0} watch ended before it synced")]
    WatchEnded(&'static str),
}

/// How this controller replica identifies itself and where it campaigns.
#[derive(Debug, Clone)]
pub struct Options {
    /// This replica's identity in the lease (its pod name).
    pub identity: String,
    pub lease_namespace: String,
    pub lease_name: String,
    pub lease_timing: leader::LeaseTiming,
    /// The node this replica runs on; it is updated last.
    pub own_node: Option<String>,
    /// The ValidatingAdmissionPolicy (and binding of the same name) that confines the agents: the
    /// replica campaigns only once it is in force ([`agent_policy`]). `None`: no check (the
    /// explicit `--allow-unconfined-agents` opt-out).
    pub agent_policy: Option<String>,
}

/// Runs the controller until `shutdown` is cancelled.
pub async fn run(
    config: kube::Config,
    options: Options,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let client = Client::try_from(config.clone()).map_err(Error::Client)?;
    // Evictions get their own client without automatic retries: a PDB's 429 must come back at once
    // so the drain can retry on its own schedule (and on PDB changes).
    let mut eviction_config = config;
    eviction_config.default_retry = false;
    let eviction_client = Client::try_from(eviction_config).map_err(Error::Client)?;

    let trigger = Arc::new(Notify::new());
    let (nodes, nodes_writer) = reflector::store::<SlimNode>();
    let node_events = reflector(
        nodes_writer,
        watcher(Api::<SlimNode>::all(client.clone()), watcher::Config::default()).modify(SlimNode::trim),
    )
    .default_backoff();
    let (versions, versions_writer) = reflector::store::<NodeVersion>();
    let version_events =
        reflector(versions_writer, watcher(Api::<NodeVersion>::all(client.clone()), watcher::Config::default()))
            .default_backoff();
    let (pdb_tx, pdb_rx) = watch::channel(0u64);
    let pdb_events =
        watcher(Api::<PartialObjectMeta<PodDisruptionBudget>>::all(client.clone()), watcher::Config::default())
            .default_backoff();
    tracing::info!("watching nodes, nodeversions.update.edgeless.systems and poddisruptionbudgets");
    spawn_watch("nodes", node_events, trigger.clone(), shutdown.clone());
    spawn_watch("nodeversions", version_events, trigger.clone(), shutdown.clone());
    let pdb_trigger = Arc::new(Notify::new());
    spawn_watch("poddisruptionbudgets", pdb_events, pdb_trigger.clone(), shutdown.clone());
    tokio::spawn(async move {
        loop {
            pdb_trigger.notified().await;
            pdb_tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    });

    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        synced = async { nodes.wait_until_ready().await.and(versions.wait_until_ready().await) } => {
            if synced.is_err() {
                return Err(Error::WatchEnded("nodes or nodeversions"));
            }
        }
    }
    tracing::info!(nodes = nodes.state().len(), nodeversions = versions.state().len(), "caches synced");
    readiness.set(true);
    match &options.agent_policy {
        Some(policy) => {
            if !agent_policy::wait_until_in_force(&client, policy, &versions, &shutdown).await {
                return Ok(());
            }
        }
        None => tracing::warn!("not checking the agents' admission policy (--allow-unconfined-agents)"),
    }

    let events = events::Events::start(client.clone(), Some(options.identity.clone()));
    let drains =
        Arc::new(drain::Drains::new(eviction_client, client.clone(), trigger.clone(), pdb_rx, metrics.clone()));
    let executor = executor::Executor::new(Api::all(client.clone()), events.clone(), drains.clone(), metrics.clone());
    let reconciler = reconciler::Reconciler::new(
        nodes,
        versions,
        Api::all(client.clone()),
        executor,
        drains,
        metrics.clone(),
        options.own_node.clone(),
        trigger,
        events,
    );

    let (leading_tx, leading_rx) = watch::channel(false);
    let elector = leader::Elector::new(
        client,
        &options.lease_namespace,
        &options.lease_name,
        &options.identity,
        options.lease_timing.clone(),
    );
    let leader_metrics = metrics.clone();
    let mut leading_watch = leading_rx.clone();
    tokio::spawn(async move {
        while leading_watch.changed().await.is_ok() {
            leader_metrics.leader.set(i64::from(*leading_watch.borrow()));
        }
    });
    let election = tokio::spawn(elector.run(leading_tx, shutdown.clone()));
    reconciler.run(leading_rx, shutdown).await;
    // Let the elector release the lease before returning.
    let _ = election.await;
    Ok(())
}

/// Drives a watch stream, waking `trigger` on every event; errors are retried by the stream's
/// backoff and logged here.
fn spawn_watch<S, K>(what: &'static str, stream: S, trigger: Arc<Notify>, shutdown: CancellationToken)
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                event = stream.next() => event,
            };
            match event {
                Some(Ok(_)) => trigger.notify_one(),
                Some(Err(error)) => tracing::warn!(watch = what, %error, "watch failed; retrying"),
                None => {
                    tracing::error!(watch = what, "watch ended");
                    return;
                }
            }
        }
    });
}
