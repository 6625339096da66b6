//! The agent's loop against an in-memory Node and a scripted host, in paused time: every delay
//! below is virtual, and the runtime advances the clock only when every task waits.

use super::*;
use crate::host::{HostError, HostFacts};
use crate::nodes::WatchError;
use futures::channel::mpsc as channel;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};
use shared::protocol::{BootId, keys};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

type WatchItem = Result<watcher::Event<Node>, WatchError>;

/// The API server's side of the agent's Node: what the controller, the kubelet and an
/// administrator do to it, and what the agent wrote.
#[derive(Clone)]
struct FakeNodes(Arc<Mutex<Cluster>>);

struct Cluster {
    node: Option<Node>,
    rv: u64,
    uid: u64,
    events: channel::UnboundedSender<WatchItem>,
    receiver: Option<channel::UnboundedReceiver<WatchItem>>,
    /// The agent's patches that were applied.
    writes: Vec<Value>,
    /// The agent's write attempts.
    attempts: usize,
    fail_writes: usize,
    /// Hold back the watch events of the agent's writes (a slow watch).
    hold_write_events: bool,
    held: Vec<Node>,
}

impl FakeNodes {
    /// A Ready node whose kubelet reports boot `b0`, listed to the agent's watch.
    fn new() -> Self {
        let (events, receiver) = channel::unbounded();
        let fake = FakeNodes(Arc::new(Mutex::new(Cluster {
            node: None,
            rv: 0,
            uid: 0,
            events,
            receiver: Some(receiver),
            writes: Vec::new(),
            attempts: 0,
            fail_writes: 0,
            hold_write_events: false,
            held: Vec::new(),
        })));
        fake.register();
        fake.send(watcher::Event::Init);
        let node = fake.node();
        fake.send(watcher::Event::InitApply(node));
        fake.send(watcher::Event::InitDone);
        fake
    }

