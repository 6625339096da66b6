//! The pipeline: which node moves next, and why every other one waits.
//!
//! Every flow that moves a rollout's nodes contributes its *candidates* (eligible outdated nodes, each with how it
//! starts) and a [`Flow`] (what it moves them to, and the action that starts one): the image in place, the image by
//! replacement through a scaling group ([`super::replacement`]), and the Kubernetes upgrade with kubeadm
//! ([`super::kubernetes`]). One function ([`select`]), after one set of rollout-wide gates ([`open`]), decides
//! for all of them, with one budget that counts every disrupted node whichever flow (or NodeOp) disrupted it.
//! The incremental [`Planner`](super::incremental::Planner) runs the same two functions over its indexes (a
//! [`Pool`] is the members as [`select`] reads them).
//!
//! # The gates, in order
//! Before the pipeline, each node's own progress ([`super::assess`]) holds back a node for a reason of its own:
//! no agent report (the agent policy), NotReady, do not disrupt (`DoNotDisrupt`), the workloads of its pods not whole
//! again with `settleWorkloads` (`WaitingForWorkloads`, `crate::settle`), cordoned by someone else, its annotations
//! malformed, another
//! owner (an older NodeVersion: `SelectorOverlap`; a NodeOp: `NodeOperation`), its group's image not known. Then,
//! for the rollout as a whole, the first closed gate is the rollout's hold ([`open`], each gate in
//! [`super::gates`]):
//! 1. **spec valid** (`InvalidSpec`): nodes in flight finish under the last valid spec, nothing new starts;
//! 2. **paused** (`Paused`);
//! 3. **maintenance windows and exclusions** (`OutsideMaintenanceWindow`: no window open; `MaintenanceExclusion`:
//!    inside a freeze);
//! 4. **failure budget** (`FailureBudgetExhausted`; with `onFailure: Rollback` the rollback starts here,
//!    `RollbackStarted`, or has failed, `RollbackFailed`: [`super::rollback`]), then **health checks**
//!    (`HealthCheckFailing`: a check of `spec.rollout.healthChecks` not evaluated yet, false, or true for less than
//!    its `for`; `HealthCheckTimedOut`: one false longer than its `timeout`, the rollout stopped as failed until it
//!    passes again), decided by
//!    [`super::health::hold`] from the verdicts the background evaluation (`crate::health_checks`) gives the
//!    rollout; staging ahead waits too, as behind every gate;
//! 5. **drain timeout with `onDrainTimeout: Stop`** (`StoppedOnDrainTimeout`);
//! 6. **cluster-autoscaler** (`WaitingForAutoscaler`), for flows whose new nodes must not race it (a Kubernetes
//!    upgrade: a node the autoscaler adds meanwhile would join with the old components).
//!
//! Then, node by node in order — control-plane nodes first, then workers zone by zone and by name within a zone, the
//! controller's own node last ([`order`]; during a rollback its reverse, the control plane last:
//! [`super::rollback::cmp`]) — [`select`] applies rules 7 to 9 with the one function every flow and
//! every NodeOp calls for them ([`super::admission::Admission::check`]), then rule 10:
//! 7. **the budget** (`UnavailableNodes`): `maxUnavailable` over the rollout's members, minus every member
//!    unavailable for any reason (in any flow's step, NotReady, cordoned, worked on by a NodeOp) and every node no
//!    rollout manages that is still busy; and within it **the zone's share** (`ZoneUnavailable`):
//!    `maxUnavailablePerZone` over the members of the node's zone that are unavailable (a full zone is passed
//!    over for the next one);
//! 8. **one control-plane node at a time** (`WaitingForControlPlane`), across every rollout, flow and NodeOp: none
//!    starts while another control-plane node is in flight, unavailable, NotReady, cordoned or worked on by a
//!    NodeOp, whoever manages it, or while a control-plane replacement is in progress (one predicate,
//!    `control_plane_busy` in `super`, for the plan, the incremental planner and the NodeOps);
//! 9. **control plane first** (`WaitingForControlPlane`): no worker starts while a control-plane node of the
//!    rollout is pending in the flow's sense ([`Pool::control_plane_pending`]: not yet updated for an image, not
//!    yet running the version for Kubernetes, since a kubelet may not be newer than an API server);
//! 10. **`maxSurge`** (`SurgeExhausted`) for nodes replaced: a new instance per replacement in flight, and no
//!     control-plane replacement beside a worker's (nor a worker's beside a control-plane one's);
//! 11. **finish before the window closes** (`CannotFinishInWindow`): a node whose disruption, at the 95th percentile
//!     of its steps' measured times, would end after the open maintenance period does not start
//!     ([`super::finish`]); staging ahead goes on;
//! 12. **canary waves** (`WaveSoaking`): with `spec.rollout.waves`, no more nodes start (staged ahead or
//!     disrupted) than the current wave has left, and none while a complete wave soaks ([`super::waves`]).
//!
//! A flow may narrow its candidates before [`select`] (Kubernetes: while the API server is not upgraded, only
//! the first control-plane node takes its turn, alone: `WaitingForApiServer`; the others still fetch ahead), never
//! widen them. Nodes that are part of a
//! replacement in flight (a heir's own Kubernetes upgrade) are not candidates: their donor holds the slots.
//!
//! NodeOps ([`crate::nodeop`]) keep the same gates in the same order (`crate::nodeop::start`, numbered as here; rules
//! 11 and 12 are a rollout's own),
//! read from [`super::budgets`] (through [`crate::disruption`], with the cloud's view the rollouts were planned
//! with): the one start order ([`start_order`]), the node's own holds with the same reasons (do not disrupt
//! included: its pods are looked at just before a start, as the rollouts' executor does), their `concurrency` and
//! then the slots of the rollouts' budgets and zone shares (rule 7, a joining heir counted as extra capacity as
//! here), rule 8 naming the busy control-plane nodes to them exactly as it counts them here, and rule 9 over the
//! NodeOp's own control-plane nodes. Their nodes count as unavailable in every rollout's budget.

