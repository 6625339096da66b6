//! The rollout policy: a pure function from what the controller observes to what it does next.
//!
//! [`plan`] takes the nodes (with their annotations and the drain progress the executor knows),
//! the NodeVersions as [`Rollout`]s (each with its validated spec, or why it is invalid and the
//! last valid one), and the time, and returns a [`ClusterPlan`]: one [`Plan`] per rollout with the
//! actions to take on nodes (each with its [`Reason`]), why other nodes are held back, and the
//! status to publish. Nothing in this module reads the clock, the environment or a client.
//!
//! # Vocabulary
//! What a node is doing is its intent's [`Step`] (`stage`, `drain`, `reboot`, `done`, `failed`,
//! `blocked`, or none), the same word everywhere: the annotation, [`InFlight::step`], the
//! status. An [`ActionKind`] that writes an intent is named after the step it writes
//! ([`ActionKind::Drain`] writes `intent=drain` and cordons). A [`Reason`] says *why*, and is the
//! Event reason, the condition reason and the metric label at once.
//!
//! # Composition, in order
//! 1. **Ownership** ([`pools`]): each node belongs to the oldest NodeVersion whose selector
//!    selects it; a newer NodeVersion that selects it too holds it back (`SelectorOverlap`).
//! 2. **Each node's own progress** ([`assess`], [`replacement`] for nodes of a scaling group):
//!    transitions of in-flight nodes, timeouts, clean-ups, and why an outdated node may not start
//!    (its own reason: no agent report, NotReady, cordoned by someone else, do not disrupt).
//! 3. **Who moves next** ([`pipeline`], the one module to read for it): every flow (the image in
//!    place, the image by replacement, the Kubernetes upgrade: [`image`], [`kubernetes`]) gives its
//!    candidates to one set of rollout-wide gates ([`pipeline::open`], each gate in [`gates`]) and
//!    one selection ([`pipeline::select`]) under one budget; the module's docs list every gate and
//!    rule in order. With `onFailure: Rollback`, a spent failure budget turns the rollout into a
//!    rollback through the same pipeline ([`rollback`]). The NodeOps ([`crate::nodeop`]) apply the same per-node rules
//!    ([`admission`]) in the same order ([`pipeline::start_order`]), within what the rollouts'
//!    budgets leave them ([`budgets`]).
//! 4. **Summary**: counts, nodes in flight, failed, blocked and held back, for the status.
//!
//! # Invariants
//! - At most `maxUnavailable` nodes of a rollout are in flight or otherwise unavailable (NotReady,
//!   cordoned, or holding an intent the controller cannot read) after the plan is applied,
//!   counting the ones the plan starts and the nodes no NodeVersion selects that still finish a
//!   reboot.
//! - At most one control-plane node is in flight or unavailable across all rollouts, and no worker
//!   starts while a control-plane node of its rollout is outdated or in flight.
//! - A node is never started while its annotations are malformed, while someone else cordoned
//!   it, while it is NotReady, or before its agent has reported.
//! - An invalid spec never falls back to defaults: nodes in flight finish under the last valid spec
//!   and nothing new starts; without a last valid spec the rollout touches no node, and nodes no
//!   NodeVersion selects are left as they are (they might be that rollout's).
//! - Every node the plan releases, fails or blocks, and every node cordoned by the controller
//!   outside a disruptive step, is uncordoned by the action (the executor applies it).
//! - Every outdated node that is not started has a reason: its own ([`Plan::held`]) or its
//!   rollout's ([`Plan::hold`]), or it waits for a free slot while others are in flight.

mod action;
pub(crate) mod admission;
mod assess;
pub mod budget;
pub mod cron;
pub mod finish;
mod fleet;
mod gates;
pub mod health;
pub mod health_cel;
mod health_overloads;
pub mod health_types;
mod image;
pub mod incremental;
pub mod kubernetes;
mod members;
pub(crate) mod pipeline;
mod pools;
pub mod replacement;
pub mod rollback;
pub mod settings;
mod staging;
pub mod taint;
pub mod waves;
pub mod window;

