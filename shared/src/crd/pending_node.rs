use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A cloud instance that is joining or leaving the cluster and has no Node object (yet, or any
/// more). The operator creates and deletes these itself.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "update.edgeless.systems",
    version = "v1alpha1",
    kind = "PendingNode",
    plural = "pendingnodes",
    shortname = "pn",
    status = "PendingNodeStatus",
    doc = "A cloud instance joining or leaving the cluster.",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "Goal", type_ = "string", json_path = ".spec.goal"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.cspState"),
    printcolumn(name = "Reached", type_ = "boolean", json_path = ".status.reachedGoal"),
    printcolumn(name = "Deadline", type_ = "date", json_path = ".spec.deadline"),
    printcolumn(name = "Group", type_ = "string", json_path = ".spec.groupId", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct PendingNodeSpec {
    /// Cloud provider ID of the instance, as the Node's `spec.providerID` will carry it.
    #[serde(rename = "providerID")]
    #[schemars(length(min = 1, max = 1024))]
    pub provider_id: String,
    /// Cloud identifier of the scaling group the instance belongs to.
    #[serde(rename = "groupID")]
    #[schemars(length(min = 1, max = 1024))]
    pub group_id: String,
    /// Name the instance's Node object has or will have.
    #[schemars(length(min = 1, max = 253))]
    pub node_name: String,
    /// Whether the instance is joining or leaving.
    pub goal: PendingNodeGoal,
    /// When a joining instance that has not joined is given up and deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Time>,
}

/// Where a pending node is headed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PendingNodeGoal {
    #[default]
    Join,
    Leave,
}

/// Instance state as the cloud provider reports it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum CspState {
    #[default]
    Unknown,
    Creating,
    Ready,
    Stopping,
    Stopped,
    Terminating,
    Terminated,
    Failed,
}

/// What the controller last observed of a pending node.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingNodeStatus {
    #[serde(default)]
    pub csp_state: CspState,
    /// Whether `goal` has been reached (the node joined, or the instance is gone).
    #[serde(default)]
    pub reached_goal: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
