//! What `update-operator plan` reports: each rollout's forecast with the durations it assumed, and
//! every blocker; as text for people and as JSON for scripts.

use super::blockers::{self, Blocker};
use super::durations::{Durations, Source};
use super::membership::Membership;
use super::snapshot::Snapshot;
use super::{Ending, RolloutForecast, forecast};
use jiff::{SignedDuration, Timestamp};
use serde::Serialize;
use shared::crd::NodeVersion;
use std::fmt::Write as _;

/// The step durations of a forecast, in seconds, and where each comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepAssumption {
    pub step: &'static str,
    pub seconds: f64,
    pub source: Source,
}

/// The report of one `plan`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// When the cluster was read.
    pub at: Timestamp,
    pub rollouts: Vec<RolloutForecast>,
    pub durations: Vec<StepAssumption>,
    /// What the forecast takes for granted besides the durations.
    pub assumptions: Vec<String>,
    pub blockers: Vec<Blocker>,
}

/// Durations given on the command line.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flags {
    pub stage: Option<SignedDuration>,
    pub drain: Option<SignedDuration>,
    pub reboot: Option<SignedDuration>,
    pub kubeadm_upgrade: Option<SignedDuration>,
    /// A replaced node until its drain starts (its new instance's creation, join and soak).
    pub replace: Option<SignedDuration>,
    /// A replaced node's drain and the deletion of its Node.
    pub retire: Option<SignedDuration>,
    /// The deletion of a replaced node's instance.
    pub release: Option<SignedDuration>,
}

impl Report {
    /// Forecasts every NodeVersion of `snapshot` (with `version` in place of the one of its name, or
    /// added) at `now`; `own_node` is the node the controller runs on (updated last).
    pub fn build(
        snapshot: Snapshot,
        version: Option<NodeVersion>,
        flags: Flags,
        own_node: Option<&str>,
        now: Timestamp,
    ) -> Report {
        let preferred = version.as_ref().and_then(|v| v.metadata.name.clone());
        let snapshot = match version {
            Some(v) => snapshot.with_version(v, now),
            None => snapshot,
        };
        let statuses: Vec<(&str, &shared::crd::NodeVersionStatus)> =
            snapshot.versions.iter().filter_map(|v| Some((v.metadata.name.as_deref()?, v.status.as_ref()?))).collect();
        let durations = Durations::measured(statuses.iter().copied(), preferred.as_deref())
            .with_flags(flags.stage, flags.drain, flags.reboot, flags.kubeadm_upgrade)
            .with_replacement_flags(flags.replace, flags.retire, flags.release);
        let (rollouts, mut views) = snapshot.views(now);
        let membership = snapshot.membership();
        for view in &mut views {
            view.group = membership.members.get(&view.name).cloned();
        }
        let forecast = forecast(&views, &rollouts, &membership.fleet, own_node, now, &durations);
        let refs: Vec<&crate::policy::NodeView> = views.iter().collect();
        let sizes = blockers::group_sizes(&snapshot.scaling_groups, &refs);
        let blockers = blockers::find(&refs, &rollouts, &forecast.first, &snapshot.workloads, &sizes);
        let unchecked = snapshot.kubernetes_unchecked();
        let mut assumptions = vec![
            "every node takes the same time per step; the next node starts in the round that verifies the last"
                .to_owned(),
        ];
        assumptions.extend(group_assumptions(&snapshot, &membership));
        if !snapshot.workloads.budgets.is_empty() {
            // PDB-aware order (`crate::budget_order`) reorders on what a budget allows at a node's turn, which a
            // forecast from the cluster at rest cannot know.
            assumptions.push(
                "every PodDisruptionBudget allows each node's drain at its turn (a node whose budget allows no \
                 disruption then goes after the others of its zone: the order changes, not the number of waves)"
                    .to_owned(),
            );
        }
        if !unchecked.is_empty() {
            assumptions.push(format!(
                "the Kubernetes upgrade of {} was not validated (components ConfigMap, API server version): only \
                 the image is forecast",
                unchecked.join(", ")
            ));
        }
        // The checkpoints a node waits at: the forecast takes the user's hook as answering at once.
        for rollout in &rollouts {
            let Some(spec) = rollout.spec.acting() else { continue };
            for (phase, names) in
                [("before its reboot", &spec.policy.before_reboot), ("after it", &spec.policy.after_reboot)]
            {
                if !names.is_empty() {
                    assumptions.push(format!(
                        "NodeVersion {}: each node waits {phase} until your hook sets {} to \"true\" on it (at most \
                         checkpointTimeout, {}s); the forecast takes the hook as answering at once",
                        rollout.name,
                        names.join(", "),
                        spec.policy.checkpoint_timeout.as_secs()
                    ));
                }
            }
        }
        // With onFailure: Rollback, what a spent failure budget would do, or the rollback under way.
        for (i, rollout) in rollouts.iter().enumerate() {
            let uniform = crate::policy::rollback::uniform(
                views.iter().filter(|v| v.selected_by.contains(&i)).map(crate::policy::rollback::node_image),
            );
            assumptions.extend(crate::policy::rollback::forecast_note(rollout, uniform.as_deref()));
        }
        let upgrades_kubernetes = rollouts
            .iter()
            .any(|r| matches!(r.kubernetes, Some(crate::policy::kubernetes::KubernetesSpec::Upgrade(_))));
        let step = |step, d: SignedDuration, source: &Source| StepAssumption {
            step,
            seconds: d.as_secs_f64(),
            source: source.clone(),
        };
        let mut steps = vec![
            step("stage", durations.stage, &durations.stage_source),
            step("drain", durations.drain, &durations.drain_source),
            step("reboot", durations.reboot, &durations.reboot_source),
        ];
        if upgrades_kubernetes {
            steps.push(step(super::durations::FETCH_STEP, durations.fetch, &durations.fetch_source));
            steps.push(step(
                super::durations::KUBEADM_UPGRADE,
                durations.kubeadm_upgrade,
                &durations.kubeadm_upgrade_source,
            ));
        }
        if forecast.rollouts.iter().any(|r| r.nodes.iter().any(|n| n.replaced)) {
            steps.push(step(super::durations::REPLACE, durations.replace, &durations.replace_source));
            steps.push(step(super::durations::RETIRE, durations.retire, &durations.retire_source));
            steps.push(step(super::durations::RELEASE, durations.release, &durations.release_source));
        }
        Report { at: now, rollouts: forecast.rollouts, durations: steps, assumptions, blockers }
    }

