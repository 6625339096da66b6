//! The rollout benchmark (`make bench`): rolls a simulated cluster of 1000 nodes with
//! `maxUnavailable` 10 and fixed simulated step durations, and prints JSON:
//!
//! - wall time against two ideals and their ratios: every step's simulated duration divided by the concurrency
//!   (`ideal_seconds`), and the disruption ideal (`disruption_ideal_seconds`: only the drains and reboots take
//!   `maxUnavailable`'s slots, the next nodes staged ahead meanwhile, plus one staging at the start);
//! - hand-off latency (a node verified done → the next node's turn: its drain intent);
//! - Node writes per node update by the controller and by the agents (evictions apart), and API
//!   requests by verb;
//! - Node writes during ten simulated minutes of kubelet heartbeats with nothing to update;
//! - peak RSS of the controller and of agents, which run as real `update-operator` processes (the
//!   controller, and a sample of the agents; the other agents run in this process).
//!
//! With `--group-nodes N`, N more nodes sit in scaling groups of the dev cluster's simulated cloud and are
//! replaced by new instances (`--nodes 0` for a replacement-only rollout); the JSON then also has a
//! `replacement` object: nodes replaced, the surge actually used, cloud calls by operation and per replaced node,
//! Node writes per replaced node, and the ideal (each replacement holds a surge slot for the instance's
//! provisioning, join and Ready, the donor's drain and the instance's termination).
//!
//! Not a test: figures, not pass/fail (each target's verdict is in the JSON).

use anyhow::{Context, bail};
use clap::Parser;
use cloud::GroupRole;
use dev::apiserver::{Patch, WatchEvent};
use dev::cloud::GroupSpec;
use dev::cluster::{Cluster, ClusterConfig, PdbStyle, SampleWorkloads};
use dev::harness;
use dev::measure::{quantile, status_mib};
use dev::timing::Timing;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, PatchParams, PostParams, WatchParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use shared::crd::{NodeVersion, PendingNode};
use shared::protocol::keys;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Benchmark a rollout of the simulated cluster with the real update-operator.
#[derive(Debug, Parser)]
#[command(name = "bench")]
struct Args {
    /// Nodes (all workers, so that every node runs at the rollout's concurrency).
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// The rollout's maxUnavailable.
    #[arg(long, default_value_t = 10)]
    max_unavailable: usize,
    /// The rollout's preferUpdatedNodes (the taint of outdated nodes: one more Node write for each node the first plan
    /// does not start).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    prefer_updated_nodes: bool,
    /// Simulated staging time of a host.
    #[arg(long, default_value_t = 3.0, value_name = "SECONDS")]
    stage_seconds: f64,
    /// Simulated termination time of an evicted pod (the drain).
    #[arg(long, default_value_t = 0.5, value_name = "SECONDS")]
    pod_termination_seconds: f64,
    /// Simulated reboot time of a host.
    #[arg(long, default_value_t = 3.0, value_name = "SECONDS")]
    reboot_seconds: f64,
    /// Simulated startup time of a pod.
    #[arg(long, default_value_t = 0.2, value_name = "SECONDS")]
    pod_startup_seconds: f64,
    /// Workload pods per node (evicted in every drain).
    #[arg(long, default_value_t = 2)]
    pods_per_node: usize,
    /// Agents run as separate `update-operator -agent` processes (the rest run in this process).
    #[arg(long, default_value_t = 10)]
    process_agents: usize,
    /// The update-operator binary (default: beside this program).
    #[arg(long, value_name = "PATH")]
    binary: Option<PathBuf>,
    /// Simulated minutes of steady state after the rollout.
    #[arg(long, default_value_t = 10.0)]
    steady_minutes: f64,
    /// Kubelet node-status heartbeat interval in the steady state (simulated seconds).
    #[arg(long, default_value_t = 10.0)]
    heartbeat_seconds: f64,
    /// How much faster than real time the steady state runs.
    #[arg(long, default_value_t = 60.0)]
    time_scale: f64,
    /// Stop the rollout after this long and report what was measured (0: run to the end).
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    max_rollout_seconds: f64,
    /// Nodes in cloud scaling groups (the dev cluster's simulated cloud), besides `--nodes`: these are replaced by
    /// new instances rather than updated in place (the controller runs with `--cloud-provider simulated`).
    #[arg(long, default_value_t = 0)]
    group_nodes: usize,
    /// Nodes per scaling group (groups `pool-0`, `pool-1`, ...).
    #[arg(long, default_value_t = 100)]
    group_size: usize,
    /// The rollout's maxSurge: extra instances at once.
    #[arg(long, default_value_t = 10)]
    max_surge: usize,
    /// Simulated time a new cloud instance is Creating.
    #[arg(long, default_value_t = 0.2, value_name = "SECONDS")]
    instance_seconds: f64,
    /// Simulated time from a running instance to its Node registered (NotReady).
    #[arg(long, default_value_t = 0.2, value_name = "SECONDS")]
    join_seconds: f64,
    /// Simulated time from a registered Node to Ready.
    #[arg(long, default_value_t = 0.3, value_name = "SECONDS")]
    ready_seconds: f64,
    /// Simulated time a deleted instance is Terminating.
    #[arg(long, default_value_t = 0.3, value_name = "SECONDS")]
    terminate_seconds: f64,
    /// Multiplies every simulated step duration above (stage, pod termination and startup, reboot, instance,
    /// join, Ready, terminate), so that whole rollouts of large clusters fit in minutes; the ideal is computed from
    /// the scaled durations.
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR")]
    step_scale: f64,
    /// The controller's `--cloud-rate-limit` (cloud API requests per second) for the scaling groups.
    #[arg(long, default_value_t = 10)]
    cloud_rate_limit: u32,
    /// The controller's `--log-level` (an EnvFilter directive, e.g. `warn,controller::replacer=debug`); its log is
    /// `controller.log` in the work directory.
    #[arg(long, default_value = "warn")]
    controller_log_level: String,
}

