use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, MicroTime};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use kube::core::Duration;
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
    printcolumn(
        name = "Cluster-Version",
        type_ = "string",
        json_path = ".spec.kubernetesClusterVersion",
        description = "desired Kubernetes version"
    ),
    printcolumn(name = "Up-To-Date", type_ = "integer", json_path = ".status.counts.upToDate"),
    printcolumn(name = "Outdated", type_ = "integer", json_path = ".status.counts.outdated"),
    printcolumn(
        name = "Replacing",
        type_ = "integer",
        json_path = ".status.counts.donors",
        description = "nodes being replaced by new instances (donors)"
    ),
    printcolumn(
        name = "Heirs",
        type_ = "integer",
        json_path = ".status.counts.heirs",
        description = "new nodes replacing them",
        priority = 1
    ),
    printcolumn(
        name = "Pending",
        type_ = "integer",
        json_path = ".status.counts.pending",
        description = "PendingNodes of replacements: instances joining or leaving"
    ),
    printcolumn(
        name = "Obsolete",
        type_ = "integer",
        json_path = ".status.counts.obsolete",
        description = "replaced nodes whose instance is being deleted",
        priority = 1
    ),
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
    /// nodes, an OS version for nodes updated in place). At most 1024 characters, no control
    /// characters, no white space at either end: the node annotations carry it as it is.
    #[schemars(schema_with = "image_schema")]
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
    /// How the rollout proceeds: how many nodes at once, timeouts, failure budget, window.
    #[serde(default, skip_serializing_if = "RolloutPolicy::is_default")]
    pub rollout: RolloutPolicy,
}

/// Go duration syntax without a sign, as `metav1.Duration` writes it (`90s`, `1h30m`).
const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";

