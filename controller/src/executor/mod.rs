//! Applies a plan: one merge patch of the Node per writing action, drain tasks started and
//! stopped, Events published.
//!
//! # Guarantees
//! - Every Node write is fenced by the leadership term: it starts only while the term is valid and
//!   is cancelled when the term ends.
//! - Every Node write is a JSON merge patch of only the keys that change, conditional on the
//!   resourceVersion the decision was taken on (a concurrent change makes it fail with 409 and the
//!   reconciler plans again on fresh data).
//! - IMPORTANT: the cordon and the `cordoned-by` record are one write, and so are every uncordon and
//!   the removal of the record, so a crash between writes can never leave a node cordoned without
//!   the record that makes the controller uncordon it later.
//! - Until the watch delivers the controller's own write, the reconciler plans with the object the
//!   API server returned for it ([`OwnWrites`], shared with the NodeOp controller), so it never acts twice on a
//!   stale view, nor misses a node the NodeOp controller just started.

pub(crate) mod in_flight;
mod node_state;
mod replacement;
mod taint;

pub use node_state::{DrainEffect, drain_effect, next_state};
use replacement::{FollowUp, is_cloud_step, replacement_keys, step_key};

use crate::cloud_steps::{CloudSteps, Failure, Poll};
use crate::do_not_disrupt::{Look, LookupFailed, PodHolds};
use crate::drain::Drains;
use crate::events::{Events, node_reference};
use crate::leadership::Term;
use crate::metrics::{ActionLabels, Metrics};
use crate::nodes::SlimNode;
use crate::own_writes::OwnWrites;
use crate::policy::taint::Retaint;
use crate::policy::{ActionKind, NodeAction, Reason};
use crate::replacer::{InstanceRequest, Replacer, RetireError};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use parking_lot::Mutex;
use shared::crd::DrainOptions;
use shared::protocol::patch::NodePatch;
use shared::protocol::{ControllerAnnotations, Intent, Step, Token, UnreadableKeys, keys, parse_target};
use std::collections::HashMap;
use std::sync::Arc;

/// Field manager of the controller's writes.
pub const FIELD_MANAGER: &str = "update-operator-controller";

/// What applying a plan ran into.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub writes: usize,
    /// Writes refused because the node changed since the decision; plan again soon.
    pub conflicts: usize,
    /// Starts not made because a do-not-disrupt pod runs on the node; plan again soon (the slot is free).
    pub held: usize,
    /// Writes that failed otherwise; plan again after a pause.
    pub errors: usize,
}

/// The actions of one rollout (or of the nodes no rollout selects), with what applying them needs.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub actions: &'a [NodeAction],
    /// How the rollout's drains evict.
    pub drain: DrainOptions,
    /// The NodeVersion whose Events tell of the actions (None: Events on the Node only).
    pub version: Option<&'a ObjectReference>,
    /// The rollout's `settleTimeout` when it waits for workloads to settle (`spec.rollout.settleWorkloads`, see
    /// `crate::settle`): a node is looked at for them before it starts.
    pub settle: Option<crate::settle::SettleFor<'a>>,
}

/// An action and the batch it belongs to.
type Planned<'a> = (&'a NodeAction, &'a Batch<'a>);

pub struct Executor {
    nodes: Api<SlimNode>,
    events: Events,
    drains: Arc<Drains>,
    metrics: Metrics,
    writes: Arc<OwnWrites>,
    /// The last problem reported per node, so each distinct problem is reported once.
    reported: Mutex<HashMap<String, String>>,
    /// The cloud side of replacements; without it, replacement steps fail (and are retried).
    replacer: Option<Arc<Replacer>>,
    /// The replacement steps running in the background (with a replacer).
    steps: Option<CloudSteps>,
    /// Node writes that follow background steps, by node.
    follow_ups: Mutex<HashMap<String, FollowUp>>,
    /// The look for do-not-disrupt pods before a node starts; None: no look (tests of other behaviour).
    pod_holds: Option<Arc<PodHolds>>,
}

impl Executor {
    pub fn new(nodes: Api<SlimNode>, events: Events, drains: Arc<Drains>, metrics: Metrics) -> Self {
        Executor {
            nodes,
            events,
            drains,
            metrics,
            writes: Arc::default(),
            reported: Mutex::default(),
            replacer: None,
            steps: None,
            follow_ups: Mutex::default(),
            pod_holds: None,
        }
    }

