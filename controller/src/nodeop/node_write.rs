//! The Node write of a NodeOp's action: its mark, its reboot intent and the cordon it owns.

use super::decide::Action;
use jiff::Timestamp;
use shared::protocol::{ControllerAnnotations, Intent, Step, Token};

/// The controller annotations, the mark and `spec.unschedulable` that `action` leads to, for the NodeOp of mark
/// `key`; `None` when the action writes nothing on the node.
pub fn next_node_state(
    current: &ControllerAnnotations,
    unschedulable: bool,
    key: &str,
    action: &Action,
    now: Timestamp,
) -> Option<(ControllerAnnotations, Option<String>, bool)> {
    let mut next = current.clone();
    let mut want_unschedulable = unschedulable;
    let mut cordon = |next: &mut ControllerAnnotations| {
        // Someone else's cordon stays theirs: no record, so it is never lifted by us.
        if !unschedulable {
            next.cordoned_by_us = true;
            want_unschedulable = true;
        }
    };
    let ours_reboot = current.intent.as_ref().is_some_and(|i| i.step == Step::Reboot);
    let mark = match action {
        Action::Start { cordon: wanted } => {
            if *wanted {
                cordon(&mut next);
            }
            Some(key.to_owned())
        }
        Action::Reboot { target, boot_id_before } => {
            cordon(&mut next);
            next.intent = Some(Intent {
                step: Step::Reboot,
                target: target.clone(),
                token: Token::fresh(),
                since: shared::protocol::truncate_to_millis(now),
                boot_id_before: Some(boot_id_before.clone()),
                kubeadm: None,
                message: None,
            });
            Some(key.to_owned())
        }
        Action::Release => {
            if ours_reboot {
                next.intent = None;
            }
            if next.cordoned_by_us {
                next.cordoned_by_us = false;
                want_unschedulable = false;
            }
            None
        }
        Action::ClearIntent => {
            if ours_reboot {
                next.intent = None;
            }
            Some(key.to_owned())
        }
        Action::Drain | Action::CreateJob | Action::CreatePreflight => return None,
    };
    Some((next, mark, want_unschedulable))
}
