//! The update-operator demo: a simulated cluster rolled to a new OS image by the real controller
//! (two leader-elected replicas) and one real agent per node, shown live, ending with a summary.
//! With `--kubernetes v1.34.1` the nodes are first upgraded to that Kubernetes version with the
//! simulated hosts' kubeadm (components served by the dev cluster's artifact server), then the image.
//!
//! Exits 0 when every node runs the new image, 1 (with the reason) when the rollout stops short,
//! and 2 on bad arguments.

use anyhow::Context;
use clap::Parser;
use dev::cluster::{Cluster, ClusterConfig, SampleWorkloads};
use dev::demo::display::{progress, render_terminal, render_transition};
use dev::demo::run::{Ending, ending};
use dev::demo::summary::{Totals, phases, render};
use dev::harness::{self, Component};
use dev::hosts::{HostFaults, StageFailure};
use dev::observer::{Limits, Observer};
use dev::timing::Timing;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::PostParams;
use serde_json::json;
use shared::crd::NodeVersion;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Roll a simulated cluster to a new OS image with update-operator's real controller and agents.
#[derive(Debug, Parser)]
#[command(name = "demo")]
struct Args {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 20)]
    nodes: usize,
    /// How many of them are control-plane nodes (updated first, one at a time).
    #[arg(long, default_value_t = 3)]
    control_planes: usize,
    /// The rollout's maxUnavailable: a count or a percentage.
    #[arg(long, default_value = "20%")]
    max_unavailable: String,
    /// How long a host takes to stage the new image.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    stage_seconds: f64,
    /// How long a host is down in a reboot.
    #[arg(long, default_value_t = 1.5, value_name = "SECONDS")]
    reboot_seconds: f64,
    /// How long a pod takes to become Ready once scheduled.
    #[arg(long, default_value_t = 0.3, value_name = "SECONDS")]
    pod_startup_seconds: f64,
    /// How long an evicted pod takes to terminate.
    #[arg(long, default_value_t = 0.5, value_name = "SECONDS")]
    pod_termination_seconds: f64,
    /// How long a verified node keeps its slot (the rollout's soakTime).
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    soak_seconds: f64,
    /// Fault: staging fails on this node (the failure budget of 1 then stops the rollout).
    #[arg(long, value_name = "NODE")]
    fail_update: Option<String>,
    /// Fault: add a Deployment whose PodDisruptionBudget never allows an eviction; its nodes' drains
    /// time out after 5 s and they are marked Blocked.
    #[arg(long)]
    blocking_pdb: bool,
    /// Fault: kill the leading controller replica this many seconds into the rollout; the other
    /// replica takes over once the lease expires.
    #[arg(long, value_name = "SECONDS")]
    kill_controller_after: Option<f64>,
    /// The image the hosts run, and the one to roll to.
    #[arg(long, default_value = "v1")]
    from: String,
    #[arg(long, default_value = "v2")]
    to: String,
    /// Upgrade Kubernetes to this version first (kubeadm on every node: the control plane first), then the
    /// image.
    #[arg(long, value_name = "VERSION")]
    kubernetes: Option<String>,
    /// The Kubernetes version the cluster runs at first (with --kubernetes).
    #[arg(long, value_name = "VERSION", default_value = "v1.33.0")]
    kubernetes_from: String,
    /// Give up after this long.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    timeout: u64,
    /// Write the components' logs to this file.
    #[arg(long, value_name = "PATH")]
    log_file: Option<std::path::PathBuf>,
    /// Replacement mode: the control-plane nodes and half the workers are instances of the simulated cloud's
    /// scaling groups (`cp`, `workers-a`), replaced by new instances; the other workers are updated in place.
    #[arg(long)]
    replace: bool,
    /// The rollout's maxSurge in replacement mode: replacements holding an extra instance at once.
    #[arg(long, default_value = "2")]
    max_surge: String,
}

fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(Ending::Complete) => ExitCode::SUCCESS,
        Ok(Ending::Stopped(why)) => {
            println!("\nrollout stopped: {why}");
            ExitCode::from(1)
        }
        Err(error) => {
            eprintln!("demo failed: {error:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<Ending> {
    if let Some(path) = &args.log_file {
        let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_writer(std::sync::Mutex::new(file))
            .with_ansi(false)
            .init();
    }
    let terminal = std::io::stdout().is_terminal();
    let timing = Timing {
        pod_startup: seconds(args.pod_startup_seconds),
        pod_termination_cap: seconds(args.pod_termination_seconds),
        stage: seconds(args.stage_seconds),
        reboot: seconds(args.reboot_seconds),
        ..Timing::fast()
    };
    println!(
        "starting a cluster of {} nodes ({} control plane) running {} with sample Deployments and StatefulSets under PDBs...",
        args.nodes, args.control_planes, args.from
    );
    // The demo runs agents only on the nodes that exist at the start, and the nodes of scaling groups get none:
    // a Kubernetes upgrade needs an agent on every node, new instances included (dev/tests/e2e_kubeadm.rs runs
    // that combination with an agent per joining node).
    anyhow::ensure!(
        !(args.replace && args.kubernetes.is_some()),
        "--replace and --kubernetes together are not supported by the demo (its scaling-group nodes run no agent)"
    );
    let workers = args.nodes.saturating_sub(args.control_planes);
    let (nodes, control_planes, scaling_groups) = if args.replace {
        let in_group = workers / 2;
        let groups = vec![
            dev::cloud::GroupSpec::new("cp", cloud::GroupRole::ControlPlane, args.control_planes as u32),
            dev::cloud::GroupSpec::new("workers-a", cloud::GroupRole::Worker, in_group as u32),
        ];
        println!(
            "replacement mode: scaling groups cp ({} control plane) and workers-a ({in_group} workers), {} workers in place",
            args.control_planes,
            workers - in_group
        );
        (workers - in_group, 0, groups)
    } else {
        (args.nodes, args.control_planes, Vec::new())
    };
    let mut config = ClusterConfig {
        nodes,
        control_planes,
        scaling_groups,
        image: args.from.clone(),
        workloads: Some(SampleWorkloads { termination_grace_seconds: 30, ..SampleWorkloads::default() }),
        timing,
        ..ClusterConfig::default()
    };
    if args.kubernetes.is_some() {
        config.kubelet_version = args.kubernetes_from.clone();
        config.apiserver.git_version = args.kubernetes_from.clone();
    }
    let cluster = Cluster::start(config).await.context("the dev cluster did not start")?;
    println!("cluster ready; kubeconfig: {}", cluster.kubeconfig_path().display());
    let store = cluster.store();
    let mut drain_timeout = "10m".to_owned();
    if let Some(node) = &args.fail_update {
        let failure =
            StageFailure { status: 500, message: "checksum mismatch: the downloaded image is corrupt".into() };
        cluster
            .hosts()
            .set_faults(node, HostFaults { stage_failure: Some(failure), ..Default::default() })
            .with_context(|| format!("--fail-update {node}"))?;
        println!("fault: staging fails on {node}");
    }
    if args.blocking_pdb {
        add_blocking_pdb(&store)?;
        drain_timeout = "5s".to_owned();
        let ready_by = Instant::now() + Duration::from_secs(60);
        while store
            .api::<Deployment>()
            .get(Some("demo"), "stuck")
            .ok()
            .and_then(|d| d.status?.ready_replicas)
            .unwrap_or(0)
            < 2
        {
            anyhow::ensure!(Instant::now() < ready_by, "the pods of demo/stuck did not get ready within 60s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        println!("fault: Deployment demo/stuck has a PDB that never allows an eviction (drain timeout 5s)");
    }

    // Nodes of scaling groups need no agent: they are replaced, not updated in place.
    let agents: Vec<Component> = cluster
        .control_planes()
        .iter()
        .chain(cluster.workers())
        .filter(|n| !args.replace || n.starts_with("worker-"))
        .map(|n| harness::agent(cluster.operator(), n))
        .collect();
    let metrics = controller::Metrics::default();
    let mut replicas: Vec<(String, Option<Component>)> = ["controller-a", "controller-b"]
        .iter()
        .map(|id| {
            let mut options = harness::controller_options(id);
            if args.replace {
                let provider = cloud::simulated::SimulatedProvider::new(cluster.url())?;
                let calls = std::sync::Arc::new(cloud::metrics::CallCounts::default());
                let provider = cloud::Governed::new(provider, cloud::CallPolicy::default(), calls);
                // The simulated control plane runs no etcd member (stacked etcd members are removed against a
                // real etcd in dev/tests/e2e_replacement.rs).
                let cloud = controller::groups::CloudOptions::new(std::sync::Arc::new(provider)).with_external_etcd();
                options.cloud = Some(cloud);
            }
            let c = harness::controller_with(cluster.operator(), options, metrics.clone());
            Ok((id.to_string(), Some(c)))
        })
        .collect::<anyhow::Result<_>>()?;
    let observer = Observer::start(cluster.client(), Limits::new(usize::MAX, true));
    let max_unavailable: serde_json::Value = args
        .max_unavailable
        .parse::<i64>()
        .map(serde_json::Value::from)
        .unwrap_or_else(|_| json!(args.max_unavailable));
    let mut spec = json!({"image": args.to, "rollout": {
        "maxUnavailable": max_unavailable,
        "soakTime": format!("{}ms", (args.soak_seconds * 1000.0) as u64),
        "drainTimeout": drain_timeout,
        "failureBudget": 1
    }});
    if args.replace {
        spec["rollout"]["maxSurge"] =
            args.max_surge.parse::<i64>().map(serde_json::Value::from).unwrap_or_else(|_| json!(args.max_surge));
    }
    if let Some(kubernetes) = &args.kubernetes {
        let config_map = cluster.artifacts().publish_release(kubernetes);
        store
            .api::<ConfigMap>()
            .create(Some("kube-system"), &config_map, &PostParams::default())
            .map_err(|e| anyhow::anyhow!("the components ConfigMap was rejected: {e}"))?;
        spec["kubernetesClusterVersion"] = json!(kubernetes);
        spec["kubernetesComponentsReference"] = json!(config_map.metadata.name);
        println!(
            "Kubernetes {} -> {kubernetes} first: components ConfigMap kube-system/{}",
            args.kubernetes_from,
            config_map.metadata.name.as_deref().unwrap_or_default()
        );
    }
    let version: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": "constellation-version"},
        "spec": spec,
    }))
    .context("the NodeVersion")?;
    // Start from a settled cluster: every agent has reported its host, a controller has synced.
    let ready_by = Instant::now() + Duration::from_secs(60);
    while !(agents.iter().all(Component::is_ready)
        && replicas.iter().any(|(_, r)| r.as_ref().is_some_and(Component::is_ready)))
    {
        anyhow::ensure!(Instant::now() < ready_by, "the agents and controllers did not get ready within 60s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let writes_before = harness::node_writes(&cluster.server().metrics());
    store
        .api::<NodeVersion>()
        .create(None, &version, &PostParams::default())
        .map_err(|e| anyhow::anyhow!("the NodeVersion was rejected: {e}"))?;
    println!(
        "NodeVersion constellation-version: {} -> {} (maxUnavailable {})\n",
        args.from, args.to, args.max_unavailable
    );

    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout);
    let mut printed_lines = 0;
    let mut printed_steps: std::collections::BTreeMap<String, usize> = Default::default();
    let mut killed = false;
    let result = loop {
        tokio::time::sleep(Duration::from_millis(if terminal { 200 } else { 100 })).await;
        let now = Timestamp::now();
        if let Some(after) = args.kill_controller_after
            && !killed
            && started.elapsed().as_secs_f64() >= after
        {
            killed = true;
            let leader = harness::lease_holder(&store);
            if let Some((id, slot)) = replicas.iter_mut().find(|(id, _)| Some(id) == leader.as_ref())
                && let Some(component) = slot.take()
            {
                component.crash().await;
                let line = format!(
                    "fault: killed the leading controller replica {id}; the other takes over when its lease expires"
                );
                if terminal {
                    clear(printed_lines);
                    printed_lines = 0;
                }
                println!("{line}");
            }
        }
        if terminal {
            let lines =
                observer.with(|o| render_terminal(&progress(o, &args.to, now), started.elapsed().as_secs_f64()));
            clear(printed_lines);
            for l in &lines {
                println!("{l}");
            }
            printed_lines = lines.len();
        } else {
            observer.with(|o| {
                for (node, steps) in &o.timeline {
                    let seen = printed_steps.entry(node.clone()).or_default();
                    for (at, step) in &steps[*seen..] {
                        println!("{}", render_transition(*at, node, *step));
                    }
                    *seen = steps.len();
                }
            });
        }
        let status = store.api::<NodeVersion>().get(None, "constellation-version").ok().and_then(|v| v.status);
        if let Some(end) = status.as_ref().and_then(|s| ending(s, &args.to)) {
            break end;
        }
        if Instant::now() > deadline {
            break Ending::Stopped(format!("the rollout did not end within {}s", args.timeout));
        }
    };
    let wall = started.elapsed().as_secs_f64();
    let (controller_writes, agent_writes) = harness::node_writes(&cluster.server().metrics());
    let observed = observer.stop().await;
    let refused = eviction_count(&metrics, "refused");
    let totals = Totals {
        evictions: eviction_count(&metrics, "accepted"),
        refused_by_pdb: refused,
        controller_node_writes: controller_writes - writes_before.0,
        agent_node_writes: agent_writes - writes_before.1,
        nodes_updated: observed.nodes.values().filter(|n| n.os_image.as_deref() == Some(args.to.as_str())).count(),
    };
    println!();
    for line in render(wall, &phases(&observed.timeline), &totals) {
        println!("{line}");
    }
    if !observed.violations.is_empty() {
        println!("\nsafety violations seen: {}", observed.violations.join("; "));
    }
    for (_, replica) in replicas {
        if let Some(r) = replica {
            let _ = r.stop(Duration::from_secs(10)).await;
        }
    }
    for agent in agents {
        let _ = agent.stop(Duration::from_secs(10)).await;
    }
    cluster.shutdown().await;
    if !observed.violations.is_empty() {
        return Ok(Ending::Stopped(format!("{} safety violation(s)", observed.violations.len())));
    }
    if result == Ending::Complete {
        match &args.kubernetes {
            Some(kubernetes) => println!("\nrollout complete: every node runs Kubernetes {kubernetes} and {}", args.to),
            None => println!("\nrollout complete: every node runs {}", args.to),
        }
    }
    Ok(result)
}

/// Moves the cursor up over the last `lines` lines and clears them.
fn clear(lines: usize) {
    let mut out = std::io::stdout();
    for _ in 0..lines {
        let _ = write!(out, "\x1b[1A\x1b[2K");
    }
    let _ = out.flush();
}

fn eviction_count(metrics: &controller::Metrics, result: &'static str) -> u64 {
    metrics.evictions.get_or_create(&controller::metrics::EvictionLabels { result }).get()
}

/// A Deployment of two pods whose PDB needs both: no eviction is ever allowed.
fn add_blocking_pdb(store: &dev::apiserver::Store) -> anyhow::Result<()> {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "stuck", "namespace": "demo"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "stuck"}},
            "template": {"metadata": {"labels": {"app": "stuck"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}
    }))?;
    store
        .api::<Deployment>()
        .create(Some("demo"), &deployment, &PostParams::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "stuck", "namespace": "demo"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "stuck"}}}
    }))?;
    store
        .api::<PodDisruptionBudget>()
        .create(Some("demo"), &pdb, &PostParams::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
