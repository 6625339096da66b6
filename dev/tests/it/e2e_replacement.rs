//! End-to-end replacement rollouts on the dev cluster and its simulated cloud: nodes of scaling groups are replaced
//! by new instances, the other nodes updated in place by their agents, under one budget; the observer checks the
//! invariants at every event.

#[path = "../../../controller/tests/it/etcd_support/mod.rs"]
mod etcd_support;
use crate::support;

use cloud::metrics::CallCounts;
use cloud::simulated::SimulatedProvider;
use cloud::simulated::wire::ErrorCode;
use cloud::{CallPolicy, Governed, GroupRole};
use controller::groups::CloudOptions;
use dev::cloud::{GroupFaults, GroupSpec, InjectedFailure, InstanceFaults};
use dev::cluster::{Cluster, ClusterConfig};
use dev::harness::{self, Component};
use dev::observer::{Limits, Observer, Surge};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use serde_json::json;
use shared::crd::{NodeVersion, PendingNode};
use shared::protocol::keys;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use support::{create_version, stop_all};

/// Long enough for a whole rollout on a loaded 2-core machine; the test ends as soon as it is done.
pub(crate) const ROLLOUT: Duration = Duration::from_secs(240);

/// 3 in-place workers, a control-plane group of 3 and two worker groups of 2, on image v1.
async fn mixed_cluster() -> Cluster {
    let config = ClusterConfig {
        nodes: 3,
        control_planes: 0,
        workloads: None,
        ready_timeout: Duration::from_secs(120),
        scaling_groups: vec![
            GroupSpec::new("cp", GroupRole::ControlPlane, 3),
            GroupSpec::new("workers-a", GroupRole::Worker, 2),
            GroupSpec::new("workers-b", GroupRole::Worker, 2),
        ],
        ..ClusterConfig::default()
    };
    Cluster::start(config).await.expect("the cluster starts")
}

/// The controller with the simulated cloud, as production wraps it, removing the members of replaced
/// control-plane nodes from `etcd`.
fn controller_with_etcd(cluster: &Cluster, name: &str, etcd: controller::etcd::EtcdConfig) -> Component {
    let provider = SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint");
    let provider = Governed::new(provider, CallPolicy::default(), Arc::new(CallCounts::default()));
    let mut options = harness::controller_options(name);
    let mut cloud = CloudOptions::new(Arc::new(provider));
    cloud.etcd = Some(etcd);
    options.cloud = Some(cloud);
    harness::controller(cluster.operator(), options)
}

/// The controller with the simulated cloud, as production wraps it.
pub(crate) fn controller(cluster: &Cluster, name: &str) -> Component {
    counted_controller(cluster, name, Arc::new(CallCounts::default()))
}

/// [`controller`], its cloud calls counted in `counts` by operation and outcome.
pub(crate) fn counted_controller(cluster: &Cluster, name: &str, counts: Arc<CallCounts>) -> Component {
    let provider = SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint");
    let provider = Governed::new(provider, CallPolicy::default(), counts);
    let mut options = harness::controller_options(name);
    // The simulated control plane runs no etcd member.
    options.cloud = Some(CloudOptions::new(Arc::new(provider)).with_external_etcd());
    harness::controller(cluster.operator(), options)
}

/// One agent per in-place node (the groups' nodes need none: they are replaced).
fn in_place_agents(cluster: &Cluster) -> Vec<Component> {
    (0..3).map(|i| harness::agent(cluster.operator(), &format!("worker-{i}"))).collect()
}

pub(crate) fn nodes(cluster: &Cluster) -> Vec<Node> {
    cluster.store().api::<Node>().list(None, &Default::default()).unwrap().items
}

fn group_of(node: &Node) -> Option<String> {
    let id = node.spec.as_ref()?.provider_id.as_deref()?;
    Some(id.strip_prefix("simulated://")?.split('/').next()?.to_owned())
}

pub(crate) fn pending(cluster: &Cluster) -> Vec<PendingNode> {
    cluster.store().api::<PendingNode>().list(None, &Default::default()).unwrap().items
}

/// Where the rollout stands, for a test that fails.
pub(crate) fn describe(cluster: &Cluster) -> dev::standing::Standing {
    dev::standing::Standing::read(&cluster.store(), "constellation-version")
}

/// The NodeVersion's status once every node runs `image` and no replacement is left.
fn rolled_out(cluster: &Cluster, image: &str, total: i32) -> Option<shared::crd::NodeVersionStatus> {
    let version = cluster.store().api::<NodeVersion>().get(None, "constellation-version").ok()?;
    let status = version.status?;
    let complete = status.conditions.iter().any(|c| c.type_ == "Progressing" && c.reason == "Complete");
    (status.target_image.as_deref() == Some(image)
        && status.counts.total == total
        && status.counts.up_to_date == total
        && complete
        && pending(cluster).is_empty())
    .then_some(status)
}

