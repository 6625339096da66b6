//! The controller's loop: whenever something it watches changes (or a deadline in the last plan
//! comes due), and only while it leads, it plans from the reflector caches and applies the plan.
//!
//! # Guarantees
//! - Acts only within a leadership [`Term`]: every write is fenced by it, and when the term ends
//!   the reconcile in flight is cancelled and every drain stops.
//! - Never decides on a partial view: it starts only once every cache has synced.
//! - One plan at a time, and the next plan sees the writes of the previous one (see the
//!   executor's overlay), so budgets are never over-spent by acting twice.
//! - Each NodeVersion's spec is validated once per generation. A valid generation is recorded in
//!   the NodeVersion's `status.lastValidSpec` before anything is done under it, so a restarted
//!   controller that finds a later generation invalid finishes the nodes in flight under the spec
//!   they were started with, never under defaults.
//! - No periodic polling: it plans on a watch event, at the plan's `wake_at`, when a held-back
//!   node's Event falls due, or after a short retry after a failed write; it wakes every
//!   [`HEARTBEAT_TICK`] only to beat its heartbeat.

mod dropped;
mod reports;
mod versions;

use crate::agent_policy;
use crate::cluster_version::ClusterVersions;
use crate::drain::Drains;
use crate::events::{Events, node_reference};
use crate::executor::{Applied, Batch, Executor};
use crate::leadership::{Leadership, Term};
use crate::metrics::{Metrics, NodeLabels};
use crate::node_views::NodeViews;
use crate::nodes::SlimNode;
use crate::notices::HoldNotices;
use crate::policy::{self, ClusterPlan, Hold, NodeView, Plan, Rollout, SpecState};
use crate::release;
use crate::specs::Specs;
use crate::status;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use shared::crd::{NodeVersion, NodeVersionStatus};
use shared::health::Heartbeat;
use shared::protocol::Step;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Pause before planning again after a write was refused because the node changed; the watch
/// event of that change normally arrives first and triggers the plan anyway.
const CONFLICT_RETRY: Duration = Duration::from_millis(200);
/// Pause before planning again after a write failed for another reason.
const ERROR_RETRY: Duration = Duration::from_secs(2);
/// Pause before asking the cloud again for the groups of nodes it did not tell.
const UNRESOLVED_RETRY: Duration = Duration::from_secs(10);
/// How soon a refused Kubernetes upgrade is validated again.
const KUBERNETES_RECHECK: Duration = Duration::from_secs(30);
/// The loop's longest wait without a heartbeat: an idle loop wakes this often just to beat.
pub const HEARTBEAT_TICK: Duration = Duration::from_secs(10);
/// No heartbeat for this long (six ticks) means the loop is stuck: waiting that should have ended,
/// or a reconcile blocked in a call (a write the API server never answers). `/healthz` then fails.
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

/// Where the reconciler reads the time.
#[derive(Debug, Clone)]
pub enum Clock {
    /// The system's wall clock.
    System,
    /// Wall time that advances with Tokio's clock from `wall` at `at`: with paused time in
    /// tests, deadlines come due as Tokio's clock is advanced.
    Tokio { wall: Timestamp, at: Instant },
}

impl Clock {
    /// A clock that reads `wall` now and advances with Tokio's clock.
    pub fn tokio(wall: Timestamp) -> Clock {
        Clock::Tokio { wall, at: Instant::now() }
    }

    pub fn now(&self) -> Timestamp {
        match self {
            Clock::System => Timestamp::now(),
            Clock::Tokio { wall, at } => {
                let elapsed = jiff::SignedDuration::try_from(at.elapsed()).unwrap_or(jiff::SignedDuration::MAX);
                wall.checked_add(elapsed).unwrap_or(Timestamp::MAX)
            }
        }
    }
}

