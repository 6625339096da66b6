//! Conformance checklist B (writes, concurrency and metadata). Item numbers refer to §9 of
//! k8s-api-semantics.md.

use crate::common;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use serde_json::{Value, json};
use std::sync::Arc;

fn status_of(error: kube::Error) -> kube::core::Status {
    match error {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn b15_create_fills_the_server_metadata_and_generates_names() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b15").await;
    let created = raw(
        &client,
        "POST",
        "/api/v1/namespaces/b15/configmaps",
        Some("application/json"),
        json!({"metadata": {"name": "a"}}),
    )
    .await;
    assert_eq!(created.status, 201);
    let object = created.json();
    assert_eq!(object["metadata"]["namespace"], "b15", "the namespace comes from the URL");
    let uid = object["metadata"]["uid"].as_str().unwrap();
    assert_eq!(uid.len(), 36);
    assert_eq!(uid.matches('-').count(), 4);
    let created_at = object["metadata"]["creationTimestamp"].as_str().unwrap();
    assert_eq!(created_at.len(), "2026-01-01T00:00:00Z".len(), "seconds precision: {created_at}");
    assert!(created_at.ends_with('Z'));
    assert!(object["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().is_ok());

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b15");
    let generated: ConfigMap = serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    for _ in 0..20 {
        let object = api.create(&PostParams::default(), &generated).await.unwrap();
        let name = object.metadata.name.unwrap();
        let suffix = name.strip_prefix("gen-").unwrap();
        assert_eq!(suffix.len(), 5);
        assert!(suffix.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)), "{name}");
    }
    let nameless =
        raw(&client, "POST", "/api/v1/namespaces/b15/configmaps", Some("application/json"), json!({"metadata": {}}))
            .await;
    assert_eq!(nameless.status, 422);
}

#[tokio::test]
async fn b16_duplicates_missing_namespaces_and_mismatched_namespaces_are_refused() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b16").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b16");
    api.create(&PostParams::default(), &config_map("a", json!({}), json!({}))).await.unwrap();
    let duplicate =
        status_of(api.create(&PostParams::default(), &config_map("a", json!({}), json!({}))).await.unwrap_err());
    assert_eq!((duplicate.code, duplicate.reason.as_str()), (409, "AlreadyExists"));
    assert!(duplicate.is_already_exists());
    assert_eq!(duplicate.message, "configmaps \"a\" already exists");

    let nowhere: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let missing =
        status_of(nowhere.create(&PostParams::default(), &config_map("a", json!({}), json!({}))).await.unwrap_err());
    assert_eq!(missing.code, 404);
    assert_eq!(missing.message, "namespaces \"nowhere\" not found");

    let mismatch = raw(
        &client,
        "POST",
        "/api/v1/namespaces/b16/configmaps",
        Some("application/json"),
        json!({"metadata": {"name": "b", "namespace": "other"}}),
    )
    .await;
    assert_eq!(mismatch.status, 400);
    assert_eq!(mismatch.json()["reason"], "BadRequest");
}

#[tokio::test]
async fn b17_a_stale_put_conflicts_and_only_built_ins_update_without_a_resource_version() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b17").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "b17");
    let created = pods.create(&PostParams::default(), &pod("foo", json!({}), None)).await.unwrap();
    pods.patch("foo", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})))
        .await
        .unwrap();
    let stale = raw(
        &client,
        "PUT",
        "/api/v1/namespaces/b17/pods/foo",
        Some("application/json"),
        serde_json::to_value(&created).unwrap(),
    )
    .await;
    assert_eq!(stale.status, 409);
    assert_eq!(
        stale.json(),
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message":"Operation cannot be fulfilled on pods \"foo\": the object has been modified; please apply your changes to the latest version and try again",
            "reason":"Conflict","details":{"name":"foo","kind":"pods"},"code":409})
    );

    let mut unconditional = pods.get("foo").await.unwrap();
    unconditional.metadata.resource_version = None;
    unconditional.metadata.labels = Some([("y".to_owned(), "2".to_owned())].into());
    assert!(pods.replace("foo", &PostParams::default(), &unconditional).await.is_ok());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "b17");
    let lease: Lease =
        serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}})).unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut lease = leases.get("l").await.unwrap();
    lease.metadata.resource_version = None;
    lease.spec.as_mut().unwrap().holder_identity = Some("b".into());
    assert!(leases.replace("l", &PostParams::default(), &lease).await.is_ok());

    let widgets = widgets(&client, "b17").await;
    widgets.create(&PostParams::default(), &widget("w", json!({"color": "red"}))).await.unwrap();
    let mut w = widgets.get("w").await.unwrap();
    w.metadata.resource_version = None;
    let error = status_of(widgets.replace("w", &PostParams::default(), &w).await.unwrap_err());
    assert_eq!(error.code, 422);
    assert!(error.is_invalid());
    assert_eq!(
        error.message,
        "Widget.example.com \"w\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
    );
    let stale = widgets.get("w").await.unwrap();
    widgets.patch("w", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 5}}))).await.unwrap();
    let conflict = status_of(widgets.replace("w", &PostParams::default(), &stale).await.unwrap_err());
    assert_eq!(
        conflict.message,
        "Operation cannot be fulfilled on widgets.example.com \"w\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(conflict.details.unwrap().group, "example.com");
}

