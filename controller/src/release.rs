//! Deleting a NodeVersion (or uninstalling mid-rollout) releases its nodes first: a finalizer on
//! every NodeVersion, removed once no node it selects is still held by the controller.
//!
//! While a NodeVersion is being deleted the controller plans without it, so its nodes are wound
//! down as nodes no NodeVersion moves: a stage or drain is released (intent removed, drain stopped,
//! node uncordoned), a reboot already requested is verified to its end (it cannot be called back),
//! and a node the controller cordoned is uncordoned, and the taint of outdated nodes is taken off every node
//! no other rollout taints. Another NodeVersion that selects the same nodes takes them over as usual.

use crate::policy::{DrainProgress, NodeView};
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, TestOperation};
use serde_json::Value;
use shared::protocol::Step;

/// The finalizer the controller keeps on every NodeVersion it acts for.
pub const FINALIZER: &str = "update.edgeless.systems/release-nodes";

/// Why a deleted NodeVersion waits for a node that still carries the taint of outdated nodes no rollout wants there
/// (`crate::policy::taint`): the wind-down takes it off, and the finalizer goes after.
pub const TAINTED: &str = "the taint of outdated nodes (update.edgeless.systems/outdated) is still on it";

/// Why the controller is not done with `node` yet, or None when it holds nothing on it: no drain
/// runs, no step is in progress (only `done`, `failed` or `blocked` may be left), and it did not
/// cordon the node.
pub fn unreleased(node: &NodeView) -> Option<String> {
    if !matches!(node.drain, DrainProgress::NotRunning) {
        return Some("a drain is still running".to_owned());
    }
    let controller = match &node.controller {
        Ok(controller) => controller,
        Err(error) => return Some(format!("its controller annotations cannot be read ({error})")),
    };
    if let Some(intent) = &controller.intent
        && !matches!(intent.step, Step::Done | Step::Failed | Step::Blocked)
    {
        return Some(format!("intent={} is still in progress", intent.step));
    }
    controller.cordoned_by_us.then(|| "the controller cordoned it".to_owned())
}

/// The JSON patch that adds [`FINALIZER`] to `finalizers` (the object's current list), guarded by a
/// test of that list so that a concurrent change of the list makes it fail instead of dropping an
/// entry; None when the finalizer is already there.
pub fn add(finalizers: Option<&[String]>) -> Option<Patch> {
    let current = finalizers.unwrap_or_default();
    if current.iter().any(|f| f == FINALIZER) {
        return None;
    }
    let list = PointerBuf::from_tokens(["metadata", "finalizers"]);
    let mut ops = vec![test(finalizers)];
    if current.is_empty() {
        ops.push(PatchOperation::Add(AddOperation { path: list, value: Value::from(vec![FINALIZER]) }));
    } else {
        let end = PointerBuf::from_tokens(["metadata", "finalizers", "-"]);
        ops.push(PatchOperation::Add(AddOperation { path: end, value: Value::from(FINALIZER) }));
    }
    Some(Patch(ops))
}

/// The JSON patch that removes [`FINALIZER`] from `finalizers`, guarded like [`add`]; None when it
/// is not there.
pub fn remove(finalizers: Option<&[String]>) -> Option<Patch> {
    let index = finalizers?.iter().position(|f| f == FINALIZER)?;
    let path = PointerBuf::from_tokens(["metadata".to_owned(), "finalizers".to_owned(), index.to_string()]);
    Some(Patch(vec![test(finalizers), PatchOperation::Remove(RemoveOperation { path })]))
}

/// Tests that the list is still `finalizers` (an absent list reads as null, as the API server
/// serves an object without finalizers).
fn test(finalizers: Option<&[String]>) -> PatchOperation {
    let value = finalizers.filter(|f| !f.is_empty()).map_or(Value::Null, |f| Value::from(f.to_vec()));
    PatchOperation::Test(TestOperation { path: PointerBuf::from_tokens(["metadata", "finalizers"]), value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::protocol::{ControllerAnnotations, Intent, ProtocolError, Token, UnreadableKeys};

    fn node(controller: Result<ControllerAnnotations, UnreadableKeys>, drain: DrainProgress) -> NodeView {
        NodeView {
            name: "worker-0".into(),
            control_plane: false,
            selected_by: vec![],
            opted_in: true,
            ready: true,
            unschedulable: false,
            kubelet_boot_id: None,
            kubelet_version: None,
            group: None,
            controller,
            agent: Err(ProtocolError::Missing { key: "x", with: "y" }),
            drain,
            operation: None,
            do_not_disrupt: None,
            checkpoint: None,
            zone: None,
            deferred: None,
            settle: None,
            outdated_taint: false,
        }
    }

    fn with_intent(step: Step, cordoned_by_us: bool) -> ControllerAnnotations {
        let token = Token::parse("token", "t1").ok();
        let intent = token.map(|token| Intent {
            step,
            target: "v2".into(),
            token,
            since: jiff::Timestamp::UNIX_EPOCH,
            boot_id_before: None,
            message: None,
            kubeadm: None,
        });
        assert!(intent.is_some(), "test token must parse");
        ControllerAnnotations { intent, cordoned_by_us }
    }

    #[test]
    fn a_node_is_released_only_when_nothing_of_the_controller_is_left_on_it() {
        let free = ControllerAnnotations { intent: None, cordoned_by_us: false };
        assert_eq!(unreleased(&node(Ok(free.clone()), DrainProgress::NotRunning)), None);
        for step in [Step::Done, Step::Failed, Step::Blocked] {
            assert_eq!(unreleased(&node(Ok(with_intent(step, false)), DrainProgress::NotRunning)), None, "{step}");
        }
        for step in Step::ALL.into_iter().filter(|s| !matches!(s, Step::Done | Step::Failed | Step::Blocked)) {
            let why = unreleased(&node(Ok(with_intent(step, false)), DrainProgress::NotRunning));
            assert_eq!(why, Some(format!("intent={step} is still in progress")));
        }
        let cordoned = ControllerAnnotations { intent: None, cordoned_by_us: true };
        assert_eq!(
            unreleased(&node(Ok(cordoned), DrainProgress::NotRunning)).as_deref(),
            Some("the controller cordoned it")
        );
        let draining = node(Ok(free), DrainProgress::Running { waiting_on: None });
        assert_eq!(unreleased(&draining).as_deref(), Some("a drain is still running"));
    }

    #[test]
    fn the_finalizer_is_added_once_after_a_test_of_the_list() {
        let patch = add(None).map(|p| serde_json::to_value(p).ok());
        assert_eq!(
            patch,
            Some(Some(serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ])))
        );
        let others = vec!["example.com/keep".to_owned()];
        let patch = add(Some(&others)).map(|p| serde_json::to_value(p).ok());
        assert_eq!(
            patch,
            Some(Some(serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["example.com/keep"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
            ])))
        );
        let ours = vec!["example.com/keep".to_owned(), FINALIZER.to_owned()];
        assert!(add(Some(&ours)).is_none());
    }

    #[test]
    fn the_finalizer_is_removed_by_its_index_after_a_test_of_the_list() {
        assert!(remove(None).is_none());
        assert!(remove(Some(&["example.com/keep".to_owned()])).is_none());
        let list = vec!["example.com/keep".to_owned(), FINALIZER.to_owned()];
        let patch = remove(Some(&list)).map(|p| serde_json::to_value(p).ok());
        assert_eq!(
            patch,
            Some(Some(serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["example.com/keep", FINALIZER]},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])))
        );
    }
}
