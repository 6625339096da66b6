//! The simulated cloud: the cloud-provider conformance suite against it over HTTP, instances joining as Nodes
//! (NotReady, then Ready) and leaving, every fault, and clusters started with scaling groups.

use crate::cluster_support;

use async_trait::async_trait;
use cloud::conformance::{self, Faults, Fixture};
use cloud::metrics::CallCounts;
use cloud::simulated::SimulatedProvider;
use cloud::simulated::wire::ErrorCode;
use cloud::{
    AwsInstance, CloudProvider, ClusterTag, Creation, Deletion, Error, GroupId, GroupRole, ImageUpdate, InstanceState,
    NewInstance, Operation, Outcome, ProviderId, SimulatedInstance,
};
use cluster_support::*;
use dev::cloud::{CloudFaults, GroupFaults, InjectedFailure, InstanceFaults, SimulatedCloud};
use dev::cluster::Cluster;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::json;
use shared::crd::{NodeRole, ScalingGroup};
use std::sync::Arc;
use std::time::Duration;

fn provider(cluster: &Cluster) -> SimulatedProvider {
    SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint")
}

fn failure(code: ErrorCode, times: Option<u32>) -> InjectedFailure {
    InjectedFailure { code, message: None, times, retry_after_seconds: None }
}

/// Creates an instance and resolves a pending creation.
async fn create(provider: &SimulatedProvider, group: &str) -> NewInstance {
    let group = GroupId::from(group);
    match provider.create_instance(&group).await.expect("create") {
        Creation::Created(instance) => instance,
        Creation::Pending(token) => {
            for _ in 0..(PATIENCE.as_millis() / 50) {
                if let Some(instance) = provider.created_instance(&group, &token).await.expect("created_instance") {
                    return instance;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("the pending creation {token:?} never named its instance");
        }
    }
}

async fn wait_state(provider: &SimulatedProvider, id: &ProviderId, state: InstanceState) {
    eventually(&format!("{id} is {state}"), || async { provider.instance_state(id).await.ok() == Some(state) }).await;
}

struct InProcessFaults(SimulatedCloud);

#[async_trait]
impl Faults for InProcessFaults {
    async fn throttle_next_call(&self, retry_after: Duration) {
        let failure = InjectedFailure {
            retry_after_seconds: Some(retry_after.as_secs_f64()),
            ..failure(ErrorCode::Throttled, Some(1))
        };
        self.0.set_faults(CloudFaults { failure: Some(failure), slow_seconds: None }).unwrap();
    }

    async fn quota_on_next_create(&self, group: &GroupId) {
        let faults =
            GroupFaults { create_failure: Some(failure(ErrorCode::QuotaExceeded, Some(1))), ..Default::default() };
        self.0.set_group_faults(group.as_str(), faults).unwrap();
    }

    async fn clear(&self) {
        self.0.clear_faults();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_provider_passes_the_conformance_suite_with_named_and_pending_creations() {
    let cluster = cloud_cluster(&[("conf", GroupRole::Worker, 1), ("conf-cp", GroupRole::ControlPlane, 1)]).await;
    for (group, role, returns_token) in [("conf", GroupRole::Worker, false), ("conf-cp", GroupRole::ControlPlane, true)]
    {
        let factory = || async {
            // A fresh client per check: no check may rely on state in the client.
            cluster
                .cloud()
                .set_group_faults(group, GroupFaults { create_returns_token: returns_token, ..Default::default() })
                .unwrap();
            Fixture {
                provider: Arc::new(provider(&cluster)),
                group: GroupId::from(group),
                role,
                cluster: cluster.cloud().cluster_tag().clone(),
                unknown_group: GroupId::from("no-such-group"),
                unknown_instance: ProviderId::Simulated(SimulatedInstance { group: group.into(), name: "gone".into() }),
                foreign_instance: ProviderId::Aws(AwsInstance {
                    zone: "us-east-1a".into(),
                    instance_id: "i-0123456789abcdef0".into(),
                }),
                other_image: "v2".into(),
                faults: Some(Arc::new(InProcessFaults(cluster.cloud().clone()))),
                poll: Duration::from_millis(50),
                deadline: PATIENCE,
            }
        };
        let report = conformance::run(factory).await;
        report.assert_passed();
        assert_eq!(report.passed().len(), report.checks.len(), "{group}: no check may be skipped: {report:?}");
    }
    // The suite really creates and deletes: the cloud counted it.
    let calls = cluster.cloud().calls();
    assert!(calls.get(&Operation::CreateInstance).copied().unwrap_or(0) >= 4, "{calls:?}");
    assert!(calls.get(&Operation::CreatedInstance).copied().unwrap_or(0) >= 1, "{calls:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_instance_registers_its_node_not_ready_then_ready_and_leaves_with_its_node_and_host() {
    let cluster = cloud_cluster(&[("cp", GroupRole::ControlPlane, 1)]).await;
    cluster
        .cloud()
        .set_group_faults("cp", GroupFaults { ready_seconds: Some(Duration::from_secs(3)), ..Default::default() })
        .unwrap();
    let provider = provider(&cluster);
    provider.set_group_image(&GroupId::from("cp"), "v2").await.unwrap();
    let instance = create(&provider, "cp").await;
    let name = instance.node_name.clone();
    assert_eq!(provider.instance_state(&instance.provider_id).await.unwrap(), InstanceState::Creating);
    assert!(cluster.informers().nodes.get(&name).is_none(), "no Node before the instance joins");

    eventually("the node registers", || async { cluster.informers().nodes.get(&name).is_some() }).await;
    let nodes: Api<Node> = Api::all(cluster.client());
    eventually("the kubelet reports the registered node NotReady", || async {
        node_ready(&cluster, &name) == Some(false)
    })
    .await;
    let node = nodes.get(&name).await.unwrap();
    assert_eq!(node.spec.as_ref().and_then(|s| s.provider_id.clone()), Some(instance.provider_id.to_string()));
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("node-role.kubernetes.io/control-plane").map(String::as_str), Some(""));
    assert_eq!(labels.get("update.edgeless.systems/managed").map(String::as_str), Some("true"));
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    assert!(taints.iter().any(|t| t.key == "node-role.kubernetes.io/control-plane" && t.effect == "NoSchedule"));

    eventually("the node turns Ready", || async { node_ready(&cluster, &name) == Some(true) }).await;
    let node = nodes.get(&name).await.unwrap();
    let info = node.status.and_then(|s| s.node_info).unwrap();
    assert_eq!(info.os_image, "v2", "the host runs the group's image at creation");
    assert_eq!(cluster.hosts().facts(&name).unwrap().os_image, "v2");
    assert_eq!(provider.instance_image(&instance.provider_id).await.unwrap(), "v2");

    // The node's host is driven like any other (what the agent does): stage, reboot, new image reported.
    cluster.hosts().stage(&name, "v3").await.unwrap();
    cluster.hosts().reboot(&name).unwrap();
    eventually("the group node reports the image it rebooted into", || async {
        cluster
            .informers()
            .nodes
            .get(&name)
            .is_some_and(|n| n.os_image.as_deref() == Some("v3") && n.ready == Some(true))
    })
    .await;

    // A pod on the node (tolerating the control-plane taint is not needed: it is bound directly).
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.client(), "default");
    let pod = serde_json::from_value(json!({"metadata": {"name": "on-the-donor"},
        "spec": {"nodeName": name, "containers": [{"name": "c", "image": "registry.example/app:1"}]}}))
    .unwrap();
    pods.create(&Default::default(), &pod).await.unwrap();
    eventually("the pod runs on the new node", || async {
        pods.get_opt("on-the-donor").await.unwrap().and_then(|p| p.status?.phase).as_deref() == Some("Running")
    })
    .await;

    assert_eq!(provider.delete_instance(&GroupId::from("cp"), &instance.provider_id).await.unwrap(), Deletion::Started);
    assert_eq!(provider.instance_state(&instance.provider_id).await.unwrap(), InstanceState::Terminating);
    wait_state(&provider, &instance.provider_id, InstanceState::Terminated).await;
    eventually("the terminated instance's node is deleted", || async { nodes.get_opt(&name).await.unwrap().is_none() })
        .await;
    assert!(cluster.hosts().state(&name).is_none(), "the host is gone");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(cluster.hosts().state(&name).is_none(), "and no kubelet brought it back");
    assert!(!cluster.cloud().instances_of("cp").contains(&name));
    // The pod garbage collector removes the pods of the node that is gone.
    eventually("the pod of the gone node is deleted", || async {
        pods.get_opt("on-the-donor").await.unwrap().is_none()
    })
    .await;
    cluster.shutdown().await;
}

/// `group_instances` (issue 28): one request lists every instance of the group with its state and image,
/// terminated ones too; an unknown group is `NotFound`; counted as its own operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_groups_instances_are_listed_with_their_states_and_images_in_one_call() {
    let cluster = cloud_cluster(&[("cp", GroupRole::ControlPlane, 1)]).await;
    let provider = provider(&cluster);
    let group = GroupId::from("cp");
    let before = provider.group_instances(&group).await.unwrap();
    assert_eq!(before.unlisted, 0);
    assert_eq!(before.instances.len(), 1, "{before:?}");
    let old = before.instances[0].clone();
    assert_eq!(old.state, InstanceState::Ready);
    provider.set_group_image(&group, "v2").await.unwrap();
    let new = create(&provider, "cp").await;
    provider.delete_instance(&group, &old.provider_id).await.unwrap();
    let listed = provider.group_instances(&group).await.unwrap();
    let find = |id: &ProviderId| listed.instances.iter().find(|i| i.provider_id == *id).cloned().unwrap();
    let (old_now, new_now) = (find(&old.provider_id), find(&new.provider_id));
    assert_eq!((old_now.state, old_now.image.as_deref()), (InstanceState::Terminating, old.image.as_deref()));
    assert_eq!(
        (new_now.state, new_now.image.as_deref(), new_now.node_name),
        (InstanceState::Creating, Some("v2"), new.node_name)
    );
    let unknown = provider.group_instances(&GroupId::from("nope")).await.unwrap_err();
    assert!(matches!(unknown, Error::NotFound { .. }), "{unknown:?}");
    assert_eq!(cluster.cloud().calls().get(&Operation::GroupInstances).copied(), Some(3));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_that_never_join_or_fail_to_boot_stay_so() {
    let cluster = cloud_cluster(&[("workers", GroupRole::Worker, 1)]).await;
    let provider = provider(&cluster);
    cluster.cloud().set_group_faults("workers", GroupFaults { never_joins: true, ..Default::default() }).unwrap();
    let lonely = create(&provider, "workers").await;
    wait_state(&provider, &lonely.provider_id, InstanceState::Ready).await;
    cluster.cloud().set_group_faults("workers", GroupFaults { fails_to_boot: true, ..Default::default() }).unwrap();
    let broken = create(&provider, "workers").await;
    wait_state(&provider, &broken.provider_id, InstanceState::Failed).await;
    // Join and ready times are 200 ms and 300 ms: ten times that, and still no Node.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(cluster.informers().nodes.get(&lonely.node_name).is_none());
    assert!(cluster.informers().nodes.get(&broken.node_name).is_none());
    assert_eq!(provider.instance_state(&broken.provider_id).await.unwrap(), InstanceState::Failed);
    // A failed instance is deleted like any other.
    provider.delete_instance(&GroupId::from("workers"), &broken.provider_id).await.unwrap();
    wait_state(&provider, &broken.provider_id, InstanceState::Terminated).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_failures_come_back_typed_and_clear_after_their_count() {
    let cluster = cloud_cluster(&[("workers", GroupRole::Worker, 1)]).await;
    let provider = provider(&cluster);
    let cloud = cluster.cloud();
    let group = GroupId::from("workers");
    let name = cloud.instances_of("workers")[0].clone();
    let id = ProviderId::Simulated(SimulatedInstance { group: "workers".into(), name: name.clone() });

    // Quota on create.
    cloud
        .set_group_faults(
            "workers",
            GroupFaults { create_failure: Some(failure(ErrorCode::QuotaExceeded, None)), ..Default::default() },
        )
        .unwrap();
    assert!(matches!(provider.create_instance(&group).await, Err(Error::QuotaExceeded { .. })));
    assert!(matches!(provider.create_instance(&group).await, Err(Error::QuotaExceeded { .. })), "until cleared");

    // Image lookups.
    cloud
        .set_group_faults(
            "workers",
            GroupFaults { image_failure: Some(failure(ErrorCode::Internal, Some(1))), ..Default::default() },
        )
        .unwrap();
    assert!(matches!(provider.group_image(&group).await, Err(Error::Transient { .. })));
    assert_eq!(provider.group_image(&group).await.unwrap(), "v1", "one failure only");
    cloud
        .set_instance_faults(
            &name,
            InstanceFaults { image_failure: Some(failure(ErrorCode::Failed, None)), ..Default::default() },
        )
        .unwrap();
    assert!(matches!(provider.instance_image(&id).await, Err(Error::Permanent { .. })));
    assert_eq!(provider.instance_state(&id).await.unwrap(), InstanceState::Ready, "only image lookups fail");

    // Delete fails twice, then succeeds; the governed provider rides it out.
    cloud
        .set_instance_faults(
            &name,
            InstanceFaults { delete_failure: Some(failure(ErrorCode::Internal, Some(2))), ..Default::default() },
        )
        .unwrap();
    assert!(matches!(provider.delete_instance(&group, &id).await, Err(Error::Transient { .. })));
    let counts = CallCounts::default();
    let policy = cloud::CallPolicy { min_backoff: Duration::from_millis(50), ..cloud::CallPolicy::default() };
    let governed = cloud::Governed::new(provider.clone(), policy, Arc::new(counts.clone()));
    assert_eq!(governed.delete_instance(&group, &id).await.unwrap(), Deletion::Started);
    assert_eq!(
        (counts.get(Operation::DeleteInstance, Outcome::Transient), counts.get(Operation::DeleteInstance, Outcome::Ok)),
        (1, 1)
    );

    // Throttling with a retry-after, and permission errors, of the whole API.
    let throttle = InjectedFailure { retry_after_seconds: Some(1.5), ..failure(ErrorCode::Throttled, Some(1)) };
    cloud.set_faults(CloudFaults { failure: Some(throttle), slow_seconds: None }).unwrap();
    match provider.list_groups(cloud.cluster_tag()).await {
        Err(Error::Throttled { retry_after, .. }) => assert_eq!(retry_after, Some(Duration::from_millis(1500))),
        other => panic!("expected a throttled answer, got {other:?}"),
    }
    assert_eq!(provider.list_groups(cloud.cluster_tag()).await.unwrap().len(), 1);
    cloud.set_faults(CloudFaults { failure: Some(failure(ErrorCode::Forbidden, None)), slow_seconds: None }).unwrap();
    assert!(matches!(provider.instance_state(&id).await, Err(Error::PermissionDenied { .. })));

    // Slow calls: a client with a shorter timeout gives up with a transient error.
    cloud.set_faults(CloudFaults { failure: None, slow_seconds: Some(Duration::from_secs(3)) }).unwrap();
    let impatient = provider.clone().with_timeout(Duration::from_millis(300));
    assert!(matches!(impatient.group_image(&group).await, Err(Error::Transient { .. })));
    cloud.clear_faults();
    assert_eq!(provider.group_image(&group).await.unwrap(), "v1");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_updates_may_take_time_groups_have_a_maximum_and_instances_stop_and_start() {
    let cluster = cloud_cluster(&[("workers", GroupRole::Worker, 1), ("spare", GroupRole::Worker, 0)]).await;
    let provider = provider(&cluster);
    let group = GroupId::from("workers");
    let cloud = cluster.cloud();
    cloud
        .set_group_faults(
            "workers",
            GroupFaults { image_update_seconds: Some(Duration::from_secs(1)), ..Default::default() },
        )
        .unwrap();
    assert_eq!(provider.set_group_image(&group, "v2").await.unwrap(), ImageUpdate::InProgress);
    assert_eq!(provider.group_image(&group).await.unwrap(), "v1");
    eventually("the image update applies", || async {
        provider.set_group_image(&group, "v2").await.unwrap() == ImageUpdate::Applied
    })
    .await;
    assert_eq!(provider.group_image(&group).await.unwrap(), "v2");
    assert!(matches!(provider.set_group_image(&group, " v3").await, Err(Error::Invalid { .. })));

    let name = cloud.instances_of("workers")[0].clone();
    // Started with 1 instance and room for 3 more.
    for _ in 0..3 {
        create(&provider, "workers").await;
    }
    assert!(matches!(provider.create_instance(&group).await, Err(Error::Invalid { .. })), "a full group refuses");

    let id = ProviderId::Simulated(SimulatedInstance { group: "workers".into(), name: name.clone() });
    cloud.stop(&name).unwrap();
    assert_eq!(provider.instance_state(&id).await.unwrap(), InstanceState::Stopping);
    wait_state(&provider, &id, InstanceState::Stopped).await;
    eventually("a stopped instance's node is NotReady", || async { node_ready(&cluster, &name) == Some(false) }).await;
    cloud.start(&name).unwrap();
    wait_state(&provider, &id, InstanceState::Ready).await;
    eventually("a started instance's node is Ready again", || async { node_ready(&cluster, &name) == Some(true) })
        .await;
    assert!(cloud.start(&name).is_err(), "only a stopped instance starts");
    // An instance of another group is refused, not deleted; an unknown group is not found.
    assert!(matches!(provider.delete_instance(&GroupId::from("spare"), &id).await, Err(Error::Invalid { .. })));
    assert!(matches!(provider.delete_instance(&GroupId::from("nope"), &id).await, Err(Error::NotFound { .. })));
    assert_eq!(provider.instance_state(&id).await.unwrap(), InstanceState::Ready);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_scaling_groups_has_their_nodes_scaling_groups_and_http_controls() {
    let cluster = cloud_cluster(&[("cp", GroupRole::ControlPlane, 3), ("workers-a", GroupRole::Worker, 2)]).await;
    assert_eq!(cluster.control_planes().len(), 3);
    assert_eq!(cluster.workers().len(), 3, "worker-0 and the group's two");
    for name in cluster.node_names() {
        assert_eq!(node_ready(&cluster, &name), Some(true), "{name}");
    }
    let groups: Api<ScalingGroup> = Api::all(cluster.client());
    let cp = groups.get("cp").await.unwrap();
    assert_eq!(
        (cp.spec.group_id.as_str(), cp.spec.node_image.as_str(), cp.spec.role, cp.spec.autoscaling),
        ("cp", "constellation-version", Some(NodeRole::ControlPlane), false)
    );
    let workers = groups.get("workers-a").await.unwrap();
    assert_eq!(
        (workers.spec.role, workers.spec.autoscaling, workers.spec.autoscaler_group_name.as_deref()),
        (Some(NodeRole::Worker), true, Some("workers-a"))
    );

    let provider = provider(&cluster);
    let listed = provider.list_groups(cluster.cloud().cluster_tag()).await.unwrap();
    let names: Vec<(&str, GroupRole)> = listed.iter().map(|g| (g.name.as_str(), g.role)).collect();
    assert_eq!(names, vec![("cp", GroupRole::ControlPlane), ("workers-a", GroupRole::Worker)]);
    let elsewhere = ClusterTag { key: "constellation-uid".into(), value: "another".into() };
    assert!(provider.list_groups(&elsewhere).await.unwrap().is_empty());
    // Every group node's provider ID names its group.
    let nodes: Api<Node> = Api::all(cluster.client());
    for name in cluster.cloud().instances_of("cp") {
        let node = nodes.get(&name).await.unwrap();
        let id: ProviderId = node.spec.and_then(|s| s.provider_id).unwrap().parse().unwrap();
        assert_eq!(provider.instance_group(&id).await.unwrap(), GroupId::from("cp"));
    }

    // The dev controls over HTTP.
    let answer =
        request(&cluster, "PUT", "/_dev/cloud/groups/workers-a/faults", Some(json!({"neverJoins": true}))).await;
    assert_eq!(answer.status, 200);
    let answer =
        request(&cluster, "PUT", "/_dev/cloud/groups/workers-a/faults", Some(json!({"neverJoin": true}))).await;
    assert_eq!(answer.status, 400, "unknown fields are refused: {}", answer.body);
    let answer = request(
        &cluster,
        "PUT",
        "/_dev/cloud/faults",
        Some(json!({"failure": {"code": "Internal", "retryAfterSeconds": 1}})),
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    let answer = request(&cluster, "PUT", "/_dev/cloud/instances/nope/faults", Some(json!({}))).await;
    assert_eq!(answer.status, 404);
    let answer = request(
        &cluster,
        "PUT",
        "/_dev/cloud/faults",
        Some(json!({"failure": {"code": "Throttled", "times": 1, "retryAfterSeconds": 2}})),
    )
    .await;
    assert_eq!(answer.status, 200);
    let answer = request(&cluster, "GET", "/_dev/cloud/api/groups/cp", None).await;
    assert_eq!(
        (answer.status, &answer.body["code"], &answer.body["retryAfterSeconds"]),
        (429, &json!("Throttled"), &json!(2.0))
    );
    let answer = request(&cluster, "GET", "/_dev/cloud/api/nothing", None).await;
    assert_eq!((answer.status, &answer.body["code"]), (404, &json!("NotFound")));
    let answer = request(&cluster, "POST", "/_dev/cloud/api/groups/cp", None).await;
    assert_eq!(answer.status, 400);
    let answer = request(&cluster, "GET", "/_dev/cloud", None).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body["groups"].as_array().map(Vec::len), Some(2));
    assert_eq!(answer.body["groups"][1]["faults"], json!({"neverJoins": true}));
    assert_eq!(answer.body["calls"]["group_image"], json!(1));
    let answer = request(&cluster, "DELETE", "/_dev/cloud/faults", None).await;
    assert_eq!(answer.status, 200);
    assert_eq!(request(&cluster, "GET", "/_dev/cloud", None).await.body["groups"][1]["faults"], json!({}));
    // The hosts stay where they were.
    assert_eq!(request(&cluster, "GET", "/_dev/hosts/worker-0", None).await.status, 200);
    cluster.shutdown().await;
}

/// Issue 28 (batched replacement): several instances created or deleted in ONE call of the simulated cloud (counted
/// once, as a real batch call is one request against the rate limit), each instance with its own result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_created_and_deleted_in_batch_calls_each_with_its_own_result() {
    let cluster = cloud_cluster(&[("workers", GroupRole::Worker, 1)]).await;
    let cloud = cluster.cloud();
    let provider = provider(&cluster);
    let group = GroupId::from("workers");
    assert_eq!(provider.batch_limit(), cloud::BatchLimit { create: 100, delete: 100 });
    let original = provider.group_instances(&group).await.unwrap().instances.remove(0);
    // A quota refusing the first instance of the batch: the others are made.
    let quota = GroupFaults { create_failure: Some(failure(ErrorCode::QuotaExceeded, Some(1))), ..Default::default() };
    cloud.set_group_faults("workers", quota).unwrap();
    let results = provider.create_instances(&group, 3).await.unwrap();
    assert_eq!(results.len(), 3);
    assert!(matches!(results[0], Err(Error::QuotaExceeded { .. })), "{results:?}");
    let made: Vec<NewInstance> = results[1..]
        .iter()
        .map(|r| match r {
            Ok(Creation::Created(instance)) => instance.clone(),
            other => panic!("expected a named instance, got {other:?}"),
        })
        .collect();
    assert_ne!(made[0].provider_id, made[1].provider_id);
    assert_eq!(cloud.instances_of("workers").len(), 3);
    // The group's maximum (its start size plus 3) refuses the instance beyond it alone.
    let results = provider.create_instances(&group, 2).await.unwrap();
    assert!(
        matches!((&results[0], &results[1]), (Ok(Creation::Created(_)), Err(Error::Invalid { .. }))),
        "{results:?}"
    );
    assert_eq!(cloud.instances_of("workers").len(), 4);
    for instance in &made {
        wait_state(&provider, &instance.provider_id, InstanceState::Ready).await;
    }
    // A failure of the whole call (throttled): nothing is made.
    let throttle = GroupFaults { failure: Some(failure(ErrorCode::Throttled, Some(1))), ..Default::default() };
    cloud.set_group_faults("workers", throttle).unwrap();
    assert!(matches!(provider.create_instances(&group, 1).await, Err(Error::Throttled { .. })));
    // Sizes outside 1 to 100 are refused.
    for count in [0, 101] {
        assert!(matches!(provider.create_instances(&group, count).await, Err(Error::Invalid { .. })), "{count}");
    }

    // Deletions: two started, one failing on its own, an unknown one gone already, another cloud's refused.
    let failing = original;
    let fails = InstanceFaults { delete_failure: Some(failure(ErrorCode::Internal, Some(1))), ..Default::default() };
    cloud.set_instance_faults(&failing.node_name, fails).unwrap();
    let unknown = ProviderId::Simulated(SimulatedInstance { group: "workers".into(), name: "workers-gone0".into() });
    let foreign = ProviderId::Aws(AwsInstance { zone: "us-east-1a".into(), instance_id: "i-0123456789abcdef0".into() });
    let ids = [made[0].provider_id.clone(), made[1].provider_id.clone(), failing.provider_id.clone(), unknown, foreign];
    let results = provider.delete_instances(&group, &ids).await.unwrap();
    assert!(
        matches!(
            results.as_slice(),
            [
                Ok(Deletion::Started),
                Ok(Deletion::Started),
                Err(Error::Transient { .. }),
                Ok(Deletion::AlreadyGone),
                Err(Error::Invalid { .. })
            ]
        ),
        "{results:?}"
    );
    wait_state(&provider, &made[0].provider_id, InstanceState::Terminated).await;
    wait_state(&provider, &made[1].provider_id, InstanceState::Terminated).await;
    assert_eq!(provider.instance_state(&failing.provider_id).await.unwrap(), InstanceState::Ready);
    let again = provider.delete_instances(&group, std::slice::from_ref(&failing.provider_id)).await.unwrap();
    assert!(matches!(again.as_slice(), [Ok(Deletion::Started)]), "{again:?}");
    // An instance of another group is its own error; an unknown group fails the whole call.
    let other = provider.delete_instances(&GroupId::from("nope"), std::slice::from_ref(&failing.provider_id)).await;
    assert!(matches!(other, Err(Error::NotFound { .. })), "{other:?}");

    // Through the governed client: creates of the group that wait for its rate limit go as one batch call.
    cluster.cloud().clear_faults();
    let governed = crate::support::governed_one_per_second(provider.clone());
    governed.group_image(&group).await.unwrap();
    let before = cloud.calls();
    let (one, two) = tokio::join!(governed.create_instance(&group), governed.create_instance(&group));
    assert!(matches!((one, two), (Ok(Creation::Created(_)), Ok(Creation::Created(_)))));
    let after = cloud.calls();
    let delta = |op| after.get(&op).copied().unwrap_or(0) - before.get(&op).copied().unwrap_or(0);
    assert_eq!((delta(Operation::CreateInstances), delta(Operation::CreateInstance)), (1, 0), "{after:?}");
    let calls = cloud.calls();
    assert_eq!(calls.get(&Operation::CreateInstances).copied(), Some(6), "every batch call counted once: {calls:?}");
    assert_eq!(calls.get(&Operation::DeleteInstances).copied(), Some(3), "{calls:?}");
    cluster.shutdown().await;
}
