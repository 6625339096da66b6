//! The incremental [`Planner`] against the full [`plan_with`]: random event sequences (agents' reports, drains
//! finishing or failing, nodes added, removed, made NotReady or cordoned, annotations broken, specs changed, time
//! passing, the controller's writes applied or failing) from seeded ChaCha generators, with identical plans and
//! statuses asserted after every event. Most clusters have nodes in scaling groups, replaced rather than updated in
//! place: the simulated cloud registers, readies and joins their heirs, fails joins, deletes instances, changes a
//! group's image, and PendingNodes no replacement created come and go. The planner is given exactly the nodes that
//! changed, as the reconciler gives them, and the fleet as it is.

use super::replacement::{EtcdAccess, Goal, GroupView, PendingView};
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
    let rollout = |name: &str, spec: Arc<ValidSpec>| Rollout::new(name, SpecState::Valid(spec), None);
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
        vec![rollout("nv", valid_spec(TARGET, 7, Policy { windows: vec![window], ..policy(2) }))],
        vec![rollout("nv", valid_spec("v3", 8, policy(2)))],
        vec![Rollout::new(
            "nv",
            SpecState::Invalid { errors: vec!["spec.image: bad".into()], last_valid: Some(two.clone()) },
            None,
        )],
        vec![Rollout::new("nv", SpecState::Invalid { errors: vec!["spec.image: bad".into()], last_valid: None }, None)],
        vec![
            rollout("nv", two.clone()),
            rollout("pool-one", valid_spec("v3", 1, Policy { selector: pool_one.clone(), ..policy(1) })),
        ],
        vec![rollout("pool-one", valid_spec("v3", 1, Policy { selector: pool_one, ..policy(1) }))],
        vec![],
        vec![rollout(
            "nv",
            valid_spec(
                TARGET,
                9,
                Policy {
                    max_surge: budget::MaxSurge::Count(2),
                    max_staging: Some(MaxUnavailable::Count(1)),
                    ..policy(3)
                },
            ),
        )],
        vec![rollout(
            "nv",
            valid_spec(TARGET, 12, Policy { max_staging: Some(MaxUnavailable::Percent(50)), ..policy(1) }),
        )],
        vec![rollout(
            "nv",
            valid_spec(
                TARGET,
                10,
                Policy {
                    max_surge: budget::MaxSurge::Percent(50),
                    soak_time: SignedDuration::from_secs(60),
                    ..policy(2)
                },
            ),
        )],
        vec![rollout("nv", valid_spec(TARGET, 11, Policy { max_surge: budget::MaxSurge::Count(0), ..policy(2) }))],
        vec![rollout("nv", valid_spec(TARGET, 13, Policy { max_unavailable_per_zone: Some(1), ..policy(3) }))],
        vec![rollout("nv", valid_spec(TARGET, 14, Policy { prefer_updated_nodes: false, ..policy(2) }))],
        // Kubernetes upgrades: the API server still to be upgraded (the first control-plane node applies), already
        // upgraded, with a soak and staging bounds, refused, and beside a rollout of the image only.
        vec![upgrading(rollout("nv", two.clone()), OLD_KUBERNETES)],
        vec![upgrading(rollout("nv", two.clone()), KUBERNETES)],
        vec![upgrading(
            rollout(
                "nv",
                valid_spec(
                    TARGET,
                    15,
                    Policy {
                        soak_time: SignedDuration::from_secs(90),
                        max_staging: Some(MaxUnavailable::Count(1)),
                        ..policy(3)
                    },
                ),
            ),
            OLD_KUBERNETES,
        )],
        vec![Rollout {
            kubernetes: Some(kubernetes::KubernetesSpec::Refused("the ConfigMap k8s-components is missing".into())),
            ..rollout("nv", two.clone())
        }],
        vec![
            upgrading(rollout("nv", two.clone()), OLD_KUBERNETES),
            rollout("pool-one", valid_spec("v3", 1, Policy { selector: pool_one_again(), ..policy(1) })),
        ],
    ]
}

/// The Kubernetes version the upgrades of [`configurations`] go to, and the one before.
const KUBERNETES: &str = "v1.34.1";
const OLD_KUBERNETES: &str = "v1.33.0";
const COMPONENTS_HASH: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// `rollout` upgrading Kubernetes to [`KUBERNETES`], the API server reporting `api_server`.
fn upgrading(rollout: Rollout, api_server: &str) -> Rollout {
    let target = kubernetes::KubernetesTarget {
        version: KUBERNETES.parse().expect("a version"),
        components: "k8s-components-sha256-11".into(),
        hash: COMPONENTS_HASH.into(),
        api_server: api_server.parse().expect("a version"),
    };
    Rollout { kubernetes: Some(kubernetes::KubernetesSpec::Upgrade(target)), ..rollout }
}

fn pool_one_again() -> NodeSelector {
    NodeSelector::from_label_selector(&LabelSelector {
        match_labels: Some([("pool".to_owned(), "one".to_owned())].into()),
        ..Default::default()
    })
    .expect("a valid selector")
}

/// What the incremental planner was last given of each node: it is given only the nodes that changed, and told of
/// those gone, as the reconciler does.
#[derive(Default)]
pub(super) struct Fed(BTreeMap<String, String>);

impl Fed {
    pub(super) fn give<'a>(&mut self, planner: &mut Planner, nodes: impl IntoIterator<Item = &'a NodeView>) {
        let mut here = BTreeSet::new();
        for n in nodes {
            here.insert(n.name.clone());
            let seen = format!("{n:?}");
            if self.0.get(&n.name) != Some(&seen) {
                planner.upsert(n.clone());
                self.0.insert(n.name.clone(), seen);
            }
        }
        let gone: Vec<String> = self.0.keys().filter(|name| !here.contains(*name)).cloned().collect();
        for name in gone {
            planner.remove(&name);
            self.0.remove(&name);
        }
    }
}