    /// Looks for do-not-disrupt pods on every node just before it starts, with `holds` (`crate::do_not_disrupt`).
    pub fn with_pod_holds(mut self, holds: Arc<PodHolds>) -> Self {
        self.pod_holds = Some(holds);
        self
    }

    /// The nodes held for what the look at their pods before a start found, with the hold: a do-not-disrupt pod
    /// (`DoNotDisrupt`), or a workload of their pods not whole again (`WaitingForWorkloads`, `SettleTimedOut`: see
    /// `crate::settle`).
    pub fn held_for_pods(&self) -> HashMap<String, crate::policy::Hold> {
        let Some(holds) = &self.pod_holds else { return HashMap::new() };
        let mut held = holds.settling();
        held.extend(
            holds
                .holding()
                .into_iter()
                .map(|(node, message)| (node, crate::policy::Hold::new(Reason::DoNotDisrupt, message))),
        );
        held
    }

    /// Ends the waits for workloads of the rollouts that are not `waiting` (by `crate::settle::key`): deleted,
    /// paused, retargeted (`crate::settle`).
    pub fn retain_settling(&self, waiting: impl Fn(&str) -> bool) {
        if let Some(holds) = &self.pod_holds {
            holds.retain_settling(waiting);
        }
    }

    /// Looks again at the pods of the nodes held for a pod whose time came (`crate::do_not_disrupt`).
    pub async fn recheck_pod_holds(&self) {
        if let Some(holds) = &self.pod_holds {
            holds.recheck_due().await;
        }
    }

    /// The nodes deferred for a budget that allows no disruption now, with why (`crate::budget_order`).
    pub fn deferred_for_budgets(&self) -> HashMap<String, String> {
        self.pod_holds.as_ref().map(|h| h.deferred()).unwrap_or_default()
    }

    /// When the first node held for a pod is looked at again.
    pub fn next_pod_recheck(&self) -> Option<tokio::time::Instant> {
        self.pod_holds.as_ref().and_then(|h| h.next_expiry())
    }

    /// Applies the replacement's cloud and PendingNode steps with `replacer`, in the background; `reconcile` is
    /// woken when one ends.
    pub fn with_replacer(mut self, replacer: Arc<Replacer>, reconcile: Arc<tokio::sync::Notify>) -> Self {
        self.replacer = Some(replacer);
        self.steps = Some(CloudSteps::new(reconcile));
        self
    }

    /// Records its Node writes in `writes` (shared with the other writers of Nodes) instead of its own.
    pub fn with_writes(mut self, writes: Arc<OwnWrites>) -> Self {
        self.writes = writes;
        self
    }

    /// The newest version of `node` the controller knows of: its own write (this executor's or another
    /// writer's) if the watch has not caught up with it, else the watched object.
    pub fn freshest(&self, node: SlimNode) -> SlimNode {
        self.writes.freshest(node)
    }

    /// The nodes with a write not delivered yet: [`Executor::freshest`] may give another object than the watched
    /// one.
    pub fn overlaid(&self) -> std::collections::HashSet<String> {
        self.writes.nodes()
    }

    /// Forgets writes and reported problems of nodes that no longer exist.
    pub fn retain_nodes(&self, exists: impl Fn(&str) -> bool) {
        self.writes.retain(&exists);
        if let Some(holds) = &self.pod_holds {
            holds.retain(&exists);
        }
        self.reported.lock().retain(|n, _| exists(n));
    }

