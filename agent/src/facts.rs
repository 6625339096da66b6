//! When the agent reads its host's facts, and what it last read.
//!
//! # Guarantees
//! The facts are read again when they may have changed, and only then:
//! - at start, and when the controller writes a new intent (a new token);
//! - when host work ended (staging changes the staged image, a reboot everything);
//! - when the kubelet reports a new boot ID in the Node's `status.nodeInfo.bootID` (the host
//!   rebooted, whoever rebooted it);
//! - every [`POLL_WHILE_REBOOTING`] while a reboot the agent asked for is under way;
//! - after a failed read, with backoff ([`crate::retry::FACTS`]), until a read succeeds;
//! - every [`RECHECK`] otherwise, for what changed without a sign (an administrator updated the
//!   host by hand).
//!
//! A read runs in the background ([`Tracker::begin_read`] to [`Tracker::read_ok`] or
//! [`Tracker::read_failed`]): it may wait minutes on the host (a Bottlerocket prepare holds the
//! update lock while it downloads), and the agent's loop must go on beating meanwhile. Decisions
//! wait for a read that began because the facts were stale ([`Tracker::must_wait`]); a periodic
//! re-check does not hold them up. What makes the facts stale during a read makes them stale
//! again after it: the read may predate the change.

use crate::decide::{Facts, HostView};
use crate::retry;
use backon::ExponentialBackoff;
use shared::protocol::Token;
use std::time::Duration;
use tokio::time::Instant;

/// The low-rate re-check: one read of the host's update service per node every five minutes is
/// nothing to it, and a change nobody announced shows within minutes.
pub const RECHECK: Duration = Duration::from_secs(5 * 60);

/// How often the host is asked whether it rebooted, once the reboot was requested (the simulation
/// keeps the agent alive across its reboots; on a real host the reboot ends the process).
pub const POLL_WHILE_REBOOTING: Duration = Duration::from_secs(1);

/// The host's facts and when to read them next.
#[derive(Debug)]
pub struct Tracker {
    /// The last successful read.
    facts: Option<Facts>,
    /// Why the last read failed, and whether trying again may help by itself.
    problem: Option<(String, bool)>,
    /// Read at the next opportunity.
    stale: bool,
    /// A read is under way; `true` when it began because the facts were stale.
    reading: Option<bool>,
    /// Read when this instant has passed.
    due: Option<Instant>,
    /// The intent token and kubelet boot ID of the last observation of the Node.
    token: Option<Token>,
    kubelet_boot_id: Option<String>,
    failures: ExponentialBackoff,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            facts: None,
            problem: None,
            stale: true,
            reading: None,
            due: None,
            token: None,
            kubelet_boot_id: None,
            failures: retry::FACTS.delays(),
        }
    }
}