#[tokio::test]
async fn b18_merge_patches_ignore_concurrent_writes_unless_they_name_a_resource_version() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b18").await;
    let api: Api<ConfigMap> = Api::namespaced(client, "b18");
    let first = api.create(&PostParams::default(), &config_map("a", json!({}), json!({}))).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"other": "writer"}}))).await.unwrap();
    let patched = api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"mine": "1"}}))).await.unwrap();
    assert_eq!(patched.data.unwrap().len(), 2);
    let stale_rv = first.metadata.resource_version.unwrap();
    let conflict = status_of(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": stale_rv}, "data": {"x": "y"}})),
        )
        .await
        .unwrap_err(),
    );
    assert!(conflict.is_conflict());
    let current = api.get("a").await.unwrap().metadata.resource_version.unwrap();
    let ok = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": current}, "data": {"x": "y"}})),
        )
        .await;
    assert!(ok.is_ok());
}

#[tokio::test]
async fn b19_a_write_that_changes_nothing_keeps_the_resource_version_and_sends_no_event() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b19").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b19");
    let created =
        api.create(&PostParams::default(), &config_map("a", json!({"k": "v"}), json!({"d": "1"}))).await.unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    let mut watch =
        RawWatch::open(&client, &format!("/api/v1/namespaces/b19/configmaps?watch=true&resourceVersion={rv}")).await;
    let same = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"d": "1"}, "metadata": {"labels": {"k": "v"}}})),
        )
        .await
        .unwrap();
    assert_eq!(same.metadata.resource_version.as_deref(), Some(rv.as_str()));
    let replaced = api.replace("a", &PostParams::default(), &created).await.unwrap();
    assert_eq!(replaced.metadata.resource_version.as_deref(), Some(rv.as_str()));
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"d": "2"}}))).await.unwrap();
    let event = watch.next_event().await.unwrap();
    assert_eq!(event["object"]["data"]["d"], "2", "the no-op writes produced no event");
}

#[tokio::test]
async fn b20_generation_and_the_status_subresource_split() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b20").await;
    let widgets = widgets(&client, "b20").await;
    let created = widgets.create(&PostParams::default(), &widget("w", json!({"color": "red"}))).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.data["spec"]["size"], 3, "schema defaults apply");
    let generation = |w: &kube::api::DynamicObject| w.metadata.generation.unwrap();
    let w =
        widgets.patch("w", &PatchParams::default(), &Patch::Merge(json!({"spec": {"color": "blue"}}))).await.unwrap();
    assert_eq!(generation(&w), 2);
    let w = widgets
        .patch("w", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})))
        .await
        .unwrap();
    assert_eq!(generation(&w), 2, "metadata changes leave the generation alone");
    let w =
        widgets.patch("w", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Main"}}))).await.unwrap();
    assert!(w.data.get("status").is_none(), "status through the main endpoint is ignored");
    let w = widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}, "spec": {"color": "red"}})),
        )
        .await
        .unwrap();
    assert_eq!(w.data["status"]["phase"], "Ready");
    assert_eq!(w.data["spec"]["color"], "blue", "/status ignores the spec");
    assert_eq!(generation(&w), 2);
    let mut replaced = w.clone();
    replaced.data["status"]["phase"] = json!("Replaced");
    replaced.data["spec"]["size"] = json!(7);
    let w = widgets.replace("w", &PostParams::default(), &replaced).await.unwrap();
    assert_eq!((w.data["status"]["phase"].as_str(), generation(&w)), (Some("Ready"), 3));
}

