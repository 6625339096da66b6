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

/// The nodes to start (each with whether it is replaced), and why not more.
pub(super) struct Selection<'a> {
    pub starts: Vec<(&'a NodeView, bool)>,
    pub hold: Option<Hold>,
}

/// A rollout's members, as selection reads them: kept as a list by [`plan`](super::plan), as indexes by the
/// incremental [`Planner`](super::incremental::Planner). Only [`Pool::candidates`] is read in full; the lists
/// are asked for only to name nodes in a hold.
pub(super) trait Pool<'a> {
    /// The eligible outdated members, in the order they start (control plane first, then by name, the
    /// controller's own node last), each with whether it is replaced.
    fn candidates(&self) -> Box<dyn Iterator<Item = (&'a NodeView, bool)> + '_>;
    /// Those of [`Pool::candidates`] updated in place, in the same order: what selection reads while no surge is
    /// left.
    fn in_place_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_>;
    /// Whether one of [`Pool::candidates`] is replaced.
    fn any_replaced_candidate(&self) -> bool;
    /// How many members the rollout has.
    fn size(&self) -> u32;
    /// How many members count against the budget ([`Assessment::unavailable`]).
    fn unavailable_count(&self) -> u32;
    /// Those members.
    fn unavailable(&self) -> Vec<(&'a NodeView, &'a Assessment)>;
    /// Whether a member is in flight ([`Situation::InFlight`]).
    fn any_in_flight(&self) -> bool;
    /// Control-plane members outdated, in flight or holding a slot.
    fn control_plane_pending(&self) -> Vec<(&'a NodeView, &'a Assessment)>;
}

/// The members of a rollout as a list.
pub(super) struct Members<'a, 'm> {
    pub members: &'m [(&'a NodeView, &'a Assessment)],
    pub own_node: Option<&'m str>,
}

impl<'a> Pool<'a> for Members<'a, '_> {
    fn candidates(&self) -> Box<dyn Iterator<Item = (&'a NodeView, bool)> + '_> {
        let mut candidates: Vec<(&'a NodeView, bool)> = self
            .members
            .iter()
            .filter(|(_, a)| matches!(a.situation, Situation::Outdated { eligible: true, .. }))
            .map(|(n, a)| (*n, a.replace))
            .collect();
        candidates.sort_by_key(|(n, _)| order(n, self.own_node));
        Box::new(candidates.into_iter())
    }

    fn in_place_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        Box::new(self.candidates().filter(|(_, replace)| !replace).map(|(n, _)| n))
    }

    fn any_replaced_candidate(&self) -> bool {
        self.members.iter().any(|(_, a)| a.replace && matches!(a.situation, Situation::Outdated { eligible: true, .. }))
    }

    fn size(&self) -> u32 {
        self.members.len() as u32
    }

    fn unavailable_count(&self) -> u32 {
        self.members.iter().filter(|(n, a)| a.unavailable(n)).count() as u32
    }

    fn unavailable(&self) -> Vec<(&'a NodeView, &'a Assessment)> {
        self.members.iter().filter(|(n, a)| a.unavailable(n)).copied().collect()
    }

    fn any_in_flight(&self) -> bool {
        self.members.iter().any(|(_, a)| matches!(a.situation, Situation::InFlight { .. }))
    }

    fn control_plane_pending(&self) -> Vec<(&'a NodeView, &'a Assessment)> {
        self.members.iter().filter(|(n, a)| control_plane_pending(n, a)).copied().collect()
    }
}

/// The order in which eligible nodes start: control plane first, the controller's own node last, by name.
pub(super) fn order(node: &NodeView, own_node: Option<&str>) -> (bool, bool, String) {
    (!node.control_plane, own_node == Some(node.name.as_str()), node.name.clone())
}

/// Whether `node` is a control-plane node that keeps the workers of its rollout waiting: outdated, in flight or
/// holding a slot.
pub(super) fn control_plane_pending(node: &NodeView, a: &Assessment) -> bool {
    node.control_plane
        && matches!(
            a.situation,
            Situation::Outdated { .. } | Situation::InFlight { .. } | Situation::Blocked { holds_slot: true, .. }
        )
}

/// Picks the nodes to start among the rollout's members in `pool`.
pub(super) fn select<'a>(
    pool: &impl Pool<'a>,
    spec: &ValidSpec,
    shared: &mut Shared,
    surge: &mut Surge,
) -> Selection<'a> {
    let mut selection = Selection { starts: Vec::new(), hold: None };
    if pool.candidates().next().is_none() {
        return selection;
    }

    let allowed = spec.policy.max_unavailable.resolve(pool.size());
    let mut slots = budget::free_slots(allowed, pool.unavailable_count() + shared.unowned_unavailable);
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
        return selection;
    }

    let control_plane_pending = pool.control_plane_pending();
    let mut surge_taken = false;
    let candidates = if surge.free == 0 {
        // No replaced node can start: only those updated in place are read. Had it read them all, it would have
        // passed every replaced one whenever the surge matters below (nothing started, no hold).
        surge_taken = pool.any_replaced_candidate();
        Box::new(pool.in_place_candidates().map(|n| (n, false)))
    } else {
        pool.candidates()
    };
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
        selection.starts.push((node, replace));
    }
    let busy = surge.moving || pool.any_in_flight();
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