    fn cluster(&self) -> std::sync::MutexGuard<'_, Cluster> {
        self.0.lock().unwrap()
    }

    fn send(&self, event: watcher::Event<Node>) {
        let _ = self.cluster().events.unbounded_send(Ok(event));
    }

    fn node(&self) -> Node {
        self.cluster().node.clone().unwrap()
    }

    /// A new Node object (new UID, no annotations), without telling the watch.
    fn register(&self) {
        let mut cluster = self.cluster();
        cluster.uid += 1;
        cluster.rv += 1;
        let node = json!({
            "metadata": {"name": "n", "uid": format!("uid-{}", cluster.uid), "resourceVersion": cluster.rv.to_string()},
            "status": {"nodeInfo": {"bootID": "b0", "machineID": "", "systemUUID": "", "kernelVersion": "",
                "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": "amd64"}}
        });
        cluster.node = Some(serde_json::from_value(node).unwrap());
    }

    /// Changes the Node as another client would, and tells the watch.
    fn update(&self, change: impl FnOnce(&mut Node)) {
        let node = {
            let mut cluster = self.cluster();
            cluster.rv += 1;
            let rv = cluster.rv.to_string();
            let node = cluster.node.as_mut().unwrap();
            change(node);
            node.metadata.resource_version = Some(rv);
            node.clone()
        };
        self.send(watcher::Event::Apply(node));
    }

    fn annotate(&self, pairs: &[(&str, Option<String>)]) {
        self.update(|node| {
            let annotations = node.metadata.annotations.get_or_insert_with(Default::default);
            for (key, value) in pairs {
                match value {
                    Some(value) => annotations.insert((*key).to_owned(), value.clone()),
                    None => annotations.remove(*key),
                };
            }
        });
    }

    /// The controller's intent (and cordon) as the controller writes them.
    fn intent(&self, step: &str, token: &str, cordoned: bool) {
        self.intent_with(step, token, cordoned, cordoned);
    }

    /// An intent with `spec.unschedulable` and the `cordoned-by` annotation set apart.
    fn intent_with(&self, step: &str, token: &str, unschedulable: bool, cordoned_by: bool) {
        self.update(|node| {
            let annotations = node.metadata.annotations.get_or_insert_with(Default::default);
            annotations.insert(keys::INTENT.into(), step.into());
            annotations.insert(keys::INTENT_TARGET.into(), "v2".into());
            annotations.insert(keys::INTENT_TOKEN.into(), token.into());
            annotations.insert(keys::INTENT_SINCE.into(), "2026-11-21T10:00:00.000Z".into());
            if step == "reboot" {
                annotations.insert(keys::BOOT_ID_BEFORE.into(), "b0".into());
            } else {
                annotations.remove(keys::BOOT_ID_BEFORE);
            }
            if cordoned_by {
                annotations.insert(keys::CORDONED_BY.into(), keys::CORDONED_BY_VALUE.into());
            } else {
                annotations.remove(keys::CORDONED_BY);
            }
            node.spec.get_or_insert_with(Default::default).unschedulable = unschedulable.then_some(true);
        });
    }

    fn release_intent(&self) {
        self.annotate(&[
            (keys::INTENT, None),
            (keys::INTENT_TARGET, None),
            (keys::INTENT_TOKEN, None),
            (keys::INTENT_SINCE, None),
            (keys::BOOT_ID_BEFORE, None),
            (keys::CORDONED_BY, None),
        ]);
        self.update(|node| node.spec.get_or_insert_with(Default::default).unschedulable = None);
    }

    fn annotation(&self, key: &str) -> Option<String> {
        self.cluster().node.as_ref()?.metadata.annotations.as_ref()?.get(key).cloned()
    }

    fn state(&self) -> (Option<String>, Option<String>, Option<String>) {
        (self.annotation(keys::STATE), self.annotation(keys::STATE_TOKEN), self.annotation(keys::STATE_MESSAGE))
    }

    fn writes(&self) -> usize {
        self.cluster().writes.len()
    }

    fn release_held_events(&self) {
        let held: Vec<Node> = std::mem::take(&mut self.cluster().held);
        for node in held {
            self.send(watcher::Event::Apply(node));
        }
    }
}

impl NodeApi for FakeNodes {
    fn watch(&self) -> BoxStream<'static, WatchItem> {
        self.cluster().receiver.take().expect("one watch").boxed()
    }

    async fn patch(&self, patch: &Value) -> Result<Node, WriteError> {
        let mut cluster = self.cluster();
        cluster.attempts += 1;
        if cluster.fail_writes > 0 {
            cluster.fail_writes -= 1;
            return Err(WriteError::Failed("the server is overloaded".into()));
        }
        cluster.rv += 1;
        let rv = cluster.rv.to_string();
        let Some(node) = cluster.node.as_mut() else { return Err(WriteError::NotFound) };
        let annotations = node.metadata.annotations.get_or_insert_with(Default::default);
        let changes = patch["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
        assert_eq!(patch.as_object().map(|p| p.len()), Some(1), "the agent writes only annotations: {patch}");
        for (key, value) in changes {
            assert!(keys::AGENT_KEYS.contains(&key.as_str()), "the agent wrote {key}");
            match value {
                Value::String(value) => annotations.insert(key, value),
                _ => annotations.remove(&key),
            };
        }
        node.metadata.resource_version = Some(rv);
        let written = node.clone();
        cluster.writes.push(patch.clone());
        if cluster.hold_write_events {
            cluster.held.push(written.clone());
        } else {
            let _ = cluster.events.unbounded_send(Ok(watcher::Event::Apply(written.clone())));
        }
        Ok(written)
    }
}

/// A host whose answers the test scripts; it records what the agent asked of it.
#[derive(Default)]
struct ScriptedHost(Mutex<Script>);

