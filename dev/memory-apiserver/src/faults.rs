//! Fault injection for tests: error responses, latency, requests that hang, closing every watch, compaction,
//! and pausing the built-in controllers.
//!
//! # Guarantees
//! - Injected errors and latency apply to HTTP requests only (the clients under test), never to in-process
//!   calls of the built-in controllers.
//! - An injected 429/503 with `retry_after_seconds` carries both `details.retryAfterSeconds` and a
//!   `Retry-After` header, as upstream's throttling does.
//! - A count-limited rule is used up by exactly that many matching requests.
//! - A request that a hang rule matches is not handled (and not answered) while any matching hang rule exists;
//!   once the last one is removed it is handled as usual. A client that gives up meanwhile sees no answer.

use super::error::ApiError;
use super::metrics::{RequestKey, Verb};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Which requests a rule applies to. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestMatch {
    /// Verbs; empty matches every verb.
    pub verbs: Vec<Verb>,
    /// Plural resource (`pods`).
    pub resource: Option<String>,
    /// Subresource (`eviction`, `status`); `Some("")` means the main resource only.
    pub subresource: Option<String>,
    /// Prefix of the User-Agent (`update-operator/agent`).
    pub user_agent_prefix: Option<String>,
}

impl RequestMatch {
    fn matches(&self, request: &RequestKey) -> bool {
        (self.verbs.is_empty() || self.verbs.contains(&request.verb))
            && self.resource.as_deref().is_none_or(|r| r == request.resource)
            && self.subresource.as_deref().is_none_or(|s| s == request.subresource)
            && self.user_agent_prefix.as_deref().is_none_or(|p| request.user_agent.starts_with(p))
    }
}

/// An error to answer matching requests with.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorFault {
    /// Which requests.
    pub requests: RequestMatch,
    /// HTTP code: 429, 500, 503, 504 ...
    pub code: u16,
    /// `Retry-After` seconds, if any.
    pub retry_after_seconds: Option<u32>,
    /// How many requests to fail; `None` until removed.
    pub times: Option<u32>,
}

impl ErrorFault {
    /// Fails every matching request with `code` until removed.
    pub fn new(requests: RequestMatch, code: u16) -> Self {
        ErrorFault { requests, code, retry_after_seconds: None, times: None }
    }

    /// Adds a `Retry-After`.
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_seconds = Some(seconds);
        self
    }

    /// Fails only the next `times` matching requests.
    pub fn times(mut self, times: u32) -> Self {
        self.times = Some(times);
        self
    }

    fn error(&self) -> ApiError {
        let message = match self.code {
            429 => "Too many requests, please try again later.".to_owned(),
            503 => "The server is currently unable to handle the request (injected fault)".to_owned(),
            504 => "The request timed out (injected fault)".to_owned(),
            code => format!("injected fault: HTTP {code}"),
        };
        let mut error = ApiError::with_code(self.code, message);
        if let Some(seconds) = self.retry_after_seconds {
            error = error.with_retry_after(seconds);
        }
        error
    }
}

/// Identifies an injected rule, for removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultId(u64);

#[derive(Default)]
struct Rules {
    next: u64,
    errors: Vec<(FaultId, ErrorFault)>,
    latency: Vec<(FaultId, RequestMatch, Duration)>,
    hangs: Vec<(FaultId, RequestMatch)>,
}

/// The injected rules (held by the server core).
pub struct FaultTable {
    rules: Mutex<Rules>,
    /// Bumped whenever a rule is removed, to wake hung requests.
    removals: watch::Sender<u64>,
}

impl Default for FaultTable {
    fn default() -> Self {
        FaultTable { rules: Mutex::default(), removals: watch::channel(0).0 }
    }
}

impl FaultTable {
    /// The error a request must fail with, if a rule says so (using up one count).
    pub fn error_for(&self, request: &RequestKey) -> Option<ApiError> {
        let mut rules = self.rules.lock();
        let at = rules.errors.iter().position(|(_, f)| f.requests.matches(request) && f.times != Some(0))?;
        let fault = &mut rules.errors[at].1;
        let error = fault.error();
        if let Some(times) = fault.times.as_mut() {
            *times -= 1;
            if *times == 0 {
                rules.errors.remove(at);
            }
        }
        Some(error)
    }

    /// The latency to add to a request.
    pub fn latency_for(&self, request: &RequestKey) -> Duration {
        self.rules.lock().latency.iter().filter(|(_, m, _)| m.matches(request)).map(|(_, _, d)| *d).sum()
    }

    /// Returns once no hang rule matches `request` (at once when none does).
    pub async fn hold_while_hung(&self, request: &RequestKey) {
        loop {
            // Subscribed before looking, so a removal in between is not missed.
            let mut removals = self.removals.subscribe();
            if !self.rules.lock().hangs.iter().any(|(_, m)| m.matches(request)) {
                return;
            }
            if removals.changed().await.is_err() {
                return;
            }
        }
    }

    /// Adds a rule that fails matching HTTP requests.
    pub(crate) fn add_error(&self, fault: ErrorFault) -> FaultId {
        let mut rules = self.rules.lock();
        let id = FaultTable::next_id(&mut rules);
        rules.errors.push((id, fault));
        id
    }

    /// Adds a rule that delays matching HTTP requests.
    pub(crate) fn add_latency(&self, requests: RequestMatch, delay: Duration) -> FaultId {
        let mut rules = self.rules.lock();
        let id = FaultTable::next_id(&mut rules);
        rules.latency.push((id, requests, delay));
        id
    }

