//! `update-operator plan --cloud-provider aws|gcp` as a user runs it: the real binary, built with the cloud's
//! feature, against a dev cluster whose group nodes are instances of moto's Auto Scaling groups (AWS's wire
//! protocols) or of the GCP emulator's managed instance groups (`dev::cloud::gcp`). Asking the cloud, the group
//! nodes are forecast as replacements, with only the provider's read calls; without it they are listed and
//! forecast in place; a refused call is said with its error. (Here and not in dev/tests: only this package's
//! tests can run the binary. The AWS fixtures are dev/tests/aws_support's.)

#![cfg(any(feature = "aws", feature = "gcp"))]

use dev::cluster::{Cluster, ClusterConfig};
use serde_json::Value;
use shared::crd::{NodeRole, ScalingGroup, ScalingGroupSpec};
use std::time::Duration;

/// Generous: a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(120);

/// What `plan` answered: its exit status, its JSON report (`Null` when it printed none) and its stderr.
struct Answer {
    status: Option<i32>,
    report: Value,
    stderr: String,
}

impl Answer {
    /// Each forecast node's name and whether it is replaced, in start order.
    fn replaced(&self) -> Vec<(String, bool)> {
        let nodes = self.report["rollouts"][0]["nodes"].as_array().cloned().unwrap_or_default();
        nodes
            .iter()
            .map(|n| (n["node"].as_str().unwrap_or_default().to_owned(), n["replaced"].as_bool().unwrap_or_default()))
            .collect()
    }

    /// The nodes of the `NoAgent` blockers: nodes forecast in place (a group node runs no agent), sorted.
    fn without_agent(&self) -> Vec<String> {
        let blockers = self.report["blockers"].as_array().cloned().unwrap_or_default();
        let mut nodes: Vec<String> = blockers
            .iter()
            .filter(|b| b["kind"] == "NoAgent")
            .flat_map(|b| b["nodes"].as_array().cloned().unwrap_or_default())
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect();
        nodes.sort();
        nodes
    }

    /// The assumptions, as one string.
    fn assumptions(&self) -> String {
        self.report["assumptions"].to_string()
    }
}