#[tokio::test]
async fn b21_json_patch_tests_missing_members_as_null_and_the_finalizer_helper_works() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b21").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b21");
    api.create(&PostParams::default(), &config_map("a", json!({}), json!({}))).await.unwrap();
    let ok = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/b21/configmaps/a",
        Some("application/json-patch+json"),
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
        ]),
    )
    .await;
    assert_eq!(ok.status, 200);
    let failed = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/b21/configmaps/a",
        Some("application/json-patch+json"),
        json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "y"}]),
    )
    .await;
    assert_eq!(failed.status, 422);
    assert_eq!(failed.json()["reason"], "Invalid");
    assert_eq!(failed.json()["message"], "testing value /metadata/finalizers/0 failed: test failed");
    let malformed = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/b21/configmaps/a",
        Some("application/json-patch+json"),
        json!({"op": "add"}),
    )
    .await;
    assert_eq!(malformed.status, 400);

    api.create(&PostParams::default(), &config_map("guarded", json!({}), json!({}))).await.unwrap();
    let cleanups = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let reconcile = |cm: Arc<ConfigMap>| {
        let api = api.clone();
        let cleanups = cleanups.clone();
        async move {
            finalizer(&api, "example.com/cleanup", cm, |event| async move {
                if let Finalizer::Cleanup(_) = event {
                    cleanups.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                Ok::<_, kube::Error>(kube::runtime::controller::Action::await_change())
            })
            .await
        }
    };
    reconcile(Arc::new(api.get("guarded").await.unwrap())).await.unwrap();
    let guarded = api.get("guarded").await.unwrap();
    assert_eq!(guarded.metadata.finalizers, Some(vec!["example.com/cleanup".to_owned()]));
    api.delete("guarded", &DeleteParams::default()).await.unwrap();
    reconcile(Arc::new(api.get("guarded").await.unwrap())).await.unwrap();
    assert_eq!(cleanups.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(api.get_opt("guarded").await.unwrap().is_none(), "removing the finalizer deleted it");
}

#[tokio::test]
async fn b21_empty_metadata_collections_are_omitted_so_the_first_finalizer_patch_works_again() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b21e").await;
    let created = raw(
        &client,
        "POST",
        "/api/v1/namespaces/b21e/configmaps",
        Some("application/json"),
        json!({"metadata": {"name": "bare", "generateName": "", "labels": {}, "annotations": {}, "finalizers": [],
                            "ownerReferences": [], "managedFields": []}}),
    )
    .await;
    assert_eq!(created.status, 201);
    let metadata = created.json()["metadata"].as_object().unwrap().clone();
    for omitted in ["generateName", "labels", "annotations", "finalizers", "ownerReferences"] {
        assert!(!metadata.contains_key(omitted), "{omitted} kept: {metadata:?}");
    }

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b21e");
    let reconcile = |cm: ConfigMap| {
        let api = api.clone();
        async move {
            finalizer(&api, "example.com/cleanup", Arc::new(cm), |_| async {
                Ok::<_, kube::Error>(kube::runtime::controller::Action::await_change())
            })
            .await
        }
    };
    reconcile(api.get("bare").await.unwrap()).await.unwrap();
    assert_eq!(api.get("bare").await.unwrap().metadata.finalizers, Some(vec!["example.com/cleanup".to_owned()]));
    // The object is not being deleted: removing its only finalizer leaves none at all, not an empty list ...
    let removed = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/b21e/configmaps/bare",
        Some("application/json-patch+json"),
        json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
    )
    .await;
    assert_eq!(removed.status, 200);
    assert!(removed.json()["metadata"].get("finalizers").is_none(), "{}", removed.json()["metadata"]);
    // ... so kube-runtime's first-finalizer patch (`test /metadata/finalizers == null`) succeeds again.
    reconcile(api.get("bare").await.unwrap()).await.unwrap();
    assert_eq!(api.get("bare").await.unwrap().metadata.finalizers, Some(vec!["example.com/cleanup".to_owned()]));

    api.patch("bare", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})))
        .await
        .unwrap();
    let unlabelled = api
        .patch("bare", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": null}}})))
        .await
        .unwrap();
    assert_eq!(unlabelled.metadata.labels, None, "removing the last label removes the map");
}

