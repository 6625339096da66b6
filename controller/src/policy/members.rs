//! A rollout's members as the [`pipeline`](super::pipeline) reads them ([`Pool`]: a list for the full plan,
//! indexes for the incremental planner) and the one start order of every flow ([`order`], [`start_order`]).

use super::NodeView;
use super::assess::{Assessment, Situation};

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
    /// Those of [`Pool::candidates`] replaced, in the same order.
    fn replaced_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_>;
    /// Whether one of [`Pool::candidates`] is replaced.
    fn any_replaced_candidate(&self) -> bool;
    /// The members staged ahead and eligible to be drained now ([`Situation::Staging`]), in start order.
    fn staged_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_>;
    /// How many members are in the stage step (staging or staged): what `maxStaging` bounds.
    fn staging_count(&self) -> u32;
    /// The members in the stage step (staging or staged) without an action of their own that wait for the others
    /// (workers; control-plane nodes during a rollback), each with whether it is staged, in start order: those that
    /// may yield their slot of `maxStaging` to a node they wait for.
    fn staging_followers(&self) -> Vec<(&'a NodeView, bool)>;
    /// Whether the pool rolls back ([`super::rollback`]: the reverse order, the control plane last).
    fn rolling_back(&self) -> bool {
        false
    }
    /// The members the others wait for: the control-plane members pending ([`Pool::control_plane_pending`]), and
    /// during a rollback the workers pending (the control plane goes last).
    fn leaders_pending(&self) -> Vec<(&'a NodeView, &'a Assessment)> {
        self.control_plane_pending()
    }
    /// The start order of the first member still staging (not staged yet): no later staged node takes its turn
    /// before it, so that nodes take their turns in start order whatever the jitter of their staging.
    fn first_staging(&self) -> Option<Order>;
    /// The controller's own node (it starts last).
    fn own_node(&self) -> Option<&str>;
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
    /// How two members' start orders compare here: the start order, or its reverse during a rollback
    /// ([`super::rollback::cmp`]).
    fn cmp_order(&self, a: &Order, b: &Order) -> std::cmp::Ordering {
        a.cmp(b)
    }
    /// How two members compare in this pool's order ([`Pool::cmp_order`] of their start orders).
    fn cmp_nodes(&self, a: &NodeView, b: &NodeView) -> std::cmp::Ordering {
        self.cmp_order(&order(a, self.own_node()), &order(b, self.own_node()))
    }
}

/// The members of a rollout as a list, with the flow's rules of which are candidates and which control-plane
/// members keep the workers waiting.
pub(super) struct Members<'a, 'm> {
    pub members: &'m [(&'a NodeView, &'a Assessment)],
    pub own_node: Option<&'m str>,
    /// Which members may take their turn here (a staged member's drain, a replacement): the disruptive starts.
    pub candidate: fn(&NodeView, &Assessment) -> bool,
    /// Which eligible outdated members updated in place may be staged ahead of their turn here.
    pub ahead: fn(&NodeView, &Assessment) -> bool,
    /// At most this many staged members take their turn (the flow's narrowing: see the module docs).
    pub limit: usize,
    /// Which control-plane members keep the workers waiting (rule 9).
    pub barrier: fn(&NodeView, &Assessment) -> bool,
    /// A rollback ([`super::rollback`]), to this image: the reverse order, control plane last (none while a worker is
    /// pending), and no member after one still finishing its step for another image (a reboot into the failed
    /// image, verified to its end) starts before that one went back.
    pub rollback: Option<&'m str>,
}

impl<'a, 'm> Members<'a, 'm> {
    /// The image flow's view: every eligible outdated member is a candidate, and a control-plane node keeps the
    /// workers waiting while it is outdated, in flight or holding a slot.
    pub(super) fn image(members: &'m [(&'a NodeView, &'a Assessment)], own_node: Option<&'m str>) -> Self {
        Members {
            members,
            own_node,
            candidate: |_, _| true,
            ahead: |_, _| true,
            limit: usize::MAX,
            barrier: control_plane_pending,
            rollback: None,
        }
    }

    /// Whether control-plane members may start: always, but during a rollback only once no worker is pending.
    fn control_plane_may_start(&self) -> bool {
        self.rollback.is_none() || !self.members.iter().any(|(n, a)| !n.control_plane && pending(a))
    }

    /// During a rollback, the earliest member in its order still in flight for another image than the rollback's (a
    /// reboot into the failed image, verified to its end), or readied in this round to start in the next (just
    /// verified, or released): no member after it starts before it went back.
    fn rollback_barrier(&self) -> Option<Order> {
        let to = self.rollback?;
        self.members
            .iter()
            .filter(|(n, a)| {
                let intent = n.controller.as_ref().ok().and_then(|c| c.intent.as_ref());
                match a.situation {
                    Situation::InFlight { .. } => intent.is_some_and(|i| i.target != to),
                    Situation::Outdated { eligible: false, held: None } => true,
                    _ => false,
                }
            })
            .map(|(n, _)| order(n, self.own_node))
            .min_by(super::rollback::cmp)
    }

    /// Whether `node` may start: control-plane nodes last in a rollback, and none after its `barrier`.
    fn may_start(&self, node: &NodeView, control_plane_may_start: bool, barrier: Option<&Order>) -> bool {
        (!node.control_plane || control_plane_may_start)
            && barrier.is_none_or(|b| super::rollback::cmp(b, &order(node, self.own_node)).is_gt())
    }
}

