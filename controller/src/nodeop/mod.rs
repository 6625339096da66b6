//! Kairos `NodeOp`s and `NodeOpUpgrade`s, run on the rollout engine's cordon, drain and verified reboot.
//!
//! # Guarantees
//! - Runs only while this replica leads (and, as the other controllers, once the agents' admission policy is in
//!   force): every write is fenced by the leadership term, and drains end with the term.
//! - Decisions are [`decide::decide`]'s, on the caches corrected by this controller's own writes that the
//!   watches have not delivered yet (a node it marked, a status it wrote), so it never counts a slot twice.
//! - A NodeOp's status is written before the node writes it decides (conditional on the NodeOp's
//!   resourceVersion), so a node is released only once its outcome is recorded, and a refused status write
//!   holds the round's node writes back.
//! - A node marked by a NodeOp that no longer exists (deleted, or replaced by one of the same name) is released:
//!   its reboot intent removed and the node uncordoned if the controller cordoned it. The NodeOp's Jobs go with
//!   it (owner references), so no new Job starts.
//! - A NodeOpUpgrade gets exactly one NodeOp, of its own name, created once and owned by it.

pub mod decide;
mod facts;
mod gates;
pub mod job;
mod node_write;
mod start;
mod status;
pub mod upgrade;
mod watches;

use crate::disruption::DisruptionGate;
use crate::drain::{DrainContext, Drains};
use crate::events::{Events, node_reference};
use crate::executor::{FIELD_MANAGER, WriteResult};
use crate::leadership::{Leadership, Term};
use crate::metrics::Metrics;
use crate::nodes::SlimNode;
use crate::own_writes::OwnWrites;
use crate::policy::NodeSelector;
use crate::policy::budget::LazyBudgets;
use crate::reason::Reason;
use decide::{Action, Decision, Inputs, NodeFacts};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::{Api, Client, Resource, ResourceExt};
use parking_lot::Mutex;
use serde_json::json;
use shared::crd::nodeop::{NodeOp, NodeOpPhase, NodeOpUpgrade};
use shared::protocol::patch::NodePatch;
use shared::protocol::{ControllerAnnotations, keys, parse_target};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use watches::Caches;

/// How often a NodeOp is decided again when nothing changes (timeouts are also woken for exactly).
const RESYNC: Duration = Duration::from_secs(10);
/// Changes arriving this close together are decided in one round.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// What the NodeOp controllers read and use.
#[derive(Clone)]
pub struct Context {
    pub client: Client,
    /// For evictions: automatic retries off (see [`crate::drain`]).
    pub eviction_client: Client,
    pub nodes: Store<SlimNode>,
    pub node_changes: watch::Receiver<u64>,
    pub pdb_changes: watch::Receiver<u64>,
    pub events: Events,
    pub metrics: Metrics,
    /// Whether the agents' admission policy is in force (`None`: not checked).
    pub agent_policy: Option<watch::Receiver<bool>>,
    /// The gate the rollouts' start decisions go through too, with the rollouts they last planned.
    pub disruption: DisruptionGate,
    /// The controller's Node writes the watch has not delivered yet (the rollouts' too).
    pub writes: Arc<OwnWrites>,
    /// The nodes do-not-disrupt pods hold, shared with the rollouts' executor; `None`: pods are not looked at.
    pub pod_holds: Option<Arc<crate::do_not_disrupt::PodHolds>>,
}

/// The mark a NodeOp writes on its nodes: `<namespace>/<name>@<uid>`.
pub fn mark_of(op: &NodeOp) -> String {
    format!("{}/{}@{}", op.namespace().unwrap_or_default(), op.name_any(), op.uid().unwrap_or_default())
}

