//! Whole rollouts, the way Cluster API tests its rollout planner (`Test_RollingUpdateSequences`):
//! the policy plans, the executor's own transitions ([`crate::forecast::transition`]) apply the
//! actions, and simulated agents, drains and reboots act one event at a time in a seeded random
//! order. The invariants are checked after every plan, and a rollout can be told as a narrative
//! that is compared with a golden file under `testdata/` (run with `UPDATE_GOLDEN=1` to rewrite
//! them after a deliberate change, and review the diff).

use super::tests::{OLD, TARGET, cp, node, t, valid_spec};
use super::*;
use crate::status;
use jiff::SignedDuration;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shared::protocol::{AgentState, Token};
use std::collections::HashMap;
use std::fmt::Write as _;

/// What a simulated host does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The agent cannot stage the image.
    StageFails,
    /// The host does not come back from its reboot until this time, then runs the target.
    RebootLate { back_at: Timestamp },
    /// The instance created to replace this node never joins.
    NeverJoins,
    /// This node's drain never finishes.
    DrainStuck,
}

/// A simulated cluster and the controller's view of it.
struct Sim {
    nodes: Vec<NodeView>,
    rollouts: Vec<Rollout>,
    rng: ChaCha8Rng,
    start: Timestamp,
    now: Timestamp,
    tokens: u64,
    boots: u64,
    faults: HashMap<String, Fault>,
    /// A stage fails with this chance (percent), besides the faults.
    stage_failure_percent: u64,
    /// The narrative, when the rollout is told.
    story: Option<String>,
    last_hold: Vec<Option<Hold>>,
    last_progressing: Vec<(String, String)>,
    /// The scaling groups and PendingNodes (the simulated cloud and PendingNode controller act on them).
    fleet: Fleet,
    /// Instances the cloud holds beyond those of the start, and how many were ever created.
    extra_instances: i64,
    created: u64,
    /// The deadline of each joining PendingNode.
    join_deadlines: HashMap<String, Timestamp>,
    /// A NodeOp beside the rollouts, decided after each plan as the NodeOp controller decides after the reconciler.
    nodeop: Option<SimOp>,
    /// The incremental planner, given the nodes that changed before every plan: it must decide as the full plan.
    planner: incremental::Planner,
    /// What the planner was last given of each node.
    fed: super::incremental_tests::Fed,
    /// Rollouts that replace the current ones (a target change) as soon as a control-plane node is in the reboot step.
    retarget_at_reboot: Option<Vec<Rollout>>,
    /// Rollouts that replace the current ones at the plan of that number (target changes at any moment), in order.
    retarget_at_plan: Vec<(u64, Vec<Rollout>)>,
    /// Nodes that join at the plan of that number, in order.
    join_at_plan: Vec<(u64, NodeView)>,
    /// Plans made so far.
    plans: u64,
}

/// A NodeOp, its recorded node statuses and its nodes' Jobs.
struct SimOp {
    key: String,
    spec: shared::crd::nodeop::NodeOpSpec,
    recorded: std::collections::BTreeMap<String, shared::crd::nodeop::NodeOpNodeStatus>,
    jobs: HashMap<String, crate::nodeop::decide::JobState>,
}

impl Sim {
    fn new(seed: u64, nodes: Vec<NodeView>, rollouts: Vec<Rollout>) -> Sim {
        let n = rollouts.len();
        Sim {
            nodes,
            rollouts,
            rng: ChaCha8Rng::seed_from_u64(seed),
            start: t(0),
            now: t(0),
            tokens: 0,
            boots: 0,
            faults: HashMap::new(),
            stage_failure_percent: 0,
            story: None,
            last_hold: vec![None; n],
            last_progressing: vec![Default::default(); n],
            fleet: Fleet::default(),
            extra_instances: 0,
            created: 0,
            join_deadlines: HashMap::new(),
            nodeop: None,
            planner: incremental::Planner::new(),
            fed: Default::default(),
            retarget_at_reboot: None,
            retarget_at_plan: Vec::new(),
            join_at_plan: Vec::new(),
            plans: 0,
        }
    }

    fn told(mut self) -> Sim {
        self.story = Some(String::new());
        self
    }

    fn tell(&mut self, line: String) {
        let at = self.now.duration_since(self.start).as_secs();
        if let Some(story) = &mut self.story {
            let _ = writeln!(story, "[t+{at}s] {line}");
        }
    }

    fn random(&mut self, below: u64) -> u64 {
        self.rng.next_u64() % below.max(1)
    }

    /// Gives the incremental planner the nodes that changed, as the reconciler does, and checks that it decides as
    /// the full plan of the nodes in name order (the planner's), whole rollouts long.
    fn plan_incrementally(&mut self) {
        self.planner.set_context(self.rollouts.clone(), self.fleet.clone(), None);
        self.fed.give(&mut self.planner, &self.nodes);
        let got = self.planner.plan(self.now);
        let mut nodes = self.nodes.clone();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let want = plan_with(&nodes, &self.rollouts, &self.fleet, None, self.now);
        let at = self.now.duration_since(self.start).as_secs();
        assert_eq!(format!("{got:#?}"), format!("{want:#?}"), "the incremental planner at t+{at}s");
    }

