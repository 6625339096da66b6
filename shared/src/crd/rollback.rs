//! Automatic rollback (`spec.rollout.onFailure`, issue 34 item 5): what a rollout does once its failure budget is
//! spent, and the status record of a rollback under way, from which a new leader continues it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a rollout does once its failure budget is spent.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailureAction {
    /// Start no new node (nodes in flight finish).
    #[default]
    Stop,
    /// Move the nodes this rollout updated back to `status.lastCompleteImage`, the last image every selected node
    /// ran, through the same gates and budget, in the reverse of the start order. Without a known
    /// `lastCompleteImage`, as `Stop`.
    Rollback,
}

/// A rollback under way (or done): recorded before any node moves back, so that a new leader continues it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackStatus {
    /// The image the rollout was moving to (`spec.image`) when its failure budget was spent. The record holds while
    /// `spec.image` is this image; a new image drops it and starts a new rollout.
    pub from: String,
    /// The image the nodes go back to (`status.lastCompleteImage` when the rollback started).
    pub to: String,
    /// When the controller started the rollback.
    pub since: MicroTime,
}
