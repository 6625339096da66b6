//! The reconciler against a scripted API server, with Tokio's clock paused: deadlines and the
//! delay of held nodes' Events come due as the test advances the clock, never by sleeping.

use super::*;
use crate::drain::{DrainContext, Drains};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Mutex as StdMutex;
use tokio::sync::watch;

/// A request the fake API server received.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    body: Value,
}

/// Nodes and NodeVersions as JSON, patched as a real server would (merge patches of Nodes, JSON
/// patches of NodeVersion status), Events accepted, and everything else 404.
#[derive(Clone, Default)]
struct FakeApi {
    seen: Arc<StdMutex<Vec<Seen>>>,
    objects: Arc<StdMutex<HashMap<String, Value>>>,
    revision: Arc<std::sync::atomic::AtomicU64>,
    /// Node writes answered 500 while set.
    refuse_nodes: Arc<std::sync::atomic::AtomicBool>,
    /// While set, a Node write is answered only once a LIST of pods came (or after a second, counted in
    /// `node_writes_waited_out`): the order the executor sends them in shows.
    node_writes_wait_for_pods: Arc<std::sync::atomic::AtomicBool>,
    pods_listed: Arc<std::sync::atomic::AtomicBool>,
    node_writes_waited_out: Arc<std::sync::atomic::AtomicUsize>,
}

impl FakeApi {
    fn client(&self) -> kube::Client {
        let fake = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.answer(request).await) }
        });
        kube::Client::new(service, "default")
    }

    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let path = parts.uri.path().to_owned();
        self.seen.lock().unwrap().push(Seen { method: parts.method.clone(), path: path.clone(), body: body.clone() });
        let reply = |status: StatusCode, value: Value| {
            Response::builder().status(status).body(Body::from(serde_json::to_vec(&value).unwrap())).unwrap()
        };
        let not_found = || {
            reply(
                StatusCode::NOT_FOUND,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound", "message": "not found"}),
            )
        };
        if parts.method == Method::POST && path.ends_with("/events") {
            return reply(StatusCode::CREATED, body);
        }
        if parts.method == Method::GET && (path == "/api/v1/pods" || path.ends_with("/poddisruptionbudgets")) {
            self.pods_listed.store(true, std::sync::atomic::Ordering::SeqCst);
            let kind = if path.ends_with("/pods") { "PodList" } else { "PodDisruptionBudgetList" };
            let api_version = if kind == "PodList" { "v1" } else { "policy/v1" };
            let list =
                json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": []});
            return reply(StatusCode::OK, list);
        }
        if parts.method == Method::PATCH
            && path.starts_with("/api/v1/nodes/")
            && self.node_writes_wait_for_pods.load(std::sync::atomic::Ordering::SeqCst)
        {
            let listed = async {
                while !self.pods_listed.load(std::sync::atomic::Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            };
            if tokio::time::timeout(Duration::from_secs(1), listed).await.is_err() {
                self.node_writes_waited_out.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        if parts.method != Method::PATCH {
            return not_found();
        }
        if path.starts_with("/api/v1/nodes/") && self.refuse_nodes.load(std::sync::atomic::Ordering::SeqCst) {
            return reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500, "reason": "InternalError", "message": "refused"}),
            );
        }
        let key = path.trim_end_matches("/status").to_owned();
        let mut objects = self.objects.lock().unwrap();
        let Some(object) = objects.get_mut(&key) else { return not_found() };
        let json_patch =
            parts.headers.get(http::header::CONTENT_TYPE).is_some_and(|t| t == "application/json-patch+json");
        if json_patch {
            let ops: json_patch::Patch = serde_json::from_value(body).unwrap();
            // The API server's JSON patch (evanphx/json-patch) reads a missing member as null in
            // a `test`; json_patch does not, so an absent list of finalizers is made explicit.
            if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.entry("finalizers").or_insert(Value::Null);
            }
            if let Err(error) = json_patch::patch(object, &ops) {
                let message = error.to_string();
                return reply(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422, "reason": "Invalid", "message": message}),
                );
            }
        } else {
            json_patch::merge(object, &body);
        }
        let rv = self.revision.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 100;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        reply(StatusCode::OK, object.clone())
    }

    fn put(&self, path: &str, object: Value) {
        self.objects.lock().unwrap().insert(path.to_owned(), object);
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The patches of Node `name`.
    fn node_patches(&self, name: &str) -> Vec<Value> {
        let path = format!("/api/v1/nodes/{name}");
        self.seen().into_iter().filter(|s| s.method == Method::PATCH && s.path == path).map(|s| s.body).collect()
    }

    /// The last status written (the value of its JSON patch).
    fn last_status(&self) -> Value {
        let mut statuses = self.seen().into_iter().filter(|s| s.path.ends_with("/status"));
        statuses.next_back().map(|s| s.body[0]["value"].clone()).expect("a status was written")
    }

    fn events(&self) -> Vec<Value> {
        self.seen().into_iter().filter(|s| s.method == Method::POST).map(|s| s.body).collect()
    }
}