    /// Plans once and applies the plan as the executor does; returns the plan.
    fn plan_and_apply(&mut self) -> ClusterPlan {
        let rebooting = |n: &NodeView| {
            n.control_plane
                && n.controller.as_ref().is_ok_and(|c| c.intent.as_ref().is_some_and(|i| i.step == Step::Reboot))
        };
        if self.retarget_at_reboot.is_some()
            && let Some(name) = self.nodes.iter().find(|n| rebooting(n)).map(|n| n.name.clone())
            && let Some(rollouts) = self.retarget_at_reboot.take()
        {
            self.rollouts = rollouts;
            self.tell(format!("the target changed while {name} reboots"));
        }
        self.plans += 1;
        if self.join_at_plan.first().is_some_and(|(at, _)| *at <= self.plans) {
            let (_, node) = self.join_at_plan.remove(0);
            self.tell(format!("{} joins", node.name));
            self.nodes.push(node);
        }
        if self.retarget_at_plan.first().is_some_and(|(at, _)| *at <= self.plans) {
            let (_, mut rollouts) = self.retarget_at_plan.remove(0);
            for (new, old) in rollouts.iter_mut().zip(&self.rollouts) {
                // The API server runs what it runs: the new upgrade starts from there.
                if let (
                    Some(kubernetes::KubernetesSpec::Upgrade(new)),
                    Some(kubernetes::KubernetesSpec::Upgrade(old)),
                ) = (&mut new.kubernetes, &old.kubernetes)
                {
                    new.api_server = old.api_server.clone();
                }
            }
            self.rollouts = rollouts;
            self.tell("the target changed".into());
        }
        let cluster = plan_with(&self.nodes, &self.rollouts, &self.fleet, None, self.now);
        self.plan_incrementally();
        for (i, p) in cluster.rollouts.iter().enumerate() {
            if self.last_hold[i] != p.hold {
                let line = match &p.hold {
                    Some(h) => format!("rollout {} held: {}\n    - {}", self.rollouts[i].name, h.reason, h.message),
                    None => format!("rollout {} no longer held", self.rollouts[i].name),
                };
                self.tell(line);
                self.last_hold[i] = p.hold.clone();
            }
        }
        let actions: Vec<NodeAction> =
            cluster.rollouts.iter().chain([&cluster.unowned]).flat_map(|p| p.actions.clone()).collect();
        for action in &actions {
            self.apply(action);
        }
        for n in &mut self.nodes {
            // The reconciler stops the drains of nodes that left the drain step.
            let donor_draining = n.group.as_ref().is_some_and(|m| m.heir.is_some());
            let draining = n.controller.as_ref().is_ok_and(|c| {
                c.intent.as_ref().is_some_and(|i| i.step == Step::Drain || (i.step == Step::Replace && donor_draining))
            });
            if !draining && n.operation.is_none() {
                n.drain = DrainProgress::NotRunning;
            }
        }
        for (i, p) in cluster.rollouts.iter().enumerate() {
            let status = status::compute(p, &self.rollouts[i], Some(1), None, self.now);
            let progressing = status
                .conditions
                .iter()
                .find(|c| c.type_ == status::PROGRESSING)
                .map(|c| (format!("{}={}", c.status, c.reason), c.message.clone()));
            if let Some((state, message)) = progressing
                && self.last_progressing[i].0 != state
            {
                self.tell(format!("status Progressing={}: {message}", state.replacen('=', " ", 1)));
                self.last_progressing[i] = (state, message);
            }
        }
        cluster
    }

    /// Applies one action with the executor's transitions.
    fn apply(&mut self, action: &NodeAction) {
        if !matches!(action.kind, ActionKind::KeepDraining) {
            self.tell(format!("{}: {} ({})\n    - {}", action.node, action.kind.name(), action.reason, action.message));
        }
        self.tokens += 1;
        let token = Token::from_u64(self.tokens);
        let now = self.now;
        if self.apply_replacement(action) {
            return;
        }
        if let Some(n) = self.nodes.iter_mut().find(|n| n.name == action.node) {
            crate::forecast::transition(n, action, token, now);
        }
    }

    /// The replacement's actions that are not the node's controller annotations, as the executor applies them;
    /// whether the action is done with.
    fn apply_replacement(&mut self, action: &NodeAction) -> bool {
        let now = self.now;
        let Some(i) = self.nodes.iter().position(|n| n.name == action.node) else { return true };
        match &action.kind {
            ActionKind::CreateInstance { group_id, pending, deadline } => {
                self.created += 1;
                self.extra_instances += 1;
                self.fleet.pending.push(replacement::PendingView {
                    name: pending.clone(),
                    node_name: format!("{}-r{}", action.node, self.created),
                    group_id: group_id.clone(),
                    goal: replacement::Goal::Join,
                    donor: Some(action.node.clone()),
                    reached_goal: false,
                    join_failed: None,
                    created: Some(now),
                });
                self.join_deadlines.insert(pending.clone(), *deadline);
            }
            ActionKind::Shield { donor } => {
                let member = self.nodes[i].group.get_or_insert_with(Default::default);
                member.taints.push(replacement::shield(donor));
            }
            ActionKind::Inherit { donor, labels, taints } => {
                let member = self.nodes[i].group.get_or_insert_with(Default::default);
                member.taints.retain(|t| t.key != replacement::SHIELD_TAINT);
                member.donor = Some(donor.clone());
                member.labels.extend(labels.clone());
                for taint in taints {
                    if !member.taints.contains(taint) {
                        member.taints.push(taint.clone());
                    }
                }
            }
            ActionKind::DrainDonor { heir, .. } => {
                if let Some(member) = &mut self.nodes[i].group {
                    member.heir = Some(heir.clone());
                }
                return false;
            }
            ActionKind::Retire { join_pending, .. } => {
                let heir = self.nodes[i].group.as_ref().and_then(|m| m.heir.clone()).unwrap_or_default();
                let ready = self.nodes.iter().any(|n| n.name == heir && n.ready);
                assert!(ready, "{} deleted while its heir {heir:?} is not a Ready node", action.node);
                self.fleet.pending.retain(|p| Some(&p.name) != join_pending.as_ref());
                self.nodes.remove(i);
            }
            ActionKind::AbandonReplacement { join_pending, .. } => {
                if let Some(p) = self.fleet.pending.iter_mut().find(|p| Some(&p.name) == join_pending.as_ref()) {
                    p.goal = replacement::Goal::Leave;
                }
                return false;
            }
            ActionKind::ReleaseInstance { pending, donor, .. } => {
                if !self.fleet.pending.iter().any(|p| &p.name == pending) {
                    self.fleet.pending.push(replacement::PendingView {
                        name: pending.clone(),
                        node_name: donor.name.clone(),
                        group_id: donor.group_id.clone(),
                        goal: replacement::Goal::Leave,
                        donor: Some(donor.name.clone()),
                        reached_goal: false,
                        join_failed: None,
                        created: Some(now),
                    });
                }
                if let Some(member) = &mut self.nodes[i].group {
                    member.donor = None;
                }
            }
            _ => return false,
        }
        true
    }

    /// The nodes (indices below the number of nodes) and PendingNodes (above) on which the world can do
    /// something now.
    fn pending(&mut self) -> Vec<usize> {
        (0..self.nodes.len() + self.fleet.pending.len()).filter(|&i| self.world_event(i, false)).collect()
    }

