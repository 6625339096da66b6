//! The operator runs with exactly what `deploy/operator.yaml` grants: a whole rollout succeeds under the manifest's
//! service accounts, RBAC and ValidatingAdmissionPolicy; every rule of its roles is needed by some request of that
//! rollout; an agent's token changes only its own Node's agent annotations.

use crate::support;

use dev::apiserver::{AccessRecord, Identity};
use dev::harness;
use dev::operator::Manifest;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use shared::protocol::keys;
use std::time::Duration;
use support::{bare_cluster, create_version, eventually, operator, rolled_out, stop_all, user_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_needs_every_rule_of_the_manifest_and_nothing_else() {
    let cluster = support::full_cluster_with(|config| {
        config.nodes = 5;
        config.control_planes = 1;
    })
    .await;
    let log = cluster.server().access_log();
    log.start();
    let store = cluster.store();
    let agents = support::start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 2}));
    let status = eventually(Duration::from_secs(240), "the rollout", || rolled_out(&store, 5)).await;
    assert_eq!(status.counts.failed + status.counts.blocked, 0);
    let mut components = agents;
    components.push(controller);
    stop_all(components).await;

    let records = log.records();
    let denied: Vec<&AccessRecord> = records.iter().filter(|r| !r.allowed).collect();
    assert!(denied.is_empty(), "requests the manifest does not allow: {denied:#?}");
    let manifest = Manifest::operator().unwrap();
    for identity in [manifest.controller_identity().unwrap(), manifest.agent_identity("worker-0").unwrap()] {
        let Identity::ServiceAccount { namespace, name, .. } = identity else { unreachable!() };
        let username = format!("system:serviceaccount:{namespace}:{name}");
        assert!(records.iter().any(|r| r.user == username), "no request of {username} was recorded");
    }
    // Each rule in turn: without it, some request of the rollout is denied (or the rule is unneeded). The
    // rules of the scaling-group controllers, which run only with `--cloud-provider`, are not exercised by an
    // in-place rollout; dev/tests/it/scaling_groups.rs runs those controllers under the manifest's RBAC. Nor is the
    // reading of components ConfigMaps, which Kubernetes upgrades need (dev/tests/e2e_kubeadm.rs checks that one).
    // Nor the writes of NodeOps and their status, which only NodeOps need (dev/tests/e2e_nodeop.rs runs them under
    // the manifest's RBAC; their watches, which every controller runs, are exercised here).
    let cloud_only = |rule: &String| {
        let nodeop_writes = ["\"resources\":[\"nodeops\"]", "\"nodeops/status\""];
        ["scalinggroups", "pendingnodes", "autoscalingstrategies", "\"deployments\"", "\"configmaps\""]
            .iter()
            .chain(&nodeop_writes)
            .any(|r| rule.contains(r))
    };
    let unneeded: Vec<String> = manifest
        .role_rules()
        .iter()
        .filter(|rule| !cloud_only(&rule.to_string()))
        .filter(|rule| {
            let rbac = manifest.without(rule).rbac();
            !records.iter().any(|r| !rbac.authorize(&user_of(r), &r.attributes).allowed)
        })
        .map(ToString::to_string)
        .collect();
    assert!(unneeded.is_empty(), "rules no request of a rollout needs: {unneeded:#?}");
    // And the manifest's RBAC alone allows every recorded request (the bootstrap roles grant none of them).
    let rbac = manifest.rbac();
    for record in &records {
        assert!(rbac.authorize(&user_of(record), &record.attributes).allowed, "{record:?}");
    }
    cluster.shutdown().await;
}

