//! Maintenance windows: a cron schedule of window starts, a duration, and the IANA time zone the
//! schedule is read in (DST-aware: a start in a skipped hour moves forward, as jiff's
//! "compatible" disambiguation does).

use super::cron::Cron;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

/// How far ahead the next opening is searched; a schedule that never fires in this time (say,
/// `0 0 30 2 *`) is rejected when the policy is read.
const SEARCH_YEARS: i64 = 5;

/// A validated maintenance window.
#[derive(Debug, Clone)]
pub struct Window {
    pub cron: Cron,
    pub duration: SignedDuration,
    pub time_zone: TimeZone,
    /// For messages: the schedule as the user wrote it, and the zone's name.
    pub schedule: String,
    pub zone_name: String,
}

/// Whether new nodes may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowState {
    /// Inside a window that closes at the given time (unless a later start extends it).
    Open { closes_at: Timestamp },
    /// Outside any window; the next one opens at the given time (None: never, within the search
    /// horizon).
    Closed { opens_at: Option<Timestamp> },
}

impl Window {
    pub fn state(&self, now: Timestamp) -> WindowState {
        match self.latest_start_at_or_before(now) {
            Some(start) => {
                let closes_at = start.checked_add(self.duration).unwrap_or(Timestamp::MAX);
                if now < closes_at {
                    return WindowState::Open { closes_at };
                }
                WindowState::Closed { opens_at: self.next_start_after(now) }
            }
            None => WindowState::Closed { opens_at: self.next_start_after(now) },
        }
    }

    /// The latest window start in `(now - duration, now]`.
    fn latest_start_at_or_before(&self, now: Timestamp) -> Option<Timestamp> {
        let earliest = now.checked_sub(self.duration).unwrap_or(Timestamp::MIN);
        let mut day = now.to_zoned(self.time_zone.clone()).date();
        let last_day = earliest.to_zoned(self.time_zone.clone()).date().yesterday().ok()?;
        while day >= last_day {
            for start in self.starts_on(day).rev() {
                if start <= now {
                    return (start > earliest).then_some(start);
                }
            }
            day = day.yesterday().ok()?;
        }
        None
    }

    /// The first window start after `now`.
    pub fn next_start_after(&self, now: Timestamp) -> Option<Timestamp> {
        let mut day = now.to_zoned(self.time_zone.clone()).date();
        for _ in 0..(SEARCH_YEARS * 366) {
            if let Some(start) = self.starts_on(day).find(|s| *s > now) {
                return Some(start);
            }
            day = day.tomorrow().ok()?;
        }
        None
    }

    /// The window starts on a local day, ascending.
    fn starts_on(&self, day: Date) -> impl DoubleEndedIterator<Item = Timestamp> + '_ {
        let matches = self.cron.matches_day(day);
        let mut starts: Vec<Timestamp> = Vec::new();
        if matches {
            for hour in self.cron.hours() {
                for minute in self.cron.minutes() {
                    let civil = DateTime::new(day.year(), day.month(), day.day(), hour, minute, 0, 0);
                    if let Ok(zoned) = civil.and_then(|dt| dt.to_zoned(self.time_zone.clone())) {
                        starts.push(zoned.timestamp());
                    }
                }
            }
            // DST can move a start past the next one; keep them ordered and unique.
            starts.sort();
            starts.dedup();
        }
        starts.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(schedule: &str, hours: i64, zone: &str) -> Window {
        Window {
            cron: Cron::parse(schedule).unwrap(),
            duration: SignedDuration::from_hours(hours),
            time_zone: TimeZone::get(zone).unwrap(),
            schedule: schedule.into(),
            zone_name: zone.into(),
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_nightly_window_is_open_only_at_night_in_its_zone() {
        // 22:00-02:00 Berlin time (UTC+1 in November).
        let w = window("0 22 * * *", 4, "Europe/Berlin");
        assert_eq!(
            w.state(ts("2026-11-21T20:59:59Z")),
            WindowState::Closed { opens_at: Some(ts("2026-11-21T21:00:00Z")) }
        );
        assert_eq!(w.state(ts("2026-11-21T21:00:00Z")), WindowState::Open { closes_at: ts("2026-11-22T01:00:00Z") });
        assert_eq!(w.state(ts("2026-11-22T00:30:00Z")), WindowState::Open { closes_at: ts("2026-11-22T01:00:00Z") });
        assert_eq!(
            w.state(ts("2026-11-22T01:00:00Z")),
            WindowState::Closed { opens_at: Some(ts("2026-11-22T21:00:00Z")) }
        );
    }

    #[test]
    fn weekday_windows_skip_the_weekend() {
        let w = window("0 9 * * mon-fri", 8, "UTC");
        // Friday 2026-11-20 18:00 → closed until Monday 09:00.
        assert_eq!(
            w.state(ts("2026-11-20T18:00:00Z")),
            WindowState::Closed { opens_at: Some(ts("2026-11-23T09:00:00Z")) }
        );
        assert_eq!(w.state(ts("2026-11-23T16:59:00Z")), WindowState::Open { closes_at: ts("2026-11-23T17:00:00Z") });
    }

    #[test]
    fn a_start_in_the_spring_forward_gap_moves_forward() {
        // 2026-03-29 02:30 does not exist in Berlin; the window starts at 03:30 local (01:30 UTC).
        let w = window("30 2 29 3 *", 1, "Europe/Berlin");
        assert_eq!(w.next_start_after(ts("2026-03-28T00:00:00Z")), Some(ts("2026-03-29T01:30:00Z")));
        assert!(matches!(w.state(ts("2026-03-29T01:45:00Z")), WindowState::Open { .. }));
    }

    #[test]
    fn a_schedule_that_never_fires_has_no_next_start() {
        let w = window("0 0 30 2 *", 1, "UTC");
        assert_eq!(w.state(ts("2026-01-01T00:00:00Z")), WindowState::Closed { opens_at: None });
    }

    #[test]
    fn overlapping_starts_keep_the_window_open() {
        let w = window("0 * * * *", 2, "UTC");
        assert_eq!(w.state(ts("2026-11-21T10:30:00Z")), WindowState::Open { closes_at: ts("2026-11-21T12:00:00Z") });
    }
}