    /// What the simulated cloud and PendingNode controller do on their own: one event on PendingNode `j` (`act`),
    /// or just whether there is one.
    fn cloud_event(&mut self, j: usize, act: bool) -> bool {
        let now = self.now;
        let p = self.fleet.pending[j].clone();
        let never = p.donor.as_ref().is_some_and(|d| self.faults.get(d) == Some(&Fault::NeverJoins));
        let heir = self.nodes.iter().position(|n| n.name == p.node_name);
        let event = match (p.goal, heir) {
            (replacement::Goal::Leave, _) => "terminated",
            (replacement::Goal::Join, _) if p.reached_goal => return false,
            (replacement::Goal::Join, _) if never => {
                if self.join_deadlines.get(&p.name).is_none_or(|d| now < *d) {
                    return false;
                }
                "given up"
            }
            (replacement::Goal::Join, None) => "registered",
            (replacement::Goal::Join, Some(h)) if !self.nodes[h].ready => "ready",
            (replacement::Goal::Join, Some(_)) => "joined",
        };
        if !act {
            return true;
        }
        let line = match event {
            "terminated" => {
                self.fleet.pending.remove(j);
                self.extra_instances -= 1;
                format!("world: the instance of {} is terminated; PendingNode {} deleted", p.node_name, p.name)
            }
            "given up" => {
                let pending = &mut self.fleet.pending[j];
                pending.goal = replacement::Goal::Leave;
                pending.join_failed = Some("DeadlineExceeded: not Ready within the join timeout".into());
                self.join_deadlines.remove(&p.name);
                format!("world: {} did not join by its deadline; its instance is deleted", p.node_name)
            }
            "registered" => {
                let group = self.fleet.groups.iter().find(|g| g.group_id == p.group_id).cloned();
                let control_plane = group.as_ref().is_some_and(|g| g.control_plane);
                let image = group.and_then(|g| g.image);
                let member = GroupMember {
                    group_id: p.group_id.clone(),
                    provider_id: format!("sim://{}", p.node_name),
                    image: image.clone(),
                    ..Default::default()
                };
                let agent = shared::protocol::AgentReport::default();
                let heir = NodeView {
                    control_plane,
                    ready: false,
                    agent: Ok(agent),
                    group: Some(member),
                    ..node(&p.node_name)
                };
                self.nodes.push(heir);
                format!("world: {} registered (NotReady) with {}", p.node_name, image.unwrap_or_default())
            }
            "ready" => {
                if let Some(h) = heir {
                    self.nodes[h].ready = true;
                    if let Some(m) = &mut self.nodes[h].group {
                        m.ready_since = Some(now);
                    }
                }
                format!("world: {} is Ready", p.node_name)
            }
            _ => {
                self.fleet.pending[j].reached_goal = true;
                self.join_deadlines.remove(&p.name);
                format!("world: PendingNode {} reached its goal", p.name)
            }
        };
        self.tell(line);
        true
    }

    /// The next time a fault ends on its own.
    fn next_fault_end(&self) -> Option<Timestamp> {
        self.faults
            .values()
            .filter_map(|f| match f {
                Fault::RebootLate { back_at } if *back_at > self.now => Some(*back_at),
                _ => None,
            })
            .chain(self.join_deadlines.values().copied().filter(|d| *d > self.now))
            .min()
    }

    /// What agents, drains and reboots do on their own: one event on node `i` (`act`), or just
    /// whether there is one.
    fn world_event(&mut self, i: usize, act: bool) -> bool {
        if i >= self.nodes.len() {
            return self.cloud_event(i - self.nodes.len(), act);
        }
        let fault = self.faults.get(&self.nodes[i].name).copied();
        let fails = act && self.stage_failure_percent > 0 && self.random(100) < self.stage_failure_percent;
        let now = self.now;
        let n = &mut self.nodes[i];
        let Ok(controller) = &n.controller else { return false };
        let intent = controller.intent.clone();
        let Ok(agent) = &mut n.agent else { return false };
        let step = intent.as_ref().map(|i| i.step);
        if n.operation.is_some() && matches!(n.drain, DrainProgress::Running { .. }) {
            if act {
                n.drain = DrainProgress::Drained;
                let line = format!("world: the NodeOp's drain of {} finished", n.name);
                self.tell(line);
            }
            return true;
        }
        let job = self.nodeop.as_ref().and_then(|op| op.jobs.get(&n.name)).cloned();
        if job == Some(crate::nodeop::decide::JobState::Active) {
            if act && let Some(op) = &mut self.nodeop {
                op.jobs.insert(n.name.clone(), crate::nodeop::decide::JobState::Succeeded);
                let line = format!("world: the NodeOp's Job on {} succeeded", n.name);
                self.tell(line);
            }
            return true;
        }
        let event = match (step, &fault) {
            (_, Some(Fault::RebootLate { back_at })) if !n.ready && now >= *back_at => "back",
            (_, Some(Fault::RebootLate { .. })) if !n.ready => return false,
            (Some(Step::Stage | Step::Fetch), _) if agent.token.as_ref() != intent.as_ref().map(|i| &i.token) => {
                "stage"
            }
            (_, Some(Fault::DrainStuck)) if matches!(n.drain, DrainProgress::Running { .. }) => return false,
            (Some(Step::Drain | Step::Replace), _) if matches!(n.drain, DrainProgress::Running { .. }) => "drained",
            (Some(Step::KubeadmUpgrade), _) if agent.token.as_ref() != intent.as_ref().map(|i| &i.token) => "kubeadm",
            (Some(Step::Reboot), _) if n.ready && agent.token.as_ref() != intent.as_ref().map(|i| &i.token) => "down",
            (Some(Step::Reboot), _) if !n.ready => "back",
            _ => return false,
        };
        if !act {
            return true;
        }
        let name = n.name.clone();
        let line = match (event, intent) {
            ("stage", Some(intent)) => {
                agent.token = Some(intent.token.clone());
                if fails || fault == Some(Fault::StageFails) {
                    agent.state = Some(AgentState::Error);
                    agent.message = Some("sha256 mismatch".into());
                    format!("world: the agent of {name} could not stage {}", intent.target)
                } else {
                    agent.state = Some(AgentState::Done);
                    format!("world: the agent of {name} staged {}", intent.target)
                }
            }
            ("kubeadm", Some(intent)) => {
                // kubeadm upgrades the node: the kubelet restarts on the version, the agent reports the components.
                agent.token = Some(intent.token.clone());
                agent.state = Some(AgentState::Done);
                agent.components_hash = Some(shared::protocol::ComponentsHash::parse("k", COMPONENTS_HASH).unwrap());
                n.kubelet_version = Some(intent.target.clone());
                let applied =
                    intent.kubeadm.as_ref().is_some_and(|k| k.role == Some(shared::protocol::KubeadmRole::Apply));
                if applied {
                    for rollout in &mut self.rollouts {
                        if let Some(kubernetes::KubernetesSpec::Upgrade(target)) = &mut rollout.kubernetes {
                            target.api_server = target.version.clone();
                        }
                    }
                }
                let how = if applied { "kubeadm upgrade apply" } else { "kubeadm upgrade node" };
                format!("world: {name} ran {how} to {}", intent.target)
            }
            ("drained", _) => {
                n.drain = DrainProgress::Drained;
                format!("world: the drain of {name} finished")
            }
            ("down", _) => {
                n.ready = false;
                format!("world: {name} went down to reboot")
            }
            (_, intent) => {
                self.boots += 1;
                let new = format!("b{}", self.boots);
                let target = intent.as_ref().map_or(TARGET.to_owned(), |i| i.target.clone());
                n.ready = true;
                n.kubelet_boot_id = Some(new.clone());
                agent.boot_id = Some(shared::protocol::BootId::parse("k", &new).unwrap());
                agent.os_image = Some(target.clone());
                if let Some(intent) = intent.filter(|i| i.step == Step::Reboot) {
                    agent.token = Some(intent.token.clone());
                    agent.state = Some(AgentState::Done);
                }
                format!("world: {name} came back on {target} (boot ID {new})")
            }
        };
        self.tell(line);
        true
    }