#[cfg(test)]
mod incremental_tests;
#[cfg(test)]
mod simulation;
#[cfg(test)]
mod tests;

pub use crate::reason::Reason;
pub use action::{ActionKind, NodeAction};
pub use budget::budgets;
pub use incremental::Planner;
pub use replacement::{DonorRef, EtcdAccess, Fleet, GroupMember, TaintView};
pub use settings::{NodeSelector, Policy, ValidSpec};

use assess::{Assessment, Owner, Situation};
use jiff::Timestamp;
use shared::protocol::{AgentReport, ControllerAnnotations, ProtocolError, Step, UnreadableKeys};
use std::sync::Arc;

/// A node as the policy sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub control_plane: bool,
    /// The rollouts (indices into the slice given to [`plan`]) whose selector selects the node.
    pub selected_by: Vec<usize>,
    /// The node carries the opt-in label; if no NodeVersion selects it, that is said.
    pub opted_in: bool,
    /// The NodeReady condition is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `status.nodeInfo.bootID` as the kubelet reports it.
    pub kubelet_boot_id: Option<String>,
    /// `status.nodeInfo.kubeletVersion` as the kubelet reports it.
    pub kubelet_version: Option<String>,
    pub controller: Result<ControllerAnnotations, UnreadableKeys>,
    pub agent: Result<AgentReport, ProtocolError>,
    /// What the executor knows of the node's drain.
    pub drain: DrainProgress,
    /// The node's scaling group and what the replacement needs of it, when a group covers the node.
    pub group: Option<GroupMember>,
    /// The NodeOp working on the node (`keys::NODE_OPERATION`): the rollouts leave the node alone meanwhile.
    pub operation: Option<String>,
    /// Why the node may not be disrupted now (`crate::do_not_disrupt`): the Node's do-not-disrupt annotation, or a
    /// pod of it annotated so, found when it was about to start.
    pub do_not_disrupt: Option<String>,
    /// Its zone (`topology.kubernetes.io/zone`): nodes start zone by zone, within `maxUnavailablePerZone`.
    pub zone: Option<String>,
    /// Why the node goes after the others of its zone for now, if it does: a PodDisruptionBudget allowed no
    /// disruption of its pods when it was to start (`crate::budget_order`).
    pub deferred: Option<String>,
    /// The before/after-reboot checkpoint the node is at, if any (`crate::checkpoint`).
    pub checkpoint: Option<crate::checkpoint::Checkpoint>,
    /// Why the node waits for workloads of its pods to be whole again before it is disrupted, if it does
    /// (`crate::settle`: `WaitingForWorkloads`, or `SettleTimedOut` past `settleTimeout`).
    pub settle: Option<Hold>,
    /// The node carries the controller's `PreferNoSchedule` taint of outdated nodes ([`taint::OUTDATED_TAINT`]).
    pub outdated_taint: bool,
}

/// Progress of a drain, as the executor's drain task reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DrainProgress {
    /// No drain task runs for the node.
    #[default]
    NotRunning,
    /// Evicting or waiting for pods; the message says on what, for the timeout message.
    Running { waiting_on: Option<String> },
    /// Every pod that had to go is gone.
    Drained,
    /// The drain cannot finish (a pod that may not be evicted under the drain options).
    Failed { message: String },
    /// Someone made the node schedulable while it was drained; the drain stopped evicting.
    Uncordoned,
}

