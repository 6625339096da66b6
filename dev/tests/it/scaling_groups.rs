//! The ScalingGroup, PendingNode and AutoscalingStrategy controllers against the dev cluster and its simulated
//! cloud, with the cloud's faults: group images set, instances that never join deleted at their deadline,
//! deletions retried, throttling ridden out, the cluster-autoscaler paused and restored.

use crate::cluster_support;
use crate::support;

use cloud::metrics::CallCounts;
use cloud::simulated::SimulatedProvider;
use cloud::simulated::wire::ErrorCode;
use cloud::{
    CallPolicy, CloudProvider, Creation, Governed, GroupId, GroupRole, InstanceState, NewInstance, Operation, Outcome,
};
use cluster_support::*;
use controller::groups::{CloudOptions, GroupLabels, GroupMetrics};
use dev::cloud::{CloudFaults, GroupFaults, InjectedFailure, InstanceFaults};
use dev::cluster::{Cluster, NODE_VERSION_NAME};
use dev::harness::{self, Component};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use shared::crd::{
    AutoscalingStrategy, CspState, NodeVersion, NodeVersionSpec, PendingNode, PendingNodeGoal, PendingNodeSpec,
    ScalingGroup,
};
use std::sync::Arc;
use std::time::Duration;

/// The controller with the simulated cloud (rate-limited and retried as in production, calls counted).
struct Replacer {
    component: Component,
    calls: Arc<CallCounts>,
    metrics: GroupMetrics,
}

fn start_controller(cluster: &Cluster, join_timeout: Duration) -> Replacer {
    let calls = Arc::new(CallCounts::default());
    let provider = SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint");
    let provider = Governed::new(provider, CallPolicy::default(), calls.clone());
    // The simulated control plane runs no etcd member.
    let mut cloud = CloudOptions::new(Arc::new(provider)).with_external_etcd();
    cloud.join_timeout = join_timeout;
    cloud.leave_timeout = Duration::from_secs(2);
    let metrics = cloud.metrics.clone();
    let mut options = harness::controller_options("replacer");
    options.cloud = Some(cloud);
    Replacer { component: harness::controller(cluster.operator(), options), calls, metrics }
}

fn provider(cluster: &Cluster) -> SimulatedProvider {
    SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint")
}

async fn create_node_version(cluster: &Cluster, image: &str) {
    let versions: Api<NodeVersion> = Api::all(cluster.client());
    let spec = NodeVersionSpec { image: image.into(), ..NodeVersionSpec::default() };
    versions.create(&PostParams::default(), &NodeVersion::new(NODE_VERSION_NAME, spec)).await.unwrap();
}

