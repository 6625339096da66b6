//! An in-memory Kubernetes API server that unmodified kube-rs 5 clients and kubectl use as they would a real
//! kube-apiserver: the behaviour of `/work/shared/docs/k8s-api-semantics.md`, over HTTP/1.1 on 127.0.0.1.
//!
//! # Starting one
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use dev::apiserver::{ApiServer, ApiServerConfig};
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
//! (schema-validated, with status and scale subresources and printer columns). Discovery, Tables for kubectl,
//! `/healthz`, `/readyz`, `/livez`, and `/_dev/metrics` (GET) and `/_dev/faults` (POST) for tools.
//!
//! # The in-process API (for built-in controllers and tests)
//! [`ApiServer::store`] returns a cloneable [`Store`]. Every call goes through the same operations as an HTTP
//! request: the same global resourceVersion, watch events and history, validation, defaulting, status-subresource
//! rules, finalizer and graceful-deletion logic, eviction algorithm, and request metrics. Calls are synchronous
//! (they only take the store lock), except that watches are streams.
//! - `store.with_identity("dev/disruption-controller")` attributes writes to a controller: the identity is the
//!   User-Agent in [`Metrics`].
//! - Dynamic: `get`, `list` (kube's `ListParams`), `create`/`update`/`update_status` (kube's `PostParams`),
//!   `patch`/`patch_status` ([`Patch`] + kube's `PatchParams`), `delete` (kube's `DeleteParams`, returns
//!   [`DeleteOutcome`]), `evict` (the DeleteParams are honoured as policy/v1 `deleteOptions`), `bind`, and
//!   `watch` (kube's `WatchParams` + a resourceVersion, a stream of [`WatchEvent`]), all addressed by [`Gvr`].
//! - Typed: `store.api::<Pod>()` gives a [`TypedStore`] with the same calls on kube-rs types.
//! - Built-in controllers consult `store.controller_gate(name)` (a [`ControllerGate`]) before each unit of
//!   work; tests pause and resume them through [`Faults::pause_controller`].
//!
//! # Guarantees
//! See the module docs of [`state`] (resourceVersions, history), [`ops::read`] (pagination), [`ops::watch`]
//! (watch semantics), [`ops::write`], [`ops::patch`], [`ops::delete`] and [`ops::eviction`].

pub mod config;
pub mod core;
pub mod crd;
pub mod discovery;
pub mod error;
pub mod faults;
pub mod http;
pub mod jsonpath;
pub mod metrics;
pub mod object;
pub mod ops;
pub mod patch;
pub mod resource;
pub mod selector;
pub mod server;
pub mod state;
pub mod store;
pub mod table;

pub use config::ApiServerConfig;
pub use error::ApiError;
pub use faults::{ControllerGate, Controllers, ErrorFault, FaultId, Faults, RequestMatch};
pub use metrics::{Metrics, RequestCount, RequestKey, Verb};
pub use resource::Gvr;
pub use server::{ApiServer, StartError};
pub use store::{DeleteOutcome, ObjectList, Patch, Store, TypedStore, WatchEvent};
