//! Watches a cluster through the API, as a user would, and checks the rollout's safety invariants
//! at every event: never more than `maxUnavailable` nodes disrupted when the controller starts
//! one, never two control-plane nodes disrupted, no node holding an intent the protocol cannot
//! read, no PodDisruptionBudget below its desired healthy count, and no kubelet newer than the API
//! server (its `/version`, read after every Node event that carries a kubelet version). It also records each node's
//! steps with their times, for the demo's display and summary, and for tests' negative checks
//! (what never happened, over the whole run rather than at one instant).
//!
//! A node counts as disrupted as the policy counts it against `maxUnavailable`: cordoned,
//! NotReady, marked by a NodeOp, in the `drain`, `reboot`, `kubeadm-upgrade` or `replace` step, or verified (`done`)
//! less than the soak time ago (a node in the `stage` step is staged ahead of its turn, not disrupted: with
//! [`Limits::max_staging`] the observer checks that no more are staged at once, and that the controller never
//! cordons one before its turn); a node that joins as a new instance (its joining PendingNode has not reached
//! its goal) is extra capacity, not disrupted, and so is a heir that joined but is not paired with its donor yet
//! (no `donor` annotation: its donor still serves and holds the replacement's slot; the policy upgrades such a heir's
//! Kubernetes then). With [`Limits::surge`] it also checks replacements at every
//! event: at most `maxSurge` extra instances, never a control-plane and a worker replacement at once, and never
//! a replaced node deleted while its heir is not Ready; and always: never an instance of a replacement deleted
//! (a leaving PendingNode) while its node is Ready and schedulable. Nodes can turn NotReady or be cordoned
//! without the controller, so the budget is checked when the controller starts a node (its turn: a node enters
//! `replace`, `drain`, or `kubeadm-upgrade` without coming from a drain; or a NodeOp marks it): that is the moment
//! the policy answers for.

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};
use parking_lot::Mutex;
use shared::protocol::{ControllerAnnotations, Step, keys};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The rules the observer holds the cluster to.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Nodes that may be disrupted at once.
    pub max_disrupted: usize,
    /// Check PDBs (healthy pods ≥ desiredHealthy at every pod event).
    pub check_pdbs: bool,
    /// The rollout's `soakTime`: a node verified less than this long ago still counts.
    pub soak: Duration,
    /// Every intent on a node must be readable by the protocol (off for tests that write garbage
    /// on purpose).
    pub readable_intents: bool,
    /// Replacements: at most this many instances beyond `baseline` (the instances of the scaling groups at the
    /// start), counting the Nodes with a provider ID and the PendingNodes' instances without a Node.
    pub surge: Option<Surge>,
    /// Nodes that may be in the `stage` step at once (`maxStaging`), checked when a node enters it.
    pub max_staging: Option<usize>,
}

/// The instance bound of replacements.
#[derive(Debug, Clone, Copy)]
pub struct Surge {
    pub baseline: usize,
    pub max_surge: usize,
}

impl Limits {
    /// At most `max_disrupted` nodes disrupted, no soak time, readable intents, PDBs checked if
    /// `check_pdbs`.
    pub fn new(max_disrupted: usize, check_pdbs: bool) -> Limits {
        Limits {
            max_disrupted,
            check_pdbs,
            soak: Duration::ZERO,
            readable_intents: true,
            surge: None,
            max_staging: None,
        }
    }
}

/// A node as last seen.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    pub control_plane: bool,
    pub cordoned: bool,
    pub ready: bool,
    pub step: Option<Step>,
    /// The controller cordoned the node (its `cordoned-by` record).
    pub cordoned_by_us: bool,
    pub target: Option<String>,
    /// When the controller wrote the intent.
    pub since: Option<Timestamp>,
    pub os_image: Option<String>,
    pub agent_state: Option<String>,
    /// `spec.providerID`: the node is a cloud instance.
    pub provider_id: Option<String>,
    /// The `heir` annotation (a donor being drained) and the `donor` annotation (a heir).
    pub heir: Option<String>,
    pub donor: Option<String>,
    /// `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: Option<String>,
    /// A NodeOp works on the node (its mark, `keys::NODE_OPERATION`): it may cordon, drain or reboot it at any
    /// moment, so the policy counts it out.
    pub operation: bool,
}