/// The rollout policy of a NodeVersion. Every field is optional; the defaults are the safe ones.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPolicy {
    /// How many nodes may be updating (staging, cordoned, draining, rebooting, soaking) at once: a
    /// count of at least 1 or a percentage (`"10%"`) of the selected nodes, rounded up. Nodes that are
    /// NotReady or cordoned for other reasons count against it. Default 1. Control-plane nodes are
    /// updated first and one at a time, whatever this says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "max_unavailable_schema")]
    pub max_unavailable: Option<IntOrString>,
    /// How long a node keeps its slot after it was verified healthy, before the next node may take
    /// it. Default `0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub soak_time: Option<Duration>,
    /// How long draining a node may take. Default `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub drain_timeout: Option<Duration>,
    /// What happens when a drain times out. The node is uncordoned and marked Blocked either way;
    /// `Continue` (default) goes on with other nodes, `Stop` starts no new node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_drain_timeout: Option<DrainTimeoutAction>,
    /// Once the failure budget is spent: `Stop` (default) starts no new node; `Rollback` moves the nodes this
    /// rollout updated back to `status.lastCompleteImage` through the same gates, in the reverse order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<super::rollback::FailureAction>,
    /// How long the agent may take to download and stage the image. Default `30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub stage_timeout: Option<Duration>,
    /// How long a node may take from the reboot request until it is Ready on the new image with a
    /// new boot ID. Default `15m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub reboot_timeout: Option<Duration>,
    /// No new node starts once this many nodes failed to update to the current image. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub failure_budget: Option<i32>,
    /// When new nodes may start. Outside the window no node starts; nodes in flight finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_window: Option<MaintenanceWindow>,
    /// Which nodes this NodeVersion manages. Default: nodes labelled
    /// `update.edgeless.systems/managed=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// How pods are evicted.
    #[serde(default, skip_serializing_if = "DrainOptions::is_default")]
    pub drain: DrainOptions,
    /// Start no new node while true; nodes in flight finish.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// How many nodes may be staged ahead of their turn at once (the image downloaded and written by the host's
    /// updater while the node still serves): a count of at least 1 or a percentage of the nodes, rounded up.
    /// Staging does not disrupt a node, so it is outside `maxUnavailable`: a node counts against `maxUnavailable`
    /// from its cordon to its verification, and the next nodes stage while earlier ones drain and reboot. Default:
    /// `maxUnavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "max_unavailable_schema")]
    pub max_staging: Option<IntOrString>,
    /// How many extra instances replacements may add at once (nodes of a ScalingGroup are replaced by new
    /// instances, not updated in place): a count of at least 1 or a percentage (`"10%"`) of the nodes to be
    /// replaced, rounded up. Default 1. The nodes a replacement drains count against `maxUnavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "max_unavailable_schema")]
    pub max_surge: Option<IntOrString>,
    /// How long a new instance may take to become a Ready node before it is deleted and its replacement
    /// counts as failed. Default `30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub join_timeout: Option<Duration>,
    /// How long deleting a replaced node's instance may take before the deletion is retried and reported.
    /// Default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub leave_timeout: Option<Duration>,
    /// Annotation names that must all be `"true"` on a drained node before it reboots (in-place updates). The
    /// controller labels the node `update.edgeless.systems/before-reboot=true` once it is drained, for the user's
    /// own hook (a Job that sets rook's `noout`, say) to act and set them; it removes the label and these
    /// annotations when the node reboots or leaves the step. At most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 317), regex(pattern = QUALIFIED_NAME_PATTERN)))]
    pub before_reboot: Vec<String>,
    /// Annotation names that must all be `"true"` on a rebooted node, verified on the new image, before it is
    /// uncordoned. The controller labels it `update.edgeless.systems/after-reboot=true` meanwhile, and removes the
    /// label and these annotations when the step ends. At most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 317), regex(pattern = QUALIFIED_NAME_PATTERN)))]
    pub after_reboot: Vec<String>,
    /// How long a node may wait at a `beforeReboot` or `afterReboot` checkpoint before it is blocked (uncordoned,
    /// `CheckpointTimedOut`). Default `30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub checkpoint_timeout: Option<Duration>,
    /// Workloads settled before the next node: a node whose pods belong to a Deployment, StatefulSet or
    /// ReplicaSet that is not whole again (fewer available replicas than wanted), or are covered by a
    /// PodDisruptionBudget that is not healthy, is not drained or replaced until they are (held as
    /// `WaitingForWorkloads`), so the pods evicted from the last node are back before the next one that runs the
    /// same workloads goes. Nodes that run none of them are not held. Default `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settle_workloads: bool,
    /// With `settleWorkloads`: how long a node may wait for its workloads before its hold is reported as
    /// `SettleTimedOut` (a Warning Event); the node stays held, a degraded workload is never disrupted further.
    /// Default `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub settle_timeout: Option<Duration>,
    /// At most this many nodes of one zone (`topology.kubernetes.io/zone`) may be unavailable at once, within
    /// `maxUnavailable`: a count of at least 1. Nodes start zone by zone (control-plane nodes first); nodes without
    /// a zone count as one zone. Default: no limit beyond `maxUnavailable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_unavailable_per_zone: Option<i32>,
    /// More maintenance windows, beside `maintenanceWindow`: new nodes start while any of them is open. At most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub maintenance_windows: Vec<MaintenanceWindow>,
    /// Absolute periods in which no new node starts whatever the windows say (a freeze); nodes in flight finish.
    /// At most 32.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub maintenance_exclusions: Vec<MaintenanceExclusion>,
    /// Health checks on any object of the cluster (a Ceph cluster's health, say): no node starts while one is not
    /// `true` (`HealthCheckFailing`), and one that stays false longer than its `timeout` stops the rollout
    /// (`HealthCheckTimedOut`). At most 16, names unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub health_checks: Vec<super::health_check::HealthCheck>,
    /// Canary waves: the rollout's nodes go in these waves, in order, each of `nodes` nodes (a count, or a
    /// percentage of the selected nodes rounded up; `"100%"`: all the rest), and the next wave starts only once every
    /// node of the previous one is done and has soaked for its `soak`, with every gate open. Nodes past the last
    /// wave go as if a last wave of `"100%"` followed. Within a wave, `maxUnavailable` and every other rule apply.
    /// At most 16. Default: no waves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub waves: Vec<Wave>,
    /// Whether, during a rollout, the nodes not on the target yet carry the taint
    /// `update.edgeless.systems/outdated:PreferNoSchedule`, so that pods evicted from a draining node are scheduled on
    /// updated nodes (while those have room) rather than on a node that is updated next. The controller removes it from
    /// each node once the node is verified on the target, and from every node when the rollout completes, is paused,
    /// this is turned off or the NodeVersion is deleted. Default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_updated_nodes: Option<bool>,
}

