//! The GCP provider (`cloud::gcp`, Google's compute client) against the dev cluster's GCP emulator: the trait's
//! conformance suite, error paths, the seed examples' MIG paths, the README's IAM permissions against the recorded
//! calls, and one replacement rollout end to end with Nodes that carry `gce://` provider IDs.

use crate::support;

use async_trait::async_trait;
use cloud::conformance::{self, Faults, Fixture};
use cloud::gcp::credentials::user_account;
use cloud::gcp::{GcpConfig, GcpProvider};
use cloud::metrics::CallCounts;
use cloud::{CallPolicy, CloudProvider, ClusterTag, Error, Governed, GroupId, GroupRole, ProviderId};
use controller::groups::CloudOptions;
use dev::cloud::gcp::{GcpEmulator, GcpFault, GcpTiming};
use dev::cluster::{Cluster, ClusterConfig};
use dev::harness;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::PostParams;
use serde_json::json;
use shared::crd::{NodeVersion, PendingNode, ScalingGroup, ScalingGroupSpec};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

pub(crate) const PROJECT: &str = "constellation-test-4711";
pub(crate) const ZONE: &str = "europe-west3-b";
const UID: &str = "c1a2b3";
const IMAGE_V1: &str = "projects/constellation-images/global/images/constellation-v1";
const IMAGE_V2: &str = "projects/constellation-images/global/images/constellation-v2";

/// The rustls provider the binary installs (the compute client's reqwest is built without one).
fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A cluster with `nodes` in-place nodes on image v1 and an emulator with a control-plane MIG `cp` and a worker
/// MIG `workers` (templates labelled with the cluster's uid), each with `per_group` running instances.
pub(crate) async fn setup(nodes: usize, per_group: usize) -> (Cluster, GcpEmulator) {
    install_crypto();
    let config = ClusterConfig {
        nodes,
        control_planes: 0,
        workloads: None,
        image: IMAGE_V1.to_owned(),
        ready_timeout: Duration::from_secs(120),
        ..ClusterConfig::default()
    };
    let cluster = Cluster::start(config).await.expect("the cluster starts");
    let emulator = GcpEmulator::start(PROJECT, &cluster.store(), cluster.hosts(), GcpTiming::default())
        .await
        .expect("the emulator starts");
    emulator.add_template(
        "cp-template",
        IMAGE_V1,
        &[("constellation-uid", UID), ("constellation-role", "control-plane")],
    );
    emulator.add_template(
        "workers-template",
        IMAGE_V1,
        &[("constellation-uid", UID), ("constellation-role", "worker")],
    );
    emulator.add_template("other-template", IMAGE_V1, &[("constellation-uid", "another-cluster")]);
    emulator.add_mig(ZONE, "cp", "cp-template");
    emulator.add_mig(ZONE, "workers", "workers-template");
    emulator.add_mig(ZONE, "other", "other-template");
    for _ in 0..per_group {
        emulator.add_running_instance(ZONE, "cp").expect("a cp instance");
        emulator.add_running_instance(ZONE, "workers").expect("a worker instance");
    }
    (cluster, emulator)
}

/// The provider on the emulator, authenticated with an `authorized_user` ADC file whose token URI is the
/// emulator's (the ADC code path of a credentials file).
pub(crate) async fn provider(emulator: &GcpEmulator, adc: serde_json::Value) -> GcpProvider {
    let credentials = user_account::Builder::new(adc).build().expect("the ADC JSON is valid");
    let config = GcpConfig {
        project: PROJECT.to_owned(),
        endpoint: Some(emulator.url().to_owned()),
        credentials: Some(credentials),
    };
    GcpProvider::new(config).await.expect("the provider is built")
}

pub(crate) fn mig(name: &str) -> GroupId {
    GroupId(format!("projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/{name}"))
}

struct EmulatorFaults(GcpEmulator);