/// A simulated cluster fed to both planners.
struct Run {
    rng: ChaCha8Rng,
    /// The sequence keeps the configuration it starts with (one of three, a Kubernetes upgrade, so that whole
    /// upgrades run to their end), instead of switching now and then.
    sticky: bool,
    now: Timestamp,
    nodes: BTreeMap<String, NodeView>,
    /// Nodes labelled `pool=one`.
    pool_one: BTreeSet<String>,
    rollouts: Vec<Rollout>,
    own_node: Option<String>,
    /// The scaling groups (none in a cluster updated in place only) and PendingNodes.
    fleet: Fleet,
    planner: Planner,
    /// What the planner was last given of each node.
    fed: Fed,
    tokens: u64,
    boots: u64,
    added: u64,
    last: ClusterPlan,
    /// The actions applied, by kind.
    applied: BTreeMap<&'static str, u64>,
}

impl Run {
    fn new(seed: u64) -> Run {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let size = 2 + rng.next_u64() % 10;
        let mut nodes = BTreeMap::new();
        let mut pool_one = BTreeSet::new();
        let grouped = rng.next_u64() % 3 != 0;
        for i in 0..size {
            let name = format!("n{i:02}");
            let mut n = node(&name);
            n.control_plane = i < rng.next_u64() % 3;
            if rng.next_u64() % 3 == 0 {
                pool_one.insert(name.clone());
            }
            // Zones (nodes start zone by zone): some nodes have none.
            n.zone = match rng.next_u64() % 4 {
                0 => None,
                k => Some(format!("zone-{k}")),
            };
            // Deferred for a budget: ordered after the others of its zone.
            n.deferred = (rng.next_u64() % 5 == 0).then(|| "a budget".to_owned());
            if grouped && rng.next_u64() % 4 != 0 {
                n.group = Some(member(if n.control_plane { "cp" } else { "g" }, &name, Some(t(-600))));
            }
            nodes.insert(name, n);
        }
        let group = |id: &str, control_plane: bool| GroupView {
            group_id: id.into(),
            control_plane,
            image: Some(TARGET.into()),
        };
        let groups = if grouped { vec![group("g", false), group("cp", true)] } else { Vec::new() };
        let own_node = (rng.next_u64() % 2 == 0).then(|| format!("n{:02}", rng.next_u64() % size));
        let mut run = Run {
            rng,
            now: t(0),
            nodes,
            pool_one,
            rollouts: configurations().remove(0),
            sticky: false,
            own_node,
            fleet: Fleet { groups, etcd: EtcdAccess::Client, ..Fleet::default() },
            planner: Planner::new(),
            fed: Fed::default(),
            tokens: 0,
            boots: 0,
            added: 0,
            last: ClusterPlan::default(),
            applied: BTreeMap::new(),
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

    /// Three times in four, a node of those for which `which` holds, if any.
    fn pick_where(&mut self, which: impl Fn(&NodeView) -> bool) -> Option<String> {
        if self.random(4) == 0 {
            return None;
        }
        let names: Vec<&String> = self.nodes.iter().filter(|(_, n)| which(n)).map(|(name, _)| name).collect();
        let i = self.rng.next_u64() % (names.len() as u64).max(1);
        names.get(i as usize).map(|name| (*name).clone())
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
        match self.random(27) {
            0..=5 => self.apply(),
            6..=8 => {
                // Mostly a node with something to do, or the sequences hardly finish an update (a node staged
                // ahead waits for the controller, not for its agent).
                let busy = |n: &NodeView| {
                    let intent = n.controller.as_ref().ok().and_then(|c| c.intent.as_ref());
                    let answered = |i: &shared::protocol::Intent| {
                        n.agent.as_ref().is_ok_and(|a| a.token.as_ref() == Some(&i.token))
                    };
                    intent.is_some_and(|i| !(i.step == Step::Stage && answered(i)))
                };
                let name = self.pick_where(busy).unwrap_or(name);
                self.agent(&name)
            }
            9 | 10 => {
                let name = self.pick_where(|n| n.drain != DrainProgress::NotRunning).unwrap_or(name);
                self.drain(&name)
            }
            11 => {
                let now = self.now;
                let n = self.nodes.get_mut(&name).expect("picked");
                n.ready = !n.ready;
                if let Some(m) = &mut n.group {
                    m.ready_since = n.ready.then_some(now);
                }
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
            14 if self.sticky => "the configuration is kept".into(),
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
            20 | 21 => self.cloud(),
            22 => {
                let images = [Some(TARGET), Some(OLD), None];
                let image = images[self.random(3) as usize].map(str::to_owned);
                let Some(i) = (!self.fleet.groups.is_empty()).then(|| self.random(2) as usize) else {
                    return "no scaling group".into();
                };
                self.fleet.groups[i].image = image.clone();
                format!("the image of group {} is {image:?}", self.fleet.groups[i].group_id)
            }
            23 => {
                if self.random(2) == 0 {
                    let running = self.fleet.autoscaler_running.is_none().then(|| "not confirmed down".to_owned());
                    self.fleet.autoscaler_running = running;
                    format!("autoscaler running: {:?}", self.fleet.autoscaler_running)
                } else if self.fleet.unresolved.remove(&name) {
                    format!("{name}: its group is told")
                } else {
                    self.fleet.unresolved.insert(name.clone());
                    format!("{name}: its group is not told yet")
                }
            }
            24 if self.random(2) == 0 => {
                // A replacement's PendingNode seen only after the Nodes it names (the watches do not keep order
                // across kinds): its donor and heir change without a change of their own.
                let Some(heir) = self.pick() else { return "no node".into() };
                let reached_goal = self.random(2) == 0;
                self.fleet.pending.push(PendingView {
                    name: replacement::join_name(&name),
                    node_name: heir.clone(),
                    group_id: "g".into(),
                    goal: Goal::Join,
                    donor: Some(name.clone()),
                    reached_goal,
                    join_failed: None,
                    created: Some(self.now),
                });
                format!("a PendingNode seen late: {heir} joins for {name}")
            }
            24 => {
                let foreign = self.fleet.pending.iter().position(|p| p.donor.is_none());
                match foreign {
                    Some(j) => {
                        self.fleet.pending.remove(j);
                        "a PendingNode no replacement created is gone".into()
                    }
                    None => {
                        self.added += 1;
                        let name = format!("scale-up-{}", self.added);
                        self.fleet.pending.push(PendingView {
                            name: name.clone(),
                            node_name: name,
                            group_id: "g".into(),
                            goal: Goal::Join,
                            donor: None,
                            reached_goal: false,
                            join_failed: None,
                            created: Some(self.now),
                        });
                        "a PendingNode no replacement created joins".into()
                    }
                }
            }
            25 => {
                // Someone removes a PendingNode (or its controller is done with a failed join).
                let i = self.random(self.fleet.pending.len() as u64) as usize;
                if i < self.fleet.pending.len() {
                    let gone = self.fleet.pending.remove(i);
                    format!("PendingNode {} deleted", gone.name)
                } else {
                    "no PendingNode to delete".into()
                }
            }
            26 => {
                // The API server reports another version (the control plane upgraded, or a stale answer).
                let version = [KUBERNETES, OLD_KUBERNETES][self.random(2) as usize];
                for rollout in &mut self.rollouts {
                    if let Some(kubernetes::KubernetesSpec::Upgrade(target)) = &mut rollout.kubernetes {
                        target.api_server = version.parse().expect("a version");
                    }
                }
                format!("the API server reports {version}")
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
        if !self.fleet.groups.is_empty() && self.random(2) == 0 {
            let group = if n.control_plane { "cp" } else { "g" };
            n.group = Some(member(group, &name, n.ready.then_some(self.now)));
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
            if !self.nodes.contains_key(&action.node) {
                continue;
            }
            let done = self.replacement(action)
                || self.nodes.get_mut(&action.node).is_some_and(|n| {
                    crate::forecast::transition(n, action, Token::from_u64(self.tokens + 1), self.now)
                });
            if done {
                self.tokens += 1;
                applied += 1;
                *self.applied.entry(action.kind.name()).or_default() += 1;
                if action.reason == Reason::StagingSlotYielded {
                    *self.applied.entry("StagingSlotYielded").or_default() += 1;
                }
            }
        }
        // The taints of outdated nodes the plan changes, some writes failing as well.
        for change in self.last.taints.clone() {
            if self.random(8) == 0 {
                continue;
            }
            if let Some(n) = self.nodes.get_mut(&change.node) {
                n.outdated_taint = change.on;
                *self.applied.entry(if change.on { "TaintOn" } else { "TaintOff" }).or_default() += 1;
            }
        }
        for n in self.nodes.values_mut() {
            // The reconciler stops the drains of nodes that left the drain step (a donor's is its replace step).
            let donor_draining = n.group.as_ref().is_some_and(|m| m.heir.is_some());
            let draining = n.controller.as_ref().is_ok_and(|c| {
                c.intent.as_ref().is_some_and(|i| i.step == Step::Drain || (i.step == Step::Replace && donor_draining))
            });
            if !draining {
                n.drain = DrainProgress::NotRunning;
            }
        }
        format!("{applied} of {} actions applied", actions.len())
    }

    /// The writes of a replacement's action that are not the node's controller annotations, as the executor
    /// applies them; whether the action is done with.
    fn replacement(&mut self, action: &NodeAction) -> bool {
        let now = self.now;
        match &action.kind {
            ActionKind::CreateInstance { group_id, pending, .. } => {
                if !self.fleet.pending.iter().any(|p| &p.name == pending) {
                    self.added += 1;
                    self.fleet.pending.push(PendingView {
                        name: pending.clone(),
                        node_name: format!("{}-r{}", action.node, self.added),
                        group_id: group_id.clone(),
                        goal: Goal::Join,
                        donor: Some(action.node.clone()),
                        reached_goal: false,
                        join_failed: None,
                        created: Some(now),
                    });
                }
            }
            ActionKind::Shield { donor } => {
                if let Some(m) = self.nodes.get_mut(&action.node).and_then(|n| n.group.as_mut()) {
                    m.taints.push(super::replacement::shield(donor));
                }
            }
            ActionKind::Inherit { donor, labels, taints } => {
                if let Some(m) = self.nodes.get_mut(&action.node).and_then(|n| n.group.as_mut()) {
                    m.taints.retain(|t| t.key != super::replacement::SHIELD_TAINT);
                    m.donor = Some(donor.clone());
                    m.labels.extend(labels.clone());
                    m.taints.extend(taints.iter().filter(|t| !m.taints.contains(t)).cloned().collect::<Vec<_>>());
                }
            }
            ActionKind::DrainDonor { heir, .. } => {
                if let Some(m) = self.nodes.get_mut(&action.node).and_then(|n| n.group.as_mut()) {
                    m.heir = Some(heir.clone());
                }
                return false;
            }
            ActionKind::Retire { join_pending, .. } => {
                self.fleet.pending.retain(|p| Some(&p.name) != join_pending.as_ref());
                self.nodes.remove(&action.node);
            }
            ActionKind::AbandonReplacement { join_pending, .. } => {
                if let Some(p) = self.fleet.pending.iter_mut().find(|p| Some(&p.name) == join_pending.as_ref()) {
                    p.goal = Goal::Leave;
                }
                return false;
            }
            ActionKind::ReleaseInstance { pending, donor, .. } => {
                if !self.fleet.pending.iter().any(|p| &p.name == pending) {
                    self.fleet.pending.push(PendingView {
                        name: pending.clone(),
                        node_name: donor.name.clone(),
                        group_id: donor.group_id.clone(),
                        goal: Goal::Leave,
                        donor: Some(donor.name.clone()),
                        reached_goal: false,
                        join_failed: None,
                        created: Some(now),
                    });
                }
                if let Some(m) = self.nodes.get_mut(&action.node).and_then(|n| n.group.as_mut()) {
                    m.donor = None;
                }
            }
            _ => return false,
        }
        true
    }

    /// The simulated cloud and PendingNode controller move one PendingNode on.
    fn cloud(&mut self) -> String {
        let j = self.random(self.fleet.pending.len() as u64) as usize;
        let Some(p) = self.fleet.pending.get(j).cloned() else { return "no PendingNode".into() };
        let now = self.now;
        let ready = self.nodes.get(&p.node_name).map(|n| n.ready);
        match (p.goal, ready) {
            (Goal::Leave, _) => {
                self.fleet.pending.remove(j);
                if p.donor.is_none() || p.join_failed.is_some() {
                    self.nodes.remove(&p.node_name);
                }
                format!("the instance of {} is terminated; PendingNode {} deleted", p.node_name, p.name)
            }
            (Goal::Join, _) if p.reached_goal => format!("{} joined already", p.node_name),
            (Goal::Join, _) if self.random(5) == 0 => {
                let pending = &mut self.fleet.pending[j];
                pending.goal = Goal::Leave;
                pending.join_failed = Some("DeadlineExceeded: not Ready within the join timeout".into());
                format!("{} did not join by its deadline", p.node_name)
            }
            (Goal::Join, None) => {
                let control_plane = self.fleet.groups.iter().any(|g| g.group_id == p.group_id && g.control_plane);
                let image = self.fleet.groups.iter().find(|g| g.group_id == p.group_id).and_then(|g| g.image.clone());
                let mut heir = node(&p.node_name);
                heir.control_plane = control_plane;
                heir.ready = false;
                heir.agent = Ok(AgentReport::default());
                heir.group = Some(GroupMember { image, ..member(&p.group_id, &p.node_name, None) });
                heir.opted_in = self.random(4) != 0;
                self.nodes.insert(p.node_name.clone(), heir);
                self.select();
                format!("{} registered (NotReady)", p.node_name)
            }
            (Goal::Join, Some(false)) => {
                let n = self.nodes.get_mut(&p.node_name).expect("registered");
                n.ready = true;
                if let Some(m) = &mut n.group {
                    m.ready_since = Some(now);
                }
                format!("{} is Ready", p.node_name)
            }
            (Goal::Join, Some(true)) => {
                self.fleet.pending[j].reached_goal = true;
                format!("PendingNode {} reached its goal", p.name)
            }
        }
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
        if intent.step == Step::KubeadmUpgrade && !fails {
            // The kubelet restarts on the new version with the components of the ConfigMap (now and then with
            // other components: a hash that does not match keeps it from being verified).
            report.components_hash = shared::protocol::ComponentsHash::parse("k", COMPONENTS_HASH).ok();
            if boots.is_multiple_of(7) {
                report.components_hash = None;
            }
            n.kubelet_version = Some(intent.target.clone());
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
        self.planner.set_context(self.rollouts.clone(), self.fleet.clone(), self.own_node.clone());
        self.fed.give(&mut self.planner, self.nodes.values());
        assert!(self.planner.incremental(), "no rollback: the planner must index");
        let got = self.planner.plan(self.now);
        let nodes: Vec<NodeView> = self.nodes.values().cloned().collect();
        let want = plan_with(&nodes, &self.rollouts, &self.fleet, self.own_node.as_deref(), self.now);
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

/// A member of scaling group `group`, created from the old image.
fn member(group: &str, name: &str, ready_since: Option<Timestamp>) -> GroupMember {
    GroupMember {
        group_id: group.into(),
        provider_id: format!("sim://{name}"),
        image: Some(OLD.into()),
        ready_since,
        labels: [("pool".to_owned(), group.to_owned())].into(),
        taints: vec![replacement::TaintView {
            key: "example.com/team".into(),
            value: None,
            effect: "NoSchedule".into(),
        }],
        ..Default::default()
    }
}

/// Runs the seeds `seeds` of 300 events each; returns the actions applied, by kind.
fn sequences(seeds: std::ops::Range<u64>) -> BTreeMap<&'static str, u64> {
    let mut applied = BTreeMap::new();
    for seed in seeds {
        let mut run = Run::new(seed);
        if seed.is_multiple_of(3) {
            // One sequence in three upgrades Kubernetes from start to end, its API server upgraded now and then.
            let upgrades: Vec<Vec<Rollout>> =
                configurations().into_iter().filter(|c| c.iter().any(|r| r.kubernetes.is_some())).collect();
            let i = (seed / 3) as usize % upgrades.len();
            run.rollouts = upgrades.into_iter().nth(i).unwrap_or_default();
            run.sticky = true;
            run.select();
        }
        run.check(seed, 0, "start");
        for step in 1..300 {
            let event = run.event();
            run.check(seed, step, &event);
        }
        for (kind, n) in run.applied {
            *applied.entry(kind).or_default() += n;
        }
    }
    applied
}

#[test]
fn the_incremental_planner_decides_as_the_full_plan_after_every_event() {
    // The 300 seeds in three threads: one thread took 32 s of a debug build, the longest of the crate's tests.
    let applied = std::thread::scope(|s| {
        let parts: Vec<_> = [0..100, 100..200, 200..300].map(|seeds| s.spawn(move || sequences(seeds))).into();
        let mut applied: BTreeMap<&str, u64> = BTreeMap::new();
        for part in parts {
            let part = part.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            for (kind, n) in part {
                *applied.entry(kind).or_default() += n;
            }
        }
        applied
    });
    eprintln!("actions applied: {applied:?}");
    // The sequences do move nodes: the comparison is not only of idle clusters. Every step of an update in place
    // and of a replacement is applied, the wind-down's too.
    let steps = ["Stage", "Drain", "Reboot", "Done", "Replace", "CreateInstance", "Shield", "Inherit", "DrainDonor"];
    // The taint of outdated nodes is put on and taken off (`taint`), by the full plan and the incremental one alike.
    // The Kubernetes upgrade's steps too, fetches ahead and kubeadm with both roles.
    let kubernetes = ["Fetch", "KubeadmUpgrade"];
    for kind in steps.into_iter().chain(kubernetes).chain(["AbandonReplacement", "TaintOn", "TaintOff"]) {
        assert!(applied.get(kind).is_some_and(|n| *n >= 5), "{kind}: {applied:?}");
    }
    // A replacement's last steps come after a dozen events on two nodes and the cloud: few random sequences reach
    // them (their every order is in `simulation`'s replacement rollouts), but some do.
    // So does a worker staged ahead yielding its slot to a control-plane node added meanwhile (`pipeline::stage_ahead`).
    for kind in ["Retire", "ReleaseInstance", "StagingSlotYielded"] {
        assert!(applied.get(kind).is_some_and(|n| *n >= 1), "{kind}: {applied:?}");
    }
}

/// More seeds, run on demand: `INCREMENTAL_SEEDS=5000 cargo test -p controller --lib -- --ignored many_seeds`.
#[test]
#[ignore = "long; run on demand"]
fn the_incremental_planner_decides_as_the_full_plan_over_many_seeds() {
    let seeds = std::env::var("INCREMENTAL_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3000);
    let applied = sequences(300..300 + seeds);
    eprintln!("{seeds} seeds of 300 events: actions applied {applied:?}");
}

#[test]
fn one_node_changing_assesses_that_node_and_those_in_flight_not_the_cluster() {
    let rollouts = vec![Rollout::new(
        "nv",
        SpecState::Valid(valid_spec(
            TARGET,
            1,
            Policy { max_unavailable: MaxUnavailable::Count(3), ..Policy::default() },
        )),
        None,
    )];
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
    let rollouts = vec![Rollout::new("nv", SpecState::Valid(valid_spec("v3", 2, Policy::default())), None)];
    planner.set_context(rollouts, Fleet::default(), None);
    planner.plan(t(3));
    assert_eq!(planner.assessed(), 1000);
}

/// Applies the plan's actions to the planner's nodes as the executor does (a new instance is a joining
/// PendingNode of `fleet`), and gives the planner the nodes written.
fn apply_to(planner: &mut Planner, fleet: &mut Fleet, plan: &ClusterPlan, now: Timestamp) {
    for action in plan.rollouts.iter().flat_map(|p| &p.actions) {
        if let ActionKind::CreateInstance { group_id, pending, .. } = &action.kind {
            fleet.pending.push(PendingView {
                name: pending.clone(),
                node_name: format!("{}-new", action.node),
                group_id: group_id.clone(),
                goal: Goal::Join,
                donor: Some(action.node.clone()),
                reached_goal: false,
                join_failed: None,
                created: Some(now),
            });
            continue;
        }
        let mut n = planner.node(&action.node).cloned().expect("a planned node");
        assert!(crate::forecast::transition(&mut n, action, Token::from_u64(1), now));
        planner.upsert(n);
    }
}

#[test]
fn one_node_changing_in_a_replacement_assesses_that_node_and_the_replacements_not_the_cluster() {
    let policy = Policy {
        max_unavailable: MaxUnavailable::Count(10),
        max_surge: budget::MaxSurge::Count(10),
        ..Policy::default()
    };
    let rollouts = vec![Rollout::new("nv", SpecState::Valid(valid_spec(TARGET, 1, policy)), None)];
    let group = GroupView { group_id: "g".into(), control_plane: false, image: Some(TARGET.into()) };
    let mut fleet = Fleet { groups: vec![group], etcd: EtcdAccess::Client, ..Fleet::default() };
    let mut planner = Planner::new();
    planner.set_context(rollouts.clone(), fleet.clone(), None);
    for i in 0..1000 {
        let name = format!("n{i:04}");
        planner.upsert(NodeView { group: Some(member("g", &name, Some(t(-600)))), ..node(&name) });
    }
    let check = |planner: &mut Planner, fleet: &Fleet, now: Timestamp| {
        let got = planner.plan(now);
        let nodes: Vec<NodeView> = planner.nodes().cloned().collect();
        let want = plan_with(&nodes, &rollouts, fleet, None, now);
        assert_eq!(format!("{got:#?}"), format!("{want:#?}"));
        got
    };
    assert!(planner.incremental());
    let first = check(&mut planner, &fleet, t(0));
    assert_eq!(planner.assessed(), 1000);
    assert!(first.rollouts[0].actions.iter().all(|a| a.kind == ActionKind::Replace { target: TARGET.into() }));
    assert_eq!(first.rollouts[0].actions.len(), 10);
    // The ten donors get `intent=replace`: those ten are assessed, and each asks for its new instance.
    apply_to(&mut planner, &mut fleet, &first, t(0));
    let second = check(&mut planner, &fleet, t(1));
    assert_eq!(planner.assessed(), 10);
    assert!(second.rollouts[0].actions.iter().all(|a| a.reason == Reason::InstanceRequested));
    // The instances are created (ten joining PendingNodes), and their Nodes register.
    apply_to(&mut planner, &mut fleet, &second, t(1));
    planner.set_context(rollouts.clone(), fleet.clone(), None);
    for p in &fleet.pending {
        let heir = NodeView {
            ready: false,
            agent: Ok(AgentReport::default()),
            group: Some(GroupMember { image: Some(TARGET.into()), ..member("g", &p.node_name, None) }),
            ..node(&p.node_name)
        };
        planner.upsert(heir);
    }
    let third = check(&mut planner, &fleet, t(2));
    assert_eq!(planner.assessed(), 20, "the ten heirs and their donors");
    assert_eq!(third.rollouts[0].counts.in_progress, 10);
    assert_eq!(third.rollouts[0].replacements.heirs.len(), 10);
    // One idle node's report: it is assessed, with the twenty nodes of the replacements in flight.
    let mut n = planner.node("n0500").cloned().expect("a node");
    n.ready = false;
    planner.upsert(n);
    check(&mut planner, &fleet, t(3));
    assert_eq!(planner.assessed(), 21);
    // A heir turns Ready: the same twenty.
    let mut heir = planner.node("n0000-new").cloned().expect("a heir");
    heir.ready = true;
    if let Some(m) = &mut heir.group {
        m.ready_since = Some(t(4));
    }
    planner.upsert(heir);
    if let Some(p) = fleet.pending.iter_mut().find(|p| p.node_name == "n0000-new") {
        p.reached_goal = true;
    }
    planner.set_context(rollouts.clone(), fleet.clone(), None);
    let fourth = check(&mut planner, &fleet, t(4));
    assert_eq!(planner.assessed(), 20);
    // Its next step (the shield taint, not yet applied by this test) is decided from those twenty.
    let next = |a: &NodeAction| a.node == "n0000-new" && matches!(a.reason, Reason::HeirShielded | Reason::HeirPaired);
    assert!(fourth.rollouts[0].actions.iter().any(next), "{:?}", fourth.rollouts[0].actions);
    // A scaling group's image changes (rarely): every node is assessed again.
    fleet.groups[0].image = Some("v3".into());
    planner.set_context(rollouts.clone(), fleet.clone(), None);
    check(&mut planner, &fleet, t(5));
    assert_eq!(planner.assessed(), planner.len());
}

#[test]
fn with_a_kubernetes_upgrade_the_planner_indexes_too_and_assesses_a_rollout_again_when_its_flow_changes() {
    let spec = valid_spec(TARGET, 1, Policy { max_unavailable: MaxUnavailable::Count(3), ..Policy::default() });
    let rollouts = vec![upgrading(Rollout::new("nv", SpecState::Valid(spec.clone()), None), KUBERNETES)];
    let mut planner = Planner::new();
    planner.set_context(rollouts.clone(), Fleet::default(), None);
    for i in 0..1000 {
        planner.upsert(node(&format!("n{i:04}")));
    }
    assert!(planner.incremental());
    let nodes = |planner: &Planner| planner.nodes().cloned().collect::<Vec<NodeView>>();
    let first = planner.plan(t(0));
    assert_eq!(planner.assessed(), 1000);
    let want = plan_with(&nodes(&planner), &rollouts, &Fleet::default(), None, t(0));
    assert_eq!(format!("{first:#?}"), format!("{want:#?}"));
    let kinds: Vec<&str> = first.rollouts[0].actions.iter().map(|a| a.kind.name()).collect();
    assert_eq!(kinds, ["Fetch"; 3], "three nodes fetch ahead (maxStaging defaults to maxUnavailable)");
    assert_eq!(first.rollouts[0].kubernetes.as_ref().map(|k| (k.active, k.nodes.len())), Some((true, 500)));
    // The three nodes get their intent (the executor's write, seen by the watch): only they are assessed.
    let mut tokens = 0;
    let mut apply = |planner: &mut Planner, plan: &ClusterPlan, now: Timestamp| {
        for action in &plan.rollouts[0].actions {
            let mut n = planner.node(&action.node).cloned().expect("a node acted on");
            tokens += 1;
            assert!(crate::forecast::transition(&mut n, action, Token::from_u64(tokens), now));
            planner.upsert(n);
        }
    };
    apply(&mut planner, &first, t(1));
    let second = planner.plan(t(1));
    assert_eq!(planner.assessed(), 3);
    assert_eq!(second.rollouts[0].counts.in_progress, 3);
    planner.plan(t(2));
    assert_eq!(planner.assessed(), 0, "nothing changed, nothing is assessed");
    let want = plan_with(&nodes(&planner), &rollouts, &Fleet::default(), None, t(2));
    assert_eq!(format!("{:#?}", planner.plan(t(2))), format!("{want:#?}"));
    // The upgrade is over for every node (each runs the version with the components): the image flow plans, and
    // every member is assessed again once, then only what changes.
    for i in 0..1000 {
        let mut n = node(&format!("n{i:04}"));
        n.kubelet_version = Some(KUBERNETES.into());
        if let Ok(a) = &mut n.agent {
            a.components_hash = shared::protocol::ComponentsHash::parse("k", COMPONENTS_HASH).ok();
        }
        planner.upsert(n);
    }
    let image = planner.plan(t(3));
    assert_eq!(planner.assessed(), 1000);
    assert_eq!(image.rollouts[0].kubernetes.as_ref().map(|k| k.active), Some(false));
    let kinds: Vec<&str> = image.rollouts[0].actions.iter().map(|a| a.kind.name()).collect();
    assert_eq!(kinds, ["Stage"; 3], "the image flow stages ahead");
    let want = plan_with(&nodes(&planner), &rollouts, &Fleet::default(), None, t(3));
    assert_eq!(format!("{image:#?}"), format!("{want:#?}"));
    planner.plan(t(4));
    assert_eq!(planner.assessed(), 0);
}

/// A whole rollout of 1000 nodes of a scaling group, replaced ten at a time: the world makes one change per
/// event (a write of the last plan applied, a heir registering, turning Ready or joining, a drain finishing, an
/// instance deleted), and the planner plans after each. Returns the plans, the nodes assessed in all, the most in
/// one plan, the nodes the full plan assesses in all (every node, each time), and the nodes replaced.
fn replacement_rollout(size: usize, surge: u32) -> (usize, usize, usize, usize, usize) {
    let policy = Policy {
        max_unavailable: MaxUnavailable::Count(surge),
        max_surge: budget::MaxSurge::Count(surge),
        ..Policy::default()
    };
    let rollouts = vec![Rollout::new("nv", SpecState::Valid(valid_spec(TARGET, 1, policy)), None)];
    let group = GroupView { group_id: "g".into(), control_plane: false, image: Some(TARGET.into()) };
    let mut fleet = Fleet { groups: vec![group], etcd: EtcdAccess::Client, ..Fleet::default() };
    let mut planner = Planner::new();
    planner.set_context(rollouts.clone(), fleet.clone(), None);
    for i in 0..size {
        let name = format!("n{i:04}");
        planner.upsert(NodeView { group: Some(member("g", &name, Some(t(-600)))), ..node(&name) });
    }
    let (mut plans, mut assessed, mut most, mut every, mut retired) = (0, 0, 0, 0, 0);
    let mut now = t(0);
    let mut pending_writes: Vec<NodeAction> = Vec::new();
    for _ in 0..20 * size + 1000 {
        planner.set_context(rollouts.clone(), fleet.clone(), None);
        let plan = planner.plan(now);
        plans += 1;
        if plans > 1 {
            assessed += planner.assessed();
            most = most.max(planner.assessed());
            every += planner.len();
        }
        if plans % 500 == 1 {
            let nodes: Vec<NodeView> = planner.nodes().cloned().collect();
            let want = plan_with(&nodes, &rollouts, &fleet, None, now);
            assert_eq!(format!("{plan:#?}"), format!("{want:#?}"), "plan {plans}");
        }
        now += SignedDuration::from_secs(1);
        if plan.rollouts[0].counts.up_to_date as usize == size && fleet.pending.is_empty() {
            break;
        }
        // One change of the world: the plan's writes (all at once, as the executor applies a plan), or else one
        // thing the cloud, a kubelet or a drain does.
        let writes: Vec<NodeAction> = plan.rollouts[0].actions.iter().filter(|a| a.kind.writes()).cloned().collect();
        if !writes.is_empty() && writes != pending_writes {
            pending_writes = writes.clone();
            for action in &writes {
                let Some(mut n) = planner.node(&action.node).cloned() else { continue };
                match &action.kind {
                    ActionKind::CreateInstance { group_id, pending, .. } => fleet.pending.push(PendingView {
                        name: pending.clone(),
                        node_name: format!("{}-new", action.node),
                        group_id: group_id.clone(),
                        goal: Goal::Join,
                        donor: Some(action.node.clone()),
                        reached_goal: false,
                        join_failed: None,
                        created: Some(now),
                    }),
                    ActionKind::Shield { donor } => {
                        if let Some(m) = &mut n.group {
                            m.taints.push(super::replacement::shield(donor));
                        }
                        planner.upsert(n);
                    }
                    ActionKind::Inherit { donor, labels, taints } => {
                        if let Some(m) = &mut n.group {
                            m.taints.retain(|t| t.key != super::replacement::SHIELD_TAINT);
                            m.donor = Some(donor.clone());
                            m.labels.extend(labels.clone());
                            m.taints.extend(taints.clone());
                        }
                        planner.upsert(n);
                    }
                    ActionKind::Retire { join_pending, .. } => {
                        fleet.pending.retain(|p| Some(&p.name) != join_pending.as_ref());
                        planner.remove(&action.node);
                        retired += 1;
                    }
                    ActionKind::ReleaseInstance { pending, donor, .. } => {
                        fleet.pending.push(PendingView {
                            name: pending.clone(),
                            node_name: donor.name.clone(),
                            group_id: donor.group_id.clone(),
                            goal: Goal::Leave,
                            donor: Some(donor.name.clone()),
                            reached_goal: false,
                            join_failed: None,
                            created: Some(now),
                        });
                        if let Some(m) = &mut n.group {
                            m.donor = None;
                        }
                        planner.upsert(n);
                    }
                    kind => {
                        if let (ActionKind::DrainDonor { heir, .. }, Some(m)) = (kind, &mut n.group) {
                            m.heir = Some(heir.clone());
                        }
                        crate::forecast::transition(&mut n, action, Token::from_u64(1), now);
                        planner.upsert(n);
                    }
                }
            }
            continue;
        }
        // The cloud, the kubelets and the drains take turns.
        let leaving = fleet.pending.iter().position(|p| p.goal == Goal::Leave);
        let joining = fleet.pending.iter().position(|p| p.goal == Goal::Join && !p.reached_goal);
        let draining = planner.nodes().find(|n| matches!(n.drain, DrainProgress::Running { .. })).cloned();
        for turn in 0..3 {
            match (plans + turn) % 3 {
                0 if joining.is_some() => {
                    let j = joining.unwrap_or_default();
                    let name = fleet.pending[j].node_name.clone();
                    match planner.node(&name).cloned() {
                        None => planner.upsert(NodeView {
                            ready: false,
                            agent: Ok(AgentReport::default()),
                            group: Some(GroupMember { image: Some(TARGET.into()), ..member("g", &name, None) }),
                            ..node(&name)
                        }),
                        Some(mut heir) if !heir.ready => {
                            heir.ready = true;
                            if let Some(m) = &mut heir.group {
                                m.ready_since = Some(now);
                            }
                            planner.upsert(heir);
                        }
                        Some(_) => fleet.pending[j].reached_goal = true,
                    }
                }
                1 if draining.is_some() => {
                    if let Some(mut n) = draining.clone() {
                        n.drain = DrainProgress::Drained;
                        planner.upsert(n);
                    }
                }
                2 if leaving.is_some() => {
                    fleet.pending.remove(leaving.unwrap_or_default());
                }
                _ => continue,
            }
            break;
        }
    }
    (plans, assessed, most, every, retired)
}

#[test]
fn a_whole_replacement_rollout_assesses_the_replacements_in_flight_per_event() {
    let (plans, assessed, most, every, retired) = replacement_rollout(1000, 10);
    assert_eq!(retired, 1000, "every node replaced in {plans} plans");
    let mean = assessed as f64 / (plans - 1) as f64;
    let full = every as f64 / (plans - 1) as f64;
    eprintln!(
        "1000 group nodes, maxSurge 10: {plans} plans; nodes assessed per plan after the first: {mean:.1} (at most \
         {most}), the full plan {full:.0}"
    );
    // The ten donors and their heirs, what changed, and what the plan starts: not the cluster.
    assert!(mean < 20.0 && most <= 30, "{mean} {most}");
}

/// A pool that counts the candidates selection reads.
struct Counting {
    members: Vec<(NodeView, assess::Assessment)>,
    read: std::cell::Cell<usize>,
}

impl<'a> pipeline::Pool<'a> for &'a Counting {
    fn candidates(&self) -> Box<dyn Iterator<Item = (&'a NodeView, bool)> + '_> {
        Box::new(self.members.iter().map(|(n, a)| (n, a.replace)).inspect(|_| self.read.set(self.read.get() + 1)))
    }

    fn in_place_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        let in_place = self.members.iter().filter(|(_, a)| !a.replace).map(|(n, _)| n);
        Box::new(in_place.inspect(|_| self.read.set(self.read.get() + 1)))
    }

    fn replaced_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        let replaced = self.members.iter().filter(|(_, a)| a.replace).map(|(n, _)| n);
        Box::new(replaced.inspect(|_| self.read.set(self.read.get() + 1)))
    }

    fn any_replaced_candidate(&self) -> bool {
        self.members.iter().any(|(_, a)| a.replace)
    }

    fn staged_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        Box::new(std::iter::empty())
    }

    fn staging_count(&self) -> u32 {
        0
    }

    fn staging_followers(&self) -> Vec<(&'a NodeView, bool)> {
        Vec::new()
    }

    fn first_staging(&self) -> Option<pipeline::Order> {
        None
    }

    fn own_node(&self) -> Option<&str> {
        None
    }

    fn size(&self) -> u32 {
        self.members.len() as u32
    }

    fn unavailable_count(&self) -> u32 {
        0
    }

    fn unavailable(&self) -> Vec<(&'a NodeView, &'a assess::Assessment)> {
        Vec::new()
    }

    fn any_in_flight(&self) -> bool {
        false
    }

    fn control_plane_pending(&self) -> Vec<(&'a NodeView, &'a assess::Assessment)> {
        Vec::new()
    }
}

#[test]
fn while_the_surge_is_taken_selection_reads_only_the_nodes_updated_in_place() {
    let eligible = |replace: bool| assess::Assessment {
        replace,
        ..assess::Assessment::new(assess::Situation::Outdated { eligible: true, held: None })
    };
    let mut members: Vec<(NodeView, assess::Assessment)> =
        (0..1000).map(|i| (node(&format!("g{i:04}")), eligible(true))).collect();
    members.push((node("w"), eligible(false)));
    let pool = Counting { members, read: Default::default() };
    let spec = valid_spec(TARGET, 1, Policy { max_unavailable: MaxUnavailable::Count(5), ..Policy::default() });
    let mut shared = pipeline::Shared::default();
    let start = |surge: &mut pipeline::Surge, shared: &mut pipeline::Shared| {
        pool.read.set(0);
        let flow = pipeline::Flow::Image { target: TARGET.into() };
        let times = Default::default();
        let selected = pipeline::select(&&pool, &spec, &flow, (shared, surge), &pipeline::Bounds::none(&times));
        let names: Vec<(&str, bool)> =
            selected.starts.iter().map(|(n, how)| (n.name.as_str(), *how == pipeline::Start::Replace)).collect();
        (names.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect::<Vec<_>>(), selected.hold)
    };
    // No surge left: the node updated in place starts, after reading it alone (and the first, to see there is one).
    let mut surge = pipeline::Surge { free: 0, allowed: 10, moving: true, ..Default::default() };
    let (starts, hold) = start(&mut surge, &mut shared);
    assert_eq!(starts, [("w".to_owned(), false)]);
    assert!(hold.is_none());
    assert_eq!(pool.read.get(), 1, "the node updated in place, to stage it");
    // Surge left: the replaced ones first, in order.
    let mut surge = pipeline::Surge { free: 2, allowed: 10, ..Default::default() };
    let (starts, _) = start(&mut surge, &mut shared);
    let names: Vec<&str> = starts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["g0000", "g0001", "w"]);
    // Nothing in place, no surge, nothing moving: said, as when every replaced node was read.
    let pool = Counting { members: pool.members[..3].to_vec(), read: Default::default() };
    let mut surge = pipeline::Surge { free: 0, allowed: 1, ..Default::default() };
    let flow = pipeline::Flow::Image { target: TARGET.into() };
    let times = Default::default();
    let selected = pipeline::select(&&pool, &spec, &flow, (&mut shared, &mut surge), &pipeline::Bounds::none(&times));
    assert!(selected.starts.is_empty());
    assert_eq!(selected.hold.map(|h| h.reason), Some(Reason::SurgeExhausted));
}
