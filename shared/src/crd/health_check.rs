//! `spec.rollout.healthChecks[]` of a NodeVersion (issue 33): a CEL expression over any object of the cluster that
//! must hold before a node starts.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, MicroTime};
use kube::core::Duration;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most health checks one NodeVersion may have.
pub const MAX_HEALTH_CHECKS: usize = 16;
/// Longest CEL expression of a health check.
pub const MAX_EXPRESSION_LEN: usize = 4096;

/// A health check: no node of the rollout starts while `expression`, evaluated over the object it names (bound as
/// `self`, the whole object as the API server returns it), is not `true`, or has been `true` for less than `for`.
/// A check false for longer than `timeout` stops the rollout as failed (`HealthCheckTimedOut`) until it is true
/// again.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.objectName) != has(self.selector)", "message": "exactly one of objectName and selector must be set"}
]))]
pub struct HealthCheck {
    /// The check's name, for messages and the status: a DNS label (`ceph-health`), unique in the list.
    #[schemars(length(min = 1, max = 63), regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub name: String,
    /// The object's API version: `v1` for the core group, else `GROUP/VERSION` (`ceph.rook.io/v1`).
    #[schemars(length(min = 1, max = 317))]
    pub api_version: String,
    /// The object's kind (`CephCluster`, `ConfigMap`).
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// The object's namespace, for a namespaced kind. Without it, a selector lists every namespace; a namespaced
    /// kind read by name needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub namespace: Option<String>,
    /// The object's name. Exactly one of `objectName` and `selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub object_name: Option<String>,
    /// A label selector: every object it lists must pass, and it must list at least one. Exactly one of
    /// `objectName` and `selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// A CEL expression over `self` (the object) that is `true` when the object is healthy, for example
    /// `self.status.ceph.health == "HEALTH_OK"`. A missing field is an error, which fails the check: guard it with
    /// `has()`.
    #[schemars(length(min = 1, max = 4096))]
    pub expression: String,
    /// How long the expression must have been `true` before a node may start. Default `0s`.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::node_version::duration_schema")]
    pub hold_for: Option<Duration>,
    /// How long the expression may be other than `true` before the rollout stops as failed
    /// (`HealthCheckTimedOut`). Default `30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::node_version::duration_schema")]
    pub timeout: Option<Duration>,
}

/// A health check's last verdict, in the NodeVersion's status.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    /// The check's name.
    pub name: String,
    /// Whether the expression was true at the last evaluation.
    pub passing: bool,
    /// Since when it has been passing (or failing) without a break, to the millisecond.
    pub since: MicroTime,
    /// What it saw: the object and the value or the error.
    pub message: String,
}
