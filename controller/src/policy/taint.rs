//! Updated nodes preferred (`spec.rollout.preferUpdatedNodes`, issue 34 item 2): while a rollout runs, its nodes not
//! on the target yet carry the taint [`OUTDATED_TAINT`] with the effect `PreferNoSchedule`, so that the scheduler
//! places the pods evicted from a draining node on updated nodes while those have room, rather than on a node that
//! goes next (and would make them move twice).
//!
//! The taint is the controller's alone (the agent never writes it) and level-triggered: every plan says which node
//! should carry it ([`wanted`]), and each node whose taint differs gets a [`Retaint`]. The executor folds it into the
//! node's other write of the round when there is one (the `done` write that uncordons a verified node also lifts the
//! taint), and writes it alone otherwise. So whatever a controller crash or a change of leader interrupted, the next
//! leader's first plan puts every node right, and a node no rollout moves (its NodeVersion deleted, not selected any
//! more) never keeps it.

use super::assess::{Assessment, Situation};
use super::{NodeView, Rollout, pools};
use shared::protocol::Step;

/// The key of the taint: no value, effect [`OUTDATED_EFFECT`].
pub const OUTDATED_TAINT: &str = "update.edgeless.systems/outdated";

/// The effect of the taint: the scheduler avoids the node for pods that do not tolerate it, but uses it when no other
/// node fits.
pub const OUTDATED_EFFECT: &str = "PreferNoSchedule";

/// A node whose taint the plan changes: `on` adds [`OUTDATED_TAINT`], otherwise it is removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retaint {
    pub node: String,
    pub on: bool,
}

/// Whether the rollout's outdated nodes carry the taint: it has a spec to act on (the last valid one, when the
/// current is invalid), with `preferUpdatedNodes`, and it is not paused.
pub fn tainting(rollout: &Rollout) -> bool {
    rollout.spec.acting().is_some_and(|s| s.policy.prefer_updated_nodes && !s.policy.paused)
}

/// Whether a node with the assessment `a` (its situation once its action this round is applied) carries the taint:
/// its rollout taints ([`tainting`]) and the node is not on the target yet, i.e. outdated (held back or not), staging,
/// or in a step before its verification. A node verified (`done`, soaking or not), failed or blocked does not (the
/// rollout does not move it any more without a human), nor does any node no rollout manages.
pub(super) fn wanted(owner: pools::Owner, a: &Assessment, rollouts: &[Rollout]) -> bool {
    let pools::Owner::Rollout(i) = owner else { return false };
    if !rollouts.get(i).is_some_and(tainting) {
        return false;
    }
    match &a.situation {
        Situation::Outdated { .. } | Situation::Staging { .. } => true,
        Situation::InFlight { step, .. } => *step != Step::Done,
        Situation::UpToDate | Situation::Failed { .. } | Situation::Blocked { .. } => false,
    }
}

/// The change the node's taint needs, if it needs one.
pub(super) fn change(node: &NodeView, owner: pools::Owner, a: &Assessment, rollouts: &[Rollout]) -> Option<Retaint> {
    let on = wanted(owner, a, rollouts);
    (on != node.outdated_taint).then(|| Retaint { node: node.name.clone(), on })
}

