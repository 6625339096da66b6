//! Per-event planning time at 500 to 10,000 nodes: the full `plan_with` over every node (what the controller did
//! on every change) against the incremental `Planner` (the changed nodes given, then a plan), over the same events
//! of one in-place rollout at `maxUnavailable` 50, of the image (`image`) or of Kubernetes (`kubernetes`: fetched
//! ahead, drained, upgraded with kubeadm, verified); and what the reconciler pays besides the plan: building every
//! node's view (before) against bringing the views up to date from the watched store (after, `NodeViews::sync`).
//! Prints one JSON object per cluster size and flow.
//!
//! ```text
//! cargo bench -p controller --bench planning [-- --sizes 500,1000,5000,10000 --events 1000 --flows image,kubernetes]
//! ```

use controller::executor::next_state;
use controller::node_views::{NodeViews, Sources};
use controller::nodes::SlimNode;
use controller::policy::budget::MaxUnavailable;
use controller::policy::kubernetes::{KubernetesSpec, KubernetesTarget};
use controller::policy::{
    ActionKind, ClusterPlan, DrainProgress, Fleet, NodeAction, NodeSelector, NodeView, Planner, Policy, Rollout,
    SpecState, ValidSpec, plan_with,
};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::{reflector, watcher};
use shared::protocol::{AgentReport, AgentState, BootId, ComponentsHash, ControllerAnnotations, Token, keys};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

const OLD: &str = "v1";
const TARGET: &str = "v2";
/// The Kubernetes version of the `kubernetes` flow, and the components hash its nodes report once upgraded.
const KUBERNETES: &str = "v1.34.1";
const COMPONENTS_HASH: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
/// How often the full plan is timed (and compared), in events.
const FULL_EVERY: usize = 5;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let sizes: Vec<usize> = value("--sizes")
        .unwrap_or_else(|| "500,1000,5000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let events: usize = value("--events").and_then(|e| e.parse().ok()).unwrap_or(1000);
    let flows = value("--flows").unwrap_or_else(|| "image,kubernetes".into());
    for size in sizes {
        for flow in flows.split(',').map(str::trim) {
            let kubernetes = match flow {
                "image" => false,
                "kubernetes" => true,
                other => {
                    eprintln!("--flows: unknown flow {other:?} (image, kubernetes)");
                    std::process::exit(2);
                }
            };
            match run(size, events, kubernetes) {
                Ok(line) => println!("{line}"),
                Err(error) => {
                    eprintln!("{size} nodes, {flow}: {error}");
                    std::process::exit(1);
                }
            }
        }
    }
}

/// What happens to a node next, on its own.
#[derive(Debug, Clone, Copy)]
enum World {
    /// The agent reports the stage done.
    Staged,
    /// The drain finishes.
    Drained,
    /// The node is back from its reboot on the target.
    Rebooted,
    /// The kubelet restarted on the Kubernetes version, with the components.
    Upgraded,
}

struct Cluster {
    /// By name; `views` holds them in the same (name) order for the full plan.
    index: BTreeMap<String, usize>,
    views: Vec<NodeView>,
    rollouts: Vec<Rollout>,
    now: Timestamp,
    tokens: u64,
    queue: VecDeque<(String, World)>,
}

fn worker(name: String) -> Result<NodeView, String> {
    let boot = BootId::parse("boot", "b0").map_err(|e| e.to_string())?;
    Ok(NodeView {
        name,
        control_plane: false,
        selected_by: vec![0],
        opted_in: true,
        ready: true,
        unschedulable: false,
        kubelet_boot_id: Some("b0".into()),
        kubelet_version: Some("v1.33.0".into()),
        controller: Ok(ControllerAnnotations::default()),
        agent: Ok(AgentReport {
            state: Some(AgentState::Idle),
            boot_id: Some(boot),
            os_image: Some(OLD.into()),
            ..Default::default()
        }),
        drain: DrainProgress::NotRunning,
        group: None,
        operation: None,
        do_not_disrupt: None,
        checkpoint: None,
        zone: None,
        deferred: None,
        settle: None,
        outdated_taint: false,
    })
}

impl Cluster {
    /// `size` workers on the old image and Kubernetes, and one rollout of the new image, or (`kubernetes`) of the
    /// new Kubernetes first (the API server upgraded already: the workers' turns).
    fn new(size: usize, kubernetes: bool) -> Result<Cluster, String> {
        let policy = Policy { max_unavailable: MaxUnavailable::Count(50), ..Policy::default() };
        let spec =
            ValidSpec { generation: 1, target: TARGET.into(), policy, raw: serde_json::json!({"image": TARGET}) };
        let mut rollout = Rollout::new("nv", SpecState::Valid(Arc::new(spec)), None);
        if kubernetes {
            let version = KUBERNETES.parse().map_err(|e| format!("{e}"))?;
            rollout.kubernetes = Some(KubernetesSpec::Upgrade(KubernetesTarget {
                api_server: KUBERNETES.parse().map_err(|e| format!("{e}"))?,
                version,
                components: "k8s-components".into(),
                hash: COMPONENTS_HASH.into(),
            }));
        }
        let rollouts = vec![rollout];
        let mut views = Vec::with_capacity(size);
        let mut index = BTreeMap::new();
        for i in 0..size {
            let name = format!("w{i:05}");
            index.insert(name.clone(), i);
            views.push(worker(name)?);
        }
        let now = Timestamp::from_second(1_800_000_000).map_err(|e| e.to_string())?;
        Ok(Cluster { index, views, rollouts, now, tokens: 0, queue: VecDeque::new() })
    }

