//! The incremental [`Planner`] against the full [`plan_with`]: random event sequences (agents' reports, drains
//! finishing or failing, nodes added, removed, made NotReady or cordoned, annotations broken, specs changed, time
//! passing, the controller's writes applied or failing) from seeded ChaCha generators, with identical plans and
//! statuses asserted after every event. The planner is given exactly the nodes that changed, as the reconciler
//! gives them.

use super::tests::{OLD, TARGET, boot, node, t, unreadable_intent, valid_spec};
use super::*;
use crate::executor::next_state;
use crate::status;
use budget::MaxUnavailable;
use jiff::SignedDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shared::crd::DrainTimeoutAction;
use shared::protocol::keys;
use shared::protocol::{AgentState, ControllerAnnotations, Token};
use std::collections::{BTreeMap, BTreeSet};

/// The rollouts a sequence switches between; index 0 is where it starts.
fn configurations() -> Vec<Vec<Rollout>> {
    let policy = |max: u32| Policy { max_unavailable: MaxUnavailable::Count(max), ..Policy::default() };
    let window = window::Window {
        cron: cron::Cron::parse("*/10 * * * *").expect("a valid schedule"),
        duration: SignedDuration::from_mins(5),
        time_zone: jiff::tz::TimeZone::UTC,
        schedule: "*/10 * * * *".into(),
        zone_name: "UTC".into(),
    };
    let rollout = |name: &str, spec: Arc<ValidSpec>| Rollout {
        name: name.into(),
        spec: SpecState::Valid(spec),
        kubernetes: None,
    };
    let two = valid_spec(TARGET, 1, policy(2));
    let pool_one = NodeSelector::from_label_selector(&LabelSelector {
        match_labels: Some([("pool".to_owned(), "one".to_owned())].into()),
        ..Default::default()
    })
    .expect("a valid selector");
    vec![
        vec![rollout("nv", two.clone())],
        vec![rollout("nv", valid_spec(TARGET, 2, policy(1)))],
        vec![rollout("nv", valid_spec(TARGET, 3, Policy { soak_time: SignedDuration::from_secs(90), ..policy(3) }))],
        vec![rollout("nv", valid_spec(TARGET, 4, Policy { paused: true, ..policy(2) }))],
        vec![rollout("nv", valid_spec(TARGET, 5, Policy { failure_budget: 1, ..policy(2) }))],
        vec![rollout("nv", valid_spec(TARGET, 6, Policy { on_drain_timeout: DrainTimeoutAction::Stop, ..policy(2) }))],
        vec![rollout("nv", valid_spec(TARGET, 7, Policy { window: Some(window), ..policy(2) }))],
        vec![rollout("nv", valid_spec("v3", 8, policy(2)))],
        vec![Rollout {
            name: "nv".into(),
            spec: SpecState::Invalid { errors: vec!["spec.image: bad".into()], last_valid: Some(two.clone()) },
            kubernetes: None,
        }],
        vec![Rollout {
            name: "nv".into(),
            spec: SpecState::Invalid { errors: vec!["spec.image: bad".into()], last_valid: None },
            kubernetes: None,
        }],
        vec![
            rollout("nv", two.clone()),
            rollout("pool-one", valid_spec("v3", 1, Policy { selector: pool_one.clone(), ..policy(1) })),
        ],
        vec![rollout("pool-one", valid_spec("v3", 1, Policy { selector: pool_one, ..policy(1) }))],
        vec![],
    ]
}

/// A simulated cluster fed to both planners.
struct Run {
    rng: ChaCha8Rng,
    now: Timestamp,
    nodes: BTreeMap<String, NodeView>,
    /// Nodes labelled `pool=one`.
    pool_one: BTreeSet<String>,
    rollouts: Vec<Rollout>,
    own_node: Option<String>,
    planner: Planner,
    /// What the planner was last given of each node.
    fed: BTreeMap<String, String>,
    tokens: u64,
    boots: u64,
    added: u64,
    last: ClusterPlan,
}