impl NodeState {
    /// Cordoned, NotReady, in a step that drains or reboots it, or soaking (verified less than `soak` before
    /// `now`): as the policy counts nodes against `maxUnavailable`. Staging ahead does not disrupt a node.
    pub fn disrupted(&self, soak: Duration, now: Timestamp) -> bool {
        let soaking = self.step == Some(Step::Done)
            && !soak.is_zero()
            && self.since.and_then(|s| s.checked_add(soak).ok()).is_some_and(|end| now < end);
        self.cordoned || !self.ready || self.operation || soaking || self.step.is_some_and(Step::disrupts)
    }
}

/// Everything observed so far.
#[derive(Debug, Default)]
pub struct Observed {
    pub nodes: BTreeMap<String, NodeState>,
    /// Each node's steps, in order, with the time the observer saw them.
    pub timeline: BTreeMap<String, Vec<(Timestamp, Step)>>,
    pub violations: Vec<String>,
    /// Nodes seen holding an intent the protocol cannot read (whether or not that is a violation).
    pub unreadable: std::collections::BTreeSet<String>,
    pub max_disrupted_seen: usize,
    /// The disrupted nodes, each with why it counts, when `max_disrupted_seen` was first reached: what a test
    /// failing on the maximum prints.
    pub max_disrupted_nodes: Vec<String>,
    pub max_control_plane_disrupted_seen: usize,
    /// The most nodes seen in the `stage` step at once.
    pub max_staging_seen: usize,
    pub events: u64,
    /// The PendingNodes by name: node name, joining and not joined yet, donor, joining for a donor (a heir's).
    pending: BTreeMap<String, (String, bool, Option<String>, bool)>,
    /// Whether each node ever seen is a control-plane node (donors are remembered after their Node is gone).
    roles: BTreeMap<String, bool>,
    pub max_surge_seen: usize,
    pods: HashMap<(String, String), Pod>,
    pdbs: HashMap<(String, String), PodDisruptionBudget>,
    /// The initial lists of pods and PDBs are complete; before that, counts are partial.
    pods_synced: bool,
    pdbs_synced: bool,
}

/// A running observer.
pub struct Observer {
    state: Arc<Mutex<Observed>>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Observer {
    pub fn start(client: Client, limits: Limits) -> Observer {
        let state = Arc::new(Mutex::new(Observed::default()));
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(client, limits, state.clone(), stop.clone()));
        Observer { state, stop, task }
    }

    /// Reads what was observed so far.
    pub fn with<R>(&self, read: impl FnOnce(&Observed) -> R) -> R {
        read(&self.state.lock())
    }

    pub fn violations(&self) -> Vec<String> {
        self.with(|o| o.violations.clone())
    }

    /// Stops watching and returns everything observed.
    pub async fn stop(self) -> Observed {
        self.stop.cancel();
        let _ = self.task.await;
        std::mem::take(&mut *self.state.lock())
    }
}

enum Seen {
    Node(Box<Event<Node>>),
    Pending(Box<Event<shared::crd::PendingNode>>),
    Pod(Box<Event<Pod>>),
    Pdb(Box<Event<PodDisruptionBudget>>),
}

