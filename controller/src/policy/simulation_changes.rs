//! Changes in the middle of whole rollouts (the [`Sim`](super::Sim) of `simulation`), target changes and nodes that
//! join: whatever a change finds under way, every node ends on the last target, within every bound.

use super::*;

/// The step of the node's intent, if any.
fn step(n: &NodeView) -> Option<Step> {
    n.controller.as_ref().ok().and_then(|c| c.intent.as_ref()).map(|i| i.step)
}

/// The image the node's agent reports.
fn image(n: &NodeView) -> Option<&str> {
    n.agent.as_ref().ok().and_then(|a| a.os_image.as_deref())
}

/// The bounds after a plan: at most `max` nodes in `staging` (the stage step, or a Kubernetes upgrade's fetch:
/// maxStaging, here maxUnavailable) and disrupted (maxUnavailable), one control-plane node disrupted at most.
fn assert_within_bounds(sim: &Sim, staging: Step, max: usize, case: &str) {
    let ahead = sim.nodes.iter().filter(|n| step(n) == Some(staging)).count();
    assert!(ahead <= max, "{case}: {ahead} nodes in the {staging:?} step, max {max}");
    let disrupted = sim.disrupted();
    assert!(disrupted.len() <= max, "{case}: {} disrupted, max {max}", disrupted.len());
    assert!(disrupted.iter().filter(|n| n.control_plane).count() <= 1, "{case}: two control-plane nodes disrupted");
}

/// A target change while the only control-plane node reboots into the old target (that reboot is verified to its
/// end): the workers staged ahead for the new target leave it a slot of maxStaging, which is never exceeded, and
/// every node ends on the new target.
#[test]
fn a_target_change_while_the_control_plane_reboots_ends_with_every_node_on_the_new_target() {
    const NEW: &str = "v3";
    for seed in 0..20 {
        let policy = Policy { max_unavailable: budget::MaxUnavailable::Count(2), ..Policy::default() };
        let nodes = [cp("cp0")].into_iter().chain((0..6).map(|i| node(&format!("w{i}")))).collect();
        let mut sim = Sim::new(seed, nodes, one_rollout(policy.clone()));
        let retargeted = Rollout::new("nv", SpecState::Valid(valid_spec(NEW, 2, policy)), None);
        sim.retarget_at_reboot = Some(vec![retargeted]);
        let last = sim.run(|sim, _| assert_within_bounds(sim, Step::Stage, 2, &format!("seed {seed}")));
        assert!(sim.retarget_at_reboot.is_none(), "seed {seed}: the control-plane node never rebooted");
        let p = &last.rollouts[0];
        assert_eq!(p.counts.up_to_date, 7, "seed {seed}: {:?}, held: {:?}", p.counts, p.hold);
        assert!(sim.nodes.iter().all(|n| image(n) == Some(NEW) && !n.unschedulable), "seed {seed}");
    }
}

/// Target changes at any moment of a rollout (one to three of them, at random plans): whatever each finds under way,
/// every node ends on the last target, uncordoned, and no bound is exceeded meanwhile (maxUnavailable, one
/// control-plane node at a time, maxStaging). A rollout that stood still with nodes left behind fails here.
#[test]
fn rollouts_retargeted_at_any_moment_end_with_every_node_on_the_last_target() {
    for seed in 0..30 {
        for max in [1, 2, 3] {
            let policy = Policy { max_unavailable: budget::MaxUnavailable::Count(max), ..Policy::default() };
            let mut sim = Sim::new(seed, cluster_of_fifteen(), one_rollout(policy.clone()));
            let changes = 1 + sim.random(3);
            let mut at = 0;
            for i in 0..changes {
                at += 1 + sim.random(40);
                let target = format!("v{}", 3 + i);
                let spec = valid_spec(&target, 2 + i as i64, policy.clone());
                sim.retarget_at_plan.push((at, vec![Rollout::new("nv", SpecState::Valid(spec), None)]));
            }
            let last_target = format!("v{}", 2 + changes);
            let case = format!("seed {seed}, max {max}");
            let last = sim.run(|sim, _| assert_within_bounds(sim, Step::Stage, max as usize, &case));
            let p = &last.rollouts[0];
            assert_eq!(p.counts.up_to_date, 15, "seed {seed}, max {max}: {:?}, held: {:?}", p.counts, p.hold);
            for n in &sim.nodes {
                assert_eq!(image(n), Some(last_target.as_str()), "seed {seed}, max {max}: {}", n.name);
                assert!(!n.unschedulable, "seed {seed}, max {max}: {} left cordoned", n.name);
            }
        }
    }
}

