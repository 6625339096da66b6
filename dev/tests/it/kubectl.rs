//! kubectl against the dev cluster: the `kubectl` on PATH and every `kubectl.1.NN` beside it (after resolving
//! symlinks) get nodes, annotate, cordon, uncordon, and drain a node whose pods a PDB lets go one at a time; and
//! create, scale, read and delete built-in objects and Jobs (kubectl 1.32+ sends and asks for protobuf bodies);
//! show the operator's Events after a rollout with `kubectl describe nodeversion` and `kubectl get events`; and
//! apply the operator's bundle, then ask `auth can-i` and act with an agent's kubeconfig under its RBAC and policy.
//!
//! Without a kubectl on PATH this test fails: CI installs one.

use crate::cluster_support;
use crate::support;

use cluster_support::*;
use dev::cluster::{Cluster, PdbStyle, SampleWorkloads};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::Api;
use kube::api::ListParams;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

/// Bound of one kubectl command (a drain waits out 429s every 5 s and pod deletions).
const COMMAND_PATIENCE: Duration = Duration::from_secs(240);

/// The node drained.
const DRAINED: &str = "worker-0";

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `kubectl` from PATH, then every `kubectl.1.NN` in the directory of the resolved `kubectl`, by minor version.
fn kubectl_binaries() -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(kubectl) = std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| executable(p)) else {
        panic!("no kubectl on PATH: this test runs kubectl against the dev cluster; install kubectl (CI does)");
    };
    let resolved = std::fs::canonicalize(&kubectl).unwrap_or_else(|_| kubectl.clone());
    let mut versioned: Vec<(u32, PathBuf)> = resolved
        .parent()
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let minor: u32 = name.strip_prefix("kubectl.1.")?.parse().ok()?;
            executable(&entry.path()).then(|| (minor, entry.path()))
        })
        .collect();
    versioned.sort();
    std::iter::once(kubectl).chain(versioned.into_iter().map(|(_, path)| path)).collect()
}

struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

