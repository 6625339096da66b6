//! The agent's view of its own Node: the newest state it may decide on, from the watch and from its
//! own writes.
//!
//! # Guarantees
//! - After the agent's write, watch events older than the write are not taken for the newest
//!   state (the watch delivers in order, so until the write itself arrives every event predates
//!   it): an event between the agent's read and its write (a kubelet status update, say) lacks the
//!   agent's report, and deciding on it would write the report again.
//! - That wait always ends: with the write's own event, with an event showing the agent's report,
//!   with a Node of another UID (the Node was deleted and registered again), with the Node's
//!   deletion, or with a relist (a consistent read after a broken watch, which the write's event
//!   may never follow). No event is waited for forever. (A relist that raced with the write may
//!   predate it; the watch then delivers the write next, so the view only passes through a state
//!   the Node had.)
//!
//! # Assumptions
//! - Relists are consistent reads (see [`crate::nodes::NodeApi::watch`]).

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::watcher;
use shared::protocol::AgentReport;

/// The agent's own Node.
#[derive(Debug, Default)]
pub struct OwnNode {
    node: Option<Node>,
    /// The agent's last write until the watch shows it.
    unconfirmed: Option<Written>,
    /// Between `Init` and `InitDone` of a (re)list: whether the list held the Node.
    relist: Option<bool>,
}

#[derive(Debug)]
struct Written {
    resource_version: Option<String>,
    uid: Option<String>,
    report: AgentReport,
}

impl OwnNode {
    /// The newest Node, `None` before the first list or after its deletion.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// Takes in a watch event. `true` when the view changed.
    pub fn apply(&mut self, event: watcher::Event<Node>) -> bool {
        match event {
            watcher::Event::Init => {
                self.relist = Some(false);
                false
            }
            watcher::Event::InitApply(node) => {
                // A consistent list: at least as new as anything written before it.
                self.relist = Some(true);
                self.unconfirmed = None;
                self.node = Some(node);
                true
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or(true);
                if listed {
                    return false;
                }
                self.unconfirmed = None;
                self.node.take().is_some()
            }
            watcher::Event::Apply(node) => {
                if let Some(written) = &self.unconfirmed {
                    if !written.confirmed_by(&node) {
                        return false;
                    }
                    self.unconfirmed = None;
                }
                self.node = Some(node);
                true
            }
            watcher::Event::Delete(node) => {
                let ours = self.node.as_ref().is_none_or(|current| current.metadata.uid == node.metadata.uid);
                if !ours {
                    return false;
                }
                self.unconfirmed = None;
                self.node.take().is_some()
            }
        }
    }

    /// Records the agent's write of `report`, answered with `node`.
    pub fn written(&mut self, node: Node, report: AgentReport) {
        self.unconfirmed =
            Some(Written { resource_version: node.resource_version(), uid: node.metadata.uid.clone(), report });
        self.node = Some(node);
    }

    /// A write found the Node missing: nothing to decide on until the watch shows it again.
    pub fn gone(&mut self) {
        self.unconfirmed = None;
        self.node = None;
    }
}

impl Written {
    fn confirmed_by(&self, node: &Node) -> bool {
        if node.metadata.uid != self.uid {
            // Another Node of the same name: the one written to is gone, and with it the write.
            return true;
        }
        if self.resource_version.is_some() && node.resource_version() == self.resource_version {
            return true;
        }
        node.metadata.annotations.as_ref().is_some_and(|a| AgentReport::parse(a).as_ref() == Ok(&self.report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use shared::protocol::AgentState;

    fn node(uid: &str, rv: &str, state: Option<&str>) -> Node {
        let mut annotations = serde_json::Map::new();
        if let Some(state) = state {
            annotations.insert("update.edgeless.systems/state".into(), json!(state));
        }
        serde_json::from_value(json!({
            "metadata": {"name": "n", "uid": uid, "resourceVersion": rv, "annotations": annotations}
        }))
        .unwrap()
    }

    fn idle() -> AgentReport {
        AgentReport { state: Some(AgentState::Idle), ..Default::default() }
    }

    fn rv(view: &OwnNode) -> Option<String> {
        view.node().and_then(ResourceExt::resource_version)
    }

    fn listed(n: Node) -> OwnNode {
        let mut view = OwnNode::default();
        assert!(!view.apply(watcher::Event::Init));
        assert!(view.apply(watcher::Event::InitApply(n)));
        assert!(!view.apply(watcher::Event::InitDone));
        view
    }

    #[test]
    fn events_older_than_the_agents_write_are_ignored_until_it_arrives() {
        let mut view = listed(node("u1", "1", None));
        view.written(node("u1", "3", Some("idle")), idle());
        // The kubelet's update between the agent's read and its write arrives after the write.
        assert!(!view.apply(watcher::Event::Apply(node("u1", "2", None))));
        assert_eq!(rv(&view).as_deref(), Some("3"));
        assert!(view.apply(watcher::Event::Apply(node("u1", "3", Some("idle")))));
        // Confirmed: later events are taken as they come, even ones that clear the agent's keys.
        assert!(view.apply(watcher::Event::Apply(node("u1", "4", None))));
        assert_eq!(rv(&view).as_deref(), Some("4"));
    }

    #[test]
    fn an_event_showing_the_agents_report_confirms_the_write() {
        let mut view = listed(node("u1", "1", None));
        view.written(node("u1", "3", Some("idle")), idle());
        assert!(view.apply(watcher::Event::Apply(node("u1", "5", Some("idle")))));
        assert!(view.apply(watcher::Event::Apply(node("u1", "6", None))));
    }

    #[test]
    fn a_node_registered_again_ends_the_wait() {
        let mut view = listed(node("u1", "1", None));
        view.written(node("u1", "3", Some("idle")), idle());
        // The write's own event was lost with the old Node; the new one has no agent keys.
        assert!(view.apply(watcher::Event::Apply(node("u2", "7", None))));
        assert_eq!(view.node().and_then(|n| n.metadata.uid.clone()).as_deref(), Some("u2"));
    }

    #[test]
    fn a_relist_ends_the_wait() {
        let mut view = listed(node("u1", "1", None));
        view.written(node("u1", "3", Some("idle")), idle());
        // The watch broke before the write's event and the relist shows the keys cleared since.
        assert!(!view.apply(watcher::Event::Init));
        assert!(view.apply(watcher::Event::InitApply(node("u1", "9", None))));
        assert!(!view.apply(watcher::Event::InitDone));
        assert_eq!(rv(&view).as_deref(), Some("9"));
        assert!(view.apply(watcher::Event::Apply(node("u1", "10", None))));
    }

    #[test]
    fn a_deleted_node_is_forgotten_and_a_relist_without_it_too() {
        let mut view = listed(node("u1", "1", None));
        view.written(node("u1", "3", Some("idle")), idle());
        assert!(!view.apply(watcher::Event::Delete(node("u0", "2", None))), "another object's deletion");
        assert!(view.apply(watcher::Event::Delete(node("u1", "4", None))));
        assert!(view.node().is_none());
        assert!(view.apply(watcher::Event::Apply(node("u2", "5", None))));
        assert!(!view.apply(watcher::Event::Init));
        assert!(view.apply(watcher::Event::InitDone), "listed without the node: deleted meanwhile");
        assert!(view.node().is_none());
    }

    #[test]
    fn a_write_that_found_no_node_leaves_nothing_to_decide_on() {
        let mut view = listed(node("u1", "1", None));
        view.gone();
        assert!(view.node().is_none());
        assert!(view.apply(watcher::Event::Apply(node("u2", "2", None))));
    }
}