#[tokio::test]
async fn b22_strategic_merge_patch_follows_the_merge_keys() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b22").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b22");
    let with_finalizer: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a", "finalizers": ["a"]}})).unwrap();
    api.create(&PostParams::default(), &with_finalizer).await.unwrap();
    let patched = api
        .patch("a", &PatchParams::default(), &Patch::Strategic(json!({"metadata": {"finalizers": ["b"]}})))
        .await
        .unwrap();
    assert_eq!(patched.metadata.finalizers, Some(vec!["a".to_owned(), "b".to_owned()]));

    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {"type": "DiskPressure", "status": "False"}
    ]}}))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let patched = nodes
        .patch_status(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})),
        )
        .await
        .unwrap();
    let conditions = patched.status.unwrap().conditions.unwrap();
    assert_eq!(conditions.len(), 2);
    assert_eq!((conditions[0].status.as_str(), conditions[0].reason.as_deref()), ("False", Some("KubeletReady")));
    nodes.cordon("n1").await.unwrap();
    assert_eq!(nodes.get("n1").await.unwrap().spec.unwrap().unschedulable, Some(true));
    let cleared = nodes
        .patch("n1", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"unschedulable": null}})))
        .await
        .unwrap();
    assert_eq!(cleared.spec.unwrap_or_default().unschedulable, None);

    let widgets = widgets(&client, "b22").await;
    widgets.create(&PostParams::default(), &widget("w", json!({"color": "red"}))).await.unwrap();
    let refused = raw(
        &client,
        "PATCH",
        "/apis/example.com/v1/namespaces/b22/widgets/w",
        Some("application/strategic-merge-patch+json"),
        json!({"spec": {"color": "blue"}}),
    )
    .await;
    assert_eq!(refused.status, 415);
    assert_eq!(refused.json()["reason"], "UnsupportedMediaType");
}

#[tokio::test]
async fn b23_server_side_apply_tracks_field_ownership() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b23").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b23");
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"owner": "one"}});
    let missing = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/b23/configmaps/a",
        Some("application/apply-patch+yaml"),
        applied.clone(),
    )
    .await;
    assert_eq!(missing.status, 422);
    assert_eq!(
        missing.json()["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    let created = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/b23/configmaps/a?fieldManager=one",
        Some("application/apply-patch+yaml"),
        applied,
    )
    .await;
    assert_eq!(created.status, 201, "apply creates a missing object");
    let second = Patch::Apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"owner": "two"}}),
    );
    let conflict = status_of(api.patch("a", &PatchParams::apply("two"), &second).await.unwrap_err());
    assert_eq!(conflict.code, 409);
    assert_eq!(conflict.reason, "Conflict");
    let cause = &conflict.details.unwrap().causes[0];
    assert_eq!((cause.reason.as_str(), cause.field.as_str()), ("FieldManagerConflict", ".data.owner"));
    let forced = api.patch("a", &PatchParams::apply("two").force(), &second).await.unwrap();
    assert_eq!(forced.data.unwrap()["owner"], "two");
    let first_again = Patch::Apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"owner": "one"}}),
    );
    assert!(
        status_of(api.patch("a", &PatchParams::apply("one"), &first_again).await.unwrap_err()).is_conflict(),
        "the field moved to two"
    );
    let managers: Vec<String> =
        api.get("a").await.unwrap().metadata.managed_fields.unwrap().into_iter().filter_map(|m| m.manager).collect();
    assert!(managers.contains(&"two".to_owned()));
}