/// A NodeVersion as the policy sees it. [`plan`] takes them oldest first: a node several select
/// belongs to the first.
#[derive(Debug, Clone)]
pub struct Rollout {
    /// The NodeVersion's name, for messages.
    pub name: String,
    pub spec: SpecState,
    /// The Kubernetes upgrade the NodeVersion asks for, validated (see [`kubernetes`]); `None` when it asks none.
    pub kubernetes: Option<kubernetes::KubernetesSpec>,
    /// The last verdict of each health check of the acting spec (`crate::health_checks`), read by the health-check
    /// gate ([`health::hold`]); a check without one holds.
    pub health: Vec<health::Verdict>,
    /// The 95th percentile of each step as measured on its nodes (`status.stepDurations`): whether a node can
    /// finish before the maintenance window closes ([`finish`]).
    pub step_times: finish::StepTimes,
    /// The canary waves found complete (`status.waves`), from which a wave's soak runs ([`waves`]).
    pub waves: waves::Completed,
    /// The last image every selected node ran (`status.lastCompleteImage`): what a rollback goes back to.
    pub last_complete: Option<String>,
    /// The rollback under way or done (`status.rollback`, [`rollback`]): the acting spec's target is its `to`.
    pub rollback: Option<rollback::Active>,
}

impl Rollout {
    /// The rollout `name` acting on `spec`, with what its NodeVersion's `status` records for the policy: each step's
    /// measured times ([`finish::StepTimes`]), the canary waves found complete ([`waves::Completed`]), the last
    /// complete image and a rollback under way for the spec's image, which the acting spec then moves the nodes
    /// back to ([`rollback::acting`]); none without a status. No Kubernetes upgrade and no health verdicts: the
    /// caller adds those it has.
    pub fn new(name: impl Into<String>, spec: SpecState, status: Option<&shared::crd::NodeVersionStatus>) -> Rollout {
        let rollback = spec.acting().and_then(|s| rollback::Active::recorded(status, &s.target));
        Rollout {
            name: name.into(),
            spec: rollback::acting(spec, rollback.as_ref()),
            last_complete: status.and_then(|s| s.last_complete_image.clone()),
            rollback,
            kubernetes: None,
            health: Vec::new(),
            step_times: finish::StepTimes::from_status(status.map(|s| s.step_durations.as_slice()).unwrap_or_default()),
            waves: waves::Completed::from_status(status.map(|s| s.waves.as_slice()).unwrap_or_default()),
        }
    }
}

/// The spec a rollout acts on.
#[derive(Debug, Clone)]
pub enum SpecState {
    /// The current generation is valid.
    Valid(Arc<ValidSpec>),
    /// The current generation is invalid; each error names its field. Nodes in flight finish under
    /// `last_valid` (its selector, image and timeouts) and no new node starts. Without a last
    /// valid spec the rollout selects no node and touches none.
    Invalid { errors: Vec<String>, last_valid: Option<Arc<ValidSpec>> },
}

impl SpecState {
    /// The spec the rollout acts on: the current one, or the last valid one.
    pub fn acting(&self) -> Option<&Arc<ValidSpec>> {
        match self {
            SpecState::Valid(spec) => Some(spec),
            SpecState::Invalid { last_valid, .. } => last_valid.as_ref(),
        }
    }
}

/// Why something does not move: a reason and a message for humans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub reason: Reason,
    pub message: String,
}

impl Hold {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Hold { reason, message: message.into() }
    }
}

/// A node being updated, for the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub node: String,
    /// `stage`, `drain`, `reboot`, or `done` for a verified node keeping its slot while it soaks.
    pub step: Step,
    pub since: Timestamp,
    /// What its drain waits on, if it is draining and waits.
    pub waiting_on: Option<String>,
}

/// A node that failed or is blocked, with the reason and message from its annotations or its
/// assessment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub node: String,
    pub message: String,
}

/// An outdated node held back for a reason of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub node: String,
    pub hold: Hold,
}

/// Counts of a rollout's nodes; each node it selects is in exactly one of the first five, and
/// `held_back` counts the outdated nodes held back for a reason of their own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: u32,
    pub up_to_date: u32,
    pub outdated: u32,
    pub in_progress: u32,
    pub failed: u32,
    pub blocked: u32,
    pub held_back: u32,
}

