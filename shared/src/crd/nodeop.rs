//! The Kairos operator's `NodeOp` and `NodeOpUpgrade` (`operator.kairos.io/v1alpha1`, namespaced), field for field.

use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// API group of the Kairos resources.
pub const KAIROS_GROUP: &str = "operator.kairos.io";
/// Where the host's root filesystem is mounted in a NodeOp's container unless `hostMountPath` says otherwise.
pub const DEFAULT_HOST_MOUNT_PATH: &str = "/host";
/// The image of a NodeOp that names none (the Kairos operator's default).
pub const DEFAULT_IMAGE: &str = "busybox:latest";
/// A Job's `backoffLimit` when the NodeOp names none (the Kubernetes default, as Kairos uses it).
pub const DEFAULT_BACKOFF_LIMIT: i32 = 6;

/// An operation run on every selected node: a privileged container with the host's root filesystem mounted,
/// optionally with the node cordoned and drained before and rebooted after.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operator.kairos.io",
    version = "v1alpha1",
    kind = "NodeOp",
    plural = "nodeops",
    namespaced,
    status = "NodeOpStatus",
    doc = "An operation run on the selected nodes, one Job per node (Kairos NodeOp).",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Concurrency", type_ = "integer", json_path = ".spec.concurrency"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpSpec {
    /// Which nodes the operation runs on; every node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// The command of the container (an argv vector; a shell only if it names one).
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
    /// Where the host's root filesystem is mounted in the container. Default `/host`.
    #[serde(default = "default_host_mount_path")]
    #[schemars(length(min = 1))]
    pub host_mount_path: String,
    /// The container image. Default `busybox:latest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Secrets (in the NodeOp's namespace) for pulling the image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Cordon the node before the operation (with the controller's ownership record) and uncordon it after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordon: Option<bool>,
    /// Uncordon a node (that this NodeOp cordoned) whose operation failed. Default: true here (Kairos: false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncordon_on_failure: Option<bool>,
    /// Drain the node (through the Eviction API) before the operation; needs `cordon`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_options: Option<NodeOpDrainOptions>,
    /// Reboot the node after the operation succeeded, through the node's update-operator agent; the reboot
    /// is verified (a new boot ID and the node Ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_on_success: Option<bool>,
    /// The Job's `backoffLimit`. Default 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backoff_limit: Option<i32>,
    /// How many nodes run the operation at once; 0 (the default) means every node at once (announced by a
    /// Warning Event). Control-plane nodes go first, one at a time, whatever this says.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub concurrency: i32,
    /// Start no new node once one failed (a failure budget of one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_on_failure: Option<bool>,
    /// A read-only check run on each node before the node is touched (Kairos): a Job on the node with the host
    /// root mounted read-only; a termination message skips the node (Completed, "Skipped by preflight: ..."),
    /// none lets it proceed, a failure fails it. See docs/nodeop.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<PreflightSpec>,
}

fn default_host_mount_path() -> String {
    DEFAULT_HOST_MOUNT_PATH.to_owned()
}

/// How a NodeOp drains its nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpDrainOptions {
    /// Drain before the operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Evict pods no controller manages (like `kubectl drain --force`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// The termination grace period of each evicted pod, in seconds (`kubectl drain --grace-period`); negative
    /// or absent: each pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,
    /// Leave the pods of existing DaemonSets in place (default true, as the Kairos operator's); false: as
    /// `kubectl drain` without `--ignore-daemonsets`, a node running such pods fails, nothing evicted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_daemon_sets: Option<bool>,
    /// Evict pods with emptyDir volumes (their data is lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_empty_dir_data: Option<bool>,
    /// How long the drain may take; then the node is uncordoned and counts as failed, as a rollout's drain
    /// timeout blocks its node. Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<i32>,
}

/// The Kairos operator's per-node check before the operation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightSpec {
    /// The command of the check's container; a message written to `/dev/termination-log` skips the node.
    pub command: Vec<String>,
    /// The check's image (default: the NodeOp's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// How long the check may run, restarts included (default 120); then the node fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i32>,
}