use super::admission::{Admission, Held};
use super::assess::{Assessment, Situation};
use super::finish::Deadline;
use super::gates;
pub(super) use super::members::{Members, Pool, control_plane_pending, order, staging_barrier, yields};
pub(crate) use super::members::{Order, start_order};
use super::rollback;
use super::waves;
use super::{ActionKind, Hold, InFlight, NodeAction, NodeView, Plan, Reason, Rollout, ValidSpec, budget};
use jiff::Timestamp;
use shared::protocol::{KubeadmIntent, Step};
use std::collections::{BTreeMap, BTreeSet};

/// What a flow moves nodes to, and how it starts one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Flow {
    /// The image, in place or (for a node of a known scaling group) by replacement.
    Image { target: String },
    /// The Kubernetes version with kubeadm, from the `components` ConfigMap; `apply`: the API server is not
    /// upgraded yet, so the disruptive start is the first control-plane node's, which runs `kubeadm upgrade apply`.
    Kubernetes { version: String, apply: bool, components: String },
}

impl Flow {
    /// What the flow moves nodes to, for messages.
    pub(super) fn described(&self) -> String {
        match self {
            Flow::Image { target } => target.clone(),
            Flow::Kubernetes { version, .. } => format!("Kubernetes {version}"),
        }
    }

    /// What the flow moves nodes to, as an intent names it: the image, or the Kubernetes version.
    pub(super) fn target(&self) -> &str {
        match self {
            Flow::Image { target } => target,
            Flow::Kubernetes { version, .. } => version,
        }
    }

    /// Whether the flow stages its in-place nodes ahead of their turn, outside the budget: the image (its
    /// download and write by the host's updater do not disrupt the node), and the Kubernetes upgrade (its
    /// components fetched and verified, `intent=fetch`, installed only in the kubeadm step). A replacement has
    /// nothing to stage (its new instance is created once the donor's turn comes).
    fn stages_ahead(&self) -> bool {
        matches!(self, Flow::Image { .. } | Flow::Kubernetes { .. })
    }