#[derive(Default)]
struct Script {
    image: String,
    boot: u32,
    staged: Option<String>,
    /// Answers of the next `facts` calls (then the facts).
    facts_errors: VecDeque<HostError>,
    /// Answers of the next `stage` calls (then: stage).
    stage_errors: VecDeque<HostError>,
    /// Answers of the next `activate_and_reboot` calls (then: reboot after `reboot_takes`).
    reboot_errors: VecDeque<HostError>,
    /// How long a stage takes.
    stage_takes: Duration,
    /// `facts` never answers.
    facts_hang: bool,
    calls: Vec<String>,
}

fn unreachable() -> HostError {
    HostError::Unreachable {
        service: "the host API".into(),
        operation: "o".into(),
        reason: "connection refused".into(),
    }
}

impl ScriptedHost {
    fn running(image: &str) -> Arc<Self> {
        let host = ScriptedHost::default();
        host.script().image = image.into();
        host.script().stage_takes = Duration::from_secs(3);
        Arc::new(host)
    }

    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.0.lock().unwrap()
    }

    fn calls(&self) -> Vec<String> {
        self.script().calls.clone()
    }

    fn count(&self, prefix: &str) -> usize {
        self.script().calls.iter().filter(|call| call.starts_with(prefix)).count()
    }

    /// Boots what is staged, with a new boot ID.
    fn boot(&self) {
        let mut script = self.script();
        script.boot += 1;
        if let Some(staged) = script.staged.take() {
            script.image = staged;
        }
    }
}

/// Records that a call ended early (its future was dropped).
struct Cancelled<'a>(&'a ScriptedHost, String, bool);

impl Drop for Cancelled<'_> {
    fn drop(&mut self) {
        if !self.2 {
            self.0.script().calls.push(format!("{} cancelled", self.1));
        }
    }
}

impl HostUpdater for ScriptedHost {
    async fn facts(&self) -> Result<HostFacts, HostError> {
        if self.script().facts_hang {
            std::future::pending::<()>().await;
        }
        let mut script = self.script();
        script.calls.push("facts".into());
        if let Some(error) = script.facts_errors.pop_front() {
            return Err(error);
        }
        Ok(HostFacts {
            os_image: script.image.clone(),
            boot_id: BootId::parse("k", &format!("b{}", script.boot)).unwrap(),
            staged_image: script.staged.clone(),
            components_hash: None,
        })
    }

    async fn stage(&self, target: &str) -> Result<(), HostError> {
        let takes = {
            let mut script = self.script();
            script.calls.push(format!("stage {target}"));
            if let Some(error) = script.stage_errors.pop_front() {
                return Err(error);
            }
            script.stage_takes
        };
        let mut guard = Cancelled(self, format!("stage {target}"), false);
        tokio::time::sleep(takes).await;
        guard.2 = true;
        self.script().staged = Some(target.into());
        Ok(())
    }

    async fn activate_and_reboot(&self, target: &str) -> Result<(), HostError> {
        let mut script = self.script();
        script.calls.push(format!("reboot {target}"));
        if let Some(error) = script.reboot_errors.pop_front() {
            return Err(error);
        }
        Ok(())
    }

    async fn release(&self, target: &str) -> Result<(), HostError> {
        self.script().calls.push(format!("release {target}"));
        Ok(())
    }

    async fn upgrade_kubernetes(&self, upgrade: &crate::host::KubernetesUpgrade) -> Result<(), HostError> {
        let paths: Vec<&str> = upgrade.components.iter().map(|c| c.install_path.as_str()).collect();
        self.script().calls.push(format!("kubernetes {} {:?} {}", upgrade.version, upgrade.role, paths.join(",")));
        Ok(())
    }

    async fn fetch_kubernetes(&self, fetch: &crate::host::KubernetesFetch) -> Result<(), HostError> {
        let paths: Vec<&str> = fetch.components.iter().map(|c| c.install_path.as_str()).collect();
        let call = format!("fetch {} {}", fetch.version, paths.join(","));
        let takes = {
            let mut script = self.script();
            script.calls.push(call.clone());
            if let Some(error) = script.stage_errors.pop_front() {
                return Err(error);
            }
            script.stage_takes
        };
        let mut guard = Cancelled(self, call, false);
        tokio::time::sleep(takes).await;
        guard.2 = true;
        Ok(())
    }