    /// Runs until nothing moves and nothing is pending; checks `check` after every plan. Returns
    /// the last plan.
    fn run(&mut self, mut check: impl FnMut(&Sim, &ClusterPlan)) -> ClusterPlan {
        for _ in 0..20_000 {
            let mut cluster = self.plan_and_apply();
            check(self, &cluster);
            let (started, acted) = self.decide_nodeop();
            if started {
                // The NodeOp's starts are checked as the rollouts' are.
                cluster.unowned.actions.push(NodeAction {
                    node: String::new(),
                    kind: ActionKind::Report,
                    reason: Reason::OperationStarted,
                    message: String::new(),
                });
                check(self, &cluster);
            }
            let pending = self.pending();
            if !pending.is_empty() {
                for _ in 0..(1 + self.random(3)) {
                    let pending = self.pending();
                    if pending.is_empty() {
                        break;
                    }
                    let i = pending[self.random(pending.len() as u64) as usize];
                    self.world_event(i, true);
                }
                self.now = self.now.checked_add(SignedDuration::from_secs(1)).unwrap();
                continue;
            }
            let operating = self.nodes.iter().any(|n| n.operation.is_some())
                || self.nodeop.as_ref().is_some_and(|op| {
                    self.nodes.iter().any(|n| {
                        op.recorded.get(&n.name).is_none_or(|r| !r.phase.finished())
                            && n.controller.as_ref().is_ok_and(|c| c.intent.is_none())
                    })
                });
            let moves = operating
                || acted
                || cluster.rollouts.iter().chain([&cluster.unowned]).any(|p| p.actions.iter().any(|a| a.kind.writes()));
            if moves || !self.retarget_at_plan.is_empty() || !self.join_at_plan.is_empty() {
                self.now = self.now.checked_add(SignedDuration::from_secs(1)).unwrap();
                continue;
            }
            match [cluster.wake_at(), self.next_fault_end()].into_iter().flatten().min() {
                Some(next) => self.now = next.max(self.now.checked_add(SignedDuration::from_secs(1)).unwrap()),
                None => {
                    self.tell("settled".into());
                    return cluster;
                }
            }
        }
        panic!("the rollout did not settle within 20000 rounds");
    }

    /// The NodeOp's round, under the budgets the rollouts leave (as the NodeOp controller decides after the
    /// reconciler, through the disruption gate); its writes applied as its controller makes them. Whether it
    /// started a node, and whether it did anything.
    fn decide_nodeop(&mut self) -> (bool, bool) {
        use crate::nodeop::decide::{Action, Inputs, JobState, NodeFacts, decide};
        let Some(op) = self.nodeop.take() else { return (false, false) };
        let facts: Vec<NodeFacts> = self
            .nodes
            .iter()
            .map(|n| NodeFacts {
                name: n.name.clone(),
                control_plane: n.control_plane,
                selected: true,
                ready: n.ready,
                unschedulable: n.unschedulable,
                kubelet_boot_id: n.kubelet_boot_id.clone(),
                mark: n.operation.clone(),
                controller: n.controller.as_ref().ok().cloned(),
                agent: n.agent.as_ref().ok().cloned(),
                drain: n.drain.clone(),
                job: op.jobs.get(&n.name).cloned(),
                preflight: None,
                zone: n.zone.clone(),
                do_not_disrupt: n.do_not_disrupt.clone(),
            })
            .collect();
        let budgets = budgets(&self.nodes, &self.rollouts, &self.fleet, self.now);
        let inputs = Inputs { key: &op.key, spec: &op.spec, recorded: &op.recorded, deleting: false, now: self.now };
        let decision = decide(inputs, &facts, &mut budget::LazyBudgets::ready(budgets));
        let mut op = op;
        let (mut started, mut acted) = (false, false);
        for d in decision.nodes {
            op.recorded.insert(d.node.clone(), d.status.clone());
            let Some(n) = self.nodes.iter_mut().find(|n| n.name == d.node) else { continue };
            let Some(action) = d.action else { continue };
            let Ok(controller) = &mut n.controller else { continue };
            acted = true;
            match action {
                Action::Start { cordon } => {
                    started = true;
                    n.operation = Some(op.key.clone());
                    if cordon && !n.unschedulable {
                        n.unschedulable = true;
                        controller.cordoned_by_us = true;
                    }
                }
                Action::Drain => {
                    if n.drain == DrainProgress::NotRunning {
                        n.drain = DrainProgress::Running { waiting_on: None };
                    }
                }
                Action::CreateJob => {
                    op.jobs.entry(n.name.clone()).or_insert(JobState::Active);
                }
                Action::Release => {
                    n.operation = None;
                    n.drain = DrainProgress::NotRunning;
                    if controller.cordoned_by_us {
                        controller.cordoned_by_us = false;
                        n.unschedulable = false;
                    }
                }
                Action::CreatePreflight | Action::Reboot { .. } | Action::ClearIntent => {}
            }
            let line = format!("nodeop: {} {:?}", n.name, action);
            self.tell(line);
        }
        self.nodeop = Some(op);
        (started, acted)
    }

