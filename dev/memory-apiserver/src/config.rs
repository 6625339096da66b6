//! Settings of the API server.

use std::path::PathBuf;
use std::time::Duration;

/// How the API server runs. `ApiServerConfig::default()` suits tests: a free port, upstream-like timing.
#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Where to write the kubeconfig; `None` writes it into a fresh temporary directory.
    pub kubeconfig_path: Option<PathBuf>,
    /// Events kept per kind for watches to resume from (upstream's watch cache keeps 100 to a few thousand).
    pub history_per_kind: usize,
    /// Events buffered per watcher before it counts as a slow consumer and is closed.
    pub watch_buffer: usize,
    /// Interval of BOOKMARK events (upstream: about a minute).
    pub bookmark_interval: Duration,
    /// Timeout of watches that do not send `timeoutSeconds` (upstream: 30-60 minutes).
    pub default_watch_timeout: Duration,
    /// How long a paginated list's snapshot stays usable after its last page (upstream: until etcd compacts,
    /// every 5 minutes).
    pub continue_ttl: Duration,
    /// Snapshots kept per kind for continue tokens.
    pub snapshots_per_kind: usize,
    /// How long a list at a future resourceVersion waits before answering 504 (upstream: 3 s).
    pub future_rv_wait: Duration,
    /// Namespaces that exist from the start.
    pub namespaces: Vec<String>,
    /// `gitVersion` reported by `/version`.
    pub git_version: String,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        ApiServerConfig {
            port: 0,
            kubeconfig_path: None,
            history_per_kind: 10_000,
            watch_buffer: 1_000,
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(30 * 60),
            continue_ttl: Duration::from_secs(5 * 60),
            snapshots_per_kind: 32,
            future_rv_wait: Duration::from_secs(3),
            namespaces: ["default", "kube-system", "kube-public", "kube-node-lease"].map(str::to_owned).to_vec(),
            git_version: "v1.33.0".into(),
        }
    }
}