async fn set_node_version_image(cluster: &Cluster, image: &str) {
    let versions: Api<NodeVersion> = Api::all(cluster.client());
    let patch = json!({"spec": {"image": image}});
    versions.patch(NODE_VERSION_NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

fn condition(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<(String, String)> {
    conditions.iter().find(|c| c.type_ == type_).map(|c| (c.status.clone(), c.reason.clone()))
}

async fn group(cluster: &Cluster, name: &str) -> ScalingGroup {
    Api::<ScalingGroup>::all(cluster.client()).get(name).await.unwrap()
}

async fn group_condition(cluster: &Cluster, name: &str, type_: &str) -> Option<(String, String)> {
    let group = group(cluster, name).await;
    condition(&group.status.unwrap_or_default().conditions, type_)
}

/// The Events with `reason` about the object `name`.
async fn events(cluster: &Cluster, reason: &str, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(cluster.client(), "default");
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason) && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

fn failure(code: ErrorCode, times: Option<u32>) -> InjectedFailure {
    InjectedFailure { code, message: None, times, retry_after_seconds: None }
}

async fn create_instance(provider: &SimulatedProvider, group: &str) -> NewInstance {
    match provider.create_instance(&GroupId::from(group)).await.expect("create") {
        Creation::Created(instance) => instance,
        Creation::Pending(token) => panic!("the simulated group answered with a token {token:?}"),
    }
}

async fn create_pending(
    cluster: &Cluster,
    instance: &NewInstance,
    group: &str,
    goal: PendingNodeGoal,
    deadline: Duration,
) {
    let api: Api<PendingNode> = Api::all(cluster.client());
    let deadline = jiff::Timestamp::now() + jiff::SignedDuration::try_from(deadline).unwrap();
    let spec = PendingNodeSpec {
        provider_id: instance.provider_id.to_string(),
        group_id: group.into(),
        node_name: instance.node_name.clone(),
        goal,
        deadline: Some(Time(deadline)),
    };
    api.create(&PostParams::default(), &PendingNode::new(&instance.node_name, spec)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaling_group_gets_its_node_versions_image_through_throttling_and_reports_lookup_errors() {
    let cluster = cloud_cluster(&[("workers-a", GroupRole::Worker, 1), ("cp", GroupRole::ControlPlane, 1)]).await;
    let cloud = cluster.cloud();
    // The whole API throttles the first three calls (with a Retry-After), and the control-plane group's image
    // cannot be read until the fault is cleared.
    let throttled = InjectedFailure { retry_after_seconds: Some(1.0), ..failure(ErrorCode::Throttled, Some(3)) };
    cloud.set_faults(CloudFaults { failure: Some(throttled), slow_seconds: None }).unwrap();
    cloud
        .set_group_faults(
            "cp",
            GroupFaults { image_failure: Some(failure(ErrorCode::Forbidden, None)), ..Default::default() },
        )
        .unwrap();
    create_node_version(&cluster, "v2").await;
    let replacer = start_controller(&cluster, Duration::from_secs(600));

    eventually("workers-a is set to the NodeVersion's image", || async {
        let group = group(&cluster, "workers-a").await;
        let status = group.status.unwrap_or_default();
        status.image_reference.as_deref() == Some("v2")
            && condition(&status.conditions, "Outdated") == Some(("False".into(), "ImageUpToDate".into()))
    })
    .await;
    let provider = provider(&cluster);
    assert_eq!(provider.group_image(&GroupId::from("workers-a")).await.unwrap(), "v2", "the cloud's template changed");
    let throttled: u64 = Operation::ALL.iter().map(|op| replacer.calls.get(*op, Outcome::Throttled)).sum();
    assert_eq!(throttled, 3, "every throttled call was retried by the governed provider");
    eventually("an Event says the image was set", || async {
        !events(&cluster, "GroupImageSet", "workers-a").await.is_empty()
    })
    .await;

    eventually("the failing lookup is a condition naming the error", || async {
        group_condition(&cluster, "cp", "Synced").await == Some(("False".into(), "PermissionDenied".into()))
    })
    .await;
    assert_eq!(provider.group_image(&GroupId::from("workers-a")).await.unwrap(), "v2");
    eventually("and a Warning Event", || async { !events(&cluster, "GroupImageLookupFailed", "cp").await.is_empty() })
        .await;

    // A new image on the NodeVersion reaches the groups without a restart.
    set_node_version_image(&cluster, "v3").await;
    eventually("workers-a follows the NodeVersion", || async {
        group(&cluster, "workers-a").await.status.unwrap_or_default().image_reference.as_deref() == Some("v3")
    })
    .await;
    replacer.component.stop(PATIENCE).await.expect("the controller stops cleanly");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_instance_reaches_its_goal_and_one_that_never_joins_is_deleted_at_its_deadline() {
    let cluster = cloud_cluster(&[("workers-a", GroupRole::Worker, 1), ("workers-b", GroupRole::Worker, 1)]).await;
    let provider = provider(&cluster);
    cluster.cloud().set_group_faults("workers-b", GroupFaults { never_joins: true, ..Default::default() }).unwrap();
    // Every version of every PendingNode, as a watch delivers them.
    let seen = Arc::new(std::sync::Mutex::new(Vec::<PendingNode>::new()));
    let recorder = {
        let seen = seen.clone();
        let stream = kube::runtime::watcher(Api::<PendingNode>::all(cluster.client()), Default::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(kube::runtime::watcher::Event::Apply(p) | kube::runtime::watcher::Event::InitApply(p)) = event
                {
                    seen.lock().unwrap().push(p);
                }
            }
        })
    };
    let replacer = start_controller(&cluster, Duration::from_secs(600));
    let joining = create_instance(&provider, "workers-a").await;
    let lost = create_instance(&provider, "workers-b").await;
    create_pending(&cluster, &joining, "workers-a", PendingNodeGoal::Join, Duration::from_secs(600)).await;
    create_pending(&cluster, &lost, "workers-b", PendingNodeGoal::Join, Duration::from_secs(4)).await;
    let api: Api<PendingNode> = Api::all(cluster.client());

    eventually("the joining instance reaches its goal", || async {
        let pending = api.get(&joining.node_name).await.unwrap();
        let status = pending.status.unwrap_or_default();
        status.reached_goal && status.csp_state == CspState::Ready
    })
    .await;
    assert_eq!(node_ready(&cluster, &joining.node_name), Some(true));

    // The lost instance: deleted at its deadline, its goal switched to Leave, the failure recorded, and its
    // PendingNode deleted once the instance is terminated.
    eventually("the instance is terminated and its PendingNode deleted", || async {
        api.get_opt(&lost.node_name).await.unwrap().is_none()
    })
    .await;
    let switched = seen.lock().unwrap().iter().any(|p| {
        p.metadata.name.as_deref() == Some(lost.node_name.as_str())
            && p.spec.goal == PendingNodeGoal::Leave
            && condition(&p.status.clone().unwrap_or_default().conditions, "JoinFailed")
                == Some(("True".into(), "DeadlineExceeded".into()))
    });
    assert!(switched, "the PendingNode was switched to Leave with JoinFailed=True DeadlineExceeded");
    let labels = GroupLabels { group: "workers-b".into() };
    assert_eq!(replacer.metrics.failed_joins.get_or_create(&labels).get(), 1, "counted once");
    assert_eq!(provider.instance_state(&lost.provider_id).await.unwrap(), InstanceState::Terminated);
    // Events are published in the background: they may follow the state they report by a moment.
    eventually("a JoinFailed Warning Event", || async {
        !events(&cluster, "JoinFailed", &lost.node_name).await.is_empty()
    })
    .await;
    // The joined instance is left alone.
    assert!(api.get_opt(&joining.node_name).await.unwrap().is_some());
    assert_eq!(provider.instance_state(&joining.provider_id).await.unwrap(), InstanceState::Ready);
    recorder.abort();
    replacer.component.stop(PATIENCE).await.expect("the controller stops cleanly");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_instance_whose_deletion_fails_is_deleted_again_after_its_deadline() {
    let cluster = cloud_cluster(&[("workers-a", GroupRole::Worker, 1)]).await;
    let provider = provider(&cluster);
    let instance = create_instance(&provider, "workers-a").await;
    eventually("the instance is Ready", || async {
        provider.instance_state(&instance.provider_id).await.ok() == Some(InstanceState::Ready)
    })
    .await;
    // Deletions fail more often than one governed call retries (5 requests): the first retry fails as a whole.
    let faults = InstanceFaults { delete_failure: Some(failure(ErrorCode::Internal, Some(7))), ..Default::default() };
    cluster.cloud().set_instance_faults(&instance.node_name, faults).unwrap();
    // As the replacement flow will: the deletion it started failed, the PendingNode says Leave.
    create_pending(&cluster, &instance, "workers-a", PendingNodeGoal::Leave, Duration::from_secs(1)).await;
    let replacer = start_controller(&cluster, Duration::from_secs(600));
    let api: Api<PendingNode> = Api::all(cluster.client());

    eventually("the failed deletion is a condition naming the error", || async {
        let Some(pending) = api.get_opt(&instance.node_name).await.unwrap() else { return false };
        let conditions = pending.status.unwrap_or_default().conditions;
        condition(&conditions, "Synced") == Some(("False".into(), "Transient".into()))
            && condition(&conditions, "LeaveOverdue").is_some_and(|(s, _)| s == "True")
    })
    .await;
    eventually("the retried deletion terminates the instance and the PendingNode goes", || async {
        api.get_opt(&instance.node_name).await.unwrap().is_none()
    })
    .await;
    assert_eq!(provider.instance_state(&instance.provider_id).await.unwrap(), InstanceState::Terminated);
    eventually("the InstanceDeleteFailed and LeaveDeadlineExceeded Events", || async {
        !events(&cluster, "InstanceDeleteFailed", &instance.node_name).await.is_empty()
            && !events(&cluster, "LeaveDeadlineExceeded", &instance.node_name).await.is_empty()
    })
    .await;
    assert!(replacer.calls.get(Operation::DeleteInstance, Outcome::Transient) >= 5);
    let labels = GroupLabels { group: "workers-a".into() };
    assert_eq!(replacer.metrics.overdue_leaves.get_or_create(&labels).get(), 1);
    replacer.component.stop(PATIENCE).await.expect("the controller stops cleanly");
    cluster.shutdown().await;
}

/// The first resourceVersion after `from` at which an object of `api` satisfies `holds`, from a watch started at
/// `from` (the API server replays every change since then, in resourceVersion order), read for up to 2 s.
async fn first_change<K>(api: &Api<K>, from: &str, holds: impl Fn(&K) -> bool) -> Option<u64>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut events = api.watch(&WatchParams::default().timeout(2), from).await.ok()?.boxed();
    while let Some(event) = events.next().await {
        if let Ok(WatchEvent::Added(object) | WatchEvent::Modified(object)) = event
            && holds(&object)
        {
            return object.meta().resource_version.as_deref()?.parse().ok();
        }
    }
    None
}

/// The current resourceVersion of the cluster (of a list).
async fn now_rv(api: &Api<AutoscalingStrategy>) -> String {
    api.list_metadata(&Default::default()).await.unwrap().metadata.resource_version.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_autoscaler_is_paused_while_group_nodes_are_outdated_and_restored_to_its_replica_count() {
    let cluster = cloud_cluster(&[("workers-a", GroupRole::Worker, 1), ("cp", GroupRole::ControlPlane, 1)]).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "kube-system");
    let deployment = support::cluster_autoscaler(3, &["--cloud-provider=aws", "--nodes=9:9:stale"]);
    deployments.create(&PostParams::default(), &deployment).await.unwrap();
    let strategies: Api<AutoscalingStrategy> = Api::all(cluster.client());
    let strategy: AutoscalingStrategy = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "AutoscalingStrategy",
        "metadata": {"name": "autoscalingstrategy"},
        "spec": {"enabled": true, "deploymentName": "cluster-autoscaler", "deploymentNamespace": "kube-system",
            "autoscalerExtraArgs": {"scale-down-delay-after-add": "5m"}}
    }))
    .unwrap();
    strategies.create(&PostParams::default(), &strategy).await.unwrap();
    // The nodes run v1: nothing is outdated yet.
    create_node_version(&cluster, "v1").await;
    let replacer = start_controller(&cluster, Duration::from_secs(600));

    eventually("the autoscaler runs 3 replicas with the groups' --nodes arguments", || async {
        let d = deployments.get("cluster-autoscaler").await.unwrap();
        let args = d.spec.as_ref().and_then(|s| s.template.spec.as_ref()).and_then(|s| s.containers[0].args.clone());
        let status = strategies.get("autoscalingstrategy").await.unwrap().status.unwrap_or_default();
        args == Some(vec![
            "--cloud-provider=aws".into(),
            "--nodes=1:4:workers-a".into(),
            "--scale-down-delay-after-add=5m".into(),
        ]) && status.enabled
            && status.replicas == 3
    })
    .await;

    // A new image: the groups' nodes are outdated, the autoscaler is paused and confirmed down.
    let before_pause = now_rv(&strategies).await;
    set_node_version_image(&cluster, "v2").await;
    eventually("the autoscaler is scaled to 0 and confirmed down", || async {
        let strategy = strategies.get("autoscalingstrategy").await.unwrap();
        controller::groups::autoscaler::confirmed_down(&strategy)
    })
    .await;
    let d = deployments.get("cluster-autoscaler").await.unwrap();
    assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(0));
    assert_eq!(
        d.metadata
            .annotations
            .unwrap_or_default()
            .get("update.edgeless.systems/autoscaler-replicas")
            .map(String::as_str),
        Some("3")
    );
    eventually("the AutoscalerPaused Event", || async {
        !events(&cluster, "AutoscalerPaused", "autoscalingstrategy").await.is_empty()
    })
    .await;
    // The pause is confirmed in the strategy's status only after the Deployment is scaled down: the rollouts'
    // gate (`confirmed_down`) never opens while an autoscaler pod may still be asked for.
    let scale =
        first_change(&deployments, &before_pause, |d| d.spec.as_ref().and_then(|s| s.replicas) == Some(0)).await;
    let status = first_change(&strategies, &before_pause, |s| s.status.as_ref().is_some_and(|s| !s.enabled)).await;
    assert!(
        matches!((status, scale), (Some(st), Some(sc)) if sc < st),
        "paused: the Deployment scaled to 0 (at {scale:?}) before the status says disabled (at {status:?})"
    );

    // Back to the nodes' image: nothing outdated, the autoscaler restored to 3 (not 1).
    let before_restore = now_rv(&strategies).await;
    set_node_version_image(&cluster, "v1").await;
    eventually("the autoscaler is restored to 3 replicas", || async {
        let d = deployments.get("cluster-autoscaler").await.unwrap();
        let status = strategies.get("autoscalingstrategy").await.unwrap().status.unwrap_or_default();
        d.spec.as_ref().and_then(|s| s.replicas) == Some(3)
            && !d.metadata.annotations.unwrap_or_default().contains_key("update.edgeless.systems/autoscaler-replicas")
            && status.enabled
            && status.replicas == 3
    })
    .await;
    // A pause is lifted in the status first: the gate closes before the first autoscaler pod can exist.
    let status = first_change(&strategies, &before_restore, |s| s.status.as_ref().is_some_and(|s| s.enabled)).await;
    let scale =
        first_change(&deployments, &before_restore, |d| d.spec.as_ref().and_then(|s| s.replicas) == Some(3)).await;
    assert!(
        matches!((status, scale), (Some(st), Some(sc)) if st < sc),
        "restored: the status says enabled (at {status:?}) before the Deployment is scaled up (at {scale:?})"
    );
    replacer.component.stop(PATIENCE).await.expect("the controller stops cleanly");
    cluster.shutdown().await;
}

