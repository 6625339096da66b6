//! The install manifests as users apply them: `kubectl kustomize deploy/` renders `deploy/update-operator.yaml`;
//! rendered into any namespace, the agents' ValidatingAdmissionPolicy (evaluated by the dev cluster's CEL engine)
//! lets an agent change only its own annotations on its own Node; the command-backend component renders a
//! deployable agent; and the controller gives agents no work while the policy is missing.
//!
//! These tests run the `kubectl` on PATH (its built-in kustomize); without one they fail: CI installs it.

use crate::support;

use dev::apiserver::{ApiServer, Identity};
use dev::harness;
use dev::operator::Manifest;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use shared::crd::NodeVersion;
use shared::protocol::keys;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::{bare_cluster_with, create_version, eventually};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `kubectl kustomize DIR` (DIR relative to the repository).
///
/// kustomize (5.5, in kubectl 1.32) does not know that ValidatingAdmissionPolicy and its binding are
/// cluster-scoped and gives them the kustomization's namespace; kubectl and the API server drop a namespace on a
/// cluster-scoped object, so it is dropped here too for the kinds the committed bundle has without one.
fn kustomize(dir: &str) -> Manifest {
    let output = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(repo().join(dir))
        .output()
        .unwrap_or_else(|e| panic!("cannot run kubectl (CI installs it; these tests need its kustomize): {e}"));
    assert!(output.status.success(), "kubectl kustomize {dir}: {}", String::from_utf8_lossy(&output.stderr));
    let rendered = Manifest::parse(&String::from_utf8(output.stdout).unwrap()).unwrap();
    let cluster_scoped: Vec<Value> = bundle()
        .documents()
        .iter()
        .filter(|d| d["metadata"].get("namespace").is_none())
        .map(|d| d["kind"].clone())
        .collect();
    let mut yaml = String::new();
    for document in rendered.documents() {
        let mut document = document.clone();
        if cluster_scoped.contains(&document["kind"])
            && let Some(metadata) = document["metadata"].as_object_mut()
        {
            metadata.remove("namespace");
        }
        yaml.push_str(&format!("---\n{}\n", serde_json::to_string(&document).unwrap()));
    }
    Manifest::parse(&yaml).unwrap()
}

/// `value` with every integral float as an integer (YAML writers differ: `0.0` and `0` are the same number).
fn integral(value: &Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => json!(f as i64),
            _ => value.clone(),
        },
        Value::Array(items) => Value::Array(items.iter().map(integral).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), integral(v))).collect()),
        other => other.clone(),
    }
}

/// `deploy/update-operator.yaml` as committed.
fn bundle() -> Manifest {
    Manifest::parse(&std::fs::read_to_string(repo().join("deploy/update-operator.yaml")).unwrap()).unwrap()
}

#[test]
fn kustomize_renders_the_committed_bundle() {
    let rendered = kustomize("deploy");
    let bundle = bundle();
    let names = |m: &Manifest| -> Vec<String> {
        m.documents().iter().map(|d| format!("{} {}", d["kind"], d["metadata"]["name"])).collect()
    };
    assert_eq!(names(&rendered), names(&bundle), "deploy/kustomization.yaml lists other objects than the bundle");
    for (rendered, committed) in rendered.documents().iter().zip(bundle.documents()) {
        assert_eq!(
            integral(rendered),
            integral(committed),
            "kubectl kustomize deploy/ renders {} differently",
            committed["kind"]
        );
    }
}

/// Grants the agent's service account (of `namespace`) writes RBAC does not give it, so that the policy alone
/// decides them: status patches, deletes and creates of nodes.
async fn grant_more_than_the_manifest(server: &ApiServer, namespace: &str) {
    let admin = server.client();
    let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": "test-agent-extra"},
        "rules": [{"apiGroups": [""], "resources": ["nodes", "nodes/status"],
                   "verbs": ["create", "delete", "patch", "update"]}]}))
    .unwrap();
    Api::<ClusterRole>::all(admin.clone()).create(&PostParams::default(), &role).await.unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(json!({"metadata": {"name": "test-agent-extra"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "test-agent-extra"},
        "subjects": [{"kind": "ServiceAccount", "name": "update-operator-agent", "namespace": namespace}]}))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin).create(&PostParams::default(), &binding).await.unwrap();
}

fn denied_by_policy(result: Result<Node, kube::Error>, what: &str) -> String {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{what}: {}", status.message);
            assert!(
                status.message.contains("ValidatingAdmissionPolicy 'update-operator-agent-own-node'"),
                "{what}: {}",
                status.message
            );
            status.message
        }
        Ok(_) => panic!("{what}: allowed"),
        Err(other) => panic!("{what}: {other}"),
    }
}