/// Runs the NodeOp and NodeOpUpgrade controllers until `shutdown`, acting only within a leadership term.
pub async fn run(mut context: Context, leadership: Leadership, shutdown: CancellationToken) {
    let trigger = Arc::new(Notify::new());
    let client = context.client.clone();
    let Some(Caches { ops, upgrades, jobs, preflight_pods }) =
        watches::watch_all(&client, context.node_changes.clone(), &trigger, &shutdown).await
    else {
        return;
    };
    if let Some(in_force) = &mut context.agent_policy {
        tokio::select! {
            () = shutdown.cancelled() => return,
            found = in_force.wait_for(|found| *found) => if found.is_err() { return },
        }
    }
    let drains = Arc::new(Drains::new(DrainContext {
        eviction_client: context.eviction_client.clone(),
        watch_client: client.clone(),
        nodes: context.nodes.clone(),
        node_changes: context.node_changes.clone(),
        pdb_changes: context.pdb_changes.clone(),
        reconcile: trigger.clone(),
        metrics: context.metrics.clone(),
    }));
    let controller = Controller {
        context,
        ops,
        upgrades,
        jobs,
        preflight_pods,
        drains,
        op_overlay: Mutex::default(),
        warned: Mutex::default(),
    };
    let mut terms = leadership.subscribe();
    loop {
        let Some(term) = Leadership::next_term(&mut terms, &shutdown).await else { return };
        tracing::info!("leading: starting the NodeOp and NodeOpUpgrade controllers");
        loop {
            let wake_at = controller.round(&term).await;
            let pause = wake_at
                .and_then(|at| Duration::try_from(at.duration_since(Timestamp::now())).ok())
                .map_or(RESYNC, |d| d.min(RESYNC));
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = term.ended() => break,
                () = trigger.notified() => tokio::time::sleep(DEBOUNCE).await,
                () = tokio::time::sleep(pause) => {}
            }
        }
        controller.drains.stop_all();
        if shutdown.is_cancelled() {
            return;
        }
        tracing::info!("lost the lead: stopped the NodeOp controllers");
    }
}

/// Forgets the warnings given to NodeOps that are gone (`warned` holds `uid/what`; `live` the uids there are), so
/// that the set is bounded by the NodeOps there are.
fn forget_warnings(warned: &mut HashSet<String>, live: &HashSet<String>) {
    warned.retain(|key| key.split_once('/').is_some_and(|(uid, _)| live.contains(uid)));
}

/// Our own write the watch has not delivered yet: the object the API server returned, and the resourceVersion
/// it superseded.
struct Written<K> {
    superseded: String,
    object: K,
}

struct Controller {
    context: Context,
    ops: Store<NodeOp>,
    upgrades: Store<NodeOpUpgrade>,
    jobs: Store<Job>,
    /// The pods of preflight checks.
    preflight_pods: Store<Pod>,
    drains: Arc<Drains>,
    op_overlay: Mutex<HashMap<String, Written<NodeOp>>>,
    /// NodeOps (by uid) already warned about: concurrency 0.
    warned: Mutex<HashSet<String>>,
}

impl Controller {
    /// One round: the NodeOpUpgrades' NodeOps, the nodes and Jobs of deleted NodeOps, every NodeOp. Returns when to
    /// decide again at the latest.
    async fn round(&self, term: &Term) -> Option<Timestamp> {
        let now = Timestamp::now();
        let ops: Vec<NodeOp> = self.ops.state().iter().map(|op| self.freshest_op(op)).collect();
        let upgrades = self.upgrades.state();
        for upgrade in &upgrades {
            self.upgrade(term, upgrade, &ops).await;
        }
        let upgrades_live: HashSet<String> = upgrades.iter().filter_map(|u| u.uid()).collect();
        let of_gone_upgrade = |op: &&NodeOp| {
            let owners = op.owner_references();
            owners.iter().any(|r| r.kind == "NodeOpUpgrade") && !owners.iter().any(|r| upgrades_live.contains(&r.uid))
        };
        for op in ops.iter().filter(of_gone_upgrade) {
            self.delete_orphan(term, op).await;
        }
        let marks: HashSet<String> = ops.iter().map(mark_of).collect();
        let fresh = |n: &Arc<SlimNode>| self.context.writes.freshest((**n).clone());
        // The nodes of NodeOps that are gone are released (a release frees a slot: it needs no gate); only marked
        // nodes are looked at.
        for node in self.context.nodes.state().iter().filter(|n| n.annotations().contains_key(keys::NODE_OPERATION)) {
            let node = fresh(node);
            if marks_other(&node, &marks) {
                self.release_orphan(term, &node, now).await;
            }
        }
        let live: HashSet<String> = ops.iter().filter_map(|op| op.uid()).collect();
        forget_warnings(&mut self.warned.lock(), &live);
        for stale in self.jobs.state().iter().filter(|j| !j.owner_references().iter().any(|r| live.contains(&r.uid))) {
            self.delete_orphan(term, &**stale).await;
        }
        if ops.is_empty() {
            self.drains.retain(|_| false);
            self.op_overlay.lock().clear();
            return None;
        }
        // Nodes held for a do-not-disrupt pod stay held until a look finds it gone (the rollouts' reconciler looks
        // too; whichever comes first).
        if let Some(holds) = &self.context.pod_holds {
            holds.recheck_due().await;
        }
        // IMPORTANT: from reading the nodes until the round's writes returned, the rollouts decide nothing (see
        // `crate::disruption`), and every start keeps to the budget of each rollout it takes a slot of.
        let gate = self.context.disruption.enter().await;
        let nodes: Vec<SlimNode> = self.context.nodes.state().iter().map(fresh).collect();
        let rollouts = gate.rollouts.clone();
        let replacer = gate.replacer.clone();
        let mut budgets = LazyBudgets::new(|| gates::budgets(&nodes, rollouts.as_deref(), replacer.as_deref(), now));
        let mut draining = HashSet::new();
        let mut wake_at: Option<Timestamp> = None;
        let mut ordered: Vec<&NodeOp> = ops.iter().collect();
        ordered.sort_by(|a, b| {
            let created = |op: &NodeOp| op.metadata.creation_timestamp.clone().map(|t| t.0);
            created(a).cmp(&created(b)).then_with(|| a.name_any().cmp(&b.name_any()))
        });
        for op in ordered {
            let Some(decision) = self.nodeop(term, op, &nodes, &live, &mut budgets, now).await else { continue };
            draining.extend(decision.nodes.iter().filter(|n| n.action == Some(Action::Drain)).map(|n| n.node.clone()));
            wake_at = wake_at.into_iter().chain(decision.wake_at).min();
        }
        drop(gate);
        self.drains.retain(|node| draining.contains(node));
        self.op_overlay.lock().retain(|uid, _| live.contains(uid));
        wake_at
    }

