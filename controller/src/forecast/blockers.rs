//! What would stop a rollout, found before it starts: each blocker names the nodes and the object
//! it concerns and says what to do about it.
//!
//! # Sources
//! - The first plan ([`crate::policy::plan_with`] at the present): nodes held back for a reason of
//!   their own (no agent report, cordoned by someone else, NotReady, ...), a rollout held as a whole
//!   (closed maintenance window, paused, invalid spec, failure budget spent, ...), and nodes failed
//!   or blocked earlier, which wait for an administrator.
//! - The drain classifier ([`crate::drain::filters::classify`]) on the pods of every node the
//!   rollout will drain: pods a drain cannot evict under the rollout's drain options (no controller,
//!   emptyDir data, an orphan of a deleted DaemonSet, several budgets).
//! - Pods marked do-not-disrupt on such a node ([`crate::do_not_disrupt`]): the node is held while they run.
//! - PodDisruptionBudgets that allow no disruption now (`status.disruptionsAllowed` 0) and select
//!   a running pod on such a node: its drain would wait on them until `drainTimeout`.
//! - ScalingGroups at their maximum size whose nodes are replaced (a replacement adds an instance), and
//!   ScalingGroups whose new instances would not get the rollout's image (the first plan holds their nodes).

use super::snapshot::Workloads;
use crate::drain::filters::{PodVerdict, budgets_matter, classify, pod_name};
use crate::policy::{ClusterPlan, NodeView, Reason, Rollout};
use kube::ResourceExt;
use serde::Serialize;
use shared::crd::ScalingGroup;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// The kinds of blockers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum BlockerKind {
    /// A PodDisruptionBudget allows no disruption: the drains of the nodes of its pods wait.
    DisruptionBudget,
    /// A pod the drain cannot evict (no controller, emptyDir data, orphan, several budgets).
    UnevictablePod,
    /// A pod or Node marked do-not-disrupt: the node is held while it is there.
    DoNotDisrupt,
    /// A workload of the node's pods is not whole now (`settleWorkloads`): the node waits until it is.
    WorkloadsNotSettled,
    /// The node's agent never reported.
    NoAgent,
    /// Someone else cordoned the node.
    ForeignCordon,
    /// The node is NotReady.
    NodeNotReady,
    /// Another reason of the node's own (see the message).
    NodeHeld,
    /// The maintenance window is closed now.
    WindowClosed,
    /// The rollout is held as a whole (paused, invalid spec, failure budget spent, ...).
    RolloutHeld,
    /// The node failed or is blocked from an earlier attempt and waits for an administrator.
    NodeFailed,
    /// A scaling group is at its maximum size: a replacement cannot add an instance.
    ScalingGroupAtMax,
    /// A scaling group's new instances would not get the rollout's image: its nodes are not replaced.
    GroupImage,
}

/// One thing that would block a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    pub kind: BlockerKind,
    /// The NodeVersion whose rollout it blocks.
    pub node_version: String,
    /// The object it concerns: `PodDisruptionBudget demo/web`, `Pod default/debug`, `Node worker-3`,
    /// `NodeVersion nv`.
    pub object: String,
    /// The nodes it keeps from being updated, sorted.
    pub nodes: Vec<String>,
    /// What is wrong, naming the nodes.
    pub message: String,
    /// What to do about it.
    pub fix: String,
}

/// A ScalingGroup and how many nodes it has now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSize {
    pub name: String,
    pub group_id: String,
    pub max: Option<i32>,
    pub size: usize,
    /// The NodeVersion whose image its new instances get (`spec.nodeImage`).
    pub node_image: String,
}

/// The size of each of `groups`: its members among `nodes`.
pub fn group_sizes(groups: &[ScalingGroup], nodes: &[&NodeView]) -> Vec<GroupSize> {
    groups
        .iter()
        .map(|g| GroupSize {
            name: g.name_any(),
            group_id: g.spec.group_id.clone(),
            max: g.spec.max,
            size: nodes.iter().filter(|n| n.group.as_ref().is_some_and(|m| m.group_id == g.spec.group_id)).count(),
            node_image: g.spec.node_image.clone(),
        })
        .collect()
}

