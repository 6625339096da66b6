//! Crashes at any point: the controller killed (nothing released) at random steps of 20 seeded
//! rollouts (four chains of five), and agents killed in the middle of staging and of a reboot. Every invariant holds,
//! every rollout completes, and no finished step is done again.

use crate::support;

use dev::apiserver::{Patch, Store};
use dev::harness::{self, Component};
use dev::hosts::{HostFaults, Power};
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::Node;
use rand::{RngCore, SeedableRng};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::keys;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{create_version, eventually, full_cluster, full_cluster_with, node_names, rolled_out, stop_all};

/// A seeded RNG, so a failing seed replays the same crash points (ChaCha8's output for a seed is
/// fixed across versions).
struct Rng(rand_chacha::ChaCha8Rng);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(rand_chacha::ChaCha8Rng::seed_from_u64(seed))
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n.max(1)
    }
}

fn set_target(store: &Store, image: &str) {
    store
        .api::<NodeVersion>()
        .patch(None, "constellation-version", &Patch::Merge(json!({"spec": {"image": image}})), &Default::default())
        .unwrap();
}

fn steps_seen(observer: &Observer) -> usize {
    observer.with(|o| o.timeline.values().map(Vec::len).sum())
}

// The 20 seeded rollouts run as four chains of five, each on a cluster of its own, so that they run side by side
// (one chain of 20 took 266 s alone and was the test binary's longest test). Each chain starts where the previous
// rollouts of its chain left the cluster, crashed controllers' leftovers included.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_killed_at_random_steps_of_rollouts_0_to_4_breaks_no_invariant() {
    crashed_rollouts(0..5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_killed_at_random_steps_of_rollouts_5_to_9_breaks_no_invariant() {
    crashed_rollouts(5..10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_killed_at_random_steps_of_rollouts_10_to_14_breaks_no_invariant() {
    crashed_rollouts(10..15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_killed_at_random_steps_of_rollouts_15_to_19_breaks_no_invariant() {
    crashed_rollouts(15..20).await;
}

/// The rollouts of `seeds` one after the other, each to a new image, the controller crashed one to three times in
/// each at random steps and restarted under its own or a new identity.
async fn crashed_rollouts(seeds: std::ops::Range<u64>) {
    let rollouts = seeds.end - seeds.start;
    let cluster = full_cluster_with(|c| {
        c.nodes = 8;
        c.control_planes = 2;
    })
    .await;
    let store = cluster.store();
    let observer = Observer::start(cluster.client(), Limits::new(2, true));
    let agents = support::start_agents(&cluster);
    let mut controller: Option<Component> =
        Some(harness::controller(cluster.operator(), harness::controller_options("c-0")));
    create_version(&store, "v1", json!({"maxUnavailable": 2}));
    let mut restarts = 0;
    for seed in seeds {
        let target = format!("v{}", seed + 2);
        let mut rng = Rng::new(seed);
        // One to three crashes, each after a random number of the rollout's step transitions
        // (a rollout of 8 nodes has 32).
        let start = steps_seen(&observer);
        let mut crash_at: Vec<usize> = (0..1 + rng.below(3)).map(|_| start + 1 + rng.below(32) as usize).collect();
        crash_at.sort();
        set_target(&store, &target);
        // A rollout takes about 15 s here; up to three crashes, each of which may make a new replica wait out
        // the lease, and a loaded 2-core machine can triple that. A stall is caught all the same.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
        while rolled_out(&store, 8).filter(|s| s.target_image.as_deref() == Some(target.as_str())).is_none() {
            assert!(tokio::time::Instant::now() < deadline, "seed {seed}: rollout to {target} did not finish");
            if crash_at.first().is_some_and(|at| steps_seen(&observer) >= *at) {
                crash_at.remove(0);
                if let Some(c) = controller.take() {
                    c.crash().await;
                }
                tokio::time::sleep(Duration::from_millis(rng.below(500))).await;
                // A restarted container keeps its pod's name (and its claim on the lease); a
                // rescheduled pod gets a new one and waits for the lease to expire.
                restarts += 1;
                let identity = if rng.below(2) == 0 { "c-0".to_owned() } else { format!("c-{restarts}") };
                controller = Some(harness::controller(cluster.operator(), harness::controller_options(&identity)));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let violations = observer.violations();
        assert_eq!(violations, Vec::<String>::new(), "seed {seed}");
        for name in node_names(&store) {
            let node = store.api::<Node>().get(None, &name).unwrap();
            assert!(!node.spec.and_then(|s| s.unschedulable).unwrap_or(false), "seed {seed}: {name} left cordoned");
            assert_eq!(cluster.hosts().facts(&name).unwrap().os_image, target, "seed {seed}: {name}");
        }
    }
    assert!(restarts >= rollouts, "only {restarts} crashes in {rollouts} rollouts");
    if let Some(c) = controller {
        c.stop(Duration::from_secs(15)).await.unwrap();
    }
    stop_all(agents).await;
    cluster.shutdown().await;
}

/// One agent per node, by node name, so that a test can crash and restart one.
fn agents_by_node(cluster: &dev::cluster::Cluster) -> BTreeMap<String, Component> {
    node_names(&cluster.store()).into_iter().map(|n| (n.clone(), harness::agent(cluster.operator(), &n))).collect()
}

fn annotation(store: &Store, node: &str, key: &str) -> Option<String> {
    store.api::<Node>().get(None, node).ok()?.metadata.annotations?.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_killed_mid_stage_and_mid_reboot_resume_without_repeating_a_reboot() {
    let cluster = full_cluster().await;
    let store = cluster.store();
    let slow_stage = HostFaults { stage_seconds: Some(Duration::from_secs(3)), ..Default::default() };
    let slow_reboot = HostFaults { reboot_seconds: Some(Duration::from_secs(3)), ..Default::default() };
    cluster.hosts().set_faults("worker-2", slow_stage).unwrap();
    cluster.hosts().set_faults("worker-3", slow_reboot).unwrap();
    let boots_before: BTreeMap<String, u64> =
        node_names(&store).into_iter().map(|n| (n.clone(), cluster.hosts().state(&n).unwrap().boots)).collect();
    let observer = Observer::start(cluster.client(), Limits::new(1, true));
    let mut agents = agents_by_node(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1}));

    // worker-2: killed while its host stages (state busy), restarted. worker-3: killed while its host is down
    // rebooting, restarted once it is up. Whichever comes first (the PDB-aware order may take worker-3 first).
    let (mut staged_crash, mut reboot_crash) = (false, false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    while !(staged_crash && reboot_crash) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "worker-2 staging seen: {staged_crash}; worker-3 rebooting seen: {reboot_crash}"
        );
        let staging = annotation(&store, "worker-2", keys::INTENT).as_deref() == Some("stage")
            && annotation(&store, "worker-2", keys::STATE).as_deref() == Some("busy");
        if !staged_crash && staging {
            agents.remove("worker-2").unwrap().crash().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            agents.insert("worker-2".into(), harness::agent(cluster.operator(), "worker-2"));
            staged_crash = true;
        }
        if !reboot_crash && cluster.hosts().state("worker-3").is_some_and(|s| s.power == Power::Rebooting) {
            agents.remove("worker-3").unwrap().crash().await;
            eventually(Duration::from_secs(30), "worker-3 back up", || {
                (cluster.hosts().state("worker-3")?.power == Power::Up).then_some(())
            })
            .await;
            agents.insert("worker-3".into(), harness::agent(cluster.operator(), "worker-3"));
            reboot_crash = true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    eventually(Duration::from_secs(240), "the rollout", || rolled_out(&store, 13)).await;
    for (name, before) in boots_before {
        let host = cluster.hosts().state(&name).unwrap();
        assert_eq!(host.facts.os_image, "v2", "{name}");
        assert_eq!(host.boots, before + 1, "{name} rebooted {} times", host.boots - before);
    }
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents.into_values().collect()).await;
    cluster.shutdown().await;
}
