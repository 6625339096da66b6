//! The server core shared by the HTTP front end and the in-process `Store`: state, registry, metrics, faults.

use super::config::ApiServerConfig;
use super::faults::{Controllers, FaultTable};
use super::metrics::Metrics;
use super::object::{now_rfc3339, object_key};
use super::request_log::RequestLog;
use super::resource::{Builtin, Gvr, Registry, ResourceType};
use super::state::{SnapshotCache, State};
use parking_lot::{Mutex, RwLock};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::watch;

/// Who makes a request and how.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// The User-Agent (HTTP) or the writer's identity (in-process).
    pub user_agent: &'a str,
    /// `?fieldManager=`.
    pub field_manager: Option<&'a str>,
    /// `?dryRun=All`.
    pub dry_run: bool,
}

impl<'a> Ctx<'a> {
    /// A request of `user_agent` without options.
    pub fn new(user_agent: &'a str) -> Self {
        Ctx { user_agent, field_manager: None, dry_run: false }
    }

    /// The manager recorded for non-apply writes: `fieldManager`, else the User-Agent up to its first `/`, as
    /// upstream derives it.
    pub fn manager(&self) -> &'a str {
        self.field_manager.unwrap_or_else(|| self.user_agent.split('/').next().unwrap_or(self.user_agent))
    }
}

/// The shared core of one server.
pub struct Core {
    /// Settings.
    pub config: ApiServerConfig,
    /// Objects, history, watchers.
    pub state: Mutex<State>,
    /// Served resource types.
    pub registry: RwLock<Registry>,
    /// Request counters.
    pub metrics: Metrics,
    /// The opt-in log of answered requests.
    pub request_log: RequestLog,
    /// Injected faults.
    pub faults: FaultTable,
    /// Pause switches of the built-in controllers.
    pub controllers: Controllers,
    /// The global resourceVersion, for waiters.
    pub rv_changes: watch::Receiver<u64>,
    /// Routes under `/_dev/` served by code outside the API server (the simulated hosts).
    pub dev_routes: RwLock<Option<Arc<dyn DevRoutes>>>,
}

/// Routes under `/_dev/` that code outside the API server mounts on its HTTP listener
/// ([`super::ApiServer::mount_dev_routes`]). Bodies are JSON both ways.
pub trait DevRoutes: Send + Sync + 'static {
    /// Answers `method` on `/_dev/{segments...}` (segments percent-decoded) with an HTTP status and a JSON body.
    fn handle(
        &self,
        method: http::Method,
        segments: Vec<String>,
        body: bytes::Bytes,
    ) -> futures::future::BoxFuture<'static, (u16, serde_json::Value)>;
}

impl Core {
    /// A core with the configured namespaces.
    pub fn new(config: ApiServerConfig) -> Arc<Core> {
        let snapshots = SnapshotCache::new(config.continue_ttl, config.snapshots_per_kind);
        let (mut state, rv_changes) = State::new(config.history_per_kind, config.watch_buffer, snapshots);
        let registry = Registry::new();
        if let Some(namespaces) = registry.get(&Gvr::new("", "v1", "namespaces")) {
            for name in &config.namespaces {
                let mut namespace = json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "uid": super::object::new_uid(), "creationTimestamp": now_rfc3339(),
                                 "labels": {"kubernetes.io/metadata.name": name}},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"}
                });
                state.put(&namespaces, object_key(None, name), &mut namespace);
            }
        }
        Arc::new(Core {
            config,
            state: Mutex::new(state),
            registry: RwLock::new(registry),
            metrics: Metrics::default(),
            request_log: RequestLog::default(),
            faults: FaultTable::default(),
            controllers: Controllers::default(),
            rv_changes,
            dev_routes: RwLock::new(None),
        })
    }

    /// The type served at `gvr`.
    pub fn resource(&self, gvr: &Gvr) -> Option<Arc<ResourceType>> {
        self.registry.read().get(gvr)
    }

    /// The built-in type of `kind`.
    pub fn builtin(&self, kind: Builtin) -> Arc<ResourceType> {
        let registry = self.registry.read();
        match registry.types().find(|t| t.is(kind)) {
            Some(t) => t.clone(),
            None => unreachable!("every built-in kind is registered at start and never removed"),
        }
    }
}