fn status_message(error: kube::Error) -> (u16, String) {
    match error {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_token_changes_only_the_agent_annotations_of_its_own_node() {
    let server = bare_cluster(&["w-0", "w-1"]).await;
    let access = operator(&server);
    let manifest = access.manifest();
    let agent = server.client_as(&manifest.agent_identity("w-0").unwrap()).unwrap();
    let nodes: Api<Node> = Api::all(agent);
    let patch = |annotations: Value| Patch::Merge(json!({"metadata": {"annotations": annotations}}));
    let params = PatchParams::default();

    // Its own agent keys: allowed.
    for key in keys::AGENT_KEYS {
        nodes.patch("w-0", &params, &patch(json!({*key: "x"}))).await.unwrap_or_else(|e| panic!("{key}: {e}"));
    }
    // Another node: the policy's first validation.
    let (code, message) =
        status_message(nodes.patch("w-1", &params, &patch(json!({keys::STATE: "x"}))).await.unwrap_err());
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "nodes \"w-1\" is forbidden: ValidatingAdmissionPolicy 'update-operator-agent-own-node' with binding \
         'update-operator-agent-own-node' denied request: the update-operator agent may only modify the Node it runs on"
    );
    // The controller's annotations, labels and spec of its own node.
    let own_annotations = "the update-operator agent may only change its own annotations";
    let spec_or_labels = "the update-operator agent may not change a Node's spec or labels";
    let attempts = [
        (patch(json!({keys::INTENT: "stage"})), own_annotations),
        (patch(json!({keys::CORDONED_BY: "agent"})), own_annotations),
        (patch(json!({"some.other/annotation": "x"})), own_annotations),
        (Patch::Merge(json!({"metadata": {"labels": {keys::MANAGED_LABEL: "false"}}})), spec_or_labels),
        (Patch::Merge(json!({"spec": {"unschedulable": true}})), spec_or_labels),
        // The taint of outdated nodes is the controller's (`preferUpdatedNodes`).
        (
            Patch::Merge(
                json!({"spec": {"taints": [{"key": "update.edgeless.systems/outdated", "effect": "PreferNoSchedule"}]}}),
            ),
            spec_or_labels,
        ),
    ];
    for (attempt, expected) in attempts {
        let (code, message) = status_message(nodes.patch("w-0", &params, &attempt).await.unwrap_err());
        assert_eq!(code, 422, "{message}");
        assert!(message.ends_with(&format!("denied request: {expected}")) || message.contains(expected), "{message}");
    }
    // What RBAC does not grant at all: the status subresource, deletes.
    let (code, message) = status_message(
        nodes.patch_status("w-0", &params, &Patch::Merge(json!({"status": {"phase": "x"}}))).await.unwrap_err(),
    );
    assert_eq!(code, 403);
    assert_eq!(
        message,
        "nodes \"w-0\" is forbidden: User \"system:serviceaccount:update-operator:update-operator-agent\" cannot \
         patch resource \"nodes/status\" in API group \"\" at the cluster scope"
    );
    let (code, _) = status_message(nodes.delete("w-0", &DeleteParams::default()).await.unwrap_err());
    assert_eq!(code, 403);
    // The same service account without a node-bound token is refused even on w-0.
    let (namespace, name) = ("update-operator", "update-operator-agent");
    let unbound = server.client_as(&Identity::service_account(namespace, name)).unwrap();
    let (code, message) = status_message(
        Api::<Node>::all(unbound).patch("w-0", &params, &patch(json!({keys::STATE: "y"}))).await.unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(message.ends_with("the update-operator agent may only modify the Node it runs on"), "{message}");
    // The controller writes its own keys and cordons (the policy is about the agent only).
    let controller = server.client_as(&manifest.controller_identity().unwrap()).unwrap();
    let nodes: Api<Node> = Api::all(controller);
    nodes.patch("w-0", &params, &patch(json!({keys::INTENT: "stage"}))).await.unwrap();
    nodes.patch("w-0", &params, &Patch::Merge(json!({"spec": {"unschedulable": true}}))).await.unwrap();
    // It deletes the Node of a node it replaced (issue 12): RBAC grants node deletes to the controller.
    nodes.delete("w-1", &DeleteParams::default()).await.expect("the controller may delete a replaced node");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_token_stops_working_when_its_node_is_deleted() {
    let server = bare_cluster(&["w-0"]).await;
    let access = operator(&server);
    let token = access.agent_token("w-0").unwrap();
    let user = server.user_of_token(&token).unwrap();
    assert_eq!(user.extra_value("authentication.kubernetes.io/node-name"), Some("w-0"));
    server.store().api::<Node>().delete(None, "w-0", &DeleteParams::default()).unwrap();
    assert_eq!(server.user_of_token(&token).unwrap_err().code, 401);
    server.shutdown().await;
}

/// Components ConfigMaps (issue 14): the controller and the agent may `get` ConfigMaps of kube-system, where
/// they live, and nothing else of ConfigMaps: no other namespace, no list or watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_identities_read_configmaps_of_kube_system_by_name_only() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    let server = bare_cluster(&["w-0"]).await;
    let store = server.store();
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    store.api::<Namespace>().create(None, &namespace, &Default::default()).unwrap();
    for namespace in ["kube-system", "update-operator", "team", "default"] {
        let config_map: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": "k8s-components-sha256-aa"}, "data": {"x": "y"}}))
                .unwrap();
        store.api::<ConfigMap>().create(Some(namespace), &config_map, &Default::default()).unwrap();
    }
    let manifest = operator(&server).manifest().clone();
    for identity in [manifest.controller_identity().unwrap(), manifest.agent_identity("w-0").unwrap()] {
        let client = server.client_as(&identity).unwrap();
        let kube_system: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
        kube_system.get("k8s-components-sha256-aa").await.unwrap_or_else(|e| panic!("{identity:?}: {e}"));
        let (code, _) = status_message(kube_system.list(&Default::default()).await.unwrap_err());
        assert_eq!(code, 403, "{identity:?} lists kube-system's ConfigMaps");
        for namespace in ["update-operator", "team", "default"] {
            let other: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            let (code, message) = status_message(other.get("k8s-components-sha256-aa").await.unwrap_err());
            assert_eq!(code, 403, "{identity:?} reads a ConfigMap of {namespace}: {message}");
        }
        let (code, _) = status_message(Api::<ConfigMap>::all(client).list(&Default::default()).await.unwrap_err());
        assert_eq!(code, 403, "{identity:?} lists every ConfigMap");
    }
    server.shutdown().await;
}
