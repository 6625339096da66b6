//! The taint of outdated nodes on the Node (`crate::policy::taint` decides where it goes): folded into the node's
//! other write of the plan when it has one ([`with_outdated`]), written alone otherwise ([`Executor::retaint`]), in
//! either case as the whole `spec.taints` list of the Node as the decision saw it, every other taint kept, and
//! conditional on that resourceVersion (a taint someone added since makes the write fail with 409, and the next plan
//! decides on the new list).

use super::{Executor, WriteResult, send};
use crate::leadership::Term;
use crate::nodes::SlimNode;
use crate::policy::taint::{OUTDATED_EFFECT, OUTDATED_TAINT};
use k8s_openapi::api::core::v1::Taint;
use kube::ResourceExt;
use shared::protocol::patch::NodePatch;

/// `taints` with the taint of outdated nodes (`on`) or without it (every entry of its key removed).
pub fn with_outdated(mut taints: Vec<Taint>, on: bool) -> Vec<Taint> {
    if on {
        if !taints.iter().any(|t| t.key == OUTDATED_TAINT && t.effect == OUTDATED_EFFECT) {
            taints.push(Taint {
                key: OUTDATED_TAINT.to_owned(),
                effect: OUTDATED_EFFECT.to_owned(),
                ..Taint::default()
            });
        }
    } else {
        taints.retain(|t| t.key != OUTDATED_TAINT);
    }
    taints
}

/// The patch that takes the node's taints to `want` (empty when they are that), conditional on its resourceVersion.
pub fn taints_patch(patch: NodePatch, node: &SlimNode, want: Vec<Taint>) -> NodePatch {
    let current = serde_json::to_value(&node.spec.taints).unwrap_or_default();
    patch.taints(&current, serde_json::to_value(want).unwrap_or_default())
}

impl Executor {
    /// Puts the taint of outdated nodes on `node` (`on`) or takes it off, in a write of its own: for a node the plan
    /// writes nothing else to.
    pub(super) async fn retaint(&self, term: &Term, node: &SlimNode, on: bool) -> WriteResult {
        let want = with_outdated(node.spec.taints.clone(), on);
        let patch = taints_patch(NodePatch::default(), node, want).if_unchanged_since(node.resource_version());
        if patch.is_empty() {
            return WriteResult::Unchanged;
        }
        let result = send(&self.nodes, term, node, &patch, &self.writes).await;
        match result {
            WriteResult::Written => tracing::info!(node = %node.name(), on, "taint of outdated nodes written"),
            WriteResult::Conflict => {
                tracing::debug!(node = %node.name(), "node changed since the decision; planning again")
            }
            WriteResult::Failed => {
                tracing::warn!(node = %node.name(), "taint of outdated nodes not written; will retry")
            }
            WriteResult::Unchanged | WriteResult::Fenced => {}
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint { key: key.into(), effect: effect.into(), ..Taint::default() }
    }

    #[test]
    fn the_taint_is_added_once_and_removed_and_other_taints_are_kept() {
        let team = taint("example.com/team", "NoSchedule");
        let ours = taint(OUTDATED_TAINT, OUTDATED_EFFECT);
        assert_eq!(with_outdated(vec![team.clone()], true), vec![team.clone(), ours.clone()]);
        assert_eq!(with_outdated(vec![ours.clone(), team.clone()], true), vec![ours.clone(), team.clone()]);
        assert_eq!(with_outdated(vec![ours.clone(), team.clone()], false), vec![team.clone()]);
        // Someone's entry of our key with another effect goes too: the key is ours.
        assert_eq!(with_outdated(vec![taint(OUTDATED_TAINT, "NoSchedule"), team.clone()], false), vec![team.clone()]);
        assert_eq!(with_outdated(vec![], false), vec![]);
    }

    #[test]
    fn the_patch_replaces_the_list_as_the_decision_saw_it() {
        let mut node = SlimNode::default();
        node.metadata.resource_version = Some("7".into());
        node.spec.taints = vec![taint("example.com/team", "NoSchedule")];
        let want = with_outdated(node.spec.taints.clone(), true);
        let patch = taints_patch(NodePatch::default(), &node, want).if_unchanged_since(node.resource_version());
        assert_eq!(
            patch.to_json(),
            serde_json::json!({
                "metadata": {"resourceVersion": "7"},
                "spec": {"taints": [
                    {"key": "example.com/team", "effect": "NoSchedule"},
                    {"key": OUTDATED_TAINT, "effect": "PreferNoSchedule"},
                ]},
            })
        );
        let same = taints_patch(NodePatch::default(), &node, node.spec.taints.clone());
        assert!(same.is_empty());
    }
}