async fn kubectl(binary: &Path, kubeconfig: &Path, args: &[&str]) -> Run {
    let mut command = Command::new(binary);
    command.arg("--kubeconfig").arg(kubeconfig).args(args).kill_on_drop(true);
    let output = tokio::time::timeout(COMMAND_PATIENCE, command.output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} did not finish in {COMMAND_PATIENCE:?}", binary.display()))
        .unwrap_or_else(|e| panic!("{} cannot run: {e}", binary.display()));
    Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

async fn kubectl_ok(binary: &Path, kubeconfig: &Path, args: &[&str]) -> Run {
    let run = kubectl(binary, kubeconfig, args).await;
    assert!(run.success, "{} {args:?} failed\nstdout:\n{}\nstderr:\n{}", binary.display(), run.stdout, run.stderr);
    run
}

/// One cluster per kubectl: a control plane, three workers, six pods of `web-0` (two per worker) under a PDB
/// with `maxUnavailable: 1`, and a DaemonSet. Pods take 2 s to start, so that the drain's concurrent evictions
/// meet the exhausted budget before any replacement is Ready, however slow the machine.
async fn drain_cluster() -> Cluster {
    cluster_with(|config| {
        config.nodes = 4;
        config.timing.pod_startup = Duration::from_secs(2);
        config.workloads = Some(SampleWorkloads {
            pods_per_worker: 2,
            replicas: 6,
            statefulset_every: 0,
            pdb: PdbStyle::MaxUnavailable,
            daemonset: true,
            ..SampleWorkloads::default()
        });
    })
    .await
}

async fn exercise(binary: &Path) {
    let cluster = drain_cluster().await;
    let config = cluster.kubeconfig_path().to_owned();
    let version = kubectl_ok(binary, &config, &["version", "-o", "json"]).await;
    let version: serde_json::Value = serde_json::from_str(&version.stdout).unwrap_or_default();
    println!(
        "{}: client {} against server {}",
        binary.display(),
        version["clientVersion"]["gitVersion"].as_str().unwrap_or("(unknown)"),
        version["serverVersion"]["gitVersion"].as_str().unwrap_or("(unknown)")
    );

    let nodes = kubectl_ok(binary, &config, &["get", "nodes"]).await.stdout;
    for node in cluster.node_names() {
        let line = nodes.lines().find(|l| l.starts_with(&node)).unwrap_or_else(|| panic!("{node} missing:\n{nodes}"));
        assert!(line.contains(" Ready"), "{line}");
    }

    let api: Api<Node> = Api::all(cluster.client());
    kubectl_ok(binary, &config, &["annotate", "node", DRAINED, "example.com/checked-by=kubectl"]).await;
    let annotations = api.get(DRAINED).await.unwrap().metadata.annotations.unwrap_or_default();
    assert_eq!(annotations.get("example.com/checked-by").map(String::as_str), Some("kubectl"));

    kubectl_ok(binary, &config, &["cordon", DRAINED]).await;
    assert_eq!(api.get(DRAINED).await.unwrap().spec.unwrap().unschedulable, Some(true));
    kubectl_ok(binary, &config, &["uncordon", DRAINED]).await;
    assert_ne!(api.get(DRAINED).await.unwrap().spec.unwrap().unschedulable, Some(true));

    let drain = kubectl_ok(binary, &config, &["drain", DRAINED, "--ignore-daemonsets", "--timeout=200s"]).await;
    let output = format!("{}{}", drain.stdout, drain.stderr);
    assert!(
        output.contains("will retry after") && output.contains("disruption budget"),
        "the drain did not meet the PDB's 429:\n{output}"
    );
    assert!(output.contains(&format!("node/{DRAINED} drained")), "{output}");

    let pods: Api<Pod> = Api::all(cluster.client());
    let on_node = pods.list(&ListParams::default().fields(&format!("spec.nodeName={DRAINED}"))).await.unwrap();
    for pod in &on_node.items {
        let owner = pod.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
        assert_eq!(owner.map(|o| o.kind.as_str()), Some("DaemonSet"), "{:?} stayed", pod.metadata.name);
    }
    eventually("web-0 serves six pods on the other workers", || async {
        let web: Vec<_> = pods_in(&cluster, "demo").into_iter().filter(|p| p.meta.name.starts_with("web-0-")).collect();
        web.len() == 6 && web.iter().all(|p| serving(p) && p.node_name.as_deref() != Some(DRAINED))
    })
    .await;
    cluster.shutdown().await;
}

/// The minor version of a kubectl binary (`kubectl version --client -o json`).
async fn minor_version(binary: &Path, kubeconfig: &Path) -> u32 {
    let run = kubectl_ok(binary, kubeconfig, &["version", "--client", "-o", "json"]).await;
    let version: serde_json::Value = serde_json::from_str(&run.stdout).unwrap_or_default();
    version["clientVersion"]["minor"].as_str().unwrap_or_default().trim_end_matches('+').parse().unwrap_or(0)
}

/// kubectl 1.32 and later send and ask for protobuf bodies for built-in kinds (the access reviews,
/// TokenRequest, creates).
const FIRST_PROTOBUF_MINOR: u32 = 32;

/// `kubectl apply` of the operator's bundle on a fresh server, then what its RBAC and policy allow: `auth can-i`
/// with `--as`, and an agent's own kubeconfig annotating its node and, refused with the policy's message,
/// another.
async fn operator_access(binary: &Path) {
    let server = dev::apiserver::ApiServer::start(Default::default()).await.unwrap();
    let admin = server.kubeconfig_path().to_owned();
    let bundle = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/update-operator.yaml");
    kubectl_ok(binary, &admin, &["apply", "--validate=false", "-f", bundle]).await;
    let store = server.store();
    for name in ["worker-0", "worker-1"] {
        let node = serde_json::json!({"metadata": {"name": name}});
        store.create(&dev::apiserver::Gvr::new("", "v1", "nodes"), None, node, &Default::default()).unwrap();
    }
    let manifest = dev::operator::Manifest::operator().unwrap();
    let agent = server.kubeconfig_for(&manifest.agent_identity("worker-0").unwrap()).unwrap();
    let as_agent = "--as=system:serviceaccount:update-operator:update-operator-agent";
    assert_eq!(kubectl_ok(binary, &admin, &["auth", "can-i", as_agent, "patch", "nodes"]).await.stdout.trim(), "yes");
    let denials: [&[&str]; 3] = [&["delete", "nodes"], &["patch", "nodes", "--subresource=status"], &["get", "pods"]];
    for denied in denials {
        let args: Vec<&str> = ["auth", "can-i", as_agent].iter().chain(denied).copied().collect();
        let run = kubectl(binary, &admin, &args).await;
        assert_eq!((run.success, run.stdout.trim()), (false, "no"), "{denied:?}: {}", run.stderr);
    }
    let as_controller = "--as=system:serviceaccount:update-operator:update-operator-controller";
    let evict = ["auth", "can-i", as_controller, "create", "pods", "--subresource=eviction", "-n", "demo"];
    assert_eq!(kubectl_ok(binary, &admin, &evict).await.stdout.trim(), "yes");
    assert_eq!(kubectl_ok(binary, &agent, &["auth", "can-i", "patch", "nodes"]).await.stdout.trim(), "yes");
    let list = kubectl_ok(binary, &agent, &["auth", "can-i", "--list"]).await.stdout;
    assert!(list.lines().any(|l| l.starts_with("nodes ") && l.contains("[get list watch patch]")), "{list}");
    let token =
        kubectl_ok(binary, &admin, &["create", "token", "update-operator-agent", "-n", "update-operator"]).await;
    let user = server.user_of_token(token.stdout.trim()).unwrap();
    assert_eq!(user.name, "system:serviceaccount:update-operator:update-operator-agent");
    kubectl_ok(binary, &agent, &["annotate", "node", "worker-0", "update.edgeless.systems/state=idle"]).await;
    let other = kubectl(binary, &agent, &["annotate", "node", "worker-1", "update.edgeless.systems/state=idle"]).await;
    assert!(!other.success);
    assert!(
        other.stderr.contains(
            "ValidatingAdmissionPolicy 'update-operator-agent-own-node' with binding 'update-operator-agent-own-node' \
             denied request: the update-operator agent may only modify the Node it runs on"
        ),
        "{}",
        other.stderr
    );
    let roles = kubectl_ok(binary, &admin, &["get", "clusterroles", "update-operator-agent", "-o", "name"]).await;
    assert_eq!(roles.stdout.trim(), "clusterrole.rbac.authorization.k8s.io/update-operator-agent");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_applies_the_operator_and_is_held_to_its_rbac_and_policy() {
    for binary in &kubectl_binaries() {
        operator_access(binary).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_gets_annotates_cordons_and_drains_through_pdb_refusals() {
    let binaries = kubectl_binaries();
    println!("kubectl binaries: {binaries:?}");
    for binary in &binaries {
        exercise(binary).await;
    }
}

async fn create_scale_read_and_delete(binary: &Path) {
    let cluster = bare_cluster(1).await;
    let config = cluster.kubeconfig_path().to_owned();
    let minor = minor_version(binary, &config).await;
    let (cm, ns, secret, deploy) =
        (format!("cm-{minor}"), format!("ns-{minor}"), format!("secret-{minor}"), format!("deploy-{minor}"));

    // -v=8 logs the request and response headers: kubectl 1.32+ sends and receives protobuf.
    let created = kubectl_ok(binary, &config, &["create", "configmap", &cm, "--from-literal=a=b", "-v=8"]).await;
    assert!(created.stdout.contains(&format!("configmap/{cm} created")), "{}", created.stdout);
    let protobuf_headers = created.stderr.matches("Content-Type: application/vnd.kubernetes.protobuf").count();
    if minor >= FIRST_PROTOBUF_MINOR {
        assert!(protobuf_headers >= 2, "kubectl 1.{minor} sent and received protobuf:\n{}", created.stderr);
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let stored = config_maps.get(&cm).await.unwrap();
    assert_eq!(stored.data.unwrap()["a"], "b");
    let managers: Vec<String> =
        stored.metadata.managed_fields.into_iter().flatten().filter_map(|m| m.manager).collect();
    assert_eq!(managers, vec!["kubectl-create".to_owned()]);

    kubectl_ok(binary, &config, &["create", "namespace", &ns]).await;
    kubectl_ok(binary, &config, &["create", "secret", "generic", &secret, "--from-literal=k=v", "-n", &ns]).await;
    let secrets: Api<Secret> = Api::namespaced(cluster.client(), &ns);
    let stored = secrets.get(&secret).await.unwrap();
    assert_eq!(stored.data.unwrap()["k"].0, b"v");
    assert_eq!(stored.type_.as_deref(), Some("Opaque"));

    kubectl_ok(binary, &config, &["create", "deployment", &deploy, "--image=nginx:1.27", "--replicas=0"]).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    let spec = deployments.get(&deploy).await.unwrap().spec.unwrap();
    assert_eq!(spec.replicas, Some(0), "a pointer set to zero stays zero");
    assert_eq!(spec.strategy.unwrap().type_.as_deref(), Some("RollingUpdate"), "the empty strategy is defaulted");
    let container = &spec.template.spec.unwrap().containers[0];
    assert_eq!((container.name.as_str(), container.image.as_deref()), ("nginx", Some("nginx:1.27")));
    assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
    kubectl_ok(binary, &config, &["scale", "deployment", &deploy, "--replicas=2"]).await;
    assert_eq!(deployments.get(&deploy).await.unwrap().spec.unwrap().replicas, Some(2));

    let read = kubectl_ok(binary, &config, &["get", "configmap", &cm, "-o", "jsonpath={.data.a}"]).await;
    assert_eq!(read.stdout, "b");
    let listed = kubectl_ok(binary, &config, &["get", "secrets", "-n", &ns, "-o", "name"]).await;
    assert_eq!(listed.stdout.trim(), format!("secret/{secret}"));
    let missing = kubectl(binary, &config, &["get", "configmap", "nope"]).await;
    assert!(!missing.success);
    assert!(missing.stderr.contains("configmaps \"nope\" not found"), "a protobuf Status: {}", missing.stderr);
    kubectl_ok(binary, &config, &["delete", "configmap", &cm]).await;
    assert!(config_maps.get_opt(&cm).await.unwrap().is_none());
    kubectl_ok(binary, &config, &["delete", "deployment", &deploy]).await;
    assert!(deployments.get_opt(&deploy).await.unwrap().is_none());
    cluster.shutdown().await;
}

/// Jobs, Services and PriorityClasses through one kubectl: `create job`, `get`, `wait`, `delete`.
async fn exercise_jobs(binary: &Path) {
    let cluster = bare_cluster(2).await;
    let config = cluster.kubeconfig_path().to_owned();
    let created = kubectl_ok(binary, &config, &["create", "job", "hello", "--image=busybox:1.36"]).await;
    assert!(created.stdout.contains("job.batch/hello created"), "{}", created.stdout);
    kubectl_ok(binary, &config, &["wait", "--for=condition=complete", "job/hello", "--timeout=120s"]).await;
    let jobs = kubectl_ok(binary, &config, &["get", "jobs"]).await.stdout;
    assert!(jobs.lines().any(|l| l.starts_with("hello ")), "{jobs}");
    let pods = kubectl_ok(binary, &config, &["get", "pods", "-l", "job-name=hello", "-o", "json"]).await.stdout;
    let pods: serde_json::Value = serde_json::from_str(&pods).unwrap();
    assert_eq!(pods["items"][0]["status"]["phase"], "Succeeded", "{pods}");
    let services = kubectl_ok(binary, &config, &["get", "svc", "kubernetes"]).await.stdout;
    assert!(services.contains("kubernetes"), "{services}");
    let classes = kubectl_ok(binary, &config, &["get", "pc"]).await.stdout;
    assert!(classes.contains("system-node-critical") && classes.contains("system-cluster-critical"), "{classes}");
    kubectl_ok(binary, &config, &["delete", "job", "hello"]).await;
    eventually("the Job's pod went with it (kubectl deletes in the background)", || async {
        let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
        pods.list(&ListParams::default().labels("job-name=hello")).await.unwrap().items.is_empty()
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_creates_scales_reads_and_deletes_built_in_objects() {
    for binary in &kubectl_binaries() {
        create_scale_read_and_delete(binary).await;
    }
}

/// After a rollout by the real controller and agents, every kubectl shows the operator's Events (written through
/// events.k8s.io/v1) where users look for them: `kubectl describe nodeversion` and `kubectl get events`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_shows_the_operators_events_after_a_rollout() {
    let names = ["cp-0", "w-0", "w-1", "w-2"];
    let server = support::bare_cluster(&names).await;
    let store = server.store();
    let operator = support::operator(&server);
    let agents: Vec<_> = names
        .iter()
        .map(|name| {
            let (store, name) = (store.clone(), name.to_string());
            dev::harness::agent_with(&operator, &name.clone(), move || Ok(support::FakeHost::new(store, &name, "v1")))
        })
        .collect();
    let controller = dev::harness::controller(&operator, dev::harness::controller_options("c1"));
    support::create_version(&store, "v2", serde_json::json!({"maxUnavailable": 2}));
    support::eventually(COMMAND_PATIENCE, "the rollout", || support::rolled_out(&store, 4)).await;

    for binary in &kubectl_binaries() {
        let config = server.kubeconfig_path().to_owned();
        let described = kubectl_ok(binary, &config, &["describe", "nodeversion", "constellation-version"]).await;
        let events = described.stdout.split("Events:").nth(1).unwrap_or_default();
        for reason in ["StageRequested", "DrainStarted", "RebootRequested", "Verified"] {
            assert!(
                events.lines().any(|l| l.contains(reason) && l.contains("update-operator")),
                "{}: no {reason} Event from update-operator under Events:\n{}",
                binary.display(),
                described.stdout
            );
        }
        let listed = kubectl_ok(binary, &config, &["get", "events", "-A", "-o", "wide"]).await;
        assert!(listed.stdout.contains("nodeversion/constellation-version"), "{}", listed.stdout);
        let header = listed.stdout.lines().next().unwrap_or_default();
        for column in ["LAST SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE", "MESSAGE", "FIRST SEEN", "COUNT"]
        {
            assert!(header.contains(column), "{column} missing: {header}");
        }
    }
    controller.stop(Duration::from_secs(10)).await.unwrap();
    for agent in agents {
        agent.stop(Duration::from_secs(10)).await.unwrap();
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_creates_waits_for_and_deletes_a_job() {
    for binary in &kubectl_binaries() {
        exercise_jobs(binary).await;
    }
}

/// The documents of `deploy/update-operator.yaml` whose kinds the server serves (the RBAC and admission kinds
/// are not served yet), as one manifest.
async fn served_part_of_the_install_manifest(client: &kube::Client) -> String {
    let bundle =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/update-operator.yaml")).unwrap();
    let discovery = kube::discovery::Discovery::new(client.clone()).run().await.unwrap();
    let mut kept = Vec::new();
    for document in bundle.split("\n---\n") {
        let Ok(value) = yaml_serde::from_str::<serde_json::Value>(document) else { continue };
        let (Some(api_version), Some(kind)) = (value["apiVersion"].as_str(), value["kind"].as_str()) else { continue };
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        if discovery.resolve_gvk(&gvk).is_some() {
            kept.push(document.to_owned());
        }
    }
    kept.join("\n---\n")
}

/// Unknown fields in a built-in object and in a custom resource.
const MISSPELLED: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: misspelled\ndata:\n  a: b\ndatta: {}\n---\napiVersion: update.edgeless.systems/v1alpha1\nkind: NodeVersion\nmetadata:\n  name: misspelled\nspec:\n  image: img\n  rollout:\n    maxUnavailabl: 2\n";

async fn apply_validate_and_explain(binary: &Path) {
    let server = dev::apiserver::ApiServer::start(dev::apiserver::ApiServerConfig::default()).await.unwrap();
    let config = server.kubeconfig_path().to_owned();
    let dir = config.parent().unwrap().to_owned();
    let manifest = dir.join("install.yaml");
    std::fs::write(&manifest, served_part_of_the_install_manifest(&server.client()).await).unwrap();
    let manifest = manifest.to_str().unwrap();
    // Plain `kubectl apply`: kubectl validates (with the server's help) and needs the OpenAPI documents.
    let applied = kubectl_ok(binary, &config, &["apply", "-f", manifest]).await;
    for created in [
        "customresourcedefinition.apiextensions.k8s.io/nodeversions.update.edgeless.systems created",
        "namespace/update-operator created",
        "deployment.apps/update-operator-controller created",
        "daemonset.apps/update-operator-agent created",
    ] {
        assert!(applied.stdout.contains(created), "{}: no {created:?} in\n{}", binary.display(), applied.stdout);
    }
    // Applying again changes nothing.
    let again = kubectl_ok(binary, &config, &["apply", "-f", manifest]).await;
    assert!(again.stdout.contains("deployment.apps/update-operator-controller unchanged"), "{}", again.stdout);

    let misspelled = dir.join("misspelled.yaml");
    std::fs::write(&misspelled, MISSPELLED).unwrap();
    let refused = kubectl(binary, &config, &["apply", "-f", misspelled.to_str().unwrap()]).await;
    assert!(!refused.success, "{}: a misspelled field was applied", binary.display());
    for error in [
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"datta\"",
        "NodeVersion in version \"v1alpha1\" cannot be handled as a NodeVersion: strict decoding error: unknown field \"spec.rollout.maxUnavailabl\"",
    ] {
        assert!(refused.stderr.contains(error), "{}: no {error:?} in\n{}", binary.display(), refused.stderr);
    }

    let explained = kubectl_ok(binary, &config, &["explain", "nodeversion.spec.rollout"]).await;
    assert!(explained.stdout.contains("KIND:       NodeVersion"), "{}", explained.stdout);
    assert!(explained.stdout.contains("maxUnavailable"), "{}", explained.stdout);
    let explained = kubectl_ok(binary, &config, &["explain", "deployment.spec.strategy"]).await;
    assert!(explained.stdout.contains("rollingUpdate"), "{}", explained.stdout);
    // The v2 renderer reads the protobuf /openapi/v2.
    let explained =
        kubectl_ok(binary, &config, &["explain", "nodeversion.spec", "--output", "plaintext-openapiv2"]).await;
    assert!(explained.stdout.contains("RESOURCE: spec <Object>"), "{}", explained.stdout);
    assert!(explained.stdout.contains("kubernetesClusterVersion"), "{}", explained.stdout);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubectl_applies_the_install_manifest_validating_fields_and_explains_the_crds() {
    for binary in &kubectl_binaries() {
        apply_validate_and_explain(binary).await;
    }
}
