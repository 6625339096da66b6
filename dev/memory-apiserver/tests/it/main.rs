//! The in-memory API server's integration tests: its conformance to the real kube-apiserver (list, watch, writes,
//! eviction, admission, authorization, CRD validation and CEL, protobuf, OpenAPI, tables) through real clients.
//!
//! One test binary for the crate (issue 31): each file of this directory is one module, and it links only the API
//! server and its clients, not the controller, the agent or the cloud SDKs.

mod accept_backoff;
mod admission_policy;
mod authorization;
mod common;
mod conformance_eviction;
mod conformance_list_watch;
mod conformance_misc;
mod conformance_writes;
mod crd_cel;
mod crds_and_tables;
mod custom_resources;
mod event_store;
mod faults_and_metrics;
mod field_validation;
mod namespaces;
mod openapi_and_yaml;
mod protobuf;
mod runtime_clients;
mod services_and_priorities;
mod store_api;
