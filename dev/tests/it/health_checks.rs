//! Health checks on any object (issue 33 item 1): while a check of `spec.rollout.healthChecks` is false no node
//! starts, the NodeVersion's status and one Event name the check, the object and what it saw
//! (`HealthCheckFailing`); once the check passes the rollout moves; a check false past its `timeout` stops the
//! rollout as failed (`HealthCheckTimedOut`); a missing object and a read the controller's RBAC forbids are named;
//! pausing or deleting the NodeVersion meanwhile leaves no node cordoned. The controller reads the objects with
//! exactly the RBAC of `deploy/operator.yaml`: a user's ClusterRole labelled
//! `update.edgeless.systems/aggregate-to-health-checks: "true"` grants the reads.

use crate::{cluster_support, support};

use controller::forecast::report::{Flags, Report};
use controller::forecast::snapshot::Snapshot;
use dev::apiserver::{Patch, Store};
use dev::harness;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, PatchParams, PostParams};
use serde_json::{Value, json};
use shared::crd::NodeVersion;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::{bare_cluster, condition_of, create_version, eventually, fake_agents, operator, rolled_out, status_of};

use crate::support::VERSION;
const LABEL: &str = "update.edgeless.systems/aggregate-to-health-checks";

/// The Ceph-style check on the ConfigMap `ceph/health`'s `data.health`.
fn ceph_check(object_name: &str, timeout: &str) -> Value {
    json!({"name": "ceph-health", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "ceph",
           "objectName": object_name, "expression": "self.data.health == 'HEALTH_OK'", "timeout": timeout})
}

/// The namespace `ceph`, its ConfigMap `health` saying `health`, and the ClusterRole that lets the controller read
/// ConfigMaps through the aggregated role (its rules copied as the aggregation controller would: the bare API server
/// runs no controller).
fn ceph_namespace(store: &Store, health: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "ceph"}})).unwrap();
    store.api::<Namespace>().create(None, &ns, &PostParams::default()).unwrap();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "health", "namespace": "ceph"},
                                                      "data": {"health": health}}))
    .unwrap();
    store.api::<ConfigMap>().create(Some("ceph"), &cm, &PostParams::default()).unwrap();
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "ceph-health-reader", "labels": {LABEL: "true"}},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]
    }))
    .unwrap();
    store.api::<ClusterRole>().create(None, &role, &PostParams::default()).unwrap();
    let roles = store.api::<ClusterRole>();
    let aggregated = roles.get(None, "update-operator-health-checks").unwrap();
    let all = roles.list(None, &ListParams::default()).unwrap().items;
    let refs: Vec<&ClusterRole> = all.iter().collect();
    let rules = dev::controllers::clusterroleaggregation::aggregated_rules(&aggregated, &refs).unwrap();
    let patch = json!({"rules": rules});
    roles.patch(None, "update-operator-health-checks", &Patch::Merge(patch), &PatchParams::default()).unwrap();
}

fn set_health(store: &Store, health: &str) {
    let patch = json!({"data": {"health": health}});
    store.api::<ConfigMap>().patch(Some("ceph"), "health", &Patch::Merge(patch), &PatchParams::default()).unwrap();
}

/// The notes of the Events with `reason`.
fn notes(store: &Store, reason: &str) -> Vec<String> {
    let list = store.api::<Event>().list(None, &ListParams::default()).unwrap();
    list.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.note).collect()
}

/// The `Progressing` condition's message, once its reason is `reason` (and a check was evaluated).
async fn progressing(store: &Store, reason: &str) -> String {
    eventually(Duration::from_secs(60), &format!("Progressing {reason}"), || {
        let (_, r, message) = condition_of(&status_of(store, VERSION), "Progressing")?;
        // Not the moment before a check's first evaluation.
        (r == reason && !message.ends_with("is not evaluated yet; no node starts before")).then_some(message)
    })
    .await
}

