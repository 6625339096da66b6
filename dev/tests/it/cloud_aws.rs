//! The AWS provider against moto (Auto Scaling and EC2 over their real wire protocols): the conformance suite,
//! typed errors through a fault proxy, mixed-instances-policy groups, a seed's ScalingGroup, and the README's IAM
//! policy compared with the calls the provider made. Skipped with a message when moto is missing outside CI.

use crate::aws_support;
use crate::support;

use aws_support::*;
use cloud::aws::AwsProvider;
use cloud::aws::sdk::aws_sdk_autoscaling;
use cloud::aws::sdk::aws_sdk_autoscaling::types::{
    LaunchTemplate, LaunchTemplateOverrides, LaunchTemplateSpecification, MixedInstancesPolicy,
};
use cloud::conformance::{self, Fixture};
use cloud::{
    AwsInstance, CloudProvider, ClusterTag, Creation, Deletion, Error, GroupId, GroupRole, ImageUpdate, InstanceState,
    NewInstance, Outcome, ProviderId, SimulatedInstance,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

const UID: &str = "cluster-a";

fn tag() -> ClusterTag {
    ClusterTag { key: "constellation-uid".into(), value: UID.into() }
}

async fn provider(proxy: &FaultProxy) -> AwsProvider {
    AwsProvider::new(&sdk_config(&proxy.url).await)
}

/// Creates an instance with `provider` and resolves the creation with another client (the token is all the state:
/// it survives a controller restart), polling as the PendingNode controller does.
async fn create(provider: &AwsProvider, proxy: &FaultProxy, group: &GroupId) -> NewInstance {
    let Creation::Pending(token) = provider.create_instance(group).await.expect("create_instance") else {
        panic!("AWS creations are pending until the group names the instance");
    };
    let fresh = self::provider(proxy).await;
    for _ in 0..600 {
        if let Some(instance) = fresh.created_instance(group, &token).await.expect("created_instance") {
            return instance;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the creation {token:?} never named its instance");
}

#[tokio::test(flavor = "current_thread")]
async fn the_aws_provider_passes_the_conformance_suite_against_moto() {
    let Some(moto) = start_moto().await else { return };
    let setup = setup_config(&moto.url).await;
    create_group(&setup, "conf-workers", UID, "worker", 1, 4).await;
    create_group(&setup, "conf-cp", UID, "control-plane", 1, 4).await;
    create_group(&setup, "other-cluster-workers", "cluster-b", "worker", 1, 4).await;
    let proxy = FaultProxy::start(&moto.url).await;
    for (group, role) in [("conf-workers", GroupRole::Worker), ("conf-cp", GroupRole::ControlPlane)] {
        let factory = || async {
            Fixture {
                provider: Arc::new(provider(&proxy).await),
                group: GroupId::from(group),
                role,
                cluster: tag(),
                unknown_group: GroupId::from("no-such-group"),
                unknown_instance: ProviderId::Aws(AwsInstance {
                    zone: ZONE.into(),
                    instance_id: "i-0123456789abcdef0".into(),
                }),
                foreign_instance: ProviderId::Simulated(SimulatedInstance { group: "g".into(), name: "n".into() }),
                other_image: OTHER_IMAGE.into(),
                faults: Some(Arc::new(proxy.clone())),
                poll: Duration::from_millis(100),
                deadline: Duration::from_secs(60),
            }
        };
        let report = conformance::run(factory).await;
        report.assert_passed();
        assert_eq!(report.passed().len(), report.checks.len(), "{group}: no check may be skipped: {report:?}");
    }
    let listed = provider(&proxy).await.list_groups(&tag()).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(names, ["conf-cp", "conf-workers"], "another cluster's group is never listed");
    assert_eq!((listed[1].min, listed[1].max, listed[1].autoscaler_group_name.as_str()), (0, 4, "conf-workers"));
}

/// The IAM actions of the README's policy for AWS (the JSON block under `### AWS`).
fn readme_actions() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README.md");
    let section = readme.split("\n### AWS").nth(1).expect("README.md has a `### AWS` section");
    let json = section.split("```json").nth(1).and_then(|s| s.split("```").next()).expect("a JSON policy");
    let policy: serde_json::Value = serde_json::from_str(json).expect("the policy is JSON");
    let mut actions = BTreeSet::new();
    for statement in policy["Statement"].as_array().expect("statements") {
        for action in statement["Action"].as_array().expect("a list of actions") {
            actions.insert(action.as_str().expect("an action").to_owned());
        }
    }
    actions
}

#[tokio::test(flavor = "current_thread")]
async fn the_readme_iam_policy_lists_exactly_the_calls_the_provider_makes() {
    let Some(moto) = start_moto().await else { return };
    let setup = setup_config(&moto.url).await;
    create_group(&setup, "iam-workers", UID, "worker", 1, 3).await;
    let proxy = FaultProxy::start(&moto.url).await;
    let aws = provider(&proxy).await;
    let group = GroupId::from("iam-workers");
    // Every method, as node replacement uses them.
    assert_eq!(aws.list_groups(&tag()).await.unwrap().len(), 1);
    assert_eq!(aws.group_image(&group).await.unwrap(), IMAGE);
    assert_eq!(aws.set_group_image(&group, OTHER_IMAGE).await.unwrap(), ImageUpdate::Applied);
    let instance = create(&aws, &proxy, &group).await;
    let id = &instance.provider_id;
    assert_eq!(aws.instance_state(id).await.unwrap(), InstanceState::Ready);
    assert_eq!(aws.instance_image(id).await.unwrap(), OTHER_IMAGE);
    assert_eq!(aws.instance_group(id).await.unwrap(), group);
    assert_eq!(aws.delete_instance(&group, id).await.unwrap(), Deletion::Started);
    assert_eq!(aws.autoscaler_group_name(&group).unwrap(), "iam-workers");

    let made: BTreeSet<String> = proxy.calls();
    assert_eq!(made, readme_actions(), "the README's IAM policy must list exactly the calls made");
}

#[tokio::test(flavor = "current_thread")]
async fn errors_of_the_aws_apis_are_typed_with_their_retry_after() {
    let Some(moto) = start_moto().await else { return };
    let setup = setup_config(&moto.url).await;
    create_group(&setup, "err-workers", UID, "worker", 1, 1).await;
    let proxy = FaultProxy::start(&moto.url).await;
    let aws = provider(&proxy).await;
    let group = GroupId::from("err-workers");
    let fault = |action: &str, status: u16, code: &str, retry_after: Option<u64>| Injected {
        action: Some(action.to_owned()),
        group: None,
        status,
        code: code.to_owned(),
        retry_after: retry_after.map(Duration::from_secs),
    };
    let any_instance = ProviderId::Aws(AwsInstance { zone: ZONE.into(), instance_id: "i-0123456789abcdef0".into() });

    // Unknown group; a group at its maximum size.
    let unknown = GroupId::from("no-such-group");
    assert_eq!(aws.group_image(&unknown).await.unwrap_err().outcome(), Outcome::NotFound);
    assert_eq!(aws.create_instance(&unknown).await.unwrap_err().outcome(), Outcome::NotFound);
    let full = aws.create_instance(&group).await.unwrap_err();
    assert!(matches!(&full, Error::Invalid { message } if message.contains("maximum")), "{full}");
    assert_eq!(aws.set_group_image(&group, "v2").await.unwrap_err().outcome(), Outcome::Invalid);

    // Throttling of both APIs, with the Retry-After.
    proxy.inject(fault("DescribeAutoScalingGroups", 400, "Throttling", Some(3)));
    match aws.group_image(&group).await {
        Err(Error::Throttled { retry_after, .. }) => assert_eq!(retry_after, Some(Duration::from_secs(3))),
        other => panic!("Auto Scaling Throttling: {other:?}"),
    }
    proxy.inject(fault("DescribeInstances", 503, "RequestLimitExceeded", None));
    match aws.instance_state(&any_instance).await {
        Err(error @ Error::Throttled { retry_after: None, .. }) => assert!(error.was_refused()),
        other => panic!("EC2 RequestLimitExceeded: {other:?}"),
    }
    // Quota, 5xx, permission.
    proxy.inject(fault("DescribeLaunchTemplateVersions", 400, "LaunchTemplateVersionLimitExceeded", None));
    assert_eq!(aws.set_group_image(&group, OTHER_IMAGE).await.unwrap_err().outcome(), Outcome::QuotaExceeded);
    proxy.inject(fault("DescribeInstances", 500, "InternalError", None));
    assert_eq!(aws.instance_image(&any_instance).await.unwrap_err().outcome(), Outcome::Transient);
    proxy.inject(fault("DescribeAutoScalingGroups", 503, "ServiceUnavailable", None));
    assert_eq!(aws.list_groups(&tag()).await.unwrap_err().outcome(), Outcome::Transient);
    proxy.inject(fault("DescribeAutoScalingInstances", 403, "AccessDenied", None));
    let denied = aws.instance_group(&any_instance).await.unwrap_err();
    assert_eq!(denied.outcome(), Outcome::PermissionDenied, "{denied}");
    assert!(denied.to_string().contains("DescribeAutoScalingInstances"), "the message names the call: {denied}");
    proxy.inject(fault("DescribeInstances", 403, "UnauthorizedOperation", None));
    assert_eq!(aws.instance_state(&any_instance).await.unwrap_err().outcome(), Outcome::PermissionDenied);
    // Nothing listens: transient.
    let gone = AwsProvider::new(&sdk_config("http://127.0.0.1:9").await);
    assert_eq!(gone.group_image(&group).await.unwrap_err().outcome(), Outcome::Transient);
    // The faults were used up: the provider works again.
    assert_eq!(aws.group_image(&group).await.unwrap(), IMAGE);
}

#[tokio::test(flavor = "current_thread")]
async fn mixed_instances_policy_groups_with_one_template_are_handled_and_others_refused() {
    let Some(moto) = start_moto().await else { return };
    let setup = setup_config(&moto.url).await;
    let template = create_group(&setup, "plain", UID, "worker", 0, 3).await;
    let spec = LaunchTemplateSpecification::builder().launch_template_id(&template).version("$Default").build();
    let autoscaling = aws_sdk_autoscaling::Client::new(&setup);
    for (name, override_template) in [("mixed", false), ("mixed-own-template", true)] {
        let mut override_ = LaunchTemplateOverrides::builder().instance_type("m5.large");
        if override_template {
            override_ = override_.launch_template_specification(spec.clone());
        }
        let policy = MixedInstancesPolicy::builder()
            .launch_template(
                LaunchTemplate::builder()
                    .launch_template_specification(spec.clone())
                    .overrides(override_.build())
                    .build(),
            )
            .build();
        autoscaling
            .create_auto_scaling_group()
            .auto_scaling_group_name(name)
            .mixed_instances_policy(policy)
            .min_size(0)
            .max_size(3)
            .desired_capacity(0)
            .availability_zones(ZONE)
            .send()
            .await
            .expect("moto creates the group");
    }
    let proxy = FaultProxy::start(&moto.url).await;
    let aws = provider(&proxy).await;
    let mixed = GroupId::from("mixed");
    assert_eq!(aws.group_image(&mixed).await.unwrap(), IMAGE);
    assert_eq!(aws.set_group_image(&mixed, OTHER_IMAGE).await.unwrap(), ImageUpdate::Applied);
    let instance = create(&aws, &proxy, &mixed).await;
    assert_eq!(aws.instance_image(&instance.provider_id).await.unwrap(), OTHER_IMAGE);

    let refused = GroupId::from("mixed-own-template");
    for error in [
        aws.group_image(&refused).await.unwrap_err(),
        aws.set_group_image(&refused, OTHER_IMAGE).await.unwrap_err(),
        aws.create_instance(&refused).await.unwrap_err(),
    ] {
        assert!(matches!(&error, Error::Invalid { message } if message.contains("mixed-instances policy")), "{error}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_seed_scaling_group_with_an_aws_group_name_or_arn_is_resolved() {
    let Some(moto) = start_moto().await else { return };
    let setup = setup_config(&moto.url).await;
    let name = "constellation-worker-3c2f8";
    create_group(&setup, name, UID, "worker", 1, 3).await;
    let proxy = FaultProxy::start(&moto.url).await;
    let aws = provider(&proxy).await;
    // The seed's ScalingGroup example, with the AWS group ID Constellation writes (the group's name), and its ARN.
    let arn = format!("arn:aws:autoscaling:{REGION}:123456789012:autoScalingGroup:1a2b:autoScalingGroupName/{name}");
    for group_id in [name.to_owned(), arn] {
        let yaml = format!(
            "apiVersion: update.edgeless.systems/v1alpha1\nkind: ScalingGroup\nmetadata:\n  name: scalinggroup-worker\n\
             spec:\n  nodeImage: \"constellation-version\"\n  groupId: \"{group_id}\"\n  autoscaling: true\n"
        );
        let seed: shared::crd::ScalingGroup = yaml_serde::from_str(&yaml).expect("the seed parses");
        let group = GroupId(seed.spec.group_id.clone());
        assert_eq!(aws.group_image(&group).await.unwrap(), IMAGE, "{group_id}");
        assert_eq!(aws.autoscaler_group_name(&group).unwrap(), name);
    }
    let listed = aws.list_groups(&tag()).await.unwrap();
    assert!(listed.iter().any(|g| g.id.as_str() == name && g.role == GroupRole::Worker), "{listed:?}");
}

/// The group nodes of the cluster (those with an AWS provider ID), by name.
fn aws_nodes(cluster: &dev::cluster::Cluster) -> Vec<k8s_openapi::api::core::v1::Node> {
    let nodes = cluster.store().api::<k8s_openapi::api::core::v1::Node>().list(None, &Default::default()).unwrap();
    nodes
        .items
        .into_iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|p| p.starts_with("aws:///")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_replaces_the_nodes_of_an_aws_group_on_moto_end_to_end() {
    use cloud::metrics::CallCounts;
    use cloud::{CallPolicy, Governed};
    use controller::groups::CloudOptions;
    use dev::cluster::{Cluster, ClusterConfig};
    use dev::harness;
    use dev::observer::{Limits, Observer, Surge};
    use kube::ResourceExt;
    use shared::crd::{NodeRole, NodeVersion, PendingNode, ScalingGroup, ScalingGroupSpec};

    let Some(moto) = start_moto().await else { return };
    let setup = setup_config(&moto.url).await;
    create_group(&setup, "e2e-workers", UID, "worker", 2, 4).await;
    // One in-place worker besides the group's two instances, every host on the group's AMI.
    let config = ClusterConfig {
        nodes: 1,
        control_planes: 0,
        image: IMAGE.into(),
        workloads: None,
        ready_timeout: Duration::from_secs(120),
        ..ClusterConfig::default()
    };
    let cluster = Cluster::start(config).await.expect("the cluster starts");
    let store = cluster.store();
    let bridge = Bridge::start(&setup, &cluster, &[("e2e-workers", false)]).await;
    let donors: Vec<String> = aws_nodes(&cluster).iter().map(|n| n.name_any()).collect();
    assert_eq!(donors.len(), 2, "the group's instances joined as Nodes");
    let group = ScalingGroup::new(
        "e2e-workers",
        ScalingGroupSpec {
            node_image: "constellation-version".into(),
            group_id: "e2e-workers".into(),
            autoscaler_group_name: Some("e2e-workers".into()),
            node_group_name: Some("e2e-workers".into()),
            autoscaling: false,
            min: Some(0),
            max: Some(4),
            role: Some(NodeRole::Worker),
        },
    );
    store.api::<ScalingGroup>().create(None, &group, &Default::default()).unwrap();

    // The real controller with the AWS provider, through the fault proxy (which records its calls).
    let proxy = FaultProxy::start(&moto.url).await;
    let aws = AwsProvider::new(&sdk_config(&proxy.url).await);
    let governed = Governed::new(aws.clone(), CallPolicy::default(), Arc::new(CallCounts::default()));
    let mut options = harness::controller_options("c1");
    options.cloud = Some(CloudOptions::new(Arc::new(governed)).with_external_etcd());
    let limits = Limits { surge: Some(Surge { baseline: 2, max_surge: 1 }), ..Limits::new(1, false) };
    let observer = Observer::start(cluster.client(), limits);
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let controller = harness::controller(cluster.operator(), options);
    support::create_version(&store, OTHER_IMAGE, serde_json::json!({"maxUnavailable": 1, "maxSurge": 1}));

    let rolled_out = || {
        let status = store.api::<NodeVersion>().get(None, "constellation-version").ok()?.status?;
        let pending = store.api::<PendingNode>().list(None, &Default::default()).ok()?.items;
        (status.target_image.as_deref() == Some(OTHER_IMAGE)
            && status.counts.total == 3
            && status.counts.up_to_date == 3
            && pending.is_empty())
        .then_some(status)
    };
    let status = support::eventually(Duration::from_secs(240), "the rollout to finish", rolled_out).await;
    assert_eq!(status.counts.failed + status.counts.blocked, 0);
    let heirs = aws_nodes(&cluster);
    assert_eq!(heirs.len(), 2, "one new node per replaced one");
    for heir in &heirs {
        assert!(!donors.contains(&heir.name_any()), "{} was not replaced", heir.name_any());
        let id: ProviderId = heir.spec.as_ref().and_then(|s| s.provider_id.clone()).unwrap().parse().unwrap();
        assert_eq!(aws.instance_image(&id).await.unwrap(), OTHER_IMAGE, "the heir runs the new AMI");
        assert_eq!(aws.instance_group(&id).await.unwrap(), GroupId::from("e2e-workers"));
    }
    assert_eq!(aws.group_image(&GroupId::from("e2e-workers")).await.unwrap(), OTHER_IMAGE);
    let sized = aws_sdk_autoscaling::Client::new(&setup)
        .describe_auto_scaling_groups()
        .auto_scaling_group_names("e2e-workers")
        .send()
        .await
        .unwrap();
    let desired = sized.auto_scaling_groups().first().and_then(|g| g.desired_capacity());
    assert_eq!(desired, Some(2), "the surge instances were given back");
    let made = proxy.calls();
    for call in ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"] {
        assert!(made.contains(call), "{call} was not made: {made:?}");
    }
    let heir_names: Vec<String> = heirs.iter().map(|n| n.name_any()).collect();
    assert_eq!(observer.stop().await.violations, Vec::<String>::new(), "donors {donors:?}, heirs {heir_names:?}");
    controller.stop(Duration::from_secs(15)).await.unwrap();
    support::stop_all(agents).await;
    drop(bridge);
    cluster.shutdown().await;
}