    async fn discard_fetched(&self) -> Result<(), HostError> {
        self.script().calls.push("discard".into());
        Ok(())
    }
}

/// Components ConfigMaps: one release, `k8s-components-...` of [`release_config_map`], for any version it
/// names.
struct OneRelease(k8s_openapi::api::core::v1::ConfigMap);

impl crate::releases::Releases for OneRelease {
    fn release<'a>(
        &'a self,
        name: &'a str,
        version: &'a shared::version::KubeVersion,
    ) -> futures::future::BoxFuture<'a, Result<shared::components::Release, HostError>> {
        Box::pin(async move {
            if self.0.metadata.name.as_deref() != Some(name) {
                return Err(HostError::StepFailed {
                    step: format!("reading {name}"),
                    message: "no such ConfigMap".into(),
                });
            }
            crate::releases::validate(name, &self.0, version)
        })
    }
}

/// A valid components ConfigMap for v2.0.0 with a kubeadm from `http://artifacts/kubeadm`.
fn release_config_map() -> k8s_openapi::api::core::v1::ConfigMap {
    use shared::components::{Sha256, components_hash, config_map_name};
    let hash = Sha256::of(b"kubeadm").to_string();
    let components =
        json!([{"url": "http://artifacts/kubeadm", "hash": hash, "installPath": "/usr/local/bin/kubeadm"}]);
    serde_json::from_value(json!({
        "metadata": {"name": config_map_name(&components_hash([hash.as_str()])), "namespace": "kube-system"},
        "immutable": true,
        "data": {"components": components.to_string(), "cluster-version": "v2.0.0"},
    }))
    .unwrap()
}

/// The agent running on `nodes` and `host` as a task.
struct Running {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), Error>>,
    metrics: Metrics,
}

fn start(nodes: &FakeNodes, host: &Arc<ScriptedHost>) -> Running {
    let shutdown = CancellationToken::new();
    let metrics = Metrics::default();
    let task = tokio::spawn(run_with(
        nodes.clone(),
        Arc::new(OneRelease(release_config_map())),
        "n".into(),
        host.clone(),
        metrics.clone(),
        shared::health::Health::default(),
        shutdown.clone(),
    ));
    Running { shutdown, task, metrics }
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
    }
}

/// Waits (in virtual time) until `condition` holds; panics after a virtual hour.
async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(3600);
    while !condition() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lets every task run until all wait for more than `d` of virtual time.
async fn idle_for(d: Duration) {
    tokio::time::sleep(d).await;
}

fn some(s: &str) -> Option<String> {
    Some(s.to_owned())
}

