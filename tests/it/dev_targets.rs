//! The development targets of the Makefile: `make dev-rollout` rolls the in-memory dev cluster with the
//! controller and agents as processes and `make get-nodes-status` shows the result; the kind targets run the
//! commands they should (`make -n`), and `dev/kind-cluster.yml` follows kind's `kind.x-k8s.io/v1alpha4` schema.
//!
//! `make`, `kubectl` and `jq` are needed (CI installs them); outside CI a test skips when one is missing.

use dev::cluster::{Cluster, ClusterConfig};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// Whether `tool` runs; when it does not, CI fails and elsewhere the caller skips.
fn have(tool: &str) -> bool {
    let version: &[&str] = if tool == "kubectl" { &["version", "--client"] } else { &["--version"] };
    let found = Command::new(tool).args(version).output().is_ok_and(|o| o.status.success());
    assert!(found || std::env::var_os("CI").is_none(), "{tool} is missing (CI installs it)");
    if !found {
        eprintln!("skipping: {tool} is not installed");
    }
    found
}

fn make(args: &[&str], env: &[(&str, &str)]) -> Output {
    let output = Command::new("make")
        .arg("--no-print-directory")
        .arg("-C")
        .arg(REPO)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "make {args:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// kind's v1alpha4 `Cluster` (pkg/apis/config/v1alpha4/types.go): kind reads its config strictly, so an unknown
/// field fails `kind create cluster`; here it fails to parse.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct KindCluster {
    kind: String,
    api_version: String,
    name: Option<String>,
    nodes: Vec<KindNode>,
    networking: Option<Value>,
    feature_gates: Option<BTreeMap<String, bool>>,
    runtime_config: Option<BTreeMap<String, String>>,
    kubeadm_config_patches: Option<Vec<String>>,
    #[serde(rename = "kubeadmConfigPatchesJSON6902")]
    kubeadm_config_patches_json6902: Option<Vec<Value>>,
    containerd_config_patches: Option<Vec<String>>,
    #[serde(rename = "containerdConfigPatchesJSON6902")]
    containerd_config_patches_json6902: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct KindNode {
    role: Option<String>,
    image: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    extra_mounts: Option<Vec<Value>>,
    extra_port_mappings: Option<Vec<Value>>,
    gpus: Option<String>,
    kubeadm_config_patches: Option<Vec<String>>,
    #[serde(rename = "kubeadmConfigPatchesJSON6902")]
    kubeadm_config_patches_json6902: Option<Vec<Value>>,
}

#[test]
fn the_kind_config_follows_kinds_schema_and_opts_every_node_in() {
    let text = std::fs::read_to_string(Path::new(REPO).join("dev/kind-cluster.yml")).unwrap();
    let cluster: KindCluster = yaml_serde::from_str(&text).unwrap();
    assert_eq!((cluster.kind.as_str(), cluster.api_version.as_str()), ("Cluster", "kind.x-k8s.io/v1alpha4"));
    assert!(cluster.nodes.iter().any(|n| n.role.as_deref() == Some("control-plane")));
    for node in &cluster.nodes {
        assert!(matches!(node.role.as_deref(), Some("control-plane" | "worker")), "{node:?}");
        let labels = node.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("update.edgeless.systems/managed").map(String::as_str), Some("true"));
        // The documented minimum, Kubernetes 1.30 (the agents' ValidatingAdmissionPolicy).
        let image = node.image.as_deref().unwrap_or_default();
        let minor: u32 = image
            .strip_prefix("kindest/node:v1.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("node image {image:?} is not a kindest/node:v1.N.P"));
        assert!(minor >= 30, "{image} is older than Kubernetes 1.30");
    }
}

#[test]
fn the_kind_targets_run_kind_kubectl_and_the_image_tool() {
    if !have("make") {
        return;
    }
    let dry = |target: &str| String::from_utf8(make(&["-n", target], &[]).stdout).unwrap();
    let cluster = dry("kind-cluster");
    assert_eq!(cluster.trim(), "kind create cluster --name update-operator-dev --config dev/kind-cluster.yml");
    let load = dry("kind-load");
    assert!(load.contains("--target x86_64-unknown-linux-gnu --bin update-operator"), "{load}");
    assert!(
        load.contains("RUSTFLAGS=\"-C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs\""),
        "{load}"
    );
    // Linked in the agent's code order (tools/agent-order): the order resolved against a first link, then used.
    assert!(load.contains("tools/agent-order/resolve.py tools/agent-order/agent.order"), "{load}");
    assert!(load.contains("--symbol-ordering-file="), "{load}");
    assert!(
        load.contains("-p oci-image -- --platform amd64=target/x86_64-unknown-linux-gnu/release/update-operator"),
        "{load}"
    );
    // A local kind cluster runs on the build machine: no arm64 build, no cross compiler needed.
    assert!(!load.contains("aarch64"), "{load}");
    assert!(load.contains("--reference update-operator:dev --output target/update-operator-image.tar"), "{load}");
    assert!(load.contains("kind load image-archive target/update-operator-image.tar --name update-operator-dev"));
    let rollout = dry("kind-rollout");
    for expected in [
        "kind load image-archive",
        "kubectl apply -k dev/",
        "kubectl -n update-operator rollout restart deployment/update-operator-controller daemonset/update-operator-agent",
        "kubectl -n update-operator rollout status daemonset/update-operator-agent",
    ] {
        assert!(rollout.contains(expected), "kind-rollout lacks {expected:?}:\n{rollout}");
    }
    assert!(dry("deploy-dev").contains("kubectl apply -k dev/"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_rollout_and_get_nodes_status_work_against_the_dev_cluster() {
    if !(have("make") && have("kubectl") && have("jq")) {
        return;
    }
    let cluster = Cluster::start(ClusterConfig { nodes: 3, control_planes: 1, workloads: None, ..Default::default() })
        .await
        .unwrap();
    let kubeconfig = cluster.server().kubeconfig_path().display().to_string();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().display().to_string();
    let env = [
        ("KUBECONFIG", kubeconfig.as_str()),
        // The binary this test was built with; CARGO=true skips the build (cargo holds the target dir now).
        ("UPDATE_OPERATOR", env!("CARGO_BIN_EXE_update-operator")),
        ("CARGO", "true"),
        ("DEV_ROLLOUT_DIR", state_dir.as_str()),
        ("ROLLOUT_IMAGE", "dev-v2"),
        ("JQ_COLOR", ""),
    ];
    // Started twice: the second run replaces the first run's processes instead of adding to them.
    make(&["dev-rollout"], &env);
    make(&["dev-rollout"], &env);
    let deadline = Instant::now()
        + Duration::from_secs(
            std::env::var("DEV_ROLLOUT_TEST_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(240),
        );
    let nodes = loop {
        let output = make(&["get-nodes-status"], &env);
        let status: Value = serde_json::from_slice(&output.stdout).unwrap();
        let done = status.as_object().is_some_and(|nodes| {
            nodes.len() == 3
                && nodes
                    .values()
                    .all(|n| n["update.edgeless.systems/os-image"] == "dev-v2" && n["unschedulable"] == false)
        });
        if done {
            break status;
        }
        let logs = std::fs::read_to_string(state.path().join("controller.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "not rolled out: {status:#}\ncontroller log:\n{logs}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(nodes["worker-0"]["update.edgeless.systems/managed"], "true");
    let pids: Vec<String> = std::fs::read_dir(state.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".pid"))
        .collect();
    assert_eq!(pids.len(), 4, "one controller and three agents: {pids:?}");
    let alive: Vec<u32> =
        pids.iter().map(|p| std::fs::read_to_string(state.path().join(p)).unwrap().trim().parse().unwrap()).collect();
    make(&["dev-rollout-stop"], &env);
    for pid in alive {
        assert!(!Path::new(&format!("/proc/{pid}")).exists() || is_zombie(pid), "process {pid} still runs");
    }
    cluster.shutdown().await;
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')))
}
