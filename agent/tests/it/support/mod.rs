//! Test doubles of the services the host backends talk to. Each test binary uses some of them.
#![allow(dead_code)]

pub mod bottlerocket;
pub mod kube;
pub mod server;
pub mod simulated;

use std::time::Duration;

/// Polls `condition` every 10 ms until it holds; panics after a generous minute.
pub async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !condition() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