impl Args {
    /// The step durations multiplied by `--step-scale`.
    fn scaled(mut self) -> Args {
        let f = self.step_scale.max(0.0);
        for d in [
            &mut self.stage_seconds,
            &mut self.pod_termination_seconds,
            &mut self.reboot_seconds,
            &mut self.pod_startup_seconds,
            &mut self.instance_seconds,
            &mut self.join_seconds,
            &mut self.ready_seconds,
            &mut self.terminate_seconds,
        ] {
            *d *= f;
        }
        self
    }
}

fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or_default()
}

/// What the in-process watch of Nodes saw, with the times it saw it.
#[derive(Default)]
struct Recorded {
    /// (time, node) of every new stage intent.
    stages: Vec<(Instant, String)>,
    /// When each node's turn came (its drain: it takes a slot of maxUnavailable).
    turns: Vec<(Instant, String)>,
    /// (time, node) of every agent report that finished a reboot intent (the node verified).
    verified: Vec<(Instant, String)>,
    /// (time, node) of every done intent.
    done: Vec<(Instant, String)>,
    /// Per drain: the node and whether it had pods to evict when its drain began (a drain with nothing to evict
    /// takes no simulated time). An in-place node's drain begins with its drain intent, a replaced node's (a
    /// donor's, under its replace intent) with its cordon.
    drains: Vec<(String, bool)>,
    /// Donors whose drain (cordon under the replace intent) was recorded in `drains`.
    cordoned_donors: HashSet<String>,
    /// Per node: (time, step) of each new intent.
    timeline: HashMap<String, Vec<(Instant, String)>>,
    seen_tokens: HashMap<String, String>,
    seen_reports: HashMap<String, String>,
    /// (time, node) of every new replace intent.
    replaces: Vec<(Instant, String)>,
    /// (time, node) of every Node deleted.
    deleted: Vec<(Instant, String)>,
    /// (time, node) of every Node added.
    added: Vec<(Instant, String)>,
    /// How often the bench's own watch of Nodes ended (closed as a slow consumer, or expired) and was resumed.
    watch_restarts: u64,
}

