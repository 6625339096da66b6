//! Updated nodes preferred (issue 34 item 2, `spec.rollout.preferUpdatedNodes`): during a rollout the outdated nodes
//! carry the controller's `update.edgeless.systems/outdated:PreferNoSchedule` taint, so the pods evicted from a
//! draining node are scheduled on updated nodes; the taint leaves each node when it is verified on the target, and
//! every node when the rollout ends, is paused, the field is turned off or the NodeVersion is deleted, also with the
//! leader killed at random points. A sampler reads the nodes (and pods) every 10 ms while each rollout runs.

use crate::support;

use dev::apiserver::{Patch, Store};
use dev::harness::{self, Component};
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{PatchParams, PostParams};
use parking_lot::Mutex;
use rand::{RngCore, SeedableRng};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::keys;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use support::{bare_cluster, create_version, eventually, fake_agents, operator, rolled_out, stop_all};
use tokio::time::Instant;

const TAINT: &str = "update.edgeless.systems/outdated";
use crate::support::VERSION;

/// How long a node verified on the target may still be seen with the taint: a reconcile cycle, with room for a slow
/// machine running eight tests at once. (The taint goes in the very write that verifies the node.)
const GRACE: Duration = Duration::from_secs(10);

fn tainted(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| t.iter().any(|t| t.key == TAINT))
}

fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Verified on `target`: the controller wrote `intent=done` for it.
fn verified(node: &Node, target: &str) -> bool {
    annotation(node, keys::INTENT) == Some("done") && annotation(node, keys::INTENT_TARGET) == Some(target)
}

fn cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

fn control_plane(node: &Node) -> bool {
    node.labels().contains_key("node-role.kubernetes.io/control-plane")
}

fn nodes(store: &Store) -> Vec<Node> {
    store.api::<Node>().list(None, &Default::default()).map(|l| l.items).unwrap_or_default()
}

fn tainted_nodes(store: &Store) -> Vec<String> {
    nodes(store).iter().filter(|n| tainted(n)).map(|n| n.name_any()).collect()
}

fn patch_rollout(store: &Store, rollout: serde_json::Value) {
    let patch = Patch::Merge(json!({"spec": {"rollout": rollout}}));
    store.api::<NodeVersion>().patch(None, VERSION, &patch, &PatchParams::default()).unwrap();
}

/// What the sampler saw.
#[derive(Default)]
struct Seen {
    /// Nodes seen with the taint while not verified on the target.
    tainted_outdated: BTreeSet<String>,
    /// Since when each node verified on the target has been seen with the taint still on.
    verified_tainted: BTreeMap<String, Instant>,
    /// Workers seen verified on the target, uncordoned and untainted, since when.
    updated: BTreeMap<String, Instant>,
    /// Pods seen bound to a node (by UID).
    bound: BTreeSet<String>,
    /// Pods evicted and bound again while an updated worker was there: on an updated node, on an outdated one.
    landed: (usize, usize),
    violations: Vec<String>,
}

