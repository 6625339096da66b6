use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Whether the cluster-autoscaler may run; the operator pauses it (scales its Deployment to 0)
/// while nodes are replaced, so that it does not fight the replacement.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "update.edgeless.systems",
    version = "v1alpha1",
    kind = "AutoscalingStrategy",
    plural = "autoscalingstrategies",
    shortname = "as",
    status = "AutoscalingStrategyStatus",
    doc = "Controls the cluster-autoscaler during node replacement.",
    printcolumn(name = "Enabled", type_ = "boolean", json_path = ".spec.enabled"),
    printcolumn(name = "Deployment", type_ = "string", json_path = ".spec.deploymentName"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas")
)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingStrategySpec {
    /// Whether the cluster-autoscaler should run.
    #[serde(default)]
    pub enabled: bool,
    /// Name of the cluster-autoscaler Deployment.
    #[schemars(length(min = 1, max = 253))]
    pub deployment_name: String,
    /// Namespace of the cluster-autoscaler Deployment.
    #[schemars(length(min = 1, max = 63))]
    pub deployment_namespace: String,
    /// Extra command-line arguments for the cluster-autoscaler (`--name=value`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub autoscaler_extra_args: BTreeMap<String, String>,
}

/// What the controller last observed of the autoscaler.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingStrategyStatus {
    /// Whether the autoscaler is running.
    #[serde(default)]
    pub enabled: bool,
    /// Replicas of the autoscaler Deployment.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub replicas: i32,
}