    /// The step, action, reason and message that start a node.
    fn start(&self, start: Start) -> (Step, ActionKind, Reason, String) {
        match self {
            Flow::Image { target } => match start {
                Start::Replace => (
                    Step::Replace,
                    ActionKind::Replace { target: target.clone() },
                    Reason::ReplacementStarted,
                    format!("replacing the node by a new one with {target}"),
                ),
                Start::InPlace => (
                    Step::Stage,
                    ActionKind::Stage { target: target.clone() },
                    Reason::StageRequested,
                    format!("staging {target} ahead of the node's turn"),
                ),
                Start::Staged => (
                    Step::Drain,
                    ActionKind::Drain { target: target.clone() },
                    Reason::DrainStarted,
                    format!("{target} is staged; the node's turn: cordoning and draining"),
                ),
            },
            Flow::Kubernetes { version, components, .. } if start == Start::InPlace => (
                Step::Fetch,
                ActionKind::Fetch {
                    target: version.clone(),
                    kubeadm: KubeadmIntent { components: components.clone(), role: None },
                },
                Reason::FetchRequested,
                format!("fetching and verifying the components of Kubernetes {version} ahead of the node's turn"),
            ),
            Flow::Kubernetes { version, apply, .. } => {
                let message = if *apply {
                    format!(
                        "its components are fetched; the node's turn: cordoning and draining before upgrading the \
                         control plane to Kubernetes {version} with kubeadm upgrade apply"
                    )
                } else {
                    format!(
                        "its components are fetched; the node's turn: cordoning and draining before the Kubernetes \
                         upgrade to {version}"
                    )
                };
                (Step::Drain, ActionKind::Drain { target: version.clone() }, Reason::KubernetesUpgradeStarted, message)
            }
        }
    }
}

/// How a selected node starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Start {
    /// The flow's own start of a node updated in place: staged (image) or its components fetched (Kubernetes) ahead
    /// of its turn, outside the budget.
    InPlace,
    /// A node staged (or fetched) ahead: its turn, cordoned and drained (it takes a slot of the budget from here).
    Staged,
    /// Replaced by a new instance of its scaling group.
    Replace,
}

/// What [`open`] reads of a flow's members: how many are blocked by their drain (rule 5), and how many are staged (or
/// fetched) and waiting for their turn, which keep the gates asked when no member is outdated any more.
pub(super) fn waiting(members: &[(&NodeView, &Assessment)]) -> (usize, u32) {
    let drain_timeouts =
        members.iter().filter(|(_, a)| matches!(a.situation, Situation::Blocked { by_drain: true, .. })).count();
    let staged = members.iter().filter(|(_, a)| matches!(a.situation, Situation::Staging { eligible: true, .. }));
    (drain_timeouts, staged.count() as u32)
}

/// Gates 1–6 of the module docs for `rollout`, whose members are summarized in `plan`: returns the spec to select
/// under when every gate is open and a member is outdated or staged and waiting for its turn (`staged`);
/// otherwise `plan.hold` says why not, if anything. `autoscaler` says why the flow's starts must wait for the
/// cluster-autoscaler (`None`: they need not).
pub(super) fn open<'r>(
    rollout: &'r Rollout,
    plan: &mut Plan,
    flow: Option<&Flow>,
    (drain_timeouts, staged): (usize, u32),
    autoscaler: Option<&str>,
    now: Timestamp,
) -> Option<&'r ValidSpec> {
    let Some(spec) = rollout.spec.acting() else {
        // Without a spec to act on the rollout selects no node; the gate says why.
        plan.hold = gates::closed(rollout, None, None, &plan.counts, 0, None, now).map(|(hold, _)| hold);
        return None;
    };
    let described = flow.map(Flow::described);
    // Where the rollout is in its canary waves (rule 12), for the status whatever the gates say.
    let c = plan.counts;
    let moving = plan.in_flight.iter().filter(|f| !matches!(f.step, Step::Stage | Step::Fetch)).count() as u32;
    let tally = waves::Tally { total: c.total, done: c.up_to_date + c.failed + c.blocked, moving };
    let target = described.as_deref().unwrap_or(&spec.target);
    // A rollback goes back to an image every node ran: canary waves, which prove a new image, do not hold it
    // (`super::rollback`).
    let rolling_back = rollout.rollback.is_some() && flow.is_none();
    plan.waves =
        if rolling_back { None } else { waves::progress(&spec.policy.waves, tally, &rollout.waves, target, now) };
    match gates::closed(rollout, Some(spec), described.as_deref(), &plan.counts, drain_timeouts, autoscaler, now) {
        // An invalid spec is said even when nothing is outdated, and so is a rollback that starts or fails (the
        // last node the budget allowed may have been the last outdated one); the other gates matter only when
        // something would start.
        Some((hold, wake))
            if plan.counts.outdated > 0
                || staged > 0
                || matches!(hold.reason, Reason::InvalidSpec | Reason::RollbackStarted | Reason::RollbackFailed) =>
        {
            if hold.reason == Reason::RollbackStarted {
                // Recorded in the status before any node moves back (`super::rollback`).
                plan.rollback_started = rollout.last_complete.clone().map(|to| rollback::Active {
                    from: spec.target.clone(),
                    to,
                    since: now,
                });
            }
            plan.hold = Some(hold);
            plan.wake(wake);
            None
        }
        _ if plan.counts.outdated == 0 && staged == 0 => {
            if let Some(active) = rollout.rollback.as_ref().filter(|_| flow.is_none()) {
                let c = plan.counts;
                if c.total > 0 && c.up_to_date == c.total {
                    // The rollback is done: nothing more starts until spec.image changes.
                    let message = format!(
                        "rolled back from {} to {}: all {} node(s) run {} again; change spec.image to roll out again",
                        active.from, active.to, c.total, active.to
                    );
                    plan.hold = Some(Hold::new(Reason::RolledBack, message));
                }
            }
            None
        }
        _ => {
            plan.wake(gates::next_change(&spec.policy, now));
            if let Some((hold, until)) = plan.waves.as_ref().and_then(waves::Progress::hold) {
                // Rule 12: the wave soaks; nothing starts, staging ahead included.
                plan.hold = Some(hold);
                plan.wake(Some(until));
                return None;
            }
            Some(spec)
        }
    }
}