    fn node(&mut self, name: &str) -> Option<&mut NodeView> {
        let i = *self.index.get(name)?;
        self.views.get_mut(i)
    }

    /// Applies the plan's writes as the executor does; returns the nodes written.
    fn apply(&mut self, plan: &ClusterPlan) -> Vec<String> {
        let actions: Vec<NodeAction> = plan.rollouts.iter().flat_map(|p| p.actions.clone()).collect();
        let mut written = Vec::new();
        // The taint of outdated nodes (`preferUpdatedNodes`), as the executor writes it: the first plan taints
        // every outdated node, and each later one changes the taint of the nodes it verifies.
        for retaint in &plan.taints {
            if let Some(node) = self.node(&retaint.node) {
                node.outdated_taint = retaint.on;
                written.push(retaint.node.clone());
            }
        }
        for action in actions {
            self.tokens += 1;
            let (token, now) = (Token::from_u64(self.tokens), self.now);
            let Some(node) = self.node(&action.node) else { continue };
            let Ok(current) = node.controller.clone() else { continue };
            if !action.kind.writes() {
                continue;
            }
            let (next, unschedulable) = next_state(&current, node.unschedulable, &action, token, now);
            node.controller = Ok(next);
            node.unschedulable = unschedulable;
            let world = match action.kind {
                ActionKind::Stage { .. } | ActionKind::Fetch { .. } => Some(World::Staged),
                ActionKind::KubeadmUpgrade { .. } => Some(World::Upgraded),
                ActionKind::Drain { .. } => {
                    node.drain = DrainProgress::Running { waiting_on: None };
                    Some(World::Drained)
                }
                ActionKind::Reboot { .. } => {
                    node.drain = DrainProgress::NotRunning;
                    Some(World::Rebooted)
                }
                _ => None,
            };
            if let Some(world) = world {
                self.queue.push_back((action.node.clone(), world));
            }
            written.push(action.node);
        }
        written
    }

    /// The next thing a node does on its own; returns the node.
    fn world(&mut self) -> Option<String> {
        let (name, world) = self.queue.pop_front()?;
        let node = self.node(&name)?;
        let intent = node.controller.as_ref().ok().and_then(|c| c.intent.clone())?;
        match world {
            World::Staged => {
                if let Ok(report) = &mut node.agent {
                    report.state = Some(AgentState::Done);
                    report.token = Some(intent.token);
                }
            }
            World::Drained => node.drain = DrainProgress::Drained,
            World::Rebooted => {
                let boot = format!("b-{name}");
                if let Ok(report) = &mut node.agent {
                    report.state = Some(AgentState::Done);
                    report.token = Some(intent.token);
                    report.os_image = Some(TARGET.into());
                    report.boot_id = BootId::parse("boot", &boot).ok();
                }
                node.kubelet_boot_id = Some(boot);
            }
            World::Upgraded => {
                if let Ok(report) = &mut node.agent {
                    report.state = Some(AgentState::Done);
                    report.token = Some(intent.token);
                    report.components_hash = ComponentsHash::parse("hash", COMPONENTS_HASH).ok();
                }
                node.kubelet_version = Some(KUBERNETES.into());
            }
        }
        Some(name)
    }
}

/// Microseconds at quantile `q` of sorted `values`.
fn quantile(values: &[f64], q: f64) -> f64 {
    let i = ((values.len() as f64 - 1.0) * q).round() as usize;
    values.get(i).copied().unwrap_or(f64::NAN)
}

fn summary(mut values: Vec<f64>) -> serde_json::Value {
    values.sort_by(f64::total_cmp);
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let round = |v: f64| (v * 10.0).round() / 10.0;
    serde_json::json!({
        "mean": round(mean),
        "p50": round(quantile(&values, 0.5)),
        "p99": round(quantile(&values, 0.99)),
        "max": round(values.last().copied().unwrap_or(f64::NAN)),
    })
}

