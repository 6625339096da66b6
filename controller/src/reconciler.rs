//! The controller's loop: whenever something it watches changes (or a deadline in the last plan
//! comes due), and only while it leads, it plans from the reflector caches and applies the plan.
//!
//! # Guarantees
//! - Acts only within a leadership [`Term`]: every write is fenced by it, and when the term ends
//!   the reconcile in flight is cancelled and every drain stops.
//! - Never decides on a partial view: it starts only once every cache has synced.
//! - One plan at a time, and the next plan sees the writes of the previous one (see the
//!   executor's overlay), so budgets are never over-spent by acting twice.
//! - No periodic polling: it plans on a watch event, at the plan's `wake_at`, or after a short
//!   retry after a failed write; it wakes every [`HEARTBEAT_TICK`] only to beat its heartbeat.

use crate::drain::Drains;
use crate::executor::{Applied, Executor};
use crate::leadership::{Leadership, Term};
use crate::metrics::{Metrics, NodeLabels};
use crate::nodes::SlimNode;
use crate::policy::{self, Desired, NodeSelector, NodeView, Plan, Policy};
use crate::status;
use jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use shared::crd::NodeVersion;
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
/// The loop's longest wait without a heartbeat: an idle loop wakes this often just to beat.
pub const HEARTBEAT_TICK: Duration = Duration::from_secs(10);
/// No heartbeat for this long (six ticks) means the loop is stuck: waiting that should have ended,
/// or a reconcile blocked in a call (a write the API server never answers). `/healthz` then fails.
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