/// What bounds a rollout's starts beside the budget: the time left in the maintenance window (rule 11) and the
/// nodes its canary wave has left (rule 12).
pub(super) struct Bounds<'a> {
    pub deadline: Deadline<'a>,
    /// How many more nodes may start (None: no limit from the waves).
    pub wave: Option<u32>,
}

impl<'a> Bounds<'a> {
    /// The bounds of `rollout` acting on `spec`, from its `plan` so far (after [`open`]), at `now`.
    pub(super) fn of(rollout: &'a Rollout, spec: &ValidSpec, plan: &Plan, now: Timestamp) -> Bounds<'a> {
        Bounds {
            deadline: Deadline::new(&spec.policy, &rollout.step_times, now),
            wave: plan.waves.as_ref().and_then(waves::Progress::allowance),
        }
    }

    /// No bounds (tests).
    #[cfg(test)]
    pub(super) fn none(times: &'a super::finish::StepTimes) -> Bounds<'a> {
        Bounds { deadline: Deadline::none(times), wave: None }
    }
}

/// Starts the selected nodes with the flow's action: each counted in flight (a staged node was already). Releases
/// the workers that yield their staging slot to the control plane: each counted outdated again.
pub(super) fn start(plan: &mut Plan, flow: &Flow, selected: Selection<'_>, now: Timestamp) {
    if let Some(hold) = &selected.hold {
        for node in &selected.waiting_for_control_plane {
            if let Some(f) = plan.in_flight.iter_mut().find(|f| f.node == node.name) {
                let word = if f.step == Step::Fetch { "fetched" } else { "staged" };
                f.waiting_on = Some(format!("its turn: {word}, {}", hold.message));
            }
        }
    }
    plan.hold = selected.hold;
    super::staging::release_yields(plan, flow, selected.yields);
    for (node, how) in selected.starts {
        let (step, kind, reason, message) = flow.start(how);
        let entry = InFlight { node: node.name.clone(), step, since: now, waiting_on: None };
        match plan.in_flight.iter_mut().find(|f| f.node == node.name).filter(|_| how == Start::Staged) {
            Some(staged) => {
                *staged = entry;
                plan.staged = plan.staged.saturating_sub(1);
            }
            None => {
                plan.counts.outdated -= 1;
                plan.counts.in_progress += 1;
                plan.in_flight.push(entry);
            }
        }
        plan.actions.push(NodeAction { node: node.name.clone(), kind, reason, message });
    }
}

/// How many names a hold message lists before it says "and N more".
const MAX_NAMED: usize = 5;

/// What the rollouts of one plan share, updated as each one selects.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Shared {
    /// A control-plane node (of any rollout, or of none) is in flight or unavailable.
    pub control_plane_busy: bool,
    /// Nodes no rollout selects that still hold a slot (a reboot finishing): every rollout counts
    /// them, since the node was some rollout's.
    pub unowned_unavailable: u32,
}

/// What bounds replacements while one rollout selects.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Surge {
    /// Instances the rollout may still add (`maxSurge` minus those its replacements hold).
    pub free: u32,
    /// The `maxSurge` allowance, for messages.
    pub allowed: u32,
    /// A control-plane replacement is in progress: workers wait.
    pub control_plane_active: bool,
    /// A worker replacement is in progress: no control-plane node is replaced beside it.
    pub worker_active: bool,
    /// An instance of a replacement is joining or being deleted: a taken surge frees up on its own.
    pub moving: bool,
}

