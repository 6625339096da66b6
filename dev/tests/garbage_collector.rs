//! The garbage collector: background, foreground and orphan cascades over ownerReferences.

mod cluster_support;

use cluster_support::*;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

async fn web_cluster() -> dev::cluster::Cluster {
    cluster_with(|config| {
        config.nodes = 3;
        config.workloads = Some(deployments_only(2));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_removes_its_replicasets_and_pods_in_the_background() {
    let cluster = web_cluster().await;
    let client = cluster.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "demo");
    deployments.delete("web-0", &DeleteParams::background()).await.unwrap();
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "demo");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    eventually("the ReplicaSet and the pods are gone", || async {
        replicasets.list(&ListParams::default()).await.unwrap().items.is_empty()
            && pods.list(&ListParams::default()).await.unwrap().items.is_empty()
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_delete_waits_for_the_dependents_and_an_orphaning_delete_keeps_them() {
    let cluster = web_cluster().await;
    let client = cluster.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "demo");
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "demo");
    let rs = replicasets.list(&ListParams::default()).await.unwrap().items.remove(0);
    let rs_name = rs.metadata.name.clone().unwrap();

    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    let rs_uid = rs.metadata.uid.clone().unwrap();
    let owned: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.owner_references.iter().flatten().any(|o| o.uid == rs_uid))
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(owned.len(), 2);
    replicasets.delete(&rs_name, &DeleteParams::orphan()).await.unwrap();
    // The Deployment controller recreates its ReplicaSet under the same (template hash) name: a new uid.
    eventually("the ReplicaSet is gone", || async {
        replicasets.get_opt(&rs_name).await.unwrap().is_none_or(|now| now.metadata.uid.as_ref() != Some(&rs_uid))
    })
    .await;
    for name in &owned {
        let pod = pods.get(name).await.unwrap();
        assert!(pod.metadata.owner_references.unwrap_or_default().is_empty(), "{name} was orphaned");
        assert!(pod.metadata.deletion_timestamp.is_none(), "{name} stays");
    }

    deployments.delete("web-0", &DeleteParams::foreground()).await.unwrap();
    eventually("the Deployment is gone once its new ReplicaSet is", || async {
        deployments.get_opt("web-0").await.unwrap().is_none()
            && replicasets.list(&ListParams::default()).await.unwrap().items.is_empty()
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_created_for_an_owner_that_is_gone_is_collected_and_a_dangling_reference_is_dropped() {
    let cluster = bare_cluster(1).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = config_maps.create(&PostParams::default(), &owner).await.unwrap();
    let reference = |name: &str, uid: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid});
    let orphan: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "orphan",
        "ownerReferences": [reference("ghost", "00000000-0000-4000-8000-000000000000")]}}))
    .unwrap();
    config_maps.create(&PostParams::default(), &orphan).await.unwrap();
    let shared: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "shared", "ownerReferences": [
        reference("ghost", "00000000-0000-4000-8000-000000000000"),
        reference("owner", owner.metadata.uid.as_deref().unwrap())]}}))
    .unwrap();
    config_maps.create(&PostParams::default(), &shared).await.unwrap();
    eventually("the object whose only owner is gone is collected", || async {
        config_maps.get_opt("orphan").await.unwrap().is_none()
    })
    .await;
    eventually("the dangling reference is dropped from the object with a live owner", || async {
        config_maps.get("shared").await.unwrap().metadata.owner_references.unwrap_or_default().len() == 1
    })
    .await;
    config_maps.delete("owner", &DeleteParams::default()).await.unwrap();
    eventually("the dependent goes with its last owner", || async {
        config_maps.get_opt("shared").await.unwrap().is_none()
    })
    .await;
    cluster.shutdown().await;
}