/// The decision of one reconcile for one rollout.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub actions: Vec<NodeAction>,
    /// Why no (further) node of the rollout starts, if something holds the whole rollout back.
    pub hold: Option<Hold>,
    pub counts: Counts,
    pub in_flight: Vec<InFlight>,
    pub failed: Vec<Problem>,
    pub blocked: Vec<Problem>,
    /// Outdated nodes held back for a reason of their own, by name.
    pub held: Vec<Held>,
    /// Nodes the rollout selects that an older NodeVersion manages: (node, that NodeVersion).
    pub overlap: Vec<(String, String)>,
    /// An outdated node is made ready to start by this round's write (a release, an uncordon).
    pub preparing: bool,
    /// Nodes staged ahead and waiting for their turn (counted in progress, but not moving).
    pub staged: u32,
    /// With canary waves: where the rollout is in them ([`waves`]).
    pub waves: Option<waves::Progress>,
    /// A rollback this plan starts ([`rollback`]): written to `status.rollback` before any node moves back.
    pub rollback_started: Option<rollback::Active>,
    /// The one image every selected node runs, when one does (found by the caller while the rollout has not moved
    /// a node: `crate::reconciler`), recorded as `status.lastCompleteImage`.
    pub uniform_image: Option<String>,
    /// When to plan again even if nothing changes (a deadline, the end of a soak, a window).
    pub wake_at: Option<Timestamp>,
    /// Replacements: the rollout's donors and heirs, the PendingNodes of its replacements, and replaced nodes
    /// whose instance is being deleted (those whose donor is gone are listed by every rollout), each sorted.
    pub replacements: replacement::Listing,
    /// Set when the NodeVersion asks for a Kubernetes version: whether its upgrade is under way, and the nodes'
    /// kubelet versions and components hashes.
    pub kubernetes: Option<kubernetes::Progress>,
}

impl Plan {
    fn wake(&mut self, at: Option<Timestamp>) {
        if let Some(at) = at {
            self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
        }
    }

    /// Whether the rollout moves: nodes in flight (started now or before) other than staged nodes waiting for
    /// their turn, or an outdated node readied for the next round. Marking a node failed or clearing a mark moves
    /// nothing.
    pub fn moves(&self) -> bool {
        self.counts.in_progress > self.staged || self.preparing
    }
}

/// The decisions of one reconcile.
#[derive(Debug, Clone, Default)]
pub struct ClusterPlan {
    /// One plan per rollout, in the order given to [`plan`].
    pub rollouts: Vec<Plan>,
    /// Nodes no rollout selects: releases, reboots verified to their end, cordons lifted, and the
    /// opted-in nodes no NodeVersion selects (in `held`). Only its actions, `held` and `wake_at`
    /// are set.
    pub unowned: Plan,
    /// The nodes whose taint of outdated nodes the plan changes ([`taint`]), by name.
    pub taints: Vec<taint::Retaint>,
}

impl ClusterPlan {
    /// Every plan's earliest wake-up.
    pub fn wake_at(&self) -> Option<Timestamp> {
        self.rollouts.iter().chain([&self.unowned]).filter_map(|p| p.wake_at).min()
    }
}

/// Decides what to do next. See the module documentation for the order of the rules.
///
/// `rollouts` must be oldest first; each node's [`NodeView::selected_by`] indexes into it, and
/// names only rollouts with a spec to act on ([`SpecState::acting`]). `own_node` is the node the
/// controller runs on (updated last).
pub fn plan(nodes: &[NodeView], rollouts: &[Rollout], own_node: Option<&str>, now: Timestamp) -> ClusterPlan {
    plan_with(nodes, rollouts, &Fleet::default(), own_node, now)
}