/// An absolute period in which no new node starts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceExclusion {
    /// For messages, for example `black-friday`.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// When it begins (RFC 3339).
    pub start: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// When it ends (RFC 3339), after `start`.
    pub end: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

/// A Kubernetes qualified name (an annotation key): an optional DNS subdomain prefix and `/`, then a name of at
/// most 63 characters.
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

impl RolloutPolicy {
    fn is_default(&self) -> bool {
        *self == RolloutPolicy::default()
    }
}

/// What a drain timeout does to the rollout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DrainTimeoutAction {
    /// Mark the node Blocked and go on with the others.
    #[default]
    Continue,
    /// Mark the node Blocked and start no new node.
    Stop,
}

/// A recurring window in which nodes may start updating, as Karpenter's disruption budgets
/// write it: it opens at every time `schedule` matches and stays open for `duration`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// Standard 5-field cron expression (minute hour day-of-month month day-of-week, names and
    /// `@daily`-style macros allowed), for example `"0 22 * * mon-fri"`.
    #[schemars(length(min = 1, max = 256))]
    pub schedule: String,
    /// How long the window stays open after each start, at most `168h`.
    #[schemars(schema_with = "duration_schema")]
    pub duration: Duration,
    /// IANA time zone the schedule is read in, for example `Europe/Berlin`. Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

/// How pods are evicted during a drain; the defaults are `kubectl drain`'s.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainOptions {
    /// Evict pods that use emptyDir volumes (their data is lost), like
    /// `kubectl drain --delete-emptydir-data`. Without it such a pod blocks the drain.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_empty_dir_data: bool,
    /// Evict pods that no controller manages (they are not recreated), like
    /// `kubectl drain --force`. Without it such a pod blocks the drain.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

impl DrainOptions {
    fn is_default(&self) -> bool {
        *self == DrainOptions::default()
    }
}

/// `spec.image` as the node protocol reads a target (`shared::protocol::parse_target`).
fn image_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": crate::protocol::MAX_TARGET_LEN,
        "pattern": crate::protocol::TARGET_PATTERN
    })
}

pub(super) fn duration_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "pattern": DURATION_PATTERN })
}

/// Where `maxUnavailable` may go: a count of at least 1 or a percentage from 1% to 100%.
const MAX_UNAVAILABLE_PERCENT_PATTERN: &str = "^(100|[1-9][0-9]?)%$";

/// `maxUnavailable` (and `maxSurge`) in the structural int-or-string form controller-gen writes: exactly
/// `anyOf: [{type: integer}, {type: string}]`, with the value validations beside the `anyOf` (a real API
/// server refuses a CRD with anything else inside the branches). The API server's validator applies each
/// validation to the values it is about: `minimum` to integers, `pattern` to strings.
fn max_unavailable_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": int_or_string_branches(),
        "minimum": 1,
        "pattern": MAX_UNAVAILABLE_PERCENT_PATTERN
    })
}

/// The two branches of an int-or-string field. kube's schema rewriter strips `type` from plain `anyOf`
/// branches (leaving `anyOf: [{}, {}]`), so [`set_int_or_string_branches`] puts them back after generation.
fn int_or_string_branches() -> serde_json::Value {
    serde_json::json!([{ "type": "integer" }, { "type": "string" }])
}