/// How long a preflight check may run when `activeDeadlineSeconds` is not set (the Kairos operator's default).
pub const DEFAULT_PREFLIGHT_DEADLINE_SECONDS: i32 = 120;

/// Where a NodeOp (or one of its nodes) is, with the Kairos operator's values.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum NodeOpPhase {
    #[default]
    Pending,
    /// A node's preflight check runs (the node is not touched yet).
    Preflight,
    Running,
    Completed,
    Failed,
}

impl NodeOpPhase {
    /// Whether nothing more happens (to the node).
    pub fn finished(self) -> bool {
        matches!(self, NodeOpPhase::Completed | NodeOpPhase::Failed)
    }
}

/// A node's reboot, with the Kairos operator's values and `no-agent` (reboot asked for, but the node has no
/// update-operator agent to carry it out).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RebootStatus {
    #[default]
    NotRequested,
    Cancelled,
    Pending,
    Completed,
    NoAgent,
}

/// The operation on one node, as the Kairos operator reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpNodeStatus {
    pub phase: NodeOpPhase,
    /// The node's Job (one per NodeOp and node, named deterministically).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default)]
    pub reboot_status: RebootStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// When the node's drain started (not in Kairos's status): its `timeoutSeconds` counts from here, across
    /// controller restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_started_at: Option<Time>,
}

/// What the controller last observed of a NodeOp.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpStatus {
    #[serde(default)]
    pub phase: NodeOpPhase,
    /// Per node name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_statuses: BTreeMap<String, NodeOpNodeStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// The generation the status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Progressing`, `Complete`, `Failed` and `Held` (why no further node starts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A Kairos OS upgrade of the selected nodes: a NodeOp with the Kairos upgrade command, cordon, drain and reboot.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operator.kairos.io",
    version = "v1alpha1",
    kind = "NodeOpUpgrade",
    plural = "nodeopupgrades",
    namespaced,
    status = "NodeOpUpgradeStatus",
    doc = "A Kairos OS upgrade of the selected nodes, run by a NodeOp it owns (Kairos NodeOpUpgrade).",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "NodeOp", type_ = "string", json_path = ".status.nodeOpName"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpUpgradeSpec {
    /// Which nodes are upgraded; every node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// The Kairos image to upgrade to (its root filesystem is the upgrade's source).
    #[schemars(length(min = 1))]
    pub image: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// As NodeOp's `concurrency`.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub concurrency: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_on_failure: Option<bool>,
    /// Upgrade the recovery partition. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_recovery: Option<bool>,
    /// Upgrade the active partition (and reboot into it). Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_active: Option<bool>,
    /// Upgrade even if the node already runs the image's version. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Run `kairos-agent --debug`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug: Option<bool>,
    /// Passed to the NodeOp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncordon_on_failure: Option<bool>,
    /// Host paths the upgrade leaves alone (`--exclude-path`), after `/etc/hostname` and `/etc/hosts`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_paths: Vec<String>,
}

/// What the controller last observed of a NodeOpUpgrade: its NodeOp's progress.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpUpgradeStatus {
    #[serde(default)]
    pub phase: NodeOpPhase,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_op_name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_statuses: BTreeMap<String, NodeOpNodeStatus>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_nodeop_takes_the_kairos_defaults() {
        let op: NodeOp = serde_json::from_value(serde_json::json!({
            "apiVersion": "operator.kairos.io/v1alpha1", "kind": "NodeOp",
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {"command": ["true"]}
        }))
        .unwrap();
        assert_eq!(op.spec.host_mount_path, "/host");
        assert_eq!(op.spec.concurrency, 0);
        assert!(op.spec.image.is_none() && op.spec.cordon.is_none());
    }

    #[test]
    fn reboot_statuses_are_written_as_kairos_writes_them() {
        assert_eq!(serde_json::to_value(RebootStatus::NotRequested).unwrap(), "not-requested");
        assert_eq!(serde_json::to_value(RebootStatus::NoAgent).unwrap(), "no-agent");
    }
}