#[async_trait]
impl Faults for EmulatorFaults {
    async fn throttle_next_call(&self, retry_after: Duration) {
        // Retry-After is in whole seconds.
        self.0.inject(GcpFault::Throttled { retry_after_seconds: retry_after.as_secs_f64().ceil() as u64 }, 1);
    }
    async fn quota_on_next_create(&self, group: &GroupId) {
        let name = group.as_str().rsplit('/').next().unwrap_or_default();
        self.0.quota_on_next_create(name);
    }
    async fn clear(&self) {
        self.0.clear_faults();
    }
}

fn fixture(provider: Arc<dyn CloudProvider>, emulator: &GcpEmulator) -> Fixture {
    Fixture {
        provider,
        group: mig("workers"),
        role: GroupRole::Worker,
        cluster: ClusterTag { key: "constellation-uid".into(), value: UID.into() },
        unknown_group: mig("no-such-mig"),
        unknown_instance: format!("gce://{PROJECT}/{ZONE}/no-such-instance").parse().unwrap(),
        foreign_instance: "simulated://workers/workers-x7k2q".parse().unwrap(),
        other_image: IMAGE_V2.to_owned(),
        faults: Some(Arc::new(EmulatorFaults(emulator.clone()))),
        poll: Duration::from_millis(100),
        deadline: Duration::from_secs(60),
    }
}

/// The IAM permissions README.md lists under `### GCP`.
fn readme_permissions() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let section = readme.split("\n### GCP").nth(1).expect("README.md has a ### GCP section");
    let section = section.split("\n#").next().unwrap_or(section);
    let pattern = regex::Regex::new(r"`(compute\.[A-Za-z]+\.[A-Za-z]+)`").unwrap();
    pattern.captures_iter(section).map(|c| c[1].to_owned()).collect()
}