async fn run(client: Client, limits: Limits, state: Arc<Mutex<Observed>>, stop: CancellationToken) {
    let config = watcher::Config::default();
    let nodes = watcher(Api::<Node>::all(client.clone()), config.clone())
        .default_backoff()
        .map(|e| e.map(|e| Seen::Node(Box::new(e))));
    let pods = watcher(Api::<Pod>::all(client.clone()), config.clone())
        .default_backoff()
        .map(|e| e.map(|e| Seen::Pod(Box::new(e))));
    let pdbs = watcher(Api::<PodDisruptionBudget>::all(client.clone()), config.clone())
        .default_backoff()
        .map(|e| e.map(|e| Seen::Pdb(Box::new(e))));
    let pending = watcher(Api::<shared::crd::PendingNode>::all(client.clone()), config)
        .default_backoff()
        .map(|e| e.map(|e| Seen::Pending(Box::new(e))));
    let nodes = futures::stream::select(nodes, pending);
    let mut all = std::pin::pin!(futures::stream::select(futures::stream::select(nodes, pods), pdbs));
    loop {
        let event = tokio::select! {
            () = stop.cancelled() => return,
            event = all.next() => event,
        };
        let Some(Ok(event)) = event else { continue };
        // The API server's version after the event: a kubelet newer than it was newer at the event too.
        let kubelets = matches!(&event, Seen::Node(e) if matches!(&**e, Event::Apply(n) | Event::InitApply(n)
            if n.status.as_ref().and_then(|s| s.node_info.as_ref()).is_some()));
        let api_server =
            if kubelets { client.apiserver_version().await.ok().map(|info| info.git_version) } else { None };
        let mut o = state.lock();
        o.events += 1;
        match event {
            Seen::Node(e) => {
                let mut started = false;
                for (node, deleted) in changes(*e) {
                    if deleted {
                        o.node_deleted(&node.name_any());
                    } else {
                        started |= o.observe_node(&node, &limits);
                    }
                }
                o.check_nodes(&limits, started);
                if let Some(api_server) = api_server {
                    o.check_kubelets(&api_server);
                }
            }
            Seen::Pending(e) => {
                for (pending, deleted) in changes(*e) {
                    if deleted {
                        o.pending.remove(&pending.name_any());
                    } else {
                        let joining = pending.spec.goal == shared::crd::PendingNodeGoal::Join
                            && !pending.status.as_ref().is_some_and(|s| s.reached_goal);
                        let donor = pending.annotations().get(keys::DONOR).cloned();
                        let leaving = pending.spec.goal == shared::crd::PendingNodeGoal::Leave;
                        if leaving
                            && donor.is_some()
                            && o.nodes.get(&pending.spec.node_name).is_some_and(|n| n.ready && !n.cordoned)
                        {
                            let v =
                                format!("the instance of {} is deleted while its node serves", pending.spec.node_name);
                            o.violation(v);
                        }
                        let heir = pending.spec.goal == shared::crd::PendingNodeGoal::Join && donor.is_some();
                        o.pending.insert(pending.name_any(), (pending.spec.node_name.clone(), joining, donor, heir));
                    }
                }
                o.check_nodes(&limits, false);
            }
            Seen::Pod(e) => {
                if matches!(*e, Event::InitDone) {
                    o.pods_synced = true;
                }
                for (pod, deleted) in changes(*e) {
                    let key = (pod.namespace().unwrap_or_default(), pod.name_any());
                    if deleted {
                        o.pods.remove(&key);
                    } else {
                        o.pods.insert(key, pod);
                    }
                }
                if limits.check_pdbs && o.pods_synced && o.pdbs_synced {
                    o.check_pdbs();
                }
            }
            Seen::Pdb(e) => {
                if matches!(*e, Event::InitDone) {
                    o.pdbs_synced = true;
                }
                for (pdb, deleted) in changes(*e) {
                    let key = (pdb.namespace().unwrap_or_default(), pdb.name_any());
                    if deleted {
                        o.pdbs.remove(&key);
                    } else {
                        o.pdbs.insert(key, pdb);
                    }
                }
            }
        }
    }
}

fn changes<K>(event: Event<K>) -> Vec<(K, bool)> {
    match event {
        Event::Apply(k) | Event::InitApply(k) => vec![(k, false)],
        Event::Delete(k) => vec![(k, true)],
        Event::Init | Event::InitDone => vec![],
    }
}