impl Run {
    fn new(seed: u64) -> Run {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let size = 2 + rng.next_u64() % 10;
        let mut nodes = BTreeMap::new();
        let mut pool_one = BTreeSet::new();
        for i in 0..size {
            let name = format!("n{i:02}");
            let mut n = node(&name);
            n.control_plane = i < rng.next_u64() % 3;
            if rng.next_u64() % 3 == 0 {
                pool_one.insert(name.clone());
            }
            nodes.insert(name, n);
        }
        let own_node = (rng.next_u64() % 2 == 0).then(|| format!("n{:02}", rng.next_u64() % size));
        let mut run = Run {
            rng,
            now: t(0),
            nodes,
            pool_one,
            rollouts: configurations().remove(0),
            own_node,
            planner: Planner::new(),
            fed: BTreeMap::new(),
            tokens: 0,
            boots: 0,
            added: 0,
            last: ClusterPlan::default(),
        };
        run.select();
        run
    }

    fn random(&mut self, below: u64) -> u64 {
        self.rng.next_u64() % below.max(1)
    }

    fn pick(&mut self) -> Option<String> {
        let i = self.random(self.nodes.len() as u64) as usize;
        self.nodes.keys().nth(i).cloned()
    }

    /// Recomputes which rollouts select each node, as the reconciler does from the selectors.
    fn select(&mut self) {
        for (name, n) in &mut self.nodes {
            let mut labels = BTreeMap::new();
            if n.opted_in {
                labels.insert(keys::MANAGED_LABEL.to_owned(), keys::MANAGED_VALUE.to_owned());
            }
            if self.pool_one.contains(name) {
                labels.insert("pool".to_owned(), "one".to_owned());
            }
            n.selected_by = self
                .rollouts
                .iter()
                .enumerate()
                .filter(|(_, r)| r.spec.acting().is_some_and(|s| s.policy.selector.matches(Some(&labels))))
                .map(|(i, _)| i)
                .collect();
        }
    }

    /// One random event; returns what it was, for the failure message.
    fn event(&mut self) -> String {
        let Some(name) = self.pick() else {
            self.add();
            return "node added to an empty cluster".into();
        };
        match self.random(20) {
            0..=5 => self.apply(),
            6..=8 => self.agent(&name),
            9 | 10 => self.drain(&name),
            11 => {
                let n = self.nodes.get_mut(&name).expect("picked");
                n.ready = !n.ready;
                format!("{name} Ready={}", n.ready)
            }
            12 => {
                let n = self.nodes.get_mut(&name).expect("picked");
                if n.controller.as_ref().is_ok_and(|c| !c.cordoned_by_us) {
                    n.unschedulable = !n.unschedulable;
                }
                format!("{name} cordoned by someone else: {}", n.unschedulable)
            }
            13 => {
                if self.random(2) == 0 {
                    self.add();
                    "node added".into()
                } else {
                    self.nodes.remove(&name);
                    format!("{name} removed")
                }
            }
            14 => {
                let configurations = configurations();
                let i = self.random(configurations.len() as u64) as usize;
                self.rollouts = configurations.into_iter().nth(i).unwrap_or_default();
                self.select();
                format!("rollouts set to configuration {i}")
            }
            15 => {
                let n = self.nodes.get_mut(&name).expect("picked");
                if n.controller.is_ok() {
                    let step =
                        n.controller.as_ref().ok().and_then(|c| c.intent.as_ref()).map_or(Step::Stage, |i| i.step);
                    let cordoned = n.controller.as_ref().is_ok_and(|c| c.cordoned_by_us);
                    *n = unreadable_intent(n.clone(), step, cordoned);
                    format!("{name}: intent made unreadable")
                } else {
                    n.agent = Err(ProtocolError::Malformed { key: keys::OS_IMAGE, value: " ".into(), reason: "blank" });
                    format!("{name}: agent report made unreadable")
                }
            }
            16 => {
                let n = self.nodes.get_mut(&name).expect("picked");
                n.controller = Ok(ControllerAnnotations::default());
                n.agent =
                    Ok(AgentReport { boot_id: Some(boot("b0")), os_image: Some(OLD.into()), ..Default::default() });
                format!("{name}: annotations reset")
            }
            17 => {
                let secs = 1 + self.random(120) as i64;
                self.now += SignedDuration::from_secs(secs);
                format!("{secs}s pass")
            }
            _ => {
                let secs = [300, 600, 1800, 3600, 7200][self.random(5) as usize];
                self.now += SignedDuration::from_secs(secs);
                format!("{secs}s pass")
            }
        }
    }