    /// Applies the actions of `batches` and the changes of the taint of outdated nodes `taints`, deciding on `nodes`
    /// (the objects the plan saw), within `term`. A taint change goes into the node's write of its action when it has
    /// one, and is written alone otherwise.
    pub async fn apply(
        &self,
        term: &Term,
        batches: &[Batch<'_>],
        taints: &[Retaint],
        nodes: &HashMap<String, SlimNode>,
        now: Timestamp,
    ) -> Applied {
        // IMPORTANT: two phases. The plan starts new nodes in slots that other actions of the same
        // plan free (a node verified, failed, blocked or released). Writing both at once would let
        // the new node's intent land first (more nodes disrupted than the budget, for a moment), and
        // if a freeing write failed, the excess would last. So new nodes start only after every
        // other write of the plan succeeded.
        let (starts, others): (Vec<Planned<'_>>, Vec<Planned<'_>>) = batches
            .iter()
            .flat_map(|batch| batch.actions.iter().map(move |action| (action, batch)))
            .partition(|(a, _)| a.starts_node());
        let mut applied = Applied::default();
        self.follow_up(term, nodes, now, &mut applied).await;
        if let Some(steps) = &self.steps {
            let asked: std::collections::HashSet<(&str, String)> = others
                .iter()
                .filter(|(a, _)| is_cloud_step(&a.kind))
                .map(|(a, _)| (a.node.as_str(), step_key(a)))
                .collect();
            let follow_ups = self.follow_ups.lock();
            steps.retain(|node, step| {
                asked.contains(&(node, step.to_owned())) || follow_ups.get(node).is_some_and(|f| f.step == step)
            });
        }
        let retaint: HashMap<&str, bool> = taints.iter().map(|r| (r.node.as_str(), r.on)).collect();
        // A taint change of a node without a Node write of its own is written alone, beside the other writes; its
        // failure frees no slot, so it does not keep the new nodes from starting.
        let folded: std::collections::HashSet<&str> = (others.iter().chain(&starts))
            .filter(|(a, _)| a.kind.writes() && !is_cloud_step(&a.kind))
            .map(|(a, _)| a.node.as_str())
            .collect();
        let alone = taints.iter().filter(|r| !folded.contains(r.node.as_str()));
        let alone: Vec<_> = alone.filter_map(|r| Some(self.retaint(term, nodes.get(&r.node)?, r.on))).collect();
        let mut lone = Applied::default();
        // The looks at the starting nodes' pods only read: they run beside the writes that free the slots, so a
        // node's turn waits for the slowest of them, not for both one after the other (the hand-off).
        let (results, (), looks) = futures::future::join3(
            in_flight::bounded(alone, in_flight::REQUESTS_IN_FLIGHT),
            self.apply_phase(term, &others, &retaint, nodes, now, &mut applied),
            self.look_at(&starts),
        )
        .await;
        for result in results {
            lone.count(result);
        }
        if applied.conflicts + applied.errors == 0 {
            let starts = self.without_pod_holds(starts, looks, &mut applied);
            self.apply_phase(term, &starts, &retaint, nodes, now, &mut applied).await;
        } else if !starts.is_empty() {
            tracing::debug!(held = starts.len(), "not starting new nodes: a write that frees their slots failed");
        }
        applied.writes += lone.writes;
        applied.conflicts += lone.conflicts;
        applied.errors += lone.errors;
        applied
    }

    /// A look at each starting node's pods, all at once (`None` when pods are not looked at): what
    /// [`Executor::without_pod_holds`] decides on.
    async fn look_at(&self, starts: &[Planned<'_>]) -> Option<Vec<Result<Look, LookupFailed>>> {
        let holds = self.pod_holds.as_ref()?;
        // Also before a node is staged ahead: a staged node that waits for its workloads would keep its staging slot
        // from a node that runs none of them.
        let looks: Vec<_> = starts.iter().map(|(action, batch)| holds.look(&action.node, batch.settle)).collect();
        Some(in_flight::bounded(looks, in_flight::REQUESTS_IN_FLIGHT).await)
    }

    /// `starts` without the nodes a do-not-disrupt pod runs on (found by `looks`, [`Executor::look_at`]'s, one per
    /// start), nor, for a rollout that waits for workloads to settle, those whose start disrupts a workload that is
    /// not whole (`crate::settle`), nor those whose look failed (nothing starts unseen).
    fn without_pod_holds<'a>(
        &self,
        starts: Vec<Planned<'a>>,
        looks: Option<Vec<Result<Look, LookupFailed>>>,
        applied: &mut Applied,
    ) -> Vec<Planned<'a>> {
        let (Some(holds), Some(found)) = (&self.pod_holds, looks) else { return starts };
        let mut allowed = Vec::with_capacity(starts.len());
        for (planned, found) in starts.into_iter().zip(found) {
            match found {
                Ok(Look { hold: Some(message), .. }) => {
                    tracing::info!(node = %planned.0.node, reason = %message, "not started: do not disrupt");
                    applied.held += 1;
                }
                Ok(Look { settle: Some(hold), .. }) => {
                    tracing::info!(node = %planned.0.node, reason = %hold.reason, detail = %hold.message, "not started: workloads not settled");
                    applied.held += 1;
                }
                // A budget would make its drain wait: the next node takes the slot, once (`crate::budget_order`).
                Ok(Look { budget: Some(why), .. }) if holds.defer(&planned.0.node, why.clone()) => {
                    tracing::info!(node = %planned.0.node, reason = %why, "deferred: another node may take the slot");
                    applied.held += 1;
                }
                Ok(_) => allowed.push(planned),
                Err(error) => {
                    tracing::warn!(node = %planned.0.node, %error, "not started");
                    applied.errors += 1;
                }
            }
        }
        allowed
    }