    fn freshest_op(&self, op: &Arc<NodeOp>) -> NodeOp {
        let uid = op.uid().unwrap_or_default();
        let mut overlay = self.op_overlay.lock();
        match overlay.get(&uid) {
            Some(written) if op.resource_version().as_deref() == Some(written.superseded.as_str()) => {
                written.object.clone()
            }
            Some(_) => {
                overlay.remove(&uid);
                (**op).clone()
            }
            None => (**op).clone(),
        }
    }

    /// Decides and applies one NodeOp's round.
    async fn nodeop(
        &self,
        term: &Term,
        op: &NodeOp,
        nodes: &[SlimNode],
        live: &HashSet<String>,
        budgets: &mut LazyBudgets<'_>,
        now: Timestamp,
    ) -> Option<Decision> {
        let (namespace, name, uid) = (op.namespace()?, op.name_any(), op.uid()?);
        let key = mark_of(op);
        let reference = nodeop_reference(op);
        let selector = match op.spec.node_selector.as_ref().map(NodeSelector::from_label_selector).transpose() {
            Ok(selector) => selector,
            Err(error) => {
                self.warn_once(&uid, "invalid", &reference, Reason::InvalidSpec, format!("spec.nodeSelector: {error}"));
                return None;
            }
        };
        self.warnings(op, &uid, &reference);
        let pods = self.preflight_pods.state();
        let find = |job_name: String| {
            self.jobs
                .get(&reflector::ObjectRef::new(&job_name).within(&namespace))
                // The Job of a NodeOp that is gone is being deleted: as good as absent.
                .filter(|j| j.owner_references().iter().any(|r| live.contains(&r.uid)))
        };
        let holding = self.context.pod_holds.as_ref().map(|h| h.holding()).unwrap_or_default();
        let mut facts: Vec<NodeFacts> = nodes
            .iter()
            .map(|node| {
                let job = find(job::job_name(&name, node.name())).map(|j| job::state(&j, &uid));
                let mut facts = facts_of(node, selector.as_ref(), self.drains.progress(node.name()), job);
                facts.do_not_disrupt = facts.do_not_disrupt.or_else(|| holding.get(node.name()).cloned());
                let preflight = op.spec.preflight.as_ref().and(find(job::preflight_name(&name, node.name())));
                facts.preflight = preflight.map(|j| job::preflight_state(&j, &uid, &pods, now));
                facts
            })
            .collect();
        let status = op.status.clone().unwrap_or_default();
        let inputs = Inputs {
            key: &key,
            spec: &op.spec,
            recorded: &status.node_statuses,
            deleting: op.metadata.deletion_timestamp.is_some(),
            now,
        };
        let mut decision = gates::decide_looked(self.context.pod_holds.as_deref(), inputs, &mut facts, budgets).await;
        let with_job: HashSet<&str> = facts.iter().filter(|f| f.job.is_some()).map(|f| f.name.as_str()).collect();
        for node in &mut decision.nodes {
            if with_job.contains(node.node.as_str()) || node.action == Some(Action::CreateJob) {
                node.status.job_name = job::job_name(&name, &node.node);
            }
        }
        if !self.write_status(term, op, &decision, now).await {
            return Some(decision);
        }
        // IMPORTANT: new nodes start only once every other write of the round succeeded: a release that failed
        // would otherwise leave more nodes disrupted than the concurrency allows.
        let mut refused = false;
        for node_decision in &decision.nodes {
            let new_start = node_decision.notice.as_ref().is_some_and(|n| n.reason == decide::STARTED);
            if new_start && refused {
                continue;
            }
            if let Some(notice) = &node_decision.notice {
                let node_ref = node_reference(&node_decision.node, None);
                self.context.events.publish_named(
                    reference.clone(),
                    Some(node_ref),
                    notice.reason,
                    notice.warning,
                    notice.message.clone(),
                    "NodeOp",
                );
            }
            let Some(action) = &node_decision.action else { continue };
            let Some(node) = nodes.iter().find(|n| n.name() == node_decision.node) else { continue };
            match action {
                Action::Drain => self.drains.ensure(node.name(), drain_options(op), term),
                Action::CreateJob => self.create_job(term, op, job::build(op, node.name()), node.name()).await,
                Action::CreatePreflight => {
                    self.create_job(term, op, job::build_preflight(op, node.name()), node.name()).await
                }
                _ => refused |= !self.write_node(term, node, &key, action, now).await,
            }
        }
        // A check whose verdict is recorded goes (with its pod): the node finished, or it started and carries the
        // mark (a start that was refused keeps its passed check for the next round).
        // Only the nodes with a check are looked up among the decisions (not every node among the facts).
        let checked = facts.iter().filter(|f| f.preflight.as_ref().is_some_and(|p| *p != decide::Preflight::Foreign));
        for facts in checked {
            let Some(node_decision) = decision.nodes.iter().find(|d| d.node == facts.name) else { continue };
            let started = node_decision.status.phase == NodeOpPhase::Running && facts.mark.as_deref() == Some(&key);
            if (node_decision.status.phase.finished() || started)
                && let Some(check) = find(job::preflight_name(&name, &facts.name))
            {
                self.delete_dependent(term, &*check, "its verdict is recorded").await;
            }
        }
        Some(decision)
    }

