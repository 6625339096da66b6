//! The fault-injection handle of a running server: what tests and `/_dev/faults` change the rules of
//! [`super::faults`] through. It reaches into the server core (the rules, the watches, the controllers' switches),
//! so it lives apart from the rules the core holds.

use super::core::Core;
use super::faults::{Controllers, ErrorFault, FaultId, RequestMatch};
use std::sync::Arc;
use std::time::Duration;

/// The fault-injection handle of a running server.
#[derive(Clone)]
pub struct Faults {
    core: Arc<Core>,
}

impl Faults {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Faults { core }
    }

    /// Fails matching HTTP requests.
    pub fn inject(&self, fault: ErrorFault) -> FaultId {
        self.core.faults.add_error(fault)
    }

    /// Delays matching HTTP requests (before they are handled).
    pub fn add_latency(&self, requests: RequestMatch, delay: Duration) -> FaultId {
        self.core.faults.add_latency(requests, delay)
    }

    /// Holds matching HTTP requests unanswered until the rule is removed (a server or a network path that
    /// stops answering); they are then handled as usual.
    pub fn hang(&self, requests: RequestMatch) -> FaultId {
        self.core.faults.add_hang(requests)
    }

    /// Removes one rule.
    pub fn remove(&self, id: FaultId) {
        self.core.faults.remove(id);
    }

    /// Removes every error, latency and hang rule.
    pub fn clear(&self) {
        self.core.faults.clear();
    }

    /// Ends every open watch (cleanly, as an apiserver restart or a load balancer would). Returns how many.
    pub fn close_all_watches(&self) -> usize {
        self.core.state.lock().close_all_watches()
    }

    /// Drops all watch history and list snapshots: resuming a watch or a paginated list from before now gets
    /// 410 Expired.
    pub fn compact(&self) {
        self.core.state.lock().compact();
    }

    /// The pause switches of the built-in controllers.
    pub fn controllers(&self) -> Controllers {
        self.core.controllers.clone()
    }

    /// Pauses a built-in controller by name.
    pub fn pause_controller(&self, name: &str) {
        self.core.controllers.pause(name);
    }

    /// Resumes a built-in controller.
    pub fn resume_controller(&self, name: &str) {
        self.core.controllers.resume(name);
    }
}