    async fn apply_phase(
        &self,
        term: &Term,
        actions: &[Planned<'_>],
        retaint: &HashMap<&str, bool>,
        nodes: &HashMap<String, SlimNode>,
        now: Timestamp,
        applied: &mut Applied,
    ) {
        let mut writes: Vec<futures::future::BoxFuture<'_, WriteResult>> = Vec::new();
        for (action, batch) in actions {
            let Some(node) = nodes.get(&action.node) else { continue };
            match &action.kind {
                ActionKind::KeepDraining => self.drains.ensure(&action.node, batch.drain, term),
                ActionKind::Report => self.report_problem(node, action, batch.version),
                kind if is_cloud_step(kind) => writes.push(Box::pin(self.replacement_step(
                    term,
                    node,
                    nodes,
                    action,
                    batch.version,
                    now,
                    batch.drain,
                ))),
                _ => {
                    let taint = retaint.get(action.node.as_str()).copied();
                    writes.push(Box::pin(self.write(term, node, action, taint, batch.version, now, batch.drain)))
                }
            }
        }
        for result in in_flight::bounded(writes, in_flight::REQUESTS_IN_FLIGHT).await {
            applied.count(result);
        }
    }

    fn report_problem(&self, node: &SlimNode, action: &NodeAction, version: Option<&ObjectReference>) {
        let mut reported = self.reported.lock();
        if reported.get(&action.node) == Some(&action.message) {
            return;
        }
        reported.insert(action.node.clone(), action.message.clone());
        tracing::warn!(node = %action.node, reason = %action.reason, detail = %action.message, "node left untouched");
        let node_ref = node_reference(&action.node, node.uid());
        self.events.publish(node_ref.clone(), None, action.reason, action.message.clone(), "Inspect");
        if let Some(version) = version {
            let message = format!("{}: {}", action.node, action.message);
            self.events.publish(version.clone(), Some(node_ref), action.reason, message, "Inspect");
        }
    }

    /// Publishes the Events of an action done: on the node, and on the NodeVersion if there is one.
    fn announce(&self, node: &SlimNode, action: &NodeAction, version: Option<&ObjectReference>) {
        let verb = action.kind.name();
        let node_ref = node_reference(&action.node, node.uid());
        self.events.publish(node_ref.clone(), None, action.reason, action.message.clone(), verb);
        if let Some(version) = version {
            let message = format!("{}: {}", action.node, action.message);
            self.events.publish(version.clone(), Some(node_ref), action.reason, message, verb);
        }
    }

    /// Writes the action's changes of the node, and the taint of outdated nodes (`taint`: on, off, or as it is).
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        term: &Term,
        node: &SlimNode,
        action: &NodeAction,
        taint: Option<bool>,
        version: Option<&ObjectReference>,
        now: Timestamp,
        drain: DrainOptions,
    ) -> WriteResult {
        if drain_effect(&action.kind) == DrainEffect::Stop {
            self.drains.stop(&action.node);
        }
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let current = match ControllerAnnotations::read(&annotations) {
            Ok(current) => current,
            // An intent of ours that no agent can read is only ever removed.
            Err(UnreadableKeys { ours: Some(ours), .. }) if action.kind == ActionKind::Release => {
                ControllerAnnotations { intent: None, cordoned_by_us: ours.cordoned_by_us }
            }
            // The policy never acts on malformed annotations; if they turned malformed since, do not.
            Err(_) => return WriteResult::Conflict,
        };
        let (next, unschedulable) = next_state(&current, node.unschedulable(), action, Token::fresh(), now);
        // IMPORTANT: never write an intent the agent cannot read: the node would hold an intent
        // nobody acts on (and, before this check, its budget slot was lost).
        if let Some(intent) = &next.intent
            && let Err(error) = parse_target(keys::INTENT_TARGET, &intent.target)
        {
            tracing::error!(node = %action.node, reason = %action.reason, %error, "refusing to write an unreadable intent");
            return WriteResult::Failed;
        }
        // A checkpoint's own write sets it; every other write ends it (`crate::checkpoint`).
        let set = match &action.kind {
            ActionKind::Checkpoint { phase, waits } => Some((*phase, waits.as_slice())),
            _ => None,
        };
        let (checkpoint, checkpoint_labels) =
            crate::checkpoint::changes(set, node.metadata.labels.as_ref(), &annotations, now);
        let ours = next.render().into_iter().chain(replacement_keys(action)).map(|(k, v)| (k.to_owned(), v));
        let patch = NodePatch::annotations(Some(&annotations), ours.chain(checkpoint))
            .labels(node.metadata.labels.as_ref(), checkpoint_labels)
            .unschedulable(node.unschedulable(), unschedulable);
        let mut want = node.spec.taints.clone();
        let patch = match &action.kind {
            ActionKind::Shield { donor } => {
                let shield = crate::replacer::taint(&crate::policy::replacement::shield(donor));
                if !want.iter().any(|t| t.key == shield.key) {
                    want.push(shield);
                }
                patch
            }
            ActionKind::Inherit { labels, taints, .. } => {
                want.retain(|t| t.key != crate::policy::replacement::SHIELD_TAINT);
                want.extend(
                    taints
                        .iter()
                        .filter(|t| !node.spec.taints.iter().any(|h| crate::replacer::taint_view(h) == **t))
                        .map(crate::replacer::taint),
                );
                patch.add_labels(node.metadata.labels.as_ref(), labels)
            }
            _ => patch,
        };
        // The taint of outdated nodes in the same write (`crate::policy::taint`): the `done` write that uncordons a
        // verified node lifts it too.
        if let Some(on) = taint {
            want = taint::with_outdated(want, on);
        }
        let patch = taint::taints_patch(patch, node, want).if_unchanged_since(node.resource_version());
        if patch.is_empty() {
            return WriteResult::Unchanged;
        }
        let labels = |result| ActionLabels { reason: action.reason.to_string(), result };
        let result = send(&self.nodes, term, node, &patch, &self.writes).await;
        match result {
            WriteResult::Fenced => {
                self.metrics.actions.get_or_create(&labels("fenced")).inc();
                tracing::debug!(node = %action.node, reason = %action.reason, "node not written: leadership ended");
            }
            WriteResult::Written => {
                self.metrics.actions.get_or_create(&labels("ok")).inc();
                tracing::info!(node = %action.node, reason = %action.reason, detail = %action.message, "node updated");
                self.announce(node, action, version);
                if drain_effect(&action.kind) == DrainEffect::Start {
                    // No need to wait for the next reconcile to start evicting.
                    self.drains.ensure(&action.node, drain, term);
                }
            }
            WriteResult::Conflict => {
                self.metrics.actions.get_or_create(&labels("conflict")).inc();
                tracing::debug!(node = %action.node, reason = %action.reason, "node changed since the decision; planning again");
            }
            WriteResult::Unchanged => {}
            WriteResult::Failed => {
                self.metrics.actions.get_or_create(&labels("error")).inc();
                tracing::warn!(node = %action.node, reason = %action.reason, "node write failed; will retry");
            }
        }
        result
    }
}

