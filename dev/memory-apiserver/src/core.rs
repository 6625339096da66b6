//! The server core shared by the HTTP front end and the in-process `Store`: state, registry, metrics, faults.

use super::admission::Admission;
use super::auth::{Auth, UserInfo};
use super::config::ApiServerConfig;
use super::error::ApiError;
use super::faults::{Controllers, FaultTable};
use super::field_validation::FieldValidation;
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
    /// `?fieldValidation` ([`FieldValidation::Ignore`] for in-process callers, which send typed objects).
    pub field_validation: FieldValidation,
    /// Strict-decoding findings already made in the request body (duplicates in a patch), reported together
    /// with those of the patched object.
    pub body_findings: &'a [String],
    /// The authenticated user; `None` for the server's own in-process writers, which admission does not see.
    pub user: Option<&'a UserInfo>,
    /// Where field-validation findings under [`FieldValidation::Warn`] and admission's warnings go (the
    /// response's `Warning` headers).
    pub warnings: Option<&'a Mutex<Vec<String>>>,
}

impl<'a> Ctx<'a> {
    /// A request of `user_agent` without options, made by the server itself.
    pub fn new(user_agent: &'a str) -> Self {
        Ctx {
            user_agent,
            field_manager: None,
            dry_run: false,
            field_validation: FieldValidation::Ignore,
            body_findings: &[],
            user: None,
            warnings: None,
        }
    }

    /// Applies the field-validation directive to `findings`: the error under Strict (made by `error`), a
    /// warning each under Warn, nothing under Ignore.
    pub fn field_findings(
        &self,
        findings: Vec<String>,
        error: impl FnOnce(&[String]) -> ApiError,
    ) -> Result<(), ApiError> {
        if findings.is_empty() {
            return Ok(());
        }
        match self.field_validation {
            FieldValidation::Ignore => Ok(()),
            FieldValidation::Strict => Err(error(&findings)),
            FieldValidation::Warn => {
                if let Some(warnings) = self.warnings {
                    warnings.lock().extend(findings);
                }
                Ok(())
            }
        }
    }

    /// The manager recorded for non-apply writes: `fieldManager`, else derived from the User-Agent as upstream's
    /// `prefixFromUserAgent` does: the part before the first `/`, without unprintable characters, cut to
    /// [`FIELD_MANAGER_MAX_LENGTH`] bytes.
    pub fn manager(&self) -> std::borrow::Cow<'a, str> {
        match self.field_manager {
            Some(manager) => std::borrow::Cow::Borrowed(manager),
            None => {
                let prefix = self.user_agent.split('/').next().unwrap_or_default();
                let mut manager = String::with_capacity(prefix.len());
                for c in prefix.chars().filter(|c| *c == ' ' || !(c.is_control() || c.is_whitespace())) {
                    if manager.len() + c.len_utf8() > FIELD_MANAGER_MAX_LENGTH {
                        break;
                    }
                    manager.push(c);
                }
                std::borrow::Cow::Owned(manager)
            }
        }
    }
}

/// The longest `fieldManager` upstream accepts (`validation.FieldManagerMaxLength`).
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;

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
    /// Tokens and the RBAC authorizer.
    pub auth: Auth,
    /// ValidatingAdmissionPolicies.
    pub admission: Admission,
    /// The `gitVersion` `/version` reports: the configured one until a simulated `kubeadm upgrade apply`
    /// changes it ([`super::ApiServer::set_version`]).
    pub version: RwLock<String>,
    /// `accept` calls of the HTTP listener that failed (out of descriptors, say).
    pub accept_failures: std::sync::atomic::AtomicU64,
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
        for (kind, namespace, mut object) in super::bootstrap::bootstrap_objects(&config.namespaces) {
            if let Some(rt) = registry.types().find(|t| t.is(kind)) {
                let name = super::object::name_of(&object).to_owned();
                let metadata = super::object::metadata_mut(&mut object);
                metadata.insert("uid".into(), json!(super::object::new_uid()));
                metadata.insert("creationTimestamp".into(), json!(now_rfc3339()));
                let rt = rt.clone();
                state.put(&rt, object_key(namespace, &name), &mut object);
            }
        }
        // The RBAC objects a real server bootstraps (cluster-admin for system:masters, discovery, self reviews).
        for mut object in super::auth::bootstrap::objects() {
            let kind = object.get("kind").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
            if let Some(rt) = registry.by_kind("rbac.authorization.k8s.io/v1", &kind) {
                let name = super::object::name_of(&object).to_owned();
                let metadata = super::object::metadata_mut(&mut object);
                metadata.insert("uid".into(), json!(super::object::new_uid()));
                metadata.insert("creationTimestamp".into(), json!(now_rfc3339()));
                state.put(&rt, object_key(None, &name), &mut object);
            }
        }
        Arc::new(Core {
            version: RwLock::new(config.git_version.clone()),
            accept_failures: Default::default(),
            config,
            state: Mutex::new(state),
            registry: RwLock::new(registry),
            metrics: Metrics::default(),
            request_log: RequestLog::default(),
            faults: FaultTable::default(),
            controllers: Controllers::default(),
            rv_changes,
            dev_routes: RwLock::new(None),
            auth: Auth::default(),
            admission: Admission::default(),
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
