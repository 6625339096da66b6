//! The controller's drain against a dev cluster, as `kubectl drain` behaves: every pod classified
//! before any eviction, pods under several budgets and orphaned DaemonSet pods refused with their
//! names, evictions in a terminating namespace left to the namespace controller, no eviction from a
//! node someone uncordoned (which the controller then blocks), and a drain that waits says on what,
//! down to the NodeVersion status.

use crate::support;

use controller::drain::{DrainContext, Drains};
use controller::leadership::{Leadership, Term};
use controller::nodes::SlimNode;
use controller::policy::DrainProgress;
use dev::apiserver::{LoggedRequest, Patch, RequestLog, Store};
use dev::cluster::{Cluster, ClusterConfig};
use dev::harness;
use dev::observer::{Limits, Observer, pod_ready};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::{Value, json};
use shared::crd::{DrainOptions, NodeVersion};
use shared::protocol::keys;
use std::sync::Arc;
use std::time::Duration;
use support::eventually;
use tokio::sync::{Notify, watch};

const NODE: &str = "worker-0";
const NS: &str = "t";

/// Three nodes, no sample workloads, the namespace `t`, and the request log on.
async fn cluster() -> Cluster {
    let config = ClusterConfig { nodes: 3, control_planes: 1, workloads: None, ..ClusterConfig::default() };
    let cluster = Cluster::start(config).await.unwrap();
    namespace(&cluster.store(), NS);
    cluster.server().request_log().enable(100_000);
    cluster
}

fn namespace(store: &Store, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    store.api::<Namespace>().create(None, &ns, &PostParams::default()).unwrap();
}

fn pod_template(labels: &Value, node: &str) -> Value {
    json!({
        "metadata": {"labels": labels},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    })
}

/// A ReplicaSet whose `replicas` pods run on `node`.
fn replica_set(store: &Store, namespace: &str, name: &str, replicas: i32, node: &str) {
    let labels = json!({"app": name});
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": pod_template(&labels, node)}
    }))
    .unwrap();
    store.api::<ReplicaSet>().create(Some(namespace), &rs, &PostParams::default()).unwrap();
}

/// A pod bound to `node`, with `extra` merged into its metadata.
fn bare_pod(store: &Store, name: &str, node: &str, metadata: Value, spec: Value) {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    });
    for (key, value) in metadata.as_object().into_iter().flatten() {
        pod["metadata"][key] = value.clone();
    }
    for (key, value) in spec.as_object().into_iter().flatten() {
        pod["spec"][key] = value.clone();
    }
    let pod: Pod = serde_json::from_value(pod).unwrap();
    store.api::<Pod>().create(Some(NS), &pod, &PostParams::default()).unwrap();
}

fn budget(store: &Store, namespace: &str, name: &str, spec: Value) {
    let pdb: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace}, "spec": spec})).unwrap();
    store.api::<PodDisruptionBudget>().create(Some(namespace), &pdb, &PostParams::default()).unwrap();
}

fn pods_on(store: &Store, node: &str) -> Vec<Pod> {
    let all = store.api::<Pod>().list(None, &ListParams::default()).unwrap().items;
    all.into_iter().filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)).collect()
}

/// Waits until `count` pods run Ready on `node`.
async fn running(store: &Store, node: &str, count: usize) {
    eventually(Duration::from_secs(60), &format!("{count} pods Ready on {node}"), || {
        let pods = pods_on(store, node);
        (pods.len() == count && pods.iter().all(pod_ready)).then_some(())
    })
    .await;
}

fn set_unschedulable(store: &Store, node: &str, unschedulable: bool) {
    let patch = Patch::Merge(json!({"spec": {"unschedulable": unschedulable}}));
    store.api::<Node>().patch(None, node, &patch, &Default::default()).unwrap();
}

fn evictions(log: &RequestLog) -> Vec<LoggedRequest> {
    log.entries().into_iter().filter(|e| e.request.subresource == "eviction").collect()
}

/// The controller's drains, run on their own against the cluster, within one long term.
struct Drainer {
    drains: Drains,
    term: Term,
    _leadership: Leadership,
}

