//! CustomResourceDefinitions: serving, schema validation, cleanup, discovery; Tables for kubectl; scale.

use crate::common;

use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};
use shared::crd::{NodeVersion, NodeVersionSpec};

const TABLE: &str =
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

#[tokio::test]
async fn the_operator_crds_are_established_and_their_objects_validated() {
    let server = server().await;
    let client = server.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in shared::crd::all() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
        let name = crd.metadata.name.clone().unwrap();
        within("established", await_condition(crds.clone(), &name, conditions::is_crd_established())).await.unwrap();
    }
    let versions: Api<NodeVersion> = Api::all(client.clone());
    let spec = NodeVersionSpec { image: "img-1".into(), ..NodeVersionSpec::default() };
    let created = versions.create(&PostParams::default(), &NodeVersion::new("cluster", spec)).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let invalid = json!({"apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion", "metadata": {"name": "bad"},
        "spec": {"image": "", "kubernetesClusterVersion": "one"}});
    let refused =
        raw(&client, "POST", "/apis/update.edgeless.systems/v1alpha1/nodeversions", Some("application/json"), invalid)
            .await;
    assert_eq!(refused.status, 422);
    let status = refused.json();
    assert!(
        status["message"].as_str().unwrap().starts_with("NodeVersion.update.edgeless.systems \"bad\" is invalid: ["),
        "{status}"
    );
    assert_eq!(status["details"]["kind"], "NodeVersion");
    assert_eq!(status["details"]["group"], "update.edgeless.systems");
    let fields: Vec<&str> =
        status["details"]["causes"].as_array().unwrap().iter().filter_map(|c| c["field"].as_str()).collect();
    // An empty image is too short and does not match the image pattern: two causes, as the real
    // server reports every failed validation of a field.
    assert_eq!(fields, vec!["spec.image", "spec.image", "spec.kubernetesClusterVersion"]);
    let table = raw_with(
        &client,
        "GET",
        "/apis/update.edgeless.systems/v1alpha1/nodeversions",
        &[("accept", TABLE)],
        None,
        Value::Null,
    )
    .await
    .json();
    let columns: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(
        columns,
        vec![
            "Name",
            "Image",
            "Cluster-Version",
            "Up-To-Date",
            "Outdated",
            "Replacing",
            "Heirs",
            "Pending",
            "Obsolete",
            "Status",
            "Age"
        ]
    );
    assert_eq!(table["rows"][0]["cells"][1], "img-1");
}

#[tokio::test]
async fn widgets_are_validated_defaulted_and_tabled_from_their_crd() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "w").await;
    let widgets = widgets(&client, "w").await;
    let refused = raw(&client, "POST", "/apis/example.com/v1/namespaces/w/widgets", Some("application/json"),
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}, "spec": {"color": "green", "size": 0}})).await;
    assert_eq!(refused.status, 422);
    let status = refused.json();
    assert_eq!(
        status["message"],
        "Widget.example.com \"x\" is invalid: [spec.color: Unsupported value: \"green\": supported values: \"red\", \"blue\", spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1]"
    );
    assert_eq!(status["details"]["causes"][0]["reason"], "FieldValueNotSupported");
    let created =
        widgets.create(&PostParams::default(), &widget("w1", json!({"color": "red", "unknown": true}))).await.unwrap();
    assert!(created.data["spec"].get("unknown").is_none(), "unknown fields are pruned");
    widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "UpToDate", "reason": "AllGood"}]}})),
        )
        .await
        .unwrap();
    let table = raw_with(
        &client,
        "GET",
        "/apis/example.com/v1/namespaces/w/widgets/w1",
        &[("accept", TABLE)],
        None,
        Value::Null,
    )
    .await
    .json();
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["rows"][0]["cells"], json!(["w1", "red", "AllGood"]));

    let scale = widgets.get_scale("w1").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(0));
    widgets.patch_scale("w1", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await.unwrap();
    assert_eq!(widgets.get("w1").await.unwrap().data["spec"]["replicas"], 4);
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_stops_serving_it() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "gone").await;
    let widgets = widgets(&client, "gone").await;
    widgets.create(&PostParams::default(), &widget("w1", json!({"color": "red"}))).await.unwrap();
    let groups = raw(&client, "GET", "/apis", None, Value::Null).await.json();
    assert!(groups["groups"].as_array().unwrap().iter().any(|g| g["name"] == "example.com"));
    let resources = raw(&client, "GET", "/apis/example.com/v1", None, Value::Null).await.json();
    assert_eq!(resources["resources"][0]["name"], "widgets");
    let mut watch =
        RawWatch::open(&client, "/apis/example.com/v1/namespaces/gone/widgets?watch=true&resourceVersion=0").await;
    assert_eq!(watch.next().await.unwrap()["type"], "ADDED");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("widgets.example.com", &DeleteParams::default()).await.unwrap();
    let deleted = watch.next().await.unwrap();
    assert_eq!(
        (deleted["type"].as_str(), deleted["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("w1"))
    );
    eventually("the CRD is gone", || {
        let crds = crds.clone();
        async move { crds.get_opt("widgets.example.com").await.unwrap().is_none() }
    })
    .await;
    assert_eq!(
        raw(&client, "GET", "/apis/example.com/v1/namespaces/gone/widgets", None, Value::Null).await.status,
        404
    );
    let groups = raw(&client, "GET", "/apis", None, Value::Null).await.json();
    assert!(!groups["groups"].as_array().unwrap().iter().any(|g| g["name"] == "example.com"));
}

#[tokio::test]
async fn kubectl_tables_show_node_and_pod_status() {
    let server = server().await;
    let client = server.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.33.1",
        "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "",
        "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    nodes.cordon("n1").await.unwrap();
    let table = raw_with(&client, "GET", "/api/v1/nodes", &[("accept", TABLE)], None, Value::Null).await.json();
    assert_eq!(
        table["rows"][0]["cells"].as_array().unwrap()[0..3],
        json!(["n1", "Ready,SchedulingDisabled", "worker"]).as_array().unwrap()[..]
    );
    assert_eq!(table["rows"][0]["cells"][4], "v1.33.1");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    namespace(&client, "t").await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "t");
    pods.create(&PostParams::default(), &pod("p", json!({}), Some("n1"))).await.unwrap();
    let table =
        raw_with(&client, "GET", "/api/v1/namespaces/t/pods", &[("accept", TABLE)], None, Value::Null).await.json();
    assert_eq!(
        table["rows"][0]["cells"].as_array().unwrap()[0..3],
        json!(["p", "0/1", "Pending"]).as_array().unwrap()[..]
    );
}

#[tokio::test]
async fn deployments_scale_through_their_subresource() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "d").await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "d");
    let deployment: Deployment = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})).unwrap();
    let created = deployments.create(&PostParams::default(), &deployment).await.unwrap();
    assert_eq!(created.spec.as_ref().unwrap().replicas, Some(1), "defaulted");
    assert_eq!(created.metadata.generation, Some(1));
    let scale = deployments.get_scale("web").await.unwrap();
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
    deployments
        .patch_scale("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    let scaled = deployments.get("web").await.unwrap();
    assert_eq!((scaled.spec.unwrap().replicas, scaled.metadata.generation), (Some(3), Some(2)));
    let mismatch: Deployment = serde_json::from_value(json!({"metadata": {"name": "bad"}, "spec": {
        "selector": {"matchLabels": {"app": "x"}},
        "template": {"metadata": {"labels": {"app": "y"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})).unwrap();
    assert!(
        matches!(deployments.create(&PostParams::default(), &mismatch).await, Err(kube::Error::Api(s)) if s.code == 422)
    );
}