    /// Warning Events a NodeOp gets once: every node at once (`concurrency: 0`).
    fn warnings(&self, op: &NodeOp, uid: &str, reference: &ObjectReference) {
        let finished = op.status.as_ref().is_some_and(|s| s.phase.finished());
        if op.spec.concurrency == 0 && !finished {
            let message = "concurrency is 0: the operation runs on every selected node at once (control-plane nodes \
                           first, one at a time); set concurrency to limit how many nodes are disrupted together";
            self.warn_once(uid, "all", reference, Reason::AllNodesAtOnce, message.into());
        }
    }

    fn warn_once(&self, uid: &str, what: &str, reference: &ObjectReference, reason: Reason, message: String) {
        if self.warned.lock().insert(format!("{uid}/{what}")) {
            tracing::warn!(nodeop = ?reference.name, %reason, message, "NodeOp warning");
            self.context.events.publish_named(reference.clone(), None, reason, true, message, "NodeOp");
        }
    }

    /// Writes the NodeOp's status if the decision changes it, conditional on the resourceVersion decided on.
    /// Returns whether the status is as decided (written, or unchanged).
    async fn write_status(&self, term: &Term, op: &NodeOp, decision: &Decision, now: Timestamp) -> bool {
        let current = op.status.clone().unwrap_or_default();
        let next = next_status(&current, decision, op.metadata.generation, now);
        if next == current {
            return true;
        }
        let (Some(namespace), Some(rv)) = (op.namespace(), op.resource_version()) else { return false };
        let api: Api<NodeOp> = Api::namespaced(self.context.client.clone(), &namespace);
        let patch = json!({"metadata": {"resourceVersion": rv}, "status": next});
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match term.fence(api.patch_status(&op.name_any(), &params, &Patch::Merge(patch))).await {
            Ok(Ok(written)) => {
                if let Some(uid) = op.uid() {
                    self.op_overlay.lock().insert(uid, Written { superseded: rv, object: written });
                }
                true
            }
            Ok(Err(error)) => {
                tracing::debug!(nodeop = %op.name_any(), %error, "NodeOp status not written; deciding again");
                false
            }
            Err(_) => false,
        }
    }

