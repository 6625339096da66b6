//! [`ApiServer`]: starts the core, the HTTP listener and the server's own lifecycle loop, writes a kubeconfig.

use super::config::ApiServerConfig;
use super::core::Core;
use super::faults::Faults;
use super::metrics::Metrics;
use super::request_log::RequestLog;
use super::store::Store;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often the lifecycle loop looks for terminating namespaces and deleted CRDs.
const LIFECYCLE_INTERVAL: Duration = Duration::from_millis(100);

/// Controller name of the namespace lifecycle loop (pausable through the fault API).
pub const NAMESPACE_LIFECYCLE: &str = "namespace";
/// Controller name of the CRD cleanup loop.
pub const CRD_CLEANUP: &str = "crd-cleanup";

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listening socket could not be opened.
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for.
        port: u16,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig could not be written.
    #[error("cannot write the kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Where it should have gone.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// A running in-memory API server. Dropping it stops it (as [`ApiServer::shutdown`] does, without waiting).
pub struct ApiServer {
    core: Arc<Core>,
    address: SocketAddr,
    url: String,
    kubeconfig: PathBuf,
    temporary_dir: Option<PathBuf>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl ApiServer {
    /// Starts a server on 127.0.0.1 and writes its kubeconfig.
    pub async fn start(config: ApiServerConfig) -> Result<ApiServer, StartError> {
        let port = config.port;
        let listener =
            TcpListener::bind(("127.0.0.1", port)).await.map_err(|source| StartError::Bind { port, source })?;
        let address = listener.local_addr().map_err(|source| StartError::Bind { port, source })?;
        let url = format!("http://{address}");
        let (kubeconfig, temporary_dir) = match &config.kubeconfig_path {
            Some(path) => (path.clone(), None),
            None => {
                let dir = std::env::temp_dir().join(format!("dev-apiserver-{}-{}", std::process::id(), address.port()));
                (dir.join("kubeconfig"), Some(dir))
            }
        };
        write_kubeconfig(&kubeconfig, &url)?;
        let core = Core::new(config);
        let shutdown = CancellationToken::new();
        let serving = tokio::spawn(super::http::serve(listener, core.clone(), shutdown.clone()));
        let lifecycle = tokio::spawn(lifecycle(core.clone(), shutdown.clone()));
        Ok(ApiServer { core, address, url, kubeconfig, temporary_dir, shutdown, tasks: vec![serving, lifecycle] })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The listening address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The kubeconfig file (context `dev`, no authentication).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kube-rs configuration for the server, with kube-rs defaults (including its retries of 429/503/504).
    pub fn kube_config(&self) -> kube::Config {
        let uri: http::Uri = match self.url.parse() {
            Ok(uri) => uri,
            Err(_) => unreachable!("the URL is made from a socket address"),
        };
        kube::Config::new(uri)
    }

    /// A kube-rs client with default settings.
    pub fn client(&self) -> kube::Client {
        self.client_with(|_| {})
    }

    /// A kube-rs client with adjusted settings (`|c| c.default_retry = false`).
    pub fn client_with(&self, adjust: impl FnOnce(&mut kube::Config)) -> kube::Client {
        let mut config = self.kube_config();
        adjust(&mut config);
        match kube::Client::try_from(config) {
            Ok(client) => client,
            // A plain-HTTP configuration without credentials has nothing that can fail to load.
            Err(error) => unreachable!("a plain-HTTP kube client always builds: {error}"),
        }
    }

    /// The in-process store, writing as `dev/test`.
    pub fn store(&self) -> Store {
        Store::new(self.core.clone(), "dev/test")
    }

    /// Fault injection.
    pub fn faults(&self) -> Faults {
        Faults::new(self.core.clone())
    }

    /// Request metrics.
    pub fn metrics(&self) -> Metrics {
        self.core.metrics.clone()
    }

    /// The log of answered requests (off until [`RequestLog::enable`]).
    pub fn request_log(&self) -> RequestLog {
        self.core.request_log.clone()
    }

    /// Serves `routes` under `/_dev/` (besides `/_dev/metrics` and `/_dev/faults`), replacing earlier ones.
    pub fn mount_dev_routes(&self, routes: Arc<dyn super::core::DevRoutes>) {
        *self.core.dev_routes.write() = Some(routes);
    }

    /// Number of open watches (HTTP and in-process).
    pub fn watcher_count(&self) -> usize {
        self.core.state.lock().watcher_count()
    }

    /// Stops the server: ends every connection and watch, removes a temporary kubeconfig.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        self.core.state.lock().close_all_watches();
        self.remove_temporary_dir();
    }

    fn remove_temporary_dir(&mut self) {
        if let Some(dir) = self.temporary_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.core.state.lock().close_all_watches();
        self.remove_temporary_dir();
    }
}

fn write_kubeconfig(path: &Path, url: &str) -> Result<(), StartError> {
    let error = |source| StartError::Kubeconfig { path: path.to_owned(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(error)?;
    }
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dev\n  cluster:\n    server: {url}\ncontexts:\n- name: dev\n  context:\n    cluster: dev\n    user: dev\n    namespace: default\ncurrent-context: dev\nusers:\n- name: dev\n  user: {{}}\n"
    );
    std::fs::write(path, text).map_err(error)
}

/// Empties terminating namespaces and the objects of deleted CRDs, as upstream's controllers do.
async fn lifecycle(core: Arc<Core>, shutdown: CancellationToken) {
    let namespaces = core.controllers.gate(NAMESPACE_LIFECYCLE);
    let crds = core.controllers.gate(CRD_CLEANUP);
    let mut tick = tokio::time::interval(LIFECYCLE_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !namespaces.is_paused() {
            core.finalize_namespaces();
        }
        if !crds.is_paused() {
            core.cleanup_crds();
        }
    }
}