/// [`plan`] with the cloud's scaling groups and PendingNodes: nodes of a known group are replaced (see
/// [`replacement`]), every other node is updated in place, under one budget and the same gates.
pub fn plan_with(
    nodes: &[NodeView],
    rollouts: &[Rollout],
    fleet: &Fleet,
    own_node: Option<&str>,
    now: Timestamp,
) -> ClusterPlan {
    let owners = pools::owners(nodes, rollouts);
    let records = replacement::Records::find(nodes, fleet);
    let assessments = assess_all(nodes, &owners, rollouts, fleet, &records, now);

    // What every rollout's budget shares: nodes no NodeVersion selects that still finish a reboot,
    // and whether a control-plane node anywhere is busy.
    let mut shared = pipeline::Shared::default();
    for ((node, owner), a) in nodes.iter().zip(&owners).zip(&assessments) {
        let busy = busy(node, *owner, a);
        if busy && !matches!(owner, pools::Owner::Rollout(_)) {
            shared.unowned_unavailable += 1;
        }
        shared.control_plane_busy |= control_plane_busy(node, *owner, a);
    }
    shared.control_plane_busy |= records.control_plane_active();

    let mut cluster = ClusterPlan::default();
    for (index, rollout) in rollouts.iter().enumerate() {
        let members: Vec<(&NodeView, &Assessment)> = nodes
            .iter()
            .zip(&owners)
            .zip(&assessments)
            .filter(|((_, owner), _)| **owner == pools::Owner::Rollout(index))
            .map(|((n, _), a)| (n, a))
            .collect();
        let overlap: Vec<(&NodeView, &str)> = nodes
            .iter()
            .zip(&owners)
            .filter(|(n, owner)| n.selected_by.contains(&index) && **owner != pools::Owner::Rollout(index))
            .filter_map(|(n, owner)| match owner {
                pools::Owner::Rollout(older) => Some((n, rollouts[*older].name.as_str())),
                _ => None,
            })
            .collect();
        let autoscaler = fleet.autoscaler_running.as_deref();
        cluster.rollouts.push(plan_rollout(
            rollout,
            &members,
            &overlap,
            &mut shared,
            &records,
            autoscaler,
            own_node,
            now,
        ));
    }
    for ((node, owner), a) in nodes.iter().zip(&owners).zip(&assessments) {
        if matches!(owner, pools::Owner::Rollout(_)) {
            continue;
        }
        cluster.unowned.actions.extend(a.action.clone());
        cluster.unowned.wake(a.wake_at);
        if opted_in_unselected(node, *owner) {
            cluster.unowned.held.push(not_selected(node));
        }
    }
    cluster.taints = taint::changes(nodes, &owners, &assessments, rollouts);
    cluster
}

/// Each node's assessment (its own progress, before gates and budgets), in the order of `nodes`.
fn assess_all(
    nodes: &[NodeView],
    owners: &[pools::Owner],
    rollouts: &[Rollout],
    fleet: &Fleet,
    records: &replacement::Records<'_>,
    now: Timestamp,
) -> Vec<Assessment> {
    let listed = replacement::Listed(nodes);
    nodes
        .iter()
        .zip(owners)
        .map(|(node, owner)| assess_node(node, *owner, rollouts, fleet, records, &listed, now))
        .collect()
}