    async fn create_job(&self, term: &Term, op: &NodeOp, job: Option<Job>, node: &str) {
        let (Some(namespace), Some(job)) = (op.namespace(), job) else { return };
        let api: Api<Job> = Api::namespaced(self.context.client.clone(), &namespace);
        let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match term.fence(api.create(&params, &job)).await {
            Ok(Ok(_)) => {
                tracing::info!(nodeop = %op.name_any(), node, job = ?job.metadata.name, "Job created");
                self.context.events.publish_named(
                    nodeop_reference(op),
                    Some(node_reference(node, None)),
                    Reason::JobCreated,
                    false,
                    format!("created Job {} on {node}", job.metadata.name.unwrap_or_default()),
                    "NodeOp",
                );
            }
            // Created before (the watch has not delivered it yet): the decision finds it next round.
            Ok(Err(kube::Error::Api(status))) if status.code == 409 => {}
            Ok(Err(error)) => {
                tracing::warn!(nodeop = %op.name_any(), node, %error, "cannot create the Job; will retry")
            }
            Err(_) => {}
        }
    }

    /// The node write of `action` for the NodeOp of mark `key`, conditional on the node's resourceVersion.
    /// Returns whether the node is as the action wants it (written, or nothing to write).
    async fn write_node(&self, term: &Term, node: &SlimNode, key: &str, action: &Action, now: Timestamp) -> bool {
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let Ok(current) = ControllerAnnotations::read(&annotations) else { return false };
        let Some((next, mark, unschedulable)) = next_node_state(&current, node.unschedulable(), key, action, now)
        else {
            return true;
        };
        if let Some(intent) = &next.intent
            && parse_target(keys::INTENT_TARGET, &intent.target).is_err()
        {
            tracing::error!(node = %node.name(), "refusing to write a reboot intent the agent cannot read");
            return false;
        }
        let patch =
            NodePatch::annotations(Some(&annotations), next.render().into_iter().chain([(keys::NODE_OPERATION, mark)]))
                .unschedulable(node.unschedulable(), unschedulable)
                .if_unchanged_since(node.resource_version());
        if patch.is_empty() {
            return true;
        }
        // The drain stops before the node is uncordoned (the executor's rule): never evicting from a node that
        // is schedulable again.
        if matches!(action, Action::Release) {
            self.drains.stop(node.name());
        }
        // The one way the controller writes a Node (`crate::executor::send`): recorded for both controllers.
        let api: Api<SlimNode> = Api::all(self.context.client.clone());
        match crate::executor::send(&api, term, node, &patch, &self.context.writes).await {
            WriteResult::Written => {
                tracing::info!(node = %node.name(), nodeop = key, ?action, "node updated");
                true
            }
            WriteResult::Unchanged => true,
            WriteResult::Conflict => {
                tracing::debug!(node = %node.name(), "node changed since the decision; deciding again");
                false
            }
            WriteResult::Failed | WriteResult::Fenced => false,
        }
    }

