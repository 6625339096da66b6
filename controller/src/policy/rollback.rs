//! Automatic rollback (`spec.rollout.onFailure: Rollback`, issue 34 item 5): once a rollout's failure budget is
//! spent, the nodes it updated go back to the last image every selected node ran (`status.lastCompleteImage`).
//!
//! # How
//! A rollback is the rollout acting on another target: while `status.rollback` records one whose `from` is the
//! spec's image, [`Rollout::new`](super::Rollout::new) makes the acting spec's target its `to` ([`acting`]). Every
//! flow then does the work as for any target change: nodes staging or draining for the failed image are released
//! (`TargetChanged`), a reboot under way is verified to its end, every node not on `to` is outdated and starts
//! again through the one pipeline — its gates (`paused`, windows and exclusions, health checks, ...), its budget,
//! one control-plane node at a time — and a node of a scaling group is replaced by a new instance of `to` (the
//! ScalingGroup controller reads the same acting target). The nodes this rollout never moved already run `to`.
//! Canary waves do not hold a rollback (`pipeline::open`): they prove a new image, and `to` ran on every
//! node.
//!
//! # When
//! - **Start**: the failure budget gate (`gates.rs`) finds the budget spent for the spec's image, with
//!   `onFailure: Rollback` and a known `lastCompleteImage` other than the image: its hold is `RollbackStarted`
//!   (a Warning Event), nothing starts in that round, and the plan carries the record to write
//!   ([`Plan::rollback_started`](super::Plan::rollback_started)). Only once the record is in the status does a
//!   node move back: a controller that stops in between starts the rollback again from the same facts, and a new
//!   leader continues a recorded one instead of forgetting it. Without a `lastCompleteImage` (or when it is the
//!   image itself) the rollout stops as with `Stop`, and `FailureBudgetExhausted` says why it does not roll back.
//! - **Its own budget**: during the rollback the failure budget counts the nodes that failed to go back to `to`
//!   (the failures for the image are for another target now). Once spent, the rollback stops: `RollbackFailed`
//!   (a Warning Event), nothing more starts, the nodes already back stay back.
//! - **End**: once every selected node runs `to` again the rollout holds with `RolledBack`: nothing more starts
//!   until `spec.image` changes. A new image drops the record (it no longer matches) and starts a new rollout.
//!   `lastCompleteImage` is never cleared by a failure.
//!
//! # Order
//! The reverse of the start order ([`cmp`]): workers zone by zone and by name, both descending, so that the node
//! updated last goes back first; control-plane nodes **last** (one at a time, as always), and none while a worker
//! of the rollout still has to go back. Control plane first on the way up and last on the way down keeps a newer
//! API server than any kubelet at every instant whenever an image carries the Kubernetes version (a Bottlerocket
//! variant does): the version-skew policy's rule, in both directions. Two things keep their forward sense, since
//! they are not about when a node was updated: the controller's own node still goes last among the workers (it
//! moves the rollback), and a node a PodDisruptionBudget deferred still goes after the others of its zone.

use super::members::Order;
use super::{Rollout, SpecState, ValidSpec};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use shared::crd::{NodeVersionStatus, RollbackStatus};
use std::cmp::Ordering;
use std::sync::Arc;

/// A rollback recorded in `status.rollback`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Active {
    /// The image the rollout moved to when its budget was spent (`spec.image`).
    pub from: String,
    /// The image the nodes go back to.
    pub to: String,
    pub since: Timestamp,
}

impl Active {
    /// The rollback `status` records for a spec whose image is `image`: none when it records one of another image
    /// (the user changed the target: a new rollout).
    pub fn recorded(status: Option<&NodeVersionStatus>, image: &str) -> Option<Active> {
        let r = status?.rollback.as_ref().filter(|r| r.from == image && !r.to.is_empty())?;
        Some(Active { from: r.from.clone(), to: r.to.clone(), since: r.since.0 })
    }

    /// For `status.rollback`.
    pub fn to_status(&self) -> RollbackStatus {
        RollbackStatus { from: self.from.clone(), to: self.to.clone(), since: MicroTime(self.since) }
    }
}

/// The spec a rollout acts on while `active` is under way: the same spec, its target `active.to` (the last valid
/// spec's too while the current one is invalid). Without a rollback, `spec` itself.
pub fn acting(spec: SpecState, active: Option<&Active>) -> SpecState {
    let Some(active) = active else { return spec };
    let retarget = |s: &Arc<ValidSpec>| {
        if s.target == active.from {
            Arc::new(ValidSpec { target: active.to.clone(), ..ValidSpec::clone(s) })
        } else {
            Arc::clone(s)
        }
    };
    match spec {
        SpecState::Valid(s) => SpecState::Valid(retarget(&s)),
        SpecState::Invalid { errors, last_valid } => {
            SpecState::Invalid { errors, last_valid: last_valid.as_ref().map(retarget) }
        }
    }
}

/// What the failure budget gate says once the budget for `target` is spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spent {
    /// Stop starting nodes; with `onFailure: Rollback`, why it does not roll back.
    Stop { no_rollback: Option<String> },
    /// Roll back to this image.
    Rollback { to: String },
    /// The rollback itself failed.
    RollbackFailed { from: String, to: String },
}

