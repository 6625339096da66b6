//! [`ApiServer`]: starts the core, the HTTP listener and the server's own lifecycle loop, writes a kubeconfig.

use super::auth::{AccessLog, Identity, UserInfo};
use super::config::ApiServerConfig;
use super::core::Core;
use super::error::ApiError;
use super::fault_injection::Faults;
use super::http::tls::Tls;
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
    /// The TLS identity could not be made.
    #[error("{0}")]
    Tls(#[from] super::http::tls::TlsError),
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
    access: KubeconfigAccess,
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
        let tls = Tls::generate()?;
        let core = Core::new(config);
        let access = KubeconfigAccess { https_url: format!("https://{address}"), ca_pem: tls.ca_pem.clone() };
        write_kubeconfig(&kubeconfig, &access, core.auth.admin_token())?;
        let shutdown = CancellationToken::new();
        let serving = tokio::spawn(super::http::serve(listener, core.clone(), tls, shutdown.clone()));
        let lifecycle = tokio::spawn(lifecycle(core.clone(), shutdown.clone()));
        Ok(ApiServer {
            core,
            address,
            url,
            access,
            kubeconfig,
            temporary_dir,
            shutdown,
            tasks: vec![serving, lifecycle],
        })
    }

    /// `http://127.0.0.1:PORT`: plain HTTP, what kube-rs clients of tests use (with a bearer token).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `https://127.0.0.1:PORT`: the same port over TLS, what kubeconfigs name (kubectl sends credentials only over
    /// TLS).
    pub fn https_url(&self) -> &str {
        &self.access.https_url
    }

    /// PEM of the CA of the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.access.ca_pem
    }

    /// The listening address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The kubeconfig file (context `dev`, the administrator's token: group `system:masters`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kube-rs configuration for the server as the administrator, with kube-rs defaults (including its retries
    /// of 429/503/504).
    pub fn kube_config(&self) -> kube::Config {
        self.kube_config_with_token(self.core.auth.admin_token())
    }

    /// A kube-rs configuration that authenticates with `token`.
    pub fn kube_config_with_token(&self, token: &str) -> kube::Config {
        let uri: http::Uri = match self.url.parse() {
            Ok(uri) => uri,
            Err(_) => unreachable!("the URL is made from a socket address"),
        };
        let mut config = kube::Config::new(uri);
        config.auth_info.token = Some(secrecy::SecretString::from(token.to_owned()));
        config
    }

    /// A kube-rs configuration for `identity` (a fresh token; see [`ApiServer::token_for`]).
    pub fn kube_config_for(&self, identity: &Identity) -> Result<kube::Config, ApiError> {
        Ok(self.kube_config_with_token(&self.token_for(identity)?))
    }

    /// A kube-rs client as the administrator, with default settings.
    pub fn client(&self) -> kube::Client {
        self.client_with(|_| {})
    }

    /// A kube-rs client as the administrator, with adjusted settings (`|c| c.default_retry = false`).
    pub fn client_with(&self, adjust: impl FnOnce(&mut kube::Config)) -> kube::Client {
        let mut config = self.kube_config();
        adjust(&mut config);
        build_client(config)
    }

    /// A kube-rs client that authenticates with `token` and reaches this server without a socket (see
    /// [`super::http::in_memory_client`]): for runs with thousands of clients in one process.
    pub fn in_memory_client(&self, token: &str, user_agent: &str) -> Result<kube::Client, ApiError> {
        super::http::in_memory_client(self.core.clone(), self.address().to_string().into(), token, user_agent)
            .map_err(|e| ApiError::bad_request(format!("a header of the in-memory client: {e}")))
    }

    /// A kube-rs client for `identity`, e.g. `Identity::service_account_on("ns", "agent", "worker-0")`.
    pub fn client_as(&self, identity: &Identity) -> Result<kube::Client, ApiError> {
        Ok(build_client(self.kube_config_for(identity)?))
    }

    /// A bearer token for `identity`: the administrator's; a static token of a user; a service-account token
    /// (bound to the Node for `serviceaccount:NS:NAME@NODE`, with the node-name and node-uid extra), valid while
    /// the ServiceAccount (and Node) exist, which is created when missing, as `kubectl create serviceaccount`.
    pub fn token_for(&self, identity: &Identity) -> Result<String, ApiError> {
        self.core.issue_token(identity)
    }

    /// [`ApiServer::token_for`] as a function that outlives this handle (for components started later).
    pub fn token_issuer(&self) -> impl Fn(&Identity) -> Result<String, ApiError> + Send + Sync + 'static {
        let core = self.core.clone();
        move |identity: &Identity| core.issue_token(identity)
    }

    /// The user a token stands for, as the server authenticates it (401 when invalid).
    pub fn user_of_token(&self, token: &str) -> Result<UserInfo, ApiError> {
        self.core.authenticate(Some(&format!("Bearer {token}")))
    }

    /// Writes a kubeconfig for `identity` into `path` (context `dev`, a fresh token).
    pub fn write_kubeconfig_for(&self, identity: &Identity, path: &Path) -> Result<(), StartError> {
        let token = self.token_for(identity).map_err(|error| StartError::Kubeconfig {
            path: path.to_owned(),
            source: std::io::Error::other(error.to_string()),
        })?;
        write_kubeconfig(path, &self.access, &token)
    }

    /// A kubeconfig for `identity`, written beside the server's own (`kubeconfig-<identity>`); returns its path.
    pub fn kubeconfig_for(&self, identity: &Identity) -> Result<PathBuf, StartError> {
        let dir = self.kubeconfig.parent().map(Path::to_owned).unwrap_or_else(std::env::temp_dir);
        let name = self.kubeconfig.file_name().and_then(|n| n.to_str()).unwrap_or("kubeconfig");
        let path = dir.join(format!("{name}-{}", identity.slug()));
        self.write_kubeconfig_for(identity, &path)?;
        Ok(path)
    }

    /// The in-process store, writing as `dev/test`, without authorization or admission (the server itself).
    pub fn store(&self) -> Store {
        Store::new(self.core.clone(), "dev/test")
    }

    /// The authorization decisions of users outside `system:masters`, once recording is started.
    pub fn access_log(&self) -> AccessLog {
        AccessLog::new(self.core.clone())
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

    /// The `gitVersion` `/version` reports now.
    pub fn version(&self) -> String {
        self.core.version.read().clone()
    }

    /// Makes `/version` (and the OpenAPI documents' info) report `git_version` from now on, as an API server
    /// does after `kubeadm upgrade apply` replaced it.
    pub fn set_version(&self, git_version: &str) {
        *self.core.version.write() = git_version.to_owned();
    }

    /// A function that does [`ApiServer::set_version`] (for the simulated hosts' kubeadm).
    pub fn version_setter(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let core = self.core.clone();
        move |git_version: &str| *core.version.write() = git_version.to_owned()
    }

    /// Serves `routes` under `/_dev/` (besides `/_dev/metrics` and `/_dev/faults`), replacing earlier ones.
    pub fn mount_dev_routes(&self, routes: Arc<dyn super::core::DevRoutes>) {
        *self.core.dev_routes.write() = Some(routes);
    }

    /// Number of open watches (HTTP and in-process).
    pub fn watcher_count(&self) -> usize {
        self.core.state.lock().watcher_count()
    }

    /// Watches closed so far because their consumer fell a whole buffer behind.
    pub fn slow_watchers_closed(&self) -> u64 {
        self.core.state.lock().counters.slow_watchers_closed
    }

    /// `accept` calls of the listener that failed so far (out of descriptors, say).
    pub fn accept_failures(&self) -> u64 {
        self.core.accept_failures.load(std::sync::atomic::Ordering::Relaxed)
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

fn build_client(config: kube::Config) -> kube::Client {
    match kube::Client::try_from(config) {
        Ok(client) => client,
        // A plain-HTTP configuration with a bearer token has nothing that can fail to load.
        Err(error) => unreachable!("a plain-HTTP kube client always builds: {error}"),
    }
}

/// What a kubeconfig needs to reach the server over TLS.
#[derive(Debug, Clone)]
struct KubeconfigAccess {
    https_url: String,
    ca_pem: String,
}

fn write_kubeconfig(path: &Path, access: &KubeconfigAccess, token: &str) -> Result<(), StartError> {
    use base64::Engine;
    let error = |source| StartError::Kubeconfig { path: path.to_owned(), source };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(error)?;
    }
    let url = &access.https_url;
    let ca = base64::engine::general_purpose::STANDARD.encode(&access.ca_pem);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dev\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\ncontexts:\n- name: dev\n  context:\n    cluster: dev\n    user: dev\n    namespace: default\ncurrent-context: dev\nusers:\n- name: dev\n  user:\n    token: {token}\n"
    );
    std::fs::write(path, text).map_err(error)?;
    // The file holds a bearer token: readable by its owner only, as kubectl writes kubeconfigs.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(error)?;
    }
    Ok(())
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
