//! An in-memory kube-apiserver: the product's controller and agents, kube-rs 5 clients and kubectl talk to it over
//! HTTP (and HTTPS) on 127.0.0.1, unmodified, as they would to a real one, and the dev cluster's own controllers,
//! kubelets and tests call the same operations in process. It is held to the real kube-apiserver's behaviour (the
//! behaviour of `/work/shared/docs/k8s-api-semantics.md`): never more lenient, so that nothing the product does
//! passes here and fails on a real cluster, and never stricter, so that nothing a real cluster accepts fails here.
//! A behaviour it cannot reproduce faithfully is left out rather than approximated.
//!
//! # Starting one
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use memory_apiserver::{ApiServer, ApiServerConfig};
//! let server = ApiServer::start(ApiServerConfig::default()).await?;
//! let client = server.client(); // kube::Client for http://127.0.0.1:PORT
//! let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, "default");
//! # let _ = (pods, server.kubeconfig_path(), server.url());
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # What it serves
//! namespaces, nodes (+status), pods (+status, +eviction, +binding), configmaps, secrets, serviceaccounts,
//! core/v1 and events.k8s.io/v1 events, policy/v1 poddisruptionbudgets (+status), coordination.k8s.io/v1 leases,
//! apps/v1 deployments/replicasets/statefulsets (+status, +scale), daemonsets (+status), controllerrevisions,
//! apiextensions.k8s.io/v1 customresourcedefinitions (+status) and then the custom resources of every CRD
//! (schema-validated, with status and scale subresources and printer columns; CRDs admitted as
//! apiextensions-apiserver admits them, see [`crd_validation`]). Discovery, Tables for kubectl, YAML responses,
//! `/openapi/v2` and `/openapi/v3` ([`openapi`]), server-side `fieldValidation` ([`field_validation`]),
//! `/healthz`, `/readyz`, `/livez`, and `/_dev/metrics` (GET) and `/_dev/faults` (POST) for tools.
//! Bodies are JSON (YAML accepted) and, for the built-in kinds, protobuf as client-go's typed clients use it
//! ([`protobuf`], negotiated as upstream does in `http::negotiate`). core/v1 and events.k8s.io/v1 Events are one
//! resource stored once ([`resource::events`]). `docs/dev-cluster.md` lists what is and is not implemented.
//!
//! # The in-process API (for built-in controllers and tests)
//! [`ApiServer::store`] returns a cloneable [`Store`]. Every call goes through the same operations as an HTTP
//! request: the same global resourceVersion, watch events and history, validation, defaulting, status-subresource
//! rules, finalizer and graceful-deletion logic, eviction algorithm, and request metrics. Calls are synchronous
//! (they only take the store lock, never for long), except that watches are streams.
//!
//! ```text
//! Store::with_identity(&self, identity: &str) -> Store            // writer identity = User-Agent in Metrics
//! Store::resource_version(&self) -> u64
//! Store::resource(&self, gvr: &Gvr) -> Result<Arc<ResourceType>, ApiError>
//! Store::get(&self, gvr, namespace: Option<&str>, name) -> Result<Value, ApiError>
//! Store::list(&self, gvr, namespace, &kube::api::ListParams) -> Result<ObjectList<Value>, ApiError>
//! Store::create(&self, gvr, namespace, object: Value, &PostParams) -> Result<Value, ApiError>
//! Store::update / update_status(&self, gvr, namespace, name, object: Value, &PostParams) -> Result<Value, ApiError>
//! Store::patch / patch_status(&self, gvr, namespace, name, &Patch, &PatchParams) -> Result<Value, ApiError>
//! Store::delete(&self, gvr, namespace, name, &DeleteParams) -> Result<DeleteOutcome<Value>, ApiError>
//! Store::evict(&self, namespace, name, &DeleteParams) -> Result<(), ApiError>   // options honoured (policy/v1)
//! Store::bind(&self, namespace, name, node: &str) -> Result<(), ApiError>
//! Store::watch(&self, gvr, namespace, &WatchParams, resource_version: &str)
//!     -> Result<BoxStream<'static, WatchEvent<Value>>, ApiError>
//! Store::api::<K>(&self) -> TypedStore<K>          // the same calls on kube-rs types: get, get_opt, list, create,
//!                                                  // update, update_status, patch, patch_status, delete, watch
//! Store::controller_gate(&self, name) -> ControllerGate   // is_paused(), wait_until_running().await
//! ```
//! - [`Gvr`] names a resource: `Gvr::of::<Pod>()`, `Gvr::new("apps", "v1", "deployments")`.
//! - [`Patch`] is `Merge`, `Json`, `Strategic` or `Apply` with a JSON body.
//! - Errors are [`ApiError`]: the HTTP code plus the `Status` upstream would send (`code`, `reason`, `message`,
//!   `details`), e.g. 409 on a stale `resourceVersion`, 429 from an eviction blocked by a PDB.
//! - Built-in controllers consult `store.controller_gate(name)` before each unit of work; tests pause and resume
//!   them through [`Faults::pause_controller`] (or `POST /_dev/faults`). The server's own lifecycle loops are
//!   registered as `namespace` and `crd-cleanup`.
//!
//! # Observing and disturbing
//! - [`ApiServer::metrics`]: request counters by verb, group, resource, subresource and User-Agent.
//! - [`ApiServer::request_log`]: an opt-in, bounded, ordered log of the resource requests answered over HTTP,
//!   with their User-Agent and status (who wrote what, and when, as an audit log shows).
//! - [`ApiServer::faults`]: error responses (with or without `Retry-After`, count-limited or until removed),
//!   latency, requests that hang until the rule is removed, closing every watch, compaction (410 for resumed
//!   watches and continue tokens), controller pauses.
//!
//! # Guarantees
//! See the module docs of [`state`] (resourceVersions, history), [`ops::read`] (pagination), [`ops::watch`]
//! (watch semantics), [`ops::write`], [`ops::patch`], [`ops::delete`] and [`ops::eviction`].

pub mod admission;
pub mod auth;
pub mod bootstrap;
pub mod config;
pub mod core;
pub mod crd;
pub mod crd_cel;
pub mod crd_validation;
pub mod discovery;
pub mod error;
pub mod fault_injection;
pub mod faults;
pub mod field_validation;
pub mod http;
pub mod jsonpath;
pub mod metrics;
pub mod object;
pub mod openapi;
pub mod ops;
pub mod patch;
pub mod printer_columns;
pub mod protobuf;
pub mod request_log;
pub mod resource;
pub mod schema;
pub mod selector;
pub mod server;
pub mod state;
pub mod store;
pub mod table;

pub use auth::{AccessLog, AccessRecord, Attributes, Identity, UserInfo};
pub use config::ApiServerConfig;
pub use error::ApiError;
pub use fault_injection::Faults;
pub use faults::{ControllerGate, Controllers, ErrorFault, FaultId, RequestMatch};
pub use metrics::{Metrics, RequestCount, RequestKey, Verb};
pub use request_log::{LoggedRequest, RequestLine, RequestLog};
pub use resource::Gvr;
pub use server::{ApiServer, StartError};
pub use store::{DeleteOutcome, ObjectList, Patch, Store, TypedStore, WatchEvent};