/// Puts the typed branches back into the generated CRD.
pub(super) fn set_int_or_string_branches(
    crd: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    for version in &mut crd.spec.versions {
        let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else { continue };
        let field = schema
            .properties
            .as_mut()
            .and_then(|p| p.get_mut("spec"))
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("rollout"))
            .and_then(|r| r.properties.as_mut())
            .map(|p| {
                p.iter_mut().filter(|(name, _)| matches!(name.as_str(), "maxUnavailable" | "maxSurge")).map(|(_, f)| f)
            });
        for field in field.into_iter().flatten() {
            if let Ok(branches) = serde_json::from_value(int_or_string_branches()) {
                field.any_of = Some(branches);
            }
        }
        // And a wave's `nodes`.
        let nodes = schema
            .properties
            .as_mut()
            .and_then(|p| p.get_mut("spec"))
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("rollout"))
            .and_then(|r| r.properties.as_mut())
            .and_then(|p| p.get_mut("waves"))
            .and_then(|w| w.items.as_mut())
            .and_then(|items| match items {
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(
                    item,
                ) => item.properties.as_mut(),
                _ => None,
            })
            .and_then(|p| p.get_mut("nodes"));
        if let (Some(nodes), Ok(branches)) = (nodes, serde_json::from_value(int_or_string_branches())) {
            nodes.any_of = Some(branches);
        }
    }
}

/// What the controller last observed of the rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeVersionStatus {
    /// `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The image the status describes (spec.image when it was computed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_image: Option<String>,
    /// How many managed nodes are in each situation.
    #[serde(default)]
    pub counts: NodeCounts,
    /// The nodes being updated now, with their step and since when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_flight: Vec<InFlightNode>,
    /// Outdated nodes the controller does not start, each with the reason (at most 50; the
    /// `Progressing` condition counts them all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_back: Vec<HeldBackNode>,
    /// Nodes of scaling groups being replaced (donors), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub donors: Vec<String>,
    /// The new nodes replacing them (heirs), joining or paired with their donor, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heirs: Vec<String>,
    /// The PendingNodes of replacements (instances joining or leaving), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// Replaced nodes whose Node is gone and whose instance is being deleted, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub obsolete: Vec<String>,
    /// Donors past their new instance's join, each with the step of its replacement and since when, to the
    /// millisecond: `retire` (its drain and its Node's deletion, since the drain started) or `release` (its Node is
    /// gone and its instance being deleted, since that was found). `update-operator plan` measures the
    /// replacement's steps from them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replacing: Vec<InFlightNode>,
    /// `Progressing`, `UpToDate`, `Blocked`, `Failed` and `SelectorOverlap`, each with a reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// True while the nodes are upgraded to `spec.kubernetesClusterVersion` (not every node runs it yet), as
    /// Constellation's status has it; the image is updated only after.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub active_cluster_version_upgrade: bool,
    /// With `spec.kubernetesClusterVersion`: each node's kubelet version and components hash, by name (at most
    /// 500).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubelets: Vec<NodeKubelet>,
    /// The newest spec the controller found valid and acted on. While a later spec is invalid,
    /// nodes in flight finish under this one (its selector, timeouts and image) and no new node
    /// starts; a restarted controller reads it from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_valid_spec: Option<LastValidSpec>,
    /// How long each step of a node's update took on this NodeVersion's nodes, as the controller measured
    /// it (a running mean); `update-operator plan` forecasts rollouts with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_durations: Vec<StepDuration>,
    /// Each health check's last verdict (`spec.rollout.healthChecks`): whether it passes, since when, and what it
    /// saw.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<super::health_check::HealthCheckStatus>,
    /// With `spec.rollout.waves`: the wave the rollout is in (from 1), while it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<i32>,
    /// With `spec.rollout.waves`: the waves of the current targets found complete, and when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub waves: Vec<WaveCompleted>,
    /// The last image every selected node was found running (a rollout's target once complete; the fleet's image
    /// when it is uniform): what `onFailure: Rollback` goes back to. Never cleared by a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_complete_image: Option<String>,
    /// With `onFailure: Rollback`: the rollback under way or done, while `spec.image` is its `from`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<super::rollback::RollbackStatus>,
}