/// A Kubernetes upgrade retargeted to a later patch release at any moment: every node ends on the last version, the
/// workers after the control plane, within the bounds, fetched ahead within maxStaging.
#[test]
fn kubernetes_upgrades_retargeted_at_any_moment_end_with_every_node_on_the_last_version() {
    for seed in 0..15 {
        for max in [1, 3] {
            let policy = Policy { max_unavailable: budget::MaxUnavailable::Count(max), ..Policy::default() };
            let nodes = cluster_of_fifteen().into_iter().map(on_old_kubernetes).collect();
            let mut sim = Sim::new(seed, nodes, kubernetes_rollout(policy.clone()));
            let at = 1 + sim.random(80);
            let mut retargeted = kubernetes_rollout(policy);
            if let Some(kubernetes::KubernetesSpec::Upgrade(target)) = &mut retargeted[0].kubernetes {
                target.version = "v1.34.2".parse().unwrap();
            }
            sim.retarget_at_plan.push((at, retargeted));
            let case = format!("seed {seed}, max {max}");
            let last = sim.run(|sim, _| assert_within_bounds(sim, Step::Fetch, max as usize, &case));
            let p = &last.rollouts[0];
            assert_eq!(p.counts.up_to_date, 15, "seed {seed}, max {max}: {:?}, held: {:?}", p.counts, p.hold);
            for n in &sim.nodes {
                assert_eq!(n.kubelet_version.as_deref(), Some("v1.34.2"), "seed {seed}, max {max}: {}", n.name);
                assert!(!n.unschedulable, "seed {seed}, max {max}: {} left cordoned", n.name);
            }
        }
    }
}

/// An outdated control-plane node joins at any moment of a rollout (with maxStaging 2 the workers staged ahead may
/// hold every slot by then): the workers wait for it, yield it a slot if they must, and every node ends on the
/// target, within every bound.
#[test]
fn a_control_plane_node_that_joins_mid_rollout_is_updated_before_the_workers_and_every_node_ends_on_the_target() {
    let mut yielded = 0;
    for seed in 0..30 {
        let policy = Policy { max_unavailable: budget::MaxUnavailable::Count(2), ..Policy::default() };
        let nodes = [cp("cp0")].into_iter().chain((0..6).map(|i| node(&format!("w{i}")))).collect();
        let mut sim = Sim::new(seed, nodes, one_rollout(policy));
        let at = 1 + sim.random(30);
        sim.join_at_plan.push((at, cp("cp1")));
        let case = format!("seed {seed}");
        let last = sim.run(|sim, cluster| {
            assert_within_bounds(sim, Step::Stage, 2, &case);
            // No worker starts its turn while a control-plane node is not on the target.
            let control_plane_done = sim.nodes.iter().filter(|n| n.control_plane).all(|n| image(n) == Some(TARGET));
            let worker_turn = cluster.rollouts[0].actions.iter().any(|a| {
                matches!(a.kind, ActionKind::Drain { .. })
                    && sim.nodes.iter().any(|n| n.name == a.node && !n.control_plane)
            });
            assert!(control_plane_done || !worker_turn, "seed {seed}: a worker's turn before the control plane's");
            yielded += cluster.rollouts[0].actions.iter().filter(|a| a.reason == Reason::StagingSlotYielded).count();
        });
        let p = &last.rollouts[0];
        assert_eq!(p.counts.up_to_date, 8, "seed {seed}: {:?}, held: {:?}", p.counts, p.hold);
        assert!(sim.nodes.iter().all(|n| !n.unschedulable), "seed {seed}: a node left cordoned");
    }
    assert!(yielded > 0, "no seed had the workers yield a slot");
}
