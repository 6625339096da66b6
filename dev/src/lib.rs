//! An in-memory Kubernetes cluster for the tests, the demo and the benchmarks.

/// The in-memory kube-apiserver, its own crate; re-exported so that `dev::apiserver::…` and `crate::apiserver::…`
/// name it as they did when it was a module of dev.
pub use memory_apiserver as apiserver;
pub mod artifacts;
pub mod cli;
pub mod cloud;
pub mod cluster;
pub mod controllers;
pub mod demo;
mod dev_routes;
pub mod harness;
pub mod hosts;
pub mod measure;
mod node_manifest;
pub mod observer;
pub mod operator;
pub mod standing;
pub mod timing;
