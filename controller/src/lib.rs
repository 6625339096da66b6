//! The update-operator controller: watches Nodes, the NodeVersion and PodDisruptionBudgets, and
//! drives rollouts through the node annotation protocol while it holds the leader lease.

pub mod agent_policy;
pub mod budget_order;
pub mod checkpoint;
pub mod cloud_steps;
pub mod cluster_version;
pub mod disruption;
pub mod do_not_disrupt;
pub mod drain;
pub mod etcd;
pub mod events;
pub mod executor;
pub mod forecast;
pub mod groups;
pub mod health_checks;
pub mod leader;
pub mod leadership;
pub mod metrics;
pub mod node_views;
pub mod nodeop;
pub mod nodes;
pub mod notices;
pub mod own_writes;
pub mod policy;
pub mod reason;
pub mod reconciler;
pub mod release;
pub mod replacer;
pub mod settle;
pub mod specs;
pub mod status;

pub use metrics::Metrics;

use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client};
use nodes::SlimNode;
use shared::crd::NodeVersion;
use shared::health::Health;
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
    /// The lease timing would void the election's guarantees.
    #[error("invalid lease timing: {0}")]
    LeaseTiming(String),
    #[error("cannot configure the etcd client: {0}")]
    Etcd(String),
}

/// The User-Agent of the requests of the replica `identity`: `update-operator/controller VERSION
/// (IDENTITY)`, so that audit logs (and the dev cluster's request log) tell replicas apart.
pub fn user_agent(identity: &str) -> String {
    format!("update-operator/controller {} ({identity})", env!("CARGO_PKG_VERSION"))
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
    /// The cloud of the scaling groups; without it the ScalingGroup, PendingNode and AutoscalingStrategy
    /// controllers do not run.
    pub cloud: Option<groups::CloudOptions>,
    /// The ValidatingAdmissionPolicy (and binding of the same name) that confines the agents: the
    /// leader acts only once it is in force ([`agent_policy`]). `None`: no check (the
    /// explicit `--allow-unconfined-agents` opt-out).
    pub agent_policy: Option<String>,
    /// Run the Kairos NodeOp and NodeOpUpgrade controllers (`operator.kairos.io`, see [`nodeop`]).
    pub node_operations: bool,
}