/// One node's assessment. It reads of other nodes only what `records` says and the nodes they name (through
/// `nodes`); a node [`replacement::Records::named`] does not name reads neither.
fn assess_node(
    node: &NodeView,
    owner: pools::Owner,
    rollouts: &[Rollout],
    fleet: &Fleet,
    records: &replacement::Records<'_>,
    nodes: &dyn replacement::Lookup,
    now: Timestamp,
) -> Assessment {
    let default_policy = Policy::default();
    if let Some(operation) = &node.operation {
        return held_by_operation(node, &owner, rollouts, operation);
    }
    let replacing = node.controller.as_ref().is_ok_and(|c| c.intent.as_ref().is_some_and(|i| i.step == Step::Replace));
    let idle = node.controller.as_ref().is_ok_and(|c| c.intent.is_none());
    match (owner, replacement::Context::of(node, fleet, records, nodes)) {
        (pools::Owner::Rollout(i), None) if idle && fleet.unresolved.contains(&node.name) => {
            match rollouts[i].spec.acting() {
                Some(spec) => replacement::unresolved(node, &spec.target),
                None => assess::assess(node, Owner::Unknown, &default_policy, now),
            }
        }
        (pools::Owner::Rollout(i), Some(context)) => match rollouts[i].spec.acting() {
            Some(spec) => {
                let context = context.with_kubernetes(rollouts[i].kubernetes.as_ref());
                replacement::assess(node, &context, &spec.target, &spec.policy, now)
            }
            None => assess::assess(node, Owner::Unknown, &default_policy, now),
        },
        // No NodeVersion moves the node any more: a swap whose heir is Ready finishes, any other
        // replacement is abandoned (its new instance deleted), a gone donor's instance released.
        (pools::Owner::Nobody { reason }, Some(context)) => {
            replacement::wind_down(node, &context, reason, &default_policy, now)
                .unwrap_or_else(|| assess::assess(node, Owner::Nobody { reason }, &default_policy, now))
        }
        // A replacement in flight whose group the cloud has not told yet (a new leader's first rounds): it keeps
        // its slot and waits for the answer; it is not a step this controller does not drive.
        (_, None) if replacing && fleet.unresolved.contains(&node.name) => {
            let since = node.controller.as_ref().ok().and_then(|c| c.intent.as_ref()).map(|i| i.since);
            let mut waiting = Assessment::new(Situation::InFlight { step: Step::Replace, since: since.unwrap_or(now) });
            waiting.waiting = Some("the cloud to tell the node's scaling group (asked again shortly)".to_owned());
            waiting
        }
        // A replacement in flight finishes whoever manages the node now: its instance exists.
        (_, Some(context)) if replacing => {
            let target = node.controller.as_ref().ok().and_then(|c| c.intent.as_ref()).map(|i| i.target.as_str());
            replacement::assess(node, &context, target.unwrap_or_default(), &default_policy, now)
        }
        (owner, _) => assess_in_place(node, owner, rollouts, now),
    }
}

/// A node a NodeOp works on: no rollout acts on it (its cordon, and its intent while the NodeOp reboots it, are
/// the NodeOp's), and it is held back while outdated. It counts against its rollout's budget (see
/// [`Assessment::unavailable`]) for as long as the NodeOp works on it.
fn held_by_operation(node: &NodeView, owner: &pools::Owner, rollouts: &[Rollout], operation: &str) -> Assessment {
    let target = match owner {
        pools::Owner::Rollout(i) => rollouts[*i].spec.acting().map(|spec| spec.target.as_str()),
        pools::Owner::Nobody { .. } | pools::Owner::Unknown => None,
    };
    if target.is_some() && assess::image(node.agent.as_ref().ok()) == target {
        return Assessment::new(Situation::UpToDate);
    }
    let hold = Hold::new(Reason::NodeOperation, format!("the NodeOp {operation} works on the node"));
    Assessment::new(Situation::Outdated { eligible: false, held: Some(hold) })
}

/// How a node is assessed when no replacement concerns it: updated in place by its rollout, or wound down.
fn assess_in_place(node: &NodeView, owner: pools::Owner, rollouts: &[Rollout], now: Timestamp) -> Assessment {
    if let Some(operation) = &node.operation {
        return held_by_operation(node, &owner, rollouts, operation);
    }
    let default_policy = Policy::default();
    match owner {
        pools::Owner::Rollout(i) => match rollouts.get(i).and_then(|r| r.spec.acting()) {
            // A rollout that upgrades Kubernetes decides its nodes' kubeadm steps itself ([`kubernetes`]); to every
            // other rollout's budget and control-plane gate, such a node is busy until then.
            Some(_)
                if matches!(rollouts[i].kubernetes, Some(kubernetes::KubernetesSpec::Upgrade(_)))
                    && let Some(intent) = kubeadm_intent(node) =>
            {
                Assessment::new(Situation::InFlight { step: Step::KubeadmUpgrade, since: intent.since })
            }
            Some(spec) => assess::assess(node, Owner::Rollout { target: &spec.target }, &spec.policy, now),
            None => assess::assess(node, Owner::Unknown, &default_policy, now),
        },
        pools::Owner::Nobody { reason } => assess::assess(node, Owner::Nobody { reason }, &default_policy, now),
        pools::Owner::Unknown => assess::assess(node, Owner::Unknown, &default_policy, now),
    }
}

