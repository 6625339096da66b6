//! The garbage collector: background, foreground and orphan cascades over ownerReferences.

use crate::cluster_support;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_delete_of_a_deployment_removes_the_pods_then_the_replicaset_then_the_deployment() {
    let cluster = web_cluster().await;
    let client = cluster.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "demo");
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "demo");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    let rs_uid = replicasets.list(&ListParams::default()).await.unwrap().items[0].metadata.uid.clone().unwrap();
    let pod_uids: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.owner_references.iter().flatten().any(|o| o.uid == rs_uid))
        .filter_map(|p| p.metadata.uid)
        .collect();
    assert_eq!(pod_uids.len(), 2);
    // Record the order of the deletions as watchers see them.
    let deleted = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let store = cluster.store();
    let mut watches = Vec::new();
    for gvr in [
        dev::apiserver::Gvr::of::<Pod>(),
        dev::apiserver::Gvr::of::<ReplicaSet>(),
        dev::apiserver::Gvr::of::<Deployment>(),
    ] {
        let stream =
            store.watch(&gvr, Some("demo"), &kube::api::WatchParams::default(), &store.resource_version().to_string());
        let mut stream = stream.unwrap();
        let deleted = deleted.clone();
        watches.push(tokio::spawn(async move {
            use futures::StreamExt;
            while let Some(event) = stream.next().await {
                if let dev::apiserver::store::WatchEvent::Deleted(object) = event {
                    // Three watches feed one list, so the arrival order is not the
                    // store's: the deletion's resourceVersion is.
                    let uid = object["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
                    let rv: u64 = object["metadata"]["resourceVersion"].as_str().unwrap_or_default().parse().unwrap();
                    deleted.lock().push((rv, uid));
                }
            }
        }));
    }
    let deployment_uid = deployments.get("web-0").await.unwrap().metadata.uid.unwrap();
    deployments.delete("web-0", &DeleteParams::foreground()).await.unwrap();
    eventually("the Deployment is gone", || async { deployments.get_opt("web-0").await.unwrap().is_none() }).await;
    let mut order = deleted.lock().clone();
    order.sort();
    let order: Vec<String> = order.into_iter().map(|(_, uid)| uid).collect();
    let at =
        |uid: &String| order.iter().position(|u| u == uid).unwrap_or_else(|| panic!("{uid} not deleted: {order:?}"));
    let rs_at = at(&rs_uid);
    for pod in &pod_uids {
        assert!(at(pod) < rs_at, "a pod went after its ReplicaSet: {order:?}");
    }
    assert!(rs_at < at(&deployment_uid), "the Deployment went before its ReplicaSet: {order:?}");
    for watch in watches {
        watch.abort();
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaning_deletes_of_fresh_deployments_never_delete_their_replicasets() {
    let cluster = bare_cluster(2).await;
    let client = cluster.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    for round in 0..5 {
        let name = format!("fresh-{round}");
        let deployment: Deployment = serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "pause:3"}]}}}}))
        .unwrap();
        deployments.create(&PostParams::default(), &deployment).await.unwrap();
        let selector = format!("app={name}");
        eventually("the ReplicaSet exists", || async {
            !replicasets.list(&ListParams::default().labels(&selector)).await.unwrap().items.is_empty()
        })
        .await;
        // At once, while the collector's caches may still be catching up with the new ReplicaSet.
        deployments.delete(&name, &DeleteParams::orphan()).await.unwrap();
        eventually("the Deployment is gone", || async { deployments.get_opt(&name).await.unwrap().is_none() }).await;
        // Give the collector every chance to (wrongly) act on the ReplicaSet.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let kept = replicasets.list(&ListParams::default().labels(&selector)).await.unwrap().items;
        assert_eq!(kept.len(), 1, "round {round}: the ReplicaSet was deleted");
        assert!(kept[0].metadata.deletion_timestamp.is_none(), "round {round}: the ReplicaSet is being deleted");
        assert!(kept[0].metadata.owner_references.clone().unwrap_or_default().is_empty());
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_delete_waits_only_for_dependents_that_block_it() {
    let cluster = bare_cluster(1).await;
    let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = config_maps.create(&PostParams::default(), &owner).await.unwrap();
    let dependent = |name: &str, block: bool| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "finalizers": ["example.com/hold"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                 "uid": owner.metadata.uid, "blockOwnerDeletion": block}]}}))
        .unwrap()
    };
    config_maps.create(&PostParams::default(), &dependent("blocking", true)).await.unwrap();
    config_maps.create(&PostParams::default(), &dependent("loose", false)).await.unwrap();
    config_maps.delete("owner", &DeleteParams::foreground()).await.unwrap();
    eventually("the blocking dependent is being deleted", || async {
        config_maps.get("blocking").await.unwrap().metadata.deletion_timestamp.is_some()
    })
    .await;
    assert!(config_maps.get_opt("owner").await.unwrap().is_some(), "the owner went before its blocking dependent");
    let release = json!({"metadata": {"finalizers": null}});
    config_maps
        .patch("blocking", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(release.clone()))
        .await
        .unwrap();
    eventually("the owner goes though a non-blocking dependent is still held", || async {
        config_maps.get_opt("owner").await.unwrap().is_none()
    })
    .await;
    eventually("the non-blocking dependent is deleted once its owner is gone", || async {
        config_maps.get("loose").await.unwrap().metadata.deletion_timestamp.is_some()
    })
    .await;
    config_maps.patch("loose", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(release)).await.unwrap();
    cluster.shutdown().await;
}