/// Waits for [`rolled_out`]; on a timeout the panic tells where the rollout stands.
pub(crate) async fn wait_rolled_out(cluster: &Cluster, image: &str, total: i32) -> shared::crd::NodeVersionStatus {
    let deadline = tokio::time::Instant::now() + ROLLOUT;
    loop {
        if let Some(status) = rolled_out(cluster, image, total) {
            return status;
        }
        assert!(tokio::time::Instant::now() < deadline, "the rollout did not finish:\n{}", describe(cluster));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_cluster_replaces_its_group_nodes_and_updates_the_others_in_place() {
    let cluster = mixed_cluster().await;
    let store = cluster.store();
    let before: Vec<Node> = nodes(&cluster);
    let group_nodes: Vec<String> = before.iter().filter(|n| group_of(n).is_some()).map(|n| n.name_any()).collect();
    assert_eq!(group_nodes.len(), 7);
    // An administrator's label and taint on a worker of group a, which its heir must carry.
    let labelled = before.iter().find(|n| group_of(n).as_deref() == Some("workers-a")).unwrap().name_any();
    let patch = json!({
        "metadata": {"labels": {"team": "payments"}},
        "spec": {"taints": [{"key": "dedicated", "value": "payments", "effect": "NoSchedule"}]}
    });
    store.api::<Node>().patch(None, &labelled, &dev::apiserver::Patch::Merge(patch), &Default::default()).unwrap();

    // A cluster-autoscaler of 3 replicas, paused while nodes are replaced and restored afterwards.
    let deployments = store.api::<k8s_openapi::api::apps::v1::Deployment>();
    let autoscaler = support::cluster_autoscaler(3, &[]);
    deployments.create(Some("kube-system"), &autoscaler, &Default::default()).unwrap();
    let strategy: shared::crd::AutoscalingStrategy = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "AutoscalingStrategy",
        "metadata": {"name": "autoscalingstrategy"},
        "spec": {"enabled": true, "deploymentName": "cluster-autoscaler", "deploymentNamespace": "kube-system"}
    }))
    .unwrap();
    store.api::<shared::crd::AutoscalingStrategy>().create(None, &strategy, &Default::default()).unwrap();
    let replicas = move || {
        store
            .api::<k8s_openapi::api::apps::v1::Deployment>()
            .get(Some("kube-system"), "cluster-autoscaler")
            .ok()
            .and_then(|d| d.spec?.replicas)
    };
    let lowest = Arc::new(std::sync::atomic::AtomicI32::new(i32::MAX));
    let sampler = {
        let (lowest, replicas) = (lowest.clone(), replicas.clone());
        tokio::spawn(async move {
            loop {
                if let Some(n) = replicas() {
                    lowest.fetch_min(n, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let store = cluster.store();
    let limits = Limits { surge: Some(Surge { baseline: 7, max_surge: 2 }), ..Limits::new(2, false) };
    let observer = Observer::start(cluster.client(), limits);
    let agents = in_place_agents(&cluster);
    let controller = controller(&cluster, "c1");
    create_version(&store, "v2", json!({"maxUnavailable": 2, "maxSurge": 2}));

    let status = wait_rolled_out(&cluster, "v2", 10).await;
    assert_eq!(status.counts.failed + status.counts.blocked, 0);
    let after = nodes(&cluster);
    for name in &group_nodes {
        assert!(after.iter().all(|n| n.name_any() != *name), "{name} was not replaced");
    }
    let heirs: Vec<&Node> = after.iter().filter(|n| group_of(n).is_some()).collect();
    assert_eq!(heirs.len(), 7, "one new node per replaced one");
    for heir in &heirs {
        let annotations = heir.annotations();
        assert!(!annotations.contains_key(keys::DONOR), "{} still names its donor", heir.name_any());
        assert!(!heir.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false), "{} cordoned", heir.name_any());
    }
    let inheritor = heirs
        .iter()
        .find(|n| n.labels().get("team").map(String::as_str) == Some("payments"))
        .expect("the label was copied to the heir");
    assert_eq!(group_of(inheritor).as_deref(), Some("workers-a"));
    let taints = inheritor.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    assert!(taints.iter().any(|t| t.key == "dedicated" && t.value.as_deref() == Some("payments")), "{taints:?}");
    for i in 0..3 {
        assert_eq!(cluster.hosts().facts(&format!("worker-{i}")).unwrap().os_image, "v2");
    }

    // The autoscaler was paused during the rollout and gets its 3 replicas back.
    support::eventually(ROLLOUT, "the autoscaler restored", || (replicas() == Some(3)).then_some(())).await;
    sampler.abort();
    assert_eq!(lowest.load(std::sync::atomic::Ordering::SeqCst), 0, "the autoscaler was never paused");
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert_eq!(observed.max_surge_seen, 2, "maxSurge was used in full");
    // The cloud was asked about each instance at most once (the replacer and the autoscaler's pause driver share
    // the answers), never for the group its provider ID names, and mostly not at all: one list of a group answers
    // the image of all its instances, heirs included (issue 28). The states are read from lists too.
    let instances: BTreeSet<String> =
        before.iter().chain(&after).filter_map(|n| n.spec.as_ref()?.provider_id.clone()).collect();
    let calls = cluster.cloud().calls();
    eprintln!("cloud calls: {calls:?}");
    assert_eq!(calls.get(&cloud::Operation::InstanceGroup), None, "{calls:?}");
    let images = calls.get(&cloud::Operation::InstanceImage).copied().unwrap_or(0);
    assert!(images as usize <= instances.len() / 2, "{images} image calls for {instances:?}");
    assert!(calls.contains_key(&cloud::Operation::GroupInstances), "{calls:?}");
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

/// One in-place worker and a worker group of 2, on image v1.
pub(crate) async fn small_cluster() -> Cluster {
    let config = ClusterConfig {
        nodes: 1,
        control_planes: 0,
        workloads: None,
        ready_timeout: Duration::from_secs(120),
        scaling_groups: vec![GroupSpec::new("workers-a", GroupRole::Worker, 2)],
        ..ClusterConfig::default()
    };
    Cluster::start(config).await.expect("the cluster starts")
}

fn node_version_status(cluster: &Cluster) -> Option<shared::crd::NodeVersionStatus> {
    cluster.store().api::<NodeVersion>().get(None, "constellation-version").ok()?.status
}

fn progressing(status: &shared::crd::NodeVersionStatus) -> (String, String) {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

/// Waits until `check` holds of the NodeVersion's status; on a timeout the panic tells where the rollout stands.
async fn wait_status(
    cluster: &Cluster,
    what: &str,
    check: impl Fn(&shared::crd::NodeVersionStatus) -> bool,
) -> shared::crd::NodeVersionStatus {
    let deadline = tokio::time::Instant::now() + ROLLOUT;
    loop {
        if let Some(status) = node_version_status(cluster).filter(|s| check(s)) {
            return status;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} did not happen:\n{}", describe(cluster));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn group_nodes(cluster: &Cluster, group: &str) -> Vec<String> {
    let mut names: Vec<String> =
        nodes(cluster).iter().filter(|n| group_of(n).as_deref() == Some(group)).map(|n| n.name_any()).collect();
    names.sort();
    names
}

pub(crate) fn node(cluster: &Cluster, name: &str) -> Option<Node> {
    cluster.store().api::<Node>().get(None, name).ok()
}

fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

/// A throttled cloud stalls nothing else: the creation of a donor's instance waits out the cloud's `Retry-After`
/// (the governed client waits up to a minute per call, and the call is tried again after it failed) in the
/// background, while the node updated in place beside it goes through all its steps. It did not: the creation
/// ran inside the reconcile, which held every decision (and the disruption gate) until the cloud answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_cloud_does_not_stall_the_nodes_updated_in_place() {
    let cluster = small_cluster().await;
    // Three throttled answers of 50 s each: the first call waits one out and gives up before the second (its wait
    // budget is 60 s); the next call, a second later, waits out the third. About 100 s in all.
    let throttled =
        InjectedFailure { code: ErrorCode::Throttled, message: None, times: Some(3), retry_after_seconds: Some(50.0) };
    let faults = GroupFaults { create_failure: Some(throttled), ..Default::default() };
    cluster.cloud().set_group_faults("workers-a", faults).unwrap();
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let controller = controller(&cluster, "c1");
    create_version(&cluster.store(), "v2", json!({"maxUnavailable": 2, "maxSurge": 1}));

    wait_status(&cluster, "a donor's replacement to start", |s| s.counts.in_progress >= 1 && !s.donors.is_empty())
        .await;
    let status = wait_status(&cluster, "the node updated in place to be verified", |s| s.counts.up_to_date >= 1).await;
    assert!(
        pending(&cluster).is_empty(),
        "the in-place node was verified only after the throttled creation returned:\n{}",
        describe(&cluster)
    );
    assert_eq!(status.counts.up_to_date, 1, "{}", describe(&cluster));
    // The creation goes through once the cloud lets it.
    support::eventually(ROLLOUT, "the instance to be created", || (!pending(&cluster).is_empty()).then_some(())).await;
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_that_never_joins_is_deleted_counted_and_the_rollout_stops_at_the_budget() {
    let cluster = small_cluster().await;
    cluster.cloud().set_group_faults("workers-a", GroupFaults { never_joins: true, ..Default::default() }).unwrap();
    let donors = group_nodes(&cluster, "workers-a");
    let limits = Limits { surge: Some(Surge { baseline: 2, max_surge: 1 }), ..Limits::new(1, false) };
    let observer = Observer::start(cluster.client(), limits);
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let controller = controller(&cluster, "c1");
    create_version(&cluster.store(), "v2", json!({"maxUnavailable": 1, "maxSurge": 1, "joinTimeout": "4s"}));

    let status = wait_status(&cluster, "the rollout to stop at the failure budget", |s| {
        s.counts.failed == 1 && progressing(s).0 == "FailureBudgetExhausted"
    })
    .await;
    assert!(status.counts.outdated >= 1, "{:?}", status.counts);
    // The instance was deleted (its PendingNode is gone once it is terminated), the donor is left as it was.
    support::eventually(ROLLOUT, "the failed instance to be gone", || pending(&cluster).is_empty().then_some(())).await;
    let failed: Vec<Node> = donors.iter().filter_map(|d| node(&cluster, d)).collect();
    assert_eq!(failed.len(), 2, "no donor was deleted");
    let marked: Vec<&Node> =
        failed.iter().filter(|n| n.annotations().get(keys::INTENT).map(String::as_str) == Some("failed")).collect();
    assert_eq!(marked.len(), 1);
    let why = marked[0].annotations().get(keys::INTENT_MESSAGE).cloned().unwrap_or_default();
    assert!(why.starts_with("HeirNotReady: the new instance"), "{why}");
    assert!(failed.iter().all(|n| !cordoned(n)), "a donor left cordoned");
    assert_eq!(group_nodes(&cluster, "workers-a"), donors, "no new node joined");

    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_donor_whose_drain_times_out_is_blocked_and_uncordoned_and_its_heir_stays() {
    let cluster = small_cluster().await;
    let store = cluster.store();
    let donors = group_nodes(&cluster, "workers-a");
    let pinned = donors[0].clone();
    // A pod on each donor that its PodDisruptionBudget never lets go. (Both are blocked alike, so the PDB-aware
    // order, `controller::budget_order`, keeps the order by name: the first donor goes first.)
    let namespace: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "demo"}})).unwrap();
    store.api::<k8s_openapi::api::core::v1::Namespace>().create(None, &namespace, &Default::default()).unwrap();
    for (app, host) in [("pinned", &donors[0]), ("pinned-too", &donors[1])] {
        let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": app, "namespace": "demo"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {"nodeSelector": {"kubernetes.io/hostname": host},
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], "terminationGracePeriodSeconds": 1}
                }
            }
        }))
        .unwrap();
        store
            .api::<k8s_openapi::api::apps::v1::Deployment>()
            .create(Some("demo"), &deployment, &Default::default())
            .unwrap();
        let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": app, "namespace": "demo"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}
        }))
        .unwrap();
        store
            .api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>()
            .create(Some("demo"), &pdb, &Default::default())
            .unwrap();
    }
    support::eventually(Duration::from_secs(60), "both budgets computed, allowing nothing", || {
        let budgets = store
            .api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>()
            .list(Some("demo"), &Default::default())
            .ok()?;
        budgets
            .items
            .iter()
            .all(|b| b.status.as_ref().is_some_and(|s| s.current_healthy == 1 && s.disruptions_allowed == 0))
            .then_some(())
    })
    .await;
    let limits = Limits { surge: Some(Surge { baseline: 2, max_surge: 1 }), ..Limits::new(2, false) };
    let observer = Observer::start(cluster.client(), limits);
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let controller = controller(&cluster, "c1");
    create_version(&store, "v2", json!({"maxUnavailable": 2, "maxSurge": 1, "drainTimeout": "3s"}));

    wait_status(&cluster, "the donor to be blocked", |s| s.counts.blocked == 1).await;
    let donor = node(&cluster, &pinned).expect("the blocked donor stays");
    assert!(!cordoned(&donor), "the blocked donor was left cordoned");
    let why = donor.annotations().get(keys::INTENT_MESSAGE).cloned().unwrap_or_default();
    assert!(why.starts_with("DrainTimedOut: the drain did not finish within 3s"), "{why}");
    let heir = donor.annotations().get(keys::HEIR).cloned().expect("the donor names its heir");
    let heir = node(&cluster, &heir).expect("the heir stays");
    assert_eq!(heir.annotations().get(keys::DONOR), Some(&pinned));
    // The heir keeps the one surge slot: the other group node is not replaced, and the status says why.
    let status =
        wait_status(&cluster, "the rollout to say why it waits", |s| progressing(s).0 == "SurgeExhausted").await;
    assert!(node(&cluster, &donors[1]).is_some(), "{:?}", status.counts);

    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_whose_deletion_fails_is_deleted_on_a_later_try_and_the_rollout_completes() {
    let cluster = small_cluster().await;
    let donors = group_nodes(&cluster, "workers-a");
    let failing =
        InjectedFailure { code: ErrorCode::Internal, message: None, times: Some(2), retry_after_seconds: None };
    for donor in &donors {
        let faults = InstanceFaults { delete_failure: Some(failing.clone()), ..Default::default() };
        cluster.cloud().set_instance_faults(donor, faults).unwrap();
    }
    let limits = Limits { surge: Some(Surge { baseline: 2, max_surge: 1 }), ..Limits::new(1, false) };
    let observer = Observer::start(cluster.client(), limits);
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let controller = controller(&cluster, "c1");
    create_version(&cluster.store(), "v2", json!({"maxUnavailable": 1, "maxSurge": 1}));

    wait_rolled_out(&cluster, "v2", 3).await;
    let provider = SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint");
    for donor in &donors {
        let id: cloud::ProviderId = format!("simulated://workers-a/{donor}").parse().unwrap();
        assert_eq!(
            cloud::CloudProvider::instance_state(&provider, &id).await.unwrap(),
            cloud::InstanceState::Terminated
        );
        assert!(node(&cluster, donor).is_none(), "{donor} still has a Node");
    }
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

/// The small cluster's group replaced again and again while the controller is killed: the observer, the
/// agent and the current controller replica, and how often it was killed.
struct Crashing {
    cluster: Cluster,
    observer: Observer,
    agents: Vec<Component>,
    controller: Option<Component>,
    crashes: usize,
}

impl Crashing {
    async fn start() -> Crashing {
        let cluster = small_cluster().await;
        // The group's 2 nodes are replaced in each rollout; one surge instance at a time, so a second instance
        // for a donor shows as an extra instance, and every instance created is counted at the cloud.
        let limits = Limits { surge: Some(Surge { baseline: 2, max_surge: 1 }), ..Limits::new(1, false) };
        let observer = Observer::start(cluster.client(), limits);
        let agents = vec![harness::agent(cluster.operator(), "worker-0")];
        let controller = Some(controller(&cluster, "c-0"));
        // A crash between an instance request's record and the request waits out the join timeout before asking
        // again: short here, instances join within a second.
        create_version(&cluster.store(), "v1", json!({"maxUnavailable": 1, "maxSurge": 1, "joinTimeout": "20s"}));
        Crashing { cluster, observer, agents, controller, crashes: 0 }
    }

    /// Rolls to `target`; whenever `crash_now` (given the time since the rollout started) answers a delay, the
    /// controller is killed after it and a new replica starts after a random pause below `restart_ms`. Checks
    /// that the observer held, one instance was created per replaced node and every replaced node is gone.
    async fn roll(
        &mut self,
        target: &str,
        what: &str,
        restart_ms: u64,
        rng: &mut impl rand::RngCore,
        mut crash_now: impl FnMut(&Cluster, Duration) -> Option<Duration>,
    ) {
        let cluster = &self.cluster;
        let creates_before = created_instances(cluster);
        let replaced = group_nodes(cluster, "workers-a");
        let started = tokio::time::Instant::now();
        let patch = dev::apiserver::Patch::Merge(json!({"spec": {"image": target}}));
        cluster.store().api::<NodeVersion>().patch(None, "constellation-version", &patch, &Default::default()).unwrap();
        while rolled_out(cluster, target, 3).is_none() {
            assert!(started.elapsed() < ROLLOUT, "{what}: {}", describe(cluster));
            if let Some(delay) = crash_now(cluster, started.elapsed()) {
                tokio::time::sleep(delay).await;
                if let Some(c) = self.controller.take() {
                    c.crash().await;
                }
                self.crashes += 1;
                tokio::time::sleep(Duration::from_millis(rng.next_u64() % restart_ms)).await;
                self.controller = Some(controller(cluster, &format!("c-{}", self.crashes)));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(self.observer.violations(), Vec::<String>::new(), "{what}");
        assert_eq!(created_instances(cluster) - creates_before, 2, "{what}: a second instance was created");
        for name in &replaced {
            assert!(node(cluster, name).is_none(), "{what}: {name} was not replaced");
        }
    }

    async fn stop(self) {
        if let Some(c) = self.controller {
            c.stop(Duration::from_secs(15)).await.unwrap();
        }
        stop_all(self.agents).await;
        self.cluster.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_killed_at_random_points_of_8_replacement_rollouts_creates_no_second_instance() {
    use rand::{RngCore, SeedableRng};
    let mut run = Crashing::start().await;
    for seed in 0..8u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        // One to three crashes at random points of the rollout (it takes a few seconds here).
        let mut crash_after: Vec<u64> = (0..1 + rng.next_u64() % 3).map(|_| rng.next_u64() % 4000).collect();
        crash_after.sort();
        let crash_now = |_: &Cluster, elapsed: Duration| {
            let due = crash_after.first().is_some_and(|ms| elapsed >= Duration::from_millis(*ms));
            due.then(|| crash_after.remove(0)).map(|_| Duration::ZERO)
        };
        run.roll(&format!("v{}", seed + 2), &format!("seed {seed}"), 500, &mut rng.clone(), crash_now).await;
    }
    assert!(run.crashes >= 8, "only {} crashes", run.crashes);
    run.stop().await;
}

/// How many instances the simulated cloud was asked to create (in single and batch calls).
pub(crate) fn created_instances(cluster: &Cluster) -> u64 {
    cluster.cloud().instances_asked()
}

/// Whether any Node is cordoned or carries a replacement's `intent=replace`.
fn held_nodes(cluster: &Cluster) -> Vec<String> {
    nodes(cluster)
        .iter()
        .filter(|n| cordoned(n) || n.annotations().get(keys::INTENT).map(String::as_str) == Some("replace"))
        .map(|n| n.name_any())
        .collect()
}

/// The group's live instances are exactly its Nodes: none leaked, none deleted under a node.
pub(crate) fn instances_match_nodes(cluster: &Cluster, group: &str) -> bool {
    let mut instances = cluster.cloud().instances_of(group);
    instances.sort();
    instances == group_nodes(cluster, group)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_version_deleted_while_the_new_instance_joins_deletes_it_and_releases_the_donor() {
    let cluster = small_cluster().await;
    let store = cluster.store();
    cluster.cloud().set_group_faults("workers-a", GroupFaults { never_joins: true, ..Default::default() }).unwrap();
    let donors = group_nodes(&cluster, "workers-a");
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let controller = controller(&cluster, "c1");
    create_version(&store, "v2", json!({"maxUnavailable": 1, "maxSurge": 1}));
    support::eventually(ROLLOUT, "a joining instance", || {
        pending(&cluster).iter().any(|p| p.spec.goal == shared::crd::PendingNodeGoal::Join).then_some(())
    })
    .await;
    assert_eq!(cluster.cloud().instances_of("workers-a").len(), 3);
    wait_status(&cluster, "the replacement in the status", |s| s.counts.donors == 1 && s.counts.pending == 1).await;
    kubectl_shows_the_replacement(&cluster).await;

    store.api::<NodeVersion>().delete(None, "constellation-version", &Default::default()).unwrap();
    // The finalizer goes once the donor is released; the joining instance is deleted, its record removed.
    support::eventually(ROLLOUT, "the NodeVersion to be gone", || {
        store.api::<NodeVersion>().get(None, "constellation-version").is_err().then_some(())
    })
    .await;
    support::eventually(ROLLOUT, "the new instance to be deleted", || {
        (pending(&cluster).is_empty() && instances_match_nodes(&cluster, "workers-a")).then_some(())
    })
    .await;
    assert_eq!(group_nodes(&cluster, "workers-a"), donors, "the donors stay");
    assert_eq!(held_nodes(&cluster), Vec::<String>::new(), "a node is left held:\n{}", describe(&cluster));
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_version_deleted_once_the_heir_is_ready_finishes_the_swap_and_releases_the_old_instance() {
    let cluster = small_cluster().await;
    let store = cluster.store();
    let donors = group_nodes(&cluster, "workers-a");
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let controller = controller(&cluster, "c1");
    create_version(&store, "v2", json!({"maxUnavailable": 1, "maxSurge": 1}));
    let deadline = tokio::time::Instant::now() + ROLLOUT;
    let (heir, donor) = loop {
        let joined = pending(&cluster)
            .iter()
            .find(|p| {
                p.spec.goal == shared::crd::PendingNodeGoal::Join && p.status.as_ref().is_some_and(|s| s.reached_goal)
            })
            .map(|p| (p.spec.node_name.clone(), p.annotations().get(keys::DONOR).cloned().unwrap_or_default()))
            // The joined PendingNode goes once the heir is paired; the heir then names its donor until the swap ends.
            .or_else(|| {
                nodes(&cluster).iter().find_map(|n| Some((n.name_any(), n.annotations().get(keys::DONOR)?.clone())))
            });
        if let Some(joined) = joined {
            break joined;
        }
        assert!(tokio::time::Instant::now() < deadline, "no joined heir:\n{}", describe(&cluster));
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(donors.contains(&donor), "{donor} is not one of {donors:?}");

    store.api::<NodeVersion>().delete(None, "constellation-version", &Default::default()).unwrap();
    support::eventually(ROLLOUT, "the NodeVersion to be gone", || {
        store.api::<NodeVersion>().get(None, "constellation-version").is_err().then_some(())
    })
    .await;
    // One donor was replaced by the heir (its Node and instance gone), the other was never started.
    support::eventually(ROLLOUT, "the old instance to be released", || {
        (pending(&cluster).is_empty()
            && instances_match_nodes(&cluster, "workers-a")
            && group_nodes(&cluster, "workers-a").len() == 2
            && node(&cluster, &heir).is_some_and(|n| !n.annotations().contains_key(keys::DONOR)))
        .then_some(())
    })
    .await;
    // (On a loaded machine the first replacement may be over before the test looks: the heir seen may be the
    // second donor's. No replacement starts after the deletion either way.)
    assert!(node(&cluster, &donor).is_none(), "{donor} was not replaced");
    assert_eq!(held_nodes(&cluster), Vec::<String>::new(), "a node is left held:\n{}", describe(&cluster));
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

/// The steps of a replacement as the cluster shows them; a crash test kills the controller as each is first seen.
const STEPS: [&str; 8] = [
    "intent=replace written",
    "instance requested",
    "joining PendingNode recorded",
    "heir joined",
    "heir paired",
    "donor cordoned for its drain",
    "donor retired",
    "old instance released",
];

/// Whether step `step` of [`STEPS`] shows in the cluster now (for any donor of `replaced`).
fn reached(cluster: &Cluster, step: usize, replaced: &[String]) -> bool {
    let nodes = nodes(cluster);
    let pending = pending(cluster);
    let annotated = |key: &str| nodes.iter().any(|n| n.annotations().contains_key(key));
    match step {
        0 => nodes.iter().any(|n| n.annotations().get(keys::INTENT).map(String::as_str) == Some("replace")),
        1 => annotated(keys::INSTANCE_REQUESTED),
        2 => pending.iter().any(|p| p.name_any().starts_with("heir-of-")),
        3 => pending.iter().any(|p| p.status.as_ref().is_some_and(|s| s.reached_goal)),
        4 => annotated(keys::DONOR),
        5 => annotated(keys::HEIR),
        6 => replaced.iter().any(|r| nodes.iter().all(|n| n.name_any() != *r)),
        _ => pending.iter().any(|p| p.name_any().starts_with("leaving-")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_killed_at_every_step_of_a_replacement_creates_no_second_instance_and_deletes_no_serving_one() {
    use rand::{RngCore, SeedableRng};
    let mut run = Crashing::start().await;
    for (step, what) in STEPS.iter().enumerate() {
        // Seeded: a failing step replays the same delay after the step is seen.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(step as u64);
        let replaced = group_nodes(&run.cluster, "workers-a");
        let mut crashed = false;
        let mut delays = rng.clone();
        let crash_now = |cluster: &Cluster, _: Duration| {
            let now = !crashed && reached(cluster, step, &replaced);
            crashed |= now;
            now.then(|| Duration::from_millis(delays.next_u64() % 50))
        };
        let what = format!("crash at {what}");
        run.roll(&format!("v{}", step + 2), &what, 300, &mut rng, crash_now).await;
        assert!(instances_match_nodes(&run.cluster, "workers-a"), "{what}: {}", describe(&run.cluster));
        assert_eq!(held_nodes(&run.cluster), Vec::<String>::new(), "{what}");
    }
    assert!(run.crashes >= STEPS.len() - 1, "only {} crashes", run.crashes);
    run.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_that_throttles_during_a_replacement_is_waited_for_and_the_rollout_completes_without_a_duplicate() {
    let cluster = small_cluster().await;
    let store = cluster.store();
    let replaced = group_nodes(&cluster, "workers-a");
    let limits = Limits { surge: Some(Surge { baseline: 2, max_surge: 1 }), ..Limits::new(1, false) };
    let observer = Observer::start(cluster.client(), limits);
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let counts = Arc::new(CallCounts::default());
    let controller = counted_controller(&cluster, "c1", counts.clone());
    create_version(&store, "v2", json!({"maxUnavailable": 1, "maxSurge": 1}));
    support::eventually(ROLLOUT, "a replacement to start", || reached(&cluster, 0, &replaced).then_some(())).await;
    // Every cloud call is throttled with a Retry-After of 1 s, six times, then answered again.
    let throttled =
        InjectedFailure { code: ErrorCode::Throttled, message: None, times: Some(6), retry_after_seconds: Some(1.0) };
    cluster.cloud().set_faults(dev::cloud::CloudFaults { failure: Some(throttled), slow_seconds: None }).unwrap();

    wait_rolled_out(&cluster, "v2", 3).await;
    let throttles: u64 = cloud::Operation::ALL.iter().map(|op| counts.get(*op, cloud::Outcome::Throttled)).sum();
    assert_eq!(throttles, 6, "the controller saw every throttled answer");
    // Throttled creates were refused (nothing created) and asked again: two instances in all.
    assert_eq!(counts.get(cloud::Operation::CreateInstance, cloud::Outcome::Ok), 2, "one instance per replaced node");
    assert!(instances_match_nodes(&cluster, "workers-a"), "{}", describe(&cluster));
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

/// `kubectl get nodeversion,scalinggroup,pendingnode` (and `-o wide`) with one donor whose instance joins: each
/// table's cells by its header.
async fn kubectl_shows_the_replacement(cluster: &Cluster) {
    let run = |args: &'static [&'static str]| {
        let config = cluster.kubeconfig_path().to_owned();
        async move {
            let output = tokio::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&config)
                .args(args)
                .kill_on_drop(true)
                .output()
                .await
                .expect("kubectl runs (CI installs it)");
            let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            assert!(output.status.success(), "kubectl {args:?}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
            stdout
        }
    };
    // Every table: its rows as header -> cell, cut at the header's column starts (empty cells are blank).
    let tables = |text: &str| -> Vec<Vec<std::collections::BTreeMap<String, String>>> {
        text.split("\n\n")
            .filter(|t| !t.trim().is_empty())
            .map(|table| {
                let mut lines = table.lines().filter(|l| !l.trim().is_empty());
                let header = lines.next().unwrap_or_default();
                let starts: Vec<usize> = header
                    .char_indices()
                    .filter(|(i, c)| !c.is_whitespace() && (*i == 0 || header[..*i].ends_with(' ')))
                    .map(|(i, _)| i)
                    .collect();
                lines
                    .map(|line| {
                        starts
                            .iter()
                            .enumerate()
                            .map(|(k, &start)| {
                                let end = starts.get(k + 1).copied().unwrap_or(line.len()).min(line.len());
                                let name = header[start..].split_whitespace().next().unwrap_or_default();
                                (name.to_owned(), line.get(start.min(end)..end).unwrap_or_default().trim().to_owned())
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect()
    };
    let out = run(&["get", "nodeversion,scalinggroup,pendingnode"]).await;
    let tables = tables(&out);
    assert_eq!(tables.len(), 3, "{out}");
    let version = &tables[0][0];
    assert_eq!(
        version.get("NAME").map(String::as_str),
        Some("nodeversion.update.edgeless.systems/constellation-version"),
        "{out}"
    );
    assert_eq!(version.get("IMAGE").map(String::as_str), Some("v2"), "{out}");
    assert_eq!(version.get("REPLACING").map(String::as_str), Some("1"), "{out}");
    assert_eq!(version.get("PENDING").map(String::as_str), Some("1"), "{out}");
    assert!(!version.contains_key("HEIRS"), "HEIRS is a wide column: {out}");
    let group =
        tables[1].iter().find(|r| r.get("GROUP").map(String::as_str) == Some("workers-a")).expect("the group's row");
    assert_eq!(group.get("ROLE").map(String::as_str), Some("Worker"), "{out}");
    assert_eq!(group.get("IMAGE").map(String::as_str), Some("v2"), "{out}");
    assert!(group.contains_key("OUTDATED"), "{out}");
    let joining = &tables[2][0];
    assert!(joining.get("NAME").is_some_and(|n| n.contains("/heir-of-")), "{out}");
    assert_eq!(joining.get("GOAL").map(String::as_str), Some("Join"), "{out}");
    assert_ne!(joining.get("REACHED").map(String::as_str), Some("true"), "{out}");
    let wide = run(&["get", "nodeversion", "-o", "wide"]).await;
    let header: Vec<&str> = wide.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "IMAGE",
            "CLUSTER-VERSION",
            "UP-TO-DATE",
            "OUTDATED",
            "REPLACING",
            "HEIRS",
            "PENDING",
            "OBSOLETE",
            "STATUS",
            "AGE"
        ],
        "{wide}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_control_plane_node_leaves_a_real_etcd_and_the_other_members_stay_healthy() {
    let test = "a_replaced_control_plane_node_leaves_a_real_etcd_and_the_other_members_stay_healthy";
    if !etcd_support::etcd_available(test) {
        return;
    }
    let config = ClusterConfig {
        nodes: 1,
        control_planes: 0,
        workloads: None,
        ready_timeout: Duration::from_secs(120),
        scaling_groups: vec![GroupSpec::new("cp", GroupRole::ControlPlane, 1)],
        ..ClusterConfig::default()
    };
    let cluster = Cluster::start(config).await.expect("the cluster starts");
    let donor = group_nodes(&cluster, "cp").pop().expect("a control-plane node");
    // A 3-member etcd over TLS, its first member named after the control-plane node, as kubeadm names them.
    let names = vec![donor.clone(), "etcd-b".to_owned(), "etcd-c".to_owned()];
    let mut etcd = etcd_support::EtcdCluster::start_named(&names, true).await;
    let client = etcd.client();
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let controller = controller_with_etcd(&cluster, "c1", etcd.config());
    create_version(&cluster.store(), "v2", json!({"maxUnavailable": 1, "maxSurge": 1}));

    // The heir joins the cluster; its etcd member is not there yet, so the donor stays (drained), its member too.
    let heir = support::eventually(ROLLOUT, "the heir joins", || {
        group_nodes(&cluster, "cp").into_iter().find(|n| *n != donor)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(node(&cluster, &donor).is_some(), "{donor} was deleted before its heir's etcd member joined");
    assert_eq!(client.members().await.expect("etcd answers").len(), 3, "no member removed before the heir joined");
    // The heir's member joins as kubeadm joins it; then the donor's member is removed and the donor deleted.
    etcd.add_member(&heir).await;
    wait_rolled_out(&cluster, "v2", 2).await;
    assert!(node(&cluster, &donor).is_none(), "{donor} was not replaced");
    let mut members: Vec<String> = client.members().await.expect("etcd answers").into_iter().map(|m| m.name).collect();
    members.sort();
    let mut expected = vec!["etcd-b".to_owned(), "etcd-c".to_owned(), heir.clone()];
    expected.sort();
    assert_eq!(members, expected, "the replaced node's member is gone, the heir's and the others stay");
    let deadline = tokio::time::Instant::now() + etcd_support::PATIENCE;
    for member in client.members().await.expect("etcd answers") {
        while !client.is_healthy(&member).await {
            assert!(tokio::time::Instant::now() < deadline, "{} is not healthy after the removal", member.name);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
    drop(etcd);
}

/// Without etcd access (neither `--etcd-endpoints` nor `--external-etcd`), a drained control-plane donor is never
/// deleted: its member would stay in etcd and, replaced three times, leave six members with three alive. It is held
/// in flight with the reason named (`EtcdUnavailable`) in an Event and the NodeVersion's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_etcd_access_a_control_plane_donor_is_held_not_deleted() {
    let config = ClusterConfig {
        nodes: 1,
        control_planes: 0,
        workloads: None,
        ready_timeout: Duration::from_secs(120),
        scaling_groups: vec![GroupSpec::new("cp", GroupRole::ControlPlane, 1)],
        ..ClusterConfig::default()
    };
    let cluster = Cluster::start(config).await.expect("the cluster starts");
    let donor = group_nodes(&cluster, "cp").pop().expect("a control-plane node");
    let provider = SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint");
    let provider = Governed::new(provider, CallPolicy::default(), Arc::new(CallCounts::default()));
    let mut options = harness::controller_options("c1");
    options.cloud = Some(CloudOptions::new(Arc::new(provider)));
    let controller = harness::controller(cluster.operator(), options);
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    create_version(&cluster.store(), "v2", json!({"maxUnavailable": 1, "maxSurge": 1}));

    let store = cluster.store();
    let deadline = tokio::time::Instant::now() + ROLLOUT;
    let waiting = loop {
        let status = support::status_of(&store, "constellation-version");
        if let Some(waiting) = status.in_flight.iter().find(|n| n.name == donor).and_then(|n| n.waiting_on.clone())
            && waiting.contains("etcd")
        {
            break waiting;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the donor is not held as EtcdUnavailable:\n{}",
            describe(&cluster)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(waiting.contains("--etcd-endpoints"), "{waiting}");
    // The Event is recorded in the background: it may land after the status.
    support::eventually(Duration::from_secs(30), "a Warning Event naming the hold", || {
        let events = store.api::<k8s_openapi::api::core::v1::Event>().list(None, &Default::default()).ok()?.items;
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("EtcdUnavailable") && e.type_.as_deref() == Some("Warning"))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let still = node(&cluster, &donor).expect("the drained control-plane donor is not deleted");
    assert!(cordoned(&still), "it stays cordoned (drained) while held");
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}