    /// Adds a rule that holds matching HTTP requests unanswered until it is removed.
    pub(crate) fn add_hang(&self, requests: RequestMatch) -> FaultId {
        let mut rules = self.rules.lock();
        let id = FaultTable::next_id(&mut rules);
        rules.hangs.push((id, requests));
        id
    }

    /// Removes one rule.
    pub(crate) fn remove(&self, id: FaultId) {
        {
            let mut rules = self.rules.lock();
            rules.errors.retain(|(i, _)| *i != id);
            rules.latency.retain(|(i, _, _)| *i != id);
            rules.hangs.retain(|(i, _)| *i != id);
        }
        self.removed();
    }

    /// Removes every error, latency and hang rule.
    pub(crate) fn clear(&self) {
        {
            let mut rules = self.rules.lock();
            rules.errors.clear();
            rules.latency.clear();
            rules.hangs.clear();
        }
        self.removed();
    }

    fn removed(&self) {
        self.removals.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn next_id(rules: &mut Rules) -> FaultId {
        rules.next += 1;
        FaultId(rules.next)
    }
}

/// Pause switches of the built-in controllers, by name. Controllers consult their [`ControllerGate`]; tests and
/// the fault API flip the switches.
#[derive(Debug, Clone, Default)]
pub struct Controllers {
    switches: Arc<Mutex<HashMap<String, watch::Sender<bool>>>>,
}

impl Controllers {
    fn switch(&self, name: &str) -> watch::Sender<bool> {
        self.switches.lock().entry(name.to_owned()).or_insert_with(|| watch::channel(false).0).clone()
    }

    /// The gate a controller named `name` consults (registering the name).
    pub fn gate(&self, name: &str) -> ControllerGate {
        ControllerGate { name: name.to_owned(), paused: self.switch(name).subscribe() }
    }

    /// Pauses the controller (also before it registers).
    pub fn pause(&self, name: &str) {
        self.switch(name).send_replace(true);
    }

    /// Lets the controller run again.
    pub fn resume(&self, name: &str) {
        self.switch(name).send_replace(false);
    }

    /// True while paused.
    pub fn is_paused(&self, name: &str) -> bool {
        *self.switch(name).borrow()
    }

    /// The names known so far.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.switches.lock().keys().cloned().collect();
        names.sort();
        names
    }
}

/// What a built-in controller checks before each unit of work.
#[derive(Debug, Clone)]
pub struct ControllerGate {
    name: String,
    paused: watch::Receiver<bool>,
}

impl ControllerGate {
    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True while paused.
    pub fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// Returns once the controller may run (at once when not paused).
    pub async fn wait_until_running(&mut self) {
        // An error means the switch is gone with the server: nothing to wait for any more.
        let _ = self.paused.wait_for(|paused| !paused).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(verb: Verb, resource: &str, user_agent: &str) -> RequestKey {
        RequestKey {
            verb,
            group: String::new(),
            resource: resource.into(),
            subresource: String::new(),
            user_agent: user_agent.into(),
        }
    }

    #[test]
    fn count_limited_errors_are_used_up() {
        let table = FaultTable::default();
        {
            let mut rules = table.rules.lock();
            let id = FaultTable::next_id(&mut rules);
            let fault = ErrorFault::new(RequestMatch { verbs: vec![Verb::Patch], ..Default::default() }, 429)
                .retry_after(2)
                .times(2);
            rules.errors.push((id, fault));
        }
        let patch = request(Verb::Patch, "nodes", "x");
        assert_eq!(table.error_for(&request(Verb::Get, "nodes", "x")), None);
        let error = table.error_for(&patch).unwrap();
        assert_eq!((error.code, error.retry_after_header()), (429, Some(2)));
        assert!(table.error_for(&patch).is_some());
        assert_eq!(table.error_for(&patch), None);
    }

    #[test]
    fn matches_filter_by_resource_and_user_agent() {
        let only_agents = RequestMatch {
            resource: Some("nodes".into()),
            user_agent_prefix: Some("update-operator/agent".into()),
            ..Default::default()
        };
        assert!(only_agents.matches(&request(Verb::Patch, "nodes", "update-operator/agent 1.0")));
        assert!(!only_agents.matches(&request(Verb::Patch, "nodes", "update-operator/controller 1.0")));
        assert!(!only_agents.matches(&request(Verb::Patch, "pods", "update-operator/agent 1.0")));
    }

    #[tokio::test(start_paused = true)]
    async fn hung_requests_wait_until_their_rule_is_removed() {
        let table = Arc::new(FaultTable::default());
        let leases = RequestMatch { resource: Some("leases".into()), ..Default::default() };
        let id = {
            let mut rules = table.rules.lock();
            let id = FaultTable::next_id(&mut rules);
            rules.hangs.push((id, leases));
            id
        };
        // Other requests pass at once.
        tokio::time::timeout(Duration::from_secs(1), table.hold_while_hung(&request(Verb::Get, "nodes", "x")))
            .await
            .unwrap();
        let hung = {
            let table = table.clone();
            tokio::spawn(async move { table.hold_while_hung(&request(Verb::Update, "leases", "x")).await })
        };
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!hung.is_finished(), "a hung request was answered");
        table.rules.lock().hangs.retain(|(i, _)| *i != id);
        table.removed();
        tokio::time::timeout(Duration::from_secs(1), hung).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn controller_gates_follow_the_switches() {
        let controllers = Controllers::default();
        controllers.pause("disruption");
        let mut gate = controllers.gate("disruption");
        assert!(gate.is_paused());
        let waiter = tokio::spawn(async move {
            gate.wait_until_running().await;
        });
        controllers.resume("disruption");
        tokio::time::timeout(Duration::from_secs(10), waiter).await.unwrap().unwrap();
        assert_eq!(controllers.names(), vec!["disruption".to_owned()]);
    }
}