    /// Whether something would block: a blocker, or a rollout that does not complete.
    pub fn blocked(&self) -> bool {
        !self.blockers.is_empty() || self.rollouts.iter().any(|r| r.ending != Ending::Complete)
    }

    /// The report for people.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if self.rollouts.is_empty() {
            out.push_str("no NodeVersion: nothing to roll out (pass -f nodeversion.yaml to plan one)\n");
        }
        for r in &self.rollouts {
            let image = r.target.as_deref().unwrap_or("(no valid spec)");
            let target = match &r.kubernetes_target {
                Some(version) => format!("Kubernetes {version}, then {image}"),
                None => image.to_owned(),
            };
            let _ = writeln!(
                out,
                "NodeVersion {} -> {target}: {} node(s) to update, {} up to date",
                r.name,
                r.nodes.iter().map(|n| &n.node).collect::<std::collections::BTreeSet<_>>().len(),
                r.up_to_date
            );
            let finishes = |wave: usize| {
                r.nodes.iter().filter(|n| n.wave as usize == wave).filter_map(|n| n.finish_seconds).fold(0.0, f64::max)
            };
            for (i, wave) in r.waves().iter().enumerate() {
                let first = r.nodes.iter().find(|n| n.wave == i as u32 + 1);
                let start = first.map_or(0.0, |n| n.start_seconds);
                let phase = if first.is_some_and(|n| n.phase == super::Phase::Kubernetes) { "kubeadm " } else { "" };
                let _ = writeln!(
                    out,
                    "  wave {:>2}  t+{:<8} {phase}{}  (until t+{})",
                    i + 1,
                    human(start),
                    wave.join(", "),
                    human(finishes(i + 1))
                );
            }
            match (&r.ending, r.duration_seconds) {
                (Ending::Complete, Some(d)) => {
                    let _ = writeln!(out, "  predicted duration: {}", human(d));
                    if let Some(w) = r.windows {
                        let _ =
                            writeln!(out, "  maintenance windows needed: {}; it would end at {}", w.periods, w.ends_at);
                    }
                }
                (Ending::Complete, None) => out.push_str("  nothing to do\n"),
                (Ending::Stuck { reason, message, nodes_left }, _) => {
                    let _ = writeln!(
                        out,
                        "  does not complete: {reason}: {message}\n  left outdated: {}",
                        nodes_left.join(", ")
                    );
                }
                (Ending::Unfinished, _) => {
                    let _ = writeln!(
                        out,
                        "  still moving {} ahead: the forecast stops there",
                        human(super::HORIZON.as_secs_f64())
                    );
                }
            }
        }
        out.push_str("assuming per node:");
        for d in &self.durations {
            let from = match &d.source {
                Source::Flag => "flag".to_owned(),
                Source::Measured { node_version, samples } => {
                    format!("measured, {samples} sample(s) of {node_version}")
                }
                Source::Default => "default".to_owned(),
            };
            let _ = write!(out, " {} {} ({from});", d.step, human(d.seconds));
        }
        out.push('\n');
        for a in &self.assumptions {
            let _ = writeln!(out, "  and: {a}");
        }
        if self.blockers.is_empty() {
            out.push_str("no blockers found\n");
        } else {
            let _ = writeln!(out, "{} blocker(s):", self.blockers.len());
            for b in &self.blockers {
                let _ = writeln!(out, "  [{}] {}: {}\n      fix: {}", b.node_version, b.object, b.message, b.fix);
            }
        }
        out
    }
}

