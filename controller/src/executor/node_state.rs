//! What a Node write of the plan leads to, pure: the controller annotations and `spec.unschedulable` after an
//! action ([`next_state`]), and what the action does to the node's drain ([`drain_effect`]).

use super::*;

/// What an action does to the node's drain task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainEffect {
    /// Nothing.
    None,
    /// Start it unless it runs (after the action's write, if any, succeeded).
    Start,
    /// Stop it and forget its progress (before the action's write).
    Stop,
}

/// The drain side of `kind`.
pub fn drain_effect(kind: &ActionKind) -> DrainEffect {
    match kind {
        ActionKind::Drain { .. } | ActionKind::DrainDonor { .. } | ActionKind::KeepDraining => DrainEffect::Start,
        // IMPORTANT: stop evicting before the node is uncordoned, or a drain could go on evicting
        // pods from a node that is schedulable again.
        ActionKind::Done { .. }
        | ActionKind::Fail { .. }
        | ActionKind::Block { .. }
        | ActionKind::Release
        | ActionKind::AbandonReplacement { .. }
        | ActionKind::Retire { .. } => DrainEffect::Stop,
        ActionKind::Stage { .. }
        | ActionKind::Fetch { .. }
        | ActionKind::Reboot { .. }
        | ActionKind::KubeadmUpgrade { .. }
        | ActionKind::Uncordon
        | ActionKind::Report
        | ActionKind::Replace { .. }
        | ActionKind::CreateInstance { .. }
        | ActionKind::Shield { .. }
        | ActionKind::Inherit { .. }
        | ActionKind::ReleaseInstance { .. }
        | ActionKind::Checkpoint { .. } => DrainEffect::None,
    }
}

/// The controller annotations and `spec.unschedulable` an action leads to.
pub fn next_state(
    current: &ControllerAnnotations,
    unschedulable: bool,
    action: &NodeAction,
    token: Token,
    now: Timestamp,
) -> (ControllerAnnotations, bool) {
    let mut next = current.clone();
    let mut want_unschedulable = unschedulable;
    let since = shared::protocol::truncate_to_millis(now);
    let intent = |step: Step, target: &str| Intent {
        step,
        target: target.to_owned(),
        token: token.clone(),
        since,
        boot_id_before: None,
        kubeadm: None,
        message: None,
    };
    let mut uncordon = |next: &mut ControllerAnnotations| {
        if next.cordoned_by_us {
            next.cordoned_by_us = false;
            want_unschedulable = false;
        }
    };
    match &action.kind {
        ActionKind::Stage { target } => next.intent = Some(intent(Step::Stage, target)),
        ActionKind::Fetch { target, kubeadm } => {
            next.intent = Some(Intent { kubeadm: Some(kubeadm.clone()), ..intent(Step::Fetch, target) })
        }
        ActionKind::Replace { target } => next.intent = Some(intent(Step::Replace, target)),
        ActionKind::Drain { target } | ActionKind::DrainDonor { target, .. } => {
            let step = if matches!(action.kind, ActionKind::Drain { .. }) { Step::Drain } else { Step::Replace };
            next.intent = Some(intent(step, target));
            // Someone else's cordon stays theirs: no record, so we will not lift it.
            if !unschedulable {
                next.cordoned_by_us = true;
                want_unschedulable = true;
            }
        }
        ActionKind::Reboot { target, boot_id_before } => {
            next.intent = Some(Intent { boot_id_before: Some(boot_id_before.clone()), ..intent(Step::Reboot, target) })
        }
        ActionKind::KubeadmUpgrade { target, kubeadm } => {
            next.intent = Some(Intent { kubeadm: Some(kubeadm.clone()), ..intent(Step::KubeadmUpgrade, target) })
        }
        ActionKind::Done { target } => {
            next.intent = Some(intent(Step::Done, target));
            uncordon(&mut next);
        }
        ActionKind::Fail { target } | ActionKind::Block { target } => {
            let step = if matches!(action.kind, ActionKind::Fail { .. }) { Step::Failed } else { Step::Blocked };
            next.intent = Some(Intent {
                message: Some(format!("{}: {}", action.reason, action.message)),
                ..intent(step, target)
            });
            uncordon(&mut next);
        }
        ActionKind::Release | ActionKind::AbandonReplacement { .. } => {
            next.intent = None;
            uncordon(&mut next);
        }
        ActionKind::Uncordon => uncordon(&mut next),
        // Not the node's controller annotations (the group plumbing applies them).
        ActionKind::KeepDraining
        | ActionKind::Report
        | ActionKind::CreateInstance { .. }
        | ActionKind::Shield { .. }
        | ActionKind::Inherit { .. }
        | ActionKind::Retire { .. }
        | ActionKind::ReleaseInstance { .. }
        | ActionKind::Checkpoint { .. } => {}
    }
    (next, want_unschedulable)
}