/// A watched Node of the idle cluster, its agent's `state` annotation set to `state`.
fn slim(name: &str, state: &str) -> SlimNode {
    let annotations: BTreeMap<String, String> =
        [(keys::OS_IMAGE, OLD), (keys::BOOT_ID, "0b6e1f0a-58f3-4c1d-9a6e-3f6f9b1e2c44"), (keys::STATE, state)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    let labels: BTreeMap<String, String> =
        [(keys::MANAGED_LABEL.to_owned(), keys::MANAGED_VALUE.to_owned())].into_iter().collect();
    SlimNode {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            annotations: Some(annotations),
            resource_version: Some("12345".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// What the reconciler does per event to bring its views up to date (`NodeViews::sync`: the store scanned,
/// the changed node viewed again and given to the planner), one node's watch event per event.
fn sync_cost(size: usize, events: usize) -> serde_json::Value {
    let (store, mut writer) = reflector::store::<SlimNode>();
    for i in 0..size {
        writer.apply_watcher_event(&watcher::Event::Apply(slim(&format!("w{i:05}"), "idle")));
    }
    let (drains, overlaid) = (HashMap::new(), HashSet::new());
    let (held, deferred) = (HashMap::new(), HashMap::new());
    let sources =
        Sources { drains: &drains, overlaid: &overlaid, freshest: &|node| node, held: &held, deferred: &deferred };
    let selector = NodeSelector::default();
    let mut views = NodeViews::default();
    views.sync_with(&store, &sources, &[Some(&selector)], None);
    let (mut compared, mut recorded) = (Vec::new(), Vec::new());
    for event in 0..events {
        let state = if event % 2 == 0 { "busy" } else { "idle" };
        let name = format!("w{:05}", event % size.max(1));
        writer.apply_watcher_event(&watcher::Event::Apply(slim(&name, state)));
        let started = Instant::now();
        if event % 2 == 0 {
            // Without the watch's record: every cached node compared.
            views.sync_with(&store, &sources, &[Some(&selector)], None);
            compared.push(started.elapsed().as_secs_f64() * 1e6);
        } else {
            views.sync_with(&store, &sources, &[Some(&selector)], Some([name].into()));
            recorded.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    serde_json::json!({"compare_all": summary(compared), "recorded_only": summary(recorded)})
}

/// What the reconciler did per node on every event before the planner: clone the cached Node and build its view.
fn view_cost(size: usize) -> Result<f64, String> {
    let node = slim("w00000", "idle");
    let selector = NodeSelector::default();
    let started = Instant::now();
    let mut selected = 0;
    for _ in 0..size {
        let copy = node.clone();
        let view = copy.view([Some(&selector)], DrainProgress::NotRunning);
        selected += view.selected_by.len();
    }
    if selected != size {
        return Err("the view of a managed node is not selected".into());
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / size as f64)
}

fn run(size: usize, events: usize, kubernetes: bool) -> Result<serde_json::Value, String> {
    let mut cluster = Cluster::new(size, kubernetes)?;
    let mut planner = Planner::new();
    planner.set_context(cluster.rollouts.clone(), Fleet::default(), None);
    for view in &cluster.views {
        planner.upsert(view.clone());
    }
    planner.plan(cluster.now);
    let (mut full, mut incremental, mut assessed) = (Vec::new(), Vec::new(), Vec::new());
    let mut changed: Vec<String> = Vec::new();
    for event in 0..events {
        cluster.now += SignedDuration::from_millis(200);
        let started = Instant::now();
        for name in changed.drain(..) {
            if let Some(&i) = cluster.index.get(&name)
                && let Some(view) = cluster.views.get(i)
            {
                planner.upsert(view.clone());
            }
        }
        let plan = planner.plan(cluster.now);
        incremental.push(started.elapsed().as_secs_f64() * 1e6);
        assessed.push(planner.assessed() as f64);

        // The full plan on every FULL_EVERY-th event only: it evicts the planner's indexes from the caches, which
        // the controller (planning nothing else) keeps warm.
        if event % FULL_EVERY == 0 {
            let started = Instant::now();
            let reference = plan_with(&cluster.views, &cluster.rollouts, &Fleet::default(), None, cluster.now);
            full.push(started.elapsed().as_secs_f64() * 1e6);
            let actions = |p: &ClusterPlan| p.rollouts.iter().flat_map(|r| r.actions.clone()).collect::<Vec<_>>();
            if actions(&plan) != actions(&reference) || plan.rollouts[0].counts != reference.rollouts[0].counts {
                return Err("the planner and the full plan disagree".into());
            }
        }
        changed.extend(cluster.apply(&plan));
        // One node's own change per event (its report, its drain, its reboot).
        changed.extend(cluster.world());
    }
    let last = planner.plan(cluster.now);
    let counts = last.rollouts[0].counts;
    let upgrading = last.rollouts[0].kubernetes.as_ref().is_some_and(|k| k.active);
    if kubernetes && !upgrading {
        return Err("the Kubernetes upgrade is over before the last event: give fewer events".into());
    }
    Ok(serde_json::json!({
        "nodes": size,
        "flow": if kubernetes { "kubernetes" } else { "image" },
        "events": events,
        "full_plan_us": summary(full),
        "incremental_us": summary(incremental),
        "assessed_per_event": summary(assessed),
        "view_us_per_node": (view_cost(size)? * 100.0).round() / 100.0,
        "sync_us": sync_cost(size, events),
        "after": {"up_to_date": counts.up_to_date, "in_progress": counts.in_progress, "outdated": counts.outdated},
    }))
}
