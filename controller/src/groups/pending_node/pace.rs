//! How long a group's instances take to leave, as this controller saw them ([`Pace`]), and when a leaving instance
//! is polled from that ([`poll_interval`]).
//!
//! Real clouds take tens of seconds to minutes to create or delete an instance, the same for every instance of a
//! group; the dev cluster's simulated cloud a fraction of a second. Polling by a fixed floor either asks a real
//! cloud many times for nothing in the first seconds or makes a fast one wait for the floor. So the first poll of a
//! group whose pace is known comes shortly before its instances usually get there, and the polls after it at a
//! tenth of the instance's age: few requests for slow clouds, a short wait for fast ones. A group seen for the
//! first time (or after a restart) is polled as before any was known: from 1 s, a tenth of the age.
//!
//! Only leaving instances are polled by the pace: a terminated instance is seen by polling alone, and it holds a
//! surge slot until it is. A joining instance is answered by its Node's Ready event; its polls only look for a
//! failed instance, which its deadline bounds anyway, and stay at the unknown pace's (polled by the pace, they were
//! most of a rollout's requests: 0.87 lists per replacement at 1000 nodes).
//!
//! # Guarantees
//! - The pace decides only when to look, never what is done: a deadline, a Node event and the cloud's answer
//!   decide as before.
//! - One instance that takes unusually long (a stuck deletion) does not slow the polls of the others: the pace is
//!   the median of the group's last [`SAMPLES`] instances.
//! - Every interval is between [`MIN_POLL`] and [`MAX_POLL`].

use shared::crd::PendingNodeGoal;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// The shortest poll interval (of a group whose pace is known).
pub const MIN_POLL: Duration = Duration::from_millis(100);

/// The shortest poll interval of a group whose pace is not known yet.
pub const UNKNOWN_PACE_POLL: Duration = Duration::from_secs(1);

/// The longest poll interval.
pub const MAX_POLL: Duration = Duration::from_secs(30);

/// How many of a group's last instances its pace is the median of.
pub const SAMPLES: usize = 5;

/// How often the provider's state is polled for a PendingNode of `age` in a group whose instances usually reach
/// the goal at `expected`:
/// - pace unknown: a tenth of the age, between 1 s and [`MAX_POLL`] (new instances change state quickly, old ones
///   slowly);
/// - before four fifths of `expected`: at four fifths of it (at most [`MAX_POLL`] on);
/// - after: a tenth of the age (of `expected` while younger), between [`MIN_POLL`] and [`MAX_POLL`].
///
/// Node changes wake the controller at once whatever the interval.
pub fn poll_interval(age: Duration, expected: Option<Duration>) -> Duration {
    let Some(expected) = expected else { return (age / 10).clamp(UNKNOWN_PACE_POLL, MAX_POLL) };
    let first = expected * 4 / 5;
    if age < first {
        (first - age).clamp(MIN_POLL, MAX_POLL)
    } else {
        (age.max(expected) / 10).clamp(MIN_POLL, MAX_POLL)
    }
}

/// The pace of each group: how long its last leaving instances took from their PendingNode's creation to the
/// terminated instance seen, as this controller saw it.
#[derive(Debug, Default)]
pub struct Pace {
    seen: HashMap<String, VecDeque<Duration>>,
}

impl Pace {
    /// The median of the last [`SAMPLES`] durations of `group`'s leaving instances, `None` before the first.
    pub fn expected(&self, group: &str) -> Option<Duration> {
        let seen = self.seen.get(group)?;
        let mut sorted: Vec<Duration> = seen.iter().copied().collect();
        sorted.sort();
        sorted.get(sorted.len() / 2).copied()
    }

    /// What a PendingNode of `group` with `goal` is polled by: the group's pace when leaving, none when joining (its
    /// Node's Ready event answers; its polls look for a failed instance only, as while the pace is unknown).
    pub fn expected_for(&self, group: &str, goal: PendingNodeGoal) -> Option<Duration> {
        match goal {
            PendingNodeGoal::Leave => self.expected(group),
            PendingNodeGoal::Join => None,
        }
    }

    /// Records that an instance of `group` was seen terminated `took` after its PendingNode was created.
    pub fn record(&mut self, group: &str, took: Duration) {
        let seen = self.seen.entry(group.to_owned()).or_default();
        if seen.len() == SAMPLES {
            seen.pop_front();
        }
        seen.push_back(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn an_unknown_pace_polls_from_one_second_at_a_tenth_of_the_age() {
        assert_eq!(poll_interval(Duration::ZERO, None), ms(1000));
        assert_eq!(poll_interval(ms(25_000), None), ms(2500));
        assert_eq!(poll_interval(Duration::from_secs(86_400), None), MAX_POLL);
    }

    #[test]
    fn a_known_pace_waits_for_four_fifths_of_it_then_polls_at_a_tenth() {
        // A simulated cloud: 300 ms terminations.
        assert_eq!(poll_interval(Duration::ZERO, Some(ms(300))), ms(240));
        assert_eq!(poll_interval(ms(200), Some(ms(300))), MIN_POLL, "never below MIN_POLL");
        assert_eq!(poll_interval(ms(250), Some(ms(300))), MIN_POLL);
        // A real cloud: 60 s terminations are not asked about in their first 30 s, then at most every 30 s
        // until 48 s, then every 6 s.
        let minute = Some(Duration::from_secs(60));
        assert_eq!(poll_interval(Duration::ZERO, minute), MAX_POLL);
        assert_eq!(poll_interval(Duration::from_secs(30), minute), Duration::from_secs(18));
        assert_eq!(poll_interval(Duration::from_secs(48), minute), Duration::from_secs(6));
        assert_eq!(poll_interval(Duration::from_secs(120), minute), Duration::from_secs(12));
        assert_eq!(poll_interval(Duration::from_secs(86_400), minute), MAX_POLL);
    }

    #[test]
    fn the_pace_is_the_median_of_the_groups_last_instances() {
        let mut pace = Pace::default();
        assert_eq!(pace.expected("a"), None);
        pace.record("a", ms(300));
        assert_eq!(pace.expected("a"), Some(ms(300)));
        assert_eq!(pace.expected("b"), None, "by group");
        // One stuck deletion does not move it.
        pace.record("a", Duration::from_secs(600));
        pace.record("a", ms(320));
        assert_eq!(pace.expected("a"), Some(ms(320)));
        // Only the last SAMPLES count: the group became slower.
        for _ in 0..SAMPLES {
            pace.record("a", Duration::from_secs(40));
        }
        assert_eq!(pace.expected("a"), Some(Duration::from_secs(40)));
    }

    #[test]
    fn only_leaving_instances_are_polled_by_the_pace() {
        let mut pace = Pace::default();
        pace.record("a", ms(300));
        assert_eq!(pace.expected_for("a", PendingNodeGoal::Leave), Some(ms(300)));
        assert_eq!(pace.expected_for("a", PendingNodeGoal::Join), None, "a joining one's Node answers");
        assert_eq!(poll_interval(Duration::ZERO, pace.expected_for("a", PendingNodeGoal::Join)), ms(1000));
    }
}