/// Sends one Node write of the controller (a rollout's or a NodeOp's): the merge patch `patch` of `node`, within
/// `term`, recorded in `writes` once the API server accepted it (so both controllers plan with it before the watch
/// delivers it). The one way the controller writes a Node: a conflict (409: the node changed since the decision)
/// and a Node gone (404) are told apart from a failure to retry.
pub(crate) async fn send(
    nodes: &Api<SlimNode>,
    term: &Term,
    node: &SlimNode,
    patch: &NodePatch,
    writes: &OwnWrites,
) -> WriteResult {
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    match term.fence(nodes.patch(node.name(), &params, &Patch::Merge(patch.to_json()))).await {
        Err(_) => WriteResult::Fenced,
        Ok(Ok(mut written)) => {
            written.trim();
            writes.record(node.name(), node.resource_version(), written);
            WriteResult::Written
        }
        Ok(Err(kube::Error::Api(status))) if status.code == 409 => WriteResult::Conflict,
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => WriteResult::Unchanged,
        Ok(Err(error)) => {
            tracing::warn!(node = %node.name(), %error, "node write failed");
            WriteResult::Failed
        }
    }
}

impl Applied {
    fn count(&mut self, result: WriteResult) {
        match result {
            WriteResult::Written => self.writes += 1,
            WriteResult::Unchanged | WriteResult::Fenced => {}
            WriteResult::Conflict => self.conflicts += 1,
            WriteResult::Failed => self.errors += 1,
        }
    }
}

/// How a Node write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteResult {
    /// Written, and recorded as the controller's own write.
    Written,
    /// Nothing to write (or the Node is gone).
    Unchanged,
    /// The Node changed since the decision (409): decide again.
    Conflict,
    /// The API server refused or failed: retried on the next round.
    Failed,
    /// Not written: the leadership term ended.
    Fenced,
}

#[cfg(test)]
mod tests;