/// Records every change of a Node from now on into `recorded`. A watch that ends (the dev server closes a
/// consumer that falls a whole buffer behind, as kube-apiserver does) is resumed from the last resourceVersion
/// seen, or after a fresh list when that one has expired: a measurement that silently stopped recording would
/// look like a stalled rollout.
async fn record_nodes(store: dev::apiserver::Store, recorded: Arc<Mutex<Recorded>>) {
    let mut rv = store.resource_version().to_string();
    loop {
        let watch = store.api::<Node>().watch(None, &WatchParams::default().timeout(290 * 100), &rv);
        let mut events = match watch {
            Ok(events) => events,
            Err(e) => {
                eprintln!("bench: cannot watch nodes ({e}), listing them");
                rv = relist(&store, &recorded);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        while let Some(event) = events.next().await {
            let node = match event {
                WatchEvent::Added(n) => {
                    recorded.lock().added.push((Instant::now(), n.metadata.name.clone().unwrap_or_default()));
                    n
                }
                WatchEvent::Modified(n) => n,
                WatchEvent::Bookmark { resource_version, .. } => {
                    rv = resource_version;
                    continue;
                }
                WatchEvent::Deleted(n) => {
                    recorded.lock().deleted.push((Instant::now(), n.metadata.name.unwrap_or_default()));
                    continue;
                }
                WatchEvent::Error(e) => {
                    eprintln!("bench: the watch of nodes ended ({e}), listing them");
                    rv = relist(&store, &recorded);
                    break;
                }
            };
            if let Some(v) = &node.metadata.resource_version {
                rv.clone_from(v);
            }
            observe(&store, &recorded, &node);
        }
        recorded.lock().watch_restarts += 1;
    }
}

/// Records `node` as seen now; for a node that just entered its drain, whether it had pods to evict.
fn observe(store: &dev::apiserver::Store, recorded: &Mutex<Recorded>, node: &Node) {
    let value = serde_json::to_value(node).unwrap_or(Value::Null);
    let drain_started = record(&mut recorded.lock(), &value, Instant::now());
    if let Some(node) = drain_started {
        // Evicted pods stay on the node until their termination ends, well after this.
        let evictable = has_evictable_pods(store, &node);
        recorded.lock().drains.push((node, evictable));
    }
}

/// Records every Node as it is now; returns the list's resourceVersion to watch from.
fn relist(store: &dev::apiserver::Store, recorded: &Mutex<Recorded>) -> String {
    match store.api::<Node>().list(None, &ListParams::default()) {
        Ok(list) => {
            for node in &list.items {
                observe(store, recorded, node);
            }
            list.resource_version
        }
        Err(_) => store.resource_version().to_string(),
    }
}

/// Records what `node` shows; returns the node's name when it just entered its drain step.
fn record(rec: &mut Recorded, node: &Value, at: Instant) -> Option<String> {
    let name = node["metadata"]["name"].as_str().unwrap_or_default().to_owned();
    let a = &node["metadata"]["annotations"];
    let get = |k: &str| a[k].as_str().unwrap_or_default().to_owned();
    let (intent, token) = (get(keys::INTENT), get(keys::INTENT_TOKEN));
    let mut drain_started = None;
    if !token.is_empty() && rec.seen_tokens.get(&name) != Some(&token) {
        rec.seen_tokens.insert(name.clone(), token.clone());
        rec.timeline.entry(name.clone()).or_default().push((at, intent.clone()));
        match intent.as_str() {
            "stage" => rec.stages.push((at, name.clone())),
            "drain" => {
                rec.turns.push((at, name.clone()));
                drain_started = Some(name.clone());
            }
            "replace" => rec.replaces.push((at, name.clone())),
            "done" => rec.done.push((at, name.clone())),
            _ => {}
        }
    }
    // A donor is drained under its replace intent, once its heir joined: its cordon begins the drain.
    if intent == "replace"
        && node["spec"]["unschedulable"].as_bool() == Some(true)
        && rec.cordoned_donors.insert(name.clone())
    {
        drain_started = Some(name.clone());
    }
    let finished_reboot = intent == "reboot" && get(keys::STATE) == "done" && get(keys::STATE_TOKEN) == token;
    if finished_reboot && rec.seen_reports.get(&name) != Some(&token) {
        rec.seen_reports.insert(name.clone(), token);
        rec.verified.push((at, name));
    }
    drain_started
}

/// Whether `node` runs pods a drain evicts (anything but DaemonSet pods).
fn has_evictable_pods(store: &dev::apiserver::Store, node: &str) -> bool {
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    store.api::<Pod>().list(None, &params).is_ok_and(|pods| {
        pods.items.iter().any(|pod| {
            !pod.metadata.owner_references.as_ref().is_some_and(|refs| refs.iter().any(|r| r.kind == "DaemonSet"))
        })
    })
}

/// Requests by the component `mode` (`controller` or `agent`) so far, per verb.
fn requests_by_verb(metrics: &dev::apiserver::Metrics, mode: &str) -> BTreeMap<String, u64> {
    let prefix = format!("update-operator/{mode}");
    metrics.sum_by(|key| key.user_agent.starts_with(&prefix), |key| key.verb.as_str().to_owned())
}

struct Process {
    child: Child,
    name: String,
}

impl Process {
    fn start(binary: &PathBuf, args: &[String], log: PathBuf, name: &str) -> anyhow::Result<Process> {
        let log = std::fs::File::create(&log).with_context(|| format!("log file {}", log.display()))?;
        let child = Command::new(binary)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        Ok(Process { child, name: name.to_owned() })
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("{} exited early ({status})", self.name);
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse().scaled();
    let binary = match &args.binary {
        Some(b) => b.clone(),
        None => std::env::current_exe()?.with_file_name("update-operator"),
    };
    if !binary.exists() {
        bail!(
            "{} does not exist: build it first (cargo build --release --bin update-operator) or pass --binary",
            binary.display()
        );
    }
    let descriptor_limit = raise_descriptor_limit();
    let peak_descriptors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let descriptor_watch = watch_descriptors(descriptor_limit, peak_descriptors.clone());
    let workdir = tempdir()?;
    eprintln!("bench: {} nodes, maxUnavailable {}, logs in {}", args.nodes, args.max_unavailable, workdir.display());

    let timing = Timing {
        pod_startup: seconds(args.pod_startup_seconds),
        pod_termination_cap: seconds(args.pod_termination_seconds),
        stage: seconds(args.stage_seconds),
        reboot: seconds(args.reboot_seconds),
        // The steady-state phase drives the heartbeats itself, at a known rate.
        node_heartbeat: None,
        lease_renew: None,
        instance_provision: seconds(args.instance_seconds),
        node_join: seconds(args.join_seconds),
        node_ready: seconds(args.ready_seconds),
        instance_terminate: seconds(args.terminate_seconds),
        ..Timing::fast()
    };
    let groups: Vec<GroupSpec> = (0..args.group_nodes.div_ceil(args.group_size.max(1)))
        .map(|i| {
            let size = args.group_size.max(1).min(args.group_nodes - i * args.group_size.max(1)) as u32;
            GroupSpec { name: format!("pool-{i}"), role: GroupRole::Worker, size, max: size + args.max_surge as u32 }
        })
        .collect();
    let started = Instant::now();
    let cluster = Cluster::start(ClusterConfig {
        nodes: args.nodes,
        control_planes: 0,
        workloads: Some(SampleWorkloads {
            pods_per_worker: args.pods_per_node,
            replicas: 3,
            statefulset_every: 3,
            // Fixed step durations: no PDB makes one drain wait for another's replacement pods.
            pdb: PdbStyle::None,
            daemonset: true,
            termination_grace_seconds: 30,
            ..SampleWorkloads::default()
        }),
        timing,
        ready_timeout: Duration::from_secs(1800),
        scaling_groups: groups.clone(),
        ..ClusterConfig::default()
    })
    .await
    .context("the dev cluster did not start")?;
    let cluster_start_seconds = started.elapsed().as_secs_f64();
    eprintln!("bench: cluster up in {cluster_start_seconds:.1}s");
    let store = cluster.store();
    // Nodes of scaling groups are replaced (they run no agent); the others are updated in place.
    let group_members: HashSet<String> = groups.iter().flat_map(|g| cluster.cloud().instances_of(&g.name)).collect();
    let nodes: Vec<String> = cluster.workers().iter().filter(|n| !group_members.contains(*n)).cloned().collect();
    // Each process runs as deploy/operator.yaml makes it: its own service account's kubeconfig.
    let manifest = cluster.operator().manifest();
    let kubeconfig_of = |identity: dev::apiserver::Identity| -> anyhow::Result<String> {
        let path = cluster.server().kubeconfig_for(&identity).context("writing a kubeconfig")?;
        Ok(path.display().to_string())
    };
    let kubeconfig = kubeconfig_of(manifest.controller_identity()?)?;

    // A free port for the controller's /metrics, read at the end.
    let controller_metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.to_string();
    let mut controller_args: Vec<String> = [
        "-controller",
        "--kubeconfig",
        &kubeconfig,
        "--identity",
        "bench-controller",
        "--lease-namespace",
        harness::LEASE_NAMESPACE,
        "--lease-name",
        harness::LEASE_NAME,
        "--metrics-addr",
        &controller_metrics,
        "--log-level",
        args.controller_log_level.as_str(),
    ]
    .map(String::from)
    .to_vec();
    if !groups.is_empty() {
        controller_args.extend(["--cloud-provider", "simulated", "--cloud-endpoint", cluster.url()].map(String::from));
        controller_args.extend(["--cloud-rate-limit".to_owned(), args.cloud_rate_limit.to_string()]);
        controller_args.extend(["--cloud-burst".to_owned(), (2 * args.cloud_rate_limit).to_string()]);
    }
    let mut processes =
        vec![Process::start(&binary, &controller_args, workdir.join("controller.log"), "the controller")?];
    let sample = args.process_agents.min(nodes.len());
    for node in &nodes[..sample] {
        let kubeconfig = kubeconfig_of(manifest.agent_identity(node)?)?;
        processes.push(Process::start(
            &binary,
            &[
                "-agent",
                "--node-name",
                node,
                "--host-backend",
                "simulated",
                "--simulated-hosts-url",
                cluster.url(),
                "--kubeconfig",
                &kubeconfig,
                "--metrics-addr",
                "127.0.0.1:0",
                "--log-level",
                "warn",
            ]
            .map(String::from),
            workdir.join(format!("agent-{node}.log")),
            &format!("the agent of {node}"),
        )?);
    }
    let in_process = nodes[sample..]
        .iter()
        .map(|n| harness::agent_task(cluster.server(), cluster.operator(), n))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("an in-process agent: {e}"))?;

    // Settled: every agent reported its host, and the controller holds the lease (it campaigns
    // only after its caches synced).
    let ready_by = Instant::now() + Duration::from_secs(600);
    loop {
        for p in &mut processes {
            p.check_alive()?;
        }
        let reported = store
            .api::<Node>()
            .list(None, &Default::default())
            .map(|l| {
                l.items
                    .iter()
                    .filter(|n| n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(keys::OS_IMAGE)))
                    .count()
            })
            .unwrap_or(0);
        let leader = harness::lease_holder(&store);
        if reported == nodes.len() && leader.as_deref() == Some("bench-controller") {
            break;
        }
        if Instant::now() > ready_by {
            bail!("not settled after 600s: {reported} of {} agents reported, leader {leader:?}", nodes.len());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("bench: agents and controller ready after {:.1}s", started.elapsed().as_secs_f64());

    let recorded = Arc::new(Mutex::new(Recorded::default()));
    let watcher = tokio::spawn(record_nodes(store.clone(), recorded.clone()));
    let metrics = cluster.server().metrics();
    let writes_before = harness::node_writes(&metrics);
    let evictions_before = metrics.count(|k| k.subresource == "eviction");
    // Events of the operator (core/v1 and events.k8s.io/v1 share one store): new ones and series updates.
    let event_writes = |verb: dev::apiserver::Verb| {
        metrics.count(|k| k.resource == "events" && k.verb == verb && k.user_agent.starts_with("update-operator/"))
    };
    let events_before = (event_writes(dev::apiserver::Verb::Create), event_writes(dev::apiserver::Verb::Patch));
    let verbs_before = (requests_by_verb(&metrics, "controller"), requests_by_verb(&metrics, "agent"));
    let cloud_before = cluster.cloud().calls();
    let version: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": "constellation-version"},
        "spec": {"image": "v2", "rollout": {
            "maxUnavailable": args.max_unavailable, "maxSurge": args.max_surge,
            "preferUpdatedNodes": args.prefer_updated_nodes,
            "failureBudget": (args.nodes + args.group_nodes).max(1)}}
    }))?;
    let rollout_start = Instant::now();
    store.api::<NodeVersion>().create(None, &version, &PostParams::default()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let limit = (args.max_rollout_seconds > 0.0).then(|| rollout_start + seconds(args.max_rollout_seconds));
    let mut completed = false;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        for p in &mut processes {
            p.check_alive()?;
        }
        let finished = {
            let rec = recorded.lock();
            let gone = rec.deleted.iter().filter(|(_, n)| group_members.contains(n)).count();
            rec.done.len() >= nodes.len() && gone >= group_members.len()
        } && (groups.is_empty()
            || store.api::<PendingNode>().list(None, &ListParams::default()).is_ok_and(|l| l.items.is_empty()));
        if finished {
            completed = true;
            break;
        }
        if limit.is_some_and(|l| Instant::now() > l) {
            break;
        }
        if rollout_start.elapsed() > Duration::from_secs(6 * 3600) {
            bail!("the rollout did not finish in 6 hours");
        }
    }
    let rec = std::mem::take(&mut *recorded.lock());
    // Donors of the groups are finished when their Node is deleted (after the heir took their place).
    let donors_gone: Vec<&(Instant, String)> = rec.deleted.iter().filter(|(_, n)| group_members.contains(n)).collect();
    let wall = rec
        .done
        .iter()
        .chain(donors_gone.iter().copied())
        .map(|(t, _)| *t)
        .max()
        .map_or(0.0, |t| t.duration_since(rollout_start).as_secs_f64());
    let updated = rec.done.len();
    // The ideal: every simulated second of every node's steps, run at full concurrency. A drain
    // with nothing to evict takes none.
    let done_nodes: std::collections::HashSet<&str> = rec.done.iter().map(|(_, n)| n.as_str()).collect();
    let drains_with_pods =
        rec.drains.iter().filter(|(n, evictable)| *evictable && done_nodes.contains(n.as_str())).count();
    let simulated_total = updated as f64 * (args.stage_seconds + args.reboot_seconds)
        + drains_with_pods as f64 * args.pod_termination_seconds;
    let in_place_ideal = simulated_total / args.max_unavailable as f64;
    // The disruption ideal: nodes staged ahead of their turn (outside maxUnavailable), so only the drains and
    // reboots take the budget's slots, plus one staging at the start.
    let disruption_total =
        updated as f64 * args.reboot_seconds + drains_with_pods as f64 * args.pod_termination_seconds;
    let disruption_ideal =
        disruption_total / args.max_unavailable as f64 + if updated > 0 { args.stage_seconds } else { 0.0 };
    // A replacement holds a surge slot from the new instance's creation until its donor's instance is gone:
    // provisioning, join, Ready, the donor's drain and the instance's termination.
    let donor_names: HashSet<&str> = donors_gone.iter().map(|(_, n)| n.as_str()).collect();
    let donor_drains =
        rec.drains.iter().filter(|(n, evictable)| *evictable && donor_names.contains(n.as_str())).count();
    let replaced = donors_gone.len();
    let replacement_total = replaced as f64
        * (args.instance_seconds + args.join_seconds + args.ready_seconds + args.terminate_seconds)
        + donor_drains as f64 * args.pod_termination_seconds;
    let replacement_ideal = replacement_total / args.max_surge.min(args.max_unavailable).max(1) as f64;
    let ideal = in_place_ideal + replacement_ideal;
    // Extra instances at once: group nodes present beyond the groups' size at start.
    let mut events: Vec<(Instant, i64)> = rec
        .added
        .iter()
        .filter(|(_, n)| !nodes.contains(n))
        .map(|(t, _)| (*t, 1))
        .chain(rec.deleted.iter().filter(|(_, n)| !nodes.contains(n)).map(|(t, _)| (*t, -1)))
        .collect();
    events.sort_by_key(|(t, _)| *t);
    let surge_used = events
        .iter()
        .scan(0i64, |extra, (_, change)| {
            *extra += change;
            Some(*extra)
        })
        .max()
        .unwrap_or(0);

    // Hand-off: each node's turn (its drain, the node staged ahead) after the first wave takes the slot of the
    // oldest verified node not yet handed off.
    let mut pending: VecDeque<Instant> = rec.verified.iter().map(|(t, _)| *t).collect();
    let mut turns: Vec<Instant> = rec.turns.iter().map(|(t, _)| *t).collect();
    turns.sort();
    let mut handoffs: Vec<f64> = Vec::new();
    for turn in turns.iter().skip(args.max_unavailable) {
        if let Some(verified) = pending.pop_front() {
            handoffs.push(turn.saturating_duration_since(verified).as_secs_f64() * 1000.0);
        }
    }
    handoffs.sort_by(f64::total_cmp);

    // Mean measured time of each step: from its intent to the next intent on the same node.
    let mut phases: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    for steps in rec.timeline.values() {
        for pair in steps.windows(2) {
            let entry = phases.entry(pair[0].1.clone()).or_default();
            entry.0 += pair[1].0.duration_since(pair[0].0).as_secs_f64();
            entry.1 += 1;
        }
    }
    let phase_means: BTreeMap<String, f64> =
        phases.into_iter().map(|(step, (sum, n))| (step, round4(sum / n as f64))).collect();

    let writes_after = harness::node_writes(&metrics);
    let (controller_writes, agent_writes) = (writes_after.0 - writes_before.0, writes_after.1 - writes_before.1);
    let evictions = metrics.count(|k| k.subresource == "eviction") - evictions_before;
    let events_written = (
        event_writes(dev::apiserver::Verb::Create) - events_before.0,
        event_writes(dev::apiserver::Verb::Patch) - events_before.1,
    );
    let diff = |after: BTreeMap<String, u64>, before: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        after.into_iter().map(|(verb, n)| (verb.clone(), n - before.get(&verb).copied().unwrap_or(0))).collect()
    };
    let verbs = (
        diff(requests_by_verb(&metrics, "controller"), &verbs_before.0),
        diff(requests_by_verb(&metrics, "agent"), &verbs_before.1),
    );
    eprintln!("bench: rollout of {updated} nodes in {wall:.1}s (ideal {ideal:.1}s)");
    let cloud_calls: BTreeMap<String, u64> = cluster
        .cloud()
        .calls()
        .into_iter()
        .map(|(op, n)| (op.as_str().to_owned(), n - cloud_before.get(&op).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let per_replaced = |n: u64| if replaced == 0 { f64::NAN } else { round2(n as f64 / replaced as f64) };
    let replacement = if groups.is_empty() {
        Value::Null
    } else {
        json!({
            "group_nodes": group_members.len(),
            "groups": groups.len(),
            "replaced": replaced,
            "max_surge": args.max_surge,
            "surge_used_max": surge_used,
            "ideal_seconds": round2(replacement_ideal),
            "step_seconds": {"instance": args.instance_seconds, "join": args.join_seconds, "ready": args.ready_seconds, "terminate": args.terminate_seconds},
            "cloud_calls": cloud_calls,
            "cloud_calls_per_replaced_node": per_replaced(cloud_calls.values().sum()),
            // Only a rollout without in-place nodes tells the writes of a replacement apart.
            "node_writes_per_replaced_node": if nodes.is_empty() { json!(per_replaced(controller_writes + agent_writes)) } else { Value::Null },
        })
    };
    let unfinished = if completed {
        Value::Null
    } else {
        dev::standing::Standing::read(&store, "constellation-version")
            .unfinished(&nodes.iter().chain(&group_members).cloned().collect())
    };

    // Steady state: kubelet heartbeats at the simulated rate, compressed in time. Only after a
    // completed rollout: a cut-short one would still be writing.
    let steady_state = if completed { Some(steady_state(&args, &store, &metrics).await) } else { None };
    let zero_steady_writes = steady_state.as_ref().map(|s| s["writes_by_controller_and_agents"] == json!(0));

    let controller_rss = status_mib(processes[0].child.id(), "VmHWM");
    let reconciles = reconcile_figures(&controller_metrics).await;
    let agent_rss: Vec<f64> = processes[1..].iter().filter_map(|p| status_mib(p.child.id(), "VmHWM")).collect();
    let agent_max = agent_rss.iter().copied().fold(0.0, f64::max);
    let agent_mean = if agent_rss.is_empty() { 0.0 } else { agent_rss.iter().sum::<f64>() / agent_rss.len() as f64 };
    let writes_per_update = |w: u64| if updated == 0 { f64::NAN } else { w as f64 / updated as f64 };
    let ratio = if ideal > 0.0 { wall / ideal } else { f64::NAN };
    let p99 = quantile(&handoffs, 0.99);
    let report = json!({
        "nodes": args.nodes,
        "max_unavailable": args.max_unavailable,
        "completed": completed,
        "nodes_updated": updated,
        "measured_step_seconds_mean": phase_means,
        "step_scale": args.step_scale,
        "step_seconds": {"stage": args.stage_seconds, "drain_pod_termination": args.pod_termination_seconds, "reboot": args.reboot_seconds},
        "cluster_start_seconds": round2(cluster_start_seconds),
        "wall_seconds": round2(wall),
        "ideal_seconds": round2(ideal),
        "ratio": round4(ratio),
        "disruption_ideal_seconds": round2(disruption_ideal + replacement_ideal),
        "ratio_to_disruption_ideal": round4(if disruption_ideal + replacement_ideal > 0.0 { wall / (disruption_ideal + replacement_ideal) } else { f64::NAN }),
        "handoff_ms": {
            "count": handoffs.len(),
            "p50": round2(quantile(&handoffs, 0.5)),
            "p95": round2(quantile(&handoffs, 0.95)),
            "p99": round2(p99),
            "max": round2(handoffs.last().copied().unwrap_or(f64::NAN)),
        },
        "node_writes_per_update": {
            "controller": round2(writes_per_update(controller_writes)),
            "agent": round2(writes_per_update(agent_writes)),
            "total": round2(writes_per_update(controller_writes + agent_writes)),
        },
        "evictions": {"requests": evictions, "per_node": round2(writes_per_update(evictions))},
        "events_per_update": {
            "created": round2(writes_per_update(events_written.0)),
            "series_updates": round2(writes_per_update(events_written.1)),
        },
        "api_requests_by_verb": {"controller": verbs.0, "agent": verbs.1},
        "unfinished": unfinished,
        "replacement": replacement,
        "watches": {
            "bench_watch_restarts": rec.watch_restarts,
            "slow_watchers_closed": cluster.server().slow_watchers_closed(),
        },
        "descriptors": {
            "limit": descriptor_limit,
            "peak_open": peak_descriptors.load(std::sync::atomic::Ordering::Relaxed),
            "open_at_end": std::fs::read_dir("/proc/self/fd").ok().map(|d| d.count()),
        },
        "steady_state": steady_state.unwrap_or_else(|| json!({"skipped": "the rollout did not complete (--max-rollout-seconds)"})),
        "controller_reconciles": reconciles,
        "rss_mib": {
            "controller_peak": controller_rss.map(round2),
            "agent_peak_max": round2(agent_max),
            "agent_peak_mean": round2(agent_mean),
            "agents_measured": agent_rss.len(),
            "bench_process_peak": status_mib(std::process::id(), "VmHWM").map(round2),
        },
        "targets": {
            "ratio_at_most_1_02": ratio <= 1.02,
            "handoff_p99_at_most_50ms": p99 <= 50.0,
            "node_writes_per_update_at_most_7": writes_per_update(controller_writes + agent_writes) <= 7.0,
            "zero_writes_in_steady_state": zero_steady_writes,
            // Issue 32: the Bottlerocket update operator's agent is under 8 MB.
            "agent_at_most_8_mib": agent_max <= 8.0,
            "controller_at_most_64_mib": controller_rss.is_some_and(|r| r <= 64.0),
        }
    });
    println!("{}", serde_json::to_string_pretty(&report)?);

    watcher.abort();
    descriptor_watch.abort();
    for (token, task) in in_process {
        token.cancel();
        let _ = task.await;
    }
    drop(processes);
    cluster.shutdown().await;
    Ok(())
}

/// Ten simulated minutes (by default) of kubelet heartbeats on every node with nothing to update,
/// and the writes of the controller and the agents meanwhile.
async fn steady_state(args: &Args, store: &dev::apiserver::Store, metrics: &dev::apiserver::Metrics) -> Value {
    let nodes: Vec<String> = store
        .api::<Node>()
        .list(None, &ListParams::default())
        .map(|l| l.items.into_iter().filter_map(|n| n.metadata.name).collect())
        .unwrap_or_default();
    let before = steady_writes(metrics);
    let rounds = ((args.steady_minutes * 60.0) / args.heartbeat_seconds).round().max(1.0) as usize;
    let real = seconds(args.steady_minutes * 60.0 / args.time_scale);
    let kubelet = store.with_identity("dev/kubelet");
    let start = Instant::now();
    let mut heartbeats = 0u64;
    for round in 0..rounds {
        let now = Timestamp::now().to_string();
        for node in &nodes {
            let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": now}]}});
            if kubelet.api::<Node>().patch_status(None, node, &Patch::Strategic(patch), &PatchParams::default()).is_ok()
            {
                heartbeats += 1;
            }
        }
        let next = start + real.mul_f64((round + 1) as f64 / rounds as f64);
        tokio::time::sleep_until(next.into()).await;
    }
    // Time for the last heartbeats to reach the watchers and anything they cause to be written.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let elapsed = start.elapsed().as_secs_f64();
    let after = steady_writes(metrics);
    let by_resource: BTreeMap<String, u64> = after
        .iter()
        .map(|(k, n)| (k.clone(), n - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let lease_renewals = by_resource.get("leases").copied().unwrap_or(0);
    let but_lease: u64 = by_resource.iter().filter(|(r, _)| r.as_str() != "leases").map(|(_, n)| n).sum();
    json!({
        "simulated_minutes": args.steady_minutes,
        "real_seconds": round2(elapsed),
        "node_heartbeats": heartbeats,
        // Everything but the leader's Lease renewals, which leader election needs and which
        // happen every few seconds of real time whatever the cluster does.
        "writes_by_controller_and_agents": but_lease,
        "writes_by_resource": by_resource,
        "leader_lease_renewals": lease_renewals,
        "real_seconds_per_lease_renewal": if lease_renewals > 0 { round2(elapsed / lease_renewals as f64) } else { f64::NAN },
    })
}

/// The controller's reconciles so far, from its `/metrics` at `address`: how many, and their mean duration
/// (planning and the writes it makes).
async fn reconcile_figures(address: &str) -> Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let scrape = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await?;
        let mut body = String::new();
        stream.read_to_string(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    let Ok(Ok(text)) = tokio::time::timeout(Duration::from_secs(10), scrape).await else {
        return json!({"error": "the controller's /metrics did not answer"});
    };
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.trim().parse::<f64>().ok()))
            .unwrap_or(f64::NAN)
    };
    let (sum, count) =
        (value("update_operator_reconcile_seconds_sum "), value("update_operator_reconcile_seconds_count "));
    json!({"count": count, "mean_ms": round2(sum / count * 1000.0)})
}

