//! Staging ahead: which outdated nodes updated in place are staged (or their Kubernetes components fetched) ahead of
//! their turn, outside `maxUnavailable` and within `spec.rollout.maxStaging`, for every flow that stages ahead
//! ([`Flow::stages_ahead`]).
//!
//! # Guarantees
//! - `maxStaging` (and the canary wave's allowance) is never exceeded by a start: nodes in the stage step count
//!   until their turn.
//! - The nodes staged ahead never keep the nodes they wait for from staging, for ever: workers the control plane
//!   (rule 9), and during a rollback, which moves the control plane last, control-plane nodes the workers. See
//!   [`stage_ahead`].

use super::assess::{Assessment, Situation};
use super::pipeline::{Bounds, Flow, Pool, Selection, Start, name_some, waiting_for_control_plane};
use super::{ActionKind, Hold, NodeAction, NodeView, Plan, Reason, ValidSpec};

/// Stages ahead the next in-place candidates within the free slots of `maxStaging` (and of the canary wave, rule 12).
///
/// IMPORTANT: the workers wait for the control plane (rule 9), so a control-plane node that still has to be staged
/// keeps a slot: were the slots all taken by workers staged ahead, each would wait for that node and that node for
/// a slot, for ever (a target change while a control-plane node reboots into the old one left it so). Workers take
/// only the slots beyond those the control plane still needs; if it needs more than are free, the last workers in
/// order staged ahead yield theirs to a control-plane node that could stage now (released, to be staged again after
/// the control plane); to one held back they yield nothing, it might not stage for long. During a rollback the
/// sides swap: control-plane nodes wait for the workers ([`Pool::leaders_pending`]).
pub(super) fn stage_ahead<'a>(
    pool: &impl Pool<'a>,
    spec: &ValidSpec,
    flow: &Flow,
    bounds: &Bounds<'_>,
    selection: &mut Selection<'a>,
) {
    let allowed = spec.policy.max_staging.unwrap_or(spec.policy.max_unavailable).resolve(pool.size());
    let mut free = allowed.saturating_sub(pool.staging_count());
    if let Some(wave) = bounds.wave {
        // Within the wave: the nodes staging or staged count, and the replacements just started.
        let replaced = selection.starts.iter().filter(|(_, how)| *how == Start::Replace).count() as u32;
        free = free.min(wave.saturating_sub(pool.staging_count() + replaced));
    }
    let rolling_back = pool.rolling_back();
    // Whether a node is of the side the other waits for.
    let leads = |node: &NodeView| node.control_plane != rolling_back;
    // Outside a rollback, the control-plane members pending (`Pool::control_plane_pending`).
    let leaders = pool.leaders_pending();
    let mut needed = leaders_to_stage(&leaders, flow);
    let mut short = 0;
    for node in pool.in_place_candidates() {
        if leads(node) {
            if free == 0 {
                // A node the others wait for could stage now, but every slot is taken.
                short += 1;
                continue;
            }
            needed = needed.saturating_sub(1);
        } else if free <= needed {
            if free > 0 && selection.hold.is_none() && !rolling_back {
                // Kept from staging for the control plane: said, as a staged worker's turn would be.
                selection.hold = Some(waiting_for_control_plane(&leaders, &flow.described()));
            }
            break;
        }
        free -= 1;
        selection.starts.push((node, Start::InPlace));
    }
    if short > 0 {
        let starting = |n: &NodeView| selection.starts.iter().any(|(s, _)| s.name == n.name);
        let followers = pool.staging_followers();
        let yields: Vec<(&'a NodeView, bool)> =
            followers.into_iter().rev().filter(|(n, _)| !starting(n)).take(short).collect();
        if !yields.is_empty() && selection.hold.is_none() {
            let names = yields.iter().map(|(n, _)| n.name.clone()).collect();
            let (waiting, waited_for) = sides(rolling_back);
            let message = format!(
                "maxStaging is taken by {waiting} staged ahead, which wait for {waited_for}: {} yield(s) a slot",
                name_some(names)
            );
            selection.hold = Some(Hold::new(Reason::StagingSlotYielded, message));
        }
        selection.yields = yields;
    }
}

/// The side that waits and the side it waits for, for messages (the side that waits is the control plane in a
/// rollback).
fn sides(rolling_back: bool) -> (&'static str, &'static str) {
    if rolling_back {
        ("control-plane nodes", "the workers (a rollback moves the control plane last)")
    } else {
        ("workers", "the control plane")
    }
}

/// How many of `leaders`, the members the others wait for ([`Pool::leaders_pending`]), still have to be staged for
/// the flow's target: those outdated and updated in place, and those still finishing a step for another target (a
/// reboot into the image before a target change).
fn leaders_to_stage(leaders: &[(&NodeView, &Assessment)], flow: &Flow) -> u32 {
    let target = flow.target();
    leaders
        .iter()
        .filter(|(node, a)| match a.situation {
            Situation::Outdated { .. } => !a.replace,
            Situation::InFlight { .. } => {
                let intent = node.controller.as_ref().ok().and_then(|c| c.intent.as_ref());
                !a.replace && intent.is_some_and(|i| i.target != target)
            }
            _ => false,
        })
        .count() as u32
}

/// Releases the nodes that yield their slot of `maxStaging` to the nodes they wait for ([`stage_ahead`]): each counted
/// outdated again in `plan`, with a `StagingSlotYielded` release. A control-plane node yields only in a rollback.
pub(super) fn release_yields(plan: &mut Plan, flow: &Flow, yields: Vec<(&NodeView, bool)>) {
    for (node, staged) in yields {
        plan.in_flight.retain(|f| f.node != node.name);
        plan.counts.in_progress = plan.counts.in_progress.saturating_sub(1);
        plan.counts.outdated += 1;
        if staged {
            plan.staged = plan.staged.saturating_sub(1);
        }
        let message = format!(
            "releasing the node: it waits for {}, which need its slot of maxStaging to stage {}; it is staged again \
             after them",
            sides(node.control_plane).1,
            flow.described()
        );
        plan.actions.push(NodeAction {
            node: node.name.clone(),
            kind: ActionKind::Release,
            reason: Reason::StagingSlotYielded,
            message,
        });
    }
}
