//! Scale benchmark of the in-memory API server: loads kwok-like nodes and pods, then runs concurrent kube-rs
//! clients that list (paginated) and watch them while a writer changes pods. Prints one JSON document.
//!
//! `cargo run --release -p dev --bin apiserver-bench -- --nodes 5000 --pods-per-node 30 --clients 10`

use anyhow::Context as _;
use clap::Parser;
use dev::apiserver::{ApiServer, ApiServerConfig, Gvr, Patch, Store, WatchEvent};
use dev::measure::{own_memory_mib, quantile};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PatchParams, PostParams, WatchEvent as KubeWatchEvent, WatchParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Load kwok-like nodes and pods into the in-memory API server and measure lists and watches")]
struct Args {
    /// Nodes to create.
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    /// Pods per node.
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// Concurrent kube-rs clients, each listing all pods (paginated) and watching them.
    #[arg(long, default_value_t = 10)]
    clients: usize,
    /// Full lists per client.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Page size of the lists.
    #[arg(long, default_value_t = 500)]
    page_size: u32,
    /// Pod status writes made while the clients watch.
    #[arg(long, default_value_t = 2000)]
    writes: usize,
    /// Writes per second.
    #[arg(long, default_value_t = 200)]
    write_rate: u64,
    /// In-process watchers of `pods?fieldSelector=spec.nodeName=<node>`, one per node up to this many (what
    /// per-node agents do).
    #[arg(long, default_value_t = 5000)]
    node_watchers: usize,
    /// Requests per kind in the access phase (authentication, RBAC, admission).
    #[arg(long, default_value_t = 2000)]
    access_requests: usize,
}

/// Mean and quantiles of `count` runs of `request`, in microseconds.
async fn timed<F, Fut>(count: usize, mut request: F) -> anyhow::Result<Value>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut micros = Vec::with_capacity(count);
    for i in 0..count {
        let started = Instant::now();
        request(i).await?;
        micros.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let mean = micros.iter().sum::<f64>() / micros.len().max(1) as f64;
    let mut summary = percentiles(micros);
    summary["mean"] = json!(round(mean));
    Ok(summary)
}

/// What authentication, authorization and admission cost per request, with `deploy/operator.yaml` installed:
/// the same GET as the administrator (system:masters: no RBAC) and as an agent (RBAC), and the same Node write
/// in process without a user (neither) and as the agent (RBAC and the manifest's ValidatingAdmissionPolicy,
/// which selects it and evaluates every CEL expression).
async fn access_costs(server: &ApiServer, count: usize) -> anyhow::Result<Value> {
    let access = dev::operator::Access::install(server)?;
    let node = "node-00000";
    let agent_token = access.agent_token(node).map_err(anyhow::Error::msg)?;
    let agent_user = server.user_of_token(&agent_token)?;
    let path = format!("/api/v1/nodes/{node}");
    let get = |client: kube::Client| {
        let path = path.clone();
        move |_| {
            let (client, path) = (client.clone(), path.clone());
            async move {
                let request = http::Request::get(path).body(Vec::new())?;
                let _: Value = client.request(request).await?;
                Ok(())
            }
        }
    };
    let admin_get = timed(count, get(server.client())).await?;
    let agent_client = kube::Client::try_from(server.kube_config_with_token(&agent_token))?;
    let agent_get = timed(count, get(agent_client)).await?;
    let nodes = Gvr::new("", "v1", "nodes");
    let write = |store: Store| {
        let nodes = nodes.clone();
        move |i: usize| {
            let patch =
                Patch::Merge(json!({"metadata": {"annotations": {"update.edgeless.systems/state": i.to_string()}}}));
            let result = store.patch(&nodes, None, node, &patch, &PatchParams::default()).map(|_| ());
            async move { result.map_err(anyhow::Error::from) }
        }
    };
    let server_write = timed(count, write(server.store())).await?;
    let agent_write = timed(count, write(server.store().as_user(agent_user))).await?;
    Ok(json!({
        "requests": count,
        "http_get_node_us": {"admin": admin_get, "agent_rbac": agent_get},
        "in_process_patch_node_us": {"server": server_write, "agent_rbac_and_policy": agent_write},
    }))
}