/// Issue 28 defect 5: the instance's Node is found by its provider ID whatever it is named. Constellation names AWS
/// nodes by instance ID while the cloud answers a creation with the private DNS name: a PendingNode whose
/// `spec.nodeName` is the cloud's name still reaches its goal, and its `spec.nodeName` is corrected to the Node's
/// name (the rollout finds the heir by it), instead of the instance being deleted at the join deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_instance_whose_node_has_another_name_is_found_by_its_provider_id() {
    let cluster = cloud_cluster(&[("workers-a", GroupRole::Worker, 1)]).await;
    let provider = provider(&cluster);
    let replacer = start_controller(&cluster, Duration::from_secs(600));
    let created = create_instance(&provider, "workers-a").await;
    // What the cloud said the Node would be called.
    let told = NewInstance { node_name: "ip-10-0-1-23.eu-central-1.compute.internal".into(), ..created.clone() };
    create_pending(&cluster, &told, "workers-a", PendingNodeGoal::Join, Duration::from_secs(600)).await;
    let api: Api<PendingNode> = Api::all(cluster.client());
    eventually("the joining instance reaches its goal", || async {
        let pending = api.get(&told.node_name).await.unwrap();
        pending.status.unwrap_or_default().reached_goal
    })
    .await;
    let pending = api.get(&told.node_name).await.unwrap();
    assert_eq!(pending.spec.node_name, created.node_name, "spec.nodeName names the Node");
    assert_eq!(provider.instance_state(&created.provider_id).await.unwrap(), InstanceState::Ready);
    replacer.component.stop(PATIENCE).await.expect("the controller stops cleanly");
    cluster.shutdown().await;
}