async fn drainer(cluster: &Cluster) -> Drainer {
    let client = cluster.client();
    let (nodes, writer) = reflector::store::<SlimNode>();
    let (node_tx, node_changes) = watch::channel(0u64);
    let events =
        reflector(writer, watcher(Api::<SlimNode>::all(client.clone()), watcher::Config::default())).default_backoff();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while events.next().await.is_some() {
            node_tx.send_modify(|n| *n += 1);
        }
    });
    nodes.wait_until_ready().await.unwrap();
    let (_, pdb_changes) = watch::channel(0u64);
    let drains = Drains::new(DrainContext {
        eviction_client: cluster.client_with(|c| c.default_retry = false),
        watch_client: client,
        nodes,
        node_changes,
        pdb_changes,
        reconcile: Arc::new(Notify::new()),
        metrics: controller::Metrics::default(),
    });
    let leadership = Leadership::new();
    let term = leadership.begin(tokio::time::Instant::now() + Duration::from_secs(3600));
    Drainer { drains, term, _leadership: leadership }
}

impl Drainer {
    fn start(&self, node: &str, options: DrainOptions) {
        self.drains.ensure(node, options, &self.term);
    }

    /// The drain's progress once it ended (drained, failed or uncordoned).
    async fn outcome(&self, node: &str) -> DrainProgress {
        eventually(Duration::from_secs(90), &format!("the drain of {node} to end"), || {
            let progress = self.drains.progress(node);
            (!matches!(progress, DrainProgress::Running { .. } | DrainProgress::NotRunning)).then_some(progress)
        })
        .await
    }

    /// What the running drain waits on, once it says something that `matches`.
    async fn waiting_on(&self, node: &str, matches: impl Fn(&str) -> bool) -> String {
        eventually(Duration::from_secs(60), "the drain to say what it waits on", || match self.drains.progress(node) {
            DrainProgress::Running { waiting_on: Some(w) } if matches(&w) => Some(w),
            _ => None,
        })
        .await
    }
}

fn failure(progress: DrainProgress) -> String {
    match progress {
        DrainProgress::Failed { message } => message,
        other => panic!("the drain did not fail: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_blocking_pod_is_named_before_anything_is_evicted() {
    let cluster = cluster().await;
    let store = cluster.store();
    replica_set(&store, NS, "web", 6, NODE);
    bare_pod(&store, "bare-a", NODE, json!({}), json!({}));
    bare_pod(&store, "bare-b", NODE, json!({}), json!({}));
    running(&store, NODE, 8).await;
    set_unschedulable(&store, NODE, true);
    let drainer = drainer(&cluster).await;
    drainer.start(NODE, DrainOptions::default());

    let message = failure(drainer.outcome(NODE).await);
    assert!(message.contains("pod t/bare-a is not managed by a controller"), "{message}");
    assert!(message.contains("pod t/bare-b is not managed by a controller"), "{message}");
    assert_eq!(evictions(&cluster.server().request_log()), vec![], "a pod was evicted before the drain failed");
    assert_eq!(pods_on(&store, NODE).len(), 8);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_under_two_budgets_fails_the_drain_naming_them_before_any_eviction() {
    let cluster = cluster().await;
    let store = cluster.store();
    replica_set(&store, NS, "web", 3, NODE);
    budget(&store, NS, "web", json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}));
    budget(&store, NS, "everything", json!({"maxUnavailable": 1, "selector": {}}));
    running(&store, NODE, 3).await;
    set_unschedulable(&store, NODE, true);
    let drainer = drainer(&cluster).await;
    drainer.start(NODE, DrainOptions::default());

    let message = failure(drainer.outcome(NODE).await);
    assert!(message.contains("is selected by 2 PodDisruptionBudgets (everything, web)"), "{message}");
    assert_eq!(evictions(&cluster.server().request_log()), vec![]);
    cluster.shutdown().await;
}

/// Two pods of `web` on the node under a budget that allows no eviction.
async fn pinned_pods(store: &Store) {
    replica_set(store, NS, "web", 2, NODE);
    budget(store, NS, "web", json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}));
    running(store, NODE, 2).await;
}