/// The conformance suite, then the README's permission list against what the suite's calls needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_passes_the_conformance_suite_and_the_readme_lists_exactly_the_permissions_it_needs() {
    let (cluster, emulator) = setup(0, 1).await;
    let provider: Arc<dyn CloudProvider> = Arc::new(provider(&emulator, emulator.adc_json()).await);
    let report = conformance::run(|| {
        let fixture = fixture(provider.clone(), &emulator);
        async move { fixture }
    })
    .await;
    report.assert_passed();
    assert!(report.checks.iter().all(|c| c.result.is_some()), "a check was skipped: {report:?}");

    // The suite switched the image to v2 and back: the operator's template for v2 is deleted once no instance
    // uses it (each call that finds the image in effect deletes at most one).
    let workers = mig("workers");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert_eq!(provider.set_group_image(&workers, IMAGE_V1).await.unwrap(), cloud::ImageUpdate::Applied);
        let ours: Vec<String> =
            emulator.template_names().into_iter().filter(|t| t.starts_with("workers-template-uo-")).collect();
        if ours.len() == 1 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "unused templates are left: {ours:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        emulator.template_names().contains(&"workers-template".to_owned()),
        "a template it did not make was deleted"
    );
    let in_use = emulator.mig_template(ZONE, "workers").unwrap();
    assert!(in_use.starts_with("workers-template-uo-"), "{in_use}");
    assert_eq!(provider.group_image(&workers).await.unwrap(), IMAGE_V1);
    // Instance images come from the boot disk.
    let name = emulator.instance_names(ZONE, "cp").pop().unwrap();
    let id: ProviderId = format!("gce://{PROJECT}/{ZONE}/{name}").parse().unwrap();
    assert_eq!(provider.instance_image(&id).await.unwrap(), IMAGE_V1);
    assert_eq!(provider.instance_group(&id).await.unwrap(), mig("cp"));

    let recorded: BTreeSet<String> = emulator.recorded_permissions();
    assert_eq!(readme_permissions(), recorded, "README.md ### GCP lists other permissions than the calls needed");
    // Every request passed the published definition (a refused one fails a check above) and every answer fits it.
    assert_eq!(emulator.spec_violations(), Vec::<String>::new());
    emulator.shutdown();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clusters_migs_are_listed_with_their_roles_and_autoscaler_names() {
    let (cluster, emulator) = setup(0, 0).await;
    let provider = provider(&emulator, emulator.adc_json()).await;
    let groups =
        provider.list_groups(&ClusterTag { key: "constellation-uid".into(), value: UID.into() }).await.unwrap();
    let listed: Vec<(String, GroupRole, String)> =
        groups.iter().map(|g| (g.id.to_string(), g.role, g.autoscaler_group_name.clone())).collect();
    let url = |name: &str| {
        format!("https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}/instanceGroups/{name}")
    };
    assert_eq!(
        listed,
        vec![(mig("cp").0, GroupRole::ControlPlane, url("cp")), (mig("workers").0, GroupRole::Worker, url("workers")),]
    );
    emulator.shutdown();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_errors_are_typed() {
    let (cluster, emulator) = setup(0, 1).await;
    let provider = provider(&emulator, emulator.adc_json()).await;
    let workers = mig("workers");

    // An unknown MIG.
    assert!(matches!(provider.group_image(&mig("nope")).await, Err(Error::NotFound { .. })));
    // 429 with Retry-After.
    emulator.inject(GcpFault::Throttled { retry_after_seconds: 3 }, 1);
    match provider.group_image(&workers).await {
        Err(Error::Throttled { retry_after: Some(after), .. }) => assert_eq!(after, Duration::from_secs(3)),
        other => panic!("expected Throttled with a retry-after, got {other:?}"),
    }
    // A quota refusal of a creation (an operation ending in QUOTA_EXCEEDED), not retried by Governed.
    emulator.quota_on_next_create("workers");
    let counts = Arc::new(CallCounts::default());
    let governed = Governed::new(Arc::new(provider), CallPolicy::default(), counts.clone());
    assert!(matches!(governed.create_instance(&workers).await, Err(Error::QuotaExceeded { .. })));
    assert_eq!(emulator.calls().get("instanceGroupManagers.createInstances"), Some(&1));
    // 5xx: transient, and Governed rides over two of them.
    emulator.inject(GcpFault::ServerError { status: 503 }, 1);
    let provider = provider_again(&emulator).await;
    assert!(matches!(provider.group_image(&workers).await, Err(Error::Transient { .. })));
    emulator.inject(GcpFault::ServerError { status: 500 }, 2);
    assert_eq!(governed.group_image(&workers).await.unwrap(), IMAGE_V1);
    // A missing permission.
    emulator.forbid("compute.instanceGroupManagers.get");
    match provider.group_image(&workers).await {
        Err(Error::PermissionDenied { message }) => {
            assert!(message.contains("compute.instanceGroupManagers.get"), "{message}")
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    emulator.clear_faults();
    // Credentials the token endpoint refuses: no Compute request is made, the call is denied.
    let mut adc = emulator.adc_json();
    adc["refresh_token"] = json!("revoked");
    let refused = self::provider(&emulator, adc).await;
    let before = emulator.calls().values().sum::<u64>();
    assert!(matches!(refused.group_image(&workers).await, Err(Error::PermissionDenied { .. })));
    assert_eq!(emulator.calls().values().sum::<u64>(), before);
    // A malformed group and an instance of another MIG.
    assert!(matches!(refused.group_image(&GroupId::from("workers")).await, Err(Error::Invalid { .. })));
    let cp = emulator.instance_names(ZONE, "cp").pop().unwrap();
    let id: ProviderId = format!("gce://{PROJECT}/{ZONE}/{cp}").parse().unwrap();
    assert!(matches!(provider.delete_instance(&workers, &id).await, Err(Error::Invalid { .. })));
    emulator.shutdown();
    cluster.shutdown().await;
}

pub(crate) async fn provider_again(emulator: &GcpEmulator) -> GcpProvider {
    provider(emulator, emulator.adc_json()).await
}

/// The seed READMEs' GCP ScalingGroup and PendingNode, with their placeholders filled in, are accepted by the dev
/// cluster and resolved by the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_examples_mig_paths_are_resolved() {
    let (cluster, emulator) = setup(0, 1).await;
    let provider = provider(&emulator, emulator.adc_json()).await;
    let instance = emulator.instance_names(ZONE, "workers").pop().unwrap();
    let fill = |text: String| {
        text.replace("<project-id>", PROJECT)
            .replace("<zone>", ZONE)
            .replace("<instance-group-name>", "workers")
            .replace("<instance-name>", &instance)
            .replace("<kubernetes-node-name>", &instance)
    };
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/seed");
    for seed in ["000", "001"] {
        let text = fill(std::fs::read_to_string(format!("{fixtures}/{seed}-scalinggroup-gcp.yaml")).unwrap());
        let mut group: ScalingGroup = yaml_serde::from_str(&text).unwrap();
        group.metadata.name = Some(format!("scalinggroup-worker-{seed}"));
        let created = cluster.store().api::<ScalingGroup>().create(None, &group, &PostParams::default()).unwrap();
        let id = GroupId(created.spec.group_id.clone());
        assert_eq!(provider.group_image(&id).await.unwrap(), IMAGE_V1, "seed {seed}");
        assert!(provider.autoscaler_group_name(&id).unwrap().ends_with("/instanceGroups/workers"));

        let text = fill(std::fs::read_to_string(format!("{fixtures}/{seed}-pendingnode-gcp.yaml")).unwrap());
        let mut pending: PendingNode = yaml_serde::from_str(&text).unwrap();
        pending.metadata.name = Some(format!("pendingnode-{seed}"));
        let created = cluster.store().api::<PendingNode>().create(None, &pending, &PostParams::default()).unwrap();
        let provider_id: ProviderId = created.spec.provider_id.parse().unwrap();
        assert_eq!(provider.instance_group(&provider_id).await.unwrap().0, created.spec.group_id, "seed {seed}");
    }
    emulator.shutdown();
    cluster.shutdown().await;
}

/// One in-place worker and a worker MIG of 2 roll to v2: the MIG's nodes are replaced by new instances that join
/// as Nodes with `gce://` provider IDs, the old ones leave, the in-place node is updated by its agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_rollout_replaces_the_migs_nodes_with_new_gce_instances() {
    let (cluster, emulator) = setup(1, 0).await;
    emulator.add_running_instance(ZONE, "workers").unwrap();
    emulator.add_running_instance(ZONE, "workers").unwrap();
    let store = cluster.store();
    let group = ScalingGroup::new(
        "workers",
        ScalingGroupSpec {
            node_image: "constellation-version".to_owned(),
            group_id: mig("workers").0,
            autoscaler_group_name: Some(format!(
                "https://www.googleapis.com/compute/v1/projects/{PROJECT}/zones/{ZONE}/instanceGroups/workers"
            )),
            node_group_name: Some("workers".to_owned()),
            autoscaling: false,
            min: Some(0),
            max: Some(5),
            role: Some(shared::crd::NodeRole::Worker),
        },
    );
    store.api::<ScalingGroup>().create(None, &group, &PostParams::default()).unwrap();
    cluster.wait_ready(Duration::from_secs(120)).await.unwrap();
    let before: Vec<String> = gce_nodes(&cluster);
    assert_eq!(before.len(), 2, "{before:?}");

    let provider = provider(&emulator, emulator.adc_json()).await;
    let counts = Arc::new(CallCounts::default());
    let governed = Governed::new(provider, CallPolicy::default(), counts.clone());
    let mut options = harness::controller_options("c1");
    options.cloud = Some(CloudOptions::new(Arc::new(governed)).with_external_etcd());
    let controller = harness::controller(cluster.operator(), options);
    let agent = harness::agent(cluster.operator(), "worker-0");
    let requests = |emulator: &GcpEmulator| emulator.calls().values().sum::<u64>();
    let requests_before = requests(&emulator);
    support::create_version(&store, IMAGE_V2, json!({"maxUnavailable": 1, "maxSurge": 1}));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let version = store.api::<NodeVersion>().get(None, "constellation-version").ok();
        let status = version.and_then(|v| v.status);
        let pending = store.api::<PendingNode>().list(None, &Default::default()).unwrap().items;
        let done = status.as_ref().is_some_and(|s| {
            s.target_image.as_deref() == Some(IMAGE_V2) && s.counts.total == 3 && s.counts.up_to_date == 3
        }) && pending.is_empty();
        if done {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rollout did not finish: {status:?}\nnodes {:?}\npending {pending:?}",
            gce_nodes(&cluster)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = gce_nodes(&cluster);
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.iter().all(|n| !before.contains(n)), "not replaced: {before:?} -> {after:?}");
    for name in &after {
        let id: ProviderId = format!("gce://{PROJECT}/{ZONE}/{name}").parse().unwrap();
        let node = store.api::<Node>().get(None, name).unwrap();
        assert_eq!(node.spec.and_then(|s| s.provider_id), Some(id.to_string()));
    }
    assert!(emulator.mig_template(ZONE, "workers").unwrap().starts_with("workers-template-uo-"));
    assert_eq!(cluster.hosts().facts("worker-0").unwrap().os_image, IMAGE_V2);
    // The cost of the replacement (issue 28): provider calls and Compute requests per replaced instance.
    let by_operation: Vec<String> = cloud::Operation::ALL
        .iter()
        .filter(|op| counts.of(**op) > 0)
        .map(|op| format!("{op} {}", counts.of(*op)))
        .collect();
    let made = requests(&emulator) - requests_before;
    eprintln!(
        "gcp replacement: {} cloud calls for 2 replaced instances ({:.2} per instance; {}), {made} Compute requests ({:.2} per instance)",
        counts.total(),
        counts.total() as f64 / 2.0,
        by_operation.join(", "),
        made as f64 / 2.0
    );
    controller.stop(Duration::from_secs(15)).await.unwrap();
    agent.stop(Duration::from_secs(15)).await.unwrap();
    emulator.shutdown();
    cluster.shutdown().await;
}

/// The names of the Nodes with `gce://` provider IDs.
fn gce_nodes(cluster: &Cluster) -> Vec<String> {
    let nodes = cluster.store().api::<Node>().list(None, &Default::default()).unwrap().items;
    let mut names: Vec<String> = nodes
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|p| p.starts_with("gce://")))
        .map(|n| n.name_any())
        .collect();
    names.sort();
    names
}