    fn add(&mut self) {
        self.added += 1;
        let name = format!("m{:03}", self.added);
        let mut n = node(&name);
        n.control_plane = self.random(6) == 0;
        match self.random(4) {
            0 => n.agent = Ok(AgentReport::default()),
            1 => {
                if let Ok(a) = &mut n.agent {
                    a.os_image = Some(TARGET.into());
                }
            }
            _ => {}
        }
        n.ready = self.random(5) != 0;
        n.opted_in = self.random(5) != 0;
        if self.random(3) == 0 {
            self.pool_one.insert(name.clone());
        }
        self.nodes.insert(name, n);
        self.select();
    }

    /// The controller's writes of the last plan, as the executor applies them; some fail.
    fn apply(&mut self) -> String {
        let actions: Vec<NodeAction> =
            self.last.rollouts.iter().chain([&self.last.unowned]).flat_map(|p| p.actions.clone()).collect();
        let mut applied = 0;
        for action in &actions {
            if self.random(8) == 0 {
                continue;
            }
            let Some(n) = self.nodes.get_mut(&action.node) else { continue };
            if crate::forecast::transition(n, action, Token::from_u64(self.tokens + 1), self.now) {
                self.tokens += 1;
                applied += 1;
            }
        }
        for n in self.nodes.values_mut() {
            let draining =
                n.controller.as_ref().is_ok_and(|c| c.intent.as_ref().is_some_and(|i| i.step == Step::Drain));
            if !draining {
                n.drain = DrainProgress::NotRunning;
            }
        }
        format!("{applied} of {} actions applied", actions.len())
    }

    /// The node's agent finishes its step (or fails it).
    fn agent(&mut self, name: &str) -> String {
        self.boots += 1;
        let fails = self.random(5) == 0;
        let boots = self.boots;
        let n = self.nodes.get_mut(name).expect("picked");
        let Some(intent) = n.controller.as_ref().ok().and_then(|c| c.intent.clone()) else {
            return format!("{name}: no intent for the agent");
        };
        let Ok(report) = &mut n.agent else { return format!("{name}: agent report unreadable") };
        report.token = Some(intent.token.clone());
        report.state = Some(if fails { AgentState::Error } else { AgentState::Done });
        report.message = fails.then(|| "simulated failure".into());
        if intent.step == Step::Reboot && !fails {
            let id = format!("b{boots}");
            report.boot_id = Some(boot(&id));
            report.os_image = Some(intent.target.clone());
            n.kubelet_boot_id = Some(id);
        }
        format!("{name}: agent finished {} (failed: {fails})", intent.step)
    }

    /// The node's drain progresses.
    fn drain(&mut self, name: &str) -> String {
        let progress = match self.random(6) {
            0..=2 => DrainProgress::Drained,
            3 => DrainProgress::Running { waiting_on: Some("pod default/web-0".into()) },
            4 => DrainProgress::Failed { message: "a pod without a controller".into() },
            _ => DrainProgress::Uncordoned,
        };
        let n = self.nodes.get_mut(name).expect("picked");
        if n.drain == DrainProgress::NotRunning {
            return format!("{name}: no drain runs");
        }
        n.drain = progress.clone();
        format!("{name}: drain {progress:?}")
    }

    /// Gives the planner what changed, plans both ways, and compares.
    fn check(&mut self, seed: u64, step: usize, event: &str) {
        self.planner.set_context(self.rollouts.clone(), Fleet::default(), self.own_node.clone());
        let gone: Vec<String> = self.fed.keys().filter(|n| !self.nodes.contains_key(*n)).cloned().collect();
        for name in gone {
            self.planner.remove(&name);
            self.fed.remove(&name);
        }
        for (name, n) in &self.nodes {
            let seen = format!("{n:?}");
            if self.fed.get(name) != Some(&seen) {
                self.planner.upsert(n.clone());
                self.fed.insert(name.clone(), seen);
            }
        }
        assert!(self.planner.incremental(), "no replacement, no Kubernetes upgrade: the planner must index");
        let got = self.planner.plan(self.now);
        let nodes: Vec<NodeView> = self.nodes.values().cloned().collect();
        let want = plan_with(&nodes, &self.rollouts, &Fleet::default(), self.own_node.as_deref(), self.now);
        assert_eq!(format!("{got:#?}"), format!("{want:#?}"), "seed {seed}, event {step}: {event}");
        for (p, r) in got.rollouts.iter().zip(&self.rollouts) {
            let status = status::compute(p, r, Some(1), None, self.now);
            let reference = want.rollouts.iter().zip(&self.rollouts).find(|(_, w)| w.name == r.name);
            let expected = reference.map(|(w, r)| status::compute(w, r, Some(1), None, self.now));
            assert_eq!(Some(status), expected, "seed {seed}, event {step}: {event}");
        }
        self.last = got;
    }
}