/// Every blocker of `rollouts` (as given to `first`'s plan), sorted by NodeVersion, kind and object.
pub fn find(
    nodes: &[&NodeView],
    rollouts: &[Rollout],
    first: &ClusterPlan,
    workloads: &Workloads,
    groups: &[GroupSize],
) -> Vec<Blocker> {
    let mut found = Vec::new();
    for (index, (rollout, plan)) in rollouts.iter().zip(&first.rollouts).enumerate() {
        let name = rollout.name.clone();
        let blocker = |kind, object: String, nodes: Vec<String>, message: String, fix: &str| Blocker {
            kind,
            node_version: name.clone(),
            object,
            nodes,
            message,
            fix: fix.to_owned(),
        };
        if let Some(hold) = &plan.hold {
            let (kind, fix) = match hold.reason {
                Reason::OutsideMaintenanceWindow => {
                    (BlockerKind::WindowClosed, "wait for the window, or widen spec.rollout.maintenanceWindow")
                }
                Reason::CannotFinishInWindow => (
                    BlockerKind::WindowClosed,
                    "wait for the next window, or lengthen the window's duration: a node's turn takes longer than \
                     the time it has left",
                ),
                Reason::MaintenanceExclusion => (
                    BlockerKind::WindowClosed,
                    "wait for the exclusion to end, or change spec.rollout.maintenanceExclusions",
                ),
                Reason::Paused => (BlockerKind::RolloutHeld, "set spec.rollout.paused to false"),
                Reason::InvalidSpec => (BlockerKind::RolloutHeld, "fix the spec fields the message names"),
                Reason::FailureBudgetExhausted | Reason::StoppedOnDrainTimeout => (
                    BlockerKind::RolloutHeld,
                    "fix the failed or blocked nodes and remove their intent annotation, or raise spec.rollout.failureBudget",
                ),
                Reason::UnavailableNodes => {
                    (BlockerKind::RolloutHeld, "bring the unavailable nodes back, or raise spec.rollout.maxUnavailable")
                }
                Reason::KubernetesUpgradeRefused => (BlockerKind::RolloutHeld, "see the message"),
                Reason::HealthCheckFailing | Reason::HealthCheckTimedOut => (
                    BlockerKind::RolloutHeld,
                    "make the health check pass (the message names the object and what it saw), or change \
                     spec.rollout.healthChecks",
                ),
                _ => (BlockerKind::RolloutHeld, ""),
            };
            if !fix.is_empty() {
                found.push(blocker(
                    kind,
                    format!("NodeVersion {name}"),
                    Vec::new(),
                    format!("{}: {}", hold.reason, hold.message),
                    fix,
                ));
            }
        }
        for held in &plan.held {
            let group = nodes
                .iter()
                .find(|n| n.name == held.node)
                .and_then(|n| n.group.as_ref())
                .and_then(|m| groups.iter().find(|g| g.group_id == m.group_id));
            if held.hold.reason == Reason::GroupImagePending && group.is_none_or(|g| g.node_image == name) {
                // Its ScalingGroup controller sets the group to this NodeVersion's image: a moment's wait.
                continue;
            }
            let (kind, fix) = match held.hold.reason {
                Reason::NoAgentReport => (
                    BlockerKind::NoAgent,
                    "run the update-operator agent on the node (its DaemonSet selects update.edgeless.systems/managed=true)",
                ),
                Reason::CordonedByOther => (
                    BlockerKind::ForeignCordon,
                    "uncordon the node (kubectl uncordon) once whoever cordoned it is done",
                ),
                Reason::NodeNotReady => (BlockerKind::NodeNotReady, "bring the node back to Ready"),
                Reason::DoNotDisrupt => (
                    BlockerKind::DoNotDisrupt,
                    "remove the do-not-disrupt annotation from the Node when it may be disrupted",
                ),
                Reason::WaitingForWorkloads | Reason::SettleTimedOut => (
                    BlockerKind::WorkloadsNotSettled,
                    "wait until the workload is whole again (every replica available, its PodDisruptionBudget \
                     healthy), or turn spec.rollout.settleWorkloads off",
                ),
                Reason::GroupImagePending => (
                    BlockerKind::GroupImage,
                    "set the node's ScalingGroup spec.nodeImage to this NodeVersion (its new instances get its image)",
                ),
                _ => (BlockerKind::NodeHeld, "see the message"),
            };
            let mut message = format!("node {}: {}: {}", held.node, held.hold.reason, held.hold.message);
            if let Some(g) = group.filter(|_| kind == BlockerKind::GroupImage) {
                let _ = write!(message, " (ScalingGroup {} takes the image of NodeVersion {})", g.name, g.node_image);
            }
            found.push(blocker(kind, format!("Node {}", held.node), vec![held.node.clone()], message, fix));
        }
        for problem in plan.failed.iter().chain(&plan.blocked) {
            found.push(blocker(
                BlockerKind::NodeFailed,
                format!("Node {}", problem.node),
                vec![problem.node.clone()],
                format!("node {}: {}", problem.node, problem.message),
                "fix the node and remove its update.edgeless.systems/intent annotation to retry it",
            ));
        }
        let Some(spec) = rollout.spec.acting() else { continue };
        // The nodes the rollout will drain: its outdated members.
        let drained: BTreeSet<&str> = nodes
            .iter()
            .filter(|n| n.selected_by.first() == Some(&index))
            .filter(|n| n.agent.as_ref().ok().and_then(|a| a.os_image.as_deref()) != Some(spec.target.as_str()))
            .map(|n| n.name.as_str())
            .collect();
        let mut budget_nodes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for facts in &workloads.pods {
            let Some(node) = facts.node.as_deref().filter(|n| drained.contains(n)) else { continue };
            let pod = &facts.pod();
            let namespace = &facts.namespace;
            if let Some(held) = crate::do_not_disrupt::pod_holds(pod) {
                found.push(blocker(
                    BlockerKind::DoNotDisrupt,
                    format!("Pod {}", pod_name(pod)),
                    vec![node.to_owned()],
                    format!("{held}: {node} is held back while it runs"),
                    "wait until the pod finishes, or remove the annotation if the node may be disrupted now",
                ));
                continue;
            }
            match classify(pod, &spec.policy.drain, &workloads.context(facts, pod)) {
                PodVerdict::Block(message) => {
                    let (what, fix) = match message.rsplit_once("; ") {
                        Some((what, fix)) => (what.to_owned(), fix.to_owned()),
                        None => (message.clone(), "see the message".to_owned()),
                    };
                    found.push(blocker(
                        BlockerKind::UnevictablePod,
                        format!("Pod {}", pod_name(pod)),
                        vec![node.to_owned()],
                        format!("{what}: {node} cannot be drained"),
                        &fix,
                    ));
                }
                PodVerdict::Evict if budgets_matter(pod) => {
                    for budget in &facts.budgets {
                        budget_nodes.entry(format!("{namespace}/{budget}")).or_default().insert(node.to_owned());
                    }
                }
                _ => {}
            }
        }
        for budget in &workloads.budgets {
            let key = format!(
                "{}/{}",
                budget.metadata.namespace.as_deref().unwrap_or_default(),
                budget.metadata.name.as_deref().unwrap_or_default()
            );
            let allowed = budget.status.as_ref().map(|s| s.disruptions_allowed);
            let Some(nodes) = budget_nodes.get(&key).filter(|_| allowed == Some(0)) else { continue };
            let nodes: Vec<String> = nodes.iter().cloned().collect();
            found.push(blocker(
                BlockerKind::DisruptionBudget,
                format!("PodDisruptionBudget {key}"),
                nodes.clone(),
                format!("PDB {key} allows 0 disruptions: {} cannot be drained", nodes.join(", ")),
                "scale the workload up or relax the budget's minAvailable/maxUnavailable; until then the drains wait \
                 until spec.rollout.drainTimeout",
            ));
        }
        for group in groups {
            let replaced: Vec<String> = nodes
                .iter()
                .filter(|n| drained.contains(n.name.as_str()))
                .filter(|n| n.group.as_ref().is_some_and(|g| g.group_id == group.group_id))
                .map(|n| n.name.clone())
                .collect();
            let Some(max) = group.max.filter(|m| group.size >= usize::try_from(*m).unwrap_or(0)) else { continue };
            if replaced.is_empty() {
                continue;
            }
            found.push(blocker(
                BlockerKind::ScalingGroupAtMax,
                format!("ScalingGroup {}", group.name),
                replaced.clone(),
                format!(
                    "scaling group {} is at its maximum size ({max}): {} cannot be replaced (a replacement adds an instance first)",
                    group.name,
                    replaced.join(", ")
                ),
                "raise the group's maximum size (spec.max and the cloud's)",
            ));
        }
    }
    found.sort_by(|a, b| (&a.node_version, a.kind, &a.object).cmp(&(&b.node_version, b.kind, &b.object)));
    found
}