/// `plan -f FILE -o json` against `cluster` with `args`, the environment plus `env`.
async fn plan(cluster: &Cluster, file: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Answer {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_update-operator"))
        .arg("plan")
        .arg("--kubeconfig")
        .arg(cluster.server().kubeconfig_path())
        .arg("-f")
        .arg(file)
        .args(["-o", "json"])
        .args(args)
        .envs(env.iter().copied())
        .output()
        .await
        .expect("plan runs");
    Answer {
        status: out.status.code(),
        report: serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A NodeVersion file for `image` (the name the ScalingGroups' `spec.nodeImage` names), one surge node.
fn version_file(dir: &tempfile::TempDir, image: &str) -> std::path::PathBuf {
    let path = dir.path().join("nv.yaml");
    let yaml = format!(
        "apiVersion: update.edgeless.systems/v1alpha1\nkind: NodeVersion\nmetadata: {{name: constellation-version}}\n\
         spec: {{image: \"{image}\", rollout: {{maxSurge: 1}}}}\n"
    );
    std::fs::write(&path, yaml).expect("the file is written");
    path
}

/// The ScalingGroup of a worker group `group_id` of at most 4 nodes.
fn scaling_group(cluster: &Cluster, name: &str, group_id: &str) {
    let group = ScalingGroup::new(
        name,
        ScalingGroupSpec {
            node_image: "constellation-version".into(),
            group_id: group_id.into(),
            autoscaler_group_name: None,
            node_group_name: None,
            autoscaling: false,
            min: Some(0),
            max: Some(4),
            role: Some(NodeRole::Worker),
        },
    );
    cluster.store().api::<ScalingGroup>().create(None, &group, &Default::default()).expect("the group is created");
}

/// A cluster of no in-place node (the group nodes join it).
async fn cluster(image: &str) -> Cluster {
    let config = ClusterConfig {
        nodes: 0,
        control_planes: 0,
        image: image.into(),
        workloads: None,
        ready_timeout: PATIENCE,
        ..ClusterConfig::default()
    };
    Cluster::start(config).await.expect("the cluster starts")
}

#[cfg(feature = "aws")]
#[path = "../../dev/tests/it/aws_support/mod.rs"]
mod aws_support;

#[cfg(feature = "aws")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_asks_aws_which_auto_scaling_group_each_node_is_in_and_forecasts_their_replacement() {
    use aws_support::*;
    let Some(moto) = start_moto().await else { return };
    let setup = setup_config(&moto.url).await;
    create_group(&setup, "plan-workers", "cluster-a", "worker", 2, 4).await;
    let cluster = cluster(IMAGE).await;
    let bridge = Bridge::start(&setup, &cluster, &[("plan-workers", false)]).await;
    cluster.wait_ready(PATIENCE).await.expect("the group's instances are Ready nodes");
    scaling_group(&cluster, "plan-workers", "plan-workers");
    let dir = tempfile::tempdir().unwrap();
    let file = version_file(&dir, OTHER_IMAGE);
    // The provider's default credential chain, from the environment; the endpoint is the proxy that records calls.
    let proxy = FaultProxy::start(&moto.url).await;
    let env = [
        ("AWS_ENDPOINT_URL", proxy.url.as_str()),
        ("AWS_ACCESS_KEY_ID", "AKIDMOTOTEST"),
        ("AWS_SECRET_ACCESS_KEY", "moto-secret"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let aws = ["--cloud-provider", "aws", "--aws-region", REGION];

    // Asking AWS: both nodes are in the group and run the old AMI, so both are replaced, one at a time.
    let asked = plan(&cluster, &file, &aws, &env).await;
    assert_eq!(asked.status, Some(0), "{}\n{:#}", asked.stderr, asked.report);
    let replaced = asked.replaced();
    assert_eq!(replaced.len(), 2, "{:#}", asked.report);
    assert!(replaced.iter().all(|(_, r)| *r), "{:#}", asked.report);
    assert!(asked.assumptions().contains("as the cloud told"), "{}", asked.assumptions());
    // Only read calls: the instance's group and its AMI.
    let made: Vec<String> = proxy.calls().into_iter().collect();
    assert_eq!(made, ["autoscaling:DescribeAutoScalingInstances", "ec2:DescribeInstances"]);

    // Without the cloud an AWS provider ID does not name its group: listed, forecast in place (and, without agents,
    // blocked).
    let blind = plan(&cluster, &file, &[], &env).await;
    assert_eq!(blind.status, Some(3), "{}", blind.stderr);
    let mut names: Vec<String> = replaced.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    assert_eq!(blind.without_agent(), names, "{:#}", blind.report);
    assert!(blind.replaced().iter().all(|(_, r)| !r), "{:#}", blind.report);
    let said = blind.assumptions();
    assert!(said.contains("pass --cloud-provider") && names.iter().all(|n| said.contains(n.as_str())), "{said}");

    // A call AWS refuses: the node it was about is said with the error, and forecast in place.
    proxy.inject(Injected {
        action: Some("DescribeAutoScalingInstances".into()),
        group: None,
        status: 403,
        code: "AccessDenied".into(),
        retry_after: None,
    });
    let denied = plan(&cluster, &file, &aws, &env).await;
    assert_eq!(denied.status, Some(3), "{}\n{:#}", denied.stderr, denied.report);
    let in_place = denied.without_agent();
    assert_eq!(in_place.len(), 1, "{:#}", denied.report);
    let still: Vec<(String, bool)> = names.iter().filter(|n| **n != in_place[0]).map(|n| (n.clone(), true)).collect();
    assert_eq!(denied.replaced(), still, "the other node is still replaced: {:#}", denied.report);
    let said = denied.assumptions();
    assert!(
        said.contains(&format!("the cloud did not tell the scaling group and image of {}", in_place[0]))
            && said.contains("DescribeAutoScalingInstances"),
        "{said}"
    );
    drop(bridge);
    cluster.shutdown().await;
}

#[cfg(feature = "gcp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_asks_gcp_which_managed_instance_group_each_node_is_in_and_forecasts_their_replacement() {
    use dev::cloud::gcp::{GcpEmulator, GcpTiming};
    const PROJECT: &str = "constellation-test-4711";
    const ZONE: &str = "europe-west3-b";
    const V1: &str = "projects/constellation-images/global/images/constellation-v1";
    const V2: &str = "projects/constellation-images/global/images/constellation-v2";
    let cluster = cluster(V1).await;
    let emulator = GcpEmulator::start(PROJECT, &cluster.store(), cluster.hosts(), GcpTiming::default())
        .await
        .expect("the emulator starts");
    emulator.add_template("workers-template", V1, &[("constellation-uid", "c1"), ("constellation-role", "worker")]);
    let mig = emulator.add_mig(ZONE, "workers", "workers-template");
    let names: Vec<String> = (0..2).map(|_| emulator.add_running_instance(ZONE, "workers").unwrap()).collect();
    cluster.wait_ready(PATIENCE).await.expect("the MIG's instances are Ready nodes");
    scaling_group(&cluster, "workers", &mig);
    let dir = tempfile::tempdir().unwrap();
    let file = version_file(&dir, V2);
    // Application Default Credentials from a file whose token URI is the emulator's.
    let adc = dir.path().join("adc.json");
    std::fs::write(&adc, emulator.adc_json().to_string()).unwrap();
    let adc = adc.display().to_string();
    let env = [("GOOGLE_APPLICATION_CREDENTIALS", adc.as_str())];
    let gcp = ["--cloud-provider", "gcp", "--gcp-project", PROJECT, "--cloud-endpoint", emulator.url()];

    let asked = plan(&cluster, &file, &gcp, &env).await;
    assert_eq!(asked.status, Some(0), "{}\n{:#}", asked.stderr, asked.report);
    let mut replaced = asked.replaced();
    replaced.sort();
    assert_eq!(replaced, names.iter().map(|n| (n.clone(), true)).collect::<Vec<_>>(), "{:#}", asked.report);
    assert!(asked.assumptions().contains("as the cloud told"), "{}", asked.assumptions());
    // Only read calls: the instance (its group from `created-by`) and its boot disk (the image).
    let permissions: Vec<String> = emulator.recorded_permissions().into_iter().collect();
    assert_eq!(permissions, ["compute.disks.get", "compute.instances.get"]);

    let blind = plan(&cluster, &file, &[], &env).await;
    assert_eq!(blind.status, Some(3), "{}", blind.stderr);
    assert_eq!(blind.without_agent(), names, "{:#}", blind.report);
    assert!(blind.replaced().iter().all(|(_, r)| !r), "{:#}", blind.report);
    let said = blind.assumptions();
    assert!(said.contains("pass --cloud-provider") && names.iter().all(|n| said.contains(n.as_str())), "{said}");

    // Without the permission to read disks, no node's image is known: both are said with the error.
    emulator.forbid("compute.disks.get");
    let denied = plan(&cluster, &file, &gcp, &env).await;
    assert_eq!(denied.status, Some(3), "{}\n{:#}", denied.stderr, denied.report);
    assert_eq!(denied.without_agent(), names, "{:#}", denied.report);
    let said = denied.assumptions();
    for name in &names {
        let error =
            format!("the cloud did not tell the scaling group and image of {name} (permission denied: disks.get");
        assert!(said.contains(&error), "{said}");
    }
    emulator.shutdown();
    cluster.shutdown().await;
}