/// What `rollout`, acting on `spec`, does once its failure budget is spent. `image_flow`: the flow is the image's
/// (a Kubernetes upgrade is not rolled back).
pub fn on_spent(rollout: &Rollout, spec: &ValidSpec, image_flow: bool) -> Spent {
    if let Some(active) = &rollout.rollback {
        return Spent::RollbackFailed { from: active.from.clone(), to: active.to.clone() };
    }
    if spec.policy.on_failure != shared::crd::FailureAction::Rollback || !image_flow {
        return Spent::Stop { no_rollback: None };
    }
    match rollout.last_complete.as_deref() {
        Some(to) if to != spec.target => Spent::Rollback { to: to.to_owned() },
        Some(_) => Spent::Stop {
            no_rollback: Some(format!(
                "onFailure is Rollback, but the last image every node ran (status.lastCompleteImage) is {} itself",
                spec.target
            )),
        },
        None => Spent::Stop {
            no_rollback: Some(
                "onFailure is Rollback, but no image every selected node ran is known (status.lastCompleteImage), so \
                 the rollout stops"
                    .to_owned(),
            ),
        },
    }
}

/// The rollback's order of two members' start orders (`Order`: control plane first, own node last, zone,
/// deferred, name): control plane last, the own node still last among the workers, zones and names descending,
/// deferred nodes still after the others of their zone.
pub fn cmp(a: &Order, b: &Order) -> Ordering {
    let (a_worker, a_own, a_zone, a_deferred, a_name) = a;
    let (b_worker, b_own, b_zone, b_deferred, b_name) = b;
    b_worker
        .cmp(a_worker)
        .then(a_own.cmp(b_own))
        .then(b_zone.cmp(a_zone))
        .then(a_deferred.cmp(b_deferred))
        .then(b_name.cmp(a_name))
}

/// The one image every node runs (`images`: each selected node's reported image), if there is one and a node.
pub fn uniform<'i>(mut images: impl Iterator<Item = Option<&'i str>>) -> Option<String> {
    let first = images.next()??;
    images.all(|i| i == Some(first)).then(|| first.to_owned())
}

/// The image every node `index` selects runs, found for each rollout of `plans` that no node has reached, failed or
/// been blocked for yet (a new target over a fleet that may be uniform; the first nodes may be under way), into its
/// [`Plan::uniform_image`](super::Plan::uniform_image). It reads the nodes only while that is so, once for all
/// such rollouts.
pub fn find_uniform<'n>(plans: &mut [super::Plan], nodes: impl Fn() -> Vec<&'n super::NodeView>) {
    let mut read: Option<Vec<&'n super::NodeView>> = None;
    for (index, plan) in plans.iter_mut().enumerate() {
        let c = plan.counts;
        if c.total == 0 || c.up_to_date + c.failed + c.blocked > 0 {
            continue;
        }
        let nodes = read.get_or_insert_with(&nodes);
        let selected = nodes.iter().filter(|n| n.selected_by.contains(&index));
        plan.uniform_image = uniform(selected.map(|n| node_image(n)));
    }
}

/// The image a node runs: its agent's report, or else (a node of a scaling group, which runs no agent) the image the
/// cloud created it from, as the replacement reads it.
pub fn node_image(node: &super::NodeView) -> Option<&str> {
    super::assess::image(node.agent.as_ref().ok()).or(node.group.as_ref().and_then(|g| g.image.as_deref()))
}

/// `status.lastCompleteImage` after a plan: `complete` (the image every selected node runs now, if one does), else
/// what `previous` recorded. Never cleared.
pub fn last_complete(previous: Option<&NodeVersionStatus>, complete: Option<&str>) -> Option<String> {
    complete.map(str::to_owned).or_else(|| previous.and_then(|p| p.last_complete_image.clone()))
}

/// What `update-operator plan` says of `rollout`'s `onFailure: Rollback`, if it has it: the rollback under way (the
/// forecast is then the rollback's), or what a spent failure budget would do. `uniform`: the image every selected
/// node runs now, which the controller records as `lastCompleteImage` at its first plan when the status has none.
pub fn forecast_note(rollout: &Rollout, uniform: Option<&str>) -> Option<String> {
    let spec = rollout.spec.acting()?;
    if let Some(active) = &rollout.rollback {
        return Some(format!(
            "NodeVersion {} is rolling back from {} to {} (status.rollback): the forecast is the rollback's, the last \
             updated node first and the control plane last",
            rollout.name, active.from, active.to
        ));
    }
    if spec.policy.on_failure != shared::crd::FailureAction::Rollback {
        return None;
    }
    Some(match rollout.last_complete.as_deref().or(uniform).filter(|to| *to != spec.target) {
        Some(to) => format!(
            "NodeVersion {}: onFailure is Rollback: once {} node(s) fail to update to {}, the nodes it updated go back \
             to {to}, the last first and the control plane last; the forecast assumes no node fails",
            rollout.name, spec.policy.failure_budget, spec.target
        ),
        None => format!(
            "NodeVersion {}: onFailure is Rollback, but no image every node ran is known (status.lastCompleteImage): \
             a spent failure budget stops the rollout as Stop does",
            rollout.name
        ),
    })
}

#[cfg(test)]
#[path = "rollback_tests.rs"]
mod tests;