/// Writes by the controller and the agents so far, by resource.
fn steady_writes(metrics: &dev::apiserver::Metrics) -> BTreeMap<String, u64> {
    metrics
        .sum_by(|key| key.verb.is_write() && key.user_agent.starts_with("update-operator/"), |key| key.resource.clone())
}

/// The API server, the simulated hosts and the agents share this process, and most of their connections have both
/// ends here. Raises the soft limit to
/// the hard one, and the hard one too where allowed (as root with CAP_SYS_RESOURCE, up to `fs.nr_open`; not in every VM).
/// Returns the soft limit in force afterwards (`None`: unlimited).
fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let current = getrlimit(Resource::Nofile);
    let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|s| s.trim().parse::<u64>().ok());
    if let Some(ceiling) = ceiling.map(|c| c.min(1 << 20)).filter(|c| Some(*c) > current.current)
        && setrlimit(Resource::Nofile, Rlimit { current: Some(ceiling), maximum: Some(ceiling) }).is_ok()
    {
        return Some(ceiling);
    }
    let _ = setrlimit(Resource::Nofile, Rlimit { current: current.maximum, maximum: current.maximum });
    getrlimit(Resource::Nofile).current
}

/// Samples the descriptors this process holds every 250 ms into `peak` (the in-process agents reach the API server
/// without sockets; their simulated hosts' calls, the process agents' and the controller's connections use
/// descriptors here). Warns once when the peak comes within 10 % of `limit`: at the limit new connections wait in
/// the backlog and nodes in flight stall (issue 16's stall at 5000 nodes, before the in-memory agents).
fn watch_descriptors(limit: Option<u64>, peak: Arc<std::sync::atomic::AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut warned = false;
        loop {
            let open = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0);
            peak.fetch_max(open, std::sync::atomic::Ordering::Relaxed);
            if !warned && limit.is_some_and(|l| open * 10 >= l * 9) {
                warned = true;
                eprintln!(
                    "bench: WARNING: {open} file descriptors open, the limit is {limit:?}: the rollout may stall"
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn round4(x: f64) -> f64 {
    (x * 10000.0).round() / 10000.0
}

fn tempdir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("update-operator-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(intent: &str, token: &str, cordoned: bool) -> Value {
        serde_json::json!({
            "metadata": {"name": "pool-0-a", "annotations": {keys::INTENT: intent, keys::INTENT_TOKEN: token}},
            "spec": {"unschedulable": cordoned},
        })
    }

    #[test]
    fn a_donors_drain_begins_with_its_cordon_under_the_replace_intent_and_is_recorded_once() {
        let mut rec = Recorded::default();
        let now = Instant::now();
        assert_eq!(record(&mut rec, &node("replace", "t1", false), now), None, "not cordoned: the heir is joining");
        assert_eq!(record(&mut rec, &node("replace", "t1", true), now).as_deref(), Some("pool-0-a"));
        assert_eq!(record(&mut rec, &node("replace", "t1", true), now), None, "one drain per donor");
        assert_eq!(rec.replaces.len(), 1);
    }

    #[test]
    fn an_in_place_drain_begins_with_its_drain_intent() {
        let mut rec = Recorded::default();
        let now = Instant::now();
        assert_eq!(record(&mut rec, &node("drain", "t2", false), now).as_deref(), Some("pool-0-a"));
        assert_eq!(record(&mut rec, &node("drain", "t2", true), now), None);
    }
}