/// A drain of the cordoned node, once it waits on the budget of [`pinned_pods`].
async fn drain_held_by_the_budget(cluster: &Cluster) -> Drainer {
    set_unschedulable(&cluster.store(), NODE, true);
    let drainer = drainer(cluster).await;
    drainer.start(NODE, DrainOptions::default());
    let waiting = drainer.waiting_on(NODE, |w| w.contains("refused with 429")).await;
    assert!(waiting.contains("The disruption budget web needs 2 healthy pods"), "{waiting}");
    drainer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_budget_that_appears_mid_drain_fails_it_with_the_api_servers_500_and_their_names() {
    let cluster = cluster().await;
    let store = cluster.store();
    pinned_pods(&store).await;
    let drainer = drain_held_by_the_budget(&cluster).await;

    budget(
        &store,
        NS,
        "also-web",
        json!({"maxUnavailable": 1, "selector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["web"]}]}}),
    );
    let message = failure(drainer.outcome(NODE).await);
    assert!(message.contains("is selected by 2 PodDisruptionBudgets (also-web, web)"), "{message}");
    let log = cluster.server().request_log();
    assert!(evictions(&log).iter().any(|e| e.code == 500), "the API server never answered 500");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_daemonset_pod_blocks_the_drain_unless_forced_and_a_daemonsets_own_pod_stays() {
    let cluster = cluster().await;
    let store = cluster.store();
    let labels = json!({"app": "agent"});
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent", "namespace": NS},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}
    }))
    .unwrap();
    store.api::<DaemonSet>().create(Some(NS), &ds, &PostParams::default()).unwrap();
    // The garbage collector would delete a pod whose owner is gone: hold it, as a slow one would.
    cluster.faults().pause_controller(dev::controllers::names::GARBAGE_COLLECTOR);
    let orphan = |name: &str, node: &str| {
        let owner = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gone",
                            "uid": "00000000-0000-0000-0000-000000000001", "controller": true}]);
        bare_pod(&store, name, node, json!({"ownerReferences": owner}), json!({}));
    };
    orphan("orphan-0", "worker-0");
    orphan("orphan-1", "worker-1");
    running(&store, "worker-0", 2).await;
    running(&store, "worker-1", 2).await;
    set_unschedulable(&store, "worker-0", true);
    set_unschedulable(&store, "worker-1", true);
    let drainer = drainer(&cluster).await;

    drainer.start("worker-0", DrainOptions::default());
    let message = failure(drainer.outcome("worker-0").await);
    assert!(message.contains("pod t/orphan-0 belongs to DaemonSet gone, which no longer exists"), "{message}");

    drainer.start("worker-1", DrainOptions { force: true, ..DrainOptions::default() });
    assert_eq!(drainer.outcome("worker-1").await, DrainProgress::Drained);
    let left: Vec<String> = pods_on(&store, "worker-1").into_iter().filter_map(|p| p.metadata.name).collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("agent-"), "the DaemonSet's pod stays: {left:?}");
    let evicted: Vec<Option<String>> =
        evictions(&cluster.server().request_log()).into_iter().map(|e| e.request.name).collect();
    assert_eq!(evicted, vec![Some("orphan-1".to_owned())]);
    cluster.faults().resume_controller(dev::controllers::names::GARBAGE_COLLECTOR);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_of_a_terminating_namespace_are_left_to_the_namespace_controller() {
    let cluster = cluster().await;
    let store = cluster.store();
    namespace(&store, "doomed");
    replica_set(&store, "doomed", "web", 2, NODE);
    running(&store, NODE, 2).await;
    cluster.faults().pause_controller("namespace");
    store.api::<Namespace>().delete(None, "doomed", &DeleteParams::default()).unwrap();
    set_unschedulable(&store, NODE, true);
    let drainer = drainer(&cluster).await;
    drainer.start(NODE, DrainOptions::default());

    let waiting = drainer.waiting_on(NODE, |w| w.contains("refused with 403")).await;
    assert!(waiting.contains("being terminated"), "{waiting}");
    cluster.faults().resume_controller("namespace");
    assert_eq!(drainer.outcome(NODE).await, DrainProgress::Drained);
    let log = cluster.server().request_log();
    let deletes = log
        .entries()
        .into_iter()
        .filter(|e| e.request.resource == "pods" && e.request.verb.is_write() && e.request.subresource.is_empty());
    assert_eq!(deletes.count(), 0, "the drain wrote pods itself");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_uncordoned_mid_drain_stops_the_drain_and_nothing_more_is_evicted() {
    let cluster = cluster().await;
    let store = cluster.store();
    pinned_pods(&store).await;
    let drainer = drain_held_by_the_budget(&cluster).await;

    set_unschedulable(&store, NODE, false);
    assert_eq!(drainer.outcome(NODE).await, DrainProgress::Uncordoned);
    let log = cluster.server().request_log();
    let before = evictions(&log).len();
    // Two retry periods: a drain still running would have tried again.
    tokio::time::sleep(controller::drain::EVICTION_RETRY * 2 + Duration::from_secs(1)).await;
    assert_eq!(evictions(&log).len(), before, "evictions from a schedulable node");
    assert_eq!(pods_on(&store, NODE).len(), 2);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_says_what_a_drain_waits_on_and_a_node_uncordoned_mid_drain_is_blocked() {
    let cluster = cluster().await;
    let store = cluster.store();
    pinned_pods(&store).await;
    let observer = Observer::start(cluster.client(), Limits::new(1, true));
    let agents = support::start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    support::create_version(&store, "v2", json!({"maxUnavailable": 1, "drainTimeout": "10m"}));

    let version = || store.api::<NodeVersion>().get(None, "constellation-version").unwrap();
    let waiting = eventually(Duration::from_secs(120), "worker-0's drain waiting in the status", || {
        let status = version().status?;
        let node = status.in_flight.into_iter().find(|f| f.name == NODE && f.step == "drain")?;
        node.waiting_on.filter(|w| w.contains("refused with 429"))
    })
    .await;
    assert!(waiting.contains("The disruption budget web needs 2 healthy pods"), "{waiting}");

    set_unschedulable(&store, NODE, false);
    let message = eventually(Duration::from_secs(60), "worker-0 blocked", || {
        let node = store.api::<Node>().get(None, NODE).ok()?;
        let annotations = node.metadata.annotations?;
        (annotations.get(keys::INTENT).map(String::as_str) == Some("blocked"))
            .then(|| annotations.get(keys::INTENT_MESSAGE).cloned().unwrap_or_default())
    })
    .await;
    assert!(message.starts_with("UncordonedWhileDraining: "), "{message}");
    let node = store.api::<Node>().get(None, NODE).unwrap();
    assert!(!node.spec.and_then(|s| s.unschedulable).unwrap_or(false), "the controller cordoned it again");
    assert_eq!(pods_on(&store, NODE).len(), 2, "pods were evicted from the uncordoned node");
    // The rollout goes on around it.
    eventually(Duration::from_secs(120), "the other nodes updated", || {
        let counts = version().status?.counts;
        (counts.up_to_date == 2 && counts.blocked == 1).then_some(())
    })
    .await;
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    support::stop_all(agents).await;
    cluster.shutdown().await;
}

/// A drain says what it waits on when the API server leaves a request of it unanswered: first the list of the
/// node's pods, then an eviction. (A drain that times out meanwhile names it in `DrainTimedOut`, not nothing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_names_the_pod_list_and_the_eviction_the_api_server_leaves_unanswered() {
    use dev::apiserver::{RequestMatch, Verb};
    let cluster = cluster().await;
    let store = cluster.store();
    replica_set(&store, NS, "web", 1, NODE);
    running(&store, NODE, 1).await;
    set_unschedulable(&store, NODE, true);
    let pod_lists = RequestMatch { verbs: vec![Verb::List], resource: Some("pods".into()), ..Default::default() };
    let evictions = RequestMatch {
        verbs: vec![Verb::Create],
        resource: Some("pods".into()),
        subresource: Some("eviction".into()),
        ..Default::default()
    };
    let (lists_hung, evictions_hung) = (cluster.faults().hang(pod_lists), cluster.faults().hang(evictions));
    let drainer = drainer(&cluster).await;
    drainer.start(NODE, DrainOptions::default());

    let waiting = drainer.waiting_on(NODE, |w| w.contains("listed")).await;
    assert_eq!(waiting, format!("the pods of node {NODE} to be listed"));
    cluster.faults().remove(lists_hung);
    let waiting = drainer.waiting_on(NODE, |w| w.contains("eviction")).await;
    assert!(waiting.starts_with("the eviction of pod t/web-") && waiting.ends_with(" to be answered"), "{waiting}");
    cluster.faults().remove(evictions_hung);
    assert_eq!(drainer.outcome(NODE).await, DrainProgress::Drained);
    assert_eq!(pods_on(&store, NODE).len(), 0, "the evicted pod's replacement cannot go to the cordoned node");
    cluster.shutdown().await;
}