    fn disrupted(&self) -> Vec<&NodeView> {
        self.nodes
            .iter()
            .filter(|n| {
                n.unschedulable
                    || !n.ready
                    || n.controller.as_ref().is_ok_and(|c| c.intent.as_ref().is_some_and(|i| i.step.disrupts()))
            })
            .collect()
    }
}

/// 3 control-plane nodes and 12 workers.
fn cluster_of_fifteen() -> Vec<NodeView> {
    (0..3).map(|i| cp(&format!("cp{i}"))).chain((0..12).map(|i| node(&format!("w{i:02}")))).collect()
}

fn one_rollout(policy: Policy) -> Vec<Rollout> {
    vec![Rollout::new("nv", SpecState::Valid(valid_spec(TARGET, 1, policy)), None)]
}

/// Runs a seeded rollout and checks, after every plan, the budget and the control-plane rule.
fn checked_rollout(seed: u64, max: u32, stage_failure_percent: u64) -> (Vec<NodeView>, Plan) {
    let policy =
        Policy { max_unavailable: budget::MaxUnavailable::Count(max), failure_budget: 100, ..Policy::default() };
    let mut sim = Sim::new(seed, cluster_of_fifteen(), one_rollout(policy));
    sim.stage_failure_percent = stage_failure_percent;
    let last = sim.run(|sim, cluster| {
        let disrupted = sim.disrupted();
        assert!(disrupted.len() as u32 <= max, "seed {seed}: {} nodes disrupted with max {max}", disrupted.len());
        assert!(
            disrupted.iter().filter(|n| n.control_plane).count() <= 1,
            "seed {seed}: two control-plane nodes disrupted"
        );
        let p = &cluster.rollouts[0];
        let s = status::compute(p, &sim.rollouts[0], Some(1), None, sim.now);
        let progressing = s.conditions.iter().find(|c| c.type_ == status::PROGRESSING).unwrap();
        if progressing.reason == "Complete" {
            assert_eq!(p.counts.up_to_date, p.counts.total, "seed {seed}: Complete with {:?}", p.counts);
        }
    });
    (sim.nodes, last.rollouts.into_iter().next().unwrap())
}

#[test]
fn whole_rollouts_keep_every_invariant_in_any_order() {
    for seed in 0..40 {
        for max in [1, 3] {
            let (nodes, p) = checked_rollout(seed, max, 0);
            assert_eq!(p.counts.up_to_date, 15, "seed {seed}");
            assert!(nodes.iter().all(|n| !n.unschedulable), "seed {seed}: a node left cordoned");
        }
    }
}

#[test]
fn rollouts_with_failing_agents_end_with_every_node_accounted_for_and_uncordoned() {
    for seed in 0..40 {
        let (nodes, p) = checked_rollout(seed, 2, 20);
        assert_eq!(p.counts.up_to_date + p.counts.failed, 15, "seed {seed}: {:?}", p.counts);
        assert!(nodes.iter().all(|n| !n.unschedulable), "seed {seed}: a node left cordoned");
    }
}

// ---- narratives ----

/// Compares `story` with `testdata/NAME.golden`, or writes it there with `UPDATE_GOLDEN=1`.
fn golden(name: &str, story: &str) {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/policy/testdata").join(format!("{name}.golden"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, story).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1 to create it)", path.display()));
    if want != story {
        panic!(
            "the {name} rollout tells another story than {} (run with UPDATE_GOLDEN=1 to accept it):\n{story}",
            path.display()
        );
    }
}

/// A control-plane node and three workers, two at a time.
fn small_cluster() -> Vec<NodeView> {
    vec![cp("cp0"), node("w1"), node("w2"), node("w3")]
}

fn two_at_a_time() -> Policy {
    Policy { max_unavailable: budget::MaxUnavailable::Count(2), ..Policy::default() }
}

#[test]
fn an_in_place_rollout_tells_its_story() {
    let mut sim = Sim::new(7, small_cluster(), one_rollout(two_at_a_time())).told();
    sim.run(|_, _| {});
    golden("in_place", sim.story.as_deref().unwrap_or_default());
}

#[test]
fn a_failed_stage_spends_the_failure_budget_and_the_status_says_why() {
    let mut sim = Sim::new(7, small_cluster(), one_rollout(two_at_a_time())).told();
    sim.faults.insert("w1".into(), Fault::StageFails);
    let last = sim.run(|_, _| {});
    assert_eq!(last.rollouts[0].hold.as_ref().map(|h| h.reason), Some(Reason::FailureBudgetExhausted));
    golden("failure", sim.story.as_deref().unwrap_or_default());
}

#[test]
fn a_node_back_late_on_the_target_is_cleared_and_the_rollout_completes() {
    let policy = Policy { reboot_timeout: SignedDuration::from_mins(2), failure_budget: 2, ..two_at_a_time() };
    let mut sim = Sim::new(7, small_cluster(), one_rollout(policy)).told();
    sim.faults.insert("w2".into(), Fault::RebootLate { back_at: t(600) });
    let last = sim.run(|_, _| {});
    assert_eq!(last.rollouts[0].counts.up_to_date, 4);
    golden("recovery", sim.story.as_deref().unwrap_or_default());
}