/// The nodes to start (each with how), and why not more.
pub(super) struct Selection<'a> {
    pub starts: Vec<(&'a NodeView, Start)>,
    pub hold: Option<Hold>,
    /// Nodes staged ahead (each with whether it is staged) released so that a node they wait for can stage in their
    /// slot of `maxStaging` ([`super::staging`]).
    pub yields: Vec<(&'a NodeView, bool)>,
    /// Workers staged ahead whose turn waits for the control plane (rule 9), not for a slot.
    pub waiting_for_control_plane: Vec<&'a NodeView>,
}

/// Picks the nodes to start among the rollout's members in `pool`: the disruptive starts under the budget and the
/// control-plane rules (rules 7–10), then, for a flow that stages ahead, the next nodes staged within `maxStaging`.
pub(super) fn select<'a>(
    pool: &impl Pool<'a>,
    spec: &ValidSpec,
    flow: &Flow,
    (shared, surge): (&mut Shared, &mut Surge),
    bounds: &Bounds<'_>,
) -> Selection<'a> {
    let mut selection =
        Selection { starts: Vec::new(), hold: None, yields: Vec::new(), waiting_for_control_plane: Vec::new() };
    disrupt(pool, spec, flow, (shared, surge), bounds, &mut selection);
    if flow.stages_ahead() {
        super::staging::stage_ahead(pool, spec, flow, bounds, &mut selection);
    }
    selection
}

