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

/// An absolute period in which no node starts (a freeze), whatever the windows say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exclusion {
    pub name: String,
    pub start: Timestamp,
    pub end: Timestamp,
}

/// Why new nodes may not start now, from the windows and exclusions together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleState {
    /// Some window is open (or none is configured) and no exclusion runs; new nodes may start until `closes_at`
    /// (None: no change ahead).
    Open { closes_at: Option<Timestamp> },
    /// No window is open; they open next at `opens_at` (None: never within the search horizon).
    OutsideWindows { opens_at: Option<Timestamp> },
    /// Exclusion `name` runs until `end`; nodes may start next at `opens_at`.
    Excluded { name: String, end: Timestamp, opens_at: Option<Timestamp> },
}

/// The state of `windows` (any open one counts; none configured: always open) and `exclusions` at `now`.
pub fn schedule_state(windows: &[Window], exclusions: &[Exclusion], now: Timestamp) -> ScheduleState {
    // The first time at or after `at` when a window is open (or `at` itself without windows).
    let open_at = |at: Timestamp| -> Option<Timestamp> {
        if windows.is_empty() {
            return Some(at);
        }
        windows
            .iter()
            .filter_map(|w| match w.state(at) {
                WindowState::Open { .. } => Some(at),
                WindowState::Closed { opens_at } => opens_at,
            })
            .min()
    };
    // Past the exclusions that cover it (at most one pass per exclusion).
    let past_exclusions = |mut at: Option<Timestamp>| {
        for _ in 0..=exclusions.len() {
            let t = at?;
            match exclusions.iter().filter(|e| e.start <= t && t < e.end).map(|e| e.end).max() {
                Some(end) => at = open_at(end),
                None => return Some(t),
            }
        }
        at
    };
    if let Some(e) = exclusions.iter().filter(|e| e.start <= now && now < e.end).max_by_key(|e| e.end) {
        return ScheduleState::Excluded { name: e.name.clone(), end: e.end, opens_at: past_exclusions(open_at(e.end)) };
    }
    let open: Vec<Timestamp> = windows
        .iter()
        .filter_map(|w| match w.state(now) {
            WindowState::Open { closes_at } => Some(closes_at),
            WindowState::Closed { .. } => None,
        })
        .collect();
    if !windows.is_empty() && open.is_empty() {
        return ScheduleState::OutsideWindows { opens_at: past_exclusions(open_at(now)) };
    }
    let next_exclusion = exclusions.iter().map(|e| e.start).filter(|s| *s > now).min();
    let closes_at = [open.into_iter().max(), next_exclusion].into_iter().flatten().min();
    ScheduleState::Open { closes_at }
}

/// When the period in which new nodes may start, open at `now`, ends: the windows open now close, followed through a
/// window that opens before the last one closes, or the next exclusion begins. `None` when it does not end (no
/// windows and no exclusion ahead) or nodes may not start now.
pub fn open_until(windows: &[Window], exclusions: &[Exclusion], now: Timestamp) -> Option<Timestamp> {
    let mut at = now;
    // Each pass moves to a later close; windows that keep each other open for longer than this are taken as ending.
    for _ in 0..64 {
        let ScheduleState::Open { closes_at: Some(closes) } = schedule_state(windows, exclusions, at) else {
            return (at != now).then_some(at);
        };
        if closes <= at {
            return Some(closes);
        }
        at = closes;
    }
    Some(at)
}