/// Whether any node was cordoned, given an intent or labelled before/after-reboot while `quiet` is set.
fn watch_nodes(store: Store, quiet: Arc<AtomicBool>, touched: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            for n in store.api::<Node>().list(None, &ListParams::default()).map(|l| l.items).unwrap_or_default() {
                let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
                let intent =
                    n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("update.edgeless.systems/intent"));
                let labelled = n.metadata.labels.as_ref().is_some_and(|l| {
                    l.contains_key(shared::protocol::keys::BEFORE_REBOOT_LABEL)
                        || l.contains_key(shared::protocol::keys::AFTER_REBOOT_LABEL)
                });
                if (cordoned || intent || labelled) && quiet.load(Ordering::SeqCst) {
                    touched.store(true, Ordering::SeqCst);
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_a_failing_check_holds_the_rollout_named_once_and_it_moves_once_the_check_passes() {
    let server = bare_cluster(&["w-0", "w-1"]).await;
    let store = server.store();
    ceph_namespace(&store, "HEALTH_WARN");
    let (quiet, touched) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let sampler = watch_nodes(store.clone(), quiet.clone(), touched.clone());
    let agents = fake_agents(&server, &["w-0", "w-1"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1, "healthChecks": [ceph_check("health", "30m")]}));

    let message = progressing(&store, "HealthCheckFailing").await;
    assert!(message.starts_with("health check \"ceph-health\" fails since "), "{message}");
    assert!(
        message.ends_with(
            "ConfigMap ceph/health: self.data.health == 'HEALTH_OK' is false (self.data.health is \"HEALTH_WARN\")"
        ),
        "{message}"
    );
    let (status, _, _) = condition_of(&status_of(&store, VERSION), "Progressing").unwrap();
    assert_eq!(status, "False");
    // The status lists each check's verdict.
    let checks = status_of(&store, VERSION).health_checks;
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!((checks[0].name.as_str(), checks[0].passing), ("ceph-health", false));
    assert!(checks[0].message.contains("(self.data.health is \"HEALTH_WARN\")"), "{checks:?}");
    // The preflight, when the rollout starts, names what the check saw (it waits for its first evaluation).
    let preflight = eventually(Duration::from_secs(30), "the Preflight condition", || {
        condition_of(&status_of(&store, VERSION), "Preflight")
    })
    .await;
    assert_eq!(preflight.1, "BlockersFound");
    assert!(preflight.2.contains("HealthCheckFailing") && preflight.2.contains("HEALTH_WARN"), "{preflight:?}");
    // One Event, however many evaluations (every 10 s) see the same.
    eventually(Duration::from_secs(30), "the Event", || {
        (!notes(&store, "HealthCheckFailing").is_empty()).then_some(())
    })
    .await;
    let version = || store.api::<NodeVersion>().get(None, VERSION).unwrap().metadata.resource_version;
    tokio::time::sleep(Duration::from_secs(13)).await;
    // Evaluations that see the same write nothing (two of them in 12 s).
    let before = version();
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(version(), before, "the NodeVersion was written while its check saw the same");
    let events = notes(&store, "HealthCheckFailing");
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains("ConfigMap ceph/health") && events[0].contains("HEALTH_WARN"), "{events:?}");
    assert_eq!(status_of(&store, VERSION).counts.in_progress, 0);
    // `update-operator plan` shows the gate that holds the next wave, with the object and the value it saw.
    let client = server.client();
    let mut snapshot = Snapshot::read(&client).await.unwrap();
    snapshot.check_health(&client, None, jiff::Timestamp::now()).await;
    let report = Report::build(snapshot, None, Flags::default(), None, jiff::Timestamp::now());
    assert!(report.blocked(), "{}", report.text());
    let blocker = report.blockers.iter().find(|b| b.message.starts_with("HealthCheckFailing: ")).unwrap();
    assert!(blocker.message.contains("ConfigMap ceph/health") && blocker.message.contains("\"HEALTH_WARN\""));
    assert!(report.text().contains("self.data.health is \"HEALTH_WARN\""), "{}", report.text());

    // The check passes: the nodes start (the next evaluation within 10 s), and the rollout completes.
    quiet.store(false, Ordering::SeqCst);
    set_health(&store, "HEALTH_OK");
    let done = eventually(Duration::from_secs(90), "the rollout", || rolled_out(&store, 2)).await;
    assert!(done.health_checks[0].passing, "{:?}", done.health_checks);
    sampler.abort();
    assert!(!touched.load(Ordering::SeqCst), "a node was touched while the check failed");
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_a_missing_object_is_named_and_pausing_or_deleting_the_nodeversion_leaves_no_node_cordoned() {
    let server = bare_cluster(&["w-0", "w-1"]).await;
    let store = server.store();
    ceph_namespace(&store, "HEALTH_OK");
    let (quiet, touched) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let sampler = watch_nodes(store.clone(), quiet.clone(), touched.clone());
    let agents = fake_agents(&server, &["w-0", "w-1"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"healthChecks": [ceph_check("gone", "30m")]}));

    let message = progressing(&store, "HealthCheckFailing").await;
    assert!(message.ends_with(": ConfigMap ceph/gone not found"), "{message}");
    // The API server refuses a check that names both an object and a selector (the CRD's CEL rule).
    let both = json!({"spec": {"rollout": {"healthChecks": [{
        "name": "both", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "ceph", "objectName": "health",
        "selector": {"matchLabels": {"app": "x"}}, "expression": "self.data.ok == 'true'"}]}}});
    let versions: kube::Api<NodeVersion> = kube::Api::all(server.client());
    let refused = versions.patch(VERSION, &PatchParams::default(), &kube::api::Patch::Merge(both)).await.unwrap_err();
    assert!(refused.to_string().contains("exactly one of objectName and selector must be set"), "{refused}");
    // An expression that does not compile: the controller refuses the spec, naming the field.
    let mut bad = ceph_check("gone", "30m");
    bad["expression"] = json!("self.data.health ==");
    let patch = json!({"spec": {"rollout": {"healthChecks": [bad]}}});
    store.api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(patch), &PatchParams::default()).unwrap();
    let message = progressing(&store, "InvalidSpec").await;
    assert!(message.contains("spec.rollout.healthChecks[0].expression: does not compile"), "{message}");
    // Paused mid-wait (the check fixed): the pause is the hold, and no node moves.
    let pause = json!({"spec": {"rollout": {"paused": true, "healthChecks": [ceph_check("gone", "30m")]}}});
    store.api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(pause), &PatchParams::default()).unwrap();
    progressing(&store, "Paused").await;
    // Deleted mid-wait: it goes (its finalizer removed) and no node was ever touched.
    store.api::<NodeVersion>().delete(None, VERSION, &DeleteParams::default()).unwrap();
    eventually(Duration::from_secs(60), "the NodeVersion gone", || {
        store.api::<NodeVersion>().get(None, VERSION).is_err().then_some(())
    })
    .await;
    sampler.abort();
    assert!(!touched.load(Ordering::SeqCst), "a node was cordoned or given an intent");
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_a_nodeversion_retargeted_while_its_check_fails_touches_no_node_and_goes_to_the_new_target() {
    let server = bare_cluster(&["w-0", "w-1"]).await;
    let store = server.store();
    ceph_namespace(&store, "HEALTH_WARN");
    let (quiet, touched) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let sampler = watch_nodes(store.clone(), quiet.clone(), touched.clone());
    let agents = fake_agents(&server, &["w-0", "w-1"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1, "healthChecks": [ceph_check("health", "30m")]}));
    progressing(&store, "HealthCheckFailing").await;

    // Given another target mid-wait: the new target is held by the same check, named; no node was touched.
    let patch = json!({"spec": {"image": "v3"}});
    store.api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(patch), &PatchParams::default()).unwrap();
    let message = eventually(Duration::from_secs(60), "the new target held by the check", || {
        let status = status_of(&store, VERSION);
        let (_, reason, message) = condition_of(&status, "Progressing")?;
        (status.target_image.as_deref() == Some("v3") && reason == "HealthCheckFailing").then_some(message)
    })
    .await;
    assert!(message.contains("ConfigMap ceph/health") && message.contains("HEALTH_WARN"), "{message}");
    tokio::time::sleep(Duration::from_secs(11)).await;
    let status = status_of(&store, VERSION);
    assert!(status.in_flight.is_empty() && status.counts.up_to_date == 0, "{status:?}");
    assert!(!touched.load(Ordering::SeqCst), "a node was cordoned or given an intent while the check failed");

    // The check passes: every node goes to the new target.
    quiet.store(false, Ordering::SeqCst);
    set_health(&store, "HEALTH_OK");
    let done = eventually(Duration::from_secs(90), "the rollout to v3", || {
        rolled_out(&store, 2).filter(|s| s.target_image.as_deref() == Some("v3"))
    })
    .await;
    assert!(done.held_back.is_empty(), "{:?}", done.held_back);
    for node in ["w-0", "w-1"] {
        let annotations = store.api::<Node>().get(None, node).unwrap().metadata.annotations.unwrap_or_default();
        assert_eq!(annotations.get(shared::protocol::keys::OS_IMAGE).map(String::as_str), Some("v3"), "{node}");
    }
    sampler.abort();
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_a_new_leader_resumes_the_since_of_a_failing_check_from_the_status() {
    let server = bare_cluster(&["w-0"]).await;
    let store = server.store();
    ceph_namespace(&store, "HEALTH_WARN");
    let agents = fake_agents(&server, &["w-0"], "v1", Duration::from_millis(50));
    let first = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"healthChecks": [ceph_check("health", "30m")]}));
    progressing(&store, "HealthCheckFailing").await;
    let recorded = status_of(&store, VERSION).health_checks[0].clone();
    assert!(!recorded.passing, "{recorded:?}");

    // The leader goes; another takes over. The check still fails (what it sees changes, so the new leader writes).
    first.stop(Duration::from_secs(10)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = harness::controller(&operator(&server), harness::controller_options("c2"));
    set_health(&store, "HEALTH_ERR");
    let now = eventually(Duration::from_secs(90), "the new leader's verdict", || {
        let check = status_of(&store, VERSION).health_checks.into_iter().next()?;
        check.message.contains("HEALTH_ERR").then_some(check)
    })
    .await;
    // Its `for` and timeout count from when the check began to fail, not from the hand-over.
    assert!(!now.passing, "{now:?}");
    assert_eq!(now.since, recorded.since, "the new leader started the check's clock over");
    let (_, reason, message) = condition_of(&status_of(&store, VERSION), "Progressing").unwrap();
    assert_eq!(reason, "HealthCheckFailing");
    assert!(message.contains(&format!("fails since {}", recorded.since.0)), "{message}");
    second.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_a_check_false_past_its_timeout_stops_the_rollout_as_failed_until_it_passes() {
    let server = bare_cluster(&["w-0"]).await;
    let store = server.store();
    ceph_namespace(&store, "HEALTH_ERR");
    let agents = fake_agents(&server, &["w-0"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"healthChecks": [ceph_check("health", "3s")]}));

    let message = progressing(&store, "HealthCheckTimedOut").await;
    assert!(message.contains("longer than its timeout 3s; the rollout is stopped"), "{message}");
    assert!(message.contains("HEALTH_ERR"), "{message}");
    let event = eventually(Duration::from_secs(30), "the Warning Event", || {
        let list = store.api::<Event>().list(None, &ListParams::default()).unwrap();
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("HealthCheckTimedOut"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(status_of(&store, VERSION).counts.in_progress, 0);
    // It passes again: the rollout goes on.
    set_health(&store, "HEALTH_OK");
    eventually(Duration::from_secs(90), "the rollout", || rolled_out(&store, 1)).await;
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_a_comparison_type_error_is_named_before_any_read_and_no_node_starts() {
    let server = bare_cluster(&["w-0", "w-1"]).await;
    let store = server.store();
    ceph_namespace(&store, "HEALTH_OK");
    let (quiet, touched) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let sampler = watch_nodes(store.clone(), quiet.clone(), touched.clone());
    let agents = fake_agents(&server, &["w-0", "w-1"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    // `data.health` is a string in the ConfigMap schema the API server publishes; the check compares it with an
    // int. Its object does not even exist: the type error is found before any read (it would say "not found").
    let mut check = ceph_check("gone", "30m");
    check["expression"] = json!("self.data.health == 1");
    create_version(&store, "v2", json!({"maxUnavailable": 1, "healthChecks": [check]}));

    let message = progressing(&store, "HealthCheckFailing").await;
    assert!(message.starts_with("health check \"ceph-health\" fails since "), "{message}");
    assert!(
        message.ends_with(
            "ConfigMap ceph/gone: self.data.health == 1: found no matching overload for '_==_' applied to '(string, \
             int)' (self.data.health is string in the ConfigMap schema the API server publishes); it fails until the \
             expression is fixed"
        ),
        "{message}"
    );
    let checks = status_of(&store, VERSION).health_checks;
    assert!(checks.len() == 1 && !checks[0].passing, "{checks:?}");
    // Two more evaluations (every 10 s): still held, no node started.
    tokio::time::sleep(Duration::from_secs(21)).await;
    let (_, reason, _) = condition_of(&status_of(&store, VERSION), "Progressing").unwrap();
    assert_eq!(reason, "HealthCheckFailing");
    assert_eq!(status_of(&store, VERSION).counts.in_progress, 0);
    sampler.abort();
    assert!(!touched.load(Ordering::SeqCst), "a node was cordoned or given an intent while the check was refused");
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

/// A CephCluster-like custom resource (`ceph.rook.io/v1`), namespaced, with a free-form status.
fn ceph_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": "cephclusters.ceph.rook.io"},
        "spec": {"group": "ceph.rook.io", "scope": "Namespaced",
                 "names": {"plural": "cephclusters", "singular": "cephcluster", "kind": "CephCluster",
                           "listKind": "CephClusterList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                   "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_a_custom_resource_is_read_once_a_labelled_cluster_role_grants_it_through_the_aggregated_role() {
    let cluster = cluster_support::bare_cluster(2).await;
    let store = cluster.store();
    store.api::<CustomResourceDefinition>().create(None, &ceph_crd(), &PostParams::default()).unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "rook-ceph"}})).unwrap();
    store.api::<Namespace>().create(None, &ns, &PostParams::default()).unwrap();
    let api = cluster.client();
    let resource = kube::api::ApiResource {
        group: "ceph.rook.io".into(),
        version: "v1".into(),
        api_version: "ceph.rook.io/v1".into(),
        kind: "CephCluster".into(),
        plural: "cephclusters".into(),
    };
    let clusters: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(api, "rook-ceph", &resource);
    let object: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ceph.rook.io/v1", "kind": "CephCluster", "metadata": {"name": "rook-ceph"},
        "status": {"ceph": {"health": "HEALTH_OK"}}
    }))
    .unwrap();
    cluster_support::eventually("the CephCluster created", || {
        let (clusters, object) = (clusters.clone(), object.clone());
        async move { clusters.create(&PostParams::default(), &object).await.is_ok() }
    })
    .await;
    let agents = support::start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let check = json!({"name": "ceph", "apiVersion": "ceph.rook.io/v1", "kind": "CephCluster",
                       "namespace": "rook-ceph", "objectName": "rook-ceph", "for": "1s",
                       "expression": "self.status.ceph.health == 'HEALTH_OK'"});
    create_version(&store, "v2", json!({"healthChecks": [check]}));

    // Without a grant the read is forbidden: named, with what to do.
    let message = progressing(&store, "HealthCheckFailing").await;
    assert!(
        message.contains("forbidden: may not get cephclusters.ceph.rook.io; grant the controller get and list"),
        "{message}"
    );
    assert!(message.contains(LABEL), "{message}");
    // The user's labelled ClusterRole: the aggregation controller adds it to the controller's aggregated role.
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "rook-ceph-health-reader", "labels": {LABEL: "true"}},
        "rules": [{"apiGroups": ["ceph.rook.io"], "resources": ["cephclusters"], "verbs": ["get", "list"]}]
    }))
    .unwrap();
    store.api::<ClusterRole>().create(None, &role, &PostParams::default()).unwrap();
    let nodes = support::node_names(&store).len() as i32;
    eventually(Duration::from_secs(180), "the rollout", || rolled_out(&store, nodes)).await;
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    cluster.shutdown().await;
}