const WALL: &str = "2026-11-21T10:00:00Z";

fn wall() -> Timestamp {
    WALL.parse().unwrap()
}

fn node(name: &str, labels: Value, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "resourceVersion": "1", "labels": labels, "annotations": annotations},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"bootID": "b0"}}
    })
}

fn version(spec: Value, status: Value) -> Value {
    json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": "nv", "uid": "uid-nv", "generation": 2, "resourceVersion": "1",
                     "creationTimestamp": "2026-11-21T09:00:00Z"},
        "spec": spec,
        "status": status
    })
}

/// A reconciler over `nodes` and `versions` (kept in its caches as given) and the fake API,
/// with the leadership whose terms fence it.
fn reconciler(fake: &FakeApi, nodes: &[Value], versions: &[Value]) -> (Reconciler, Leadership) {
    let (reconciler, leadership, _) = reconciler_with_node_cache(fake, nodes, versions);
    (reconciler, leadership)
}

/// [`reconciler`], with the writer of its Node cache: the test plays the Node watch's deliveries.
fn reconciler_with_node_cache(
    fake: &FakeApi,
    nodes: &[Value],
    versions: &[Value],
) -> (Reconciler, Leadership, reflector::store::Writer<SlimNode>) {
    let client = fake.client();
    let (node_store, mut node_writer) = reflector::store::<SlimNode>();
    for n in nodes {
        fake.put(&format!("/api/v1/nodes/{}", n["metadata"]["name"].as_str().unwrap()), n.clone());
        let mut slim: SlimNode = serde_json::from_value(n.clone()).unwrap();
        slim.trim();
        node_writer.apply_watcher_event(&watcher::Event::Apply(slim));
    }
    let (version_store, mut version_writer) = reflector::store::<NodeVersion>();
    for v in versions {
        let name = v["metadata"]["name"].as_str().unwrap();
        fake.put(&format!("/apis/update.edgeless.systems/v1alpha1/nodeversions/{name}"), v.clone());
        version_writer.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(v.clone()).unwrap()));
    }
    let trigger = Arc::new(Notify::new());
    let metrics = Metrics::default();
    let leadership = Leadership::new();
    let drains = Arc::new(Drains::new(DrainContext {
        eviction_client: client.clone(),
        watch_client: client.clone(),
        nodes: node_store.clone(),
        node_changes: watch::channel(0).1,
        pdb_changes: watch::channel(0).1,
        reconcile: trigger.clone(),
        metrics: metrics.clone(),
    }));
    let events = Events::start(client.clone(), Some("test".into()), leadership.clone());
    let executor = Executor::new(Api::all(client.clone()), events.clone(), drains.clone(), metrics.clone())
        .with_pod_holds(Arc::new(crate::do_not_disrupt::PodHolds::new(client.clone())));
    let mut reconciler =
        Reconciler::new(node_store, version_store, Api::all(client), executor, drains, metrics, None, trigger, events);
    reconciler.clock = Clock::tokio(wall());
    (reconciler, leadership, node_writer)
}