/// How many separate open periods `starts` (times at which nodes started, while the schedule was open) fall in:
/// the maintenance windows a rollout used. Two starts share a period when the schedule stays open from the first
/// to the second.
pub fn periods(windows: &[Window], exclusions: &[Exclusion], starts: &[Timestamp]) -> u32 {
    let mut sorted = starts.to_vec();
    sorted.sort();
    let mut count = 0;
    let mut open_to: Option<Option<Timestamp>> = None;
    for t in sorted {
        let same = match open_to {
            Some(None) => true,
            Some(Some(end)) => t < end,
            None => false,
        };
        if !same {
            count += 1;
            open_to = Some(open_until(windows, exclusions, t));
        }
    }
    count
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

    #[test]
    fn any_open_window_counts_and_an_exclusion_closes_them_all_until_it_ends() {
        let windows = [window("0 3 * * *", 1, "UTC"), window("0 22 * * *", 2, "UTC")];
        let freeze =
            Exclusion { name: "freeze".into(), start: ts("2026-12-20T00:00:00Z"), end: ts("2027-01-03T00:00:00Z") };
        let exclusions = [freeze.clone()];
        let at = |t: &str| schedule_state(&windows, &exclusions, ts(t));
        assert_eq!(at("2026-11-21T03:30:00Z"), ScheduleState::Open { closes_at: Some(ts("2026-11-21T04:00:00Z")) });
        assert_eq!(
            at("2026-11-21T12:00:00Z"),
            ScheduleState::OutsideWindows { opens_at: Some(ts("2026-11-21T22:00:00Z")) }
        );
        assert_eq!(at("2026-11-21T23:00:00Z"), ScheduleState::Open { closes_at: Some(ts("2026-11-22T00:00:00Z")) });
        // The last window before the freeze opens; those inside it do not count, the first after it does.
        assert_eq!(
            at("2026-12-19T12:00:00Z"),
            ScheduleState::OutsideWindows { opens_at: Some(ts("2026-12-19T22:00:00Z")) }
        );
        assert_eq!(at("2026-12-20T02:00:00Z").clone(), at("2026-12-24T22:30:00Z"));
        assert_eq!(
            at("2026-12-24T22:30:00Z"),
            ScheduleState::Excluded {
                name: "freeze".into(),
                end: ts("2027-01-03T00:00:00Z"),
                opens_at: Some(ts("2027-01-03T03:00:00Z"))
            }
        );
        // An open window closes early when an exclusion begins.
        let at_eve = schedule_state(
            &windows,
            &[Exclusion { start: ts("2026-11-21T22:30:00Z"), ..freeze.clone() }],
            ts("2026-11-21T22:10:00Z"),
        );
        assert_eq!(at_eve, ScheduleState::Open { closes_at: Some(ts("2026-11-21T22:30:00Z")) });
        // Without windows: open but for the exclusions.
        assert_eq!(schedule_state(&[], &[], ts("2026-12-24T00:00:00Z")), ScheduleState::Open { closes_at: None });
        assert_eq!(
            schedule_state(&[], &exclusions, ts("2026-12-01T00:00:00Z")),
            ScheduleState::Open { closes_at: Some(ts("2026-12-20T00:00:00Z")) }
        );
        assert_eq!(
            schedule_state(&[], &exclusions, ts("2026-12-24T00:00:00Z")),
            ScheduleState::Excluded { name: "freeze".into(), end: freeze.end, opens_at: Some(freeze.end) }
        );
    }

    #[test]
    fn an_open_period_ends_when_no_window_that_opened_before_it_keeps_it_open() {
        // 01:00-03:00 and 02:00-05:00 chain into one period to 05:00; 22:00-23:00 is another.
        let windows = [window("0 1 * * *", 2, "UTC"), window("0 2 * * *", 3, "UTC"), window("0 22 * * *", 1, "UTC")];
        let until = |t: &str| open_until(&windows, &[], ts(t));
        assert_eq!(until("2026-11-21T01:30:00Z"), Some(ts("2026-11-21T05:00:00Z")));
        assert_eq!(until("2026-11-21T04:00:00Z"), Some(ts("2026-11-21T05:00:00Z")));
        assert_eq!(until("2026-11-21T12:00:00Z"), None, "not open now");
        // An exclusion cuts it.
        let freeze =
            [Exclusion { name: "f".into(), start: ts("2026-11-21T03:00:00Z"), end: ts("2026-11-22T00:00:00Z") }];
        assert_eq!(open_until(&windows, &freeze, ts("2026-11-21T01:30:00Z")), Some(ts("2026-11-21T03:00:00Z")));
        // No windows: open until the next exclusion, or for good.
        assert_eq!(open_until(&[], &freeze, ts("2026-11-20T00:00:00Z")), Some(ts("2026-11-21T03:00:00Z")));
        assert_eq!(open_until(&[], &[], ts("2026-11-20T00:00:00Z")), None);

        // Starts at 01:10 and 04:50 (one period), 22:10 (a second), and the next night at 01:05 (a third).
        let starts = ["2026-11-21T04:50:00Z", "2026-11-21T01:10:00Z", "2026-11-21T22:10:00Z", "2026-11-22T01:05:00Z"];
        let starts: Vec<Timestamp> = starts.iter().map(|t| ts(t)).collect();
        assert_eq!(periods(&windows, &[], &starts), 3);
        assert_eq!(periods(&windows, &[], &starts[..2]), 1);
        assert_eq!(periods(&windows, &[], &[]), 0);
        assert_eq!(periods(&[], &[], &starts), 1, "without windows, one period");
    }
}
