//! The disruption controller in a running cluster: PDB status as upstream computes it, evictions against it
//! (checklist item C31), failures, and the pause switch.

use crate::cluster_support;

use cluster_support::*;
use dev::cluster::{PdbStyle, SampleWorkloads};
use dev::controllers::names;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{EvictParams, PostParams};
use serde_json::json;
use std::time::Duration;

fn status(pdb: PodDisruptionBudget) -> k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus {
    pdb.status.unwrap()
}

fn condition(pdb: &PodDisruptionBudget) -> (String, String) {
    let conditions = pdb.status.as_ref().unwrap().conditions.as_ref().unwrap();
    let allowed = conditions.iter().find(|c| c.type_ == "DisruptionAllowed").unwrap();
    (allowed.status.clone(), allowed.reason.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdb_statuses_follow_min_available_and_max_unavailable() {
    let cluster = cluster_with(|config| {
        config.nodes = 5;
        config.workloads = Some(SampleWorkloads {
            pods_per_worker: 3,
            replicas: 3,
            statefulset_every: 2,
            pdb: PdbStyle::Mixed,
            daemonset: false,
            ..SampleWorkloads::default()
        });
    })
    .await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client(), "demo");
    // web-0: maxUnavailable 1; db-1: minAvailable 2; web-2: maxUnavailable 50%; db-3: minAvailable 50%.
    let expected = [("web-0", 2, 1), ("db-1", 2, 1), ("web-2", 1, 2), ("db-3", 2, 1)];
    for (name, desired, allowed) in expected {
        let pdb = pdbs.get(name).await.unwrap();
        let generation = pdb.metadata.generation;
        assert_eq!(condition(&pdb), ("True".to_owned(), "SufficientPods".to_owned()), "{name}");
        let status = status(pdb);
        assert_eq!(
            (status.expected_pods, status.current_healthy, status.desired_healthy, status.disruptions_allowed),
            (3, 3, desired, allowed),
            "{name}"
        );
        assert_eq!(status.observed_generation, generation, "{name}");
    }
    cluster.shutdown().await;
}

/// C31: after one eviction `disruptionsAllowed` drops (and the pod is in `disruptedPods`); it is computed again
/// once the replacement pod is Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_eviction_the_budget_drops_and_recovers_once_the_replacement_is_ready() {
    let cluster = cluster_with(|config| {
        config.nodes = 4;
        config.workloads = Some(deployments_only(3));
        config.timing.pod_startup = Duration::from_secs(1);
    })
    .await;
    let client = cluster.client_with(|config| config.default_retry = false);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "demo");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    assert_eq!(status(pdbs.get("web-0").await.unwrap()).disruptions_allowed, 1);
    // Paused, so that each step can be seen: the eviction's own write, then the controller's.
    cluster.faults().pause_controller(names::DISRUPTION);
    cluster.faults().pause_controller(names::KUBELET);
    let web: Vec<String> = pods_in(&cluster, "demo").iter().map(|p| p.meta.name.to_string()).collect();
    pods.evict(&web[0], &EvictParams::default()).await.unwrap();
    let after = status(pdbs.get("web-0").await.unwrap());
    assert_eq!(after.disruptions_allowed, 0);
    assert!(after.disrupted_pods.unwrap_or_default().contains_key(&web[0]), "the evicted pod is recorded");
    let refused = pods.evict(&web[1], &EvictParams::default()).await.unwrap_err();
    let kube::Error::Api(refused) = refused else { panic!("not an API error") };
    assert_eq!(refused.code, 429);
    cluster.faults().resume_controller(names::DISRUPTION);
    // The evicted pod is terminating, its replacement cannot start while the kubelets are paused: the budget
    // stays exhausted, without the disrupted entry.
    eventually("the controller has seen the terminating pod", || async {
        status(pdbs.get("web-0").await.unwrap()).disrupted_pods.unwrap_or_default().is_empty()
    })
    .await;
    let stalled = status(pdbs.get("web-0").await.unwrap());
    assert_eq!((stalled.current_healthy, stalled.disruptions_allowed), (2, 0));
    cluster.faults().resume_controller(names::KUBELET);
    eventually("the budget allows one disruption again", || async {
        let status = status(pdbs.get("web-0").await.unwrap());
        status.current_healthy == 3 && status.disruptions_allowed == 1
    })
    .await;
    pods.evict(&web[1], &EvictParams::default()).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_disruption_controller_leaves_a_new_pdb_unprocessed_until_resumed() {
    let cluster = cluster_with(|config| {
        config.nodes = 4;
        config.workloads = Some(SampleWorkloads { pdb: PdbStyle::None, ..deployments_only(3) });
    })
    .await;
    let client = cluster.client_with(|config| config.default_retry = false);
    cluster.faults().pause_controller(names::DISRUPTION);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "demo");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "web"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web-0"}}}}))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    let victim = pods_in(&cluster, "demo")[0].meta.name.to_string();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Err(kube::Error::Api(refused)) = pods.evict(&victim, &EvictParams::default()).await else {
        panic!("an unprocessed PDB must refuse evictions")
    };
    assert_eq!(refused.code, 429);
    assert!(refused.message.contains("disruption budget"), "{}", refused.message);
    assert_eq!(status(pdbs.get("web").await.unwrap()).observed_generation, None);
    cluster.faults().resume_controller(names::DISRUPTION);
    eventually("the PDB is processed", || async { status(pdbs.get("web").await.unwrap()).disruptions_allowed == 1 })
        .await;
    pods.evict(&victim, &EvictParams::default()).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_unavailable_pdb_over_daemonset_pods_fails_safe() {
    let cluster = cluster_with(|config| {
        config.nodes = 3;
        config.workloads =
            Some(SampleWorkloads { pods_per_worker: 0, pdb: PdbStyle::None, ..SampleWorkloads::default() });
    })
    .await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client(), "demo");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "agents"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "node-agent"}}}}))
    .unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    eventually("the PDB reports SyncFailed", || async {
        let pdb = pdbs.get("agents").await.unwrap();
        pdb.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| !c.is_empty())
            && condition(&pdb) == ("False".to_owned(), "SyncFailed".to_owned())
    })
    .await;
    let status = status(pdbs.get("agents").await.unwrap());
    assert_eq!(status.disruptions_allowed, 0);
    assert_eq!(status.observed_generation, None, "a failed sync observes nothing");
    cluster.shutdown().await;
}
