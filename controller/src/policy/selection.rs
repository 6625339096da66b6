//! Selection: which eligible outdated nodes of a rollout start now, within its budget and in its
//! order, and why no (further) node starts when that is not the budget's normal wait.
//!
//! # Order
//! Control-plane nodes first and one at a time (across every rollout), then workers by name, the
//! controller's own node last. No worker starts while a control-plane node of the rollout is
//! outdated, in flight or holding a slot.

use super::assess::{Assessment, Situation};
use super::{Hold, NodeView, Reason, ValidSpec, budget};

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

/// The nodes to start, and why not more.
pub(super) struct Selection<'a> {
    pub starts: Vec<&'a NodeView>,
    pub hold: Option<Hold>,
}

/// Picks the nodes to start among `members` (the rollout's nodes with their assessments).
pub(super) fn select<'a>(
    members: &[(&'a NodeView, &Assessment)],
    spec: &ValidSpec,
    shared: &mut Shared,
    own_node: Option<&str>,
) -> Selection<'a> {
    let mut selection = Selection { starts: Vec::new(), hold: None };
    let mut candidates: Vec<&'a NodeView> = members
        .iter()
        .filter(|(_, a)| matches!(a.situation, Situation::Outdated { eligible: true, .. }))
        .map(|(n, _)| *n)
        .collect();
    if candidates.is_empty() {
        return selection;
    }
    candidates.sort_by_key(|n| (!n.control_plane, own_node == Some(n.name.as_str()), n.name.clone()));

    let allowed = spec.policy.max_unavailable.resolve(members.len() as u32);
    let unavailable: Vec<&(&NodeView, &Assessment)> = members.iter().filter(|(n, a)| a.unavailable(n)).collect();
    let mut slots = budget::free_slots(allowed, unavailable.len() as u32 + shared.unowned_unavailable);
    if slots == 0 {
        if !members.iter().any(|(_, a)| matches!(a.situation, Situation::InFlight { .. })) {
            // Nothing is being updated, yet nothing may start: nodes down, cordoned for other
            // reasons or holding a slot take the whole budget. Say which, or it just looks stuck.
            let mut names: Vec<String> = unavailable
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
        return selection;
    }

    let control_plane_pending: Vec<(&NodeView, &Assessment)> = members
        .iter()
        .filter(|(n, a)| {
            n.control_plane
                && matches!(
                    a.situation,
                    Situation::Outdated { .. }
                        | Situation::InFlight { .. }
                        | Situation::Blocked { holds_slot: true, .. }
                )
        })
        .map(|(n, a)| (*n, *a))
        .collect();
    for node in candidates {
        if slots == 0 {
            break;
        }
        if node.control_plane {
            if shared.control_plane_busy {
                continue;
            }
            shared.control_plane_busy = true;
        } else if !control_plane_pending.is_empty() {
            selection.hold = Some(waiting_for_control_plane(&control_plane_pending, &spec.target));
            break;
        }
        slots -= 1;
        selection.starts.push(node);
    }
    selection
}

/// Workers wait for the control plane; a control-plane node that is itself held back is named, so
/// that a stalled control plane never stalls every worker silently.
fn waiting_for_control_plane(pending: &[(&NodeView, &Assessment)], target: &str) -> Hold {
    let held: Vec<String> = pending
        .iter()
        .filter_map(|(n, a)| match &a.situation {
            Situation::Outdated { held: Some(hold), .. } => {
                Some(format!("{} ({}: {})", n.name, hold.reason, hold.message))
            }
            Situation::Blocked { message, .. } => Some(format!("{} ({message})", n.name)),
            _ => None,
        })
        .collect();
    let mut message = format!("workers wait until every control-plane node runs {target}");
    if !held.is_empty() {
        message.push_str(&format!("; held back: {}", name_some(held)));
    }
    Hold::new(Reason::WaitingForControlPlane, message)
}

/// The first few of `names`, sorted, and how many more.
fn name_some(mut names: Vec<String>) -> String {
    names.sort();
    let more = names.len().saturating_sub(MAX_NAMED);
    names.truncate(MAX_NAMED);
    let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!("{}{tail}", names.join(", "))
}