/// The node's intent, when it is in the kubeadm step.
fn kubeadm_intent(node: &NodeView) -> Option<&shared::protocol::Intent> {
    node.controller.as_ref().ok()?.intent.as_ref().filter(|i| i.step == Step::KubeadmUpgrade)
}

/// Whether the node takes a slot of every rollout's budget (nodes of a rollout: when unavailable; other nodes:
/// while a reboot finishes), and, if it is a control-plane node, keeps every other one from starting.
fn busy(node: &NodeView, owner: pools::Owner, a: &Assessment) -> bool {
    let busy = match owner {
        pools::Owner::Rollout(_) => a.unavailable(node),
        pools::Owner::Nobody { .. } | pools::Owner::Unknown => a.in_flight(),
    };
    // A node a NodeOp works on may be cordoned, drained or rebooted by it at any moment.
    busy || node.operation.is_some()
}

/// Rule 8 of the pipeline for one node: whether `node` is a control-plane node that keeps every other
/// control-plane start waiting, whoever manages it: busy as the budgets count it ([`busy`]), or unavailable
/// (NotReady, cordoned, in a step) even when no rollout manages it, since another control-plane node's drain and
/// reboot beside it could cost etcd its quorum.
fn control_plane_busy(node: &NodeView, owner: pools::Owner, a: &Assessment) -> bool {
    node.control_plane && (busy(node, owner, a) || a.unavailable(node))
}

/// Why a node is busy, for a hold's message.
fn why_busy(node: &NodeView, a: &Assessment) -> String {
    if let Some(operation) = &node.operation {
        return format!("the NodeOp {operation} works on it");
    }
    match &a.situation {
        Situation::InFlight { step, .. } => format!("a rollout works on it (step {step})"),
        Situation::Blocked { holds_slot: true, .. } => "a rollout's step of it is blocked".to_owned(),
        _ if !node.ready => "it is not Ready".to_owned(),
        _ if node.unschedulable => "it is cordoned".to_owned(),
        _ => "it is unavailable".to_owned(),
    }
}

/// Whether the node opts in but no NodeVersion selects it (said in the unowned plan's `held`).
fn opted_in_unselected(node: &NodeView, owner: pools::Owner) -> bool {
    node.opted_in && owner == (pools::Owner::Nobody { reason: Reason::NotSelected })
}

fn not_selected(node: &NodeView) -> Held {
    let message = "the node opts in (update.edgeless.systems/managed=true) but no NodeVersion's selector selects it";
    Held { node: node.name.clone(), hold: Hold::new(Reason::NotSelected, message) }
}

/// One rollout: Kubernetes first, then the image (while a Kubernetes upgrade is asked for and not done, it plans
/// the rollout), with the nodes' Kubernetes versions for the status. `autoscaler` says why no Kubernetes upgrade
/// may start yet (see [`Fleet::autoscaler_running`]).
#[allow(clippy::too_many_arguments)]
fn plan_rollout(
    rollout: &Rollout,
    members: &[(&NodeView, &Assessment)],
    overlap: &[(&NodeView, &str)],
    shared: &mut pipeline::Shared,
    records: &replacement::Records<'_>,
    autoscaler: Option<&str>,
    own_node: Option<&str>,
    now: Timestamp,
) -> Plan {
    let upgrade = rollout.kubernetes.as_ref().zip(rollout.spec.acting());
    let kubernetes_plan = upgrade
        .and_then(|(k, spec)| kubernetes::plan_rollout(rollout, k, spec, members, shared, autoscaler, own_node, now));
    let refused = matches!(rollout.kubernetes, Some(kubernetes::KubernetesSpec::Refused(_)));
    let active = kubernetes_plan.is_some() && !refused;
    let mut plan = kubernetes_plan
        .unwrap_or_else(|| image::plan_image_rollout(rollout, members, overlap, shared, records, own_node, now));
    plan.replacements = records.listing(members);
    if rollout.kubernetes.is_some() {
        plan.kubernetes = Some(kubernetes::Progress::of(active, members));
    }
    plan
}