/// Runs the controller until `shutdown` is cancelled.
pub async fn run(
    config: kube::Config,
    options: Options,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    options.lease_timing.validate().map_err(Error::LeaseTiming)?;
    let client = Client::try_from(config.clone()).map_err(Error::Client)?;
    // Evictions get their own client without automatic retries: a PDB's 429 must come back at once
    // so the drain can retry on its own schedule (and on PDB changes).
    let eviction_client =
        Client::try_from(one_shot(config.clone(), drain::EVICTION_REQUEST_TIMEOUT)).map_err(Error::Client)?;
    // The lease gets its own client too: no hidden retries, and no request that outlives a round.
    let lease_client =
        Client::try_from(one_shot(config, options.lease_timing.round_timeout())).map_err(Error::Client)?;

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
    let (node_tx, node_rx) = watch::channel(0u64);
    tracing::info!("watching nodes, nodeversions.update.edgeless.systems and poddisruptionbudgets");
    // The reconciler looks only at the nodes the watch delivered (see `node_views`).
    let node_changes = Arc::new(node_views::Changes::default());
    let on_node = {
        let (trigger, changes) = (trigger.clone(), node_changes.clone());
        move |event: &watcher::Event<SlimNode>| {
            changes.record(event);
            trigger.notify_one();
            bump(&node_tx);
        }
    };
    spawn_watch("nodes", node_events, on_node, shutdown.clone());
    // Bumped on every event of the NodeVersion, ScalingGroup and PendingNode watches: the pause driver reads the
    // same caches as the reconciler and looks again on each change.
    let resource_changes = Arc::new(watch::channel(0u64).0);
    let on_version = {
        let (trigger, changes) = (trigger.clone(), resource_changes.clone());
        move |_: &_| {
            trigger.notify_one();
            bump(&changes);
        }
    };
    spawn_watch("nodeversions", version_events, on_version, shutdown.clone());
    spawn_watch("poddisruptionbudgets", pdb_events, move |_| bump(&pdb_tx), shutdown.clone());

    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        synced = async { nodes.wait_until_ready().await.and(versions.wait_until_ready().await) } => {
            if synced.is_err() {
                return Err(Error::WatchEnded("nodes or nodeversions"));
            }
        }
    }
    tracing::info!(nodes = nodes.state().len(), nodeversions = versions.state().len(), "caches synced");
    let gate = options.agent_policy.clone().map(|name| agent_policy::Gate::new(client.clone(), name));
    if gate.is_none() {
        tracing::warn!("not checking the agents' admission policy (--allow-unconfined-agents)");
    }

    let leadership = leadership::Leadership::new();
    let events = events::Events::start(client.clone(), Some(options.identity.clone()), leadership.clone());
    // The rollouts and the NodeOps decide their starts through one gate, each seeing the other's writes.
    let disruption = disruption::DisruptionGate::new();
    let writes = Arc::new(own_writes::OwnWrites::new());
    let pod_holds = Arc::new(do_not_disrupt::PodHolds::new(client.clone()));
    let nodeop_context = options.node_operations.then(|| nodeop::Context {
        pod_holds: Some(pod_holds.clone()),
        disruption: disruption.clone(),
        writes: writes.clone(),
        client: client.clone(),
        eviction_client: eviction_client.clone(),
        nodes: nodes.clone(),
        node_changes: node_rx.clone(),
        pdb_changes: pdb_rx.clone(),
        events: events.clone(),
        metrics: metrics.clone(),
        agent_policy: None,
    });
    let drains = Arc::new(drain::Drains::new(drain::DrainContext {
        eviction_client,
        watch_client: client.clone(),
        nodes: nodes.clone(),
        node_changes: node_rx.clone(),
        pdb_changes: pdb_rx,
        reconcile: trigger.clone(),
        metrics: metrics.clone(),
    }));
    // What the cloud says about the instances, asked once and shared by the replacer and the pause driver; each
    // answer plans again.
    let instances = options.cloud.as_ref().map(|cloud| {
        let instances = groups::instances::Instances::start(cloud.provider.clone(), shutdown.clone());
        notify_on_change(instances.subscribe(), trigger.clone(), shutdown.clone());
        instances
    });
    // The replacement's caches, synced before the controller says it is ready (so is every cache it acts on).
    let pause = Arc::new(groups::autoscaler::pause_channel().0);
    let replacer = match (&options.cloud, &instances) {
        (Some(cloud), Some(instances)) => {
            let caches = start_replacer(&client, trigger.clone(), resource_changes.clone(), &shutdown).await?;
            let replacer = replacer_for(&client, cloud, instances.clone(), &caches)?;
            // A changed pause request may open or close the rollouts' autoscaler gate: plan again.
            notify_on_change(pause.subscribe(), trigger.clone(), shutdown.clone());
            Some((Arc::new(replacer.with_pause(pause.subscribe())), caches))
        }
        _ => None,
    };
    health.set_ready(true);
    let groups_context =
        options.cloud.clone().zip(instances).zip(replacer.as_ref()).map(|((cloud, instances), (_, caches))| {
            groups::Context {
                client: client.clone(),
                cloud,
                events: events.clone(),
                term: None,
                nodes: nodes.clone(),
                node_changes: node_rx,
                versions: versions.clone(),
                scaling_groups: caches.groups.clone(),
                pending: caches.pending.clone(),
                resource_changes: resource_changes.subscribe(),
                instances,
                pause: pause.clone(),
            }
        });
    let replacer = replacer.map(|(replacer, _)| replacer);
    let mut executor =
        executor::Executor::new(Api::all(client.clone()), events.clone(), drains.clone(), metrics.clone())
            .with_writes(writes)
            .with_pod_holds(pod_holds);
    if let Some(replacer) = &replacer {
        replacer.set_events(events.clone());
        executor = executor.with_replacer(replacer.clone(), trigger.clone());
    }
    let mut reconciler = reconciler::Reconciler::new(
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
    reconciler.replacer = replacer;
    reconciler.disruption = disruption;
    reconciler.agent_policy = gate.clone();
    reconciler.node_changes = Some(node_changes);
    // The health checks' reads and evaluations, in the background; they read nothing while no spec has a check.
    let health_checks = Arc::new(health_checks::HealthChecks::new(client.clone(), reconciler.trigger.clone()));
    tokio::spawn(health_checks.clone().run(shutdown.clone()));
    reconciler.health_checks = Some(health_checks);

    let elector = leader::Elector::new(
        lease_client,
        &options.lease_namespace,
        &options.lease_name,
        &options.identity,
        options.lease_timing.clone(),
    );
    let leader_metrics = metrics.clone();
    let mut terms = leadership.subscribe();
    tokio::spawn(async move {
        while terms.changed().await.is_ok() {
            let leading = terms.borrow_and_update().as_ref().is_some_and(leadership::Term::is_valid);
            leader_metrics.leader.set(i64::from(leading));
        }
    });
    let stop_campaign = CancellationToken::new();
    let elector_heartbeat = health.heartbeat("elector", options.lease_timing.stuck_after());
    let election = tokio::spawn(elector.run(leadership.clone(), elector_heartbeat, stop_campaign.clone()));
    let reconciler_heartbeat = health.heartbeat("reconciler", reconciler::STUCK_AFTER);
    // The scaling-group controllers start once the leader found the agents' policy in force.
    let groups = groups_context.map(|context| {
        let (leadership, shutdown) = (leadership.clone(), shutdown.clone());
        let mut in_force = gate.as_ref().map(|g| g.in_force.subscribe());
        tokio::spawn(async move {
            if let Some(in_force) = &mut in_force {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    found = in_force.wait_for(|found| *found) => if found.is_err() { return },
                }
            }
            groups::run(context, leadership, shutdown).await
        })
    });
    // The NodeOp controllers start, as the scaling-group ones, once the agents' policy is in force.
    let node_operations = nodeop_context.map(|mut context| {
        context.agent_policy = gate.as_ref().map(|g| g.in_force.subscribe());
        tokio::spawn(nodeop::run(context, leadership.clone(), shutdown.clone()))
    });
    reconciler.run(leadership, reconciler_heartbeat, shutdown).await;
    if let Some(groups) = groups {
        let _ = groups.await;
    }
    if let Some(node_operations) = node_operations {
        let _ = node_operations.await;
    }
    // IMPORTANT: the lease is released only once the reconciler and its drains have stopped, so
    // nothing of this replica runs when another one takes over.
    stop_campaign.cancel();
    let _ = election.await;
    Ok(())
}