impl Observed {
    /// Records `node`; true when the controller just started it (its turn).
    fn observe_node(&mut self, node: &Node, limits: &Limits) -> bool {
        let name = node.name_any();
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let mut cordoned_by_us = false;
        let intent = match ControllerAnnotations::read(&annotations) {
            Ok(c) => {
                cordoned_by_us = c.cordoned_by_us;
                c.intent
            }
            Err(unreadable) => {
                if unreadable.intent_present {
                    self.unreadable.insert(name.clone());
                }
                if limits.readable_intents && unreadable.intent_present {
                    self.violation(format!("{name} holds an intent the protocol cannot read: {unreadable}"));
                }
                None
            }
        };
        let state = NodeState {
            control_plane: node.labels().contains_key("node-role.kubernetes.io/control-plane"),
            cordoned: node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
            ready: node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            step: intent.as_ref().map(|i| i.step),
            cordoned_by_us,
            since: intent.as_ref().map(|i| i.since),
            target: intent.map(|i| i.target),
            os_image: annotations.get(keys::OS_IMAGE).cloned(),
            agent_state: annotations.get(keys::STATE).cloned(),
            provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
            heir: annotations.get(keys::HEIR).cloned(),
            donor: annotations.get(keys::DONOR).cloned(),
            kubelet_version: node
                .status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.kubelet_version.clone())
                .filter(|v| !v.is_empty()),
            operation: annotations.contains_key(keys::NODE_OPERATION),
        };
        self.roles.insert(name.clone(), state.control_plane);
        let previous = self.nodes.get(&name).and_then(|n| n.step);
        let operated = self.nodes.get(&name).is_some_and(|n| n.operation);
        // A start: the node's turn (a drain, after staging ahead or not; a replacement; kubeadm-upgrade follows a
        // drain), or a NodeOp's start (its mark written).
        let started = (state.step != previous
            && match state.step {
                Some(Step::Replace | Step::Drain) => true,
                Some(Step::KubeadmUpgrade) => previous != Some(Step::Drain),
                _ => false,
            })
            || (state.operation && !operated);
        // Staging ahead: an image staged, or a Kubernetes upgrade's components fetched (`intent=fetch`).
        let ahead = |step: Option<Step>| matches!(step, Some(Step::Stage | Step::Fetch));
        if ahead(state.step) && state.cordoned_by_us {
            self.violation(format!("{name} was cordoned by the controller while staged ahead of its turn"));
        }
        let staging_started = ahead(state.step) && state.step != previous;
        if let Some(step) = state.step {
            let steps = self.timeline.entry(name.clone()).or_default();
            if steps.last().map(|(_, s)| *s) != Some(step) {
                steps.push((Timestamp::now(), step));
            }
        }
        self.nodes.insert(name, state);
        let staging = self.nodes.values().filter(|n| ahead(n.step)).count();
        self.max_staging_seen = self.max_staging_seen.max(staging);
        if let Some(max) = limits.max_staging
            && staging_started
            && staging > max
        {
            self.violation(format!("{staging} nodes staging at once (maxStaging {max})"));
        }
        started
    }

    /// A Node was deleted: a replaced node must have had a Ready heir.
    fn node_deleted(&mut self, name: &str) {
        let Some(gone) = self.nodes.remove(name) else { return };
        if let Some(heir) = &gone.heir
            && !self.nodes.get(heir).is_some_and(|h| h.ready)
        {
            self.violation(format!("{name} was deleted while its heir {heir} was not a Ready node"));
        }
    }

    /// Nodes that join as new instances and never served yet, and heirs not paired with their donor yet: extra
    /// capacity, not disrupted ones.
    fn joining(&self) -> Vec<&str> {
        let unpaired = |node: &str| self.nodes.get(node).is_some_and(|n| n.donor.is_none());
        self.pending
            .values()
            .filter(|(node, joining, _, heir)| *joining || (*heir && unpaired(node)))
            .map(|(node, _, _, _)| node.as_str())
            .collect()
    }

    fn check_nodes(&mut self, limits: &Limits, started: bool) {
        let now = Timestamp::now();
        let joining = self.joining();
        let counted =
            |(name, n): &(&String, &NodeState)| !joining.contains(&name.as_str()) && n.disrupted(limits.soak, now);
        let disrupted: Vec<String> = self.nodes.iter().filter(counted).map(|(k, _)| k.clone()).collect();
        let control_plane = self.nodes.iter().filter(|e| counted(e) && e.1.control_plane).count();
        let count = disrupted.len();
        if started && count > limits.max_disrupted {
            let v = format!("{count} nodes disrupted at once (max {}): {}", limits.max_disrupted, disrupted.join(", "));
            self.violation(v);
        }
        if started && control_plane > 1 {
            self.violation(format!("{control_plane} control-plane nodes disrupted at once"));
        }
        if count > self.max_disrupted_seen {
            let why = |n: &NodeState| {
                format!(
                    "cordoned {} (by us {}), ready {}, step {:?}, agent state {:?}",
                    n.cordoned, n.cordoned_by_us, n.ready, n.step, n.agent_state
                )
            };
            self.max_disrupted_nodes =
                disrupted.iter().map(|name| format!("{name}: {}", why(&self.nodes[name]))).collect();
            self.max_disrupted_seen = count;
        }
        self.max_control_plane_disrupted_seen = self.max_control_plane_disrupted_seen.max(control_plane);
        self.check_replacements(limits);
    }

    /// At most `maxSurge` extra instances, and never a control-plane and a worker replacement at once.
    fn check_replacements(&mut self, limits: &Limits) {
        let Some(surge) = limits.surge else { return };
        let instances = self.nodes.values().filter(|n| n.provider_id.is_some()).count()
            + self.pending.values().filter(|(node, _, _, _)| !self.nodes.contains_key(node)).count();
        let extra = instances.saturating_sub(surge.baseline);
        self.max_surge_seen = self.max_surge_seen.max(extra);
        if extra > surge.max_surge {
            self.violation(format!(
                "{extra} instances beyond the {} of the start (maxSurge {})",
                surge.baseline, surge.max_surge
            ));
        }
        let mut donors: Vec<&str> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.step == Some(Step::Replace) || n.heir.is_some())
            .map(|(name, _)| name.as_str())
            .collect();
        donors.extend(self.nodes.values().filter_map(|n| n.donor.as_deref()));
        donors.extend(self.pending.values().filter_map(|(_, _, donor, _)| donor.as_deref()));
        let roles: Vec<bool> = donors.iter().filter_map(|d| self.roles.get(*d).copied()).collect();
        if roles.contains(&true) && roles.contains(&false) {
            self.violation("a control-plane and a worker node replaced at once".into());
        }
    }

    /// No kubelet newer than the API server (the Kubernetes version-skew policy).
    fn check_kubelets(&mut self, api_server: &str) {
        let Ok(api_server) = api_server.parse::<shared::version::KubeVersion>() else { return };
        let newer: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|(name, n)| {
                let kubelet: shared::version::KubeVersion = n.kubelet_version.as_deref()?.parse().ok()?;
                (!shared::version::kubelet_may_run(&kubelet, &api_server)).then(|| format!("{name} ({kubelet})"))
            })
            .collect();
        for node in newer {
            self.violation(format!("kubelet newer than the API server ({api_server}): {node}"));
        }
    }

    fn check_pdbs(&mut self) {
        let mut found = Vec::new();
        for pdb in self.pdbs.values() {
            let Some(desired) = pdb.status.as_ref().map(|s| s.desired_healthy) else { continue };
            let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else { continue };
            let namespace = pdb.namespace().unwrap_or_default();
            let healthy = self
                .pods
                .iter()
                .filter(|((ns, _), pod)| *ns == namespace && selects(selector, pod.metadata.labels.as_ref()))
                .filter(|(_, pod)| pod.metadata.deletion_timestamp.is_none() && pod_ready(pod))
                .count() as i32;
            if healthy < desired {
                found.push(format!("PDB {namespace}/{}: {healthy} healthy pods, needs {desired}", pdb.name_any()));
            }
        }
        for v in found {
            self.violation(v);
        }
    }

    /// Records a violation once, however many events show it.
    fn violation(&mut self, v: String) {
        if !self.violations.contains(&v) {
            self.violations.push(v);
        }
    }
}

