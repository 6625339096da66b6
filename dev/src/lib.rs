//! An in-memory Kubernetes cluster for the tests, the demo and the benchmarks.

pub mod apiserver;
pub mod demo;
pub mod harness;
pub mod observer;
