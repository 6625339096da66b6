//! `cluster-bench`: starts a large dev cluster (5000 nodes, about 150,000 pods by default) with every controller
//! running, then measures what the clients of update-operator would see. Prints one JSON document:
//! load time, RSS (after the load, peak, and after the clients), object counts, and the latencies of full
//! paginated lists and of watch events with `--clients` concurrent clients.

use anyhow::Context;
use clap::Parser;
use dev::cli::parse_duration;
use dev::cluster::{Cluster, ClusterConfig, PdbStyle, SampleWorkloads};
use dev::measure::{own_memory_mib, quantile};
use dev::timing::Timing;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Starts a large dev cluster and measures it.
#[derive(Debug, Parser)]
#[command(name = "cluster-bench", version)]
struct Cli {
    /// Nodes in total.
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    /// Control-plane nodes among them.
    #[arg(long, default_value_t = 3)]
    control_planes: usize,
    /// Sample pods per worker (Deployments and StatefulSets; the DaemonSet adds one per node).
    #[arg(long, default_value_t = 30)]
    pods_per_worker: usize,
    /// Replicas per sample workload.
    #[arg(long, default_value_t = 50)]
    replicas: usize,
    /// Every n-th sample workload is a StatefulSet (0: none).
    #[arg(long, default_value_t = 10)]
    statefulset_every: usize,
    /// Pod startup.
    #[arg(long, value_parser = parse_duration, default_value = "100ms")]
    pod_startup: Duration,
    /// Node status heartbeat interval (0: off).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    heartbeat: Duration,
    /// Node Lease renewal interval (0: off).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    lease_renew: Duration,
    /// Concurrent clients for the list and watch measurements.
    #[arg(long, default_value_t = 10)]
    clients: usize,
    /// Writes whose watch events are timed.
    #[arg(long, default_value_t = 20)]
    watch_writes: usize,
    /// Watch events the API server keeps per kind (its watch cache; resuming watches need it).
    #[arg(long, default_value_t = 10_000)]
    history_per_kind: usize,
    /// How long the load may take.
    #[arg(long, value_parser = parse_duration, default_value = "30m")]
    ready_timeout: Duration,
}

fn summary(mut samples: Vec<f64>) -> Value {
    if samples.is_empty() {
        return json!(null);
    }
    samples.sort_by(f64::total_cmp);
    let at = |q| quantile(&samples, q);
    let round = |v: f64| (v * 1000.0).round() / 1000.0;
    json!({"samples": samples.len(), "p50_ms": round(at(0.5)), "p99_ms": round(at(0.99)), "max_ms": round(at(1.0))})
}

/// Each client lists every object of `api` page by page (500 per page, as kube-rs watchers do).
async fn list_latency<K>(apis: Vec<Api<K>>) -> anyhow::Result<(Value, usize)>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let runs = apis.into_iter().map(|api| async move {
        let started = Instant::now();
        let mut params = ListParams::default().limit(500);
        let mut count = 0;
        loop {
            let page = api.list(&params).await?;
            count += page.items.len();
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        Ok::<_, kube::Error>((started.elapsed().as_secs_f64() * 1000.0, count))
    });
    let results = futures::future::try_join_all(runs).await.context("listing")?;
    let count = results.first().map_or(0, |(_, c)| *c);
    Ok((summary(results.into_iter().map(|(ms, _)| ms).collect()), count))
}

/// Opens a watch per client, then makes `writes` writes with `write`, and times each event's arrival.
async fn watch_latency<K>(
    watchers: Vec<(Api<K>, WatchParams)>,
    writes: usize,
    write: impl Fn(usize) -> futures::future::BoxFuture<'static, anyhow::Result<()>>,
    sequence_of: fn(&K) -> Option<usize>,
) -> anyhow::Result<Value>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let sent: std::sync::Arc<parking_lot::Mutex<Vec<Option<Instant>>>> =
        std::sync::Arc::new(parking_lot::Mutex::new(vec![None; writes]));
    let mut tasks = Vec::new();
    for (api, params) in watchers {
        let sent = sent.clone();
        // Watch from "now": no initial list, only the timed events.
        let stream = api.watch(&params, "0").await.context("opening a watch")?.boxed();
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut seen = vec![false; writes];
            let mut stream = stream;
            while seen.iter().any(|s| !s) {
                let Ok(Ok(Some(event))) = tokio::time::timeout(Duration::from_secs(60), stream.try_next()).await else {
                    break;
                };
                let (WatchEvent::Modified(object) | WatchEvent::Added(object)) = event else { continue };
                if let Some(seq) = sequence_of(&object).filter(|s| *s < writes)
                    && !seen[seq]
                    && let Some(at) = sent.lock()[seq]
                {
                    seen[seq] = true;
                    samples.push(at.elapsed().as_secs_f64() * 1000.0);
                }
            }
            samples
        }));
    }
    // Let the initial events of the watches from "0" pass before timing anything.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for seq in 0..writes {
        sent.lock()[seq] = Some(Instant::now());
        write(seq).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(task.await.context("a watch client")?);
    }
    Ok(summary(samples))
}