/// Slow operations: the image change answers `InProgress` while its operations run, looking at each once per call
/// (`get`, never `wait`), and is `Applied` once they are done. The credentials here come from the metadata
/// server's token endpoint (GKE workload identity's path).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_image_change_is_in_progress_until_its_operations_are_done_without_waiting_inside_a_call() {
    let (cluster, emulator) = setup(0, 0).await;
    emulator.set_timing(GcpTiming { operation: Duration::from_secs(5), ..GcpTiming::default() });
    let credentials = cloud::gcp::credentials::mds::Builder::default()
        .with_endpoint(emulator.url())
        .build()
        .expect("metadata-server credentials");
    let config = GcpConfig {
        project: PROJECT.to_owned(),
        endpoint: Some(emulator.url().to_owned()),
        credentials: Some(credentials),
    };
    let provider = GcpProvider::new(config).await.unwrap();
    let workers = mig("workers");
    let started = tokio::time::Instant::now();
    let first = provider.set_group_image(&workers, IMAGE_V2).await.unwrap();
    assert_eq!(first, cloud::ImageUpdate::InProgress);
    assert!(started.elapsed() < Duration::from_secs(5), "the call waited for its operation");
    let mut calls = 1;
    loop {
        let call = tokio::time::Instant::now();
        let update = provider.set_group_image(&workers, IMAGE_V2).await.unwrap();
        assert!(call.elapsed() < Duration::from_secs(5), "a call waited for an operation");
        calls += 1;
        if update == cloud::ImageUpdate::Applied {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "not applied after {calls} calls");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Two operations of 5 s each (insert, then setInstanceTemplate) lie behind it.
    assert!(started.elapsed() >= Duration::from_secs(10), "applied before its operations were done");
    assert_eq!(provider.group_image(&workers).await.unwrap(), IMAGE_V2);
    let recorded = emulator.calls();
    assert!(recorded.get("globalOperations.get").copied().unwrap_or(0) >= 1, "{recorded:?}");
    assert!(recorded.get("zoneOperations.get").copied().unwrap_or(0) >= 1, "{recorded:?}");
    assert!(!recorded.keys().any(|m| m.ends_with(".wait")), "{recorded:?}");
    assert_eq!(recorded.get("instanceTemplates.insert"), Some(&1), "{recorded:?}");
    assert_eq!(recorded.get("instanceGroupManagers.setInstanceTemplate"), Some(&1), "{recorded:?}");
    emulator.shutdown();
    cluster.shutdown().await;
}