impl Tracker {
    /// What the agent knows of the host; `None` before the first read ended.
    pub fn view(&self) -> Option<HostView<'_>> {
        match (&self.problem, &self.facts) {
            (Some((problem, permanent)), _) => Some(HostView::Unreadable { problem, permanent: *permanent }),
            (None, Some(facts)) => Some(HostView::Known(facts)),
            (None, None) => None,
        }
    }

    /// Whether the facts were ever read successfully.
    pub fn ever_read(&self) -> bool {
        self.facts.is_some()
    }

    /// Takes in what the Node says: a new intent token or a new kubelet boot ID make the facts
    /// stale.
    pub fn observe(&mut self, token: Option<&Token>, kubelet_boot_id: Option<&str>) {
        if self.token.as_ref() != token {
            self.token = token.cloned();
            self.stale = true;
        }
        if self.kubelet_boot_id.as_deref() != kubelet_boot_id {
            // The first sight of it is no news; a change is.
            if self.kubelet_boot_id.is_some() {
                self.stale = true;
            }
            self.kubelet_boot_id = kubelet_boot_id.map(str::to_owned);
        }
    }

    /// Read at the next opportunity (host work ended).
    pub fn mark_stale(&mut self) {
        self.stale = true;
    }

    /// Read again at `at` at the latest.
    pub fn read_by(&mut self, at: Instant) {
        self.due = Some(self.due.map_or(at, |due| due.min(at)));
    }

    /// Whether to start a read now (none is under way, and the facts are stale or due).
    pub fn needs_read(&self, now: Instant) -> bool {
        self.reading.is_none() && (self.stale || self.due.is_some_and(|due| due <= now))
    }

    /// A read starts now.
    pub fn begin_read(&mut self) {
        self.reading = Some(self.stale);
        self.stale = false;
    }

    /// Whether decisions wait for a read: the facts are stale, and the read that refreshes them
    /// is due or under way.
    pub fn must_wait(&self) -> bool {
        self.stale || self.reading == Some(true)
    }

    /// When to wake up to read, if no event comes first; `None` while a read is under way (its
    /// end wakes the agent).
    pub fn next_read(&self) -> Option<Instant> {
        self.due.filter(|_| self.reading.is_none())
    }

    /// Records a successful read. Facts made stale during it stay stale.
    pub fn read_ok(&mut self, facts: Facts, now: Instant) {
        self.reading = None;
        self.facts = Some(facts);
        self.problem = None;
        self.due = Some(now + RECHECK);
        self.failures = retry::FACTS.delays();
    }

    /// Records a failed read: `problem` in words, `permanent` when trying again will not help by
    /// itself. Returns the delay before the next read.
    pub fn read_failed(&mut self, problem: String, permanent: bool, now: Instant) -> Duration {
        self.reading = None;
        self.problem = Some((problem, permanent));
        let delay = self.failures.next().unwrap_or(retry::FACTS.longest);
        self.due = Some(now + delay);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::protocol::BootId;

    fn facts(image: &str) -> Facts {
        Facts {
            os_image: image.into(),
            boot_id: BootId::parse("k", "b0").unwrap(),
            staged_image: None,
            components_hash: None,
        }
    }

    fn tok(s: &str) -> Token {
        Token::parse("k", s).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn facts_are_read_at_start_then_only_when_they_may_have_changed() {
        let mut host = Tracker::default();
        let now = Instant::now();
        assert!(host.needs_read(now) && host.view().is_none());
        host.observe(None, Some("k0"));
        host.begin_read();
        host.read_ok(facts("v1"), now);
        assert!(!host.needs_read(now));
        assert_eq!(host.view(), Some(HostView::Known(&facts("v1"))));
        // Nothing new on the Node: no read.
        host.observe(None, Some("k0"));
        assert!(!host.needs_read(now));
        // A new intent: read.
        host.observe(Some(&tok("s1")), Some("k0"));
        assert!(host.needs_read(now));
        host.begin_read();
        host.read_ok(facts("v1"), now);
        // The kubelet saw a new boot: read.
        host.observe(Some(&tok("s1")), Some("k1"));
        assert!(host.needs_read(now));
        host.begin_read();
        host.read_ok(facts("v1"), now);
        // Host work ended: read.
        host.mark_stale();
        assert!(host.needs_read(now));
        host.begin_read();
        host.read_ok(facts("v1"), now);
        // And every five minutes regardless.
        assert_eq!(host.next_read(), Some(now + RECHECK));
        assert!(!host.needs_read(now + RECHECK - Duration::from_secs(1)));
        assert!(host.needs_read(now + RECHECK));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_read_is_retried_with_growing_delays_and_reported_until_one_succeeds() {
        let mut host = Tracker::default();
        let now = Instant::now();
        host.begin_read();
        let first = host.read_failed("connection refused".into(), false, now);
        assert_eq!(host.view(), Some(HostView::Unreadable { problem: "connection refused", permanent: false }));
        assert!(!host.needs_read(now));
        assert!(host.needs_read(now + first));
        let mut last = first;
        for _ in 0..10 {
            host.begin_read();
            last = host.read_failed("connection refused".into(), false, now);
        }
        assert!(last > first && last <= 2 * retry::FACTS.longest, "{first:?} {last:?}");
        host.begin_read();
        host.read_ok(facts("v1"), now);
        assert_eq!(host.view(), Some(HostView::Known(&facts("v1"))));
        // The backoff starts afresh after a success.
        host.begin_read();
        assert!(host.read_failed("again".into(), true, now) <= 2 * retry::FACTS.first);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_under_way_is_not_started_twice_and_a_change_during_it_makes_the_facts_stale_again() {
        let mut host = Tracker::default();
        let now = Instant::now();
        host.begin_read();
        host.read_ok(facts("v1"), now);
        // A periodic re-check does not hold decisions up.
        let later = now + RECHECK;
        assert!(host.needs_read(later));
        host.begin_read();
        assert!(!host.needs_read(later) && !host.must_wait());
        assert_eq!(host.next_read(), None, "the end of the read wakes the agent, not a time past");
        host.read_ok(facts("v1"), later);
        // Host work ended during a read: decisions wait, and the facts are read again after it.
        host.mark_stale();
        host.begin_read();
        assert!(host.must_wait() && !host.needs_read(later));
        host.mark_stale();
        host.read_ok(facts("v1"), later);
        assert!(host.must_wait() && host.needs_read(later));
        host.begin_read();
        host.read_failed("locked".into(), false, later);
        assert!(!host.must_wait());
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_can_be_asked_for_earlier_but_not_later() {
        let mut host = Tracker::default();
        let now = Instant::now();
        host.begin_read();
        host.read_ok(facts("v1"), now);
        host.read_by(now + POLL_WHILE_REBOOTING);
        assert_eq!(host.next_read(), Some(now + POLL_WHILE_REBOOTING));
        host.read_by(now + RECHECK * 2);
        assert_eq!(host.next_read(), Some(now + POLL_WHILE_REBOOTING));
    }
}