/// What the forecast assumes of the scaling groups: how it knew the members, the groups' images, and the nodes
/// it could not place.
fn group_assumptions(snapshot: &Snapshot, membership: &Membership) -> Vec<String> {
    if snapshot.scaling_groups.is_empty() {
        return vec!["no ScalingGroup: every node is updated in place".to_owned()];
    }
    let how = if snapshot.cloud.is_some() {
        "as the cloud told"
    } else {
        "from their provider IDs (the cloud was not asked: pass --cloud-provider)"
    };
    let mut assumptions = vec![format!(
        "nodes of a ScalingGroup ({how}) are replaced by a new instance each, within maxSurge, the controller \
         running with its cloud; each group's new instances get the image of the NodeVersion its spec.nodeImage names"
    )];
    if !membership.unclassified.is_empty() {
        assumptions.extend(unclassified(snapshot, membership));
    }
    if !membership.image_assumed.is_empty() {
        assumptions.push(format!(
            "the image of {} is not known (no agent report, the cloud was not asked): taken as outdated, so replaced",
            membership.image_assumed.join(", ")
        ));
    }
    assumptions
}

/// Why the nodes a forecast could not place are not known members: the cloud was not asked, or what it answered
/// (nodes with the same error in one line).
fn unclassified(snapshot: &Snapshot, membership: &Membership) -> Vec<String> {
    let Some(answers) = &snapshot.cloud else {
        return vec![format!(
            "the scaling group of {} is not known (the provider ID does not name it and the cloud was not asked: pass \
             --cloud-provider): forecast in place",
            membership.unclassified.join(", ")
        )];
    };
    let mut by_error: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for name in &membership.unclassified {
        let id = snapshot.nodes.iter().find(|n| n.name() == name).and_then(|n| n.spec.provider_id.as_deref());
        let error = match id.and_then(|id| answers.get(id)) {
            Some(Err(error)) => error.as_str(),
            _ => "no answer",
        };
        by_error.entry(error).or_default().push(name);
    }
    by_error
        .into_iter()
        .map(|(error, nodes)| {
            format!(
                "the cloud did not tell the scaling group and image of {} ({error}): forecast in place, which is wrong \
                 for a node of a ScalingGroup",
                nodes.join(", ")
            )
        })
        .collect()
}

