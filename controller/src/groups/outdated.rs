//! The default pause request of the cluster-autoscaler: paused while a node of a ScalingGroup runs another image
//! than the group's NodeVersion names, while any PendingNode exists, or while a NodeVersion's Kubernetes upgrade
//! is under way (its status says `activeClusterVersionUpgrade`): only while that work moves or waits only for the
//! autoscaler. A NodeVersion the plan holds back (its `Progressing` condition False for a reason of the plan:
//! paused, outside its window, failure budget spent, invalid spec, ...) asks no pause for its drift: autoscaling
//! is not kept off for days by a rollout that does not move.
//!
//! The replacement flow in the rollout policy (issue 12 item 6) will send [`Pause`] itself; until then this
//! driver derives it from the cluster and the cloud.

use super::Context;
use super::autoscaler::{Pause, PauseSender};
use super::instances::Instance;
use kube::ResourceExt;
use kube::runtime::reflector;
use shared::crd::NodeVersion;
use shared::protocol::keys;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long after a change the pause is computed (changes come in bursts).
const SETTLE: Duration = Duration::from_millis(200);
/// How soon nodes whose image or group the cloud did not tell are asked again.
const RETRY: Duration = Duration::from_secs(10);

/// A scaling group and the image its NodeVersion names (`None`: no NodeVersion or no image).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupTarget {
    /// The group's cloud ID (`spec.groupId`).
    pub group_id: String,
    /// The image its nodes should run.
    pub desired: Option<String>,
}

/// A node of a cloud group: its group and image as the cloud reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupNode {
    /// The Node's name.
    pub name: String,
    /// The group the cloud says it belongs to.
    pub group_id: String,
    /// The image the cloud says it was created from.
    pub image: String,
    /// The image its agent reports (`update.edgeless.systems/os-image`), when one runs there: a node updated in
    /// place keeps its creation image at the cloud.
    pub reported: Option<String>,
}

/// Whether the autoscaler should be paused: some node of a group runs another image than the group's target
/// (neither its creation image nor the image its agent reports is the target), or `pending` PendingNodes exist.
/// Pure.
pub fn pause_for(targets: &[GroupTarget], nodes: &[GroupNode], pending: usize) -> Pause {
    let desired: HashMap<&str, &str> =
        targets.iter().filter_map(|t| Some((t.group_id.as_str(), t.desired.as_deref()?))).collect();
    let mut outdated: Vec<&str> = nodes
        .iter()
        .filter(|n| {
            desired.get(n.group_id.as_str()).is_some_and(|d| *d != n.image && n.reported.as_deref() != Some(*d))
        })
        .map(|n| n.name.as_str())
        .collect();
    outdated.sort_unstable();
    let mut reasons = Vec::new();
    if !outdated.is_empty() {
        const SHOWN: usize = 5;
        let more = outdated.len().saturating_sub(SHOWN);
        let names = outdated.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        reasons.push(format!("{} node(s) of scaling groups outdated ({names}{more})", outdated.len()));
    }
    if pending > 0 {
        reasons.push(format!("{pending} PendingNode(s) joining or leaving"));
    }
    Pause { wanted: !reasons.is_empty(), reason: reasons.join("; ") }
}

/// `pause`, and paused too while a NodeVersion's Kubernetes upgrade is under way (a node the autoscaler adds
/// meanwhile would join with the old components). Pure.
pub fn with_kubernetes_upgrades<'a>(mut pause: Pause, versions: impl IntoIterator<Item = &'a NodeVersion>) -> Pause {
    let mut upgrading: Vec<String> = versions
        .into_iter()
        .filter(|v| v.status.as_ref().is_some_and(|s| s.active_cluster_version_upgrade))
        .map(|v| {
            let version = v.spec.kubernetes_cluster_version.as_deref().unwrap_or("?");
            format!("{} (Kubernetes {version})", v.name_any())
        })
        .collect();
    if upgrading.is_empty() {
        return pause;
    }
    upgrading.sort();
    let reason = format!("Kubernetes upgrade under way: {}", upgrading.join(", "));
    pause.reason = if pause.wanted { format!("{}; {reason}", pause.reason) } else { reason };
    pause.wanted = true;
    pause
}

/// `pause`, and paused too while a node is in a Kubernetes upgrade's step (its intent carries the components or
/// the kubeadm command): whatever the NodeVersions' conditions say between two nodes, the autoscaler is not
/// restored under a node that is being upgraded. `upgrading` names those nodes. Pure.
pub fn with_nodes_upgrading(mut pause: Pause, mut upgrading: Vec<&str>) -> Pause {
    if upgrading.is_empty() {
        return pause;
    }
    upgrading.sort_unstable();
    let reason = format!("Kubernetes upgrade of node(s) in progress: {}", upgrading.join(", "));
    pause.reason = if pause.wanted { format!("{}; {reason}", pause.reason) } else { reason };
    pause.wanted = true;
    pause
}