pub struct Reconciler {
    pub nodes: Store<SlimNode>,
    pub versions: Store<NodeVersion>,
    pub versions_api: Api<NodeVersion>,
    pub executor: Executor,
    pub drains: Arc<Drains>,
    pub metrics: Metrics,
    pub own_node: Option<String>,
    pub trigger: Arc<Notify>,
    pub events: Events,
    pub clock: Clock,
    /// The cloud side of replacements: nodes of a scaling group are replaced only with one.
    pub replacer: Option<Arc<crate::replacer::Replacer>>,
    /// The agents' admission policy the leader must find in force before it acts; None: not checked.
    pub agent_policy: Option<agent_policy::Gate>,
    /// The nodes the watch delivered, so that a reconcile looks only at those; None: it compares every cached node.
    pub node_changes: Option<Arc<crate::node_views::Changes>>,
    /// The health checks' verdicts, evaluated in the background (`crate::health_checks`); None: none are read.
    pub health_checks: Option<Arc<crate::health_checks::HealthChecks>>,
    specs: Specs,
    cluster_versions: ClusterVersions,
    /// The hold last published per NodeVersion (by UID), so each change is one Event.
    last_holds: HashMap<String, Option<Hold>>,
    /// What each NodeVersion being deleted (by UID) was last said to wait for.
    releasing: HashMap<String, String>,
    /// NodeVersions (by UID) the finalizer was added to that the cache does not show with it yet.
    finalizers_added: std::collections::HashSet<String>,
    notices: HoldNotices,
    /// The nodes as the policy sees them, in the incremental planner.
    views: NodeViews,
    /// What would block each rollout, found when it starts (issue 18).
    preflight: crate::forecast::preflight::Preflight,
    /// The gate this reconciler and the NodeOp controller take their start decisions through.
    pub disruption: crate::disruption::DisruptionGate,
    /// The statuses written that the watch has not delivered yet: each status is computed from the last one.
    status_writes: crate::own_writes::OwnWrites<NodeVersion>,
    /// Statuses the API server answered without some of the fields written: see [`dropped::Dropped`].
    dropped: dropped::Dropped,
}

