//! Namespace lifecycle: Terminating, content deleted, then gone; no new content meanwhile.

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn a_deleted_namespace_terminates_empties_and_goes() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "doomed").await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let created = namespaces.get("doomed").await.unwrap();
    assert_eq!(created.metadata.labels.unwrap()["kubernetes.io/metadata.name"], "doomed");
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let held: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})).unwrap();
    cms.create(&PostParams::default(), &held).await.unwrap();
    cms.create(&PostParams::default(), &config_map("plain", json!({}), json!({}))).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
    pods.create(&PostParams::default(), &pod("p", json!({}), None)).await.unwrap();

    server.faults().pause_controller("namespace");
    namespaces.delete("doomed", &DeleteParams::default()).await.unwrap();
    let terminating = namespaces.get("doomed").await.unwrap();
    assert_eq!(terminating.status.unwrap().phase.as_deref(), Some("Terminating"));
    let refused = cms.create(&PostParams::default(), &config_map("late", json!({}), json!({}))).await.unwrap_err();
    let kube::Error::Api(status) = refused else { panic!("expected an API error") };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(status.details.unwrap().causes[0].reason, "NamespaceTerminating");
    assert!(cms.get_opt("plain").await.unwrap().is_some(), "nothing is deleted while the controller is paused");

    server.faults().resume_controller("namespace");
    eventually("the plain objects are deleted", || {
        let (cms, pods) = (cms.clone(), pods.clone());
        async move { cms.get_opt("plain").await.unwrap().is_none() && pods.get_opt("p").await.unwrap().is_none() }
    })
    .await;
    assert!(namespaces.get_opt("doomed").await.unwrap().is_some(), "the finalizer holds the namespace");
    cms.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}}))).await.unwrap();
    eventually("the namespace is gone", || {
        let namespaces = namespaces.clone();
        async move { namespaces.get_opt("doomed").await.unwrap().is_none() }
    })
    .await;
}

#[tokio::test]
async fn the_default_namespaces_exist_from_the_start() {
    let server = server().await;
    let namespaces: Api<Namespace> = Api::all(server.client());
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(namespaces.get_opt(name).await.unwrap().is_some(), "{name}");
    }
}

#[tokio::test]
async fn an_emptied_namespace_held_by_its_own_finalizer_has_no_spec_finalizers_left() {
    let server = server().await;
    let namespaces: Api<Namespace> = Api::all(server.client());
    let held: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})).unwrap();
    namespaces.create(&PostParams::default(), &held).await.unwrap();
    namespaces.delete("held", &DeleteParams::default()).await.unwrap();
    eventually("the namespace controller removes the kubernetes finalizer", || {
        let namespaces = namespaces.clone();
        async move {
            let spec = namespaces.get("held").await.unwrap().spec;
            spec.is_some_and(|s| s.finalizers.is_none())
        }
    })
    .await;
    namespaces
        .patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    eventually("the namespace is gone", || {
        let namespaces = namespaces.clone();
        async move { namespaces.get_opt("held").await.unwrap().is_none() }
    })
    .await;
}