/// What the policy allows and denies an agent of `manifest` (rendered for any namespace) on node w-0.
async fn the_policy_confines_the_agent(manifest: &Manifest) {
    let server = bare_cluster_with(&["w-0", "w-1"], manifest).await;
    let agent_identity = manifest.agent_identity("w-0").unwrap();
    let Identity::ServiceAccount { namespace, .. } = &agent_identity else { unreachable!() };
    grant_more_than_the_manifest(&server, namespace).await;
    let admin: Api<Node> = Api::all(server.client());
    let params = PatchParams::default();
    // Owners and finalizers for the checks below that would remove them.
    let owned = json!({"metadata": {"finalizers": ["example.com/keep"], "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "d9607e19-f88f-11e6-a518-42010a800195"}]}});
    admin.patch("w-0", &params, &Patch::Merge(&owned)).await.unwrap();
    let nodes: Api<Node> = Api::all(server.client_as(&agent_identity).unwrap());
    let annotate = |annotations: Value| Patch::Merge(json!({"metadata": {"annotations": annotations}}));

    for key in keys::AGENT_KEYS {
        nodes.patch("w-0", &params, &annotate(json!({*key: "x"}))).await.unwrap_or_else(|e| panic!("{key}: {e}"));
    }
    let attempts = [
        ("another node", "w-1", annotate(json!({keys::STATE: "x"}))),
        ("the controller's intent", "w-0", annotate(json!({keys::INTENT: "stage"}))),
        ("another annotation", "w-0", annotate(json!({"example.com/other": "x"}))),
        ("a label", "w-0", Patch::Merge(json!({"metadata": {"labels": {keys::MANAGED_LABEL: "false"}}}))),
        ("the spec", "w-0", Patch::Merge(json!({"spec": {"unschedulable": true}}))),
        (
            "an ownerReference",
            "w-0",
            Patch::Merge(json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                "name": "gone", "uid": "00000000-0000-0000-0000-000000000001"}]}})),
        ),
        ("removed ownerReferences", "w-0", Patch::Merge(json!({"metadata": {"ownerReferences": null}}))),
        ("a finalizer", "w-0", Patch::Merge(json!({"metadata": {"finalizers": ["example.com/keep", "x.io/y"]}}))),
        ("removed finalizers", "w-0", Patch::Merge(json!({"metadata": {"finalizers": null}}))),
    ];
    for (what, node, patch) in attempts {
        denied_by_policy(nodes.patch(node, &params, &patch).await, what);
    }
    let status = Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
    let message = denied_by_policy(nodes.patch_status("w-0", &params, &status).await, "nodes/status");
    assert!(message.contains("not create, delete or write its status"), "{message}");
    let new_node: Node = serde_json::from_value(json!({"metadata": {"name": "w-9"}})).unwrap();
    match nodes.create(&PostParams::default(), &new_node).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 422, "create: {}", status.message),
        other => panic!("create: {other:?}"),
    }
    match nodes.delete("w-0", &DeleteParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 422, "delete: {}", status.message),
        other => panic!("delete: {:?}", other.map(|_| ())),
    }
    // The annotations the agent set are still there; nothing else changed.
    let node = admin.get("w-0").await.unwrap();
    assert_eq!(node.metadata.finalizers, Some(vec!["example.com/keep".to_owned()]));
    assert_eq!(node.metadata.owner_references.map(|o| o.len()), Some(1));
    assert_eq!(node.metadata.annotations.unwrap_or_default().get(keys::STATE).map(String::as_str), Some("x"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_policy_confines_the_agent_in_the_default_namespace() {
    the_policy_confines_the_agent(&kustomize("deploy")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_policy_confines_the_agent_in_any_namespace() {
    let manifest = kustomize("dev/tests/fixtures/kustomize/elsewhere");
    assert_eq!(
        manifest.agent_identity("w-0").unwrap(),
        Identity::service_account_on("elsewhere", "update-operator-agent", "w-0")
    );
    the_policy_confines_the_agent(&manifest).await;
}

/// The components ConfigMaps' Role stays in kube-system whatever namespace the install is rendered into, and is
/// bound to that install's service accounts: they read ConfigMaps there and nowhere else.
#[test]
fn the_components_role_stays_in_kube_system_in_any_namespace() {
    use dev::apiserver::{Attributes, UserInfo};
    for (dir, namespace) in [("deploy", "update-operator"), ("dev/tests/fixtures/kustomize/elsewhere", "elsewhere")] {
        let manifest = kustomize(dir);
        let role = manifest
            .documents()
            .iter()
            .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == "update-operator-kubernetes-components")
            .unwrap_or_else(|| panic!("{dir}: no Role for the components ConfigMaps"));
        assert_eq!(role["metadata"]["namespace"], "kube-system", "{dir}");
        let rbac = manifest.rbac();
        for account in ["update-operator-controller", "update-operator-agent"] {
            let user = UserInfo::service_account(namespace, account, "");
            let get =
                |ns: &str| Attributes::resource("get", "", "v1", "configmaps", "", ns, "k8s-components-sha256-aa");
            assert!(rbac.authorize(&user, &get("kube-system")).allowed, "{dir}: {account} cannot read kube-system");
            for other in [namespace, "default"] {
                assert!(!rbac.authorize(&user, &get(other)).allowed, "{dir}: {account} reads ConfigMaps of {other}");
            }
            let list = Attributes::resource("list", "", "v1", "configmaps", "", "kube-system", "");
            assert!(!rbac.authorize(&user, &list).allowed, "{dir}: {account} lists ConfigMaps");
        }
    }
}

fn first<'a>(manifest: &'a Manifest, kind: &str) -> &'a Value {
    manifest.documents().iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn the_command_backend_component_mounts_its_configuration_and_runs_in_the_hosts_pid_namespace() {
    let manifest = kustomize("dev/tests/fixtures/kustomize/command-backend");
    let agent = first(&manifest, "DaemonSet");
    let pod = &agent["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    assert!(pod.get("hostNetwork").is_none());
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "registry.example/update-operator:v9");
    assert_eq!(container["securityContext"]["privileged"], true);
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let config_path = args[args.iter().position(|a| *a == "--host-command-config").unwrap() + 1];
    // The mounted ConfigMap is the generated one, and it holds a configuration the agent accepts.
    let volumes = pod["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 1, "only the commands' ConfigMap: {volumes:?}");
    let config_map = first(&manifest, "ConfigMap");
    assert_eq!(volumes[0]["configMap"]["name"], config_map["metadata"]["name"]);
    let mount = &container["volumeMounts"][0];
    let file = config_path.strip_prefix(&format!("{}/", mount["mountPath"].as_str().unwrap())).unwrap();
    let json = config_map["data"][file].as_str().unwrap();
    agent::host::command::CommandConfig::from_json(json, Path::new(file)).unwrap();
    assert!(json.contains("\"nsenter\": true"));
    // The ServiceMonitor selects the metrics Service.
    let monitor = first(&manifest, "ServiceMonitor");
    let service = first(&manifest, "Service");
    assert_eq!(monitor["metadata"]["namespace"], "hosts");
    for (key, value) in monitor["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&service["metadata"]["labels"][key], value);
    }
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], service["spec"]["ports"][0]["name"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_updates_no_node_while_the_agent_policy_is_missing() {
    let cluster = support::full_cluster_with(|config| {
        config.nodes = 2;
        config.control_planes = 1;
        config.workloads = None;
    })
    .await;
    let admin = cluster.server().client();
    let policies = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
    let path = format!("{policies}/update-operator-agent-own-node");
    let policy: Value = admin.request(http::Request::get(&path).body(vec![]).unwrap()).await.unwrap();
    admin.request_text(http::Request::delete(&path).body(vec![]).unwrap()).await.unwrap();
    let store = cluster.store();
    let agents = support::start_agents(&cluster);
    let log = cluster.server().request_log();
    log.enable(100_000);
    // Two replicas: only the one holding the lease writes the condition.
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let standby = harness::controller(cluster.operator(), harness::controller_options("c2"));
    create_version(&store, "v2", json!({}));
    let condition = eventually(Duration::from_secs(60), "the AgentPolicyMissing condition", || {
        let status = store.api::<NodeVersion>().get(None, "constellation-version").ok()?.status?;
        status.conditions.into_iter().find(|c| c.reason == "AgentPolicyMissing")
    })
    .await;
    assert_eq!((condition.type_.as_str(), condition.status.as_str()), ("Progressing", "False"));
    assert!(condition.message.contains("Kubernetes 1.30"), "{}", condition.message);
    let leader = harness::lease_holder(&store).expect("the condition is written by a leader");
    let writers: std::collections::BTreeSet<String> = log
        .entries()
        .into_iter()
        .filter(|e| e.request.resource == "nodeversions" && e.request.verb.is_write() && e.succeeded())
        .map(|e| e.request.user_agent)
        .collect();
    assert_eq!(writers, [controller::user_agent(&leader)].into(), "a replica that does not lead wrote");
    // The agents report, but no node gets an intent while the policy is missing.
    eventually(Duration::from_secs(60), "the agents' reports", || {
        let nodes = store.api::<Node>().list(None, &Default::default()).ok()?;
        nodes
            .items
            .iter()
            .all(|n| n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(keys::OS_IMAGE)))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let intents = |store: &dev::apiserver::Store| -> usize {
        let nodes = store.api::<Node>().list(None, &Default::default()).unwrap();
        nodes
            .items
            .iter()
            .filter(|n| n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(keys::INTENT)))
            .count()
    };
    assert_eq!(intents(&store), 0, "an intent was given while the agents are unconfined");
    // Once the policy is back, the rollout starts.
    let mut policy = policy;
    policy["metadata"] = json!({"name": "update-operator-agent-own-node"});
    let create = http::Request::post(policies)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&policy).unwrap())
        .unwrap();
    admin.request_text(create).await.unwrap();
    eventually(Duration::from_secs(120), "an intent", || (intents(&store) > 0).then_some(())).await;
    let mut components = agents;
    components.extend([controller, standby]);
    support::stop_all(components).await;
    cluster.shutdown().await;
}