impl Reconciler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        nodes: Store<SlimNode>,
        versions: Store<NodeVersion>,
        versions_api: Api<NodeVersion>,
        executor: Executor,
        drains: Arc<Drains>,
        metrics: Metrics,
        own_node: Option<String>,
        trigger: Arc<Notify>,
        events: Events,
    ) -> Self {
        Reconciler {
            cluster_versions: ClusterVersions::new(versions_api.clone().into_client()),
            nodes,
            versions,
            versions_api,
            executor,
            drains,
            metrics,
            own_node,
            trigger,
            events,
            clock: Clock::System,
            replacer: None,
            agent_policy: None,
            node_changes: None,
            health_checks: None,
            specs: Specs::default(),
            last_holds: HashMap::new(),
            releasing: HashMap::new(),
            finalizers_added: Default::default(),
            notices: HoldNotices::default(),
            views: NodeViews::default(),
            preflight: Default::default(),
            disruption: Default::default(),
            status_writes: Default::default(),
            dropped: Default::default(),
        }
    }

    /// Runs until `shutdown`; acts only during a term of `leadership`. Beats `heartbeat` at least
    /// every [`HEARTBEAT_TICK`] while it waits, and after every reconcile.
    pub async fn run(mut self, leadership: Leadership, heartbeat: Heartbeat, shutdown: CancellationToken) {
        let mut terms = leadership.subscribe();
        let mut tick = tokio::time::interval(HEARTBEAT_TICK);
        while !shutdown.is_cancelled() {
            heartbeat.beat();
            let term = terms.borrow_and_update().clone().filter(Term::is_valid);
            match term {
                Some(term) => {
                    self.lead(&term, &heartbeat, &mut tick, &shutdown).await;
                    // The next term plans before any NodeOp starts a node on the budgets of this one.
                    self.disruption.forget().await;
                    // IMPORTANT: the drain tasks end with the term on their own; stopping them here
                    // also forgets their progress, so the next term starts from what it observes.
                    self.drains.stop_all();
                    self.last_holds.clear();
                    if let Some(health_checks) = &self.health_checks {
                        health_checks.clear();
                    }
                }
                None => tokio::select! {
                    () = shutdown.cancelled() => {}
                    changed = terms.changed() => if changed.is_err() { break },
                    _ = tick.tick() => {}
                },
            }
        }
        self.drains.stop_all();
    }

    /// Plans and applies on every trigger until `term` ends (which cancels the reconcile in flight)
    /// or `shutdown`.
    async fn lead(
        &mut self,
        term: &Term,
        heartbeat: &Heartbeat,
        tick: &mut tokio::time::Interval,
        shutdown: &CancellationToken,
    ) {
        tracing::info!(term = term.number(), "leading: planning and acting");
        if !self.agent_policy_in_force(term, heartbeat, shutdown).await {
            return;
        }
        'term: loop {
            let wake = tokio::select! {
                () = shutdown.cancelled() => return,
                () = term.ended() => break,
                wake = self.reconcile(term) => wake,
            };
            loop {
                heartbeat.beat();
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = term.ended() => break 'term,
                    () = self.trigger.notified() => break,
                    () = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => break,
                    _ = tick.tick() => {}
                }
            }
        }
        tracing::warn!(term = term.number(), "leadership ended: stopped planning, acting and draining");
    }

    /// True once the agents' admission policy is in force (at once without a gate); until then,
    /// every [`agent_policy::RECHECK`], logs why and writes the `AgentPolicyMissing` condition into
    /// every NodeVersion within `term`. False when the term or the process ends first.
    async fn agent_policy_in_force(&self, term: &Term, heartbeat: &Heartbeat, shutdown: &CancellationToken) -> bool {
        let Some(gate) = &self.agent_policy else { return true };
        while !*gate.in_force.borrow() {
            heartbeat.beat();
            let checked = tokio::select! {
                () = shutdown.cancelled() => return false,
                () = term.ended() => return false,
                checked = agent_policy::check(&gate.client, &gate.name) => checked,
            };
            match checked {
                Ok(()) => {
                    tracing::info!(policy = gate.name, "the agents' admission policy is in force");
                    gate.in_force.send_replace(true);
                    break;
                }
                Err(missing) => {
                    tracing::error!(
                        policy = gate.name,
                        reason = %missing,
                        "no node is updated while the agents are unconfined; install the policy \
                         or pass --allow-unconfined-agents"
                    );
                    for version in self.versions.state() {
                        match term.fence(agent_policy::report(&self.versions_api, &version, &missing)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(error)) => tracing::warn!(%error, "cannot write the NodeVersion condition"),
                            Err(_) => return false,
                        }
                    }
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return false,
                () = term.ended() => return false,
                () = tokio::time::sleep(agent_policy::RECHECK) => {}
            }
        }
        true
    }

    /// Plans and applies once, acting only within `term`; returns when to plan again without a
    /// trigger.
    pub async fn reconcile(&mut self, term: &Term) -> Option<Instant> {
        let started = std::time::Instant::now();
        let now = self.clock.now();
        // A NodeVersion being deleted is planned without: its nodes wind down as nodes no
        // NodeVersion moves, and its finalizer goes once they are released (see `release`).
        // Each with the status last written if the watch has not delivered it yet: a status computed from an older
        // one would undo the newer (its step duration samples, say).
        let freshest = |v: Arc<NodeVersion>| Arc::new(self.status_writes.freshest(Arc::unwrap_or_clone(v)));
        let (deleting, mut versions): (Vec<_>, Vec<_>) =
            self.versions.state().into_iter().map(freshest).partition(|v| v.metadata.deletion_timestamp.is_some());
        // Oldest first: a node several NodeVersions select belongs to the oldest.
        versions.sort_by(|a, b| {
            (a.metadata.creation_timestamp.as_ref().map(|t| t.0), a.name_any())
                .cmp(&(b.metadata.creation_timestamp.as_ref().map(|t| t.0), b.name_any()))
        });
        let mut rollouts: Vec<Rollout> = versions.iter().map(|v| self.specs.rollout(v, now)).collect();
        let kubernetes = self.cluster_versions.check_all(&versions).await;
        // Nothing watches ConfigMaps or /version: a refusal is checked again after a while (the ConfigMap may be
        // created after the NodeVersion that names it).
        let recheck = kubernetes
            .iter()
            .any(|k| matches!(k, Some(policy::kubernetes::KubernetesSpec::Refused(_))))
            .then(|| Instant::now() + KUBERNETES_RECHECK);
        for (rollout, kubernetes) in rollouts.iter_mut().zip(kubernetes) {
            rollout.kubernetes = kubernetes;
        }
        // The health checks' verdicts so far, for the gate; the background task reads what the specs name.
        if let Some(health_checks) = &self.health_checks {
            let uids: Vec<String> = versions.iter().map(|v| v.uid().unwrap_or_default()).collect();
            // What the status records of the checks of its generation (a leader before this one evaluated them):
            // a check's first verdict in this term resumes its since (`crate::health_checks`).
            let recorded: Vec<&[shared::crd::HealthCheckStatus]> = versions
                .iter()
                .map(|v| match &v.status {
                    Some(s) if s.observed_generation.is_some() && s.observed_generation == v.metadata.generation => {
                        &s.health_checks[..]
                    }
                    _ => &[][..],
                })
                .collect();
            health_checks.apply(&uids, &recorded, &mut rollouts);
        }
        self.specs.retain(|uid| versions.iter().chain(&deleting).any(|v| v.uid().as_deref() == Some(uid)));
        self.finalizers_added.retain(|uid| versions.iter().any(|v| v.uid().as_deref() == Some(uid)));
        self.status_writes.retain(|name| versions.iter().chain(&deleting).any(|v| v.name_any() == name));
        self.dropped.retain(|name| versions.iter().chain(&deleting).any(|v| v.name_any() == name));
        // IMPORTANT: no node is touched for a NodeVersion without the finalizer, or deleting it
        // could leave that node cordoned or mid-step.
        if !self.add_finalizers(term, &versions).await || !self.record_valid_specs(term, &versions, &rollouts).await {
            return Some(Instant::now() + ERROR_RETRY);
        }

        // The rollouts that wait for workloads (`crate::settle`), by NodeVersion and target: a wait of any other (its
        // NodeVersion deleted, paused or retargeted) ends, its hold and settleTimeout with it.
        let settle_keys: Vec<Option<String>> = versions
            .iter()
            .zip(&rollouts)
            .map(|(v, r)| {
                let spec = r.spec.acting().filter(|s| s.policy.settle.is_some())?;
                Some(crate::settle::key(&v.uid().unwrap_or_default(), &spec.target))
            })
            .collect();
        let waiting: Vec<&str> = (settle_keys.iter().zip(&rollouts))
            .filter(|(_, r)| !r.spec.acting().is_some_and(|s| s.policy.paused))
            .filter_map(|(k, _)| k.as_deref())
            .collect();
        self.executor.retain_settling(|k| waiting.contains(&k));
        // Nodes held for a do-not-disrupt pod stay held until a look finds it gone.
        self.executor.recheck_pod_holds().await;
        // IMPORTANT: from reading the nodes until the plan's writes returned, no NodeOp decides (see
        // `crate::disruption`): each sees the other's starts, so together they keep to every budget.
        let mut gate = self.disruption.enter().await;
        gate.rollouts = Some(rollouts.clone());
        gate.replacer.clone_from(&self.replacer);
        let selectors: Vec<Option<&policy::NodeSelector>> =
            rollouts.iter().map(|r| r.spec.acting().map(|s| &s.policy.selector)).collect();
        // The node views live in the planner between reconciles; taken out while this one uses them.
        let mut node_views = std::mem::take(&mut self.views);
        let mut objects: HashMap<String, SlimNode> = HashMap::new();
        let mut unresolved = false;
        let fleet = match &self.replacer {
            Some(replacer) => {
                // The cloud's answers (each node's group) come with no watch event: every node is viewed again,
                // and the planner is given those whose view changed (it plans incrementally, see
                // `policy::incremental`).
                let fresh: Vec<SlimNode> =
                    self.nodes.state().iter().map(|n| self.executor.freshest((**n).clone())).collect();
                unresolved = replacer.learn(&fresh);
                let held = self.executor.held_for_pods();
                let deferred = self.executor.deferred_for_budgets();
                let views = fresh.iter().map(|node| {
                    let mut view = node.view(selectors.iter().copied(), self.drains.progress(node.name()));
                    view.group = replacer.member(node);
                    crate::node_views::with_looks(&mut view, held.get(node.name()), deferred.get(node.name()));
                    view
                });
                node_views.replace_all(views);
                objects = fresh.into_iter().map(|node| (node.name().to_owned(), node)).collect();
                replacer.fleet()
            }
            None => {
                let changes = self.node_changes.as_deref();
                node_views.sync(&self.nodes, &self.executor, &self.drains, &selectors, changes);
                policy::Fleet::default()
            }
        };
        let planner = &mut node_views.planner;
        planner.set_context(rollouts.clone(), fleet, self.own_node.clone());
        self.executor.retain_nodes(|n| planner.node(n).is_some());
        // Drains of nodes that left the drain step (a human removed the intent, say) stop.
        self.drains.retain(|n| planner.node(n).is_some_and(in_drain_step));

        let mut plan = planner.plan(now);
        // The image of a fleet a new target has not moved yet: what a rollback would go back to.
        policy::rollback::find_uniform(&mut plan.rollouts, || planner.nodes().collect());
        if self.replacer.is_none() {
            // The objects the executor decides on: those of the nodes the plan acts on.
            let acted_on = plan.rollouts.iter().chain([&plan.unowned]).flat_map(|p| &p.actions).map(|a| &a.node);
            for name in acted_on.chain(plan.taints.iter().map(|r| &r.node)) {
                if !objects.contains_key(name)
                    && let Some(node) = self.nodes.get(&ObjectRef::new(name))
                {
                    objects.insert(name.clone(), self.executor.freshest(SlimNode::clone(&node)));
                }
            }
        }
        let views = || node_views.planner.nodes().collect::<Vec<&NodeView>>();
        // Preflight (issue 18): when a rollout starts, what would block it becomes the `Preflight` condition and
        // Events, written before the first node is touched.
        let client = self.versions_api.clone().into_client();
        let preflight = self.preflight.run(&client, term, &versions, &rollouts, views, &plan, &self.events, now).await;
        for (i, condition) in preflight {
            let previous = versions[i].status.as_ref();
            let mut status =
                status::compute(&plan.rollouts[i], &rollouts[i], versions[i].metadata.generation, previous, now);
            crate::forecast::preflight::set_condition(&mut status, condition);
            self.write_status(term, &versions[i], &status).await;
        }
        let references: Vec<ObjectReference> = versions.iter().map(|v| v.object_ref(&())).collect();
        let mut batches: Vec<Batch<'_>> = plan
            .rollouts
            .iter()
            .zip(&rollouts)
            .zip(&references)
            .zip(&settle_keys)
            .map(|(((p, r), reference), key)| Batch {
                actions: &p.actions,
                drain: r.spec.acting().map(|s| s.policy.drain).unwrap_or_default(),
                version: Some(reference),
                settle: r.spec.acting().and_then(|s| s.policy.settle).zip(key.as_deref()).map(|(t, rollout)| {
                    let timeout = std::time::Duration::try_from(t).unwrap_or(std::time::Duration::MAX);
                    crate::settle::SettleFor { timeout, rollout }
                }),
            })
            .collect();
        batches.push(Batch { actions: &plan.unowned.actions, drain: Default::default(), version: None, settle: None });
        let planned = started.elapsed();
        let applied = self.executor.apply(term, &batches, &plan.taints, &objects, now).await;
        drop(gate);
        let acted = started.elapsed();
        // Only a NodeVersion being deleted looks at every node.
        let all: Vec<&NodeView> = if deleting.is_empty() { Vec::new() } else { node_views.planner.nodes().collect() };
        // The nodes whose taint of outdated nodes the plan takes off: a deleted NodeVersion waits for those too.
        let untainting: std::collections::HashSet<&str> =
            plan.taints.iter().filter(|r| !r.on).map(|r| r.node.as_str()).collect();
        self.finish_deletions(term, &deleting, &all, &untainting, now).await;
        drop(all);
        self.views = node_views;

        for (((version, rollout), p), reference) in versions.iter().zip(&rollouts).zip(&plan.rollouts).zip(&references)
        {
            self.publish_status(term, version, rollout, p, now).await;
            self.report_hold(version, p, reference);
        }
        self.last_holds.retain(|uid, _| versions.iter().any(|v| v.uid().as_deref() == Some(uid)));
        let notice_due = self.report_held_nodes(&versions, &plan, &references);
        self.record_metrics(&plan, started);
        // Where a reconcile's time goes (a node's hand-off waits for the reconcile under way, then for one whole).
        tracing::debug!(
            planned_ms = planned.as_secs_f64() * 1000.0,
            acted_ms = acted.as_secs_f64() * 1000.0,
            total_ms = started.elapsed().as_secs_f64() * 1000.0,
            writes = applied.writes,
            "reconciled"
        );
        let wake = next_wake(plan.wake_at(), notice_due, applied, now, Instant::now());
        let wake = [wake, recheck, self.executor.next_pod_recheck()].into_iter().flatten().min();
        if unresolved {
            // The cloud did not tell some node's group: ask again soon.
            let retry = Instant::now() + UNRESOLVED_RETRY;
            return Some(wake.map_or(retry, |w| w.min(retry)));
        }
        wake
    }
}

