//! The Azure provider against the Azure emulator over HTTPS, authenticated by workload identity: the conformance
//! suite, the error paths, the seed ScalingGroup, the README's role against the recorded calls, and one
//! replacement rollout end to end whose VMs join the dev cluster as Nodes.

use crate::support;

use async_trait::async_trait;
use cloud::azure::{AzureConfig, AzureProvider, Credential};
use cloud::conformance::{self, Faults, Fixture};
use cloud::metrics::CallCounts;
use cloud::{
    AwsInstance, CallPolicy, CloudProvider, ClusterTag, Creation, Deletion, Error, Governed, GroupId, GroupRole,
    ImageUpdate, InstanceState, ProviderId,
};
use controller::groups::CloudOptions;
use dev::cloud::azure::{AzureEmulator, AzureFaults, ScaleSetSpec, actions};
use dev::cluster::{Cluster, ClusterConfig};
use dev::harness;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use serde_json::json;
use shared::crd::{NodeVersion, PendingNode, ScalingGroup};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use support::{create_version, stop_all};

/// Generous: a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(120);
const V1: &str = "/subscriptions/0d202bbb-4fa7-4af8-8125-58c269a05435/resourceGroups/CONSTELLATION-IMAGES/providers/Microsoft.Compute/galleries/Constellation/images/constellation/versions/1.0.0";
const V2: &str = "/CommunityGalleries/constellation-cvm-1234/Images/constellation/Versions/2.0.0";

/// A dev cluster (one in-place worker unless `nodes` says otherwise), an emulator with `scale_sets` serving on
/// a loopback port, and the token file of the workload identity.
pub(crate) struct Azure {
    pub(crate) cluster: Cluster,
    pub(crate) emulator: AzureEmulator,
    endpoint: dev::cloud::azure::Endpoint,
    token_file: tempfile::NamedTempFile,
}

impl Azure {
    pub(crate) async fn start(nodes: usize, scale_sets: &[(&str, GroupRole, u32)]) -> Azure {
        Azure::start_timed(nodes, scale_sets, ClusterConfig::default().timing).await
    }

    /// As [`Azure::start`], with the cluster's (and so the emulator's) durations.
    pub(crate) async fn start_timed(
        nodes: usize,
        scale_sets: &[(&str, GroupRole, u32)],
        timing: dev::timing::Timing,
    ) -> Azure {
        let config = ClusterConfig {
            nodes,
            control_planes: 0,
            workloads: None,
            ready_timeout: PATIENCE,
            timing,
            ..ClusterConfig::default()
        };
        let timing = config.timing.clone();
        let cluster = Cluster::start(config).await.expect("the cluster starts");
        let uid = cluster.cloud().cluster_tag().value.clone();
        let emulator = AzureEmulator::new(&cluster.store(), cluster.hosts(), &timing, &uid);
        for (name, role, size) in scale_sets {
            let spec = ScaleSetSpec { name: (*name).into(), role: *role, size: *size, max: size + 3, image: V1.into() };
            emulator.add_scale_set(&spec).expect("the scale set is added");
        }
        let endpoint = emulator.serve().await.expect("the emulator serves");
        let token_file = tempfile::NamedTempFile::new().expect("a temporary file");
        std::fs::write(token_file.path(), dev::cloud::azure::FEDERATED_TOKEN).expect("the token file is written");
        Azure { cluster, emulator, endpoint, token_file }
    }

    fn config(&self) -> AzureConfig {
        AzureConfig {
            credential: Credential::WorkloadIdentity {
                tenant_id: dev::cloud::azure::TENANT_ID.into(),
                client_id: dev::cloud::azure::CLIENT_ID.into(),
                token_file: self.token_file.path().to_owned(),
            },
            arm_endpoint: Some(self.endpoint.url.clone()),
            authority_host: Some(self.endpoint.url.clone()),
            extra_ca_pem: Some(self.endpoint.ca_pem.clone().into_bytes()),
            ..AzureConfig::new(dev::cloud::azure::SUBSCRIPTION_ID, dev::cloud::azure::RESOURCE_GROUP)
        }
    }

    pub(crate) fn provider(&self) -> AzureProvider {
        AzureProvider::new(self.config()).expect("the provider is configured")
    }