/// Issue 28 defect 1: a MIG creates an instance after `createInstances` returns. Until then the provider reports
/// it `Creating` (not `Terminated`, which made the PendingNode give it up at once), the MIG's per-instance errors
/// (`lastAttempt.errors`) surface as typed errors, also to a provider that did not create it (a restarted
/// controller), and deleting it before it exists still takes it back from the MIG (`deleteInstances`), so that no
/// instance appears later as an orphan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_the_mig_has_not_created_yet_is_creating_its_errors_surface_and_its_deletion_reaches_the_mig() {
    let (cluster, emulator) = setup(0, 0).await;
    emulator.set_timing(GcpTiming { create: Duration::from_millis(800), ..GcpTiming::default() });
    let provider = provider(&emulator, emulator.adc_json()).await;
    let workers = mig("workers");
    emulator.fail_creations("workers", "QUOTA_EXCEEDED", "Quota 'CPUS' exceeded.  Limit: 24.0 in region europe-west3.");
    let cloud::Creation::Created(created) = provider.create_instance(&workers).await.unwrap() else {
        panic!("GCP names its instances")
    };
    let id = created.provider_id;
    // Right after the request: the instance does not exist, the MIG lists it.
    assert_eq!(emulator.instance_names(ZONE, "workers"), Vec::<String>::new());
    assert_eq!(emulator.creating_names(ZONE, "workers"), vec![created.node_name.clone()]);
    assert_eq!(provider.instance_state(&id).await.unwrap(), cloud::InstanceState::Creating);
    // After the MIG's first failed attempt: its error, to this provider and to a new one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    match provider.instance_state(&id).await {
        Err(Error::QuotaExceeded { message }) => assert!(message.contains("QUOTA_EXCEEDED"), "{message}"),
        other => panic!("expected the MIG's quota error, got {other:?}"),
    }
    let restarted = provider_again(&emulator).await;
    assert!(matches!(restarted.instance_state(&id).await, Err(Error::QuotaExceeded { .. })));
    // Deleting it reaches the MIG: it is taken back and never created.
    assert_eq!(restarted.delete_instance(&workers, &id).await.unwrap(), cloud::Deletion::Started);
    assert_eq!(emulator.calls().get("instanceGroupManagers.deleteInstances"), Some(&1));
    assert_eq!(emulator.creating_names(ZONE, "workers"), Vec::<String>::new());
    emulator.clear_faults();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(emulator.instance_names(ZONE, "workers"), Vec::<String>::new());
    assert_eq!(restarted.instance_state(&id).await.unwrap(), cloud::InstanceState::Terminated);
    assert_eq!(restarted.delete_instance(&workers, &id).await.unwrap(), cloud::Deletion::AlreadyGone);
    // Without faults the MIG creates the next one: Creating, then Ready.
    let cloud::Creation::Created(next) = provider.create_instance(&workers).await.unwrap() else { panic!() };
    assert_eq!(restarted.instance_state(&next.provider_id).await.unwrap(), cloud::InstanceState::Creating);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match restarted.instance_state(&next.provider_id).await.unwrap() {
            cloud::InstanceState::Ready => break,
            cloud::InstanceState::Creating => {}
            other => panic!("unexpected state {other:?}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "the instance never became Ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    emulator.shutdown();
    cluster.shutdown().await;
}

/// Issue 28 defect 2: Compute answers its API rate limits with 403 and reason `rateLimitExceeded` ("Quota exceeded
/// for quota group …"), not only 429: that is throttling, retried by `Governed`, not `PermissionDenied`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_rate_limits_answered_with_403_are_throttling_and_ridden_out() {
    let (cluster, emulator) = setup(0, 0).await;
    let provider = provider(&emulator, emulator.adc_json()).await;
    let workers = mig("workers");
    emulator.inject(GcpFault::RateLimited403, 1);
    match provider.group_image(&workers).await {
        Err(Error::Throttled { retry_after: None, message }) => {
            assert!(message.contains("Quota exceeded for quota group"), "{message}")
        }
        other => panic!("expected Throttled, got {other:?}"),
    }
    emulator.inject(GcpFault::RateLimited403, 2);
    let counts = Arc::new(CallCounts::default());
    let governed = Governed::new(Arc::new(provider), CallPolicy::default(), counts);
    assert_eq!(governed.group_image(&workers).await.unwrap(), IMAGE_V1);
    // A 403 for a missing permission is still PermissionDenied.
    emulator.forbid("compute.instanceGroupManagers.get");
    assert!(matches!(governed.group_image(&workers).await, Err(Error::PermissionDenied { .. })));
    emulator.shutdown();
    cluster.shutdown().await;
}

