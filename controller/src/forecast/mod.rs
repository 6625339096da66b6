//! A rollout forecast: the real policy and the executor's transitions run forward in virtual time.
//!
//! [`forecast`] takes the nodes and rollouts the controller would plan with, and per-step durations
//! ([`Durations`]), and plays the rollout out: the policy plans ([`crate::policy::plan_with`]), the
//! executor's own transitions ([`next_state`], [`drain_effect`]) apply the actions, and each node's
//! agent, drain, reboot and kubeadm upgrade take exactly their step's duration. Nothing here reads the
//! clock or a client; [`blockers`] says what would stop the rollout and [`snapshot`] reads the cluster once.
//!
//! # Kubernetes upgrades
//! A rollout with a Kubernetes upgrade ([`Rollout::kubernetes`]) is played out as the policy plans it:
//! its kubeadm upgrades first (control plane first, then the workers), then its image. A node's
//! kubeadm upgrade ends with its kubelet and components at the target, and after `kubeadm upgrade
//! apply` the API server reports the target. A node updated in both phases appears twice in the
//! forecast, once per [`Phase`].
//!
//! # Replacements
//! A node of a known scaling group ([`NodeView::group`]) is replaced as the policy replaces it (see
//! [`crate::policy::replacement`]), within `maxSurge`: its new instance is created and joins Ready
//! [`Durations::replace`] after its `intent=replace` less the rollout's soak time (which the policy waits
//! itself), so that its drain starts [`Durations::replace`] after it; its drain and the deletion of its Node
//! take [`Durations::retire`], and the deletion of its instance [`Durations::release`] more (until then the
//! instance holds its `maxSurge` slot; the node finishes in the forecast once the instance is gone). The new
//! node is a member of the group running the group's image; it is not listed (it never starts).
//!
//! # Guarantees
//! - The order and the waves are the policy's own decisions: a change to the policy changes the
//!   forecast the same way.
//! - The run always ends: when nothing is left to do, when nothing can move any more (the
//!   forecast says why), or at [`HORIZON`] of virtual time.
//! - A node's wave is one more than the highest wave of the nodes that finished before it started
//!   (the first nodes are wave 1): the same definition applies to an observed rollout
//!   ([`waves_of`]), so a forecast and what followed compare exactly. A node starts when its turn comes (it
//!   takes a slot of `maxUnavailable`), not when it is staged ahead of it.

pub mod blockers;
pub mod durations;
pub mod membership;
pub mod preflight;
pub mod report;
pub mod result;
pub mod snapshot;

pub use blockers::{Blocker, BlockerKind};
pub use durations::{Durations, Source};
pub use result::{Ending, Forecast, NodeForecast, Phase, RolloutForecast, WindowsNeeded, waves_of};

use crate::executor::{DrainEffect, drain_effect, next_state};
use crate::policy::kubernetes::KubernetesSpec;
use crate::policy::replacement::{Goal, PendingView};
use crate::policy::{
    ActionKind, ClusterPlan, DrainProgress, Fleet, GroupMember, Hold, NodeAction, NodeView, Reason, Rollout, plan_with,
};
use jiff::{SignedDuration, Timestamp};
use shared::protocol::{AgentState, BootId, ComponentsHash, ControllerAnnotations, KubeadmRole, Step, Token};
use std::collections::BTreeMap;

/// How far into virtual time a forecast runs before it gives up (a window that opens once a month,
/// say, is still found).
pub const HORIZON: SignedDuration = SignedDuration::from_hours(24 * 62);
/// Plans at one instant before time moves on: the controller plans again after its own writes.
const ROUNDS_PER_INSTANT: usize = 8;
/// Plans in all before a forecast gives up (with the horizon, bounds its cost whatever the policy wakes for).
const MAX_ROUNDS: usize = 100_000;