/// The managers of an object's `managedFields`, as `manager/operation[/subresource]`.
fn managers_of(object: &Value) -> Vec<String> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    let mut id = format!("{}/{}", e["manager"].as_str().unwrap(), e["operation"].as_str().unwrap());
                    if let Some(sub) = e["subresource"].as_str() {
                        id.push_str(&format!("/{sub}"));
                    }
                    id
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn b23_every_write_records_its_manager_from_the_user_agent_so_apply_conflicts_with_it() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b23m").await;
    let agent = [("User-Agent", "kubectl-edit/v1.33.0 (linux/amd64) kubernetes/abcdef")];
    let created = raw_with(
        &client,
        "POST",
        "/api/v1/namespaces/b23m/configmaps",
        &agent,
        Some("application/json"),
        json!({"metadata": {"name": "a"}, "data": {"owner": "created"}}),
    )
    .await;
    assert_eq!(created.status, 201);
    assert_eq!(managers_of(&created.json()), vec!["kubectl-edit/Update"], "no fieldManager: the User-Agent's prefix");
    assert_eq!(created.json()["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:data": {"f:owner": {}}}));

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b23m");
    let applied = Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
                                      "data": {"owner": "applier"}}));
    let conflict = status_of(api.patch("a", &PatchParams::apply("applier"), &applied).await.unwrap_err());
    assert_eq!(conflict.code, 409);
    assert_eq!(conflict.message, "Apply failed with 1 conflict: conflict with \"kubectl-edit\": .data.owner");

    let updated = raw_with(
        &client,
        "PUT",
        "/api/v1/namespaces/b23m/configmaps/a?fieldManager=editor",
        &agent,
        Some("application/json"),
        json!({"metadata": {"name": "a"}, "data": {"owner": "created", "extra": "x"}}),
    )
    .await;
    assert_eq!(updated.status, 200);
    assert_eq!(managers_of(&updated.json()), vec!["kubectl-edit/Update", "editor/Update"]);
    let again = raw_with(
        &client,
        "PUT",
        "/api/v1/namespaces/b23m/configmaps/a?fieldManager=another",
        &agent,
        Some("application/json"),
        json!({"metadata": {"name": "a"}, "data": {"owner": "created", "extra": "x"}}),
    )
    .await;
    assert_eq!(again.json(), updated.json(), "an update that changes nothing records nothing");

    let reset = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/b23m/configmaps/a",
        Some("application/merge-patch+json"),
        json!({"metadata": {"managedFields": [{}]}}),
    )
    .await;
    assert_eq!(reset.status, 200);
    assert!(reset.json()["metadata"].get("managedFields").is_none(), "[{{}}] clears managedFields");

    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = json!({"metadata": {"name": "n1", "labels": {"a": "b"}}});
    nodes.create(&PostParams::default(), &serde_json::from_value(node).unwrap()).await.unwrap();
    let status = raw_with(
        &client,
        "PATCH",
        "/api/v1/nodes/n1/status",
        &[("User-Agent", "kubelet/v1.33.0 (linux/amd64)")],
        Some("application/merge-patch+json"),
        json!({"status": {"phase": "Running"}}),
    )
    .await;
    assert_eq!(status.status, 200);
    let managers = managers_of(&status.json());
    assert_eq!(managers.last().map(String::as_str), Some("kubelet/Update/status"), "{managers:?}");

    for (bad, why) in
        [("x".repeat(129), "Too long: may not be more than 128 bytes"), ("a\tb".into(), "invalid character")]
    {
        let refused = raw(
            &client,
            "POST",
            &format!("/api/v1/namespaces/b23m/configmaps?fieldManager={}", bad.replace('\t', "%09")),
            Some("application/json"),
            json!({"metadata": {"name": "b"}}),
        )
        .await;
        assert_eq!(refused.status, 422);
        let message = refused.json()["message"].as_str().unwrap().to_owned();
        assert!(message.starts_with("CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: "), "{message}");
        assert!(message.contains(why), "{message}");
    }
}

#[tokio::test]
async fn b24_finalizers_hold_a_deleted_object_until_the_last_one_goes() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b24").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b24");
    let held: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a", "finalizers": ["x/one", "x/two"]}})).unwrap();
    api.create(&PostParams::default(), &held).await.unwrap();
    let deleted =
        raw(&client, "DELETE", "/api/v1/namespaces/b24/configmaps/a", Some("application/json"), json!({})).await;
    assert_eq!(deleted.status, 200);
    let object = deleted.json();
    assert_eq!(object["kind"], "ConfigMap");
    assert!(object["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(object["metadata"]["deletionGracePeriodSeconds"], 0);
    let refused = api
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["x/one", "x/two", "x/three"]}})),
        )
        .await;
    assert!(status_of(refused.unwrap_err()).is_invalid());
    let rv = api.get("a").await.unwrap().metadata.resource_version.unwrap();
    let mut watch =
        RawWatch::open(&client, &format!("/api/v1/namespaces/b24/configmaps?watch=true&resourceVersion={rv}")).await;
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["x/two"]}})))
        .await
        .unwrap();
    assert_eq!(watch.next_event().await.unwrap()["type"], "MODIFIED");
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}])).unwrap()),
    )
    .await
    .unwrap();
    assert_eq!(watch.next_event().await.unwrap()["type"], "DELETED", "the last removal is one DELETED event");
    assert!(api.get_opt("a").await.unwrap().is_none());
}