fn in_drain_step(view: &NodeView) -> bool {
    let donor_draining = view.group.as_ref().is_some_and(|m| m.heir.is_some());
    view.controller
        .as_ref()
        .ok()
        .and_then(|c| c.intent.as_ref())
        .is_some_and(|i| i.step == Step::Drain || (i.step == Step::Replace && donor_draining))
}

/// When to plan again without a trigger: a retry after failed writes, the plan's earliest
/// deadline (`wake_at`, a wall-clock time, `now` being `at`), or a held node's Event falling due.
fn next_wake(
    wake_at: Option<Timestamp>,
    notice_due: Option<Instant>,
    applied: Applied,
    now: Timestamp,
    at: Instant,
) -> Option<Instant> {
    let retry = if applied.conflicts + applied.held > 0 {
        Some(at + CONFLICT_RETRY)
    } else if applied.errors > 0 {
        Some(at + ERROR_RETRY)
    } else {
        None
    };
    let deadline = wake_at.map(|wake| {
        let until = wake.duration_since(now);
        // A few milliseconds late rather than early, so the deadline has passed when we plan.
        at + Duration::try_from(until).unwrap_or_default() + Duration::from_millis(5)
    });
    [retry, deadline, notice_due].into_iter().flatten().min()
}

#[cfg(test)]
mod tests;
