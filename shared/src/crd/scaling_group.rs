use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One scaling group of the cloud provider (AWS Auto Scaling group, Azure VM Scale Set, GCP
/// managed instance group) whose nodes are replaced rather than updated in place.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "update.edgeless.systems",
    version = "v1alpha1",
    kind = "ScalingGroup",
    plural = "scalinggroups",
    shortname = "sg",
    status = "ScalingGroupStatus",
    doc = "A scaling group of the cloud provider whose nodes the operator replaces.",
    printcolumn(name = "Group", type_ = "string", json_path = ".spec.groupId"),
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.role"),
    printcolumn(name = "Image", type_ = "string", json_path = ".status.imageReference"),
    printcolumn(
        name = "Outdated",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Outdated\")].reason",
        description = "reason of the Outdated condition: whether new instances get the NodeVersion's image"
    ),
    printcolumn(name = "Min", type_ = "integer", json_path = ".spec.min", priority = 1),
    printcolumn(name = "Max", type_ = "integer", json_path = ".spec.max", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ScalingGroupSpec {
    /// Name of the NodeVersion whose image new nodes of this group get.
    #[schemars(length(min = 1, max = 253))]
    pub node_image: String,
    /// Cloud identifier of the group (ASG name or ARN, VMSS resource ID, MIG path).
    #[schemars(length(min = 1, max = 1024))]
    pub group_id: String,
    /// Name of the group as the cluster-autoscaler knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler_group_name: Option<String>,
    /// Name of the node group (for example `worker_default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_group_name: Option<String>,
    /// Whether the cluster-autoscaler may scale this group.
    #[serde(default)]
    pub autoscaling: bool,
    /// Lower bound of the group size for the autoscaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min: Option<i32>,
    /// Upper bound of the group size for the autoscaler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max: Option<i32>,
    /// Role of the group's nodes; control-plane groups are replaced before worker groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<NodeRole>,
}

/// Role of the nodes of a scaling group.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum NodeRole {
    Worker,
    ControlPlane,
}

/// What the controller last observed of a scaling group.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingGroupStatus {
    /// Image reference new instances of the group are created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_reference: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
