//! An opt-in, bounded log of the resource requests the HTTP front end answered, in the order it answered them,
//! with who sent each one (its User-Agent and authenticated user): what an audit log tells about a real cluster.
//!
//! # Guarantees
//! - Off by default; while off, a request costs one atomic load.
//! - Entries are numbered in the order their responses were produced (`seq`, gapless from 0 while enabled), and
//!   a write is logged after the store committed it, so a write's entry follows the entries of every write it
//!   could have observed.
//! - At most `capacity` entries are kept: beyond that the oldest go (and are counted in [`RequestLog::dropped`]).

use super::metrics::Verb;
use jiff::Timestamp;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One answered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoggedRequest {
    /// Position in the log: responses in the order they were produced.
    pub seq: u64,
    /// When the response was produced.
    pub at: Timestamp,
    /// What was asked.
    #[serde(flatten)]
    pub request: RequestLine,
    /// The HTTP status of the response.
    pub code: u16,
}

impl LoggedRequest {
    /// A 2xx answer.
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

/// What a request is, before it is answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RequestLine {
    /// The verb.
    pub verb: Verb,
    /// API group (empty for core).
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource, empty for none.
    pub subresource: String,
    /// Namespace, if any.
    pub namespace: Option<String>,
    /// Name, if any.
    pub name: Option<String>,
    /// The User-Agent header.
    pub user_agent: String,
    /// The authenticated (or impersonated) user's name; empty when authentication failed.
    pub user: String,
}

#[derive(Debug, Default)]
struct Entries {
    capacity: usize,
    next_seq: u64,
    dropped: u64,
    entries: VecDeque<LoggedRequest>,
}

/// The request log of one server (cloneable handle).
#[derive(Debug, Clone, Default)]
pub struct RequestLog {
    enabled: Arc<AtomicBool>,
    entries: Arc<Mutex<Entries>>,
}

impl RequestLog {
    /// Starts logging, keeping at most `capacity` entries (at least one); earlier entries are forgotten.
    pub fn enable(&self, capacity: usize) {
        *self.entries.lock() = Entries { capacity: capacity.max(1), ..Entries::default() };
        self.enabled.store(true, Ordering::Release);
    }

    /// Stops logging; the entries stay readable.
    pub fn disable(&self) {
        self.enabled.store(false, Ordering::Release);
    }

    /// Whether requests are being logged.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// Logs the answer `code` to `request` (nothing while disabled).
    pub fn record(&self, request: RequestLine, code: u16) {
        if !self.is_enabled() {
            return;
        }
        let mut log = self.entries.lock();
        let seq = log.next_seq;
        log.next_seq += 1;
        if log.entries.len() >= log.capacity {
            log.entries.pop_front();
            log.dropped += 1;
        }
        log.entries.push_back(LoggedRequest { seq, at: Timestamp::now(), request, code });
    }

    /// The entries kept, oldest first.
    pub fn entries(&self) -> Vec<LoggedRequest> {
        self.entries.lock().entries.iter().cloned().collect()
    }

    /// How many entries were forgotten because the log was full.
    pub fn dropped(&self) -> u64 {
        self.entries.lock().dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(name: &str) -> RequestLine {
        RequestLine {
            verb: Verb::Patch,
            group: String::new(),
            resource: "nodes".into(),
            subresource: String::new(),
            namespace: None,
            name: Some(name.into()),
            user_agent: "ua".into(),
            user: "u".into(),
        }
    }

    #[test]
    fn nothing_is_logged_until_enabled_and_the_log_keeps_the_newest_entries() {
        let log = RequestLog::default();
        log.record(line("before"), 200);
        assert!(log.entries().is_empty());
        log.enable(2);
        for name in ["a", "b", "c"] {
            log.record(line(name), 200);
        }
        let entries = log.entries();
        let names: Vec<_> = entries.iter().map(|e| e.request.name.as_deref().unwrap_or("")).collect();
        assert_eq!(names, vec!["b", "c"]);
        assert_eq!(entries.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(log.dropped(), 1);
        log.disable();
        log.record(line("after"), 409);
        assert_eq!(log.entries().len(), 2);
    }
}