/// The caches the replacement reads besides Nodes and NodeVersions.
struct ReplacementCaches {
    groups: reflector::Store<shared::crd::ScalingGroup>,
    pending: reflector::Store<shared::crd::PendingNode>,
    strategies: reflector::Store<shared::crd::AutoscalingStrategy>,
}

/// The watches of the ScalingGroups, PendingNodes and AutoscalingStrategies (each change plans again; a group's or
/// a PendingNode's bumps `changes` too), returned once synced.
async fn start_replacer(
    client: &Client,
    trigger: Arc<Notify>,
    changes: Arc<watch::Sender<u64>>,
    shutdown: &CancellationToken,
) -> Result<ReplacementCaches, Error> {
    let (groups, groups_writer) = reflector::store::<shared::crd::ScalingGroup>();
    let (pending, pending_writer) = reflector::store::<shared::crd::PendingNode>();
    let (strategies, strategies_writer) = reflector::store::<shared::crd::AutoscalingStrategy>();
    let strategy_events =
        reflector(strategies_writer, watcher(Api::all(client.clone()), watcher::Config::default())).default_backoff();
    let group_events =
        reflector(groups_writer, watcher(Api::all(client.clone()), watcher::Config::default())).default_backoff();
    let pending_events =
        reflector(pending_writer, watcher(Api::all(client.clone()), watcher::Config::default())).default_backoff();
    let on_group = {
        let (trigger, changes) = (trigger.clone(), changes.clone());
        move |_: &_| {
            trigger.notify_one();
            bump(&changes);
        }
    };
    spawn_watch("scalinggroups", group_events, on_group, shutdown.clone());
    let on_pending = {
        let trigger = trigger.clone();
        move |_: &_| {
            trigger.notify_one();
            bump(&changes);
        }
    };
    spawn_watch("pendingnodes", pending_events, on_pending, shutdown.clone());
    spawn_watch("autoscalingstrategies", strategy_events, move |_| trigger.notify_one(), shutdown.clone());
    tokio::select! {
        () = shutdown.cancelled() => {}
        synced = async {
            groups.wait_until_ready().await?;
            pending.wait_until_ready().await?;
            strategies.wait_until_ready().await
        } => {
            if synced.is_err() {
                return Err(Error::WatchEnded("scalinggroups, pendingnodes or autoscalingstrategies"));
            }
        }
    }
    Ok(ReplacementCaches { groups, pending, strategies })
}

