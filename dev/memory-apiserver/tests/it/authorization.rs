//! Authentication, RBAC, the access reviews, impersonation and TokenRequest of the dev API server, checked over
//! HTTP against upstream's behaviour and bodies.

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use memory_apiserver::{ApiServer, Identity, Patch};
use serde_json::{Value, json};

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

/// A client that sends no credentials.
fn anonymous(server: &ApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

/// A client with `token`.
fn with_token(server: &ApiServer, token: &str) -> kube::Client {
    kube::Client::try_from(server.kube_config_with_token(token)).unwrap()
}

async fn create(server: &ApiServer, path: &str, body: Value) {
    let created = raw(&server.client(), "POST", path, Some("application/json"), body).await;
    assert_eq!(created.status, 201, "{}", created.text);
}

fn bot() -> Identity {
    Identity::service_account("team", "bot")
}

const BOT: &str = "system:serviceaccount:team:bot";

#[tokio::test]
async fn requests_without_a_valid_token_are_401_and_dev_tools_need_none() {
    let server = server().await;
    for client in [anonymous(&server), with_token(&server, "not-a-token")] {
        for path in ["/api/v1/namespaces/default/pods", "/apis", "/healthz", "/version"] {
            let answer = raw(&client, "GET", path, None, Value::Null).await;
            assert_eq!(answer.status, 401, "{path}");
            assert_eq!(
                answer.json(),
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
            );
        }
        assert_eq!(raw(&client, "GET", "/_dev/metrics", None, Value::Null).await.status, 200);
    }
    // The kubeconfig carries the administrator's token, over HTTPS with the server's CA.
    let kubeconfig = std::fs::read_to_string(server.kubeconfig_path()).unwrap();
    assert!(kubeconfig.contains(&format!("server: {}", server.https_url())), "{kubeconfig}");
    assert!(kubeconfig.contains("certificate-authority-data: ") && kubeconfig.contains("token: "));
    server.shutdown().await;
}

#[tokio::test]
async fn rbac_grants_what_bindings_grant_in_their_scope_and_denies_with_upstreams_message() {
    let server = server().await;
    namespace(&server.client(), "team").await;
    let bot_client = server.client_as(&bot()).unwrap();
    let denied = raw(&bot_client, "GET", "/api/v1/namespaces/team/configmaps", None, Value::Null).await;
    assert_eq!(denied.status, 403);
    assert_eq!(
        denied.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("configmaps is forbidden: User \"{BOT}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team\""),
            "reason": "Forbidden", "details": {"kind": "configmaps"}, "code": 403})
    );
    // Discovery and the self reviews come with every authenticated user (upstream's bootstrap roles).
    assert_eq!(raw(&bot_client, "GET", "/apis", None, Value::Null).await.status, 200);
    assert_eq!(raw(&bot_client, "GET", "/api/v1", None, Value::Null).await.status, 200);

    create(
        &server,
        &format!("{RBAC}/namespaces/team/roles"),
        json!({"metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}),
    )
    .await;
    create(
        &server,
        &format!("{RBAC}/namespaces/team/rolebindings"),
        json!({"metadata": {"name": "reader"},
        "roleRef": {"kind": "Role", "name": "reader"}, "subjects": [{"kind": "ServiceAccount", "name": "bot"}]}),
    )
    .await;
    let allowed = raw(&bot_client, "GET", "/api/v1/namespaces/team/configmaps", None, Value::Null).await;
    assert_eq!(allowed.status, 200, "{}", allowed.text);
    assert_eq!(raw(&bot_client, "GET", "/api/v1/namespaces/default/configmaps", None, Value::Null).await.status, 403);
    let write = raw(
        &bot_client,
        "POST",
        "/api/v1/namespaces/team/configmaps",
        Some("application/json"),
        json!({"metadata": {"name": "x"}}),
    )
    .await;
    assert_eq!(write.status, 403);

    // A ClusterRole limited to one name, bound cluster-wide.
    create(&server, &format!("{RBAC}/clusterroles"), json!({"metadata": {"name": "one-map"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["chosen"], "verbs": ["update", "get"]}]}))
    .await;
    create(
        &server,
        &format!("{RBAC}/clusterrolebindings"),
        json!({"metadata": {"name": "one-map"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "one-map"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]}),
    )
    .await;
    let admin_maps: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for name in ["chosen", "other"] {
        admin_maps.create(&PostParams::default(), &config_map(name, json!({}), json!({}))).await.unwrap();
    }
    assert_eq!(
        raw(&bot_client, "GET", "/api/v1/namespaces/default/configmaps/chosen", None, Value::Null).await.status,
        200
    );
    let other = raw(&bot_client, "GET", "/api/v1/namespaces/default/configmaps/other", None, Value::Null).await;
    assert_eq!(other.status, 403);
    assert_eq!(other.json()["details"], json!({"name": "other", "kind": "configmaps"}));

    // A binding to a missing role names it in the denial.
    create(
        &server,
        &format!("{RBAC}/clusterrolebindings"),
        json!({"metadata": {"name": "dangling"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "missing"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]}),
    )
    .await;
    let nodes = raw(&bot_client, "GET", "/api/v1/nodes", None, Value::Null).await;
    assert_eq!(
        nodes.json()["message"],
        format!(
            "nodes is forbidden: User \"{BOT}\" cannot list resource \"nodes\" in API group \"\" at the cluster scope: RBAC: clusterrole.rbac.authorization.k8s.io \"missing\" not found"
        )
    );
    // Deleting the binding takes the permission away at once.
    server
        .store()
        .delete(
            &memory_apiserver::Gvr::new("rbac.authorization.k8s.io", "v1", "rolebindings"),
            Some("team"),
            "reader",
            &DeleteParams::default(),
        )
        .unwrap();
    assert_eq!(raw(&bot_client, "GET", "/api/v1/namespaces/team/configmaps", None, Value::Null).await.status, 403);

    // A changed roleRef is refused, as upstream does.
    let moved = raw(
        &server.client(),
        "PATCH",
        &format!("{RBAC}/clusterrolebindings/one-map"),
        Some("application/merge-patch+json"),
        json!({"roleRef": {"name": "cluster-admin"}}),
    )
    .await;
    assert_eq!(moved.status, 422, "{}", moved.text);
    assert!(moved.json()["message"].as_str().unwrap().contains("roleRef: Invalid value: "), "{}", moved.text);
    // The bootstrap roles are there, as on a real cluster.
    let roles = raw(&server.client(), "GET", &format!("{RBAC}/clusterroles"), None, Value::Null).await.json();
    let names: Vec<&str> =
        roles["items"].as_array().unwrap().iter().filter_map(|r| r["metadata"]["name"].as_str()).collect();
    for name in ["cluster-admin", "system:discovery", "system:basic-user", "system:public-info-viewer"] {
        assert!(names.contains(&name), "{names:?}");
    }
    server.shutdown().await;
}