/// Whether a Node's annotations say it is in a Kubernetes upgrade's step.
fn upgrading_kubernetes(annotations: &std::collections::BTreeMap<String, String>) -> bool {
    annotations.get(keys::INTENT).is_some_and(|step| step == shared::protocol::Step::KubeadmUpgrade.as_str())
        || annotations.contains_key(keys::INTENT_KUBEADM)
        || annotations.contains_key(keys::INTENT_COMPONENTS)
}

/// Whether a `Progressing` reason says the rollout only waits between two nodes (for the autoscaler, the control
/// plane, the API server, a slot, a node coming back, the cloud's answer): its work goes on, and so does the
/// pause, rather than restoring the autoscaler for the moment between two nodes.
fn between_nodes(reason: &str) -> bool {
    use crate::policy::Reason;
    [
        Reason::WaitingForAutoscaler,
        Reason::WaitingForControlPlane,
        Reason::WaitingForApiServer,
        Reason::UnavailableNodes,
        Reason::ZoneUnavailable,
        Reason::SurgeExhausted,
        Reason::NodesHeldBack,
        Reason::NodeNotReady,
        Reason::ImageUnknown,
        Reason::GroupImagePending,
        // The rollback starts moving nodes back in the next round.
        Reason::RollbackStarted,
    ]
    .iter()
    .any(|r| r.to_string() == reason)
}

/// Why the plan holds `version` back, when it does: its `Progressing` condition, written by the plan for the
/// current generation, is False for another reason than waiting for the autoscaler. `None` (its drift counts)
/// while it moves, waits for the autoscaler, or the plan has not spoken for this generation yet. Pure.
pub fn held_back(version: &NodeVersion) -> Option<String> {
    let status = version.status.as_ref()?;
    let progressing = status.conditions.iter().find(|c| c.type_ == crate::status::PROGRESSING)?;
    let current = progressing.observed_generation.is_some_and(|g| Some(g) == version.metadata.generation);
    (current && progressing.status == "False" && !between_nodes(&progressing.reason))
        .then(|| format!("{}: {}", progressing.reason, progressing.message))
}

/// The image `version` moves its groups' nodes to, unless it is held back ([`held_back`]): `spec.image`, or during a
/// rollback (`status.rollback` of that image) the image the nodes go back to (`crate::policy::rollback`). Pure.
pub fn desired_image(version: &NodeVersion) -> Option<String> {
    if held_back(version).is_some() {
        return None;
    }
    let rollback = crate::policy::rollback::Active::recorded(version.status.as_ref(), &version.spec.image);
    Some(rollback.map_or_else(|| version.spec.image.clone(), |r| r.to)).filter(|i| !i.is_empty())
}