    /// Deletes `object` (a Job of a NodeOp that is gone, or the NodeOp of a NodeOpUpgrade that is gone), and its
    /// dependents: the garbage collector does it too, whichever comes first.
    async fn delete_orphan<K>(&self, term: &Term, object: &K)
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.delete_dependent(term, object, "its owner is gone").await
    }

    /// Deletes `object` and its dependents (in the background), as of its uid, saying `why` in the log.
    async fn delete_dependent<K>(&self, term: &Term, object: &K, why: &str)
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let Some(namespace) = object.namespace() else { return };
        let api: Api<K> = Api::namespaced(self.context.client.clone(), &namespace);
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions { uid: object.uid(), resource_version: None }),
            ..kube::api::DeleteParams::background()
        };
        let (kind, name) = (K::kind(&()), object.name_any());
        match term.fence(api.delete(&name, &params)).await {
            Ok(Ok(_)) => tracing::info!(%kind, %name, why, "deleted"),
            Ok(Err(kube::Error::Api(status))) if status.code == 404 || status.code == 409 => {}
            Ok(Err(error)) => tracing::warn!(%kind, %name, %error, "cannot delete what an owner that is gone left"),
            Err(_) => {}
        }
    }

    /// Releases a node whose NodeOp is gone.
    async fn release_orphan(&self, term: &Term, node: &SlimNode, now: Timestamp) {
        let mark = node.metadata.annotations.as_ref().and_then(|a| a.get(keys::NODE_OPERATION)).cloned();
        let Some(mark) = mark else { return };
        tracing::info!(node = %node.name(), nodeop = %mark, "the node's NodeOp is gone; releasing the node");
        self.drains.stop(node.name());
        let _ = self.write_node(term, node, &mark, &Action::Release, now).await;
    }

    /// Creates a NodeOpUpgrade's NodeOp if it has none, and reports the NodeOp's progress in its status.
    async fn upgrade(&self, term: &Term, upgrade: &NodeOpUpgrade, ops: &[NodeOp]) {
        let (Some(namespace), Some(uid)) = (upgrade.namespace(), upgrade.uid()) else { return };
        let name = upgrade.name_any();
        let existing = ops.iter().find(|op| op.namespace().as_deref() == Some(&namespace) && op.name_any() == name);
        let owned = |op: &NodeOp| op.owner_references().iter().any(|r| r.uid == uid && r.controller == Some(true));
        let message = match existing {
            Some(op) if owned(op) => format!("the upgrade runs as NodeOp {name}"),
            Some(_) => format!("a NodeOp named {name} exists that this NodeOpUpgrade does not own; not upgrading"),
            None if upgrade.metadata.deletion_timestamp.is_some() => return,
            None => {
                let Some(op) = upgrade::nodeop_for(upgrade) else { return };
                let api: Api<NodeOp> = Api::namespaced(self.context.client.clone(), &namespace);
                let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
                match term.fence(api.create(&params, &op)).await {
                    Ok(Ok(_)) => tracing::info!(nodeopupgrade = %name, "NodeOp created"),
                    Ok(Err(kube::Error::Api(status))) if status.code == 409 => {}
                    Ok(Err(error)) => tracing::warn!(nodeopupgrade = %name, %error, "cannot create the NodeOp"),
                    Err(_) => {}
                }
                format!("created NodeOp {name}")
            }
        };
        let nodeop_status = existing.filter(|op| owned(op)).map(|op| op.status.clone().unwrap_or_default());
        let next = upgrade::status_from(upgrade, nodeop_status.as_ref(), message);
        let current = upgrade.status.clone().unwrap_or_default();
        if next == current {
            return;
        }
        let next = shared::crd::nodeop::NodeOpUpgradeStatus { last_updated: Some(Time(Timestamp::now())), ..next };
        let api: Api<NodeOpUpgrade> = Api::namespaced(self.context.client.clone(), &namespace);
        let patch = json!({"status": next});
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        if let Ok(Err(error)) = term.fence(api.patch_status(&name, &params, &Patch::Merge(patch))).await {
            tracing::debug!(nodeopupgrade = %name, %error, "NodeOpUpgrade status not written");
        }
    }
}

/// Whether `node` carries the mark of a NodeOp other than those of `marks` (a NodeOp that is gone).
fn marks_other(node: &SlimNode, marks: &HashSet<String>) -> bool {
    node.metadata.annotations.as_ref().and_then(|a| a.get(keys::NODE_OPERATION)).is_some_and(|m| !marks.contains(m))
}

fn nodeop_reference(op: &NodeOp) -> ObjectReference {
    ObjectReference {
        api_version: Some(NodeOp::api_version(&()).into_owned()),
        kind: Some(NodeOp::kind(&()).into_owned()),
        namespace: op.namespace(),
        name: op.metadata.name.clone(),
        uid: op.uid(),
        ..Default::default()
    }
}

use facts::{drain_options, facts_of};
pub use node_write::next_node_state;
pub use status::next_status;

#[cfg(test)]
mod tests;
