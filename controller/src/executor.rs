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

use crate::cloud_steps::{CloudSteps, Failure, Poll};
use crate::do_not_disrupt::{Look, PodHolds};
use crate::drain::Drains;
use crate::events::{Events, node_reference};
use crate::leadership::Term;
use crate::metrics::{ActionLabels, Metrics};
use crate::nodes::SlimNode;
use crate::own_writes::OwnWrites;
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

    /// The nodes held for a do-not-disrupt pod found on them, with the reason.
    pub fn held_for_pods(&self) -> HashMap<String, String> {
        self.pod_holds.as_ref().map(|h| h.holding()).unwrap_or_default()
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

    /// Applies the actions of `batches`, deciding on `nodes` (the objects the plan saw), within
    /// `term`.
    pub async fn apply(
        &self,
        term: &Term,
        batches: &[Batch<'_>],
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
        self.apply_phase(term, &others, nodes, now, &mut applied).await;
        if applied.conflicts + applied.errors == 0 {
            let starts = self.without_pod_holds(starts, &mut applied).await;
            self.apply_phase(term, &starts, nodes, now, &mut applied).await;
        } else if !starts.is_empty() {
            tracing::debug!(held = starts.len(), "not starting new nodes: a write that frees their slots failed");
        }
        applied
    }

    /// Writes the Node writes of background steps that succeeded since the last apply; forgets those whose step
    /// is no longer known (the plan asks for it again if it still must be done).
    async fn follow_up(&self, term: &Term, nodes: &HashMap<String, SlimNode>, now: Timestamp, applied: &mut Applied) {
        let Some(steps) = &self.steps else { return };
        let due: Vec<FollowUp> = {
            let mut follow_ups = self.follow_ups.lock();
            follow_ups.retain(|node, f| steps.knows(node, &f.step));
            let done: Vec<String> =
                follow_ups.iter().filter(|(node, f)| steps.take_done(node, &f.step)).map(|(n, _)| n.clone()).collect();
            done.iter().filter_map(|node| follow_ups.remove(node)).collect()
        };
        for f in due {
            let Some(node) = nodes.get(&f.action.node) else { continue };
            match self.write(term, node, &f.action, f.version.as_ref(), now, f.drain).await {
                WriteResult::Written => applied.writes += 1,
                WriteResult::Unchanged | WriteResult::Fenced => {}
                WriteResult::Conflict => applied.conflicts += 1,
                WriteResult::Failed => applied.errors += 1,
            }
        }
    }

    /// `starts` without the nodes a do-not-disrupt pod runs on (found by a look at each node's pods, all at once),
    /// nor those whose look failed (nothing starts unseen).
    async fn without_pod_holds<'a>(&self, starts: Vec<Planned<'a>>, applied: &mut Applied) -> Vec<Planned<'a>> {
        let Some(holds) = &self.pod_holds else { return starts };
        let looks = starts.iter().map(|(action, _)| holds.look(&action.node));
        let found = futures::future::join_all(looks).await;
        let mut allowed = Vec::with_capacity(starts.len());
        for (planned, found) in starts.into_iter().zip(found) {
            match found {
                Ok(Look { hold: Some(message), .. }) => {
                    tracing::info!(node = %planned.0.node, reason = %message, "not started: do not disrupt");
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
                _ => writes.push(Box::pin(self.write(term, node, action, batch.version, now, batch.drain))),
            }
        }
        for result in futures::future::join_all(writes).await {
            match result {
                WriteResult::Written => applied.writes += 1,
                WriteResult::Unchanged => {}
                WriteResult::Conflict => applied.conflicts += 1,
                WriteResult::Failed => applied.errors += 1,
                WriteResult::Fenced => {}
            }
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

    /// A replacement step that is not (only) a Node write: the cloud, etcd and PendingNode side through the replacer,
    /// run in the background ([`crate::cloud_steps`]), then, once it is done and the plan asks for the step again,
    /// the Node write of an abandoned or released instance. Returns without waiting on the cloud.
    #[allow(clippy::too_many_arguments)]
    async fn replacement_step(
        &self,
        term: &Term,
        node: &SlimNode,
        nodes: &HashMap<String, SlimNode>,
        action: &NodeAction,
        version: Option<&ObjectReference>,
        now: Timestamp,
        drain: DrainOptions,
    ) -> WriteResult {
        let Some((replacer, steps)) = self.replacer.as_ref().zip(self.steps.as_ref()) else {
            tracing::error!(node = %action.node, reason = %action.reason, "a replacement step without a cloud configured");
            return WriteResult::Failed;
        };
        match steps.poll(&action.node, &step_key(action), term) {
            Poll::Start => {
                if matches!(action.kind, ActionKind::AbandonReplacement { .. } | ActionKind::ReleaseInstance { .. }) {
                    let follow_up =
                        FollowUp { step: step_key(action), action: action.clone(), version: version.cloned(), drain };
                    self.follow_ups.lock().insert(action.node.clone(), follow_up);
                }
                self.start_step(replacer, steps, term, node, nodes, action, now);
                return WriteResult::Unchanged;
            }
            Poll::Running | Poll::Settling => return WriteResult::Unchanged,
            Poll::Failed { failure, .. } => {
                if failure.etcd {
                    // Named where users look (an Event on the node and the NodeVersion, once per message): the
                    // donor stays, drained, until its member can be removed.
                    let hold = NodeAction {
                        node: action.node.clone(),
                        kind: ActionKind::Report,
                        reason: Reason::EtcdUnavailable,
                        message: failure.message,
                    };
                    self.report_problem(node, &hold, version);
                }
                return WriteResult::Unchanged;
            }
            Poll::Done => {}
        }
        match &action.kind {
            ActionKind::AbandonReplacement { .. } | ActionKind::ReleaseInstance { .. } => {
                self.follow_ups.lock().remove(&action.node);
                self.write(term, node, action, version, now, drain).await
            }
            _ => {
                tracing::info!(node = %action.node, reason = %action.reason, detail = %action.message, "replacement step done");
                self.announce(node, action, version);
                WriteResult::Written
            }
        }
    }

    /// Starts the cloud, etcd and PendingNode side of `action` in the background.
    #[allow(clippy::too_many_arguments)]
    fn start_step(
        &self,
        replacer: &Arc<Replacer>,
        steps: &CloudSteps,
        term: &Term,
        node: &SlimNode,
        nodes: &HashMap<String, SlimNode>,
        action: &NodeAction,
        now: Timestamp,
    ) {
        let (replacer, owned_term, donor) = (replacer.clone(), term.clone(), node.clone());
        let other = |message: String| Failure { message, etcd: false };
        let work: futures::future::BoxFuture<'static, Result<(), Failure>> = match &action.kind {
            ActionKind::CreateInstance { group_id, pending, deadline } => {
                // What the creation reads of other nodes: those of the group (an unrecorded request, a node to adopt).
                let group = replacer.group_nodes(nodes, group_id);
                let (group_id, pending, deadline) = (group_id.clone(), pending.clone(), *deadline);
                Box::pin(async move {
                    let request = InstanceRequest { donor: &donor, group_id: &group_id, pending: &pending, deadline };
                    replacer.create_instance(&owned_term, request, &group, now).await.map_err(other)
                })
            }
            ActionKind::AbandonReplacement { join_pending, deadline } => {
                let (join_pending, deadline) = (join_pending.clone(), *deadline);
                Box::pin(async move {
                    replacer.abandon(&owned_term, donor.name(), join_pending.as_deref(), deadline).await.map_err(other)
                })
            }
            ActionKind::Retire { remove_etcd_member, heir, join_pending } => {
                self.drains.stop(&action.node);
                let (heir, heir_node) = (heir.clone(), nodes.get(heir).cloned());
                let (remove, join_pending) = (*remove_etcd_member, join_pending.clone());
                Box::pin(async move {
                    let heir = (heir.as_str(), heir_node.as_ref());
                    match replacer.retire(&owned_term, &donor, heir, remove, join_pending.as_deref()).await {
                        Ok(()) => Ok(()),
                        Err(RetireError::Etcd(message)) => Err(Failure { message, etcd: true }),
                        Err(RetireError::Other(message)) => Err(other(message)),
                    }
                })
            }
            ActionKind::ReleaseInstance { pending, donor: donor_ref, deadline } => {
                let (pending, donor_ref, deadline) = (pending.clone(), donor_ref.clone(), *deadline);
                Box::pin(async move {
                    replacer.release_instance(&owned_term, &pending, &donor_ref, deadline).await.map_err(other)
                })
            }
            _ => return,
        };
        let (metrics, node_name, reason) = (self.metrics.clone(), action.node.clone(), action.reason);
        steps.start(&action.node, &step_key(action), term, async move {
            let outcome = work.await;
            let result = if outcome.is_ok() { "ok" } else { "error" };
            metrics.actions.get_or_create(&ActionLabels { reason: reason.to_string(), result }).inc();
            if let Err(failure) = &outcome {
                tracing::warn!(node = %node_name, %reason, error = %failure.message, "replacement step failed; will retry");
            }
            outcome
        });
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

    async fn write(
        &self,
        term: &Term,
        node: &SlimNode,
        action: &NodeAction,
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
        let patch = match &action.kind {
            ActionKind::Shield { donor } => {
                let shield = crate::replacer::taint(&crate::policy::replacement::shield(donor));
                let current = serde_json::to_value(&node.spec.taints).unwrap_or_default();
                let mut want = node.spec.taints.clone();
                if !want.iter().any(|t| t.key == shield.key) {
                    want.push(shield);
                }
                patch.taints(&current, serde_json::to_value(want).unwrap_or_default())
            }
            ActionKind::Inherit { labels, taints, .. } => {
                let current = serde_json::to_value(&node.spec.taints).unwrap_or_default();
                let mut want = node.spec.taints.clone();
                want.retain(|t| t.key != crate::policy::replacement::SHIELD_TAINT);
                want.extend(
                    taints
                        .iter()
                        .filter(|t| !node.spec.taints.iter().any(|h| crate::replacer::taint_view(h) == **t))
                        .map(crate::replacer::taint),
                );
                patch
                    .add_labels(node.metadata.labels.as_ref(), labels)
                    .taints(&current, serde_json::to_value(want).unwrap_or_default())
            }
            _ => patch,
        }
        .if_unchanged_since(node.resource_version());
        if patch.is_empty() {
            return WriteResult::Unchanged;
        }
        let labels = |result| ActionLabels { reason: action.reason.to_string(), result };
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        let written = match term.fence(self.nodes.patch(&action.node, &params, &Patch::Merge(patch.to_json()))).await {
            Ok(written) => written,
            Err(fenced) => {
                self.metrics.actions.get_or_create(&labels("fenced")).inc();
                tracing::debug!(node = %action.node, reason = %action.reason, %fenced, "node not written");
                return WriteResult::Fenced;
            }
        };
        match written {
            Ok(mut written) => {
                written.trim();
                self.writes.record(&action.node, node.resource_version(), written);
                self.metrics.actions.get_or_create(&labels("ok")).inc();
                tracing::info!(node = %action.node, reason = %action.reason, detail = %action.message, "node updated");
                self.announce(node, action, version);
                if drain_effect(&action.kind) == DrainEffect::Start {
                    // No need to wait for the next reconcile to start evicting.
                    self.drains.ensure(&action.node, drain, term);
                }
                WriteResult::Written
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.metrics.actions.get_or_create(&labels("conflict")).inc();
                tracing::debug!(node = %action.node, reason = %action.reason, "node changed since the decision; planning again");
                WriteResult::Conflict
            }
            Err(kube::Error::Api(status)) if status.code == 404 => WriteResult::Unchanged,
            Err(error) => {
                self.metrics.actions.get_or_create(&labels("error")).inc();
                tracing::warn!(node = %action.node, reason = %action.reason, %error, "node write failed; will retry");
                WriteResult::Failed
            }
        }
    }
}

enum WriteResult {
    Written,
    Unchanged,
    Conflict,
    Failed,
    /// Not written: the leadership term ended.
    Fenced,
}

/// Whether the action is a replacement step run in the background ([`crate::cloud_steps`]).
fn is_cloud_step(kind: &ActionKind) -> bool {
    matches!(
        kind,
        ActionKind::CreateInstance { .. }
            | ActionKind::Retire { .. }
            | ActionKind::ReleaseInstance { .. }
            | ActionKind::AbandonReplacement { .. }
    )
}

/// A background step's key: its kind with what it acts on, not its deadline (which the plan computes anew each
/// round): the same step asked for again has the same key.
fn step_key(action: &NodeAction) -> String {
    match &action.kind {
        ActionKind::CreateInstance { group_id, pending, .. } => format!("CreateInstance/{group_id}/{pending}"),
        ActionKind::AbandonReplacement { join_pending, .. } => {
            format!("AbandonReplacement/{}", join_pending.as_deref().unwrap_or_default())
        }
        ActionKind::Retire { remove_etcd_member, heir, join_pending } => {
            format!("Retire/{heir}/{remove_etcd_member}/{}", join_pending.as_deref().unwrap_or_default())
        }
        ActionKind::ReleaseInstance { pending, donor, .. } => format!("ReleaseInstance/{pending}/{}", donor.name),
        other => other.name().to_owned(),
    }
}

/// The Node write that follows a background step once it succeeded (the release of an abandoned donor, the heir's
/// `donor` annotations removed after its donor's instance is released): written on the next apply whatever the
/// plan asks then, since the plan, seeing the cloud's side done, may not ask for the step again.
#[derive(Debug, Clone)]
struct FollowUp {
    step: String,
    action: NodeAction,
    version: Option<ObjectReference>,
    drain: DrainOptions,
}

/// The replacement's annotations an action writes beside the controller annotations: the heir on a donor being
/// drained, the donor on its heir (and their removal once the donor's instance is released).
fn replacement_keys(action: &NodeAction) -> Vec<(&'static str, Option<String>)> {
    match &action.kind {
        ActionKind::DrainDonor { heir, .. } => vec![(keys::HEIR, Some(heir.clone()))],
        ActionKind::Inherit { donor, .. } => vec![
            (keys::DONOR, Some(donor.name.clone())),
            (keys::DONOR_PROVIDER_ID, Some(donor.provider_id.clone())),
            (keys::DONOR_GROUP, Some(donor.group_id.clone())),
        ],
        ActionKind::ReleaseInstance { .. } => {
            vec![(keys::DONOR, None), (keys::DONOR_PROVIDER_ID, None), (keys::DONOR_GROUP, None)]
        }
        _ => Vec::new(),
    }
}

/// What an action does to the node's drain task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainEffect {
    /// Nothing.
    None,
    /// Start it unless it runs (after the action's write, if any, succeeded).
    Start,
    /// Stop it and forget its progress (before the action's write).
    Stop,
}

/// The drain side of `kind`.
pub fn drain_effect(kind: &ActionKind) -> DrainEffect {
    match kind {
        ActionKind::Drain { .. } | ActionKind::DrainDonor { .. } | ActionKind::KeepDraining => DrainEffect::Start,
        // IMPORTANT: stop evicting before the node is uncordoned, or a drain could go on evicting
        // pods from a node that is schedulable again.
        ActionKind::Done { .. }
        | ActionKind::Fail { .. }
        | ActionKind::Block { .. }
        | ActionKind::Release
        | ActionKind::AbandonReplacement { .. }
        | ActionKind::Retire { .. } => DrainEffect::Stop,
        ActionKind::Stage { .. }
        | ActionKind::Reboot { .. }
        | ActionKind::KubeadmUpgrade { .. }
        | ActionKind::Uncordon
        | ActionKind::Report
        | ActionKind::Replace { .. }
        | ActionKind::CreateInstance { .. }
        | ActionKind::Shield { .. }
        | ActionKind::Inherit { .. }
        | ActionKind::ReleaseInstance { .. }
        | ActionKind::Checkpoint { .. } => DrainEffect::None,
    }
}

/// The controller annotations and `spec.unschedulable` an action leads to.
pub fn next_state(
    current: &ControllerAnnotations,
    unschedulable: bool,
    action: &NodeAction,
    token: Token,
    now: Timestamp,
) -> (ControllerAnnotations, bool) {
    let mut next = current.clone();
    let mut want_unschedulable = unschedulable;
    let since = shared::protocol::truncate_to_millis(now);
    let intent = |step: Step, target: &str| Intent {
        step,
        target: target.to_owned(),
        token: token.clone(),
        since,
        boot_id_before: None,
        kubeadm: None,
        message: None,
    };
    let mut uncordon = |next: &mut ControllerAnnotations| {
        if next.cordoned_by_us {
            next.cordoned_by_us = false;
            want_unschedulable = false;
        }
    };
    match &action.kind {
        ActionKind::Stage { target } => next.intent = Some(intent(Step::Stage, target)),
        ActionKind::Replace { target } => next.intent = Some(intent(Step::Replace, target)),
        ActionKind::Drain { target } | ActionKind::DrainDonor { target, .. } => {
            let step = if matches!(action.kind, ActionKind::Drain { .. }) { Step::Drain } else { Step::Replace };
            next.intent = Some(intent(step, target));
            // Someone else's cordon stays theirs: no record, so we will not lift it.
            if !unschedulable {
                next.cordoned_by_us = true;
                want_unschedulable = true;
            }
        }
        ActionKind::Reboot { target, boot_id_before } => {
            next.intent = Some(Intent { boot_id_before: Some(boot_id_before.clone()), ..intent(Step::Reboot, target) })
        }
        ActionKind::KubeadmUpgrade { target, kubeadm } => {
            next.intent = Some(Intent { kubeadm: Some(kubeadm.clone()), ..intent(Step::KubeadmUpgrade, target) })
        }
        ActionKind::Done { target } => {
            next.intent = Some(intent(Step::Done, target));
            uncordon(&mut next);
        }
        ActionKind::Fail { target } | ActionKind::Block { target } => {
            let step = if matches!(action.kind, ActionKind::Fail { .. }) { Step::Failed } else { Step::Blocked };
            next.intent = Some(Intent {
                message: Some(format!("{}: {}", action.reason, action.message)),
                ..intent(step, target)
            });
            uncordon(&mut next);
        }
        ActionKind::Release | ActionKind::AbandonReplacement { .. } => {
            next.intent = None;
            uncordon(&mut next);
        }
        ActionKind::Uncordon => uncordon(&mut next),
        // Not the node's controller annotations (the group plumbing applies them).
        ActionKind::KeepDraining
        | ActionKind::Report
        | ActionKind::CreateInstance { .. }
        | ActionKind::Shield { .. }
        | ActionKind::Inherit { .. }
        | ActionKind::Retire { .. }
        | ActionKind::ReleaseInstance { .. }
        | ActionKind::Checkpoint { .. } => {}
    }
    (next, want_unschedulable)
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