#[test]
fn health_checks_the_ceph_example_is_accepted_and_grants_through_the_aggregated_role() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/examples/ceph-health-check.yaml"))
            .unwrap();
    let documents: Vec<Value> = text.split("\n---\n").map(|d| yaml_serde::from_str(d).unwrap()).collect();
    let crd = shared::crd::all().into_iter().find(|c| c.spec.names.kind == "NodeVersion").unwrap();
    let schema =
        serde_json::to_value(crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap())
            .unwrap();
    let mut pruned = documents[0].clone();
    dev::apiserver::schema::prune_and_default(&schema, &mut pruned);
    assert_eq!(dev::apiserver::schema::validate(&schema, &pruned), vec![]);
    assert_eq!(dev::apiserver::crd_cel::validate(&schema, &pruned, None), vec![]);
    assert_eq!(pruned["spec"]["rollout"], documents[0]["spec"]["rollout"], "the schema drops a field of the example");
    let version: NodeVersion = serde_json::from_value(documents[0].clone()).unwrap();
    let policy =
        controller::policy::Policy::from_spec(&version.spec.rollout, "2026-11-21T12:00:00Z".parse().unwrap()).unwrap();
    let check = &policy.health_checks[0];
    assert_eq!(check.object(), "CephCluster rook-ceph/rook-ceph");
    assert_eq!(
        (check.hold_for, check.timeout),
        (jiff::SignedDuration::from_mins(2), jiff::SignedDuration::from_mins(45))
    );
    let healthy = json!({"status": {"ceph": {"health": "HEALTH_OK"}}});
    assert_eq!(check.expression.evaluate(&healthy), Ok(()));
    assert!(check.expression.evaluate(&json!({"metadata": {}})).is_err());
    let role: ClusterRole = serde_json::from_value(documents[1].clone()).unwrap();
    assert_eq!(role.metadata.labels.unwrap()[LABEL], "true");
}