fn node(name: &str) -> Value {
    let conditions: Vec<Value> = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"]
        .iter()
        .map(|t| {
            json!({"type": t, "status": if *t == "Ready" { "True" } else { "False" }, "reason": format!("Kubelet{t}"),
                "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z"})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "kwok", "type": "kwok"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}},
        "spec": {"providerID": format!("kwok://{name}"), "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "kwok-v0.7.0", "kernelVersion": "kwok-v0.7.0",
                "kubeProxyVersion": "", "kubeletVersion": "kwok-v0.7.0", "machineID": "", "operatingSystem": "linux",
                "osImage": "", "systemUUID": ""},
            "phase": "Running"
        }
    })
}

fn pod(name: &str, node: &str, index: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench", "labels": {"app": format!("app-{}", index % 50), "pod-template-hash": "5d8f7c9b6"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("app-{}-5d8f7c9b6", index % 50),
                "uid": "3b6a8f0e-1111-4222-8333-944445555666", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"nodeName": node, "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "app", "image": "registry.example/app:1.0",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}}]}
    })
}

fn pod_status(index: usize, node_index: usize) -> Value {
    let t = "2026-01-01T00:00:00Z";
    let conditions: Vec<Value> = ["Initialized", "Ready", "ContainersReady", "PodScheduled"]
        .iter()
        .map(|c| json!({"type": c, "status": "True", "lastTransitionTime": t}))
        .collect();
    json!({"status": {
        "phase": "Running", "hostIP": format!("10.0.{}.{}", node_index / 250, node_index % 250),
        "podIP": format!("10.{}.{}.{}", 100 + index / 65536, (index / 256) % 256, index % 256), "startTime": t, "qosClass": "Burstable",
        "conditions": conditions,
        "containerStatuses": [{"name": "app", "image": "registry.example/app:1.0", "imageID": "", "ready": true, "restartCount": 0,
            "started": true, "state": {"running": {"startedAt": t}}}]
    }})
}

