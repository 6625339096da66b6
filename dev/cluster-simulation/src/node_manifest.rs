//! The Node object of a simulated machine, as its kubelet registers it. The dev cluster registers its nodes with it,
//! and so do the cloud emulators when one of their instances boots; it lives apart from both so that neither
//! depends on the other for it.

use k8s_openapi::api::core::v1::Node;
use serde_json::json;

/// The label that opts a node into update-operator.
pub const MANAGED_LABEL: &str = "update.edgeless.systems/managed";
/// The label and taint key of control-plane nodes.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// A node named `name`, labelled and tainted for its role (as kubelets register them; also for bridges of real
/// clouds' instances in tests).
pub fn node_manifest(name: &str, control_plane: bool) -> Node {
    let mut node = json!({"metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            MANAGED_LABEL: "true"}},
        "spec": {}});
    if control_plane {
        node["metadata"]["labels"][CONTROL_PLANE_LABEL] = json!("");
        node["spec"]["taints"] = json!([{"key": CONTROL_PLANE_LABEL, "effect": "NoSchedule"}]);
    }
    match serde_json::from_value(node) {
        Ok(node) => node,
        Err(error) => unreachable!("the node manifest is a literal Node: {error}"),
    }
}