/// The starts that disrupt a node (rules 7–10): a staged node's turn or a replacement (a flow that stages ahead),
/// or the flow's in-place start (one that does not), in start order.
fn disrupt<'a>(
    pool: &impl Pool<'a>,
    spec: &ValidSpec,
    flow: &Flow,
    (shared, surge): (&mut Shared, &mut Surge),
    bounds: &Bounds<'_>,
    selection: &mut Selection<'a>,
) {
    let stages = flow.stages_ahead();
    let mut surge_taken = false;
    let candidates: Box<dyn Iterator<Item = (&'a NodeView, Start)> + '_> = match (stages, surge.free) {
        (true, 0) => {
            // No replaced node can start: only the staged ones are read.
            surge_taken = pool.any_replaced_candidate();
            Box::new(pool.staged_candidates().map(|n| (n, Start::Staged)))
        }
        (true, _) => Box::new(in_order(
            pool.staged_candidates().map(|n| (n, Start::Staged)),
            pool.replaced_candidates().map(|n| (n, Start::Replace)),
            pool_order(pool),
        )),
        (false, 0) => {
            // Had it read the replaced ones, it would have passed every one of them whenever the surge matters below
            // (nothing started, no hold).
            surge_taken = pool.any_replaced_candidate();
            Box::new(pool.in_place_candidates().map(|n| (n, Start::InPlace)))
        }
        (false, _) => {
            Box::new(pool.candidates().map(|(n, replace)| (n, if replace { Start::Replace } else { Start::InPlace })))
        }
    };
    let mut candidates = candidates.peekable();
    if candidates.peek().is_none() {
        if surge_taken {
            surge_hold(pool, surge, selection);
        }
        return;
    }

    let allowed = spec.policy.max_unavailable.resolve(pool.size());
    let mut slots = budget::free_slots(allowed, pool.unavailable_count() + shared.unowned_unavailable);
    if let Some(wave) = bounds.wave {
        // Rule 12: no more than the canary wave has left (the wave says so in the status; no hold).
        slots = slots.min(wave);
        if slots == 0 {
            return;
        }
    }
    if slots == 0 {
        if !pool.any_in_flight() {
            // Nothing is being updated, yet nothing may start: nodes down, cordoned for other
            // reasons or holding a slot take the whole budget. Say which, or it just looks stuck.
            let mut names: Vec<String> = pool
                .unavailable()
                .iter()
                .map(|(n, a)| {
                    let why = if a.in_flight() {
                        "unreadable intent"
                    } else if !n.ready {
                        "NotReady"
                    } else {
                        "cordoned"
                    };
                    format!("{} ({why})", n.name)
                })
                .collect();
            if shared.unowned_unavailable > 0 {
                names
                    .push(format!("{} node(s) no NodeVersion selects, finishing a reboot", shared.unowned_unavailable));
            }
            let message = format!(
                "maxUnavailable ({allowed}) is taken by nodes unavailable for other reasons: {}",
                name_some(names)
            );
            selection.hold = Some(Hold::new(Reason::UnavailableNodes, message));
        }
        return;
    }

    let control_plane_pending = pool.control_plane_pending();
    let mut control_plane_waits = false;
    // Rules 7 to 9 (`super::admission`), the same for every flow and for the NodeOps; within the budget, the zone's
    // share counted over the rollout's unavailable members.
    let mut admission = Admission {
        slots: Some(slots),
        per_zone: spec.policy.max_unavailable_per_zone,
        zones: BTreeMap::new(),
        control_plane_busy: shared.control_plane_busy.then(|| "another control-plane node is busy".to_owned()),
        control_plane_first: (!control_plane_pending.is_empty()).then(|| "a control-plane node is pending".to_owned()),
    };
    if admission.per_zone.is_some() {
        for (n, _) in pool.unavailable() {
            *admission.zones.entry(n.zone.clone().unwrap_or_default()).or_default() += 1;
        }
    }
    let mut full_zones: BTreeSet<String> = BTreeSet::new();
    let staging_first = if stages { pool.first_staging() } else { None };
    let mut too_late: Option<Hold> = None;
    while let Some((node, start)) = candidates.next() {
        if start == Start::Staged
            && staging_first.as_ref().is_some_and(|first| pool.cmp_order(first, &order(node, pool.own_node())).is_lt())
        {
            // A node earlier in the order is still staging: it takes its turn first (it is moving, no hold). A
            // replacement has nothing to stage and does not wait for it.
            continue;
        }
        match admission.check(node.control_plane, node.zone.as_deref(), false) {
            Ok(()) => {}
            Err(Held::NoSlot) => break,
            Err(Held::ZoneFull { zone, .. }) => {
                full_zones.insert(zone);
                continue;
            }
            Err(Held::ControlPlaneBusy(_)) => {
                control_plane_waits = true;
                continue;
            }
            Err(Held::ControlPlaneFirst(_)) => {
                selection.hold = Some(waiting_for_control_plane(&control_plane_pending, &flow.described()));
                // The staged workers from here on wait for the control plane, not for a slot: each says so.
                let rest = std::iter::once((node, start)).chain(candidates.by_ref());
                selection.waiting_for_control_plane =
                    rest.filter(|(n, how)| *how == Start::Staged && !n.control_plane).map(|(n, _)| n).collect();
                break;
            }
        }
        // Rule 10, the replacement's own: a new instance within `maxSurge`.
        let replace = start == Start::Replace;
        if replace && (surge.free == 0 || (node.control_plane && surge.worker_active)) {
            surge_taken |= surge.free == 0;
            continue;
        }
        if !node.control_plane && surge.control_plane_active {
            selection.hold = Some(Hold::new(
                Reason::WaitingForControlPlane,
                "workers wait until the replacement of a control-plane node is done (its old instance deleted)",
            ));
            break;
        }
        // Rule 11: it can finish before the maintenance window closes (`super::finish`).
        if let Err(hold) = bounds.deadline.check(&node.name, flow, start) {
            too_late.get_or_insert(hold);
            continue;
        }
        admission.take(node.control_plane, node.zone.as_deref(), false, String::new);
        shared.control_plane_busy |= node.control_plane;
        if replace {
            surge.free -= 1;
            surge.control_plane_active |= node.control_plane;
            surge.worker_active |= !node.control_plane;
        }
        selection.starts.push((node, start));
    }
    if selection.starts.is_empty() && selection.hold.is_none() {
        // Every node that had a slot would end past the window's close.
        selection.hold = too_late;
    }
    if control_plane_waits && selection.starts.is_empty() && selection.hold.is_none() && !pool.any_in_flight() {
        // Nothing of the rollout moves, and a control-plane node of another flow, rollout or NodeOp keeps it so.
        selection.hold = Some(Hold::new(
            Reason::WaitingForControlPlane,
            "control-plane nodes go one at a time, and another control-plane node is busy (being updated, NotReady, \
             cordoned, or worked on by a NodeOp)",
        ));
    }
    if !full_zones.is_empty() && selection.starts.is_empty() && selection.hold.is_none() && !pool.any_in_flight() {
        // Nothing of the rollout moves, and only zones whose unavailable nodes take `maxUnavailablePerZone` keep it so.
        let named: Vec<String> =
            full_zones.iter().map(|z| if z.is_empty() { "(no zone)".to_owned() } else { z.clone() }).collect();
        let message = format!(
            "maxUnavailablePerZone ({}) is taken in zone(s) {} by nodes unavailable for other reasons",
            admission.per_zone.unwrap_or_default(),
            name_some(named)
        );
        selection.hold = Some(Hold::new(Reason::ZoneUnavailable, message));
    }
    if surge_taken {
        surge_hold(pool, surge, selection);
    }
}

/// When nothing moves and only the instances of replacements that cannot finish keep it so: says it.
fn surge_hold<'a>(pool: &impl Pool<'a>, surge: &Surge, selection: &mut Selection<'a>) {
    let busy = surge.moving || pool.any_in_flight();
    if selection.starts.is_empty() && selection.hold.is_none() && !busy {
        let message = format!(
            "maxSurge ({}) is taken by replacements that hold an instance (a donor blocked or an instance being deleted)",
            surge.allowed
        );
        selection.hold = Some(Hold::new(Reason::SurgeExhausted, message));
    }
}

