//! An in-memory Kubernetes cluster for the tests, the demo and the benchmarks, assembled from the API server
//! (`memory-apiserver`), the hosts, kubelets and built-in controllers around it (`cluster-simulation`) and the
//! clouds whose instances join it (`cloud-emulators`); here are the assembly ([`cluster`]), the harness that runs
//! update-operator's real controller and agents in it ([`harness`], [`operator`]), the observer that checks the
//! rollouts' safety invariants at every instant ([`observer`]), and the programs (dev-cluster, demo, bench). It is
//! never more lenient nor stricter than what it simulates: each crate's opening says what it refuses.

/// The clouds, their own crate (`dev::cloud::…` as when it was a module of dev).
pub use cloud_emulators as cloud;
use cluster_simulation::node_manifest;
/// The hosts, kubelets and built-in controllers, their own crate.
pub use cluster_simulation::{artifacts, controllers, hosts, timing};
/// The in-memory kube-apiserver, its own crate; re-exported so that `dev::apiserver::…` and `crate::apiserver::…`
/// name it as they did when it was a module of dev.
pub use memory_apiserver as apiserver;
pub mod cli;
pub mod cluster;
pub mod demo;
pub mod harness;
pub mod measure;
pub mod observer;
pub mod operator;
pub mod standing;
