//! What runs around the in-memory API server in a cluster: the machines under the nodes ([`hosts`]: images
//! staged and booted, reboots, the simulated kubeadm), the kubelets that register and report them, and the built-in
//! controllers of kube-controller-manager and kube-scheduler ([`controllers`]: garbage collection, Jobs,
//! disruption budgets, scheduling, workloads), with their timing ([`timing`]) and the file server of Kubernetes
//! components ([`artifacts`]). It refuses what the real ones refuse: a host does not boot an image it was not given
//! (`hosts::check_image`), a retired host never comes back, a controller writes only with its own identity through
//! the API server's admission. Every controller can be paused, every host and artifact can be given faults.
//! Cloud instances are not here: the cloud emulators (`cloud-emulators`) build on these hosts.

/// The in-memory kube-apiserver these simulate around (`crate::apiserver::…`, as in the `dev` crate).
pub use memory_apiserver as apiserver;
pub mod artifacts;
pub mod controllers;
pub mod dev_routes;
pub mod hosts;
pub mod node_manifest;
pub mod timing;