/// Whether `pod` has the condition `Ready` True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn selects(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k));
    let labels_ok = selector.match_labels.iter().flatten().all(|(k, v)| get(k) == Some(v));
    let exprs_ok = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => get(&e.key).is_some(),
            "DoesNotExist" => get(&e.key).is_none(),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, ready: bool, cordoned: bool, intent: Option<(&str, &str)>) -> Node {
        let mut annotations = serde_json::Map::new();
        if let Some((step, target)) = intent {
            for (k, v) in [
                (keys::INTENT, step),
                (keys::INTENT_TARGET, target),
                (keys::INTENT_TOKEN, "t"),
                (keys::INTENT_SINCE, "2026-11-21T10:00:00Z"),
                // Read with `fetch` and `kubeadm-upgrade` only.
                (keys::INTENT_COMPONENTS, "k8s-components"),
            ] {
                annotations.insert(k.into(), json!(v));
            }
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"unschedulable": cordoned},
            "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    fn see(o: &mut Observed, limits: &Limits, n: Node) {
        let started = o.observe_node(&n, limits);
        o.check_nodes(limits, started);
    }

    #[test]
    fn soaking_and_not_ready_nodes_count_as_disrupted_as_the_policy_counts_them() {
        let since: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        let state = |step: Option<Step>, ready: bool, cordoned: bool| NodeState {
            step,
            ready,
            cordoned,
            since: Some(since),
            ..Default::default()
        };
        let soak = Duration::from_secs(60);
        let during = since.checked_add(Duration::from_secs(30)).unwrap();
        let after = since.checked_add(Duration::from_secs(60)).unwrap();
        for (node, now, disrupted) in [
            (state(None, true, false), during, false),
            (state(None, false, false), during, true),
            (state(None, true, true), during, true),
            (state(Some(Step::Stage), true, false), during, false),
            (state(Some(Step::Done), true, false), during, true),
            (state(Some(Step::Done), true, false), after, false),
            (state(Some(Step::Failed), true, false), during, false),
        ] {
            assert_eq!(node.disrupted(soak, now), disrupted, "{node:?} at {now}");
        }
        assert!(!state(Some(Step::Done), true, false).disrupted(Duration::ZERO, during));
    }

    #[test]
    fn a_start_over_the_budget_is_a_violation_and_a_node_going_down_is_not() {
        let limits = Limits::new(2, false);
        let mut o = Observed::default();
        see(&mut o, &limits, node("a", true, false, Some(("drain", "v2"))));
        see(&mut o, &limits, node("b", false, false, None));
        assert!(o.violations.is_empty(), "a node going NotReady is not the controller's doing");
        see(&mut o, &limits, node("x", true, false, Some(("stage", "v2"))));
        assert!(o.violations.is_empty(), "staging ahead disrupts nothing");
        see(&mut o, &limits, node("c", true, false, Some(("drain", "v2"))));
        assert_eq!(o.violations, vec!["3 nodes disrupted at once (max 2): a, b, c".to_string()]);
        assert_eq!(o.max_disrupted_seen, 3);
    }

    #[test]
    fn more_nodes_staging_than_max_staging_is_a_violation() {
        let limits = Limits { max_staging: Some(1), ..Limits::new(1, false) };
        let mut o = Observed::default();
        see(&mut o, &limits, node("a", true, false, Some(("stage", "v2"))));
        assert!(o.violations.is_empty());
        see(&mut o, &limits, node("b", true, false, Some(("stage", "v2"))));
        assert_eq!(o.violations, vec!["2 nodes staging at once (maxStaging 1)".to_string()]);
        assert_eq!(o.max_staging_seen, 2);
        // A Kubernetes upgrade's fetch ahead is its staging: bounded alike.
        let mut o = Observed::default();
        see(&mut o, &limits, node("a", true, false, Some(("fetch", "v1.34.1"))));
        assert!(o.violations.is_empty());
        see(&mut o, &limits, node("b", true, false, Some(("fetch", "v1.34.1"))));
        assert_eq!(o.violations, vec!["2 nodes staging at once (maxStaging 1)".to_string()]);
    }

    #[test]
    fn a_kubelet_newer_than_the_api_server_is_a_violation_and_a_kubeadm_drain_is_a_start() {
        let limits = Limits::new(1, false);
        let mut o = Observed::default();
        let mut upgraded = node("a", true, false, Some(("done", "v1.34.1")));
        upgraded.status.as_mut().unwrap().node_info = Some(
            serde_json::from_value(json!({"kubeletVersion": "v1.34.1", "architecture": "", "bootID": "",
                "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "", "machineID": "",
                "operatingSystem": "", "osImage": "", "systemUUID": ""}))
            .unwrap(),
        );
        see(&mut o, &limits, upgraded);
        o.check_kubelets("v1.34.1");
        assert!(o.violations.is_empty());
        o.check_kubelets("v1.33.5");
        assert_eq!(o.violations, vec!["kubelet newer than the API server (v1.33.5): a (v1.34.1)".to_string()]);
        let mut o = Observed::default();
        let mut applying = node("b", true, false, Some(("kubeadm-upgrade", "v1.34.1")));
        let annotations = applying.metadata.annotations.get_or_insert_with(Default::default);
        annotations.insert(keys::INTENT_COMPONENTS.into(), "k8s-components-sha256-ab".into());
        annotations.insert(keys::INTENT_KUBEADM.into(), "apply".into());
        see(&mut o, &limits, applying);
        see(&mut o, &limits, node("c", true, false, Some(("drain", "v1.34.1"))));
        assert_eq!(o.violations, vec!["2 nodes disrupted at once (max 1): b, c".to_string()]);
    }

    #[test]
    fn an_unreadable_intent_is_a_violation_unless_expected() {
        let mut o = Observed::default();
        see(&mut o, &Limits::new(5, false), node("a", true, false, Some(("stage", "v2 "))));
        assert_eq!(o.violations.len(), 1);
        assert!(o.violations[0].starts_with("a holds an intent the protocol cannot read"), "{:?}", o.violations);
        let mut o = Observed::default();
        let lenient = Limits { readable_intents: false, ..Limits::new(5, false) };
        see(&mut o, &lenient, node("a", true, false, Some(("stage", "v2 "))));
        assert!(o.violations.is_empty());
        assert_eq!(o.unreadable.iter().collect::<Vec<_>>(), ["a"]);
    }
}