fn sequence(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<usize> {
    annotations?.get("bench.dev/seq")?.parse().ok()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt().with_env_filter("warn").with_writer(std::io::stderr).init();
    let optional = |d: Duration| (!d.is_zero()).then_some(d);
    let config = ClusterConfig {
        nodes: cli.nodes,
        control_planes: cli.control_planes,
        workloads: Some(SampleWorkloads {
            pods_per_worker: cli.pods_per_worker,
            replicas: cli.replicas,
            statefulset_every: cli.statefulset_every,
            pdb: PdbStyle::Mixed,
            daemonset: true,
            ..SampleWorkloads::default()
        }),
        timing: Timing {
            pod_startup: cli.pod_startup,
            node_heartbeat: optional(cli.heartbeat),
            lease_renew: optional(cli.lease_renew),
            ..Timing::fast()
        },
        ready_timeout: cli.ready_timeout,
        apiserver: dev::apiserver::ApiServerConfig {
            history_per_kind: cli.history_per_kind,
            ..dev::apiserver::ApiServerConfig::default()
        },
        ..ClusterConfig::default()
    };
    let started = Instant::now();
    let cluster = Cluster::start(config).await.context("starting the cluster")?;
    let load_seconds = started.elapsed().as_secs_f64();
    // Let the allocator settle after the burst of the load.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_loaded, _) = own_memory_mib();
    let pods = cluster.informers().pods.len();
    let nodes = cluster.informers().nodes.len();
    let resource_version = cluster.store().resource_version();

    let client = cluster.client_with(|c| c.default_retry = false);
    let clients: Vec<kube::Client> = (0..cli.clients).map(|_| client.clone()).collect();
    let (pod_lists, listed_pods) = list_latency(clients.iter().map(|c| Api::<Pod>::all(c.clone())).collect()).await?;
    let (node_lists, listed_nodes) =
        list_latency(clients.iter().map(|c| Api::<Node>::all(c.clone())).collect()).await?;

    let workers = cluster.workers().to_vec();
    let target = workers.first().cloned().unwrap_or_else(|| cluster.node_names()[0].clone());
    let nodes_api: Api<Node> = Api::all(client.clone());
    let node_watch = {
        let nodes_api = nodes_api.clone();
        let target = target.clone();
        watch_latency(
            clients.iter().map(|c| (Api::<Node>::all(c.clone()), WatchParams::default())).collect(),
            cli.watch_writes,
            move |seq| {
                let (api, target) = (nodes_api.clone(), target.clone());
                Box::pin(async move {
                    let patch = json!({"metadata": {"annotations": {"bench.dev/seq": seq.to_string()}}});
                    api.patch(&target, &PatchParams::default(), &Patch::Merge(patch)).await?;
                    Ok(())
                })
            },
            |node: &Node| sequence(node.metadata.annotations.as_ref()),
        )
        .await?
    };
    // Agent-style watches: each client watches the pods of its own node (fieldSelector spec.nodeName); every
    // timed write annotates one pod on each of those nodes.
    let pods_api: Api<Pod> = Api::all(client.clone());
    let mut probes = Vec::new();
    let mut watchers = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let node = workers.get(i % workers.len().max(1)).cloned().unwrap_or_else(|| target.clone());
        let on_node = ListParams::default().fields(&format!("spec.nodeName={node}")).limit(1);
        let probe = pods_api.list(&on_node).await?.items.into_iter().next().context("a pod on a worker")?;
        probes.push((probe.metadata.namespace.unwrap_or_default(), probe.metadata.name.unwrap_or_default()));
        watchers.push((Api::<Pod>::all(c.clone()), WatchParams::default().fields(&format!("spec.nodeName={node}"))));
    }
    let pod_watch = {
        let client = client.clone();
        watch_latency(
            watchers,
            cli.watch_writes,
            move |seq| {
                let (client, probes) = (client.clone(), probes.clone());
                Box::pin(async move {
                    let patch = Patch::Merge(json!({"metadata": {"annotations": {"bench.dev/seq": seq.to_string()}}}));
                    for (namespace, name) in &probes {
                        Api::<Pod>::namespaced(client.clone(), namespace)
                            .patch(name, &PatchParams::default(), &patch)
                            .await?;
                    }
                    Ok(())
                })
            },
            |pod: &Pod| sequence(pod.metadata.annotations.as_ref()),
        )
        .await?
    };
    let (rss_after_clients, peak) = own_memory_mib();
    let report = json!({
        "nodes": nodes,
        "pods": pods,
        "resourceVersion": resource_version,
        "loadSeconds": (load_seconds * 10.0).round() / 10.0,
        "rssMiB": {"loaded": rss_loaded.round(), "afterClients": rss_after_clients.round(), "peak": peak.round()},
        "clients": cli.clients,
        "listAllPods": {"items": listed_pods, "latency": pod_lists},
        "listAllNodes": {"items": listed_nodes, "latency": node_lists},
        "watchNodesEventLatency": node_watch,
        "watchPodsByNodeEventLatency": pod_watch,
        "settings": {"controlPlanes": cli.control_planes, "podsPerWorker": cli.pods_per_worker,
                     "replicas": cli.replicas, "statefulsetEvery": cli.statefulset_every,
                     "historyPerKind": cli.history_per_kind,
                     "heartbeat": format!("{:?}", cli.heartbeat), "leaseRenew": format!("{:?}", cli.lease_renew)},
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    cluster.shutdown().await;
    Ok(())
}