/// The rollouts' replacer over `caches`, with the etcd client if one is configured.
fn replacer_for(
    client: &Client,
    cloud: &groups::CloudOptions,
    instances: groups::instances::Instances,
    caches: &ReplacementCaches,
) -> Result<replacer::Replacer, Error> {
    let etcd = match &cloud.etcd {
        Some(config) => {
            etcd::Members::Client(Box::new(etcd::EtcdClient::new(config).map_err(|e| Error::Etcd(e.to_string()))?))
        }
        None if cloud.external_etcd => etcd::Members::External,
        None => etcd::Members::Unconfigured,
    };
    let (groups, pending, strategies) = (caches.groups.clone(), caches.pending.clone(), caches.strategies.clone());
    Ok(replacer::Replacer::new(client.clone(), cloud.provider.clone(), groups, pending, strategies, etcd, instances)
        .with_create_in_flight(cloud.create_in_flight))
}

/// `config` for requests that must fail fast: no automatic retries, and each bounded by `timeout`
/// (connecting, sending, and waiting for the answer).
fn one_shot(mut config: kube::Config, timeout: std::time::Duration) -> kube::Config {
    config.default_retry = false;
    config.connect_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    // Count the read timeout from the request, not from when a pooled connection went idle.
    config.reset_reader_on_write = true;
    config
}

/// Notifies `notify` on every change `changes` sees, until `shutdown` is cancelled or the sender is gone.
pub(crate) fn notify_on_change<T: Send + Sync + 'static>(
    mut changes: watch::Receiver<T>,
    notify: Arc<Notify>,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
            notify.notify_one();
        }
    });
}

fn bump(changes: &watch::Sender<u64>) {
    changes.send_modify(|n| *n = n.wrapping_add(1));
}

/// Drives a watch stream, calling `on_event` on every event; errors are retried by the stream's
/// backoff and logged here.
fn spawn_watch<S, K>(
    what: &'static str,
    stream: S,
    on_event: impl Fn(&watcher::Event<K>) + Send + 'static,
    shutdown: CancellationToken,
) where
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
                Some(Ok(event)) => on_event(&event),
                Some(Err(error)) => tracing::warn!(watch = what, %error, "watch failed; retrying"),
                None => {
                    tracing::error!(watch = what, "watch ended");
                    return;
                }
            }
        }
    });
}
