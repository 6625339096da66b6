//! The PendingNode controller: a joining instance becomes a Ready Node or is deleted at its deadline; a
//! leaving one is terminated, its deletion retried past the deadline.

mod decide;
mod memo;
mod pace;

pub use decide::*;
use decide::{donor_waits, until};
pub use memo::*;
pub use pace::*;

use super::condition::{self};
use super::scaling_group::EventSpec;
use super::{Attempts, Context, Error, GroupLabels, retry_delay};
use crate::nodes::SlimNode;
use cloud::{Deletion, GroupId, InstanceState, ProviderId, Retry};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use shared::crd::{PendingNode, PendingNodeGoal};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The state of `id` from one list of its group shared by every PendingNode of the group ([`GroupLists`]: one
/// request per group per poll) started at `since` or later, or the instance's own state where the provider cannot
/// list or the list cannot tell.
async fn read_state(
    instances: &super::instances::Instances,
    provider: &dyn cloud::CloudProvider,
    group: &str,
    id: &ProviderId,
    since: tokio::time::Instant,
) -> Result<InstanceState, cloud::Error> {
    match instances.lists().state(&GroupId(group.to_owned()), id, since).await? {
        Some(state) => Ok(state),
        None => provider.instance_state(id).await,
    }
}

struct State {
    context: Context,
    attempts: Attempts,
    /// The instance states read, reused while nothing they depend on changed.
    memo: std::sync::Mutex<StateMemo>,
    /// What the metrics counted already, by PendingNode UID and what (a reconcile may run on a copy that predates
    /// its own last status write, and must not count twice).
    counted: std::sync::Mutex<std::collections::HashSet<(String, &'static str)>>,
    /// The name of the Node of each provider ID seen (from the Node watch): an instance's Node is found by its
    /// provider ID whatever it is named (Constellation names AWS nodes by instance ID, the cloud answers with the
    /// private DNS name). Entries may be stale; the Node read by name is checked against the provider ID.
    node_names: std::sync::Mutex<std::collections::HashMap<ProviderId, String>>,
    /// How long each group's instances took to leave: when to poll a leaving one.
    pace: std::sync::Mutex<Pace>,
}

impl State {
    fn memo(&self) -> std::sync::MutexGuard<'_, StateMemo> {
        self.memo.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn pace(&self) -> std::sync::MutexGuard<'_, Pace> {
        self.pace.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn node_names(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<ProviderId, String>> {
        self.node_names.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True the first time `what` happens to the PendingNode with `uid` in this process.
    fn first_time(&self, uid: Option<String>, what: &'static str) -> bool {
        let mut counted = self.counted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        counted.insert((uid.unwrap_or_default(), what))
    }
}

/// Runs the controller until `shutdown` is cancelled: every PendingNode, again when a Node with its provider
/// ID changes (the Node named `spec.nodeName` is read), at its deadline, and at its next poll of the cloud's state.
pub async fn run(context: Context, shutdown: CancellationToken) {
    let client = context.client.clone();
    let controller = Controller::new(Api::<PendingNode>::all(client.clone()), watcher::Config::default());
    let store = controller.store();
    let state = Arc::new(State {
        context,
        attempts: Attempts::default(),
        memo: Default::default(),
        counted: Default::default(),
        node_names: Default::default(),
        pace: Default::default(),
    });
    let names = state.clone();
    let results = controller
        // Slim Nodes: only the provider ID is read (a whole Node carries its images and status).
        .watches(Api::<SlimNode>::all(client), watcher::Config::default(), move |node: SlimNode| {
            let Some(provider_id) = node.spec.provider_id else { return Vec::new() };
            let parsed = provider_id.parse::<ProviderId>().ok();
            let matched: Vec<_> = store
                .state()
                .iter()
                .filter(|p| {
                    p.spec.provider_id == provider_id
                        || parsed.is_some() && p.spec.provider_id.parse::<ProviderId>().ok() == parsed
                })
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect();
            // Only the Nodes of instances a PendingNode waits for are remembered.
            if !matched.is_empty()
                && let (Some(id), Some(name)) = (parsed, node.metadata.name)
            {
                names.node_names().insert(id, name);
            }
            matched
        })
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, state);
    super::log_results("PendingNode", results).await;
}

async fn reconcile(pending: Arc<PendingNode>, state: Arc<State>) -> Result<Action, Error> {
    let name = pending.name_any();
    let kube_error = |source| Error::Kube { kind: "PendingNode", name: name.clone(), source };
    let ctx = &state.context;
    let api: Api<PendingNode> = Api::all(ctx.client.clone());
    if pending.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let created = pending.meta().creation_timestamp.as_ref().map_or(now, |t| t.0);
    let deadline = deadline_of(&pending, created, ctx.cloud.join_timeout, ctx.cloud.leave_timeout);
    let provider = &ctx.cloud.provider;
    let labels = GroupLabels { group: pending.spec.group_id.clone() };
    let reached_goal = pending.status.as_ref().is_some_and(|s| s.reached_goal);
    if pending.spec.goal == PendingNodeGoal::Join && reached_goal {
        return Ok(Action::await_change());
    }
    let id: Result<ProviderId, _> = pending.spec.provider_id.parse();
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node = nodes.get_opt(&pending.spec.node_name).await.map_err(kube_error)?;
    let mut node = node_fact(node.as_ref(), &pending.spec.provider_id);
    let named = match &id {
        Ok(id) if node == NodeFact::Absent => state.node_names().get(id).cloned(),
        _ => None,
    };
    if let Some(named) = named.filter(|n| *n != pending.spec.node_name) {
        // The instance's Node has another name than the cloud gave (Constellation names AWS nodes by instance
        // ID): read it by that name, and correct `spec.nodeName` so that the rollout finds the heir by it.
        let found = nodes.get_opt(&named).await.map_err(kube_error)?;
        node = node_fact(found.as_ref(), &pending.spec.provider_id);
        if node != NodeFact::Absent {
            tracing::info!(pending = %name, was = %pending.spec.node_name, node = %named, "the instance's Node has another name; correcting spec.nodeName");
            let patch =
                json!({"metadata": {"resourceVersion": pending.resource_version()}, "spec": {"nodeName": named}});
            super::fenced(ctx, api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)))
                .await?
                .map_err(kube_error)?;
            // The write wakes this PendingNode again, with the name.
            return Ok(Action::await_change());
        }
    }
    let key = pending.uid().unwrap_or_else(|| name.clone());
    let remembered = state.memo().fresh(&key, node, now);
    let mut assumed = false;
    let expected = state.pace().expected_for(&pending.spec.group_id, pending.spec.goal);
    let poll = poll_interval(until(created, now), expected);
    // Bound first: the memo's lock is not held across the read.
    let since = state.memo().list_since(&key, tokio::time::Instant::now(), poll);
    let state_result = match (&id, remembered) {
        (Ok(_), Some(remembered)) => Ok(remembered),
        // A Ready Node with the instance's provider ID answers for the instance: its kubelet runs on it.
        (Ok(_), None) if pending.spec.goal == PendingNodeGoal::Join && node == NodeFact::Ready => {
            Ok(InstanceState::Ready)
        }
        (Ok(id), None) => match since {
            // The first look at a new PendingNode: the replacer has just had the cloud create or delete its
            // instance, so it is not asked before the first poll (by the group's pace, see [`Pace`]), which every
            // PendingNode of the group polled then answers from one list (a fresh list per new PendingNode cost one
            // request per instance). An older one (a restarted controller) or one past its deadline is asked at once.
            None if until(created, now) < FIRST_LOOK && now < deadline => {
                let looked = first_look(pending.spec.goal);
                state.memo().record(&key, node, looked, now, poll);
                assumed = true;
                Ok(looked)
            }
            since => {
                let since = since.unwrap_or_else(tokio::time::Instant::now);
                let read = read_state(&ctx.instances, provider.as_ref(), &pending.spec.group_id, id, since).await;
                if let Ok(read) = &read {
                    state.memo().record(&key, node, *read, now, poll);
                }
                read
            }
        },
        (Err(error), _) => Err(cloud::Error::invalid(format!("spec.providerID: {error}"))),
    };
    let leave_overdue = pending
        .status
        .as_ref()
        .and_then(|s| condition::status_of(&s.conditions, LEAVE_OVERDUE))
        .is_some_and(|s| s == "True");
    let donor_waits = match state_result {
        Ok(InstanceState::Terminated) => donor_waits(&pending, &ctx.nodes),
        _ => false,
    };
    let facts = Facts {
        donor_waits,
        expected,
        goal: pending.spec.goal,
        reached_goal,
        deadline,
        created,
        now,
        node,
        state: state_result.as_ref().copied(),
        leave_overdue,
    };
    let mut decision = decide(&facts);
    if assumed {
        // Not the cloud's word: not shown as `cspState`, and the first poll comes by the group's pace.
        decision.csp_state = None;
        decision.wake = Some(decision.wake.map_or(poll, |wake| wake.min(poll)));
    }
    tracing::debug!(pending = %name, ?facts, ?decision, assumed, "PendingNode decided");
    let group = GroupId(pending.spec.group_id.clone());
    let mut spec_patch = None;
    let mut cloud_failed = None;
    let mut events: Vec<EventSpec> = decision.event.take().into_iter().collect();
    if decision.step == Move::RetryDelete && !leave_overdue && state.first_time(pending.uid(), "overdue") {
        ctx.cloud.metrics.overdue_leaves.get_or_create(&labels).inc();
    }
    match decision.step {
        Move::Wait => {}
        // Nothing more to ask the cloud.
        Move::Joined => state.memo().forget(&key),
        Move::GiveUp(_) | Move::RetryDelete => {
            // The deletion changes the instance's state: the next reconcile asks the cloud, a list started after it.
            state.memo().deleted(&key, now);
            let deleted = match &id {
                Ok(id) => super::fenced(ctx, provider.delete_instance(&group, id)).await?,
                Err(error) => Err(cloud::Error::invalid(format!("spec.providerID: {error}"))),
            };
            match deleted {
                Ok(deletion) => {
                    tracing::info!(pending = %name, ?deletion, step = ?decision.step, "deleted the instance");
                    if matches!(decision.step, Move::GiveUp(_)) {
                        let leave_by = now.saturating_add(
                            SignedDuration::try_from(ctx.cloud.leave_timeout).unwrap_or(SignedDuration::MAX),
                        );
                        spec_patch = Some(json!({"spec": {"goal": "Leave", "deadline": leave_by.unwrap_or(now)}}));
                    }
                    if deletion == Deletion::AlreadyGone {
                        decision.wake = Some(Duration::ZERO);
                    }
                }
                Err(error) => {
                    let (synced, event) = delete_failed(&error);
                    decision.conditions.retain(|c| c.type_ != SYNCED && c.type_ != JOIN_FAILED);
                    decision.conditions.push(synced);
                    if matches!(decision.step, Move::GiveUp(_)) {
                        // Not given up yet: the JoinFailed Event comes with the deletion that succeeds.
                        events.clear();
                    }
                    events.push(event);
                    cloud_failed = Some(error.retry());
                }
            }
        }
        Move::Remove => {}
    }
    for event in &events {
        ctx.events.publish_named(
            pending.object_ref(&()),
            None,
            event.reason,
            event.warning,
            event.message.clone(),
            "ReplaceNode",
        );
    }
    if decision.step == Move::Remove {
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: pending.uid(), resource_version: None }),
            ..DeleteParams::default()
        };
        match super::fenced(ctx, api.delete(&name, &params)).await? {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(source) => return Err(kube_error(source)),
        }
        state.attempts.succeeded(&name);
        state.memo().forget(&key);
        if let Some(took) = leave_took(&pending, created, now) {
            state.pace().record(&pending.spec.group_id, took);
        }
        if let Ok(id) = &id {
            state.node_names().remove(id);
        }
        state
            .counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(uid, _)| Some(uid) != pending.uid().as_ref());
        return Ok(Action::await_change());
    }
    // Writes carry the resourceVersion read: a reconcile of a copy older than the last write fails with a
    // conflict and runs again on the new one, instead of writing an old status back.
    let mut resource_version = pending.resource_version();
    let mut status = pending.status.clone().unwrap_or_default();
    let mut changed = false;
    if let Some(csp) = decision.csp_state
        && status.csp_state != csp
    {
        status.csp_state = csp;
        changed = true;
    }
    if decision.step == Move::Joined && !status.reached_goal {
        status.reached_goal = true;
        changed = true;
    }
    for wanted in &decision.conditions {
        changed |= condition::set(&mut status.conditions, wanted, pending.meta().generation, now);
    }
    if changed {
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": status});
        let written = super::fenced(ctx, api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)))
            .await?
            .map_err(kube_error)?;
        resource_version = written.resource_version();
    }
    if let Some(mut patch) = spec_patch {
        // The goal switches after the instance's deletion started: a crash in between repeats the (idempotent)
        // deletion, never leaves an instance behind.
        patch["metadata"] = json!({ "resourceVersion": resource_version });
        super::fenced(ctx, api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)))
            .await?
            .map_err(kube_error)?;
        if state.first_time(pending.uid(), "failed-join") {
            ctx.cloud.metrics.failed_joins.get_or_create(&labels).inc();
        }
    }
    let attempts = &state.attempts;
    Ok(match (cloud_failed, state_result.as_ref().err()) {
        (Some(retry), _) => Action::requeue(retry_delay(retry, attempts.failed(&name))),
        (None, Some(error)) => {
            let after = retry_delay(error.retry(), attempts.failed(&name));
            Action::requeue(decision.wake.map_or(after, |wake| wake.min(after).max(Duration::from_secs(1))))
        }
        (None, None) => {
            attempts.succeeded(&name);
            decision.wake.map_or_else(Action::await_change, Action::requeue)
        }
    })
}

fn error_policy(pending: Arc<PendingNode>, error: &Error, state: Arc<State>) -> Action {
    tracing::warn!(%error, "PendingNode reconcile failed; retrying");
    Action::requeue(retry_delay(Retry::Backoff, state.attempts.failed(&pending.name_any())))
}

#[cfg(test)]
mod tests;
