//! Aggregated ClusterRoles: the dev cluster's ClusterRole aggregation controller fills in the rules of a
//! ClusterRole with an `aggregationRule` from every ClusterRole its selectors match, and keeps them current as
//! roles are added, changed, relabelled and deleted; requests (through the product's client, kube), the
//! SubjectAccessReview and `kubectl auth can-i` see the result.
//!
//! Checked against kubernetes/kubernetes `pkg/controller/clusterroleaggregation/
//! clusterroleaggregation_controller.go` (rules of the matching roles sorted by name, each once, written by
//! server-side apply as `clusterrole-aggregation-controller`).

use crate::cluster_support;

use cluster_support::*;
use dev::apiserver::{Identity, Patch};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::Duration;

const LABEL: &str = "example.com/aggregate-to-gadget-reader";
const BOT: &str = "system:serviceaccount:team:bot";

fn cluster_role(value: Value) -> ClusterRole {
    serde_json::from_value(value).unwrap()
}

/// The resources the aggregated role's rules name, in order.
async fn aggregated(roles: &Api<ClusterRole>) -> Vec<String> {
    let role = roles.get("gadget-reader").await.unwrap();
    role.rules.unwrap_or_default().iter().map(|r| r.resources.clone().unwrap_or_default().join(",")).collect()
}

async fn wait_for_rules(roles: &Api<ClusterRole>, wanted: &[&str]) {
    let wanted: Vec<String> = wanted.iter().map(|s| (*s).to_owned()).collect();
    eventually(&format!("the aggregated rules are {wanted:?}"), || {
        let wanted = wanted.clone();
        async move { aggregated(roles).await == wanted }
    })
    .await;
}

/// What a SubjectAccessReview answers for the bot reading configmaps in `default`.
async fn reviewed(client: &kube::Client) -> bool {
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": BOT, "groups": ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"],
                 "resourceAttributes": {"namespace": "default", "verb": "list", "resource": "configmaps"}}});
    let request = http::Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&review).unwrap())
        .unwrap();
    let answer: Value = client.request(request).await.unwrap();
    answer["status"]["allowed"] == json!(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_rules_follow_the_selected_roles_and_authorize_requests() {
    let cluster = bare_cluster(1).await;
    let client = cluster.client();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let pp = PostParams::default();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap()).await.unwrap();
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "team");
    accounts.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "bot"}})).unwrap()).await.unwrap();
    let bot =
        kube::Client::try_from(cluster.server().kube_config_for(&Identity::service_account("team", "bot")).unwrap())
            .unwrap();
    let bot_config_maps: Api<ConfigMap> = Api::namespaced(bot.clone(), "default");

    roles
        .create(
            &pp,
            &cluster_role(json!({"metadata": {"name": "gadget-reader"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {LABEL: "true"}}]}})),
        )
        .await
        .unwrap();
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "bot-reads-gadgets"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gadget-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]});
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    bindings.create(&pp, &serde_json::from_value(binding).unwrap()).await.unwrap();
    // Nothing is selected yet: the role grants nothing.
    assert!(bot_config_maps.list(&ListParams::default()).await.is_err(), "the empty aggregated role granted a list");
    assert!(!reviewed(&client).await);

    // A selected role is added: its rules are aggregated, and the bot may list configmaps.
    roles
        .create(
            &pp,
            &cluster_role(json!({"metadata": {"name": "b-config-maps", "labels": {LABEL: "true"}},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]})),
        )
        .await
        .unwrap();
    // A role that is not selected adds nothing.
    roles
        .create(
            &pp,
            &cluster_role(json!({"metadata": {"name": "unrelated", "labels": {LABEL: "false"}},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]})),
        )
        .await
        .unwrap();
    wait_for_rules(&roles, &["configmaps"]).await;
    bot_config_maps.list(&ListParams::default()).await.expect("the aggregated rule grants the list");
    assert!(reviewed(&client).await);
    let written = roles.get("gadget-reader").await.unwrap();
    let managers: Vec<String> =
        written.metadata.managed_fields.unwrap_or_default().into_iter().filter_map(|m| m.manager).collect();
    assert!(managers.iter().any(|m| m == "clusterrole-aggregation-controller"), "{managers:?}");

    // A second role, earlier by name, with one rule already there: rules come by role name, each once.
    roles
        .create(
            &pp,
            &cluster_role(json!({"metadata": {"name": "a-pods", "labels": {LABEL: "true"}},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                      {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]})),
        )
        .await
        .unwrap();
    wait_for_rules(&roles, &["pods", "configmaps"]).await;

    // A changed role changes the aggregate.
    let store = cluster.store();
    let change = Patch::Merge(json!({"rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}));
    store.api::<ClusterRole>().patch(None, "a-pods", &change, &PatchParams::default()).unwrap();
    wait_for_rules(&roles, &["nodes", "configmaps"]).await;

    // Relabelled away: its rules go, and the bot loses the list.
    let relabel = Patch::Merge(json!({"metadata": {"labels": {LABEL: "no"}}}));
    store.api::<ClusterRole>().patch(None, "b-config-maps", &relabel, &PatchParams::default()).unwrap();
    wait_for_rules(&roles, &["nodes"]).await;
    assert!(!reviewed(&client).await);
    let refused = bot_config_maps.list(&ListParams::default()).await.unwrap_err();
    assert!(matches!(refused, kube::Error::Api(ref status) if status.code == 403), "{refused}");

    // Deleted: the aggregate is empty again.
    roles.delete("a-pods", &DeleteParams::default()).await.unwrap();
    wait_for_rules(&roles, &[]).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_sees_the_aggregated_rules() {
    let cluster = bare_cluster(1).await;
    let config = cluster.kubeconfig_path().to_owned();
    let dir = config.parent().unwrap().to_owned();
    let manifest = dir.join("roles.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "gadget-reader"},
         "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {LABEL: "true"}}]}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "config-maps", "labels": {LABEL: "true"}},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "jane-reads"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gadget-reader"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "jane"}]}]});
    std::fs::write(&manifest, serde_json::to_string(&list).unwrap()).unwrap();
    let kubectl = |args: Vec<String>| {
        let config = config.clone();
        async move {
            let output = tokio::time::timeout(
                Duration::from_secs(120),
                tokio::process::Command::new("kubectl").arg("--kubeconfig").arg(&config).args(&args).output(),
            )
            .await
            .expect("kubectl finishes")
            .expect("kubectl runs (CI installs it)");
            (
                String::from_utf8_lossy(&output.stdout).trim().to_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
    };
    let (out, err) = kubectl(vec!["apply".into(), "-f".into(), manifest.to_str().unwrap().into()]).await;
    assert!(out.contains("clusterrole.rbac.authorization.k8s.io/gadget-reader created"), "{out}{err}");
    let can_i =
        || kubectl(["auth", "can-i", "list", "configmaps", "--as", "jane", "-n", "default"].map(String::from).to_vec());
    eventually("kubectl auth can-i says yes", || async { can_i().await.0 == "yes" }).await;
    let (out, _) = kubectl(
        ["get", "clusterrole", "gadget-reader", "-o", "jsonpath={.rules[*].resources}"].map(String::from).to_vec(),
    )
    .await;
    assert_eq!(out, "[\"configmaps\"]");
    let (_, err) = kubectl(
        ["label", "clusterrole", "config-maps", &format!("{LABEL}=false"), "--overwrite"].map(String::from).to_vec(),
    )
    .await;
    assert!(err.is_empty(), "{err}");
    eventually("kubectl auth can-i says no", || async { can_i().await.0 == "no" }).await;
    cluster.shutdown().await;
}