/// Seconds as people read them: `42.5s`, `3m05s`, `2h10m`.
fn human(seconds: f64) -> String {
    let s = seconds.max(0.0);
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{}h{:02}m", (s / 3600.0) as u64, ((s % 3600.0) / 60.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::Phase;
    use crate::policy::kubernetes::{KubernetesSpec, KubernetesTarget};
    use serde_json::json;

    const HASH: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";

    fn slim(name: &str, control_plane: bool) -> crate::nodes::SlimNode {
        let mut labels = json!({"update.edgeless.systems/managed": "true"});
        if control_plane {
            labels["node-role.kubernetes.io/control-plane"] = json!("");
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels,
                "annotations": {"update.edgeless.systems/os-image": "v1", "update.edgeless.systems/boot-id": "b",
                                "update.edgeless.systems/state": "idle"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"bootID": "b", "kubeletVersion": "v1.33.0"}}
        }))
        .unwrap()
    }

    #[test]
    fn the_checkpoints_a_node_waits_at_are_said_with_their_annotations() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let version: NodeVersion = serde_json::from_value(json!({
            "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
            "metadata": {"name": "nv"},
            "spec": {"image": "v2", "rollout": {"beforeReboot": ["ceph.example.com/noout-set"],
                                                "checkpointTimeout": "10m"}}
        }))
        .unwrap();
        let snapshot = Snapshot { nodes: vec![slim("w-0", false)], ..Default::default() };
        let report = Report::build(snapshot.clone(), Some(version), Flags::default(), None, now);
        let said: Vec<&String> = report.assumptions.iter().filter(|a| a.contains("your hook")).collect();
        assert_eq!(said.len(), 1, "{:?}", report.assumptions);
        assert!(
            said[0].starts_with(
                "NodeVersion nv: each node waits before its reboot until your hook sets \
                                     ceph.example.com/noout-set to \"true\""
            ),
            "{}",
            said[0]
        );
        assert!(said[0].contains("600s"), "{}", said[0]);
        // Without checkpoints, nothing is said.
        let plain: NodeVersion = serde_json::from_value(json!({
            "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
            "metadata": {"name": "nv"}, "spec": {"image": "v2"}
        }))
        .unwrap();
        let report = Report::build(snapshot, Some(plain), Flags::default(), None, now);
        assert!(!report.assumptions.iter().any(|a| a.contains("your hook")), "{:?}", report.assumptions);
    }

    #[test]
    fn a_rollout_that_would_roll_back_on_failure_says_so_and_a_rollback_under_way_too() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let version = |rollout: serde_json::Value, status: serde_json::Value| -> NodeVersion {
            serde_json::from_value(json!({
                "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
                "metadata": {"name": "nv"}, "spec": {"image": "v2", "rollout": rollout}, "status": status
            }))
            .unwrap()
        };
        let snapshot = Snapshot { nodes: vec![slim("cp-0", true), slim("w-0", false)], ..Default::default() };
        let said = |v: NodeVersion| {
            let report = Report::build(snapshot.clone(), Some(v), Flags::default(), None, now);
            report.assumptions.into_iter().filter(|a| a.contains("Rollback") || a.contains("rolling back")).collect()
        };
        // Over a fleet on v1 (what the controller records first): back to v1.
        let rollback = json!({"onFailure": "Rollback", "failureBudget": 2});
        let notes: Vec<String> = said(version(rollback.clone(), json!(null)));
        assert_eq!(notes.len(), 1, "{notes:?}");
        let expected = "NodeVersion nv: onFailure is Rollback: once 2 node(s) fail to update to v2, the nodes it \
                        updated go back to v1";
        assert!(notes[0].starts_with(expected), "{}", notes[0]);
        // Stop (the default): nothing said.
        assert_eq!(said(version(json!({}), json!(null))), Vec::<String>::new());
        // Under way: the forecast is the rollback's.
        let status = json!({"rollback": {"from": "v2", "to": "v1", "since": "2026-11-29T00:00:00Z"}});
        let notes: Vec<String> = said(version(rollback, status));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("NodeVersion nv is rolling back from v2 to v1"), "{}", notes[0]);
    }

    #[test]
    fn a_validated_kubernetes_upgrade_is_forecast_with_its_step_and_an_unvalidated_one_is_said() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let version: NodeVersion = serde_json::from_value(json!({
            "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
            "metadata": {"name": "nv"},
            "spec": {"image": "v2", "kubernetesClusterVersion": "v1.34.0", "kubernetesComponentsReference": "k8s"}
        }))
        .unwrap();
        let snapshot = Snapshot { nodes: vec![slim("cp-0", true), slim("w-0", false)], ..Default::default() };
        let report = Report::build(snapshot.clone(), Some(version.clone()), Flags::default(), None, now);
        let steps: Vec<&str> = report.durations.iter().map(|d| d.step).collect();
        assert_eq!(steps, vec!["stage", "drain", "reboot"]);
        assert!(report.assumptions.iter().any(|a| a.contains("Kubernetes upgrade of nv was not validated")));
        assert!(report.rollouts[0].nodes.iter().all(|n| n.phase == Phase::Image));

        let target = KubernetesTarget {
            version: "v1.34.0".parse().unwrap(),
            components: "k8s".into(),
            hash: HASH.into(),
            api_server: "v1.33.0".parse().unwrap(),
        };
        let mut checked = snapshot;
        checked.kubernetes.insert("nv".into(), KubernetesSpec::Upgrade(target));
        let flags = Flags { kubeadm_upgrade: Some(SignedDuration::from_secs(60)), ..Flags::default() };
        let report = Report::build(checked, Some(version), flags, None, now);
        let last = report.durations.last().unwrap();
        assert_eq!((last.step, last.seconds, &last.source), ("kubeadm-upgrade", 60.0, &Source::Flag));
        assert!(!report.assumptions.iter().any(|a| a.contains("not validated")), "{:?}", report.assumptions);
        let r = &report.rollouts[0];
        assert_eq!(r.ending, Ending::Complete, "{r:#?}");
        let kubernetes: Vec<&str> =
            r.nodes.iter().filter(|n| n.phase == Phase::Kubernetes).map(|n| n.node.as_str()).collect();
        assert_eq!(kubernetes, vec!["cp-0", "w-0"]);
        // Both nodes' components fetched ahead (1m by default), the control-plane node's drain (2m) and kubeadm
        // apply (60 s), the worker's drain (2m) and kubeadm (60 s), then each node's image (8m), the second one
        // staged (3m) while the first drains and reboots.
        assert_eq!(r.duration_seconds, Some(60.0 + 180.0 + 180.0 + 2.0 * 480.0 - 180.0));
        let text = report.text();
        assert!(text.contains("NodeVersion nv -> Kubernetes v1.34.0, then v2: 2 node(s) to update"), "{text}");
        assert!(text.contains("wave  2  t+4m00s    kubeadm w-0  (until t+7m00s)"), "{text}");
        // A node is listed from its turn; it was staged ahead (from t+7m).
        assert!(text.contains("wave  3  t+10m00s   cp-0  (until t+15m00s)"), "{text}");
    }

    #[test]
    fn nodes_the_cloud_could_not_place_are_said_with_its_error_and_without_the_cloud_how_to_ask_it() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let aws = |name: &str, instance: &str| {
            let mut node = slim(name, false);
            node.spec.provider_id = Some(format!("aws:///us-east-1a/{instance}"));
            node
        };
        let group: shared::crd::ScalingGroup = serde_json::from_value(json!({
            "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "ScalingGroup", "metadata": {"name": "workers"},
            "spec": {"nodeImage": "nv", "groupId": "workers", "autoscaling": false},
        }))
        .unwrap();
        let snapshot = Snapshot {
            nodes: vec![
                aws("a", "i-0000000000000000a"),
                aws("b", "i-0000000000000000b"),
                aws("c", "i-0000000000000000c"),
            ],
            scaling_groups: vec![group],
            ..Default::default()
        };
        let version: NodeVersion = serde_json::from_value(json!({
            "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
            "metadata": {"name": "nv"}, "spec": {"image": "v2"}
        }))
        .unwrap();
        let report = Report::build(snapshot.clone(), Some(version.clone()), Flags::default(), None, now);
        let unplaced: Vec<&String> = report.assumptions.iter().filter(|a| a.contains("forecast in place")).collect();
        assert_eq!(unplaced.len(), 1, "{:?}", report.assumptions);
        assert!(unplaced[0].contains("a, b, c") && unplaced[0].contains("pass --cloud-provider"), "{unplaced:?}");

        let denied = "permission denied: DescribeAutoScalingInstances";
        let mut asked = snapshot;
        asked.cloud = Some(
            [
                ("aws:///us-east-1a/i-0000000000000000a".to_owned(), Err(denied.to_owned())),
                ("aws:///us-east-1a/i-0000000000000000b".to_owned(), Ok(Some(("workers".to_owned(), "v1".to_owned())))),
                ("aws:///us-east-1a/i-0000000000000000c".to_owned(), Err(denied.to_owned())),
            ]
            .into_iter()
            .collect(),
        );
        let report = Report::build(asked, Some(version), Flags::default(), None, now);
        let unplaced: Vec<&String> = report.assumptions.iter().filter(|a| a.contains("forecast in place")).collect();
        assert_eq!(unplaced.len(), 1, "{:?}", report.assumptions);
        assert!(unplaced[0].contains("of a, c (permission denied: DescribeAutoScalingInstances)"), "{unplaced:?}");
        let replaced: Vec<(&str, bool)> =
            report.rollouts[0].nodes.iter().map(|n| (n.node.as_str(), n.replaced)).collect();
        assert!(replaced.contains(&("b", true)) && replaced.contains(&("a", false)), "{replaced:?}");
    }

    #[test]
    fn durations_read_as_people_read_them() {
        assert_eq!(human(42.46), "42.5s");
        assert_eq!(human(185.0), "3m05s");
        assert_eq!(human(7_800.0), "2h10m");
    }
}