#[tokio::test]
async fn b25_bound_running_pods_terminate_gracefully_and_unbound_ones_go_at_once() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b25").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "b25");
    pods.create(&PostParams::default(), &pod("bound", json!({}), Some("n1"))).await.unwrap();
    pods.patch_status("bound", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}})))
        .await
        .unwrap();
    pods.delete("bound", &DeleteParams::default()).await.unwrap();
    let terminating = pods.get("bound").await.unwrap();
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    let deadline = terminating.metadata.deletion_timestamp.clone().unwrap().0;
    let now = jiff::Timestamp::now();
    assert!(
        deadline > now.checked_add(jiff::SignedDuration::from_secs(15)).unwrap(),
        "deletionTimestamp is now + grace"
    );
    pods.delete("bound", &DeleteParams::default().grace_period(60)).await.unwrap();
    assert_eq!(
        pods.get("bound").await.unwrap().metadata.deletion_grace_period_seconds,
        Some(30),
        "a longer grace is ignored"
    );
    pods.delete("bound", &DeleteParams::default().grace_period(10)).await.unwrap();
    let shortened = pods.get("bound").await.unwrap();
    assert_eq!(shortened.metadata.deletion_grace_period_seconds, Some(10));
    assert!(shortened.metadata.deletion_timestamp.unwrap().0 < deadline);
    pods.delete("bound", &DeleteParams::default().grace_period(0)).await.unwrap();
    assert!(pods.get_opt("bound").await.unwrap().is_none(), "the kubelet's grace-0 delete removes it");

    pods.create(&PostParams::default(), &pod("unbound", json!({}), None)).await.unwrap();
    pods.delete("unbound", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("unbound").await.unwrap().is_none());
    pods.create(&PostParams::default(), &pod("done", json!({}), Some("n1"))).await.unwrap();
    pods.patch_status("done", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Succeeded"}})))
        .await
        .unwrap();
    pods.delete("done", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("done").await.unwrap().is_none());
}

#[tokio::test]
async fn b26_delete_returns_the_object_for_pods_and_pending_deletes_and_a_status_otherwise() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b26").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "b26");
    pods.create(&PostParams::default(), &pod("p", json!({}), None)).await.unwrap();
    assert!(pods.delete("p", &DeleteParams::default()).await.unwrap().is_left());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "b26");
    cms.create(&PostParams::default(), &config_map("c", json!({}), json!({}))).await.unwrap();
    let status = cms.delete("c", &DeleteParams::default()).await.unwrap().right().expect("a Status");
    assert!(status.is_success());
    assert_eq!(status.details.unwrap().kind, "configmaps");
    let held: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "held", "finalizers": ["x/y"]}})).unwrap();
    cms.create(&PostParams::default(), &held).await.unwrap();
    assert!(cms.delete("held", &DeleteParams::default()).await.unwrap().is_left());
    let widgets = widgets(&client, "b26").await;
    widgets.create(&PostParams::default(), &widget("w", json!({"color": "red"}))).await.unwrap();
    let status = widgets.delete("w", &DeleteParams::default()).await.unwrap().right().expect("a Status");
    assert_eq!(status.details.unwrap().group, "example.com");
}