/// A canary wave of a rollout (`spec.rollout.waves`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Wave {
    /// How many nodes the wave takes: a count of at least 1, or a percentage (`"10%"`) of the selected nodes,
    /// rounded up.
    #[schemars(schema_with = "max_unavailable_schema")]
    pub nodes: IntOrString,
    /// How long the wave's nodes run once the last of them is done, before the next wave starts. Default `0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "duration_schema")]
    pub soak: Option<Duration>,
}

/// A canary wave that was complete: every node of it done (`status.waves`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaveCompleted {
    /// What the rollout moved its nodes to: the image, or `Kubernetes vX.Y.Z`.
    pub target: String,
    /// The wave's number, from 1.
    #[schemars(range(min = 1))]
    pub wave: i32,
    /// When the controller found the wave complete; its soak runs from here.
    pub at: MicroTime,
}

/// How long one step of a node's update takes, as measured.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepDuration {
    /// The step: `stage`, `drain`, `reboot`, `kubeadm-upgrade`, or a replacement's `replace`, `retire` and `release`.
    pub step: String,
    /// How many measurements the mean is made of (it weighs the last 50 the most).
    #[schemars(range(min = 1))]
    pub samples: i32,
    /// The mean, in milliseconds.
    #[schemars(range(min = 0))]
    pub mean_millis: i64,
    /// The 95th percentile (nearest rank) of `recentMillis`, in milliseconds: what the controller counts a step as
    /// taking when it decides whether a node can finish before its maintenance window closes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub p95_millis: Option<i64>,
    /// The last measurements (at most 20, oldest first), in milliseconds, so that the percentile survives a
    /// restart or a change of leader.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub recent_millis: Vec<i64>,
}

/// The Kubernetes version a node runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeKubelet {
    pub name: String,
    /// `status.nodeInfo.kubeletVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_version: Option<String>,
    /// The components hash its agent reports (what is installed on the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub components_hash: Option<String>,
}

/// A spec the controller validated, and the generation it had.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastValidSpec {
    /// `metadata.generation` of the NodeVersion when the spec was this.
    pub generation: i64,
    /// The spec as it was (kept as written; the controller validates it again when it reads it).
    #[schemars(schema_with = "opaque_object_schema")]
    pub spec: serde_json::Value,
}

/// An outdated node the controller does not start, and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldBackNode {
    pub name: String,
    /// Why, in PascalCase (`NoAgentReport`, `NodeNotReady`, `CordonedByOther`,
    /// `SelectorOverlap`, ...).
    pub reason: String,
    pub message: String,
}

/// An object stored as it is: its fields are not part of the schema.
fn opaque_object_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// A node being updated.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InFlightNode {
    pub name: String,
    /// The step of the node's intent: `stage`, `drain`, `reboot`, or `done` while it soaks.
    pub step: String,
    /// When the node entered the step, to the millisecond (`update-operator plan` measures step
    /// durations from it; whole seconds would bias them by up to a second).
    pub since: MicroTime,
    /// What the node's drain waits on (a pod a PodDisruptionBudget protects, a pod terminating),
    /// while it drains and waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_on: Option<String>,
}

/// Node counts of a NodeVersion status. Every managed node is in exactly one of
/// `upToDate`, `outdated`, `inProgress`, `failed` and `blocked`; and the lengths of the replacement lists.
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
    /// Of the `outdated` nodes, those held back for a reason of their own (see `heldBack`).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub held_back: i32,
    /// The length of `donors`: nodes being replaced.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub donors: i32,
    /// The length of `heirs`: new nodes replacing them.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub heirs: i32,
    /// The length of `pending`: PendingNodes of replacements.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub pending: i32,
    /// The length of `obsolete`: replaced nodes whose instance is being deleted.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub obsolete: i32,
}