#[test]
fn an_invalid_spec_mid_rollout_lets_nodes_in_flight_finish_and_starts_nothing() {
    let mut sim = Sim::new(7, small_cluster(), one_rollout(two_at_a_time())).told();
    // Run until a worker is in flight, then break the spec.
    for _ in 0..1000 {
        let cluster = sim.plan_and_apply();
        if cluster.rollouts[0].in_flight.iter().any(|f| f.node.starts_with('w')) {
            break;
        }
        for i in sim.pending() {
            sim.world_event(i, true);
        }
        sim.now = sim.now.checked_add(SignedDuration::from_secs(1)).unwrap();
    }
    let last_valid = sim.rollouts[0].spec.acting().cloned();
    sim.rollouts[0].spec = SpecState::Invalid {
        errors: vec![
            "spec.rollout.maintenanceWindow.schedule: \"61 * * * *\": minute field \"61\": out of range".into(),
        ],
        last_valid,
    };
    sim.tell("the spec turns invalid".into());
    let in_flight: Vec<String> = sim
        .nodes
        .iter()
        .filter(|n| n.controller.as_ref().is_ok_and(|c| c.intent.is_some()))
        .map(|n| n.name.clone())
        .collect();
    let last = sim.run(|_, _| {});
    // Whatever had an intent finished; nothing else started.
    for n in &sim.nodes {
        let has_intent = n.controller.as_ref().is_ok_and(|c| c.intent.is_some());
        assert_eq!(has_intent, in_flight.contains(&n.name), "{}", n.name);
    }
    assert_eq!(last.rollouts[0].hold.as_ref().map(|h| h.reason), Some(Reason::InvalidSpec));
    // Nothing is disrupted; nodes staged ahead keep their staged image until their turn.
    assert!(last.rollouts[0].in_flight.iter().all(|f| f.step == Step::Stage), "{:?}", last.rollouts[0].in_flight);
    assert!(sim.nodes.iter().all(|n| !n.unschedulable), "a node left cordoned");
    sim.rollouts[0].spec = SpecState::Valid(valid_spec(TARGET, 3, two_at_a_time()));
    sim.tell("the spec is fixed".into());
    let last = sim.run(|_, _| {});
    assert_eq!(last.rollouts[0].counts.up_to_date, 4);
    golden("invalid_spec", sim.story.as_deref().unwrap_or_default());
}

// ---- replacement ----

const CP_GROUP: &str = "cp";

/// A node of scaling group `group`, created from the old image.
fn group_node(name: &str, group: &str, control_plane: bool) -> NodeView {
    let member = GroupMember {
        group_id: group.into(),
        provider_id: format!("sim://{name}"),
        image: Some(OLD.into()),
        ready_since: Some(t(-3600)),
        labels: [("pool".to_string(), group.to_string()), ("kubernetes.io/hostname".to_string(), name.to_string())]
            .into(),
        taints: vec![
            TaintView { key: "dedicated".into(), value: Some(group.into()), effect: "NoSchedule".into() },
            TaintView { key: "node.kubernetes.io/unreachable".into(), value: None, effect: "NoExecute".into() },
        ],
        ..Default::default()
    };
    NodeView { control_plane, group: Some(member), ..node(name) }
}

/// A control-plane group of 3, two worker groups of 3, and 3 workers updated in place; every group's image is
/// already the target.
fn mixed_cluster() -> (Vec<NodeView>, Fleet) {
    let mut nodes: Vec<NodeView> = (0..3).map(|i| group_node(&format!("cp{i}"), CP_GROUP, true)).collect();
    for group in ["a", "b"] {
        nodes.extend((0..3).map(|i| group_node(&format!("{group}{i}"), group, false)));
    }
    nodes.extend((0..3).map(|i| node(&format!("w{i}"))));
    let groups = [(CP_GROUP, true), ("a", false), ("b", false)]
        .into_iter()
        .map(|(id, control_plane)| replacement::GroupView {
            group_id: id.into(),
            control_plane,
            image: Some(TARGET.into()),
        })
        .collect();
    (nodes, Fleet { groups, etcd: EtcdAccess::Client, ..Fleet::default() })
}

fn surge_policy(surge: u32, max: u32) -> Policy {
    Policy {
        max_unavailable: budget::MaxUnavailable::Count(max),
        max_surge: budget::MaxSurge::Count(surge),
        failure_budget: 100,
        ..Policy::default()
    }
}

/// Whether a control-plane and a worker replacement are in progress: donors with `intent=replace` or a heir,
/// heirs that still name their donor, and PendingNodes of a replacement.
fn replacing(sim: &Sim) -> (bool, bool) {
    let cp_group = |g: &str| sim.fleet.groups.iter().any(|x| x.group_id == g && x.control_plane);
    let mut kinds = Vec::new();
    for n in &sim.nodes {
        let replace = n.controller.as_ref().is_ok_and(|c| c.intent.as_ref().is_some_and(|i| i.step == Step::Replace));
        if replace || n.group.as_ref().is_some_and(|m| m.heir.is_some() || m.donor.is_some()) {
            kinds.push(n.control_plane);
        }
    }
    kinds.extend(sim.fleet.pending.iter().filter(|p| p.donor.is_some()).map(|p| cp_group(&p.group_id)));
    (kinds.iter().any(|k| *k), kinds.iter().any(|k| !*k))
}

/// Runs a seeded replacement rollout of the mixed cluster and checks, after every plan: the budget over both
/// kinds of node (joining heirs are extra capacity, not disrupted), the control-plane rule, at most `surge`
/// extra instances, never a control-plane and a worker replacement at once. (A donor deleted before its heir is
/// Ready fails in [`Sim::apply_replacement`].)
fn checked_replacement(seed: u64, surge: u32, max: u32, faults: &[(&str, Fault)]) -> (Sim, Plan) {
    let (nodes, fleet) = mixed_cluster();
    let mut sim = Sim::new(seed, nodes, one_rollout(surge_policy(surge, max)));
    sim.fleet = fleet;
    for (name, fault) in faults {
        sim.faults.insert((*name).into(), *fault);
    }
    let last = sim.run(|sim, _| {
        let joining: Vec<&str> =
            sim.fleet.pending.iter().filter(|p| !p.reached_goal).map(|p| p.node_name.as_str()).collect();
        let disrupted: Vec<&NodeView> =
            sim.disrupted().into_iter().filter(|n| !joining.contains(&n.name.as_str())).collect();
        assert!(disrupted.len() as u32 <= max, "seed {seed}: {} nodes disrupted with max {max}", disrupted.len());
        assert!(disrupted.iter().filter(|n| n.control_plane).count() <= 1, "seed {seed}: two control-plane nodes");
        assert!(sim.extra_instances <= i64::from(surge), "seed {seed}: {} extra instances", sim.extra_instances);
        let (cp, worker) = replacing(sim);
        assert!(!(cp && worker), "seed {seed}: a control-plane and a worker replacement at once");
    });
    (sim, last.rollouts.into_iter().next().unwrap())
}

