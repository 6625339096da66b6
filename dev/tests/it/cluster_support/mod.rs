//! Helpers shared by the cluster tests: a small cluster with fast timing, polling, and pod queries.

#![allow(dead_code)]

use dev::cluster::{Cluster, ClusterConfig, SampleWorkloads};
use dev::controllers::objects::{PodInfo, PodPhase};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Generous bound for anything a test waits for; never an assertion on speed.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// A cluster of `nodes` nodes (one control plane) with the default sample workloads and fast timing.
pub async fn cluster(nodes: usize) -> Cluster {
    cluster_with(|config| config.nodes = nodes).await
}

/// A cluster with adjusted settings.
pub async fn cluster_with(adjust: impl FnOnce(&mut ClusterConfig)) -> Cluster {
    let mut config = ClusterConfig { ready_timeout: PATIENCE, ..ClusterConfig::default() };
    adjust(&mut config);
    Cluster::start(config).await.expect("the cluster starts")
}

/// A cluster of one in-place worker and the given cloud scaling groups (name, role, size), without workloads.
pub async fn cloud_cluster(groups: &[(&str, cloud::GroupRole, u32)]) -> Cluster {
    cluster_with(|config| {
        config.nodes = 1;
        config.control_planes = 0;
        config.workloads = None;
        config.scaling_groups =
            groups.iter().map(|(name, role, size)| dev::cloud::GroupSpec::new(name, *role, *size)).collect();
    })
    .await
}

/// A cluster without sample workloads.
pub async fn bare_cluster(nodes: usize) -> Cluster {
    cluster_with(|config| {
        config.nodes = nodes;
        config.workloads = None;
    })
    .await
}

/// Sample workloads with one Deployment of `replicas` pods per `workers` and no StatefulSet or DaemonSet.
pub fn deployments_only(replicas: usize) -> SampleWorkloads {
    SampleWorkloads {
        replicas,
        pods_per_worker: 1,
        statefulset_every: 0,
        daemonset: false,
        ..SampleWorkloads::default()
    }
}

/// Polls `check` until it returns true; panics after [`PATIENCE`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// The cached pods in `namespace`.
pub fn pods_in(cluster: &Cluster, namespace: &str) -> Vec<Arc<PodInfo>> {
    let mut pods = Vec::new();
    cluster.informers().pods.for_each(|pod| {
        if pod.meta.namespace.as_deref() == Some(namespace) {
            pods.push(pod.clone());
        }
    });
    pods
}

/// True for a pod that is Running, Ready and not being deleted.
pub fn serving(pod: &PodInfo) -> bool {
    pod.phase == PodPhase::Running && pod.is_ready()
}

/// A raw answer: status and JSON body.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body as JSON (`null` when empty).
    pub body: serde_json::Value,
}

/// Sends `method` to `path` (e.g. `/_dev/hosts/worker-0/stage`) with a JSON body, as the agent does.
pub async fn request(cluster: &Cluster, method: &str, path: &str, body: Option<serde_json::Value>) -> Answer {
    use http_body_util::BodyExt;
    let mut request = http::Request::builder().method(method).uri(path);
    let bytes = match body {
        Some(body) => {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
            serde_json::to_vec(&body).unwrap()
        }
        None => Vec::new(),
    };
    // Without kube-rs's retries of 503, as the agent's client answers are taken as they come.
    let client = cluster.client_with(|config| config.default_retry = false);
    let response = client.send(request.body(kube::client::Body::from(bytes)).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() { serde_json::Value::Null } else { serde_json::from_slice(&bytes).unwrap() };
    Answer { status, body }
}

/// The node's Ready condition status (`None` before the kubelet reported).
pub fn node_ready(cluster: &Cluster, node: &str) -> Option<bool> {
    cluster.informers().nodes.get(node).and_then(|n| n.ready)
}