#[tokio::test(start_paused = true)]
async fn the_host_is_reported_then_a_stage_is_carried_out_and_reported_done() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    assert_eq!(nodes.annotation(keys::BOOT_ID).as_deref(), Some("b0"));
    nodes.intent("stage", "s1", false);
    until("the stage to start", || nodes.state() == (some("busy"), some("s1"), None)).await;
    until("the stage to end", || nodes.state() == (some("done"), some("s1"), None)).await;
    assert_eq!(nodes.writes(), 3, "first report, busy, done");
    assert_eq!(host.count("stage v2"), 1);
    // Nothing new: nothing written, nothing asked of the host.
    nodes.update(|node| node.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into()));
    idle_for(Duration::from_secs(60)).await;
    assert_eq!((nodes.writes(), host.count("stage")), (3, 1));
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_transient_stage_error_is_retried_with_backoff_and_said_in_the_message_until_the_host_heals() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().stage_errors = [unreachable(), unreachable(), unreachable()].into();
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    let started = Instant::now();
    nodes.intent("stage", "s1", false);
    until("the transient error to show", || nodes.state().2.is_some()).await;
    let (state, token, message) = nodes.state();
    assert_eq!((state.as_deref(), token.as_deref()), (Some("busy"), Some("s1")));
    assert!(message.unwrap().contains("connection refused"));
    until("the stage to end", || nodes.state() == (some("done"), some("s1"), None)).await;
    // Three failures, then success: at least 1 + 2 + 4 s of backoff and the 3 s stage.
    assert!(started.elapsed() >= Duration::from_secs(10), "{:?}", started.elapsed());
    assert_eq!(host.count("stage v2"), 4);
    // The same error three times is written once.
    assert_eq!(nodes.writes(), 4, "first report, busy, busy with the error, done");
    let retries = agent.metrics.host_retries.get_or_create(&HostOpLabels { operation: "stage", result: "retry" }).get();
    assert_eq!(retries, 3);
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_permanent_stage_error_is_reported_at_once() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().stage_errors = [HostError::TargetNotOffered { target: "v2".into(), available: vec![] }].into();
    let agent = start(&nodes, &host);
    nodes.intent("stage", "s1", false);
    until("the error", || nodes.state().0.as_deref() == Some("error")).await;
    let message = nodes.state().2.unwrap();
    assert!(message.contains("target v2 is not offered"), "{message}");
    idle_for(Duration::from_secs(600)).await;
    assert_eq!(host.count("stage v2"), 1, "not retried");
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn retries_end_when_the_controller_gives_the_step_up_and_the_target_is_released() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().stage_errors = std::iter::repeat_with(unreachable).take(1000).collect();
    let agent = start(&nodes, &host);
    nodes.intent("stage", "s1", false);
    until("a few attempts", || host.count("stage v2") >= 3).await;
    // The stage timed out: the controller marks the node failed.
    nodes.intent("failed", "f1", false);
    until("the release", || host.count("release v2") == 1).await;
    let attempts = host.count("stage v2");
    idle_for(Duration::from_secs(3600)).await;
    assert_eq!(host.count("stage v2"), attempts, "no attempt after the controller gave up");
    assert_eq!(nodes.state().0.as_deref(), Some("idle"), "busy with nothing under way is over");
    assert_eq!(host.count("release"), 1);
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_released_while_staging_has_its_stage_cancelled_and_released() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().stage_takes = Duration::from_secs(3600);
    let agent = start(&nodes, &host);
    nodes.intent("stage", "s1", false);
    until("the stage to start", || host.count("stage v2") == 1).await;
    nodes.release_intent();
    until("the release", || host.count("release v2") == 1).await;
    assert_eq!(
        host.calls().iter().filter(|c| c.starts_with("stage") || c.starts_with("release")).collect::<Vec<_>>(),
        ["stage v2", "stage v2 cancelled", "release v2"]
    );
    until("the report to say nothing is under way", || nodes.state() == (some("idle"), None, None)).await;
    let cancelled =
        agent.metrics.host_operations.get_or_create(&HostOpLabels { operation: "stage", result: "cancelled" }).get();
    assert_eq!(cancelled, 1);
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_target_while_staging_cancels_the_stage_releases_the_old_target_and_stages_the_new() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().stage_takes = Duration::from_secs(60);
    let agent = start(&nodes, &host);
    nodes.intent("stage", "s1", false);
    until("the stage to start", || host.count("stage v2") == 1).await;
    nodes.annotate(&[(keys::INTENT_TARGET, some("v3")), (keys::INTENT_TOKEN, some("s2"))]);
    until("the new stage to end", || nodes.state() == (some("done"), some("s2"), None)).await;
    let calls: Vec<String> = host.calls().into_iter().filter(|c| c != "facts").collect();
    assert_eq!(calls, ["stage v2", "stage v2 cancelled", "release v2", "stage v3"]);
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reboot_needs_the_controllers_cordon() {
    for (unschedulable, cordoned_by, why) in
        [(false, true, "the node is schedulable"), (true, false, "not by the update-operator controller")]
    {
        let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
        host.script().staged = some("v2");
        let agent = start(&nodes, &host);
        nodes.intent_with("reboot", "r1", unschedulable, cordoned_by);
        until("the refusal", || nodes.state().0.as_deref() == Some("error")).await;
        assert_eq!(host.count("reboot"), 0);
        let message = nodes.state().2.unwrap();
        assert!(message.starts_with("refusing to reboot into v2: ") && message.contains(why), "{message}");
        agent.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_uncordoned_node_is_never_rebooted_and_a_reboot_being_retried_stops() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().staged = some("v2");
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    // Uncordoned before the intent: refused without asking the host.
    nodes.intent("reboot", "r0", false);
    until("the refusal", || nodes.state().0.as_deref() == Some("error")).await;
    assert_eq!(host.count("reboot"), 0);
    // Cordoned, but the host's API fails for now: retried, and stopped when an administrator
    // uncordons the node.
    host.script().reboot_errors = std::iter::repeat_with(unreachable).take(1000).collect();
    nodes.intent("reboot", "r1", true);
    until("a few attempts", || host.count("reboot v2") >= 3).await;
    assert_eq!(nodes.state().0.as_deref(), Some("busy"), "a transient error is no failure");
    nodes.update(|node| node.spec.get_or_insert_with(Default::default).unschedulable = None);
    until("the refusal", || nodes.state().0.as_deref() == Some("error")).await;
    let attempts = host.count("reboot v2");
    idle_for(Duration::from_secs(3600)).await;
    assert_eq!(host.count("reboot v2"), attempts);
    assert!(nodes.state().2.unwrap().contains("the node is schedulable"));
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reboot_is_reported_done_once_the_host_booted_the_target() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().staged = some("v2");
    let agent = start(&nodes, &host);
    nodes.intent("reboot", "r1", true);
    until("the reboot request", || host.count("reboot v2") == 1).await;
    idle_for(Duration::from_secs(30)).await;
    assert_eq!(host.count("reboot v2"), 1, "asked once");
    host.boot();
    until("the report", || nodes.state() == (some("done"), some("r1"), None)).await;
    assert_eq!(nodes.annotation(keys::OS_IMAGE).as_deref(), Some("v2"));
    assert_eq!(nodes.annotation(keys::BOOT_ID).as_deref(), Some("b1"));
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_node_registered_again_is_reported_on_and_its_intents_carried_out() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    // Only the new Node can make the agent write: its stage would not end on its own.
    host.script().stage_takes = Duration::from_secs(24 * 3600);
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    // Deleted and registered again by its kubelet while the watch was down: only a relist shows it.
    nodes.cluster().hold_write_events = true;
    nodes.intent("stage", "s1", false);
    until("busy", || nodes.annotation(keys::STATE).is_some()).await;
    nodes.register();
    nodes.send(watcher::Event::Init);
    nodes.send(watcher::Event::InitApply(nodes.node()));
    nodes.send(watcher::Event::InitDone);
    nodes.cluster().hold_write_events = false;
    until("the report on the new node", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    until("the stage cancelled", || host.count("release v2") == 1).await;
    host.script().stage_takes = Duration::from_secs(3);
    nodes.intent("stage", "s2", false);
    until("the new intent done", || nodes.state() == (some("done"), some("s2"), None)).await;
    // And with the deletion seen.
    let old = nodes.node();
    nodes.register();
    nodes.send(watcher::Event::Delete(old));
    nodes.send(watcher::Event::Apply(nodes.node()));
    until("the report on the third node", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cleared_keys_are_written_again_even_before_the_agents_own_write_showed() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    // Only the relist can make the agent write again: its stage would not end on its own.
    host.script().stage_takes = Duration::from_secs(24 * 3600);
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    nodes.annotate(&[(keys::OS_IMAGE, None), (keys::BOOT_ID, None)]);
    until("the report again", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    // The watch breaks after the agent's next write, before its event; the relist shows the keys
    // cleared since: the agent must not wait for its write's event.
    nodes.cluster().hold_write_events = true;
    nodes.intent("stage", "s1", false);
    until("busy", || nodes.annotation(keys::STATE).is_some()).await;
    let writes = nodes.writes();
    nodes.annotate(&[(keys::STATE, None), (keys::STATE_TOKEN, None)]);
    nodes.cluster().held.clear();
    nodes.send(watcher::Event::Init);
    nodes.send(watcher::Event::InitApply(nodes.node()));
    nodes.send(watcher::Event::InitDone);
    nodes.cluster().hold_write_events = false;
    until("busy again", || nodes.state() == (some("busy"), some("s1"), None)).await;
    assert_eq!(nodes.writes(), writes + 1);
    // And it acts on what the controller writes next.
    nodes.release_intent();
    until("the release", || host.count("release v2") == 1).await;
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_event_older_than_the_agents_write_does_not_make_it_write_again() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    let before = nodes.node();
    nodes.cluster().hold_write_events = true;
    nodes.intent("stage", "s1", false);
    until("busy", || nodes.annotation(keys::STATE).is_some()).await;
    let writes = nodes.writes();
    // The controller's event (without the agent's busy) arrives after the write returned.
    let mut stale = nodes.node();
    stale.metadata.annotations.as_mut().unwrap().remove(keys::STATE);
    stale.metadata.annotations.as_mut().unwrap().remove(keys::STATE_TOKEN);
    stale.metadata.resource_version = before.metadata.resource_version.clone();
    nodes.send(watcher::Event::Apply(stale));
    idle_for(Duration::from_millis(500)).await;
    nodes.cluster().hold_write_events = false;
    nodes.release_held_events();
    until("done", || nodes.state() == (some("done"), some("s1"), None)).await;
    assert_eq!(nodes.writes(), writes + 1, "only the done report followed");
    assert_eq!(host.count("stage v2"), 1);
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_boot_seen_by_the_kubelet_makes_the_agent_read_its_host() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    // An administrator updated and rebooted the host by hand.
    host.script().staged = some("v9");
    host.boot();
    idle_for(Duration::from_secs(10)).await;
    assert_eq!(nodes.annotation(keys::OS_IMAGE).as_deref(), Some("v1"), "no sign yet");
    nodes.update(|node| {
        node.status.as_mut().unwrap().node_info.as_mut().unwrap().boot_id = "b1".into();
    });
    until("the new facts", || nodes.annotation(keys::OS_IMAGE).as_deref() == Some("v9")).await;
    assert_eq!(nodes.annotation(keys::BOOT_ID).as_deref(), Some("b1"));
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_host_is_rechecked_every_few_minutes_without_a_sign() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    let first = host.count("facts");
    host.script().image = "v1.1".into();
    idle_for(facts::RECHECK - Duration::from_secs(5)).await;
    assert_eq!((host.count("facts"), nodes.annotation(keys::OS_IMAGE).as_deref()), (first, Some("v1")));
    until("the re-check", || nodes.annotation(keys::OS_IMAGE).as_deref() == Some("v1.1")).await;
    assert_eq!(host.count("facts"), first + 1);
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn unreadable_host_facts_are_reported_and_read_again_with_backoff_until_they_can_be() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().facts_errors = [unreachable(), unreachable(), unreachable()].into();
    let started = Instant::now();
    let agent = start(&nodes, &host);
    until("the problem to show", || nodes.state().2.is_some()).await;
    let (state, _, message) = nodes.state();
    assert_eq!(state.as_deref(), Some("idle"));
    assert!(message.unwrap().starts_with("cannot read the host's facts: cannot reach the host API"));
    until("the facts", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    assert!(started.elapsed() >= Duration::from_secs(2 + 4 + 8), "{:?}", started.elapsed());
    assert_eq!(host.count("facts"), 4);
    assert_eq!(nodes.state(), (some("idle"), None, None), "the problem is gone from the message");
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_is_retried_with_backoff() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    nodes.cluster().fail_writes = 3;
    let started = Instant::now();
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    assert_eq!(nodes.cluster().attempts, 4);
    assert!(started.elapsed() >= Duration::from_secs(1 + 2 + 4), "{:?}", started.elapsed());
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_write_that_finds_no_node_waits_for_the_node_to_come_back() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    nodes.cluster().node = None;
    let agent = start(&nodes, &host);
    idle_for(Duration::from_secs(600)).await;
    assert_eq!(nodes.cluster().attempts, 1, "no retries against a missing node");
    nodes.register();
    nodes.send(watcher::Event::Apply(nodes.node()));
    until("the report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn malformed_controller_annotations_leave_the_host_alone() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().stage_takes = Duration::from_secs(60);
    let agent = start(&nodes, &host);
    nodes.intent("stage", "s1", false);
    until("the stage to start", || host.count("stage v2") == 1).await;
    nodes.annotate(&[(keys::INTENT, some("stagee"))]);
    until("the stage to end", || host.script().staged.is_some()).await;
    idle_for(Duration::from_secs(60)).await;
    let calls: Vec<String> = host.calls().into_iter().filter(|c| c != "facts").collect();
    assert_eq!(calls, ["stage v2"], "neither cancelled nor released");
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_the_agent_even_while_the_host_does_not_answer() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().facts_hang = true;
    let agent = start(&nodes, &host);
    idle_for(Duration::from_secs(60)).await;
    agent.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(1), agent.task).await.unwrap().unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_kubeadm_upgrade_reads_its_components_and_upgrades_the_host_by_role() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    let name = release_config_map().metadata.name.unwrap();
    // The controller writes the whole intent in one patch.
    let kubeadm = |token: &str, components: &str, role: &str, target: &str| {
        nodes.update(|node| {
            let annotations = node.metadata.annotations.get_or_insert_with(Default::default);
            for (key, value) in [
                (keys::INTENT, "kubeadm-upgrade"),
                (keys::INTENT_TOKEN, token),
                (keys::INTENT_SINCE, "2026-11-21T10:00:00.000Z"),
                (keys::INTENT_TARGET, target),
                (keys::INTENT_COMPONENTS, components),
                (keys::INTENT_KUBEADM, role),
            ] {
                annotations.insert(key.to_owned(), value.to_owned());
            }
        });
    };
    kubeadm("k1", &name, "apply", "v2.0.0");
    until("the upgrade to end", || nodes.state() == (some("done"), some("k1"), None)).await;
    assert_eq!(host.count("kubernetes v2.0.0 FirstControlPlane /usr/local/bin/kubeadm"), 1);
    kubeadm("k2", &name, "node", "v2.0.0");
    until("the second upgrade to end", || nodes.state() == (some("done"), some("k2"), None)).await;
    assert_eq!(host.count("kubernetes v2.0.0 Worker /usr/local/bin/kubeadm"), 1);
    // A ConfigMap of another version, or none at all, fails the step without touching the host.
    kubeadm("k3", &name, "node", "v2.1.0");
    until("the version mismatch", || nodes.state().0.as_deref() == Some("error")).await;
    let message = nodes.state().2.unwrap();
    assert!(
        message.contains("data.cluster-version is v2.0.0, but spec.kubernetesClusterVersion is v2.1.0"),
        "{message}"
    );
    kubeadm("k4", "k8s-components-sha256-00", "node", "v2.0.0");
    until("the missing ConfigMap", || nodes.state() == (some("error"), some("k4"), nodes.state().2)).await;
    assert_eq!(host.count("kubernetes"), 2);
    agent.stop().await;
}

mod fetch;