/// Drives `pause` from the cluster until `shutdown` is cancelled.
pub async fn drive(context: Context, pause: Arc<PauseSender>, shutdown: CancellationToken) {
    let changed = Arc::new(Notify::new());
    // The controller's own caches (synced before it said it was ready): a watch of their own per term would list
    // again at every leader change, and decide nothing while that list is slow.
    let (versions, groups, pending) =
        (context.versions.clone(), context.scaling_groups.clone(), context.pending.clone());
    let nodes = context.nodes.clone();
    // Each Node or resource event, and each cloud answer about the instances (shared with the rollout's replacer),
    // looks again.
    let instances = context.instances.clone();
    crate::notify_on_change(context.node_changes.clone(), changed.clone(), shutdown.clone());
    crate::notify_on_change(context.resource_changes.clone(), changed.clone(), shutdown.clone());
    crate::notify_on_change(instances.subscribe(), changed.clone(), shutdown.clone());
    // Decide from complete lists only: a partial list could lift a pause a replacement needs.
    tokio::select! {
        () = shutdown.cancelled() => return,
        ready = async {
            versions.wait_until_ready().await?;
            groups.wait_until_ready().await?;
            pending.wait_until_ready().await?;
            nodes.wait_until_ready().await
        } => if ready.is_err() { return },
    }
    changed.notify_one();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = changed.notified() => {}
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(SETTLE) => {}
        }
        let targets: Vec<GroupTarget> = groups
            .state()
            .iter()
            .map(|g| GroupTarget {
                group_id: g.spec.group_id.clone(),
                desired: versions.get(&reflector::ObjectRef::new(&g.spec.node_image)).and_then(|v| desired_image(&v)),
            })
            .collect();
        let state = nodes.state();
        let unknown = instances.refresh(state.iter().filter_map(|n| {
            Some(Instance { node: n.metadata.name.as_deref()?, provider_id: n.spec.provider_id.as_deref()? })
        }));
        let mut found = Vec::new();
        for node in &state {
            let (Some(raw), Some(name)) = (&node.spec.provider_id, &node.metadata.name) else { continue };
            if let Some(Some((group_id, image))) = instances.get(raw) {
                let reported = node.annotations().get(shared::protocol::keys::OS_IMAGE).cloned();
                found.push(GroupNode { name: name.clone(), group_id, image, reported });
            }
        }
        let upgrading: Vec<&str> = state
            .iter()
            .filter(|n| upgrading_kubernetes(n.annotations()))
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        let wanted = with_nodes_upgrading(
            with_kubernetes_upgrades(
                pause_for(&targets, &found, pending.state().len()),
                versions.state().iter().map(|v| &**v).filter(|v| held_back(v).is_none()),
            ),
            upgrading,
        );
        // With a node's group or image unknown, only a pause is certain (an unknown node cannot lift it).
        if unknown.is_empty() || wanted.wanted {
            pause.send_if_modified(|current| {
                let modified = current.as_ref() != Some(&wanted);
                if modified {
                    tracing::info!(paused = wanted.wanted, reason = %wanted.reason, "autoscaler pause request changed");
                    *current = Some(wanted);
                }
                modified
            });
        }
        if unknown.failed {
            // Answers wake this loop; a failed one is asked again after a while.
            let changed = changed.clone();
            tokio::spawn(async move {
                tokio::time::sleep(RETRY).await;
                changed.notify_one();
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(group: &str, desired: Option<&str>) -> GroupTarget {
        GroupTarget { group_id: group.into(), desired: desired.map(str::to_owned) }
    }

    fn node(name: &str, group: &str, image: &str) -> GroupNode {
        GroupNode { name: name.into(), group_id: group.into(), image: image.into(), reported: None }
    }

    #[test]
    fn a_group_node_on_another_image_pauses_the_autoscaler() {
        let targets = [target("a", Some("v2")), target("b", Some("v1"))];
        let pause = pause_for(&targets, &[node("a-1", "a", "v1"), node("b-1", "b", "v1")], 0);
        assert!(pause.wanted);
        assert!(pause.reason.contains("1 node(s)") && pause.reason.contains("a-1"), "{}", pause.reason);
        let pause = pause_for(&targets, &[node("a-1", "a", "v2"), node("b-1", "b", "v1")], 0);
        assert_eq!(pause, Pause::default());
    }

    /// During a rollback the groups' nodes are outdated against the image they go back to, and the round that
    /// starts the rollback keeps the pause.
    #[test]
    fn a_rollback_pauses_for_the_nodes_still_on_the_image_it_leaves() {
        let version = |image: &str, reason: &str| -> NodeVersion {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
                "metadata": {"name": "nv", "generation": 1}, "spec": {"image": image},
                "status": {"rollback": {"from": "v2", "to": "v1", "since": "2026-11-29T00:00:00Z"},
                           "conditions": [{"type": "Progressing", "status": "False", "reason": reason, "message": "m",
                                           "observedGeneration": 1, "lastTransitionTime": "2026-11-29T00:00:00Z"}]}
            }))
            .unwrap()
        };
        assert_eq!(desired_image(&version("v2", "RollbackStarted")).as_deref(), Some("v1"));
        assert_eq!(desired_image(&version("v3", "RollbackStarted")).as_deref(), Some("v3"), "a new image ends it");
        assert_eq!(desired_image(&version("v2", "RollbackFailed")), None, "a failed rollback asks no pause");
        let targets = [target("a", desired_image(&version("v2", "RollbackStarted")).as_deref())];
        assert!(pause_for(&targets, &[node("a-1", "a", "v2")], 0).wanted);
    }

    #[test]
    fn a_group_node_its_agent_updated_in_place_is_not_outdated() {
        let targets = [target("a", Some("v2"))];
        let updated = GroupNode { reported: Some("v2".into()), ..node("a-1", "a", "v1") };
        assert!(!pause_for(&targets, &[updated], 0).wanted);
        let behind = GroupNode { reported: Some("v1".into()), ..node("a-1", "a", "v1") };
        assert!(pause_for(&targets, &[behind], 0).wanted);
    }

    #[test]
    fn nodes_of_no_scaling_group_or_groups_without_a_target_do_not_count() {
        let targets = [target("a", None)];
        assert!(!pause_for(&targets, &[node("a-1", "a", "v1"), node("x-1", "x", "v0")], 0).wanted);
    }

    #[test]
    fn pending_nodes_pause_the_autoscaler() {
        let pause = pause_for(&[], &[], 2);
        assert!(pause.wanted);
        assert!(pause.reason.contains("2 PendingNode(s)"));
    }

    #[test]
    fn long_lists_are_cut() {
        let targets = [target("a", Some("v2"))];
        let nodes: Vec<GroupNode> = (0..8).map(|i| node(&format!("a-{i}"), "a", "v1")).collect();
        let pause = pause_for(&targets, &nodes, 0);
        assert!(pause.reason.contains("8 node(s)") && pause.reason.contains("and 3 more"), "{}", pause.reason);
    }

    /// The pause follows work, not drift: a NodeVersion the plan holds back (paused, outside its window, failure
    /// budget spent, invalid spec...) asks none; one that moves, waits only for the autoscaler, or whose current
    /// generation the plan has not judged yet, does.
    #[test]
    fn a_node_version_the_plan_holds_back_asks_no_pause() {
        let version = |generation: i64, progressing: Option<(&str, &str, i64)>| -> NodeVersion {
            let conditions: Vec<serde_json::Value> = progressing
                .into_iter()
                .map(|(status, reason, observed)| {
                    serde_json::json!({"type": "Progressing", "status": status, "reason": reason, "message": "m",
                        "lastTransitionTime": "2026-11-29T00:00:00Z", "observedGeneration": observed})
                })
                .collect();
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "nv", "generation": generation},
                "spec": {"image": "v2"},
                "status": {"conditions": conditions},
            }))
            .unwrap()
        };
        for reason in ["Paused", "OutsideMaintenanceWindow", "FailureBudgetExhausted", "InvalidSpec", "Complete"] {
            let held = held_back(&version(3, Some(("False", reason, 3))));
            assert!(held.as_deref().is_some_and(|h| h.starts_with(reason)), "{reason}: {held:?}");
        }
        assert_eq!(held_back(&version(3, Some(("True", "RollingOut", 3)))), None);
        for between in ["WaitingForAutoscaler", "WaitingForControlPlane", "NodesHeldBack", "UnavailableNodes"] {
            assert_eq!(held_back(&version(3, Some(("False", between, 3)))), None, "{between}: between two nodes");
        }
        assert_eq!(held_back(&version(4, Some(("False", "Paused", 3)))), None, "a new generation not judged yet");
        assert_eq!(held_back(&version(1, None)), None);
    }

    #[test]
    fn a_kubernetes_upgrade_under_way_pauses_the_autoscaler() {
        let version = |name: &str, active: bool| -> NodeVersion {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"image": "v1", "kubernetesClusterVersion": "v1.34.1"},
                "status": {"activeClusterVersionUpgrade": active},
            }))
            .unwrap()
        };
        let idle = pause_for(&[], &[], 0);
        assert!(!with_kubernetes_upgrades(idle.clone(), [&version("a", false)]).wanted);
        let pause = with_kubernetes_upgrades(idle, [&version("b", true), &version("a", false)]);
        assert!(pause.wanted);
        assert_eq!(pause.reason, "Kubernetes upgrade under way: b (Kubernetes v1.34.1)");
        let both = with_kubernetes_upgrades(pause_for(&[], &[], 1), [&version("b", true)]);
        assert_eq!(
            both.reason,
            "1 PendingNode(s) joining or leaving; Kubernetes upgrade under way: b (Kubernetes v1.34.1)"
        );
    }

    #[test]
    fn a_node_in_a_kubernetes_step_keeps_the_autoscaler_paused_whatever_the_conditions_say() {
        use std::collections::BTreeMap;
        let step = |intent: &str, extra: &[(&str, &str)]| {
            let mut a = BTreeMap::from([(keys::INTENT.to_owned(), intent.to_owned())]);
            a.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
            a
        };
        assert!(upgrading_kubernetes(&step("kubeadm-upgrade", &[])));
        assert!(upgrading_kubernetes(&step("kubeadm-upgrade", &[(keys::INTENT_KUBEADM, "node")])));
        assert!(!upgrading_kubernetes(&step("reboot", &[])));
        assert!(!upgrading_kubernetes(&BTreeMap::new()));
        // The plan holds its NodeVersion back between two nodes (no pause from it): the node upgrading keeps it.
        let pause = with_nodes_upgrading(pause_for(&[], &[], 0), vec!["w2", "cp1"]);
        assert!(pause.wanted);
        assert_eq!(pause.reason, "Kubernetes upgrade of node(s) in progress: cp1, w2");
        assert!(!with_nodes_upgrading(pause_for(&[], &[], 0), Vec::new()).wanted);
        let both = with_nodes_upgrading(pause_for(&[], &[], 1), vec!["w2"]);
        assert_eq!(both.reason, "1 PendingNode(s) joining or leaving; Kubernetes upgrade of node(s) in progress: w2");
    }
}