/// The check `expression` on ConfigMaps of `ceph`, by `target` (`objectName` or `selector`).
fn config_map_check(target: Value, expression: &str) -> controller::policy::health::Check {
    let mut check = json!({"name": "c", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "ceph",
                           "expression": expression});
    check.as_object_mut().unwrap().extend(target.as_object().unwrap().clone());
    let spec: shared::crd::HealthCheck = serde_json::from_value(check).unwrap();
    controller::policy::health::validate(&[spec]).unwrap().remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_the_evaluator_reads_by_name_or_selector_and_names_what_fails() {
    let server = bare_cluster(&[]).await;
    let store = server.store();
    ceph_namespace(&store, "HEALTH_OK");
    for (name, ready) in [("osd-0", "true"), ("osd-1", "true"), ("osd-2", "false")] {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ceph", "labels": {"app": "osd", "ready": ready}},
            "data": {"ready": ready}
        }))
        .unwrap();
        store.api::<ConfigMap>().create(Some("ceph"), &cm, &PostParams::default()).unwrap();
    }
    let evaluator = controller::health_checks::HealthChecks::new(server.client(), Default::default());
    let by_name = |name: &str, e: &str| config_map_check(json!({"objectName": name}), e);
    let by_labels = |labels: Value, e: &str| config_map_check(json!({"selector": {"matchLabels": labels}}), e);

    let ok = evaluator.evaluate(&by_name("health", "self.data.health == 'HEALTH_OK'")).await;
    assert_eq!(ok, (true, "ConfigMap ceph/health: self.data.health == 'HEALTH_OK' is true".into()));
    let missing = evaluator.evaluate(&by_name("gone", "self.data.health == 'HEALTH_OK'")).await;
    assert_eq!(missing, (false, "ConfigMap ceph/gone not found".into()));
    // A missing field is an error naming it, and a type error fails the check with CEL's error: never true.
    let (passing, seen) = evaluator.evaluate(&by_name("health", "self.data.state == 'up'")).await;
    assert!(!passing && seen.starts_with("ConfigMap ceph/health: self.data.state == 'up': ") && seen.contains("state"));
    let (passing, seen) = evaluator.evaluate(&by_name("health", "self.data.health > 3")).await;
    assert!(!passing && seen.starts_with("ConfigMap ceph/health: self.data.health > 3: "), "{seen}");
    // The schema types `data`'s values as strings: the comparison with an int is refused before any read.
    assert!(seen.contains("found no matching overload for '_>_' applied to '(string, int)'"), "{seen}");
    // A field the kind's schema (the API server's OpenAPI v3 document) does not have: a type error, before any read.
    let (passing, seen) = evaluator.evaluate(&by_name("health", "self.dta.health == 'HEALTH_OK'")).await;
    assert!(!passing, "{seen}");
    assert_eq!(
        seen,
        "ConfigMap ceph/health: self.dta.health == 'HEALTH_OK': undefined field 'dta' (the ConfigMap schema the API \
         server publishes has none); it fails until the expression is fixed"
    );
    let (passing, seen) = evaluator.evaluate(&by_name("health", "self.metadata.name == 'health'")).await;
    assert!(passing, "{seen}");
    // A selector: each object must pass; the first that does not is named; none listed is false.
    let all = evaluator.evaluate(&by_labels(json!({"app": "osd", "ready": "true"}), "self.data.ready == 'true'")).await;
    assert_eq!(all, (true, "ConfigMap ceph/-l app=osd,ready=true: true for each of 2 objects".into()));
    let (passing, seen) = evaluator.evaluate(&by_labels(json!({"app": "osd"}), "self.data.ready == 'true'")).await;
    assert!(!passing, "{seen}");
    assert_eq!(seen, "ConfigMap ceph/osd-2: self.data.ready == 'true' is false (self.data.ready is \"false\")");
    let none = evaluator.evaluate(&by_labels(json!({"app": "mon"}), "self.data.ready == 'true'")).await;
    assert_eq!(none, (false, "ConfigMap ceph/-l app=mon: no object matches".into()));
    // The kind and the scope are found by discovery.
    let mut unserved = by_name("health", "self.data.health == 'x'");
    unserved.kind = "ConfigMapp".into();
    let (passing, seen) = evaluator.evaluate(&unserved).await;
    assert!(!passing && seen.contains("the API server does not serve kind ConfigMapp in v1"), "{seen}");
    let mut scoped = by_name("w-0", "self.metadata.name == 'w-0'");
    scoped.kind = "Node".into();
    let (passing, seen) = evaluator.evaluate(&scoped).await;
    assert!(!passing && seen.ends_with("Node is cluster-scoped; leave namespace out"), "{seen}");
    server.shutdown().await;
}
