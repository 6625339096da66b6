//! Before/after-reboot checkpoints (issue 33 item 4): a drained node is labelled `before-reboot=true` and rebooted
//! only once each `beforeReboot` annotation is `"true"`; a verified one is labelled `after-reboot=true` and
//! uncordoned only once each `afterReboot` annotation is; the labels and those annotations are cleared when the
//! step ends, a checkpoint that is never passed blocks the node at `checkpointTimeout`, and a NodeVersion deleted
//! mid-wait leaves no node cordoned or labelled.

use crate::support;

use dev::apiserver::{Patch, Store};
use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, PatchParams};
use parking_lot::Mutex;
use serde_json::json;
use shared::crd::NodeVersion;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use support::{bare_cluster, create_version, eventually, fake_agents, operator, status_of};

use crate::support::VERSION;
const NOOUT: &str = "example.com/noout";
const HEALTHY: &str = "example.com/healthy";
const BEFORE: &str = "update.edgeless.systems/before-reboot";
const AFTER: &str = "update.edgeless.systems/after-reboot";
const CHECKPOINT_KEYS: [&str; 2] =
    ["update.edgeless.systems/checkpoint-since", "update.edgeless.systems/checkpoint-waits"];

/// What the user's hooks did and what the sampler saw, per node.
#[derive(Default)]
struct Seen {
    /// (node, annotation) the hook set to "true".
    set: BTreeSet<(String, String)>,
    /// What went wrong, at the instant it was seen.
    violations: Vec<String>,
}

fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The user's hooks (answering each label with its annotation, except on the nodes in `ignore`) and a sampler that
/// checks, every 10 ms, that no node reboots before its `noout` was set nor is `done` before its `healthy` was.
fn hooks_and_sampler(
    store: Store,
    ignore: &'static [&'static str],
    seen: Arc<Mutex<Seen>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let nodes = store.api::<Node>().list(None, &Default::default()).map(|l| l.items).unwrap_or_default();
            for node in &nodes {
                let name = node.metadata.name.clone().unwrap_or_default();
                let intent = annotation(node, "update.edgeless.systems/intent");
                let mut seen = seen.lock();
                let set = |seen: &Seen, key: &str| seen.set.contains(&(name.clone(), key.to_owned()));
                if intent == Some("reboot") && !set(&seen, NOOUT) {
                    seen.violations.push(format!("{name} asked to reboot before {NOOUT} was set"));
                }
                if intent == Some("done") && !set(&seen, HEALTHY) {
                    seen.violations.push(format!("{name} done before {HEALTHY} was set"));
                }
                if ignore.contains(&name.as_str()) {
                    continue;
                }
                for (label_key, key) in [(BEFORE, NOOUT), (AFTER, HEALTHY)] {
                    if label(node, label_key) == Some("true") && annotation(node, key) != Some("true") {
                        let patch = json!({"metadata": {"annotations": {key: "true"}}});
                        if store.api::<Node>().patch(None, &name, &Patch::Merge(patch), &PatchParams::default()).is_ok()
                        {
                            seen.set.insert((name.clone(), key.to_owned()));
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}

/// Whether `node` carries nothing of a checkpoint and is schedulable.
fn clean(store: &Store, node: &str) -> Result<(), String> {
    let n = store.api::<Node>().get(None, node).map_err(|e| e.to_string())?;
    let left: Vec<&str> = [BEFORE, AFTER].into_iter().filter(|l| label(&n, l).is_some()).collect();
    let keys: Vec<&str> =
        CHECKPOINT_KEYS.into_iter().chain([NOOUT, HEALTHY]).filter(|k| annotation(&n, k).is_some()).collect();
    let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
    if left.is_empty() && keys.is_empty() && !cordoned {
        Ok(())
    } else {
        Err(format!("{node}: labels {left:?}, annotations {keys:?}, cordoned {cordoned}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reboots_only_after_its_before_hook_and_is_uncordoned_only_after_its_after_hook() {
    let server = bare_cluster(&["w-0", "w-1", "w-2"]).await;
    let store = server.store();
    let observer = Observer::start(server.client(), Limits::new(1, false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    // The hooks never answer on w-2: its checkpoint times out.
    let hooks = hooks_and_sampler(store.clone(), &["w-2"], seen.clone());
    let agents = fake_agents(&server, &["w-0", "w-1", "w-2"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(
        &store,
        "v2",
        json!({"maxUnavailable": 1, "beforeReboot": [NOOUT], "afterReboot": [HEALTHY], "checkpointTimeout": "5s"}),
    );

    let status = eventually(Duration::from_secs(90), "w-0 and w-1 updated, w-2 blocked", || {
        let s = status_of(&store, VERSION);
        (s.counts.up_to_date == 2 && s.counts.blocked == 1 && s.in_flight.is_empty()).then_some(s)
    })
    .await;
    let blocked = store.api::<Node>().get(None, "w-2").unwrap();
    assert_eq!(annotation(&blocked, "update.edgeless.systems/intent"), Some("blocked"));
    let message = annotation(&blocked, "update.edgeless.systems/intent-message").unwrap_or_default();
    assert!(message.starts_with("CheckpointTimedOut: the beforeReboot checkpoint did not pass within 5s"), "{message}");
    assert!(message.contains(NOOUT), "{message}");
    assert_eq!(status.counts.blocked, 1);
    hooks.abort();
    let seen = std::mem::take(&mut *seen.lock());
    assert_eq!(seen.violations, Vec::<String>::new());
    for node in ["w-0", "w-1"] {
        assert!(seen.set.contains(&(node.to_owned(), NOOUT.to_owned())), "{:?}", seen.set);
        assert!(seen.set.contains(&(node.to_owned(), HEALTHY.to_owned())), "{:?}", seen.set);
    }
    // Every node is left as it was: no label, no checkpoint key, no awaited annotation, uncordoned.
    for node in ["w-0", "w-1", "w-2"] {
        clean(&store, node).unwrap();
    }
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeversion_deleted_while_a_node_waits_at_a_checkpoint_leaves_it_uncordoned_and_unlabelled() {
    let server = bare_cluster(&["w-0"]).await;
    let store = server.store();
    let agents = fake_agents(&server, &["w-0"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"beforeReboot": [NOOUT]}));
    // No hook answers: w-0 waits, labelled, cordoned.
    eventually(Duration::from_secs(60), "w-0 at its checkpoint", || {
        let n = store.api::<Node>().get(None, "w-0").ok()?;
        (label(&n, BEFORE) == Some("true") && n.spec.as_ref()?.unschedulable == Some(true)).then_some(())
    })
    .await;
    // The status says on what it waits (written after the label).
    eventually(Duration::from_secs(30), "the status to name the checkpoint", || {
        let waiting = status_of(&store, VERSION);
        let on = waiting.in_flight.first().and_then(|f| f.waiting_on.clone()).unwrap_or_default();
        on.contains("before-reboot: waiting for the annotation(s) \"example.com/noout\"").then_some(())
    })
    .await;
    // The user's annotation is half there (another value): it is cleared too.
    let patch = json!({"metadata": {"annotations": {NOOUT: "pending"}}});
    store.api::<Node>().patch(None, "w-0", &Patch::Merge(patch), &PatchParams::default()).unwrap();
    store.api::<NodeVersion>().delete(None, VERSION, &DeleteParams::default()).unwrap();
    eventually(Duration::from_secs(60), "w-0 released", || clean(&store, "w-0").ok()).await;
    eventually(Duration::from_secs(30), "the NodeVersion gone", || {
        store.api::<NodeVersion>().get(None, VERSION).is_err().then_some(())
    })
    .await;
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}