pub struct Reconciler {
    pub nodes: Store<SlimNode>,
    pub versions: Store<NodeVersion>,
    pub versions_api: Api<NodeVersion>,
    pub executor: Executor,
    pub drains: Arc<Drains>,
    pub metrics: Metrics,
    pub own_node: Option<String>,
    pub trigger: Arc<Notify>,
    pub events: crate::events::Events,
    last_hold: Option<(policy::Reason, String)>,
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
        events: crate::events::Events,
    ) -> Self {
        Reconciler {
            nodes,
            versions,
            versions_api,
            executor,
            drains,
            metrics,
            own_node,
            trigger,
            events,
            last_hold: None,
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
                    // IMPORTANT: the drain tasks end with the term on their own; stopping them here
                    // also forgets their progress, so the next term starts from what it observes.
                    self.drains.stop_all();
                    self.last_hold = None;
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
                    () = sleep_until(wake) => break,
                    _ = tick.tick() => {}
                }
            }
        }
        tracing::warn!(term = term.number(), "leadership ended: stopped planning, acting and draining");
    }

    /// Plans and applies once, acting only within `term`; returns when to plan again without a
    /// trigger.
    pub async fn reconcile(&mut self, term: &Term) -> Option<Instant> {
        let started = std::time::Instant::now();
        let now = Timestamp::now();
        let versions = self.versions.state();
        let (version, competing) = match versions.as_slice() {
            [] => (None, None),
            [one] => (Some(one.clone()), None),
            many => {
                let names: Vec<String> = many.iter().map(|v| v.name_any()).collect();
                (
                    None,
                    Some(format!(
                        "{} NodeVersions exist ({}); the controller acts on exactly one",
                        names.len(),
                        names.join(", ")
                    )),
                )
            }
        };
        let policy = version.as_ref().map(|v| Policy::from_spec(&v.spec.rollout, now));
        let default_selector = NodeSelector::default();
        let selector = match &policy {
            Some(Ok(p)) => &p.selector,
            _ => &default_selector,
        };

        let mut objects: HashMap<String, SlimNode> = HashMap::new();
        let mut views: Vec<NodeView> = Vec::new();
        for node in self.nodes.state() {
            let node = self.executor.freshest((*node).clone());
            views.push(node.view(selector, self.drains.progress(node.name())));
            objects.insert(node.name().to_owned(), node);
        }
        self.executor.retain_nodes(|n| objects.contains_key(n));
        // Drains of nodes that left the drain step (a human removed the intent, say) stop.
        self.drains.retain(|n| views.iter().any(|v| v.name == n && in_drain_step(v)));

        let default_policy = Policy::default();
        let desired = Desired {
            target: version.as_ref().map(|v| v.spec.image.as_str()),
            policy: match &policy {
                Some(Ok(p)) => Ok(p),
                Some(Err(errors)) => Err(errors.as_slice()),
                None => Ok(&default_policy),
            },
            own_node: self.own_node.as_deref(),
        };
        let plan = policy::plan(&views, &desired, now);
        let drain_options = match &policy {
            Some(Ok(p)) => p.drain,
            _ => Default::default(),
        };
        let version_ref = version.as_ref().map(|v| v.object_ref(&()));
        let applied =
            self.executor.apply(term, &plan.actions, &objects, drain_options, version_ref.as_ref(), now).await;

        match (&version, competing) {
            (Some(v), None) => self.publish_status(term, v, &plan, now).await,
            (None, Some(problem)) => {
                for v in &versions {
                    let previous = v.status.as_ref();
                    let status = status::invalid(problem.clone(), v.metadata.generation, previous, now);
                    self.write_status(term, v, &status).await;
                }
            }
            _ => {}
        }
        self.report_hold(&plan, version_ref.as_ref());
        self.record_metrics(&plan, started);
        next_wake(&plan, applied)
    }

    async fn publish_status(&self, term: &Term, version: &NodeVersion, plan: &Plan, now: Timestamp) {
        let previous = version.status.as_ref();
        let status = status::compute(plan, &version.spec.image, version.metadata.generation, previous, now);
        if previous != Some(&status) {
            self.write_status(term, version, &status).await;
        }
    }

    async fn write_status(&self, term: &Term, version: &NodeVersion, status: &shared::crd::NodeVersionStatus) {
        let mut value = match serde_json::to_value(status) {
            Ok(value) => value,
            Err(error) => {
                tracing::error!(%error, "cannot serialize the NodeVersion status");
                return;
            }
        };
        // A merge patch keeps what it does not mention: clear what the new status leaves out.
        if let Value::Object(fields) = &mut value {
            for key in ["observedGeneration", "targetImage", "inFlight", "conditions"] {
                fields.entry(key).or_insert(Value::Null);
            }
        }
        let name = version.name_any();
        let patch = Patch::Merge(json!({ "status": value }));
        match term.fence(self.versions_api.patch_status(&name, &PatchParams::default(), &patch)).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(nodeversion = %name, %error, "could not write the NodeVersion status"),
            Err(fenced) => tracing::debug!(nodeversion = %name, %fenced, "NodeVersion status not written"),
        }
    }

    fn report_hold(&mut self, plan: &Plan, version: Option<&k8s_openapi::api::core::v1::ObjectReference>) {
        if plan.hold == self.last_hold {
            return;
        }
        self.last_hold = plan.hold.clone();
        if let (Some((reason, message)), Some(version)) = (&plan.hold, version) {
            tracing::info!(%reason, detail = message, "rollout held back");
            self.events.publish(version.clone(), None, *reason, message.clone(), "Hold");
        }
    }

    fn record_metrics(&self, plan: &Plan, started: std::time::Instant) {
        let c = plan.counts;
        for (situation, value) in [
            ("up_to_date", c.up_to_date),
            ("outdated", c.outdated),
            ("in_progress", c.in_progress),
            ("failed", c.failed),
            ("blocked", c.blocked),
        ] {
            self.metrics.nodes.get_or_create(&NodeLabels { situation }).set(i64::from(value));
        }
        self.metrics.reconciles.inc();
        self.metrics.reconcile_seconds.observe(started.elapsed().as_secs_f64());
    }
}

fn in_drain_step(view: &NodeView) -> bool {
    view.controller.as_ref().ok().and_then(|c| c.intent.as_ref()).is_some_and(|i| i.step == Step::Drain)
}

fn next_wake(plan: &Plan, applied: Applied) -> Option<Instant> {
    let retry = if applied.conflicts > 0 {
        Some(Instant::now() + CONFLICT_RETRY)
    } else if applied.errors > 0 {
        Some(Instant::now() + ERROR_RETRY)
    } else {
        None
    };
    let deadline = plan.wake_at.map(|at| {
        let until = at.duration_since(Timestamp::now());
        // A few milliseconds late rather than early, so the deadline has passed when we plan.
        let wait = Duration::try_from(until).unwrap_or_default() + Duration::from_millis(5);
        Instant::now() + wait
    });
    match (retry, deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