#[tokio::test]
async fn b27_every_error_is_a_status_the_kube_rs_helpers_recognise() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "b27").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "b27");
    assert!(status_of(api.get("missing").await.unwrap_err()).is_not_found());
    let created = api.create(&PostParams::default(), &config_map("a", json!({}), json!({}))).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"x": "1"}}))).await.unwrap();
    assert!(status_of(api.replace("a", &PostParams::default(), &created).await.unwrap_err()).is_conflict());
    let bad: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "Bad_Name"}})).unwrap();
    assert!(status_of(api.create(&PostParams::default(), &bad).await.unwrap_err()).is_invalid());
    for (method, uri, content_type, body) in [
        ("GET", "/api/v1/namespaces/b27/configmaps/missing", None, Value::Null),
        ("GET", "/api/v1/namespaces/b27/configmaps?labelSelector=a%20in%20(", None, Value::Null),
        ("GET", "/api/v1/namespaces/b27/configmaps?fieldSelector=spec.nope%3Dx", None, Value::Null),
        ("GET", "/api/v1/nonsense", None, Value::Null),
        ("POST", "/api/v1/namespaces/b27/configmaps", Some("application/json"), json!({"metadata": {"name": "a"}})),
        ("PATCH", "/api/v1/namespaces/b27/configmaps/a", Some("text/plain"), json!({})),
    ] {
        let response = raw(&client, method, uri, content_type, body).await;
        let status = response.json();
        assert_eq!(status["kind"], "Status", "{uri}");
        assert_eq!(status["code"].as_u64(), Some(u64::from(response.status)), "{uri}");
        assert!(status["reason"].as_str().is_some_and(|r| !r.is_empty()), "{uri}");
    }
}

#[tokio::test]
async fn delete_preconditions_conflict_and_deletecollection_follows_selectors() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "del").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "del");
    let created =
        api.create(&PostParams::default(), &config_map("a", json!({"group": "one"}), json!({}))).await.unwrap();
    let wrong_uid = raw(
        &client,
        "DELETE",
        "/api/v1/namespaces/del/configmaps/a",
        Some("application/json"),
        json!({"preconditions": {"uid": "not-the-uid"}}),
    )
    .await;
    assert_eq!(wrong_uid.status, 409);
    assert!(
        wrong_uid.json()["message"]
            .as_str()
            .unwrap()
            .contains("the UID in the precondition (not-the-uid) does not match the UID in record")
    );
    let wrong_rv = raw(
        &client,
        "DELETE",
        "/api/v1/namespaces/del/configmaps/a",
        Some("application/json"),
        json!({"preconditions": {"resourceVersion": "1"}}),
    )
    .await;
    assert_eq!(wrong_rv.status, 409);
    let uid = created.metadata.uid.unwrap();
    let rv = created.metadata.resource_version.unwrap();
    let right = raw(
        &client,
        "DELETE",
        "/api/v1/namespaces/del/configmaps/a",
        Some("application/json"),
        json!({"preconditions": {"uid": uid, "resourceVersion": rv}}),
    )
    .await;
    assert_eq!(right.status, 200);
    let missing = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/del/configmaps/a",
        Some("application/merge-patch+json"),
        json!({"data": {}}),
    )
    .await;
    assert_eq!(missing.status, 404, "patching a missing object is 404");

    for (name, group) in [("b", "one"), ("c", "one"), ("d", "two")] {
        api.create(&PostParams::default(), &config_map(name, json!({"group": group}), json!({}))).await.unwrap();
    }
    let deleted = api
        .delete_collection(&DeleteParams::default(), &kube::api::ListParams::default().labels("group=one"))
        .await
        .unwrap();
    let names: Vec<String> = deleted.left().unwrap().items.into_iter().map(|c| c.metadata.name.unwrap()).collect();
    assert_eq!(names, vec!["b", "c"]);
    let left: Vec<String> =
        api.list(&Default::default()).await.unwrap().items.into_iter().map(|c| c.metadata.name.unwrap()).collect();
    assert_eq!(left, vec!["d"]);
}

#[tokio::test]
async fn yaml_and_protobuf_bodies_are_accepted_and_other_media_types_refused() {
    let server = server().await;
    let client = server.client();
    let request = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/yaml")
        .body(b"metadata:\n  name: from-yaml\ndata:\n  k: v\n".to_vec())
        .unwrap();
    let created: ConfigMap = client.request(request).await.unwrap();
    assert_eq!(created.data.unwrap()["k"], "v");
    let not_protobuf = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/vnd.kubernetes.protobuf"),
        json!({}),
    )
    .await;
    assert_eq!(not_protobuf.status, 400, "a JSON body labelled protobuf does not decode");
    for unknown in ["text/plain", "*/*", "application/merge-patch+json"] {
        let refused = raw(&client, "POST", "/api/v1/namespaces/default/configmaps", Some(unknown), json!({})).await;
        assert_eq!(refused.status, 415, "{unknown}");
    }
}
