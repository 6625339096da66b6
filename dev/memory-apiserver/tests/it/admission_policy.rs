//! ValidatingAdmissionPolicy over HTTP: matching, match conditions, variables, messages, reasons, failure policies,
//! validation actions and the inputs (`object`, `oldObject`, `request`), with upstream's denial bodies.

use crate::common;

use common::*;
use kube::api::{DeleteParams, PostParams};
use memory_apiserver::{ApiServer, Gvr, Identity, Patch, UserInfo};
use serde_json::{Value, json};

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

/// A policy on ConfigMaps in `spec` terms, bound with `actions`.
async fn policy(server: &ApiServer, name: &str, spec: Value, actions: &[&str]) {
    let mut spec = spec;
    if spec.get("matchConstraints").is_none() {
        spec["matchConstraints"] = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["configmaps"]}]});
    }
    let admin = server.client();
    let created =
        raw(&admin, "POST", POLICIES, Some("application/json"), json!({"metadata": {"name": name}, "spec": spec}))
            .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let binding = json!({"metadata": {"name": format!("{name}-binding")}, "spec": {"policyName": name, "validationActions": actions}});
    let created = raw(&admin, "POST", BINDINGS, Some("application/json"), binding).await;
    assert_eq!(created.status, 201, "{}", created.text);
}

async fn create_map(client: &kube::Client, name: &str, labels: Value, data: Value) -> Raw {
    let body = json!({"metadata": {"name": name, "labels": labels}, "data": data});
    raw(client, "POST", "/api/v1/namespaces/default/configmaps", Some("application/json"), body).await
}

#[tokio::test]
async fn a_false_validation_denies_with_upstreams_body() {
    let server = server().await;
    policy(
        &server,
        "size-limit",
        json!({"validations": [
            {"expression": "!has(object.data) || size(object.data) <= 1", "message": "at most one key"},
            {"expression": "object.metadata.name != 'forbidden'", "reason": "Forbidden",
             "messageExpression": "'the name ' + object.metadata.name + ' is taken'"},
            {"expression": "object.metadata.name != 'plain'"}
        ]}),
        &["Deny"],
    )
    .await;
    let admin = server.client();
    assert_eq!(create_map(&admin, "ok", json!({}), json!({"a": "1"})).await.status, 201);
    let denied = create_map(&admin, "big", json!({}), json!({"a": "1", "b": "2"})).await;
    assert_eq!(denied.status, 422);
    let message =
        "ValidatingAdmissionPolicy 'size-limit' with binding 'size-limit-binding' denied request: at most one key";
    assert_eq!(
        denied.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("configmaps \"big\" is forbidden: {message}"), "reason": "Invalid",
            "details": {"name": "big", "kind": "configmaps", "causes": [{"message": message}]}, "code": 422})
    );
    let forbidden = create_map(&admin, "forbidden", json!({}), json!({})).await;
    assert_eq!(forbidden.status, 403);
    assert_eq!(forbidden.json()["reason"], "Forbidden");
    assert!(forbidden.json()["message"].as_str().unwrap().ends_with("denied request: the name forbidden is taken"));
    let plain = create_map(&admin, "plain", json!({}), json!({})).await;
    assert!(
        plain.json()["message"]
            .as_str()
            .unwrap()
            .ends_with("denied request: failed expression: object.metadata.name != 'plain'")
    );
    // Updates are checked too; a dry run is admitted or denied the same way.
    let update = raw(
        &admin,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/ok?dryRun=All",
        Some("application/merge-patch+json"),
        json!({"data": {"b": "2"}}),
    )
    .await;
    assert_eq!(update.status, 422, "{}", update.text);
    // Removing the binding lifts the policy at once.
    server
        .store()
        .delete(
            &Gvr::new("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings"),
            None,
            "size-limit-binding",
            &DeleteParams::default(),
        )
        .unwrap();
    assert_eq!(create_map(&admin, "big", json!({}), json!({"a": "1", "b": "2"})).await.status, 201);
    server.shutdown().await;
}

