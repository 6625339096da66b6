//! The controller's preflight: when a rollout starts (a NodeVersion generation with outdated nodes,
//! the first time the leader plans it), its [`blockers`](super::blockers) become the `Preflight`
//! condition and one Warning Event each, before the first node is touched.
//!
//! # Guarantees
//! - Runs once per NodeVersion generation and leadership of this process; a failed list is retried
//!   on the next reconcile (the rollout is not held for it: blockers are reported, never enforced).
//! - Reads only (lists of pods, PodDisruptionBudgets, DaemonSets and ScalingGroups), within the term.

use super::blockers::{self, Blocker};
use super::snapshot::Workloads;
use crate::events::{Events, node_reference};
use crate::leadership::Term;
use crate::policy::{ClusterPlan, NodeView, Rollout};
use crate::status::{PREFLIGHT, PROGRESSING};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use shared::crd::{NodeVersion, NodeVersionStatus, ScalingGroup};
use std::collections::HashMap;
use std::sync::Arc;

/// How many blockers the condition's message names before it says "and N more".
const MAX_NAMED: usize = 5;
/// The reason of the preflight's Events.
pub const EVENT_REASON: crate::reason::Reason = crate::reason::Reason::PreflightBlocker;

/// The preflights done, by NodeVersion UID: the generation and the condition found.
#[derive(Debug, Default)]
pub struct Preflight {
    done: HashMap<String, (i64, Condition)>,
}

impl Preflight {
    /// Runs the preflight of every rollout of `plan` that starts now (see the module documentation);
    /// publishes its Events and returns the conditions to write, by index into `versions`.
    #[allow(clippy::too_many_arguments)]
    pub async fn run<'v>(
        &mut self,
        client: &Client,
        term: &Term,
        versions: &[Arc<NodeVersion>],
        rollouts: &[Rollout],
        views: impl FnOnce() -> Vec<&'v NodeView>,
        plan: &ClusterPlan,
        events: &Events,
        now: Timestamp,
    ) -> Vec<(usize, Condition)> {
        self.done.retain(|uid, _| versions.iter().any(|v| v.uid().as_deref() == Some(uid)));
        let due: Vec<usize> = versions
            .iter()
            .zip(&plan.rollouts)
            .enumerate()
            .filter(|(_, (v, p))| {
                let generation = v.metadata.generation.unwrap_or_default();
                // A health check's first evaluation is a moment away: the preflight waits for what it sees.
                p.counts.outdated > 0
                    && !p.hold.as_ref().is_some_and(crate::policy::health::pending)
                    && self.done.get(&v.uid().unwrap_or_default()).is_none_or(|(g, _)| *g != generation)
            })
            .map(|(i, _)| i)
            .collect();
        if due.is_empty() {
            return Vec::new();
        }
        // The nodes are gathered only when a rollout starts (the planner keeps them between reconciles), by reference:
        // a copy of every view is megabytes at 5000 nodes.
        let views = views();
        let views = views.as_slice();
        let read = async {
            let workloads = Workloads::read(client).await?;
            let groups = match Api::<ScalingGroup>::all(client.clone()).list(&ListParams::default()).await {
                Ok(list) => list.items,
                Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
                Err(error) => return Err(error),
            };
            Ok::<_, kube::Error>((workloads, groups))
        };
        let (workloads, groups) = match term.fence(read).await {
            Ok(Ok(read)) => read,
            Ok(Err(error)) => {
                tracing::warn!(%error, "preflight: cannot list the workloads; trying again on the next reconcile");
                return Vec::new();
            }
            Err(_) => return Vec::new(),
        };
        let sizes = blockers::group_sizes(&groups, views);
        let found = blockers::find(views, rollouts, plan, &workloads, &sizes);
        let mut conditions = Vec::new();
        for i in due {
            let version = &versions[i];
            let name = version.name_any();
            let mine: Vec<&Blocker> = found.iter().filter(|b| b.node_version == name).collect();
            let generation = version.metadata.generation.unwrap_or_default();
            let reference = version.object_ref(&());
            for blocker in &mine {
                tracing::warn!(nodeversion = %name, kind = ?blocker.kind, object = blocker.object, detail = blocker.message, "preflight: blocker");
                let related = match blocker.nodes.as_slice() {
                    [one] => Some(node_reference(one, None)),
                    _ => None,
                };
                let note = format!("{}; {}", blocker.message, blocker.fix);
                events.publish_named(reference.clone(), related, EVENT_REASON, true, note, "Preflight");
            }
            let condition = condition(&mine, Some(generation), now);
            self.done.insert(version.uid().unwrap_or_default(), (generation, condition.clone()));
            conditions.push((i, condition));
        }
        conditions
    }

    /// Puts the condition of this process's preflight of `version`'s generation into `status` (the
    /// status computed from a cache that may not show it yet).
    /// Not once the rollout is complete (see [`settled`]).
    pub fn annotate(&self, version: &NodeVersion, status: &mut NodeVersionStatus) {
        let uid = version.uid().unwrap_or_default();
        let complete = status
            .conditions
            .iter()
            .any(|c| c.type_ == PROGRESSING && c.reason == crate::policy::Reason::Complete.to_string());
        if let Some((generation, condition)) = self.done.get(&uid)
            && version.metadata.generation == Some(*generation)
            && !complete
        {
            set_condition(status, condition.clone());
        }
    }
}

/// Replaces (or adds) the `Preflight` condition of `status`, keeping its transition time while its
/// status stays.
pub fn set_condition(status: &mut NodeVersionStatus, mut condition: Condition) {
    match status.conditions.iter_mut().find(|c| c.type_ == PREFLIGHT) {
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = condition;
        }
        None => status.conditions.push(condition),
    }
}

/// The `Preflight` condition once the rollout is complete: blockers found before it started (`BlockersFound`)
/// held nothing back in the end, and a condition that still named them would mislead; any other condition is
/// kept as it is.
pub fn settled(condition: &Condition, generation: Option<i64>, now: Timestamp) -> Condition {
    if condition.status != "True" {
        return condition.clone();
    }
    Condition {
        type_: PREFLIGHT.to_owned(),
        status: "False".to_owned(),
        reason: "RolloutComplete".to_owned(),
        message: format!("the rollout is complete; before it started, the preflight found: {}", condition.message),
        observed_generation: generation,
        last_transition_time: Time(shared::protocol::truncate_to_seconds(now)),
    }
}

/// The `Preflight` condition for `blockers`: True (`BlockersFound`) naming them, else False
/// (`NoBlockers`).
pub fn condition(blockers: &[&Blocker], generation: Option<i64>, now: Timestamp) -> Condition {
    let (status, reason, message) = if blockers.is_empty() {
        ("False", "NoBlockers", "nothing found that would block the rollout".to_owned())
    } else {
        let mut named: Vec<String> = blockers.iter().take(MAX_NAMED).map(|b| b.message.clone()).collect();
        if blockers.len() > MAX_NAMED {
            named.push(format!("and {} more (see the Events)", blockers.len() - MAX_NAMED));
        }
        ("True", "BlockersFound", format!("{} blocker(s): {}", blockers.len(), named.join("; ")))
    };
    Condition {
        type_: PREFLIGHT.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: Time(shared::protocol::truncate_to_seconds(now)),
    }
}