#[test]
fn a_mixed_cluster_replaces_group_nodes_and_updates_the_others_in_place_within_every_bound() {
    for seed in 0..30 {
        for (surge, max) in [(2, 2), (1, 3), (3, 1)] {
            let (sim, p) = checked_replacement(seed, surge, max, &[]);
            // 9 group nodes replaced by 9 heirs, 3 updated in place: 12 nodes, all on the target.
            assert_eq!((p.counts.total, p.counts.up_to_date), (12, 12), "seed {seed}: {:?}", p.counts);
            assert!(sim.fleet.pending.is_empty(), "seed {seed}: {:?}", sim.fleet.pending);
            assert_eq!(sim.extra_instances, 0, "seed {seed}");
            for n in &sim.nodes {
                assert!(!n.unschedulable, "seed {seed}: {} left cordoned", n.name);
                let Some(member) = &n.group else { continue };
                assert!(member.donor.is_none(), "seed {seed}: {} still names its donor", n.name);
                // The donor's own labels and an administrator's taints came along; Kubernetes' did not.
                assert_eq!(member.labels.get("pool"), Some(&member.group_id), "seed {seed}: {}", n.name);
                assert!(!member.labels.contains_key("kubernetes.io/hostname"), "seed {seed}: {}", n.name);
                assert_eq!(member.taints.len(), 1, "seed {seed}: {}: {:?}", n.name, member.taints);
                assert_eq!(member.taints[0].key, "dedicated");
            }
            assert!(sim.nodes.iter().all(|n| n.name.contains("-r") || n.group.is_none()), "seed {seed}: a donor left");
        }
    }
}

#[test]
fn a_heir_that_never_joins_fails_its_donor_spends_the_budget_and_leaves_no_instance() {
    for seed in 0..20 {
        let (nodes, fleet) = mixed_cluster();
        let policy = Policy { failure_budget: 1, ..surge_policy(2, 2) };
        let mut sim = Sim::new(seed, nodes, one_rollout(policy));
        sim.fleet = fleet;
        // The second control-plane node's new instance never joins: the workers wait for the control plane, so
        // the rollout stops at the failure budget with nodes still outdated.
        sim.faults.insert("cp1".into(), Fault::NeverJoins);
        let last = sim.run(|sim, _| assert!(sim.extra_instances <= 2, "seed {seed}"));
        let p = &last.rollouts[0];
        assert_eq!(p.hold.as_ref().map(|h| h.reason), Some(Reason::FailureBudgetExhausted), "seed {seed}");
        assert_eq!(p.failed.len(), 1, "seed {seed}: {:?}", p.failed);
        assert!(p.failed[0].message.starts_with("HeirNotReady"), "{}", p.failed[0].message);
        let donor = sim.nodes.iter().find(|n| n.name == "cp1").expect("the donor stays");
        assert!(!donor.unschedulable, "seed {seed}: the donor was cordoned");
        assert!(p.counts.outdated > 0, "seed {seed}: {:?}", p.counts);
        // Its instance was deleted; no replacement holds one when the rollout stopped.
        assert_eq!(sim.extra_instances, 0, "seed {seed}");
        assert!(sim.fleet.pending.is_empty(), "seed {seed}");
    }
}

#[test]
fn a_donor_whose_drain_times_out_is_blocked_uncordoned_and_its_heir_stays() {
    let (nodes, fleet) = mixed_cluster();
    let policy = Policy { drain_timeout: SignedDuration::from_mins(5), ..surge_policy(1, 2) };
    let mut sim = Sim::new(3, nodes, one_rollout(policy)).told();
    sim.fleet = fleet;
    sim.faults.insert("b2".into(), Fault::DrainStuck);
    let last = sim.run(|sim, _| assert!(sim.extra_instances <= 1));
    let p = &last.rollouts[0];
    assert_eq!(p.blocked.len(), 1, "{:?}", p.blocked);
    assert!(p.blocked[0].message.starts_with("DrainTimedOut"), "{}", p.blocked[0].message);
    let b2 = sim.nodes.iter().find(|n| n.name == "b2").expect("the donor stays");
    assert!(!b2.unschedulable, "the blocked donor is uncordoned");
    // Its heir keeps the one surge slot.
    assert_eq!(sim.extra_instances, 1);
    golden("replacement_drain_timeout", sim.story.as_deref().unwrap_or_default());
}

#[test]
fn a_replacement_rollout_tells_its_story() {
    let nodes =
        vec![group_node("cp0", CP_GROUP, true), group_node("a0", "a", false), group_node("a1", "a", false), node("w0")];
    let (_, fleet) = mixed_cluster();
    let mut sim = Sim::new(7, nodes, one_rollout(surge_policy(2, 2))).told();
    sim.fleet = fleet;
    sim.run(|_, _| {});
    golden("replacement", sim.story.as_deref().unwrap_or_default());
}

// ---- Kubernetes upgrades ----

const COMPONENTS_HASH: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn kubernetes_rollout(policy: Policy) -> Vec<Rollout> {
    let target = kubernetes::KubernetesTarget {
        version: "v1.34.1".parse().unwrap(),
        components: "k8s-components".into(),
        hash: COMPONENTS_HASH.into(),
        api_server: "v1.33.5".parse().unwrap(),
    };
    vec![Rollout { kubernetes: Some(kubernetes::KubernetesSpec::Upgrade(target)), ..one_rollout(policy).remove(0) }]
}

fn on_old_kubernetes(mut n: NodeView) -> NodeView {
    n.kubelet_version = Some("v1.33.5".into());
    n
}