/// The changes of every node's taint, by name.
pub(super) fn changes(
    nodes: &[NodeView],
    owners: &[pools::Owner],
    assessments: &[Assessment],
    rollouts: &[Rollout],
) -> Vec<Retaint> {
    let mut changes: Vec<Retaint> = (nodes.iter().zip(owners).zip(assessments))
        .filter_map(|((node, owner), a)| change(node, *owner, a, rollouts))
        .collect();
    changes.sort_by(|a, b| a.node.cmp(&b.node));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::{node, valid_spec};
    use crate::policy::{Hold, Policy, Reason, SpecState};
    use jiff::Timestamp;

    fn rollout(policy: Policy) -> Rollout {
        Rollout::new("nv", SpecState::Valid(valid_spec("v2", 1, policy)), None)
    }

    /// Every situation of the node vocabulary, with whether a node in it is on its way to the target.
    fn situations() -> Vec<(Situation, bool)> {
        let since = Timestamp::UNIX_EPOCH;
        let hold = Hold::new(Reason::DoNotDisrupt, "a pod");
        let mut all = vec![
            (Situation::UpToDate, false),
            (Situation::Outdated { eligible: true, held: None }, true),
            (Situation::Outdated { eligible: false, held: None }, true),
            (Situation::Outdated { eligible: false, held: Some(hold.clone()) }, true),
            (Situation::Staging { since, staged: false, eligible: false, held: None }, true),
            (Situation::Staging { since, staged: true, eligible: true, held: None }, true),
            (Situation::Staging { since, staged: true, eligible: false, held: Some(hold) }, true),
            (Situation::Failed { message: "x".into() }, false),
            (Situation::Blocked { message: "x".into(), by_drain: true, holds_slot: false }, false),
            (Situation::Blocked { message: "x".into(), by_drain: false, holds_slot: true }, false),
        ];
        all.extend(Step::ALL.into_iter().map(|step| (Situation::InFlight { step, since }, step != Step::Done)));
        all
    }

    #[test]
    fn a_node_of_a_tainting_rollout_carries_the_taint_until_it_is_verified() {
        let rollouts = [rollout(Policy::default())];
        for (situation, moving) in situations() {
            let a = Assessment::new(situation.clone());
            assert_eq!(wanted(pools::Owner::Rollout(0), &a, &rollouts), moving, "{situation:?}");
        }
    }

    #[test]
    fn no_node_carries_it_when_paused_turned_off_or_managed_by_no_rollout() {
        let paused = rollout(Policy { paused: true, ..Policy::default() });
        let off = rollout(Policy { prefer_updated_nodes: false, ..Policy::default() });
        let invalid = Rollout::new("nv", SpecState::Invalid { errors: vec!["x".into()], last_valid: None }, None);
        for (situation, _) in situations() {
            let a = Assessment::new(situation.clone());
            for rollouts in [vec![paused.clone()], vec![off.clone()], vec![invalid.clone()], vec![]] {
                assert!(!wanted(pools::Owner::Rollout(0), &a, &rollouts), "{situation:?}");
            }
            let tainting = [rollout(Policy::default())];
            for owner in [pools::Owner::Nobody { reason: Reason::NoNodeVersion }, pools::Owner::Unknown] {
                assert!(!wanted(owner, &a, &tainting), "{situation:?} {owner:?}");
            }
        }
    }

    #[test]
    fn an_invalid_spec_taints_as_its_last_valid_one() {
        let last_valid = Some(valid_spec("v2", 1, Policy::default()));
        let invalid = Rollout::new("nv", SpecState::Invalid { errors: vec!["x".into()], last_valid }, None);
        let a = Assessment::new(Situation::Outdated { eligible: false, held: None });
        assert!(wanted(pools::Owner::Rollout(0), &a, &[invalid]));
    }

    #[test]
    fn only_a_node_whose_taint_differs_gets_a_change() {
        let rollouts = [rollout(Policy::default())];
        let outdated = Assessment::new(Situation::Outdated { eligible: true, held: None });
        let done = Assessment::new(Situation::UpToDate);
        let owner = pools::Owner::Rollout(0);
        let bare = node("w1");
        let tainted = NodeView { outdated_taint: true, ..node("w1") };
        assert_eq!(change(&bare, owner, &outdated, &rollouts), Some(Retaint { node: "w1".into(), on: true }));
        assert_eq!(change(&tainted, owner, &outdated, &rollouts), None);
        assert_eq!(change(&tainted, owner, &done, &rollouts), Some(Retaint { node: "w1".into(), on: false }));
        assert_eq!(change(&bare, owner, &done, &rollouts), None);
    }

    #[test]
    fn a_heir_does_not_inherit_the_taint_of_its_outdated_donor() {
        use crate::policy::TaintView;
        let view = |key: &str, effect: &str| TaintView { key: key.into(), value: None, effect: effect.into() };
        let donor = [view(OUTDATED_TAINT, OUTDATED_EFFECT), view("example.com/team", "NoSchedule")];
        assert_eq!(crate::policy::fleet::inherited_taints(&donor), vec![view("example.com/team", "NoSchedule")]);
    }
}