async fn review(client: &kube::Client, path: &str, body: Value) -> Raw {
    raw(client, "POST", path, Some("application/json"), body).await
}

#[tokio::test]
async fn access_reviews_answer_for_the_caller_or_the_named_subject() {
    let server = server().await;
    namespace(&server.client(), "team").await;
    let bot_client = server.client_as(&bot()).unwrap();
    create(
        &server,
        &format!("{RBAC}/clusterroles"),
        json!({"metadata": {"name": "node-patcher"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
                  {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
    )
    .await;
    create(
        &server,
        &format!("{RBAC}/clusterrolebindings"),
        json!({"metadata": {"name": "node-patcher"},
        "roleRef": {"kind": "ClusterRole", "name": "node-patcher"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]}),
    )
    .await;
    let ssar = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let answer = review(
        &bot_client,
        ssar,
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "patch", "resource": "nodes", "name": "n1"}}}),
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.text);
    assert_eq!(
        answer.json()["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"node-patcher\" of ClusterRole \"node-patcher\" to ServiceAccount \"bot/team\""})
    );
    assert_eq!(answer.json()["spec"]["resourceAttributes"]["verb"], "patch");
    let answer =
        review(&bot_client, ssar, json!({"spec": {"resourceAttributes": {"verb": "delete", "resource": "nodes"}}}))
            .await;
    assert_eq!(answer.json()["status"], json!({"allowed": false}));
    let answer =
        review(&bot_client, ssar, json!({"spec": {"nonResourceAttributes": {"verb": "get", "path": "/metrics"}}}))
            .await;
    assert_eq!(answer.json()["status"]["allowed"], true);
    let invalid = review(&bot_client, ssar, json!({"spec": {}})).await;
    assert_eq!(invalid.status, 422, "{}", invalid.text);
    // Only create is served.
    assert_eq!(raw(&server.client(), "GET", ssar, None, Value::Null).await.status, 405);

    let rules = review(
        &bot_client,
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        json!({"spec": {"namespace": "team"}}),
    )
    .await
    .json();
    let resource_rules = rules["status"]["resourceRules"].as_array().unwrap();
    assert!(
        resource_rules.contains(&json!({"verbs": ["get", "patch"], "apiGroups": [""], "resources": ["nodes"]})),
        "{rules}"
    );
    assert!(resource_rules.iter().any(|r| r["resources"][0] == "selfsubjectaccessreviews"), "{rules}");
    assert!(
        rules["status"]["nonResourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["nonResourceURLs"] == json!(["/metrics"]))
    );

    // SubjectAccessReview: the admin asks about the bot; the bot may not ask.
    let sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let body = json!({"spec": {"user": BOT, "groups": ["system:serviceaccounts"],
        "resourceAttributes": {"verb": "patch", "resource": "nodes"}}});
    assert_eq!(review(&server.client(), sar, body.clone()).await.json()["status"]["allowed"], true);
    assert_eq!(review(&bot_client, sar, body).await.status, 403);
    let local = review(
        &server.client(),
        "/apis/authorization.k8s.io/v1/namespaces/team/localsubjectaccessreviews",
        json!({"spec": {"user": BOT, "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "other"}}}),
    )
    .await;
    assert_eq!(local.status, 422);
    assert!(local.text.contains("must match metadata.namespace"), "{}", local.text);
    // Who am I.
    let me = review(&bot_client, "/apis/authentication.k8s.io/v1/selfsubjectreviews", json!({})).await.json();
    assert_eq!(me["status"]["userInfo"]["username"], BOT);
    assert_eq!(
        me["status"]["userInfo"]["groups"],
        json!(["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"])
    );
    server.shutdown().await;
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb_on_each_attribute() {
    let server = server().await;
    namespace(&server.client(), "team").await;
    let whoami = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    let admin = server.client();
    let as_bot = raw_with(
        &admin,
        "POST",
        whoami,
        &[("Impersonate-User", BOT), ("Impersonate-Extra-authentication.kubernetes.io%2fnode-name", "w-0")],
        Some("application/json"),
        json!({}),
    )
    .await;
    assert_eq!(as_bot.status, 201, "{}", as_bot.text);
    let info = &as_bot.json()["status"]["userInfo"];
    assert_eq!(info["username"], BOT);
    assert_eq!(
        info["groups"],
        json!(["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"])
    );
    assert_eq!(info["extra"], json!({"authentication.kubernetes.io/node-name": ["w-0"]}));
    let grouped = raw_with(
        &admin,
        "POST",
        whoami,
        &[("Impersonate-User", "jane"), ("Impersonate-Group", "devs")],
        Some("application/json"),
        json!({}),
    )
    .await
    .json();
    assert_eq!(grouped["status"]["userInfo"]["groups"], json!(["devs", "system:authenticated"]));
    let no_user =
        raw_with(&admin, "POST", whoami, &[("Impersonate-Group", "devs")], Some("application/json"), json!({})).await;
    assert_eq!(no_user.status, 400);

    let bot_client = server.client_as(&bot()).unwrap();
    let refused =
        raw_with(&bot_client, "GET", "/api/v1/nodes", &[("Impersonate-User", "jane")], None, Value::Null).await;
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.json()["message"],
        format!(
            "users \"jane\" is forbidden: User \"{BOT}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        )
    );
    create(
        &server,
        &format!("{RBAC}/clusterroles"),
        json!({"metadata": {"name": "impersonate-jane"},
        "rules": [{"apiGroups": [""], "resources": ["users"], "resourceNames": ["jane"], "verbs": ["impersonate"]}]}),
    )
    .await;
    create(
        &server,
        &format!("{RBAC}/clusterrolebindings"),
        json!({"metadata": {"name": "impersonate-jane"},
        "roleRef": {"kind": "ClusterRole", "name": "impersonate-jane"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "team"}]}),
    )
    .await;
    let as_jane =
        raw_with(&bot_client, "GET", "/api/v1/nodes", &[("Impersonate-User", "jane")], None, Value::Null).await;
    assert_eq!(as_jane.status, 403, "jane herself may not list nodes");
    assert!(as_jane.json()["message"].as_str().unwrap().contains("User \"jane\" cannot list"), "{}", as_jane.text);
    let as_group = raw_with(
        &bot_client,
        "GET",
        "/api/v1/nodes",
        &[("Impersonate-User", "jane"), ("Impersonate-Group", "system:masters")],
        None,
        Value::Null,
    )
    .await;
    assert_eq!(as_group.status, 403, "impersonating a group needs its own permission");
    server.shutdown().await;
}

#[tokio::test]
async fn token_requests_issue_bound_tokens_that_end_with_their_object() {
    let server = server().await;
    let admin = server.client();
    namespace(&admin, "team").await;
    let store = server.store();
    store
        .create(
            &memory_apiserver::Gvr::new("", "v1", "serviceaccounts"),
            Some("team"),
            json!({"metadata": {"name": "bot"}}),
            &PostParams::default(),
        )
        .unwrap();
    store
        .create(
            &memory_apiserver::Gvr::new("", "v1", "nodes"),
            None,
            json!({"metadata": {"name": "w-0"}}),
            &PostParams::default(),
        )
        .unwrap();
    let mut workload = serde_json::to_value(pod("worker", json!({}), Some("w-0"))).unwrap();
    workload["spec"]["serviceAccountName"] = json!("bot");
    let created = raw(&admin, "POST", "/api/v1/namespaces/team/pods", Some("application/json"), workload).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let pod_uid = created.json()["metadata"]["uid"].as_str().unwrap().to_owned();

    let path = "/api/v1/namespaces/team/serviceaccounts/bot/token";
    let answer = raw(&admin, "POST", path, Some("application/json"), json!({"apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest", "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "worker", "uid": pod_uid}}})).await;
    assert_eq!(answer.status, 201, "{}", answer.text);
    let answer = answer.json();
    assert_eq!(answer["spec"]["expirationSeconds"], 3600);
    assert_eq!(answer["spec"]["audiences"], json!(["https://kubernetes.default.svc.cluster.local"]));
    let token = answer["status"]["token"].as_str().unwrap().to_owned();
    let user = server.user_of_token(&token).unwrap();
    assert_eq!(user.name, "system:serviceaccount:team:bot");
    assert_eq!(user.extra_value("authentication.kubernetes.io/pod-name"), Some("worker"));
    assert_eq!(user.extra_value("authentication.kubernetes.io/pod-uid"), Some(pod_uid.as_str()));
    assert_eq!(user.extra_value("authentication.kubernetes.io/node-name"), Some("w-0"));
    assert!(user.extra_value("authentication.kubernetes.io/node-uid").is_some());
    assert!(user.extra_value("authentication.kubernetes.io/credential-id").is_some_and(|c| c.starts_with("JTI=")));
    // TokenReview as the admin.
    let reviewed = raw(
        &admin,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        Some("application/json"),
        json!({"spec": {"token": token}}),
    )
    .await
    .json();
    assert_eq!(reviewed["status"]["authenticated"], true);
    assert_eq!(reviewed["status"]["user"]["extra"]["authentication.kubernetes.io/pod-name"], json!(["worker"]));

    // Refusals: too short, another account's pod, unsupported kinds, a stale uid.
    let short = raw(&admin, "POST", path, Some("application/json"), json!({"spec": {"expirationSeconds": 60}})).await;
    assert_eq!(short.status, 422);
    assert_eq!(
        short.json()["message"],
        "TokenRequest.authentication.k8s.io \"bot\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
    );
    store
        .create(
            &memory_apiserver::Gvr::new("", "v1", "serviceaccounts"),
            Some("team"),
            json!({"metadata": {"name": "other"}}),
            &PostParams::default(),
        )
        .unwrap();
    let mismatch = raw(
        &admin,
        "POST",
        "/api/v1/namespaces/team/serviceaccounts/other/token",
        Some("application/json"),
        json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "worker"}}}),
    )
    .await;
    assert_eq!(mismatch.status, 400);
    assert_eq!(
        mismatch.json()["message"],
        "cannot bind token for serviceaccount \"other\" to pod running with serviceaccount \"bot\""
    );
    let stale = raw(
        &admin,
        "POST",
        path,
        Some("application/json"),
        json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "worker", "uid": "stale"}}}),
    )
    .await;
    assert_eq!(stale.status, 409);
    let kind = raw(
        &admin,
        "POST",
        path,
        Some("application/json"),
        json!({"spec": {"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x"}}}),
    )
    .await;
    assert_eq!(kind.status, 400);
    // A token for another audience does not authenticate to the API server.
    let foreign =
        raw(&admin, "POST", path, Some("application/json"), json!({"spec": {"audiences": ["vault"]}})).await.json();
    assert_eq!(server.user_of_token(foreign["status"]["token"].as_str().unwrap()).unwrap_err().code, 401);
    // The pod goes, and its token with it (gracefully deleted pods go at once with grace 0).
    store
        .delete(
            &memory_apiserver::Gvr::new("", "v1", "pods"),
            Some("team"),
            "worker",
            &DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
        )
        .unwrap();
    assert_eq!(server.user_of_token(&token).unwrap_err().code, 401);
    server.shutdown().await;
}

#[tokio::test]
async fn the_in_process_store_authorizes_only_when_acting_as_a_user() {
    let server = server().await;
    namespace(&server.client(), "team").await;
    let store = server.store();
    let maps = memory_apiserver::Gvr::new("", "v1", "configmaps");
    store.create(&maps, Some("team"), json!({"metadata": {"name": "a"}}), &PostParams::default()).unwrap();
    let bot = store.as_user(memory_apiserver::UserInfo::service_account("team", "bot", ""));
    let error = bot.get(&maps, Some("team"), "a").unwrap_err();
    assert_eq!(error.code, 403);
    assert_eq!(
        error.message,
        format!(
            "configmaps \"a\" is forbidden: User \"{BOT}\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"team\""
        )
    );
    assert_eq!(
        bot.patch(&maps, Some("team"), "a", &Patch::Merge(json!({"data": {"x": "y"}})), &Default::default())
            .unwrap_err()
            .code,
        403
    );
    let admin = store.as_user(memory_apiserver::UserInfo::admin());
    assert!(admin.get(&maps, Some("team"), "a").is_ok());
    server.shutdown().await;
}