/// A whole Kubernetes upgrade (and the image after it) through the one pipeline, in any order of events, with a
/// worker NotReady for a while: after every plan that starts a node, no more nodes are disrupted than
/// maxUnavailable allows; never two control-plane nodes at once; no worker in a Kubernetes step while a
/// control-plane node does not run the version; every node ends on the version and the image, uncordoned.
#[test]
fn whole_kubernetes_upgrades_keep_every_invariant_in_any_order() {
    for seed in 0..20 {
        for max in [1, 3] {
            let policy = Policy {
                max_unavailable: budget::MaxUnavailable::Count(max),
                failure_budget: 100,
                ..Policy::default()
            };
            let nodes = cluster_of_fifteen().into_iter().map(on_old_kubernetes).collect();
            let mut sim = Sim::new(seed, nodes, kubernetes_rollout(policy));
            sim.faults.insert("w05".into(), Fault::RebootLate { back_at: t(40) });
            sim.nodes[8].ready = false;
            let last = sim.run(|sim, cluster| {
                let leftover = cluster.rollouts[0].actions.iter().find(|a| a.reason == Reason::LeftoverCordon);
                assert!(
                    leftover.is_none(),
                    "seed {seed}: a clean upgrade left a cordon to lift: {leftover:?} {:?}",
                    sim.nodes.iter().find(|n| Some(&n.name) == leftover.map(|a| &a.node))
                );
                let starts = cluster.rollouts[0].actions.iter().any(NodeAction::starts_node);
                let disrupted = sim.disrupted();
                assert!(
                    !starts || disrupted.len() as u32 <= max,
                    "seed {seed}: a start with {} nodes disrupted and max {max}",
                    disrupted.len()
                );
                assert!(
                    disrupted.iter().filter(|n| n.control_plane).count() <= 1,
                    "seed {seed}: two control-plane nodes"
                );
                let control_plane_done = sim
                    .nodes
                    .iter()
                    .filter(|n| n.control_plane)
                    .all(|n| n.kubelet_version.as_deref() == Some("v1.34.1"));
                let kubernetes_step = |n: &NodeView| {
                    n.controller
                        .as_ref()
                        .is_ok_and(|c| c.intent.as_ref().is_some_and(|i| i.target == "v1.34.1" && i.step.disrupts()))
                };
                assert!(
                    control_plane_done || !sim.nodes.iter().any(|n| !n.control_plane && kubernetes_step(n)),
                    "seed {seed}: a worker upgraded before the control plane"
                );
            });
            let p = last.rollouts.into_iter().next().unwrap();
            assert_eq!(p.counts.up_to_date, 15, "seed {seed}: {:?} {:?} {:?}", p.counts, p.in_flight, p.hold);
            for n in &sim.nodes {
                assert_eq!(n.kubelet_version.as_deref(), Some("v1.34.1"), "seed {seed}: {}", n.name);
                assert!(!n.unschedulable, "seed {seed}: {} left cordoned", n.name);
            }
        }
    }
}

// ---- a NodeOp beside the rollouts ----

/// A NodeOp (cordon, drain, a Job; `concurrency: 2`) on every node beside a rollout that replaces the group nodes
/// and updates the others in place, in any order of events: after every decision of either that starts a node, no
/// more nodes are disrupted than the rollout's maxUnavailable; never two control-plane nodes at once across the
/// flows; every node ends updated, operated on once and uncordoned.
#[test]
fn a_nodeop_beside_replacements_and_in_place_updates_keeps_every_invariant() {
    use shared::crd::nodeop::{NodeOpDrainOptions, NodeOpSpec};
    for seed in 0..20 {
        let max = 3;
        let (nodes, fleet) = mixed_cluster();
        let total = nodes.len();
        let mut sim = Sim::new(seed, nodes, one_rollout(surge_policy(1, max)));
        sim.fleet = fleet;
        let spec = NodeOpSpec {
            command: vec!["true".into()],
            cordon: Some(true),
            drain_options: Some(NodeOpDrainOptions { enabled: Some(true), ..Default::default() }),
            concurrency: 2,
            ..Default::default()
        };
        sim.nodeop =
            Some(SimOp { key: "default/op@u1".into(), spec, recorded: Default::default(), jobs: HashMap::new() });
        let last = sim.run(|sim, cluster| {
            let starts = cluster
                .rollouts
                .iter()
                .chain([&cluster.unowned])
                .any(|p| p.actions.iter().any(|a| a.starts_node() || a.reason == Reason::OperationStarted));
            let joining: Vec<&str> =
                sim.fleet.pending.iter().filter(|p| !p.reached_goal).map(|p| p.node_name.as_str()).collect();
            let disrupted: Vec<&NodeView> =
                sim.disrupted().into_iter().filter(|n| !joining.contains(&n.name.as_str())).collect();
            assert!(
                !starts || disrupted.len() as u32 <= max,
                "seed {seed}: a start with {} nodes disrupted and max {max}: {:?}",
                disrupted.len(),
                disrupted.iter().map(|n| &n.name).collect::<Vec<_>>()
            );
            let control_planes: Vec<&String> = disrupted.iter().filter(|n| n.control_plane).map(|n| &n.name).collect();
            assert!(control_planes.len() <= 1, "seed {seed}: control-plane nodes {control_planes:?} at once");
        });
        let p = last.rollouts.into_iter().next().unwrap();
        assert_eq!(
            p.counts.up_to_date as usize,
            p.counts.total as usize,
            "seed {seed}: {:?} {:?} {:?} {:?}",
            p.counts,
            p.hold,
            p.held,
            sim.nodes.iter().map(|n| (&n.name, &n.operation, n.unschedulable)).collect::<Vec<_>>()
        );
        assert!(sim.nodes.iter().all(|n| !n.unschedulable && n.operation.is_none()), "seed {seed}: left cordoned");
        // Every node there is at the end was operated on (a donor may have been operated on and then replaced).
        let op = sim.nodeop.as_ref().unwrap();
        let completed =
            |name: &str| op.recorded.get(name).is_some_and(|r| r.phase == shared::crd::nodeop::NodeOpPhase::Completed);
        let missed: Vec<&String> = sim.nodes.iter().map(|n| &n.name).filter(|n| !completed(n)).collect();
        assert!(missed.is_empty(), "seed {seed}: not operated on: {missed:?} (of {total} at the start)");
    }
}

#[path = "simulation_changes.rs"]
mod changes;