/// The reconciler running as the leader in the background.
struct Leading {
    shutdown: CancellationToken,
    trigger: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
    _leadership: Leadership,
}

impl Leading {
    /// Starts `reconciler` in a term that lasts longer than any test.
    fn start((reconciler, leadership): (Reconciler, Leadership)) -> Leading {
        let shutdown = CancellationToken::new();
        leadership.begin(Instant::now() + Duration::from_secs(30 * 86_400));
        let trigger = reconciler.trigger.clone();
        let heartbeat = shared::health::Health::default().heartbeat("reconciler", STUCK_AFTER);
        let task = tokio::spawn(reconciler.run(leadership.clone(), heartbeat, shutdown.clone()));
        trigger.notify_one();
        Leading { shutdown, trigger, task, _leadership: leadership }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

/// Lets every task run until all wait: with paused time the clock moves only then, so a short
/// sleep returns once everything else is idle (moving the clock by a millisecond).
async fn settle() {
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn agent_reported(image: &str) -> Value {
    json!({"update.edgeless.systems/os-image": image, "update.edgeless.systems/boot-id": "b0"})
}

/// A node on v1 asked to stage v2 at `WALL`, its agent busy with it or not.
fn staging(busy: bool) -> Value {
    let mut annotations = agent_reported("v1");
    let mut keys = vec![
        ("update.edgeless.systems/intent", "stage"),
        ("update.edgeless.systems/intent-target", "v2"),
        ("update.edgeless.systems/intent-token", "t1"),
        ("update.edgeless.systems/intent-since", WALL),
    ];
    if busy {
        keys.extend([("update.edgeless.systems/state", "busy"), ("update.edgeless.systems/state-token", "t1")]);
    }
    for (k, v) in keys {
        annotations[k] = json!(v);
    }
    annotations
}

#[tokio::test(start_paused = true)]
async fn a_stage_deadline_fails_the_node_without_any_watch_event() {
    let fake = FakeApi::default();
    let nodes = [node("w1", json!({"update.edgeless.systems/managed": "true"}), staging(true))];
    // Without the taint of outdated nodes, which would be the first write (`policy::taint`).
    let rollout = json!({"stageTimeout": "1m", "preferUpdatedNodes": false});
    let versions = [version(json!({"image": "v2", "rollout": rollout}), json!({}))];
    let leading = Leading::start(reconciler(&fake, &nodes, &versions));
    settle().await;
    assert!(fake.node_patches("w1").is_empty(), "acted before the deadline");
    tokio::time::advance(Duration::from_secs(59)).await;
    settle().await;
    assert!(fake.node_patches("w1").is_empty(), "acted before the deadline");
    tokio::time::advance(Duration::from_secs(2)).await;
    settle().await;
    let patches = fake.node_patches("w1");
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert_eq!(patches[0]["metadata"]["annotations"]["update.edgeless.systems/intent"], "failed");
    leading.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_without_an_agent_is_named_at_once_in_status_and_in_an_event_within_a_minute() {
    let fake = FakeApi::default();
    let nodes = [node("w1", json!({"update.edgeless.systems/managed": "true"}), json!({}))];
    let versions = [version(json!({"image": "v2"}), json!({}))];
    let leading = Leading::start(reconciler(&fake, &nodes, &versions));
    settle().await;
    let last = fake.last_status();
    assert_eq!(last["heldBack"][0]["name"], "w1");
    assert_eq!(last["heldBack"][0]["reason"], "NoAgentReport");
    let progressing = last["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").unwrap();
    assert_eq!(
        (progressing["status"].as_str(), progressing["reason"].as_str()),
        (Some("False"), Some("NoAgentReport"))
    );
    assert!(fake.events().iter().all(|e| e["reason"] != "NoAgentReport"), "an Event before the delay");
    tokio::time::advance(crate::notices::HOLD_NOTICE_DELAY).await;
    settle().await;
    let events: Vec<Value> = fake.events().into_iter().filter(|e| e["reason"] == "NoAgentReport").collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0]["note"].as_str().unwrap().starts_with("w1: "), "{}", events[0]["note"]);
    assert_eq!(events[0]["related"]["name"], "w1");
    // However long it lasts, one Event.
    tokio::time::advance(Duration::from_secs(600)).await;
    leading.trigger.notify_one();
    settle().await;
    assert_eq!(fake.events().into_iter().filter(|e| e["reason"] == "NoAgentReport").count(), 1);
    leading.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_valid_generation_is_recorded_before_any_node_is_touched() {
    let fake = FakeApi::default();
    let nodes = [node("w1", json!({"update.edgeless.systems/managed": "true"}), agent_reported("v1"))];
    let versions = [version(json!({"image": "v2"}), json!({}))];
    let leading = Leading::start(reconciler(&fake, &nodes, &versions));
    settle().await;
    let writes: Vec<Seen> = fake.seen().into_iter().filter(|s| s.method == Method::PATCH).collect();
    let first_node = writes.iter().position(|s| s.path.starts_with("/api/v1/nodes")).expect("w1 started");
    let record = writes
        .iter()
        .position(|s| s.path.ends_with("/status") && s.body[0]["value"]["lastValidSpec"]["generation"] == 2);
    assert!(record.is_some_and(|r| r < first_node), "{writes:?}");
    assert_eq!(writes[record.unwrap()].body[0]["value"]["lastValidSpec"]["spec"]["image"], "v2");
    // The finalizer that makes a deletion release the node is there before it is touched.
    let finalizer = writes
        .iter()
        .position(|s| s.path.ends_with("/nodeversions/nv") && s.body[1]["value"] == json!([release::FINALIZER]));
    assert!(finalizer.is_some_and(|f| f < first_node), "{writes:?}");
    leading.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_leader_with_an_invalid_spec_keeps_the_recorded_policy_for_nodes_in_flight() {
    // Recorded: pool=a nodes, stage for an hour. Now: a bad cron. Under the defaults the node
    // (not labelled managed) would be released as not selected, and failed after 30 minutes.
    let fake = FakeApi::default();
    let nodes =
        [node("a1", json!({"pool": "a"}), staging(false)), node("a2", json!({"pool": "a"}), agent_reported("v1"))];
    let recorded =
        json!({"image": "v2", "rollout": {"stageTimeout": "1h", "nodeSelector": {"matchLabels": {"pool": "a"}}}});
    let mut broken = recorded.clone();
    broken["rollout"]["maintenanceWindow"] = json!({"schedule": "61 * * * *", "duration": "1h"});
    let versions = [version(broken, json!({"lastValidSpec": {"generation": 1, "spec": recorded}}))];
    let leading = Leading::start(reconciler(&fake, &nodes, &versions));
    settle().await;
    tokio::time::advance(Duration::from_secs(31 * 60)).await;
    settle().await;
    // The rollout goes on under its last valid spec: its outdated nodes carry the taint (`policy::taint`), and
    // nothing else is written.
    let only_taints = |p: &Value| {
        let metadata = p["metadata"].as_object().is_none_or(|m| m.keys().all(|k| k == "resourceVersion"));
        metadata && p["spec"].as_object().is_some_and(|s| s.keys().all(|k| k == "taints")) && p.get("status").is_none()
    };
    let other = |name: &str| fake.node_patches(name).into_iter().filter(|p| !only_taints(p)).collect::<Vec<_>>();
    assert!(other("a1").is_empty(), "{:?}", fake.node_patches("a1"));
    assert!(other("a2").is_empty(), "a new node started under an invalid spec");
    assert!(!fake.node_patches("a2").is_empty(), "the outdated node is tainted");
    let last = fake.last_status();
    assert_eq!(last["lastValidSpec"]["generation"], 1, "the record was kept");
    assert_eq!(last["inFlight"][0]["name"], "a1");
    let progressing = last["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Progressing").unwrap();
    assert_eq!(progressing["reason"], "InvalidSpec");
    assert!(progressing["message"].as_str().unwrap().contains("spec.rollout.maintenanceWindow.schedule"));
    // An hour after the stage began, the recorded stage timeout fails it.
    tokio::time::advance(Duration::from_secs(30 * 60)).await;
    settle().await;
    assert_eq!(other("a1").len(), 1, "{:?}", fake.node_patches("a1"));
    leading.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_status_is_computed_from_the_last_one_written_while_the_watch_has_not_delivered_it() {
    // The NodeVersion cache keeps the status as it was before the first write (a watch that lags): the second
    // round must still see w1 in its reboot step, or its reboot is not measured and the first round's sample is
    // written over.
    let fake = FakeApi::default();
    let intent = |annotations: &mut Value, step: &str, since: &str| {
        for (k, v) in [
            ("update.edgeless.systems/intent", step),
            ("update.edgeless.systems/intent-target", "v2"),
            ("update.edgeless.systems/intent-token", "t1"),
            ("update.edgeless.systems/intent-since", since),
            ("update.edgeless.systems/boot-id-before", "b0"),
        ] {
            annotations[k] = json!(v);
        }
    };
    let mut rebooting = agent_reported("v1");
    intent(&mut rebooting, "reboot", WALL);
    rebooting["update.edgeless.systems/state"] = json!("busy");
    rebooting["update.edgeless.systems/state-token"] = json!("t1");
    let managed = json!({"update.edgeless.systems/managed": "true"});
    let mut w1 = node("w1", managed.clone(), rebooting);
    w1["spec"]["unschedulable"] = json!(true);
    let draining = json!({"targetImage": "v2", "inFlight": [{"name": "w1", "step": "drain", "since": "2026-11-21T09:59:50.000000Z"}]});
    let versions = [version(json!({"image": "v2"}), draining)];
    let (reconciler, leadership, mut nodes) = reconciler_with_node_cache(&fake, &[w1.clone()], &versions);
    let leading = Leading::start((reconciler, leadership));
    settle().await;
    let first = fake.last_status();
    let drain =
        json!([{"step": "drain", "samples": 1, "meanMillis": 10_000, "p95Millis": 10_000, "recentMillis": [10_000]}]);
    assert_eq!(first["stepDurations"], drain, "{first}");
    assert_eq!(first["inFlight"][0]["step"], "reboot", "{first}");

    // Thirty seconds later w1 comes back on v2 with a new boot ID; the NodeVersion watch still shows the first status.
    tokio::time::advance(Duration::from_secs(30)).await;
    let mut verified = w1.clone();
    let annotations = &mut verified["metadata"]["annotations"];
    annotations["update.edgeless.systems/state"] = json!("done");
    annotations["update.edgeless.systems/os-image"] = json!("v2");
    annotations["update.edgeless.systems/boot-id"] = json!("b1");
    verified["status"]["nodeInfo"]["bootID"] = json!("b1");
    verified["metadata"]["resourceVersion"] = json!("2");
    let mut slim: SlimNode = serde_json::from_value(verified).unwrap();
    slim.trim();
    nodes.apply_watcher_event(&watcher::Event::Apply(slim));
    leading.trigger.notify_one();
    settle().await;
    let second = fake.last_status();
    let durations = second["stepDurations"].as_array().unwrap();
    assert_eq!(durations.len(), 2, "{second}");
    assert_eq!(durations[0], drain[0], "{second}");
    assert_eq!(durations[1]["step"], "reboot", "{second}");
    let reboot = durations[1]["meanMillis"].as_i64().unwrap();
    assert!((30_000..31_000).contains(&reboot), "{second}");
    assert!(second["inFlight"].as_array().is_none_or(Vec::is_empty), "{second}");
    leading.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_deleted_node_version_keeps_its_finalizer_until_the_taint_of_outdated_nodes_is_off() {
    let fake = FakeApi::default();
    let mut tainted = node("w1", json!({"update.edgeless.systems/managed": "true"}), agent_reported("v1"));
    tainted["spec"]["taints"] = json!([{"key": "example.com/team", "effect": "NoSchedule"},
                                      {"key": crate::policy::taint::OUTDATED_TAINT, "effect": "PreferNoSchedule"}]);
    let mut deleted = version(json!({"image": "v2"}), json!({}));
    deleted["metadata"]["deletionTimestamp"] = json!(WALL);
    deleted["metadata"]["finalizers"] = json!([release::FINALIZER]);
    // The taint's removal fails at first: the finalizer stays.
    fake.refuse_nodes.store(true, std::sync::atomic::Ordering::SeqCst);
    let leading = Leading::start(reconciler(&fake, &[tainted], &[deleted]));
    settle().await;
    let finalizer_removed =
        || fake.seen().iter().any(|s| s.path.ends_with("/nodeversions/nv") && s.body[1]["op"] == "remove");
    assert!(!fake.node_patches("w1").is_empty(), "the taint's removal was not tried");
    assert!(!finalizer_removed(), "the finalizer went with the taint still on w1");
    // Once the write goes through, the taint is off (the other taint kept) and the finalizer goes.
    fake.refuse_nodes.store(false, std::sync::atomic::Ordering::SeqCst);
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(30)).await;
        leading.trigger.notify_one();
        settle().await;
    }
    let last = fake.node_patches("w1").pop().unwrap_or_default();
    assert_eq!(last["spec"]["taints"], json!([{"key": "example.com/team", "effect": "NoSchedule"}]), "{last}");
    assert!(finalizer_removed(), "{:?}", fake.seen());
    leading.stop().await;
}

/// The hand-off: the plan verifies w1 (its write frees the slot) and starts w2 in it. The look at w2's pods before
/// its start only reads, so it is sent beside w1's write, not after it: the fake API answers a Node write only once
/// pods were listed, and a write that waited a whole second for that shows the look came after it.
#[tokio::test(start_paused = true)]
async fn the_look_at_a_starting_nodes_pods_is_sent_beside_the_write_that_frees_its_slot() {
    let fake = FakeApi::default();
    fake.node_writes_wait_for_pods.store(true, std::sync::atomic::Ordering::SeqCst);
    let managed = json!({"update.edgeless.systems/managed": "true"});
    let mut rebooted = json!({
        "update.edgeless.systems/os-image": "v2", "update.edgeless.systems/boot-id": "b1",
        "update.edgeless.systems/intent": "reboot", "update.edgeless.systems/intent-target": "v2",
        "update.edgeless.systems/intent-token": "t0", "update.edgeless.systems/intent-since": WALL,
        "update.edgeless.systems/boot-id-before": "b0", "update.edgeless.systems/cordoned-by": "update-operator",
        "update.edgeless.systems/state": "done", "update.edgeless.systems/state-token": "t0",
    });
    let mut w1 = node("w1", managed.clone(), rebooted.take());
    w1["spec"]["unschedulable"] = json!(true);
    w1["status"]["nodeInfo"]["bootID"] = json!("b1");
    let mut staged = staging(false);
    staged["update.edgeless.systems/state"] = json!("done");
    staged["update.edgeless.systems/state-token"] = json!("t1");
    let w2 = node("w2", managed, staged);
    let rollout = json!({"maxUnavailable": 1, "preferUpdatedNodes": false});
    let versions = [version(json!({"image": "v2", "rollout": rollout}), json!({}))];
    let leading = Leading::start(reconciler(&fake, &[w1, w2], &versions));
    settle().await;
    let intent = |patches: Vec<Value>| {
        patches
            .iter()
            .map(|p| p["metadata"]["annotations"]["update.edgeless.systems/intent"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(intent(fake.node_patches("w1")), vec![json!("done")]);
    assert_eq!(intent(fake.node_patches("w2")), vec![json!("drain")]);
    assert_eq!(
        fake.node_writes_waited_out.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "pods were listed after a write"
    );
    leading.stop().await;
}
