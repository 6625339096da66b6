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
    surge: &mut Surge,
    own_node: Option<&str>,
) -> Selection<'a> {
    let mut selection = Selection { starts: Vec::new(), hold: None };
    let mut candidates: Vec<(&'a NodeView, bool)> = members
        .iter()
        .filter(|(_, a)| matches!(a.situation, Situation::Outdated { eligible: true, .. }))
        .map(|(n, a)| (*n, a.replace))
        .collect();
    if candidates.is_empty() {
        return selection;
    }
    candidates.sort_by_key(|(n, _)| (!n.control_plane, own_node == Some(n.name.as_str()), n.name.clone()));

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
    let mut surge_taken = false;
    for (node, replace) in candidates {
        if slots == 0 {
            break;
        }
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
        if replace {
            surge.free -= 1;
            surge.control_plane_active |= node.control_plane;
            surge.worker_active |= !node.control_plane;
        }
        selection.starts.push(node);
    }
    let busy = surge.moving || members.iter().any(|(_, a)| matches!(a.situation, Situation::InFlight { .. }));
    if surge_taken && selection.starts.is_empty() && selection.hold.is_none() && !busy {
        // Nothing moves, and only the instances of replacements that cannot finish keep it so: say it.
        let message = format!(
            "maxSurge ({}) is taken by replacements that hold an instance (a donor blocked or an instance being deleted)",
            surge.allowed
        );
        selection.hold = Some(Hold::new(Reason::SurgeExhausted, message));
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
