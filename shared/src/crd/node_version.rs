use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired OS image and Kubernetes version of every managed node.
///
/// There is normally one NodeVersion per cluster; the user edits its spec to start a rollout.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "update.edgeless.systems",
    version = "v1alpha1",
    kind = "NodeVersion",
    plural = "nodeversions",
    shortname = "nv",
    status = "NodeVersionStatus",
    doc = "The desired OS image and Kubernetes version of the cluster's nodes.",
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image", description = "desired OS image"),
    printcolumn(name = "Up-To-Date", type_ = "integer", json_path = ".status.counts.upToDate"),
    printcolumn(name = "Outdated", type_ = "integer", json_path = ".status.counts.outdated"),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"UpToDate\")].reason",
        description = "reason of the UpToDate condition"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct NodeVersionSpec {
    /// Reference of the OS image every node should run (a cloud image reference for replaced
    /// nodes, an OS version for nodes updated in place).
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// Human-readable version of `image`, for display.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub image_version: Option<String>,
    /// Name of the immutable ConfigMap (in `kube-system`) that lists the Kubernetes component URLs
    /// and hashes every node should run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub kubernetes_components_reference: Option<String>,
    /// Kubernetes version of the control plane, for example `v1.33.2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$"))]
    pub kubernetes_cluster_version: Option<String>,
}

/// What the controller last observed of the rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeVersionStatus {
    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many managed nodes are in each situation.
    #[serde(default)]
    pub counts: NodeCounts,
    /// `Progressing`, `UpToDate`, `Blocked` and `Failed`, each with a reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Node counts of a NodeVersion status. Every managed node is in exactly one of
/// `upToDate`, `outdated`, `inProgress`, `failed` and `blocked`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeCounts {
    // i32 rather than u32: `format: uint32` is not a format the API server knows.
    #[schemars(range(min = 0))]
    pub total: i32,
    #[schemars(range(min = 0))]
    pub up_to_date: i32,
    #[schemars(range(min = 0))]
    pub outdated: i32,
    #[schemars(range(min = 0))]
    pub in_progress: i32,
    #[schemars(range(min = 0))]
    pub failed: i32,
    #[schemars(range(min = 0))]
    pub blocked: i32,
}