/// Samples the nodes every 10 ms for `target`: records which carry the taint, and flags a node verified on the target
/// that keeps it longer than [`GRACE`]. With `pods` (a namespace), also flags a pod of it bound to an outdated worker
/// more than 3 s after a worker was updated (and is still uncordoned and untainted), and pins `ballast` bare pods to
/// each worker as it is updated: the scheduler's spreading then favours the outdated nodes, so only the taint takes the
/// evicted pods to the updated ones.
fn sample(store: Store, target: &str, pods: Option<(&str, usize)>) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let (target, pods) = (target.to_owned(), pods.map(|(ns, ballast)| (ns.to_owned(), ballast)));
    let task = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut first = true;
            loop {
                let now = Instant::now();
                let nodes = nodes(&store);
                let mut new_updated = Vec::new();
                {
                    let mut seen = seen.lock();
                    for n in &nodes {
                        let name = n.name_any();
                        let done = verified(n, &target);
                        if tainted(n) && !done {
                            seen.tainted_outdated.insert(name.clone());
                        }
                        if tainted(n) && done {
                            let since = *seen.verified_tainted.entry(name.clone()).or_insert(now);
                            if now - since > GRACE {
                                let v = format!("{name} verified on {target} and still tainted after {GRACE:?}");
                                if !seen.violations.contains(&v) {
                                    seen.violations.push(v);
                                }
                            }
                        } else {
                            seen.verified_tainted.remove(&name);
                        }
                        if done && !tainted(n) && !cordoned(n) && !control_plane(n) && !seen.updated.contains_key(&name)
                        {
                            seen.updated.insert(name.clone(), now);
                            new_updated.push(name);
                        }
                    }
                    if let Some((namespace, _)) = &pods {
                        let listed = store.api::<Pod>().list(Some(namespace), &Default::default());
                        for pod in listed.map(|l| l.items).unwrap_or_default() {
                            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
                            if !seen.bound.insert(pod.uid().unwrap_or_default()) || first {
                                continue;
                            }
                            // An updated worker that has been there a while, and still takes pods.
                            let settled = seen.updated.iter().find(|(name, since)| {
                                now - **since > Duration::from_secs(3)
                                    && nodes.iter().any(|n| n.name_any() == **name && !cordoned(n) && !tainted(n))
                            });
                            let Some(updated) = settled.map(|(name, _)| name.clone()) else { continue };
                            if seen.updated.contains_key(&node) {
                                seen.landed.0 += 1;
                            } else {
                                seen.landed.1 += 1;
                                let v =
                                    format!("{} landed on outdated {node} while {updated} was updated", pod.name_any());
                                seen.violations.push(v);
                            }
                        }
                    }
                }
                first = false;
                if let Some((_, ballast)) = &pods {
                    for node in new_updated {
                        for i in 0..*ballast {
                            let pod: Pod = serde_json::from_value(json!({
                                "metadata": {"name": format!("ballast-{node}-{i}")},
                                "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                         "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
                            }))
                            .unwrap();
                            if let Err(error) = store.api::<Pod>().create(Some("default"), &pod, &PostParams::default())
                            {
                                println!("prefer_updated: ballast pod not created: {error}");
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    (seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outdated_nodes_carry_the_taint_and_evicted_pods_land_on_updated_nodes() {
    let workloads = dev::cluster::SampleWorkloads {
        pods_per_worker: 3,
        replicas: 3,
        statefulset_every: 0,
        daemonset: false,
        ..Default::default()
    };
    let cluster = support::full_cluster_with(|c| {
        c.nodes = 6;
        c.control_planes = 1;
        c.workloads = Some(workloads);
    })
    .await;
    let store = cluster.store();
    let observer = Observer::start(cluster.client(), Limits::new(1, true));
    let (seen, sampler) = sample(store.clone(), "v2", Some(("demo", 30)));
    let agents = support::start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    create_version(&store, "v2", json!({"maxUnavailable": 1}));

    eventually(Duration::from_secs(300), "the rollout", || rolled_out(&store, 6)).await;
    sampler.abort();
    let seen = std::mem::take(&mut *seen.lock());
    println!("prefer_updated: evicted pods placed on updated / outdated workers: {:?}", seen.landed);
    assert_eq!(seen.violations, Vec::<String>::new());
    // Every worker carried the taint while outdated (the control-plane node goes first, maybe before the first plan
    // that taints), and every evicted pod placed while an updated worker was there went to an updated one.
    for worker in cluster.workers() {
        assert!(seen.tainted_outdated.contains(worker), "{worker} never tainted: {:?}", seen.tainted_outdated);
    }
    assert!(seen.landed.0 >= 3, "too few pods evicted onto updated workers to tell: {:?}", seen.landed);
    // At the end, no node carries it.
    assert_eq!(tainted_nodes(&store), Vec::<String>::new());
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

/// Nodes whose agent has not reported the target yet carry the taint, every other one not: what a running rollout
/// of nodes staging slowly looks like.
fn outdated_tainted(store: &Store, target: &str) -> Option<()> {
    let nodes = nodes(store);
    let outdated = nodes.iter().filter(|n| annotation(n, keys::OS_IMAGE) != Some(target) && !verified(n, target));
    let mut outdated = outdated.peekable();
    (outdated.peek().is_some() && outdated.all(tainted)).then_some(())
}

fn untainted(store: &Store) -> Option<()> {
    tainted_nodes(store).is_empty().then_some(())
}

/// No node carries the taint for `period` (sampled every 10 ms).
async fn stays_untainted(store: &Store, period: Duration, why: &str) {
    let end = Instant::now() + period;
    while Instant::now() < end {
        assert_eq!(tainted_nodes(store), Vec::<String>::new(), "{why}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_turning_it_off_and_deleting_the_node_version_take_the_taint_off_every_node() {
    let names = ["w-0", "w-1", "w-2", "w-3"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    // Slow stages (one node at a time): the rollout runs for the whole test.
    let agents = fake_agents(&server, &names, "v1", Duration::from_secs(30));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1}));
    eventually(Duration::from_secs(60), "the outdated nodes tainted", || outdated_tainted(&store, "v2")).await;

    patch_rollout(&store, json!({"paused": true}));
    eventually(Duration::from_secs(60), "no taint while paused", || untainted(&store)).await;
    stays_untainted(&store, Duration::from_secs(2), "paused").await;
    patch_rollout(&store, json!({"paused": false}));
    eventually(Duration::from_secs(60), "tainted again once resumed", || outdated_tainted(&store, "v2")).await;

    patch_rollout(&store, json!({"preferUpdatedNodes": false}));
    eventually(Duration::from_secs(60), "no taint once turned off", || untainted(&store)).await;
    stays_untainted(&store, Duration::from_secs(2), "preferUpdatedNodes: false").await;
    patch_rollout(&store, json!({"preferUpdatedNodes": true}));
    eventually(Duration::from_secs(60), "tainted again once turned on", || outdated_tainted(&store, "v2")).await;

    store.api::<NodeVersion>().delete(None, VERSION, &Default::default()).unwrap();
    eventually(Duration::from_secs(60), "the NodeVersion gone", || {
        store.api::<NodeVersion>().get(None, VERSION).is_err().then_some(())
    })
    .await;
    // Its finalizer goes only once every node is released, the taint off included.
    assert_eq!(tainted_nodes(&store), Vec::<String>::new());
    stays_untainted(&store, Duration::from_secs(2), "deleted").await;
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_with_prefer_updated_nodes_off_never_taints_a_node() {
    let names = ["w-0", "w-1", "w-2"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    let (seen, sampler) = sample(store.clone(), "v2", None);
    let agents = fake_agents(&server, &names, "v1", Duration::from_millis(300));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1, "preferUpdatedNodes": false}));
    eventually(Duration::from_secs(120), "the rollout", || rolled_out(&store, 3)).await;
    sampler.abort();
    let seen = std::mem::take(&mut *seen.lock());
    assert_eq!(seen.tainted_outdated, BTreeSet::new(), "preferUpdatedNodes: false");
    assert_eq!(seen.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_at_random_points_leaves_no_taint_behind() {
    // Seeded: a failing run prints its seed, and PREFER_UPDATED_SEED=<seed> replays its kill points.
    let seed = std::env::var("PREFER_UPDATED_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    println!("prefer_updated: kill points from seed {seed} (PREFER_UPDATED_SEED={seed} replays them)");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut below = |n: u64| rng.next_u64() % n.max(1);
    let names = ["w-0", "w-1", "w-2", "w-3", "w-4", "w-5"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    let access = operator(&server);
    let agents = fake_agents(&server, &names, "v1", Duration::from_millis(400));
    let mut controller: Option<Component> = Some(harness::controller(&access, harness::controller_options("c-0")));
    let mut kills = 0;
    for target in ["v2", "v3"] {
        let (seen, sampler) = sample(store.clone(), target, None);
        if target == "v2" {
            create_version(&store, target, json!({"maxUnavailable": 1}));
        } else {
            let patch = Patch::Merge(json!({"spec": {"image": target}}));
            store.api::<NodeVersion>().patch(None, VERSION, &patch, &PatchParams::default()).unwrap();
        }
        // Three kills per rollout, at random moments of it: a restarted container keeps its name (and its claim on
        // the lease), a rescheduled pod gets a new one and waits for the lease to expire.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(200 + below(1500))).await;
            if let Some(c) = controller.take() {
                c.crash().await;
            }
            kills += 1;
            println!("prefer_updated: leader killed ({kills}) during the rollout to {target}");
            tokio::time::sleep(Duration::from_millis(below(500))).await;
            let identity = if below(2) == 0 { "c-0".to_owned() } else { format!("c-{kills}") };
            controller = Some(harness::controller(&access, harness::controller_options(&identity)));
        }
        eventually(Duration::from_secs(240), "the rollout", || {
            rolled_out(&store, 6).filter(|s| s.target_image.as_deref() == Some(target))
        })
        .await;
        eventually(Duration::from_secs(30), "no taint left", || untainted(&store)).await;
        stays_untainted(&store, Duration::from_secs(1), "rolled out").await;
        sampler.abort();
        let seen = std::mem::take(&mut *seen.lock());
        assert_eq!(seen.violations, Vec::<String>::new(), "seed {seed}");
        assert!(!seen.tainted_outdated.is_empty(), "seed {seed}: no outdated node was ever tainted");
    }
    if let Some(c) = controller {
        c.stop(Duration::from_secs(15)).await.unwrap();
    }
    stop_all(agents).await;
    server.shutdown().await;
}