/// Issue 28 defect 6: Compute pages its lists (`maxResults`, `nextPageToken`); with pages of one item the
/// provider still sees every template, MIG and managed instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_answered_in_pages_of_one_are_followed_to_the_end() {
    let (cluster, emulator) = setup(0, 2).await;
    emulator.set_page_size(Some(1));
    emulator.set_timing(GcpTiming { create: Duration::from_secs(30), ..GcpTiming::default() });
    let provider = provider(&emulator, emulator.adc_json()).await;
    let tag = ClusterTag { key: "constellation-uid".into(), value: UID.into() };
    let groups = provider.list_groups(&tag).await.unwrap();
    let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, vec!["cp", "workers"]);
    let calls = emulator.calls();
    assert_eq!(calls.get("instanceTemplates.list"), Some(&3), "three templates, one a page");
    assert_eq!(calls.get("instanceGroupManagers.aggregatedList"), Some(&3), "three MIGs, one a page");
    // The MIG lists the instance being created after its two running ones: on the third page.
    let cloud::Creation::Created(created) = provider.create_instance(&mig("workers")).await.unwrap() else { panic!() };
    let before = emulator.calls().get("instanceGroupManagers.listManagedInstances").copied().unwrap_or(0);
    let restarted = provider_again(&emulator).await;
    assert_eq!(restarted.instance_state(&created.provider_id).await.unwrap(), cloud::InstanceState::Creating);
    let after = emulator.calls().get("instanceGroupManagers.listManagedInstances").copied().unwrap_or(0);
    assert_eq!(after - before, 3, "three managed instances, one a page");
    emulator.shutdown();
    cluster.shutdown().await;
}