/// Plays the rollouts out from `nodes` at `now` with `durations` (see the module documentation).
/// `rollouts` and `fleet` are as [`plan_with`] takes them.
pub fn forecast(
    nodes: &[NodeView],
    rollouts: &[Rollout],
    fleet: &Fleet,
    own_node: Option<&str>,
    now: Timestamp,
    durations: &Durations,
) -> Forecast {
    let mut run = Run {
        nodes: nodes.to_vec(),
        rollouts: rollouts.to_vec(),
        start: now,
        now,
        tokens: 0,
        boots: 0,
        durations,
        fleet: fleet.clone(),
        instances: BTreeMap::new(),
        started: BTreeMap::new(),
        finished: BTreeMap::new(),
        owner: BTreeMap::new(),
        order: Vec::new(),
    };
    let first = plan_with(&run.nodes, rollouts, fleet, own_node, now);
    let end = run.now.checked_add(HORIZON).unwrap_or(Timestamp::MAX);
    let mut last = first.clone();
    let mut rounds = 0;
    for _ in 0..MAX_ROUNDS {
        let cluster = plan_with(&run.nodes, &run.rollouts, &run.fleet, own_node, run.now);
        // The canary waves found complete, as the status records them.
        for (rollout, plan) in run.rollouts.iter_mut().zip(&cluster.rollouts) {
            rollout.waves = rollout.waves.record(plan.waves.as_ref(), run.now);
        }
        let writes = run.apply(&cluster);
        last = cluster;
        rounds += 1;
        if writes && rounds < ROUNDS_PER_INSTANT {
            continue;
        }
        rounds = 0;
        let next = [run.next_event(), last.wake_at()].into_iter().flatten().filter(|t| *t > run.now).min();
        match next {
            Some(next) if next <= end => {
                run.now = next;
                run.world();
            }
            _ => break,
        }
    }
    let settled = run.next_event().is_none();
    let forecasts = rollouts
        .iter()
        .enumerate()
        .map(|(i, r)| run.result(i, r, &last.rollouts[i], settled, first.rollouts[i].counts.up_to_date))
        .collect();
    Forecast { rollouts: forecasts, first }
}

/// A node in one phase, as a forecast run tracks it.
type Key = (String, Phase);

/// The state of a forecast run.
struct Run<'a> {
    nodes: Vec<NodeView>,
    /// The rollouts, with the API server's version as the forecast upgrades it.
    rollouts: Vec<Rollout>,
    start: Timestamp,
    now: Timestamp,
    tokens: u64,
    boots: u64,
    durations: &'a Durations,
    /// The scaling groups and the PendingNodes, as the replacements change them.
    fleet: Fleet,
    /// When the instance of each PendingNode (by name) of a replacement joins Ready, or is gone.
    instances: BTreeMap<String, Timestamp>,
    /// When each node started a phase (its turn: the drain of a node staged ahead, its replacement, its Kubernetes
    /// upgrade's drain), whether it is replaced, and its wave.
    started: BTreeMap<Key, (Timestamp, bool, u32)>,
    finished: BTreeMap<Key, Timestamp>,
    /// The rollout (index) each started node belongs to.
    owner: BTreeMap<Key, usize>,
    order: Vec<Key>,
}