#[test]
fn the_incremental_planner_decides_as_the_full_plan_after_every_event() {
    let mut started = 0;
    for seed in 0..300 {
        let mut run = Run::new(seed);
        run.check(seed, 0, "start");
        for step in 1..200 {
            let event = run.event();
            run.check(seed, step, &event);
        }
        started += run.tokens;
    }
    // The sequences do move nodes: the comparison is not only of idle clusters.
    assert!(started > 1000, "only {started} writes applied");
}

#[test]
fn one_node_changing_assesses_that_node_and_those_in_flight_not_the_cluster() {
    let rollouts = vec![Rollout {
        name: "nv".into(),
        spec: SpecState::Valid(valid_spec(
            TARGET,
            1,
            Policy { max_unavailable: MaxUnavailable::Count(3), ..Policy::default() },
        )),
        kubernetes: None,
    }];
    let mut planner = Planner::new();
    planner.set_context(rollouts, Fleet::default(), None);
    for i in 0..1000 {
        planner.upsert(node(&format!("n{i:04}")));
    }
    let first = planner.plan(t(0));
    assert_eq!(planner.assessed(), 1000);
    assert_eq!(first.rollouts[0].actions.len(), 3);
    // The three started nodes get their intent (the executor's write, seen by the watch).
    for action in &first.rollouts[0].actions {
        let mut n = planner.node(&action.node).cloned().expect("a started node");
        let (next, unschedulable) =
            next_state(n.controller.as_ref().expect("readable"), n.unschedulable, action, Token::from_u64(1), t(0));
        n.controller = Ok(next);
        n.unschedulable = unschedulable;
        planner.upsert(n);
    }
    let second = planner.plan(t(1));
    // The three written nodes (and the nodes with an action last time: the same three).
    assert_eq!(planner.assessed(), 3);
    assert!(second.rollouts[0].actions.is_empty());
    assert_eq!(second.rollouts[0].counts.in_progress, 3);
    // Nothing changed: nothing is assessed again.
    planner.plan(t(2));
    assert_eq!(planner.assessed(), 0);
    // A spec change assesses every node again.
    let rollouts = vec![Rollout {
        name: "nv".into(),
        spec: SpecState::Valid(valid_spec("v3", 2, Policy::default())),
        kubernetes: None,
    }];
    planner.set_context(rollouts, Fleet::default(), None);
    planner.plan(t(3));
    assert_eq!(planner.assessed(), 1000);
}

#[test]
fn with_a_replacement_the_planner_decides_with_the_full_plan() {
    let rollouts = vec![Rollout {
        name: "nv".into(),
        spec: SpecState::Valid(valid_spec(TARGET, 1, Policy::default())),
        kubernetes: None,
    }];
    let fleet = Fleet {
        groups: vec![replacement::GroupView { group_id: "g".into(), control_plane: false, image: Some(TARGET.into()) }],
        ..Fleet::default()
    };
    let member = GroupMember { group_id: "g".into(), provider_id: "sim://a".into(), ..Default::default() };
    let nodes = vec![NodeView { group: Some(member), ..node("a") }, node("b")];
    let mut planner = Planner::new();
    planner.set_context(rollouts.clone(), fleet.clone(), None);
    for n in &nodes {
        planner.upsert(n.clone());
    }
    assert!(!planner.incremental());
    let got = planner.plan(t(0));
    let want = plan_with(&nodes, &rollouts, &fleet, None, t(0));
    assert_eq!(format!("{got:#?}"), format!("{want:#?}"));
    assert_eq!(got.rollouts[0].actions[0].kind, ActionKind::Replace { target: TARGET.into() });
    // The group gone, it indexes again.
    planner.set_context(rollouts, Fleet::default(), None);
    planner.upsert(node("a"));
    assert!(planner.incremental());
    planner.plan(t(1));
    assert_eq!(planner.assessed(), 2);
}
