//! What a NodeOp's starts read of the rest of the controller, besides its own facts: the rollouts' budgets, as
//! the one pipeline counts them (`crate::policy::budgets`), and a look at the pods of each node about to start for
//! do-not-disrupt pods (`crate::do_not_disrupt`), as the rollouts' executor looks.

use super::decide::{self, Decision, Inputs, NodeFacts};
use crate::do_not_disrupt::PodHolds;
use crate::nodes::SlimNode;
use crate::policy::budget::{Budgets, LazyBudgets};
use crate::policy::{DrainProgress, Rollout};
use crate::replacer::Replacer;
use jiff::Timestamp;

/// The rollouts' budgets for the NodeOps' starts on `nodes`, with the replacements the cloud's view (`replacer`)
/// shows counted as the rollouts count them; before the reconciler planned once (`None`), every node is held back.
pub(super) fn budgets(
    nodes: &[SlimNode],
    rollouts: Option<&[Rollout]>,
    replacer: Option<&Replacer>,
    now: Timestamp,
) -> Budgets {
    let Some(rollouts) = rollouts else { return Budgets::unknown() };
    // Without rollouts, no budget: still the one control-plane rule (rule 8 of `crate::policy::pipeline`).
    let selectors: Vec<_> = rollouts.iter().map(|r| r.spec.acting().map(|s| &s.policy.selector)).collect();
    let views: Vec<_> = nodes
        .iter()
        .map(|n| {
            let mut view = n.view(selectors.iter().copied(), DrainProgress::NotRunning);
            view.group = replacer.and_then(|r| r.member(n));
            view
        })
        .collect();
    let fleet = replacer.map(Replacer::fleet).unwrap_or_default();
    crate::policy::budgets(&views, rollouts, &fleet, now)
}

/// The NodeOp's decision, with every node it would start looked at first for do-not-disrupt pods
/// (`crate::do_not_disrupt`, as the rollouts' executor looks before a start): a node found held, or whose pods
/// cannot be listed (fail closed), is held back, and the decision is made again without it, under the budgets
/// as they were before.
pub(super) async fn decide_looked(
    holds: Option<&PodHolds>,
    inputs: Inputs<'_>,
    facts: &mut [NodeFacts],
    budgets: &mut LazyBudgets<'_>,
) -> Decision {
    loop {
        let saved = budgets.saved();
        let decision = decide::decide(inputs, facts, budgets);
        let Some(holds) = holds else { return decision };
        let starts: Vec<&str> = decision
            .nodes
            .iter()
            .filter(|n| n.notice.as_ref().is_some_and(|n| n.reason == decide::STARTED))
            .map(|n| n.node.as_str())
            .collect();
        if starts.is_empty() {
            return decision;
        }
        let looks = futures::future::join_all(starts.iter().map(|node| holds.check(node))).await;
        let mut held = false;
        for (node, look) in starts.iter().zip(looks) {
            let why = match look {
                Ok(None) => continue,
                Ok(Some(why)) => why,
                Err(error) => {
                    tracing::warn!(%node, %error, "not started");
                    format!("{error}; looked at again in the next round")
                }
            };
            tracing::info!(%node, reason = %why, "not started by a NodeOp: do not disrupt");
            if let Some(f) = facts.iter_mut().find(|f| f.name == *node) {
                f.do_not_disrupt = Some(why);
                held = true;
            }
        }
        if !held {
            return decision;
        }
        budgets.restore(saved);
    }
}
