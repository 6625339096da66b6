//! The slice of a Node the controller keeps in memory, and the policy's view of it.
//!
//! A full `Node` carries images, capacities, addresses and more; at 5000 nodes that is most of a
//! controller's memory. [`SlimNode`] deserializes only what the policy reads, and the watch strips
//! managed fields and foreign annotations before the reflector stores it.

use crate::policy::{DrainProgress, NodeSelector, NodeView};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::ClusterResourceScope;
use serde::{Deserialize, Serialize};
use shared::protocol::{AgentReport, ControllerAnnotations, keys};
use std::borrow::Cow;

/// Label that marks control-plane nodes (kubeadm sets it).
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// A Node, reduced to what the controller reads.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct SlimNode {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SlimNodeSpec,
    #[serde(default)]
    pub status: SlimNodeStatus,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimNodeSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<bool>,
    /// The cloud instance behind the node (a replacement finds its scaling group by it).
    #[serde(default, rename = "providerID", skip_serializing_if = "Option::is_none")]
    pub provider_id: Option<String>,
    /// The taints (a replacement copies an administrator's to the new node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimNodeStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<SlimCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_info: Option<SlimNodeInfo>,
    /// The node's addresses (a control-plane node's etcd member is found by them when not by its name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<SlimAddress>,
}

/// One of `status.addresses` (`InternalIP`, `ExternalIP`, `Hostname`...).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct SlimAddress {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub address: String,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct SlimCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    /// When the status last changed (how long a new node has been Ready, for the soak time).
    #[serde(rename = "lastTransitionTime", default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct SlimNodeInfo {
    #[serde(rename = "bootID", default)]
    pub boot_id: String,
    #[serde(rename = "kubeletVersion", default)]
    pub kubelet_version: String,
}

impl kube::Resource for SlimNode {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Node".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The well-known label of a node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

impl SlimNode {
    /// Drops what the controller never reads: managed fields, and annotations outside the
    /// protocol's prefix but Karpenter's do-not-disrupt and those a checkpoint waits for.
    pub fn trim(&mut self) {
        self.metadata.managed_fields = None;
        if let Some(annotations) = &mut self.metadata.annotations {
            let waits = crate::checkpoint::waits(annotations);
            annotations.retain(|k, _| {
                k.starts_with(keys::PREFIX) || k == crate::do_not_disrupt::KARPENTER_ANNOTATION || waits.contains(k)
            });
        }
        self.status.conditions.retain(|c| c.type_ == "Ready");
    }

    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    /// Its addresses, as text (`status.addresses`).
    pub fn addresses(&self) -> Vec<String> {
        self.status.addresses.iter().map(|a| a.address.clone()).filter(|a| !a.is_empty()).collect()
    }

    pub fn ready(&self) -> bool {
        self.status.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
    }

    pub fn unschedulable(&self) -> bool {
        self.spec.unschedulable.unwrap_or(false)
    }

    /// The policy's view of this node: `selectors` are the node selectors of the rollouts, in the
    /// order given to the policy (None for a rollout without a known selector, which selects
    /// nothing).
    pub fn view<'a>(
        &self,
        selectors: impl IntoIterator<Item = Option<&'a NodeSelector>>,
        drain: DrainProgress,
    ) -> NodeView {
        let empty = Default::default();
        let annotations = self.metadata.annotations.as_ref().unwrap_or(&empty);
        let labels = self.metadata.labels.as_ref();
        let selected_by = selectors
            .into_iter()
            .enumerate()
            .filter(|(_, selector)| selector.is_some_and(|s| s.matches(labels)))
            .map(|(i, _)| i)
            .collect();
        NodeView {
            name: self.name().to_owned(),
            control_plane: labels.is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL)),
            selected_by,
            opted_in: shared::protocol::is_managed(labels),
            ready: self.ready(),
            unschedulable: self.unschedulable(),
            kubelet_boot_id: self.status.node_info.as_ref().map(|i| i.boot_id.clone()).filter(|b| !b.is_empty()),
            kubelet_version: self
                .status
                .node_info
                .as_ref()
                .map(|i| i.kubelet_version.clone())
                .filter(|v| !v.is_empty()),
            controller: ControllerAnnotations::read(annotations),
            agent: AgentReport::parse(annotations),
            drain,
            group: None,
            operation: annotations.get(keys::NODE_OPERATION).cloned(),
            do_not_disrupt: crate::do_not_disrupt::marked(Some(annotations)).map(crate::do_not_disrupt::node_message),
            checkpoint: crate::checkpoint::Checkpoint::read(labels, annotations),
            zone: labels.and_then(|l| l.get(ZONE_LABEL)).filter(|z| !z.is_empty()).cloned(),
            deferred: None,
            settle: None,
            outdated_taint: self.spec.taints.iter().any(|t| t.key == crate::policy::taint::OUTDATED_TAINT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_node_reads_into_the_slim_view() {
        let node: SlimNode = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "cp-0", "resourceVersion": "7",
                "labels": {"node-role.kubernetes.io/control-plane": "", "update.edgeless.systems/managed": "true"},
                "annotations": {"update.edgeless.systems/os-image": "v1", "update.edgeless.systems/boot-id": "b",
                                "node.alpha.kubernetes.io/ttl": "0", "karpenter.sh/do-not-disrupt": "true"},
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"unschedulable": true, "podCIDR": "10.0.0.0/24"},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                       "nodeInfo": {"bootID": "b", "osImage": "Some Linux"}, "images": [{"names": ["x"]}]}
        }))
        .unwrap();
        let mut trimmed = node.clone();
        trimmed.trim();
        assert!(trimmed.metadata.managed_fields.is_none());
        // Ours, and Karpenter's do-not-disrupt (read as ours).
        assert_eq!(trimmed.metadata.annotations.as_ref().unwrap().len(), 3);
        let default = NodeSelector::default();
        let view = trimmed.view([None, Some(&default)], DrainProgress::NotRunning);
        assert!(view.control_plane && view.ready && view.unschedulable);
        assert_eq!(view.selected_by, vec![1]);
        assert_eq!(view.kubelet_boot_id.as_deref(), Some("b"));
        assert_eq!(view.agent.unwrap().os_image.as_deref(), Some("v1"));
        assert_eq!(
            view.do_not_disrupt.as_deref(),
            Some("the Node is annotated karpenter.sh/do-not-disrupt=true; it starts once the annotation is removed")
        );
    }
}
