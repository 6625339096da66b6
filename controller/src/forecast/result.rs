//! What a forecast says: each rollout's nodes in order with their waves and times, how it ends, the maintenance
//! windows it needs; and the waves of an observed rollout by the same definition ([`waves_of`]).

use crate::policy::ClusterPlan;
use jiff::Timestamp;
use serde::Serialize;
use std::collections::BTreeMap;

/// What part of a rollout a node's forecast is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// The node's Kubernetes upgrade (a drain, where the policy drains, and kubeadm).
    Kubernetes,
    /// The node's image (in place, or by replacement).
    Image,
}

/// One node's forecast.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeForecast {
    pub node: String,
    pub phase: Phase,
    /// 1 for the nodes started first; see the module documentation.
    pub wave: u32,
    /// Seconds from the start of the forecast until the node starts, and until it frees its slot.
    pub start_seconds: f64,
    pub finish_seconds: Option<f64>,
    /// Whether the node is replaced by a new instance rather than updated in place.
    pub replaced: bool,
}

/// How a forecast rollout ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state")]
pub enum Ending {
    /// Every node it selects runs the target.
    Complete,
    /// Nothing can move any more: why (the rollout's hold, or the nodes held back), and the nodes left.
    #[serde(rename_all = "camelCase")]
    Stuck { reason: String, message: String, nodes_left: Vec<String> },
    /// Still moving at the horizon.
    Unfinished,
}

/// The forecast of one rollout.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutForecast {
    pub name: String,
    pub target: Option<String>,
    /// The Kubernetes version the rollout upgrades to first, when it asks for a valid one.
    pub kubernetes_target: Option<String>,
    /// Nodes in the order they start.
    pub nodes: Vec<NodeForecast>,
    /// Seconds until the last node frees its slot (None when the rollout does not complete).
    pub duration_seconds: Option<f64>,
    pub ending: Ending,
    /// Nodes the rollout selects that already run the target.
    pub up_to_date: u32,
    /// With maintenance windows or exclusions: how many it needs, and when it ends.
    pub windows: Option<WindowsNeeded>,
}

/// The maintenance windows a rollout needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowsNeeded {
    /// How many separate open periods (windows open one after the other, or overlapping, count as one) its nodes
    /// start in.
    pub periods: u32,
    /// When its last node is predicted to finish.
    pub ends_at: Timestamp,
}

impl RolloutForecast {
    /// The waves, each the nodes of that wave in the order they start.
    pub fn waves(&self) -> Vec<Vec<String>> {
        let mut waves: Vec<Vec<String>> = Vec::new();
        for n in &self.nodes {
            let i = n.wave.saturating_sub(1) as usize;
            if waves.len() <= i {
                waves.resize(i + 1, Vec::new());
            }
            waves[i].push(n.node.clone());
        }
        waves
    }
}

/// The forecast of every rollout, and the first plan (what the controller would do now).
#[derive(Debug, Clone)]
pub struct Forecast {
    pub rollouts: Vec<RolloutForecast>,
    pub first: ClusterPlan,
}

/// The waves of an observed rollout: `starts` and `finishes` are when each node started and freed
/// its slot; the same definition as the forecast's.
pub fn waves_of(starts: &[(String, Timestamp)], finishes: &BTreeMap<String, Timestamp>) -> BTreeMap<String, u32> {
    let mut waves: BTreeMap<String, u32> = BTreeMap::new();
    let mut ordered = starts.to_vec();
    ordered.sort_by_key(|(_, t)| *t);
    for (node, at) in &ordered {
        let before =
            waves.iter().filter(|(n, _)| finishes.get(*n).is_some_and(|f| f <= at)).map(|(_, w)| *w).max().unwrap_or(0);
        waves.insert(node.clone(), before + 1);
    }
    waves
}
