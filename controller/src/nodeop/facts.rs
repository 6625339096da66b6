//! What a NodeOp's decision reads of the cluster: each node's facts, and the drain it asks for.

use super::decide::{JobState, NodeFacts};
use crate::drain::DrainSettings;
use crate::nodes::SlimNode;
use crate::policy::NodeSelector;
use shared::crd::DrainOptions;
use shared::crd::nodeop::NodeOp;
use shared::protocol::{AgentReport, ControllerAnnotations, keys};
use std::collections::BTreeMap;

/// The drain options of a NodeOp as the shared drain takes them.
/// The drain a NodeOp asks for: a negative `gracePeriodSeconds` (or none) leaves each pod its own, as
/// `kubectl drain --grace-period` does; `ignoreDaemonSets` defaults to true, as in the Kairos operator.
pub(super) fn drain_options(op: &NodeOp) -> DrainSettings {
    let drain = op.spec.drain_options.clone().unwrap_or_default();
    let options = DrainOptions {
        delete_empty_dir_data: drain.delete_empty_dir_data.unwrap_or(false),
        force: drain.force.unwrap_or(false),
    };
    DrainSettings {
        options,
        grace_period_seconds: drain.grace_period_seconds.filter(|g| *g >= 0).map(i64::from),
        ignore_daemon_sets: drain.ignore_daemon_sets.unwrap_or(true),
    }
}

/// A node as a NodeOp's decision sees it.
pub(super) fn facts_of(
    node: &SlimNode,
    selector: Option<&NodeSelector>,
    drain: crate::policy::DrainProgress,
    job: Option<JobState>,
) -> NodeFacts {
    let empty = BTreeMap::new();
    let annotations = node.metadata.annotations.as_ref().unwrap_or(&empty);
    let labels = node.metadata.labels.as_ref();
    let agent = AgentReport::parse(annotations).ok().filter(|a| a.os_image.is_some() && a.boot_id.is_some());
    NodeFacts {
        name: node.name().to_owned(),
        control_plane: labels.is_some_and(|l| l.contains_key(crate::nodes::CONTROL_PLANE_LABEL)),
        selected: selector.is_none_or(|s| s.matches(labels)),
        ready: node.ready(),
        unschedulable: node.unschedulable(),
        kubelet_boot_id: node.status.node_info.as_ref().map(|i| i.boot_id.clone()).filter(|b| !b.is_empty()),
        mark: annotations.get(keys::NODE_OPERATION).cloned(),
        controller: ControllerAnnotations::read(annotations).ok(),
        agent,
        drain,
        job,
        preflight: None,
        zone: labels.and_then(|l| l.get(crate::nodes::ZONE_LABEL)).filter(|z| !z.is_empty()).cloned(),
        do_not_disrupt: crate::do_not_disrupt::marked(Some(annotations)).map(crate::do_not_disrupt::node_message),
    }
}