impl Run<'_> {
    /// Applies the plan's actions as the executor does, in its two phases (new nodes start after
    /// every other write, in slots those free); whether any of them writes.
    fn apply(&mut self, cluster: &ClusterPlan) -> bool {
        let mut writes = false;
        let all = cluster.rollouts.iter().enumerate().map(|(i, p)| (Some(i), p)).chain([(None, &cluster.unowned)]);
        let actions: Vec<(Option<usize>, &NodeAction)> =
            all.flat_map(|(i, p)| p.actions.iter().map(move |a| (i, a))).collect();
        for (_, action) in actions.iter().filter(|(_, a)| !a.starts_node()) {
            writes |= action.kind.writes();
            self.transition(action);
        }
        // A node frees its slot once it is done and no longer in flight (a soaking node keeps it).
        for (index, plan) in cluster.rollouts.iter().enumerate() {
            let freed: Vec<Key> = self
                .started
                .keys()
                .filter(|k| self.owner.get(*k) == Some(&index) && !self.finished.contains_key(*k))
                .filter(|(n, _)| !plan.in_flight.iter().any(|f| &f.node == n))
                .filter(|(n, _)| match self.nodes.iter().find(|v| &v.name == n) {
                    Some(v) => node_done(v),
                    // A replaced node, once its Node and its instance are gone.
                    None => !plan.replacements.obsolete.contains(n),
                })
                .cloned()
                .collect();
            for node in freed {
                self.finished.insert(node, self.now);
            }
        }
        for (index, action) in actions.iter().filter(|(_, a)| a.starts_node()) {
            writes |= action.kind.writes();
            if let Some(index) = index {
                self.record(*index, action);
            }
            self.transition(action);
        }
        for n in &mut self.nodes {
            // The reconciler stops the drains of nodes that left the drain step (a replaced node's drain).
            let heir = n.group.as_ref().is_some_and(|g| g.heir.is_some());
            let draining = n.controller.as_ref().is_ok_and(|c| {
                c.intent.as_ref().is_some_and(|i| i.step == Step::Drain || (i.step == Step::Replace && heir))
            });
            if !draining {
                n.drain = DrainProgress::NotRunning;
            }
        }
        writes
    }

    fn record(&mut self, index: usize, action: &NodeAction) {
        let kubernetes = matches!(action.reason, Reason::KubernetesUpgradeStarted | Reason::FetchRequested);
        let phase = if kubernetes { Phase::Kubernetes } else { Phase::Image };
        let key = (action.node.clone(), phase);
        // A node starts when its turn comes (it takes a slot of the budget), not when it stages ahead.
        let turn = action.starts_node() && !matches!(action.kind, ActionKind::Stage { .. } | ActionKind::Fetch { .. });
        if turn && !self.started.contains_key(&key) {
            let wave = self
                .finished
                .iter()
                .filter(|(_, at)| **at <= self.now)
                .filter_map(|(n, _)| self.started.get(n).map(|s| s.2))
                .max()
                .unwrap_or(0)
                + 1;
            let replaced = matches!(action.kind, ActionKind::Replace { .. });
            self.started.insert(key.clone(), (self.now, replaced, wave));
            self.owner.insert(key.clone(), index);
            self.order.push(key);
        }
    }

    /// The executor's transition of one action.
    fn transition(&mut self, action: &NodeAction) {
        self.tokens += 1;
        let token = Token::from_u64(self.tokens);
        if let Some(n) = self.nodes.iter_mut().find(|n| n.name == action.node) {
            transition(n, action, token, self.now);
        }
        self.replacement(action);
    }

    /// What a replacement's action does besides the Node's annotations: the instances, the PendingNodes, the
    /// pairing, the deletion of the replaced Node.
    fn replacement(&mut self, action: &NodeAction) {
        match &action.kind {
            ActionKind::CreateInstance { group_id, pending, .. } => {
                let soak = self
                    .nodes
                    .iter()
                    .find(|n| n.name == action.node)
                    .and_then(|n| n.selected_by.first())
                    .and_then(|i| self.rollouts.get(*i))
                    .and_then(|r| r.spec.acting())
                    .map_or(SignedDuration::ZERO, |spec| spec.policy.soak_time);
                let join = (self.durations.replace - soak).max(SignedDuration::ZERO);
                self.fleet.pending.push(PendingView {
                    name: pending.clone(),
                    node_name: heir_name(&action.node),
                    group_id: group_id.clone(),
                    goal: Goal::Join,
                    donor: Some(action.node.clone()),
                    reached_goal: false,
                    join_failed: None,
                    created: Some(self.now),
                });
                self.instances.insert(pending.clone(), self.now.checked_add(join).unwrap_or(Timestamp::MAX));
            }
            ActionKind::Shield { donor } => {
                if let Some(g) = self.member_mut(&action.node) {
                    g.taints.push(crate::policy::replacement::shield(donor));
                }
            }
            ActionKind::Inherit { donor, labels, taints } => {
                if let Some(g) = self.member_mut(&action.node) {
                    g.taints.retain(|t| t.key != crate::policy::replacement::SHIELD_TAINT);
                    g.donor = Some(donor.clone());
                    g.labels.extend(labels.clone());
                    g.taints.extend(taints.iter().cloned());
                }
            }
            ActionKind::DrainDonor { heir, .. } => {
                if let Some(g) = self.member_mut(&action.node) {
                    g.heir = Some(heir.clone());
                }
            }
            ActionKind::Retire { join_pending, .. } => {
                self.nodes.retain(|n| n.name != action.node);
                self.fleet.pending.retain(|p| Some(&p.name) != join_pending.as_ref());
            }
            ActionKind::ReleaseInstance { pending, donor, .. } => {
                if let Some(g) = self.member_mut(&action.node) {
                    g.donor = None;
                }
                self.fleet.pending.push(PendingView {
                    name: pending.clone(),
                    node_name: donor.name.clone(),
                    group_id: donor.group_id.clone(),
                    goal: Goal::Leave,
                    donor: Some(donor.name.clone()),
                    reached_goal: false,
                    join_failed: None,
                    created: Some(self.now),
                });
                let gone = self.now.checked_add(self.durations.release).unwrap_or(Timestamp::MAX);
                self.instances.insert(pending.clone(), gone);
            }
            _ => {}
        }
    }

    /// The group member facts of `node`, when it is a member.
    fn member_mut(&mut self, node: &str) -> Option<&mut GroupMember> {
        self.nodes.iter_mut().find(|n| n.name == node).and_then(|n| n.group.as_mut())
    }

    /// The instance of PendingNode `pending` reaches its goal: a leaving one is gone (with its PendingNode), a
    /// joining one is a new node, Ready now: a member of its group with the group's image.
    fn reach_goal(&mut self, pending: &str) {
        let Some(p) = self.fleet.pending.iter_mut().find(|p| p.name == pending) else { return };
        if p.goal == Goal::Leave {
            self.fleet.pending.retain(|p| p.name != pending);
            return;
        }
        p.reached_goal = true;
        let (heir, group_id) = (p.node_name.clone(), p.group_id.clone());
        let Some(donor) = p.donor.clone().and_then(|d| self.nodes.iter().find(|n| n.name == d).cloned()) else {
            return;
        };
        let image = self.fleet.groups.iter().find(|g| g.group_id == group_id).and_then(|g| g.image.clone());
        self.boots += 1;
        let agent = match &donor.agent {
            Ok(_) => Ok(shared::protocol::AgentReport { os_image: image.clone(), ..Default::default() }),
            Err(e) => Err(e.clone()),
        };
        self.nodes.push(NodeView {
            name: heir.clone(),
            ready: true,
            unschedulable: false,
            kubelet_boot_id: Some(format!("forecast-{}", self.boots)),
            controller: Ok(ControllerAnnotations::default()),
            agent,
            drain: DrainProgress::NotRunning,
            group: Some(GroupMember {
                group_id,
                provider_id: format!("forecast://{heir}"),
                image,
                ready_since: Some(self.now),
                ..GroupMember::default()
            }),
            operation: None,
            ..donor
        });
    }

    /// When the next node finishes its step on its own (the agent staged, the drain done, the node
    /// back from its reboot).
    fn next_event(&self) -> Option<Timestamp> {
        self.nodes.iter().filter_map(|n| self.due(n)).chain(self.instances.values().copied()).min()
    }

    /// When `n`'s current step finishes on its own, if it waits on the world.
    fn due(&self, n: &NodeView) -> Option<Timestamp> {
        let intent = n.controller.as_ref().ok()?.intent.as_ref()?;
        if intent.step == Step::Replace {
            // A replaced node needs no agent: its drain is the controller's.
            return matches!(n.drain, DrainProgress::Running { .. })
                .then(|| intent.since.checked_add(self.durations.retire).ok())
                .flatten();
        }
        let agent = n.agent.as_ref().ok()?;
        let answered = agent.token.as_ref() == Some(&intent.token);
        let took = match intent.step {
            Step::Stage if !answered => self.durations.stage,
            Step::Fetch if !answered => self.durations.fetch,
            Step::Drain if matches!(n.drain, DrainProgress::Running { .. }) => self.durations.drain,
            Step::Reboot if !answered => self.durations.reboot,
            Step::KubeadmUpgrade if !answered => self.durations.kubeadm_upgrade,
            // Waiting for the controller (an answered step, a drain not running), or a step the world does not
            // end (done, failed, blocked; a replacement's drain is handled above).
            Step::Stage
            | Step::Fetch
            | Step::Drain
            | Step::Reboot
            | Step::KubeadmUpgrade
            | Step::Replace
            | Step::Done
            | Step::Failed
            | Step::Blocked => return None,
        };
        intent.since.checked_add(took).ok()
    }

    /// Everything the world does by now.
    fn world(&mut self) {
        let now = self.now;
        let reached: Vec<String> =
            self.instances.iter().filter(|(_, at)| **at <= now).map(|(p, _)| p.clone()).collect();
        for pending in reached {
            self.instances.remove(&pending);
            self.reach_goal(&pending);
        }
        let due: Vec<usize> =
            (0..self.nodes.len()).filter(|&i| self.due(&self.nodes[i]).is_some_and(|t| t <= now)).collect();
        for i in due {
            let n = &mut self.nodes[i];
            let Some(intent) = n.controller.as_ref().ok().and_then(|c| c.intent.clone()) else { continue };
            if intent.step == Step::Replace {
                n.drain = DrainProgress::Drained;
                continue;
            }
            let Ok(agent) = &mut n.agent else { continue };
            match intent.step {
                Step::Stage | Step::Fetch => {
                    agent.token = Some(intent.token.clone());
                    agent.state = Some(AgentState::Done);
                }
                Step::Drain => n.drain = DrainProgress::Drained,
                Step::Reboot => {
                    self.boots += 1;
                    let boot = format!("forecast-{}", self.boots);
                    n.ready = true;
                    n.kubelet_boot_id = Some(boot.clone());
                    agent.boot_id = BootId::parse("forecast", &boot).ok();
                    agent.os_image = Some(intent.target.clone());
                    agent.token = Some(intent.token.clone());
                    agent.state = Some(AgentState::Done);
                }
                Step::KubeadmUpgrade => {
                    let target = self.rollouts.iter().find_map(|r| match &r.kubernetes {
                        Some(KubernetesSpec::Upgrade(t)) if t.version.to_string() == intent.target => Some(t.clone()),
                        _ => None,
                    });
                    n.ready = true;
                    n.kubelet_version = Some(intent.target.clone());
                    agent.components_hash =
                        target.as_ref().and_then(|t| ComponentsHash::parse("forecast", &t.hash).ok());
                    agent.token = Some(intent.token.clone());
                    agent.state = Some(AgentState::Done);
                    let applies = intent.kubeadm.as_ref().is_some_and(|k| k.role == Some(KubeadmRole::Apply));
                    if let Some(target) = target.filter(|_| applies) {
                        // `kubeadm upgrade apply` upgrades the API server the whole cluster talks to.
                        for r in &mut self.rollouts {
                            if let Some(KubernetesSpec::Upgrade(t)) = &mut r.kubernetes
                                && t.api_server < target.version
                            {
                                t.api_server = target.version.clone();
                            }
                        }
                    }
                }
                // Handled above, or ended by the controller, not the world.
                Step::Replace | Step::Done | Step::Failed | Step::Blocked => {}
            }
        }
    }

    fn result(
        &self,
        index: usize,
        rollout: &Rollout,
        last: &crate::policy::Plan,
        settled: bool,
        up_to_date: u32,
    ) -> RolloutForecast {
        let seconds = |t: Timestamp| t.duration_since(self.start).as_secs_f64();
        let nodes: Vec<NodeForecast> = self
            .order
            .iter()
            .filter(|k| self.owner.get(*k) == Some(&index))
            .filter_map(|k| {
                let (at, replaced, wave) = self.started.get(k)?;
                Some(NodeForecast {
                    node: k.0.clone(),
                    phase: k.1,
                    wave: *wave,
                    start_seconds: seconds(*at),
                    finish_seconds: self.finished.get(k).map(|t| seconds(*t)),
                    replaced: *replaced,
                })
            })
            .collect();
        let c = last.counts;
        let complete = c.total > 0 && c.up_to_date == c.total && last.in_flight.is_empty();
        let ending = if complete || c.total == 0 {
            Ending::Complete
        } else if !settled && last.moves() {
            Ending::Unfinished
        } else {
            let mut left: Vec<String> = last.held.iter().map(|h| h.node.clone()).collect();
            left.extend(last.failed.iter().chain(&last.blocked).map(|p| p.node.clone()));
            let target = rollout.spec.acting().map(|s| s.target.as_str());
            let outdated = self.nodes.iter().filter(|n| {
                n.selected_by.first() == Some(&index)
                    && n.agent.as_ref().ok().and_then(|a| a.os_image.as_deref()) != target
            });
            left.extend(outdated.map(|n| n.name.clone()));
            left.sort();
            left.dedup();
            let Hold { reason, message } = last.hold.clone().unwrap_or_else(|| held_summary(last));
            Ending::Stuck { reason: reason.to_string(), message, nodes_left: left }
        };
        let duration_seconds = match ending {
            Ending::Complete => Some(nodes.iter().filter_map(|n| n.finish_seconds).fold(0.0, f64::max)),
            _ => None,
        };
        RolloutForecast {
            name: rollout.name.clone(),
            target: rollout.spec.acting().map(|s| s.target.clone()),
            kubernetes_target: match &rollout.kubernetes {
                Some(KubernetesSpec::Upgrade(t)) => Some(t.version.to_string()),
                _ => None,
            },
            windows: self.windows(rollout, &nodes, duration_seconds),
            nodes,
            duration_seconds,
            ending,
            up_to_date,
        }
    }

    /// The maintenance periods the rollout's node starts fall in, and when it ends (see [`RolloutForecast::windows`]).
    fn windows(&self, rollout: &Rollout, nodes: &[NodeForecast], duration: Option<f64>) -> Option<WindowsNeeded> {
        let policy = &rollout.spec.acting()?.policy;
        if policy.windows.is_empty() && policy.exclusions.is_empty() {
            return None;
        }
        let at = |seconds: f64| self.start.checked_add(SignedDuration::from_secs_f64(seconds)).ok();
        let starts: Vec<Timestamp> = nodes.iter().filter_map(|n| at(n.start_seconds)).collect();
        let periods = crate::policy::window::periods(&policy.windows, &policy.exclusions, &starts);
        Some(WindowsNeeded { periods, ends_at: at(duration?)? })
    }
}

