//! Node pools: which NodeVersion manages each node when several exist.
//!
//! # Guarantees
//! - Every node has exactly one owner: the oldest NodeVersion whose selector selects it (the
//!   rollouts come oldest first), nobody, or unknown.
//! - A node is wound down as selected by nobody only when every NodeVersion's selector is known:
//!   a NodeVersion whose spec was never valid might select it, so such a node is left alone.

use super::{NodeView, Reason, Rollout};

/// Who manages a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owner {
    /// The rollout at this index.
    Rollout(usize),
    /// No NodeVersion selects the node: it is released (with this reason) unless it is rebooting.
    Nobody { reason: Reason },
    /// No NodeVersion with a known selector selects the node, and one without a valid spec might.
    Unknown,
}

/// The owner of each node, in the order of `nodes`.
pub(super) fn owners(nodes: &[NodeView], rollouts: &[Rollout]) -> Vec<Owner> {
    nodes.iter().map(|node| owner(node, rollouts)).collect()
}

/// The owner of `node`.
pub(super) fn owner(node: &NodeView, rollouts: &[Rollout]) -> Owner {
    let acting = |i: usize| rollouts.get(i).is_some_and(|r| r.spec.acting().is_some());
    match node.selected_by.iter().copied().filter(|&i| acting(i)).min() {
        Some(i) => Owner::Rollout(i),
        None if !(0..rollouts.len()).all(acting) => Owner::Unknown,
        None if rollouts.is_empty() => Owner::Nobody { reason: Reason::NoNodeVersion },
        None => Owner::Nobody { reason: Reason::NotSelected },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::{node, rollout_named, unknown_rollout};

    #[test]
    fn the_oldest_selecting_rollout_owns_a_node() {
        let rollouts = [rollout_named("old"), rollout_named("new")];
        let both = NodeView { selected_by: vec![1, 0], ..node("a") };
        let new_only = NodeView { selected_by: vec![1], ..node("b") };
        let none = NodeView { selected_by: vec![], ..node("c") };
        assert_eq!(
            owners(&[both, new_only, none], &rollouts),
            vec![Owner::Rollout(0), Owner::Rollout(1), Owner::Nobody { reason: Reason::NotSelected }]
        );
    }

    #[test]
    fn without_nodeversions_nodes_wind_down_as_having_none() {
        let none = NodeView { selected_by: vec![], ..node("c") };
        assert_eq!(owners(&[none], &[]), vec![Owner::Nobody { reason: Reason::NoNodeVersion }]);
    }

    #[test]
    fn a_rollout_without_a_known_selector_makes_unselected_nodes_unknown() {
        let rollouts = [rollout_named("valid"), unknown_rollout("broken")];
        let selected = NodeView { selected_by: vec![0], ..node("a") };
        let unselected = NodeView { selected_by: vec![], ..node("b") };
        // An index naming a rollout without a spec to act on is ignored.
        let stale = NodeView { selected_by: vec![1], ..node("c") };
        assert_eq!(
            owners(&[selected, unselected, stale], &rollouts),
            vec![Owner::Rollout(0), Owner::Unknown, Owner::Unknown]
        );
    }
}