    fn tag(&self) -> ClusterTag {
        self.cluster.cloud().cluster_tag().clone()
    }

    pub(crate) async fn shutdown(self) {
        self.emulator.shutdown();
        self.cluster.shutdown().await;
    }
}

pub(crate) fn group(name: &str) -> GroupId {
    GroupId(AzureEmulator::scale_set_id(name))
}

struct EmulatorFaults(AzureEmulator);

#[async_trait]
impl Faults for EmulatorFaults {
    async fn throttle_next_call(&self, retry_after: Duration) {
        let seconds = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        self.0.set_faults(AzureFaults { throttle: Some((1, seconds)), ..AzureFaults::default() });
    }

    async fn quota_on_next_create(&self, _group: &GroupId) {
        self.0.set_faults(AzureFaults { quota: Some(1), ..AzureFaults::default() });
    }

    async fn clear(&self) {
        self.0.set_faults(AzureFaults::default());
    }
}

/// Calls `set_group_image` until it is `Applied`.
async fn wait_applied(provider: &AzureProvider, group: &GroupId, image: &str) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while provider.set_group_image(group, image).await.unwrap() != ImageUpdate::Applied {
        assert!(tokio::time::Instant::now() < deadline, "the image change to {image} never finished");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The role actions the README lists for Azure (the `"actions"` of its JSON role definition).
fn readme_actions() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).expect("README.md");
    let section = readme.split("\n### Azure").nth(1).expect("README has a ### Azure section");
    let block = section.split("```json").nth(1).and_then(|b| b.split("```").next()).expect("a json block");
    let role: serde_json::Value = serde_json::from_str(block).expect("the role definition is JSON");
    role["actions"]
        .as_array()
        .expect("an actions list")
        .iter()
        .map(|a| a.as_str().expect("a string").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_azure_provider_passes_the_conformance_suite_and_needs_exactly_the_readme_role() {
    let azure = Azure::start(1, &[("conf", GroupRole::Worker, 1), ("conf-cp", GroupRole::ControlPlane, 1)]).await;
    for (name, role) in [("conf", GroupRole::Worker), ("conf-cp", GroupRole::ControlPlane)] {
        let factory = || async {
            // A fresh client per check: no check may rely on state in the client.
            Fixture {
                provider: Arc::new(azure.provider()),
                group: group(name),
                role,
                cluster: azure.tag(),
                unknown_group: group("no-such-set"),
                unknown_instance: AzureEmulator::provider_id(name, 999),
                foreign_instance: ProviderId::Aws(AwsInstance {
                    zone: "us-east-1a".into(),
                    instance_id: "i-0123456789abcdef0".into(),
                }),
                other_image: V2.into(),
                faults: Some(Arc::new(EmulatorFaults(azure.emulator.clone()))),
                poll: Duration::from_millis(50),
                deadline: PATIENCE,
            }
        };
        let report = conformance::run(factory).await;
        report.assert_passed();
        assert_eq!(report.passed().len(), report.checks.len(), "{name}: no check may be skipped: {report:?}");
    }
    // A slow image change (the suite's are immediate): its Azure-AsyncOperation is followed until it succeeds.
    azure.emulator.set_faults(AzureFaults { slow_operations: Some(Duration::from_secs(1)), ..AzureFaults::default() });
    let provider = azure.provider();
    for image in [V2, V1] {
        assert_eq!(provider.set_group_image(&group("conf"), image).await.unwrap(), ImageUpdate::InProgress);
        wait_applied(&provider, &group("conf"), image).await;
    }
    azure.emulator.set_faults(AzureFaults::default());
    // Every call the provider makes was made, and the README's role is exactly what they needed.
    let recorded: BTreeSet<String> = azure.emulator.actions().into_iter().map(str::to_owned).collect();
    assert_eq!(recorded, readme_actions(), "the README's role vs the recorded calls");
    // Every request passed the published definition (a refused one fails a check above) and every answer fits it.
    assert_eq!(azure.emulator.spec_violations(), Vec::<String>::new());
    azure.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arm_errors_throttling_quota_server_errors_and_permissions_are_typed() {
    let azure = Azure::start(1, &[("errs", GroupRole::Worker, 1)]).await;
    let provider = azure.provider();
    let errs = group("errs");

    // Unknown scale set and resource group.
    assert!(matches!(provider.group_image(&group("nope")).await, Err(Error::NotFound { .. })));
    let elsewhere = GroupId(AzureEmulator::scale_set_id("errs").replace("constellation-rg", "other-rg"));
    assert!(matches!(provider.group_image(&elsewhere).await, Err(Error::NotFound { .. })));
    assert!(matches!(provider.create_instance(&GroupId::from("errs")).await, Err(Error::Invalid { .. })));
    assert!(matches!(provider.set_group_image(&errs, "ami-0123").await, Err(Error::Invalid { .. })));

    // Throttling with Retry-After, then through Governed.
    azure.emulator.set_faults(AzureFaults { throttle: Some((1, 3)), ..AzureFaults::default() });
    match provider.group_image(&errs).await {
        Err(Error::Throttled { retry_after, .. }) => assert_eq!(retry_after, Some(Duration::from_secs(3))),
        other => panic!("expected Throttled, got {other:?}"),
    }
    assert_eq!(provider.group_image(&errs).await.unwrap(), V1, "the fault fired once");

    // Server errors are transient; Governed retries them for an idempotent call.
    azure.emulator.set_faults(AzureFaults { server_errors: Some(2), ..AzureFaults::default() });
    assert!(matches!(
        provider.instance_state(&AzureEmulator::provider_id("errs", 0)).await,
        Err(Error::Transient { .. })
    ));
    let counts = Arc::new(CallCounts::default());
    let governed = Governed::new(azure.provider(), CallPolicy::default(), counts.clone());
    assert_eq!(governed.instance_state(&AzureEmulator::provider_id("errs", 0)).await.unwrap(), InstanceState::Ready);

    // A cores quota refuses the capacity increase: nothing is created.
    azure.emulator.set_faults(AzureFaults { quota: Some(1), ..AzureFaults::default() });
    assert!(matches!(provider.create_instance(&errs).await, Err(Error::QuotaExceeded { .. })));
    assert_eq!(azure.emulator.instance_ids("errs"), vec![0]);

    // A role without the write action.
    azure.emulator.deny(actions::SCALE_SET_WRITE);
    match provider.set_group_image(&errs, V2).await {
        Err(Error::PermissionDenied { message }) => assert!(message.contains("AuthorizationFailed"), "{message}"),
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    azure.emulator.allow_all();

    // A slow image change is InProgress until its operation succeeds, and then Applied.
    azure.emulator.set_faults(AzureFaults { slow_operations: Some(Duration::from_secs(2)), ..AzureFaults::default() });
    assert_eq!(provider.set_group_image(&errs, V2).await.unwrap(), ImageUpdate::InProgress);
    assert_eq!(provider.set_group_image(&errs, V2).await.unwrap(), ImageUpdate::InProgress);
    wait_applied(&provider, &errs, V2).await;
    assert_eq!(azure.emulator.model_image("errs").as_deref(), Some(V2));
    assert!(azure.emulator.actions().contains(actions::OPERATION_READ), "the operation was followed");
    azure.emulator.set_faults(AzureFaults::default());

    // A VM of another scale set is refused; a gone one is AlreadyGone.
    assert!(matches!(
        provider.delete_instance(&errs, &AzureEmulator::provider_id("other", 0)).await,
        Err(Error::Invalid { .. })
    ));
    assert_eq!(
        provider.delete_instance(&errs, &AzureEmulator::provider_id("errs", 77)).await.unwrap(),
        Deletion::AlreadyGone
    );

    // A federated token the tenant does not know: no ARM call is made.
    std::fs::write(azure.token_file.path(), "not-the-token").unwrap();
    let stranger = azure.provider();
    match stranger.group_image(&errs).await {
        Err(Error::PermissionDenied { message }) => assert!(message.contains("token"), "{message}"),
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    azure.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_scaling_group_with_a_scale_set_id_is_accepted_and_resolved() {
    let azure = Azure::start(1, &[("workers", GroupRole::Worker, 1)]).await;
    let provider = azure.provider();
    for seed in ["000-scalinggroup-azure.yaml", "001-scalinggroup-azure.yaml"] {
        let path = format!("{}/tests/fixtures/seed/{seed}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("<subscription-id>", dev::cloud::azure::SUBSCRIPTION_ID)
            .replace("<resource-group>", dev::cloud::azure::RESOURCE_GROUP)
            .replace("<scale-set-name>", "workers");
        let object: ScalingGroup = yaml_serde::from_str(&text).unwrap();
        let created = azure
            .cluster
            .store()
            .api::<ScalingGroup>()
            .create(None, &object, &Default::default())
            .expect("the API server accepts the seed");
        let id = GroupId(created.spec.group_id.clone());
        assert_eq!(provider.group_image(&id).await.unwrap(), V1, "{seed}");
        assert_eq!(provider.autoscaler_group_name(&id).unwrap(), "workers");
        let listed = provider.list_groups(&azure.tag()).await.unwrap();
        assert!(listed.iter().any(|g| g.id.as_str().eq_ignore_ascii_case(id.as_str())), "{listed:?}");
        azure.cluster.store().api::<ScalingGroup>().delete(None, "scalinggroup-worker", &Default::default()).unwrap();
    }
    azure.shutdown().await;
}

fn nodes(cluster: &Cluster) -> Vec<Node> {
    cluster.store().api::<Node>().list(None, &Default::default()).unwrap().items
}

fn is_azure(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|id| id.starts_with("azure:///"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_rollout_replaces_scale_set_vms_through_the_azure_provider() {
    let azure = Azure::start(1, &[("cp", GroupRole::ControlPlane, 1), ("workers", GroupRole::Worker, 2)]).await;
    let store = azure.cluster.store();
    for (name, role) in [("cp", shared::crd::NodeRole::ControlPlane), ("workers", shared::crd::NodeRole::Worker)] {
        let object: ScalingGroup = serde_json::from_value(json!({
            "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "ScalingGroup",
            "metadata": {"name": name},
            "spec": {"nodeImage": "constellation-version", "groupId": AzureEmulator::scale_set_id(name),
                "autoscalerGroupName": name, "nodeGroupName": name, "role": role,
                "autoscaling": role == shared::crd::NodeRole::Worker, "min": 0, "max": 5}
        }))
        .unwrap();
        store.api::<ScalingGroup>().create(None, &object, &Default::default()).unwrap();
    }
    let before: Vec<String> = nodes(&azure.cluster).iter().filter(|n| is_azure(n)).map(|n| n.name_any()).collect();
    assert_eq!(before.len(), 3, "{before:?}");

    let counts = Arc::new(CallCounts::default());
    let provider = Governed::new(azure.provider(), CallPolicy::default(), counts.clone());
    let mut options = harness::controller_options("c1");
    options.cloud = Some(CloudOptions::new(Arc::new(provider)).with_external_etcd());
    let controller = harness::controller(azure.cluster.operator(), options);
    let agent = harness::agent(azure.cluster.operator(), "worker-0");
    let requests_before = azure.emulator.calls().len();
    create_version(&store, V2, json!({"maxUnavailable": 1, "maxSurge": 1}));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let version = store.api::<NodeVersion>().get(None, "constellation-version").ok();
        let status = version.and_then(|v| v.status);
        let pending = store.api::<PendingNode>().list(None, &Default::default()).unwrap().items;
        let done = status
            .as_ref()
            .is_some_and(|s| s.target_image.as_deref() == Some(V2) && s.counts.total == 4 && s.counts.up_to_date == 4)
            && pending.is_empty();
        if done {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the rollout did not finish: {status:?} {pending:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after: Vec<Node> = nodes(&azure.cluster).into_iter().filter(is_azure).collect();
    assert_eq!(after.len(), 3, "one new VM per replaced one");
    for node in &after {
        assert!(!before.contains(&node.name_any()), "{} was not replaced", node.name_any());
    }
    assert_eq!(azure.emulator.model_image("workers").as_deref(), Some(V2));
    assert_eq!(azure.emulator.model_image("cp").as_deref(), Some(V2));
    assert_eq!(azure.emulator.instance_ids("workers"), vec![2, 3], "VMs 0 and 1 were deleted from the scale set");
    // The cost of the replacement (issue 28): provider calls and ARM requests per replaced VM.
    let by_operation: Vec<String> = cloud::Operation::ALL
        .iter()
        .filter(|op| counts.of(**op) > 0)
        .map(|op| format!("{op} {}", counts.of(*op)))
        .collect();
    let requests = azure.emulator.calls().len() - requests_before;
    eprintln!(
        "azure replacement: {} cloud calls for 3 replaced VMs ({:.2} per VM; {}), {requests} ARM requests ({:.2} per VM)",
        counts.total(),
        counts.total() as f64 / 3.0,
        by_operation.join(", "),
        requests as f64 / 3.0
    );
    stop_all(vec![controller, agent]).await;
    azure.shutdown().await;
}

/// A seed file of the Constellation README with its `<placeholders>` filled in for the emulated subscription,
/// as a user fills them in for theirs; nothing else is changed.
fn seed<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = format!("{}/tests/fixtures/seed/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("<subscription-id>", dev::cloud::azure::SUBSCRIPTION_ID)
        .replace("<resource-group>", dev::cloud::azure::RESOURCE_GROUP)
        .replace("<scale-set-name>", "workers")
        .replace("<image-definition-name>", "constellation")
        .replace("<image-version>", "2.0.0")
        // The seed PendingNode names a VM that never joins: one the scale set does not have.
        .replace("<instance-id>", "17")
        .replace("<kubernetes-node-name>", "workers-never-joined");
    assert!(!text.contains('<'), "a placeholder of {file} is left: {text}");
    yaml_serde::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_yaml_with_its_placeholders_filled_in_drives_a_replacement() {
    let azure = Azure::start(1, &[("workers", GroupRole::Worker, 2)]).await;
    let store = azure.cluster.store();
    let deployments = store.api::<k8s_openapi::api::apps::v1::Deployment>();
    deployments.create(Some("kube-system"), &support::cluster_autoscaler(2, &[]), &Default::default()).unwrap();
    let strategy: shared::crd::AutoscalingStrategy = seed("000-autoscalingstrategy.yaml");
    store.api::<shared::crd::AutoscalingStrategy>().create(None, &strategy, &Default::default()).unwrap();
    let group: ScalingGroup = seed("000-scalinggroup-azure.yaml");
    store.api::<ScalingGroup>().create(None, &group, &Default::default()).unwrap();
    let pending: PendingNode = seed("000-pendingnode-azure.yaml");
    store.api::<PendingNode>().create(None, &pending, &Default::default()).unwrap();
    let before: Vec<String> = nodes(&azure.cluster).iter().filter(|n| is_azure(n)).map(|n| n.name_any()).collect();
    assert_eq!(before.len(), 2, "{before:?}");

    let provider = Governed::new(azure.provider(), CallPolicy::default(), Arc::new(CallCounts::default()));
    let mut options = harness::controller_options("c1");
    options.cloud = Some(CloudOptions::new(Arc::new(provider)).with_external_etcd());
    let controller = harness::controller(azure.cluster.operator(), options);
    let agent = harness::agent(azure.cluster.operator(), "worker-0");
    let version: NodeVersion = seed("000-nodeversion-azure.yaml");
    let target = version.spec.image.clone();
    store.api::<NodeVersion>().create(None, &version, &Default::default()).unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let status = store.api::<NodeVersion>().get(None, "constellation-version").ok().and_then(|v| v.status);
        let pending = store.api::<PendingNode>().list(None, &Default::default()).unwrap().items;
        let done = status.as_ref().is_some_and(|s| {
            s.target_image.as_deref() == Some(target.as_str()) && s.counts.total == 3 && s.counts.up_to_date == 3
        }) && pending.is_empty();
        if done {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the rollout did not finish: {status:?} {pending:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after: Vec<Node> = nodes(&azure.cluster).into_iter().filter(is_azure).collect();
    assert_eq!(after.len(), 2, "one new VM per replaced one");
    for node in &after {
        assert!(!before.contains(&node.name_any()), "{} was not replaced", node.name_any());
    }
    assert_eq!(azure.emulator.model_image("workers").as_deref(), Some(target.as_str()));
    let group = store.api::<ScalingGroup>().get(None, "scalinggroup-worker").unwrap();
    assert_eq!(group.status.and_then(|s| s.image_reference).as_deref(), Some(target.as_str()));
    // The autoscaler was paused for the rollout and has its replicas back.
    support::eventually(PATIENCE, "the autoscaler restored", || {
        let replicas = deployments.get(Some("kube-system"), "cluster-autoscaler").ok()?.spec?.replicas;
        (replicas == Some(2)).then_some(())
    })
    .await;
    stop_all(vec![controller, agent]).await;
    azure.shutdown().await;
}

/// `plan`'s read of the cloud (`Snapshot::ask_cloud`, which `update-operator plan --cloud-provider azure` runs with
/// this provider, rate-limited and retried): the scale set VMs are forecast as replacements with the image the
/// cloud told, and the only calls made are GETs of VMs, the one action docs/plan.md lists for Azure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_asks_the_azure_provider_only_its_vms_and_forecasts_their_replacement() {
    use controller::forecast::report::{Flags, Report};
    use controller::forecast::snapshot::Snapshot;
    let azure = Azure::start(0, &[("workers", GroupRole::Worker, 2)]).await;
    let object: ScalingGroup = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "ScalingGroup", "metadata": {"name": "workers"},
        "spec": {"nodeImage": "constellation-version", "groupId": AzureEmulator::scale_set_id("workers"),
            "autoscaling": false, "min": 0, "max": 5}
    }))
    .unwrap();
    azure.cluster.store().api::<ScalingGroup>().create(None, &object, &Default::default()).unwrap();
    let mut vms: Vec<String> = nodes(&azure.cluster).iter().filter(|n| is_azure(n)).map(|n| n.name_any()).collect();
    vms.sort();
    assert_eq!(vms.len(), 2, "{vms:?}");
    let version: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": "constellation-version"}, "spec": {"image": V2, "rollout": {"maxSurge": 1}}
    }))
    .unwrap();
    let forecast = |snapshot: Snapshot| {
        let report = Report::build(snapshot, Some(version.clone()), Flags::default(), None, jiff::Timestamp::now());
        let mut replaced: Vec<String> =
            report.rollouts[0].nodes.iter().filter(|n| n.replaced).map(|n| n.node.clone()).collect();
        replaced.sort();
        (replaced, report.assumptions.join("\n"))
    };

    // Without the cloud the scale set VMs' provider IDs name their group, but not their image (no agent runs there).
    let snapshot = Snapshot::read(&azure.cluster.client()).await.unwrap();
    let (replaced, said) = forecast(snapshot.clone());
    assert_eq!(replaced, vms);
    assert!(said.contains("taken as outdated"), "{said}");

    let mut asked = snapshot;
    let provider = Governed::new(azure.provider(), CallPolicy::default(), Arc::new(CallCounts::default()));
    asked.ask_cloud(&provider).await;
    let answers = asked.cloud.clone().unwrap_or_default();
    assert!(answers.values().all(|a| matches!(a, Ok(Some((_, image))) if image == V1)), "{answers:?}");
    let (replaced, said) = forecast(asked);
    assert_eq!(replaced, vms);
    assert!(said.contains("as the cloud told") && !said.contains("taken as outdated"), "{said}");
    let recorded: Vec<&str> = azure.emulator.actions().into_iter().collect();
    assert_eq!(recorded, ["Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read"]);
    azure.shutdown().await;
}

/// Issue 28 defect 3: ARM IDs are case-insensitive and list calls spell the resource group otherwise (here in upper
/// case) than cloud-provider-azure, which writes it in lower case into `spec.providerID`. The groups listed and the
/// instances created are spelt as the Nodes' provider IDs, so that a new VM's Node is found by its provider ID
/// (compared as a string where it cannot be parsed), whatever case the group ID was given in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_are_spelt_as_the_nodes_provider_ids_whatever_case_arm_lists_them_in() {
    let azure = Azure::start(0, &[("workers", GroupRole::Worker, 1)]).await;
    let provider = azure.provider();
    let listed = provider.list_groups(&azure.tag()).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, vec![AzureEmulator::scale_set_id("workers")], "as the Nodes spell their scale set");
    // A group ID in the list calls' spelling.
    let upper = GroupId(
        AzureEmulator::scale_set_id("workers")
            .replace(dev::cloud::azure::RESOURCE_GROUP, &dev::cloud::azure::RESOURCE_GROUP.to_ascii_uppercase()),
    );
    let Creation::Pending(token) = provider.create_instance(&upper).await.unwrap() else {
        panic!("Azure creations are pending")
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let created = loop {
        if let Some(created) = provider.created_instance(&upper, &token).await.unwrap() {
            break created;
        }
        assert!(tokio::time::Instant::now() < deadline, "the new VM was never named");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let spelt = created.provider_id.to_string();
    let store = azure.cluster.store();
    let node = support::eventually(PATIENCE, "the new VM's Node registered", || {
        store.api::<Node>().get_opt(None, &created.node_name).ok().flatten()
    })
    .await;
    assert_eq!(node.spec.and_then(|s| s.provider_id).as_deref(), Some(spelt.as_str()));
    azure.shutdown().await;
}

/// Issue 28 defect 4: a scale set with overprovisioning on, or an Automatic or Rolling upgrade policy, is refused
/// with a named error before anything is changed (no PATCH, no deletion); a 409 "conflict with a concurrent
/// request" (another operation in progress) is throttling, retried, not an invalid request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_sets_with_unsupported_settings_are_refused_and_conflicts_are_retried() {
    let azure = Azure::start(0, &[("workers", GroupRole::Worker, 1)]).await;
    let provider = azure.provider();
    let workers = group("workers");
    let writes = |emulator: &AzureEmulator| {
        emulator.calls().iter().filter(|c| c.method == "PATCH" || c.method == "POST").count()
    };
    for (overprovision, mode, named) in
        [(true, "Manual", "overprovision"), (false, "Automatic", "Automatic"), (false, "Rolling", "Rolling")]
    {
        assert!(azure.emulator.set_scale_set_settings("workers", overprovision, mode));
        for result in [
            provider.create_instance(&workers).await.map(drop),
            provider.set_group_image(&workers, V2).await.map(drop),
            provider.group_image(&workers).await.map(drop),
        ] {
            match result {
                Err(Error::Invalid { message }) => {
                    assert!(
                        message.contains(cloud::azure::UNSUPPORTED_SETTINGS) && message.contains(named),
                        "{message}"
                    )
                }
                other => panic!("expected the scale set refused, got {other:?}"),
            }
        }
        assert_eq!(writes(&azure.emulator), 0, "nothing was changed");
    }
    assert!(azure.emulator.set_scale_set_settings("workers", false, "Manual"));
    // Another operation in progress: throttling, and Governed rides it out.
    azure.emulator.set_faults(AzureFaults { conflicts: Some(1), ..AzureFaults::default() });
    assert!(matches!(provider.set_group_image(&workers, V2).await, Err(Error::Throttled { .. })));
    azure.emulator.set_faults(AzureFaults { conflicts: Some(2), ..AzureFaults::default() });
    let governed = Governed::new(provider, CallPolicy::default(), Arc::new(CallCounts::default()));
    assert!(matches!(governed.create_instance(&workers).await, Ok(Creation::Pending(_))));
    azure.shutdown().await;
}

/// Issue 28 defect 6: ARM pages its lists with `nextLink`; with pages of one resource the provider still lists
/// every scale set and finds a new VM on the last page of the scale set's VMs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_answered_in_pages_of_one_are_followed_to_the_end() {
    let azure = Azure::start(0, &[("cp", GroupRole::ControlPlane, 1), ("workers", GroupRole::Worker, 2)]).await;
    azure.emulator.set_page_size(Some(1));
    let provider = azure.provider();
    let listed = provider.list_groups(&azure.tag()).await.unwrap();
    let names: Vec<&str> = listed.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, vec!["cp", "workers"]);
    let lists = |emulator: &AzureEmulator, path_end: &str| {
        emulator.calls().iter().filter(|c| c.method == "GET" && c.path.ends_with(path_end)).count()
    };
    assert_eq!(lists(&azure.emulator, "/virtualMachineScaleSets"), 2, "two scale sets, one a page");
    let workers = group("workers");
    let Creation::Pending(token) = provider.create_instance(&workers).await.unwrap() else { panic!() };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let created = loop {
        if let Some(created) = provider.created_instance(&workers, &token).await.unwrap() {
            break created;
        }
        assert!(tokio::time::Instant::now() < deadline, "the new VM was never named");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(created.provider_id.instance(), "2", "the VM after the two there were, on the third page");
    assert!(lists(&azure.emulator, "/virtualMachines") >= 5, "the VM lists were read page by page (2 + 3 pages)");
    azure.shutdown().await;
}