/// Applies `action` to the policy's view of its node `n` as the executor does: the annotations and
/// cordon of [`next_state`] (written with `token` at `now`) and the drain's [`drain_effect`]. A node
/// whose annotations the controller cannot read takes only a release of its own intent. Returns whether the
/// action applied (false: the node's annotations are unreadable and the action is not a release).
pub(crate) fn transition(n: &mut NodeView, action: &NodeAction, token: Token, now: Timestamp) -> bool {
    let current = match &n.controller {
        Ok(c) => c.clone(),
        Err(u) => match (u.ours, &action.kind) {
            (Some(ours), ActionKind::Release) => {
                ControllerAnnotations { intent: None, cordoned_by_us: ours.cordoned_by_us }
            }
            _ => return false,
        },
    };
    let (next, unschedulable) = next_state(&current, n.unschedulable, action, token, now);
    n.controller = Ok(next);
    n.unschedulable = unschedulable;
    match drain_effect(&action.kind) {
        DrainEffect::Start if n.drain == DrainProgress::NotRunning => {
            n.drain = DrainProgress::Running { waiting_on: None };
        }
        DrainEffect::Stop => n.drain = DrainProgress::NotRunning,
        DrainEffect::Start | DrainEffect::None => {}
    }
    true
}

/// Whether the node has no intent left but `done` (or none at all) and it runs what it was asked
/// for: its agent the image, or its kubelet the Kubernetes version.
fn node_done(n: &NodeView) -> bool {
    n.controller.as_ref().is_ok_and(|c| c.intent.as_ref().is_none_or(|i| i.step == Step::Done))
        && n.agent.as_ref().is_ok_and(|a| {
            let target = n.controller.as_ref().ok().and_then(|c| c.intent.as_ref()).map(|i| i.target.as_str());
            target.is_none_or(|t| a.os_image.as_deref() == Some(t) || n.kubelet_version.as_deref() == Some(t))
        })
}

/// The name a forecast gives the new node replacing `donor` (the cloud names the real one).
fn heir_name(donor: &str) -> String {
    format!("{donor}-heir")
}

/// Why nothing moves when no hold says it: the reasons of the nodes held back.
fn held_summary(plan: &crate::policy::Plan) -> Hold {
    let named: Vec<String> = plan.held.iter().map(|h| format!("{} ({})", h.node, h.hold.reason)).collect();
    match plan.held.first() {
        Some(first) if plan.held.iter().all(|h| h.hold.reason == first.hold.reason) => {
            Hold::new(first.hold.reason, format!("held back: {}", named.join(", ")))
        }
        Some(_) => Hold::new(Reason::NodesHeldBack, format!("held back: {}", named.join(", "))),
        None if !plan.failed.is_empty() || !plan.blocked.is_empty() => {
            Hold::new(Reason::NodesFailed, "failed or blocked nodes wait for an administrator")
        }
        None => Hold::new(Reason::NodesHeldBack, "no node can start"),
    }
}

#[cfg(test)]
mod tests;
