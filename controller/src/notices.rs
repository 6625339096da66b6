//! Events for nodes held back for a reason of their own (no agent report, NotReady, cordoned by
//! someone else, selected by an older NodeVersion, selected by none): one Event per node and
//! reason, once the hold has lasted [`HOLD_NOTICE_DELAY`].
//!
//! # Guarantees
//! - A node held for the same reason gets one Event, however long the hold lasts; a new reason
//!   (or the same one after the node was free of it) gets a new Event.
//! - No Event for a hold shorter than the delay: an agent that is just starting, a node rebooting
//!   for another reason. The status names every held node at once; the Event is for the ones
//!   that stay held.

use crate::policy::{Hold, Reason};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// How long a node must be held back for the same reason before its Event is published. Short
/// enough that an opted-in node without an agent is reported within a minute.
pub const HOLD_NOTICE_DELAY: Duration = Duration::from_secs(30);

/// A hold as last seen.
#[derive(Debug, Clone)]
struct Notice {
    reason: Reason,
    since: Instant,
    published: bool,
}

/// The holds seen so far, by (scope, node); the scope tells rollouts apart (a node can be held by
/// an older NodeVersion for one reason and by a newer one for another).
#[derive(Debug, Default)]
pub struct HoldNotices {
    seen: HashMap<(String, String), Notice>,
}

/// A hold whose Event is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub scope: String,
    pub node: String,
    pub hold: Hold,
}

impl HoldNotices {
    /// Takes the holds of one round (`(scope, node, hold)`) and returns the Events due now and when
    /// the next one falls due. Holds not in `current` are forgotten.
    pub fn observe<'a>(
        &mut self,
        current: impl IntoIterator<Item = (&'a str, &'a str, &'a Hold)>,
        now: Instant,
    ) -> (Vec<Due>, Option<Instant>) {
        let mut seen = HashMap::new();
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (scope, node, hold) in current {
            let key = (scope.to_owned(), node.to_owned());
            let mut notice = match self.seen.remove(&key) {
                Some(notice) if notice.reason == hold.reason => notice,
                _ => Notice { reason: hold.reason, since: now, published: false },
            };
            let at = notice.since + HOLD_NOTICE_DELAY;
            if !notice.published {
                if now >= at {
                    notice.published = true;
                    due.push(Due { scope: key.0.clone(), node: key.1.clone(), hold: hold.clone() });
                } else {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
            }
            seen.insert(key, notice);
        }
        self.seen = seen;
        (due, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(reason: Reason) -> Hold {
        Hold::new(reason, "because")
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_is_published_once_after_the_delay() {
        let mut notices = HoldNotices::default();
        let agentless = hold(Reason::NoAgentReport);
        let start = Instant::now();
        let (due, next) = notices.observe([("nv", "w1", &agentless)], Instant::now());
        assert!(due.is_empty());
        assert_eq!(next, Some(start + HOLD_NOTICE_DELAY));
        tokio::time::advance(HOLD_NOTICE_DELAY - Duration::from_millis(1)).await;
        assert!(notices.observe([("nv", "w1", &agentless)], Instant::now()).0.is_empty());
        tokio::time::advance(Duration::from_millis(1)).await;
        let (due, next) = notices.observe([("nv", "w1", &agentless)], Instant::now());
        assert_eq!(due, vec![Due { scope: "nv".into(), node: "w1".into(), hold: agentless.clone() }]);
        assert_eq!(next, None);
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(notices.observe([("nv", "w1", &agentless)], Instant::now()).0.is_empty(), "published twice");
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_hold_is_never_published_and_a_new_reason_starts_over() {
        let mut notices = HoldNotices::default();
        let (agentless, not_ready) = (hold(Reason::NoAgentReport), hold(Reason::NodeNotReady));
        notices.observe([("nv", "w1", &agentless)], Instant::now());
        tokio::time::advance(Duration::from_secs(20)).await;
        // The agent reported; the node is free.
        notices.observe([], Instant::now());
        tokio::time::advance(Duration::from_secs(20)).await;
        let (due, _) = notices.observe([("nv", "w1", &agentless)], Instant::now());
        assert!(due.is_empty(), "the first hold's time counted for the second");
        tokio::time::advance(Duration::from_secs(20)).await;
        let (due, next) = notices.observe([("nv", "w1", &not_ready)], Instant::now());
        assert!(due.is_empty());
        assert_eq!(next, Some(Instant::now() + HOLD_NOTICE_DELAY));
        tokio::time::advance(HOLD_NOTICE_DELAY).await;
        let (due, _) = notices.observe([("nv", "w1", &not_ready), ("other", "w1", &agentless)], Instant::now());
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].hold.reason, Reason::NodeNotReady);
    }
}