fn percentiles(mut values: Vec<f64>) -> Value {
    if values.is_empty() {
        return json!(null);
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let at = |q| quantile(&values, q);
    json!({"count": values.len(), "p50": round(at(0.5)), "p95": round(at(0.95)), "p99": round(at(0.99)), "max": round(at(1.0))})
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

async fn load(store: &Store, args: &Args) -> anyhow::Result<()> {
    let nodes = Gvr::new("", "v1", "nodes");
    let pods = Gvr::new("", "v1", "pods");
    let namespaces = Gvr::new("", "v1", "namespaces");
    store
        .create(&namespaces, None, json!({"metadata": {"name": "bench"}}), &PostParams::default())
        .context("namespace")?;
    for n in 0..args.nodes {
        store.create(&nodes, None, node(&format!("node-{n:05}")), &PostParams::default()).context("node")?;
    }
    let mut index = 0;
    for n in 0..args.nodes {
        let node_name = format!("node-{n:05}");
        for p in 0..args.pods_per_node {
            let name = format!("pod-{n:05}-{p:02}");
            store.create(&pods, Some("bench"), pod(&name, &node_name, index), &PostParams::default()).context("pod")?;
            store
                .patch_status(&pods, Some("bench"), &name, &Patch::Merge(pod_status(index, n)), &PatchParams::default())
                .context("pod status")?;
            index += 1;
        }
        if n % 64 == 63 {
            // Let the runtime breathe between batches.
            tokio::task::yield_now().await;
        }
    }
    Ok(())
}

/// Full paginated lists read as bytes, without decoding the pods: what the server itself costs.
async fn raw_lists(client: &kube::Client, page_size: u32, count: usize) -> anyhow::Result<Vec<f64>> {
    let mut times = Vec::new();
    for _ in 0..count {
        let started = Instant::now();
        let mut token: Option<String> = None;
        loop {
            let mut uri = format!("/api/v1/pods?limit={page_size}");
            if let Some(token) = &token {
                uri.push_str(&format!("&continue={token}"));
            }
            let text = client.request_text(http::Request::get(uri).body(Vec::new())?).await?;
            // The continue token sits in the list metadata, before the items.
            let head = &text[..text.find("\"items\"").unwrap_or(text.len())];
            token = head.split("\"continue\":\"").nth(1).and_then(|rest| rest.split('"').next()).map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(times)
}

struct ClientReport {
    page_ms: Vec<f64>,
    list_ms: Vec<f64>,
    items: usize,
    watch_latency_ms: Vec<f64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = ApiServer::start(ApiServerConfig::default()).await?;
    let store = server.store().with_identity("bench/loader");
    let (rss_start, _) = own_memory_mib();

    let started = Instant::now();
    load(&store, &args).await?;
    let load_seconds = started.elapsed().as_secs_f64();
    let (rss_loaded, _) = own_memory_mib();
    let pod_count = args.nodes * args.pods_per_node;

    // What a per-node agent's first list costs: pods?fieldSelector=spec.nodeName=<node>, in process.
    let mut node_list_ms = Vec::new();
    for n in (0..args.nodes).step_by((args.nodes / 1000).max(1)) {
        let params = ListParams::default().fields(&format!("spec.nodeName=node-{n:05}"));
        let started = Instant::now();
        let page = store.list(&Gvr::new("", "v1", "pods"), None, &params)?;
        node_list_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(page.items.len() == args.pods_per_node, "node-{n:05} lists {} pods", page.items.len());
    }

    // Per-node watchers, in process (what 5000 agents watching their node's pods cost the server).
    let node_events = Arc::new(AtomicU64::new(0));
    let pods_gvr = Gvr::new("", "v1", "pods");
    let mut node_watch_tasks = Vec::new();
    for n in 0..args.node_watchers.min(args.nodes) {
        let params = WatchParams::default().fields(&format!("spec.nodeName=node-{n:05}"));
        let rv = store.resource_version().to_string();
        let mut stream = store.watch(&pods_gvr, None, &params, &rv)?;
        let events = node_events.clone();
        node_watch_tasks.push(tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                if matches!(event, WatchEvent::Modified(_)) {
                    events.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }

    // Write number (the `bench/write` annotation) → when it was made.
    let written: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let watching = Arc::new(tokio::sync::Barrier::new(args.clients + 1));
    let done = tokio_util::sync::CancellationToken::new();
    let mut clients = Vec::new();
    for c in 0..args.clients {
        let client = server.client_with(|config| {
            config.headers.push((
                http::header::USER_AGENT,
                http::HeaderValue::from_str(&format!("bench/client-{c}"))
                    .unwrap_or(http::HeaderValue::from_static("bench")),
            ));
        });
        let api: Api<Pod> = Api::all(client);
        let (written, watching, done) = (written.clone(), watching.clone(), done.clone());
        let (rounds, page_size) = (args.rounds, args.page_size);
        clients.push(tokio::spawn(async move {
            let mut report =
                ClientReport { page_ms: Vec::new(), list_ms: Vec::new(), items: 0, watch_latency_ms: Vec::new() };
            let mut watch_rv = String::new();
            let mut watcher = None;
            for round in 0..rounds {
                let list_started = Instant::now();
                let mut token: Option<String> = None;
                let mut items = 0;
                loop {
                    let mut params = ListParams::default().limit(page_size);
                    if let Some(token) = &token {
                        params = params.continue_token(token);
                    }
                    let page_started = Instant::now();
                    let page = api.list(&params).await?;
                    report.page_ms.push(page_started.elapsed().as_secs_f64() * 1000.0);
                    items += page.items.len();
                    if round == 0 {
                        watch_rv = page.metadata.resource_version.clone().unwrap_or_default();
                    }
                    token = page.metadata.continue_.filter(|t| !t.is_empty());
                    if token.is_none() {
                        break;
                    }
                }
                report.list_ms.push(list_started.elapsed().as_secs_f64() * 1000.0);
                report.items = items;
                if round == 0 {
                    let stream = api.watch(&WatchParams::default().timeout(290), &watch_rv).await?;
                    let written = written.clone();
                    let done = done.clone();
                    watcher = Some(tokio::spawn(async move {
                        let mut latencies = Vec::new();
                        let mut stream = stream.boxed();
                        loop {
                            let event = tokio::select! {
                                () = done.cancelled() => break,
                                event = stream.try_next() => event,
                            };
                            match event {
                                Ok(Some(KubeWatchEvent::Modified(pod))) => {
                                    let write = pod
                                        .metadata
                                        .annotations
                                        .as_ref()
                                        .and_then(|a| a.get("bench/write"))
                                        .and_then(|w| w.parse::<u64>().ok());
                                    if let Some(at) = write.and_then(|w| written.lock().get(&w).copied()) {
                                        latencies.push(at.elapsed().as_secs_f64() * 1000.0);
                                    }
                                }
                                Ok(Some(_)) => {}
                                Ok(None) | Err(_) => break,
                            }
                        }
                        latencies
                    }));
                    watching.wait().await;
                }
            }
            if let Some(watcher) = watcher {
                report.watch_latency_ms = watcher.await.unwrap_or_default();
            }
            Ok::<_, kube::Error>(report)
        }));
    }
    watching.wait().await;

    let writer_store = server.store().with_identity("bench/writer");
    let interval = Duration::from_secs_f64(1.0 / args.write_rate.max(1) as f64);
    let mut tick = tokio::time::interval(interval);
    let write_started = Instant::now();
    for i in 0..args.writes {
        tick.tick().await;
        let index = (i * 7919) % pod_count.max(1);
        let name = format!("pod-{:05}-{:02}", index / args.pods_per_node.max(1), index % args.pods_per_node.max(1));
        let patch = Patch::Merge(json!({"metadata": {"annotations": {"bench/write": i.to_string()}}}));
        // The time goes in before the write: a watcher may see the event before the write returns.
        written.lock().insert(i as u64, Instant::now());
        writer_store.patch(&pods_gvr, Some("bench"), &name, &patch, &PatchParams::default())?;
    }
    let write_seconds = write_started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    done.cancel();

    let mut page_ms = Vec::new();
    let mut list_ms = Vec::new();
    let mut watch_ms = Vec::new();
    let mut items = 0;
    for client in clients {
        let report = client.await??;
        page_ms.extend(report.page_ms);
        list_ms.extend(report.list_ms);
        watch_ms.extend(report.watch_latency_ms);
        items = report.items;
    }
    let raw_list_ms = raw_lists(&server.client(), args.page_size, 3).await?;
    let access = access_costs(&server, args.access_requests).await?;
    let (rss, hwm) = own_memory_mib();
    let metrics = server.metrics();
    let by_verb: HashMap<String, u64> =
        metrics.by_verb().into_iter().map(|(v, c)| (v.as_str().to_owned(), c)).collect();
    let report = json!({
        "nodes": args.nodes,
        "pods": pod_count,
        "load_seconds": round(load_seconds),
        "load_objects_per_second": round((args.nodes + 2 * pod_count) as f64 / load_seconds),
        "rss_mib": {"start": round(rss_start), "after_load": round(rss_loaded), "end": round(rss), "high_water": round(hwm)},
        "list": {
            "clients": args.clients, "rounds_per_client": args.rounds, "page_size": args.page_size, "items_per_list": items,
            "page_latency_ms": percentiles(page_ms), "full_list_ms": percentiles(list_ms),
            "server_only_full_list_ms": percentiles(raw_list_ms),
            "in_process_node_list_ms": percentiles(node_list_ms)
        },
        "watch": {
            "writes": args.writes, "write_seconds": round(write_seconds), "client_watchers": args.clients,
            "event_latency_ms": percentiles(watch_ms),
            "node_watchers": args.node_watchers.min(args.nodes), "node_watcher_events": node_events.load(Ordering::Relaxed)
        },
        "requests_by_verb": by_verb,
        "access": access,
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    for task in node_watch_tasks {
        task.abort();
    }
    server.shutdown().await;
    Ok(())
}