impl<'a> Pool<'a> for Members<'a, '_> {
    fn candidates(&self) -> Box<dyn Iterator<Item = (&'a NodeView, bool)> + '_> {
        let (control_plane, barrier) = (self.control_plane_may_start(), self.rollback_barrier());
        let mut candidates: Vec<(&'a NodeView, bool)> = self
            .members
            .iter()
            .filter(|(n, a)| {
                let flow_starts = if a.replace { self.candidate } else { self.ahead };
                matches!(a.situation, Situation::Outdated { eligible: true, .. }) && flow_starts(n, a)
            })
            .filter(|(n, _)| self.may_start(n, control_plane, barrier.as_ref()))
            .map(|(n, a)| (*n, a.replace))
            .collect();
        candidates.sort_by(|(a, _), (b, _)| self.cmp_nodes(a, b));
        Box::new(candidates.into_iter())
    }

    fn in_place_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        Box::new(self.candidates().filter(|(_, replace)| !replace).map(|(n, _)| n))
    }

    fn replaced_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        Box::new(self.candidates().filter(|(_, replace)| *replace).map(|(n, _)| n))
    }

    fn any_replaced_candidate(&self) -> bool {
        self.candidates().any(|(_, replace)| replace)
    }

    fn staged_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        let (control_plane, barrier) = (self.control_plane_may_start(), self.rollback_barrier());
        let mut staged: Vec<&'a NodeView> = self
            .members
            .iter()
            .filter(|(n, a)| matches!(a.situation, Situation::Staging { eligible: true, .. }) && (self.candidate)(n, a))
            .filter(|(n, _)| self.may_start(n, control_plane, barrier.as_ref()))
            .map(|(n, _)| *n)
            .collect();
        staged.sort_by(|a, b| self.cmp_nodes(a, b));
        staged.truncate(self.limit);
        Box::new(staged.into_iter())
    }

    fn staging_count(&self) -> u32 {
        self.members.iter().filter(|(_, a)| matches!(a.situation, Situation::Staging { .. })).count() as u32
    }

    fn staging_followers(&self) -> Vec<(&'a NodeView, bool)> {
        let rolling_back = self.rollback.is_some();
        let mut followers: Vec<(&'a NodeView, bool)> = self
            .members
            .iter()
            .filter_map(|(n, a)| match a.situation {
                Situation::Staging { staged, .. } if yields(n, a, rolling_back) => Some((*n, staged)),
                _ => None,
            })
            .collect();
        followers.sort_by(|(a, _), (b, _)| self.cmp_nodes(a, b));
        followers
    }

    fn rolling_back(&self) -> bool {
        self.rollback.is_some()
    }

    fn leaders_pending(&self) -> Vec<(&'a NodeView, &'a Assessment)> {
        if self.rollback.is_none() {
            return self.control_plane_pending();
        }
        self.members.iter().filter(|(n, a)| !n.control_plane && pending(a)).copied().collect()
    }

    fn first_staging(&self) -> Option<Order> {
        self.members
            .iter()
            .filter(|(n, a)| staging_barrier(n, a) && (self.candidate)(n, a))
            .map(|(n, _)| order(n, self.own_node))
            .min_by(|a, b| self.cmp_order(a, b))
    }

    fn own_node(&self) -> Option<&str> {
        self.own_node
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
        if self.rollback.is_some() {
            // A rollback moves the control plane last: no worker waits for it.
            return Vec::new();
        }
        self.members.iter().filter(|(n, a)| n.control_plane && (self.barrier)(n, a)).copied().collect()
    }

    fn cmp_order(&self, a: &Order, b: &Order) -> std::cmp::Ordering {
        if self.rollback.is_some() { super::rollback::cmp(a, b) } else { a.cmp(b) }
    }
}

/// The order in which eligible nodes start: control plane first, the controller's own node last, by name.
pub(super) fn order(node: &NodeView, own_node: Option<&str>) -> Order {
    let own = own_node == Some(node.name.as_str());
    start_order(node.control_plane, own, node.zone.as_deref(), node.deferred.is_some(), &node.name)
}

/// The one start order of every flow, NodeOps included ([`Order`]), from what it is made of.
pub(crate) fn start_order(control_plane: bool, own: bool, zone: Option<&str>, deferred: bool, name: &str) -> Order {
    (!control_plane, own, zone.unwrap_or_default().to_owned(), deferred, name.to_owned())
}

/// A member's place in the start order ([`order`]): control-plane nodes first, the controller's own node last,
/// and in between zone by zone (`topology.kubernetes.io/zone`; nodes without one first); within a zone, the nodes
/// a budget deferred (`crate::budget_order`) after the others, and by name.
pub(crate) type Order = (bool, bool, String, bool, String);

/// Whether `node` is still staging and keeps the later nodes from their turn ([`Pool::first_staging`]): a Ready
/// node not staged yet (a NotReady one might never finish: it does not hold the others up).
pub(super) fn staging_barrier(node: &NodeView, a: &Assessment) -> bool {
    node.ready && matches!(a.situation, Situation::Staging { staged: false, .. })
}

/// Whether a member in the stage step may yield its slot of `maxStaging` to a node it waits for
/// ([`Pool::staging_followers`]): a worker (during a rollback, a control-plane node) without an action of its own
/// this round.
pub(super) fn yields(node: &NodeView, a: &Assessment, rolling_back: bool) -> bool {
    node.control_plane == rolling_back && a.action.is_none()
}

/// Whether `node` is a control-plane node that keeps the workers of its rollout waiting: outdated, in flight or
/// holding a slot.
pub(super) fn control_plane_pending(node: &NodeView, a: &Assessment) -> bool {
    node.control_plane && pending(a)
}

/// Whether a member is outdated, in flight or holding a slot.
fn pending(a: &Assessment) -> bool {
    matches!(
        a.situation,
        Situation::Outdated { .. }
            | Situation::Staging { .. }
            | Situation::InFlight { .. }
            | Situation::Blocked { holds_slot: true, .. }
    )
}