#[tokio::test]
async fn old_object_request_and_variables_are_the_inputs() {
    let server = server().await;
    policy(&server, "immutable-owner", json!({
        "matchConditions": [{"name": "not-the-admin", "expression": "!('system:masters' in request.userInfo.groups)"}],
        "variables": [
            {"name": "owner", "expression": "has(object.data) && 'owner' in object.data ? object.data.owner : ''"},
            {"name": "caller", "expression": "request.userInfo.username.split(':')[3]"},
            {"name": "broken", "expression": "object.no.such.field"}
        ],
        "validations": [
            {"expression": "request.operation != 'CREATE' || oldObject == null", "message": "oldObject on create"},
            {"expression": "request.operation != 'DELETE' || (object == null && oldObject.metadata.name == request.name)", "message": "delete inputs"},
            {"expression": "request.operation == 'DELETE' || variables.owner == variables.caller", "messageExpression": "'owner must be ' + variables.caller"},
            {"expression": "request.operation != 'UPDATE' || oldObject.data.owner == object.data.owner", "message": "the owner is immutable"}
        ]
    }), &["Deny"]).await;
    let admin = server.client();
    let bot = server.client_as(&Identity::service_account("default", "bot")).unwrap();
    // RBAC for the bot: configmaps in default.
    server
        .store()
        .create(
            &Gvr::new("rbac.authorization.k8s.io", "v1", "rolebindings"),
            Some("default"),
            json!({
        "metadata": {"name": "bot-admin"}, "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "default"}]}),
            &PostParams::default(),
        )
        .unwrap();
    // The admin is not matched; the bot is.
    assert_eq!(create_map(&admin, "admins", json!({}), json!({"owner": "someone"})).await.status, 201);
    let wrong = create_map(&bot, "mine", json!({}), json!({"owner": "someone"})).await;
    assert_eq!(wrong.status, 422, "{}", wrong.text);
    assert!(wrong.json()["message"].as_str().unwrap().ends_with("denied request: owner must be bot"), "{}", wrong.text);
    assert_eq!(create_map(&bot, "mine", json!({}), json!({"owner": "bot"})).await.status, 201);
    let changed = raw(
        &bot,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/mine",
        Some("application/merge-patch+json"),
        json!({"data": {"owner": "other"}}),
    )
    .await;
    assert_eq!(changed.status, 422);
    assert!(changed.text.contains("owner must be bot"), "{}", changed.text);
    let deleted = raw(&bot, "DELETE", "/api/v1/namespaces/default/configmaps/mine", None, Value::Null).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    server.shutdown().await;
}

#[tokio::test]
async fn failure_policy_decides_what_an_error_does_and_warn_adds_a_header() {
    let server = server().await;
    let erroring = |failure: &str| {
        json!({"failurePolicy": failure,
        "validations": [{"expression": "object.data.missing == 'x'"}]})
    };
    policy(&server, "fails-closed", erroring("Fail"), &["Deny"]).await;
    let admin = server.client();
    let denied = create_map(&admin, "a", json!({"policy": "closed"}), json!({"k": "v"})).await;
    assert_eq!(denied.status, 422);
    assert!(
        denied.json()["message"]
            .as_str()
            .unwrap()
            .contains("denied request: expression 'object.data.missing == 'x'' resulted in error: "),
        "{}",
        denied.text
    );
    server
        .store()
        .delete(
            &Gvr::new("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies"),
            None,
            "fails-closed",
            &DeleteParams::default(),
        )
        .unwrap();
    policy(&server, "fails-open", erroring("Ignore"), &["Deny"]).await;
    assert_eq!(create_map(&admin, "a", json!({}), json!({"k": "v"})).await.status, 201);

    policy(&server, "labelled", json!({"validations": [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels", "message": "needs a team label"}]}), &["Warn", "Audit"]).await;
    let warned = create_map(&admin, "b", json!({}), json!({})).await;
    assert_eq!(warned.status, 201);
    assert_eq!(
        warned.headers.get("warning").and_then(|v| v.to_str().ok()),
        Some(
            "299 - \"Validation failed for ValidatingAdmissionPolicy 'labelled' with binding 'labelled-binding': needs a team label\""
        )
    );
    let quiet = create_map(&admin, "c", json!({"team": "x"}), json!({})).await;
    assert!(quiet.headers.get("warning").is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn constraints_select_operations_subresources_and_labels() {
    let server = server().await;
    let admin = server.client();
    namespace(&admin, "guarded").await;
    raw(
        &admin,
        "PATCH",
        "/api/v1/namespaces/guarded",
        Some("application/merge-patch+json"),
        json!({"metadata": {"labels": {"guard": "on"}}}),
    )
    .await;
    policy(&server, "guard", json!({
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"guard": "on"}},
            "objectSelector": {"matchExpressions": [{"key": "exempt", "operator": "DoesNotExist"}]}
        },
        "validations": [{"expression": "false", "message": "guarded"}]
    }), &["Deny"]).await;
    assert_eq!(create_map(&admin, "x", json!({}), json!({})).await.status, 201, "another namespace");
    let in_guarded = |name: &str, labels: Value| {
        let body = json!({"metadata": {"name": name, "labels": labels}});
        let admin = admin.clone();
        async move { raw(&admin, "POST", "/api/v1/namespaces/guarded/configmaps", Some("application/json"), body).await }
    };
    assert_eq!(in_guarded("y", json!({})).await.status, 422);
    assert_eq!(in_guarded("y", json!({"exempt": "yes"})).await.status, 201);
    // UPDATE is not selected.
    let update = raw(
        &admin,
        "PATCH",
        "/api/v1/namespaces/guarded/configmaps/y",
        Some("application/merge-patch+json"),
        json!({"metadata": {"labels": {"exempt": null}}}),
    )
    .await;
    assert_eq!(update.status, 200, "{}", update.text);

    // Subresources are selected only when named: nodes/status.
    let store = server.store();
    store
        .create(&Gvr::new("", "v1", "nodes"), None, json!({"metadata": {"name": "n1"}}), &PostParams::default())
        .unwrap();
    policy(&server, "status-only", json!({
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes/status"]}]},
        "validations": [{"expression": "request.subResource == 'status' && false", "message": "no status writes"}]
    }), &["Deny"]).await;
    let main = raw(
        &admin,
        "PATCH",
        "/api/v1/nodes/n1",
        Some("application/merge-patch+json"),
        json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await;
    assert_eq!(main.status, 200, "{}", main.text);
    let status = raw(
        &admin,
        "PATCH",
        "/api/v1/nodes/n1/status",
        Some("application/merge-patch+json"),
        json!({"status": {"phase": "Running"}}),
    )
    .await;
    assert_eq!(status.status, 422, "{}", status.text);
    assert!(status.text.contains("no status writes"));
    server.shutdown().await;
}

#[tokio::test]
async fn policies_are_validated_and_the_server_itself_is_not_admitted() {
    let server = server().await;
    let admin = server.client();
    let broken = raw(&admin, "POST", POLICIES, Some("application/json"), json!({"metadata": {"name": "broken"}, "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
        "validations": [{"expression": "object.("}]}})).await;
    assert_eq!(broken.status, 422);
    assert!(broken.json()["message"].as_str().unwrap().starts_with(
        "ValidatingAdmissionPolicy.admissionregistration.k8s.io \"broken\" is invalid: spec.validations[0].expression: Invalid value: \"object.(\": compilation failed"
    ), "{}", broken.text);
    let both = raw(
        &admin,
        "POST",
        BINDINGS,
        Some("application/json"),
        json!({"metadata": {"name": "b"},
        "spec": {"policyName": "p", "validationActions": ["Deny", "Warn"]}}),
    )
    .await;
    assert_eq!(both.status, 422);
    // Defaults as upstream fills them.
    policy(&server, "deny-all", json!({"validations": [{"expression": "false"}]}), &["Deny"]).await;
    let stored = raw(&admin, "GET", &format!("{POLICIES}/deny-all"), None, Value::Null).await.json();
    assert_eq!(stored["spec"]["failurePolicy"], "Fail");
    assert_eq!(stored["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
    // The server's own writers (the in-process store without a user) are not admitted; a store acting as a user
    // is, with the same denial.
    let maps = Gvr::new("", "v1", "configmaps");
    server
        .store()
        .create(&maps, Some("default"), json!({"metadata": {"name": "internal"}}), &PostParams::default())
        .unwrap();
    let as_admin = server.store().as_user(UserInfo::admin());
    let denied = as_admin
        .patch(&maps, Some("default"), "internal", &Patch::Merge(json!({"data": {"a": "b"}})), &Default::default())
        .unwrap_err();
    assert_eq!(denied.code, 422);
    assert!(denied.message.ends_with("denied request: failed expression: false"), "{}", denied.message);
    // A policy with paramKind fails to configure: under Fail every selected request is denied.
    raw(&admin, "DELETE", &format!("{BINDINGS}/deny-all-binding"), None, Value::Null).await;
    policy(
        &server,
        "with-params",
        json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [{"expression": "true"}]}),
        &["Deny"],
    )
    .await;
    let refused = create_map(&admin, "p", json!({}), json!({})).await;
    assert_eq!(refused.status, 422);
    assert!(refused.text.contains("paramKind is not supported"), "{}", refused.text);
    server.shutdown().await;
}
