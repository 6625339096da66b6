//! The replacement's steps that are not a Node write (create an instance, retire a donor, release its old
//! instance): run as background tasks (`crate::cloud_steps`) whose result the plan reads, and the Node write that
//! follows a settled step.

use super::*;

impl Executor {
    /// Writes the Node writes of background steps that succeeded since the last apply; forgets those whose step
    /// is no longer known (the plan asks for it again if it still must be done).
    pub(super) async fn follow_up(
        &self,
        term: &Term,
        nodes: &HashMap<String, SlimNode>,
        now: Timestamp,
        applied: &mut Applied,
    ) {
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
            match self.write(term, node, &f.action, None, f.version.as_ref(), now, f.drain).await {
                WriteResult::Written => applied.writes += 1,
                WriteResult::Unchanged | WriteResult::Fenced => {}
                WriteResult::Conflict => applied.conflicts += 1,
                WriteResult::Failed => applied.errors += 1,
            }
        }
    }

    /// A replacement step that is not (only) a Node write: the cloud, etcd and PendingNode side through the replacer,
    /// run in the background ([`crate::cloud_steps`]), then, once it is done and the plan asks for the step again,
    /// the Node write of an abandoned or released instance. Returns without waiting on the cloud.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn replacement_step(
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
                self.write(term, node, action, None, version, now, drain).await
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
}

/// Whether the action is a replacement step run in the background ([`crate::cloud_steps`]).
pub(super) fn is_cloud_step(kind: &ActionKind) -> bool {
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
pub(super) fn step_key(action: &NodeAction) -> String {
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
pub(super) struct FollowUp {
    pub(super) step: String,
    pub(super) action: NodeAction,
    pub(super) version: Option<ObjectReference>,
    pub(super) drain: DrainOptions,
}

/// The replacement's annotations an action writes beside the controller annotations: the heir on a donor being
/// drained, the donor on its heir (and their removal once the donor's instance is released).
pub(super) fn replacement_keys(action: &NodeAction) -> Vec<(&'static str, Option<String>)> {
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