/// Whether a member of the pool goes no later than another, in the pool's order.
fn pool_order<'a, 'p>(pool: &'p impl Pool<'a>) -> impl Fn(&NodeView, &NodeView) -> bool + 'p {
    move |x, y| pool.cmp_nodes(x, y).is_le()
}

/// Two sequences in the pool's order merged into one, lazily.
fn in_order<'a, T: Copy>(
    a: impl Iterator<Item = (&'a NodeView, T)>,
    b: impl Iterator<Item = (&'a NodeView, T)>,
    no_later: impl Fn(&NodeView, &NodeView) -> bool,
) -> impl Iterator<Item = (&'a NodeView, T)> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    std::iter::from_fn(move || match (a.peek(), b.peek()) {
        (Some((x, _)), Some((y, _))) => {
            if no_later(x, y) {
                a.next()
            } else {
                b.next()
            }
        }
        (Some(_), None) => a.next(),
        (None, _) => b.next(),
    })
}

/// Workers wait for the control plane; a control-plane node that is itself held back is named, so
/// that a stalled control plane never stalls every worker silently.
pub(super) fn waiting_for_control_plane(pending: &[(&NodeView, &Assessment)], target: &str) -> Hold {
    let held: Vec<String> = pending
        .iter()
        .filter_map(|(n, a)| match &a.situation {
            Situation::Outdated { held: Some(hold), .. } | Situation::Staging { held: Some(hold), .. } => {
                Some(format!("{} ({}: {})", n.name, hold.reason, hold.message))
            }
            Situation::Blocked { message, .. } | Situation::Failed { message } => {
                Some(format!("{} ({message})", n.name))
            }
            Situation::UpToDate
            | Situation::Outdated { held: None, .. }
            | Situation::Staging { held: None, .. }
            | Situation::InFlight { .. } => None,
        })
        .collect();
    let mut message = format!("workers wait until every control-plane node runs {target}");
    if !held.is_empty() {
        message.push_str(&format!("; held back: {}", name_some(held)));
    }
    Hold::new(Reason::WaitingForControlPlane, message)
}

/// The first few of `names`, sorted, and how many more.
pub(super) fn name_some(mut names: Vec<String>) -> String {
    names.sort();
    let more = names.len().saturating_sub(MAX_NAMED);
    names.truncate(MAX_NAMED);
    let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!("{}{tail}", names.join(", "))
}
