//! Standard 5-field cron expressions (`minute hour day-of-month month day-of-week`), read the way
//! Kubernetes CronJobs and Karpenter budgets read them.
//!
//! Supported: `*`, `?` (as `*`), numbers, ranges `a-b`, steps `*/n` and `a-b/n` and `a/n`, lists
//! `a,b`, month and weekday names (`jan`, `mon`), Sunday as 0 or 7, and the macros `@yearly`
//! (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`) and `@hourly`. When both
//! day-of-month and day-of-week are restricted, a day matches if either matches (Vixie cron).
//!
//! Why not a crate (weighed for `croner`, the well-kept one, and the jiff-based ones):
//! - `croner` (3.x) reads the same 5 fields with the Vixie OR and Sunday as 0 or 7, but it also takes `L`, `#`, `W`
//!   and an optional seconds field, which the CronJob parser (robfig/cron, also Karpenter's) refuses: a schedule
//!   it takes could be one `kubectl` users never see work elsewhere, so the grammar would still have to be checked
//!   here, which is most of this file. It evaluates on chrono's `DateTime`: the product's time is jiff's (with
//!   the system's IANA database for `timeZone`), so it would add chrono to every binary, the agent's included (today
//!   only the GCP feature pulls it in), plus `chrono-tz`, a second compiled-in time-zone database, to evaluate a
//!   window in its zone.
//! - The jiff-based cron crates use a 7-field format with Sunday = 1 and AND the day fields, which would read
//!   users' CronJob-style expressions differently.

use std::fmt;

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64, // bit m set: minute m matches (0-59)
    hours: u32,   // bit h: hour h (0-23)
    days: u32,    // bit d: day of month d (1-31)
    months: u16,  // bit m: month m (1-12)
    weekdays: u8, // bit w: weekday w (0 = Sunday .. 6)
    day_of_month_restricted: bool,
    day_of_week_restricted: bool,
}

/// Why a cron expression was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron expression {expression:?}: {reason}")]
pub struct CronError {
    pub expression: String,
    pub reason: String,
}

const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Cron {
    pub fn parse(expression: &str) -> Result<Cron, CronError> {
        let error = |reason: String| CronError { expression: expression.to_owned(), reason };
        let expanded = match expression.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => return Err(error(format!("unknown macro {other}"))),
            other => other,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(error(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), got {}",
                fields.len()
            )));
        };
        let field = |text: &str, name: &str, min: u32, max: u32, names: &[&str]| {
            parse_field(text, min, max, names).map_err(|reason| error(format!("{name} field {text:?}: {reason}")))
        };
        let minutes = field(minute, "minute", 0, 59, &[])?;
        let hours = field(hour, "hour", 0, 23, &[])?;
        let days = field(day, "day-of-month", 1, 31, &[])?;
        let months = field(month, "month", 1, 12, &MONTHS)?;
        // 7 is Sunday too; fold it onto 0.
        let mut weekdays = field(weekday, "day-of-week", 0, 7, &WEEKDAYS)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        Ok(Cron {
            minutes,
            hours: hours as u32,
            days: days as u32,
            months: months as u16,
            weekdays: weekdays as u8,
            day_of_month_restricted: !is_star(day),
            day_of_week_restricted: !is_star(weekday),
        })
    }

    /// Whether the day matches the day-of-month, month and day-of-week fields.
    pub fn matches_day(&self, date: jiff::civil::Date) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << date.day()) != 0;
        let dow = self.weekdays & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        match (self.day_of_month_restricted, self.day_of_week_restricted) {
            (true, true) => dom || dow,
            _ => dom && dow,
        }
    }

    pub fn matches_hour(&self, hour: i8) -> bool {
        (0..24).contains(&hour) && self.hours & (1 << hour) != 0
    }

    pub fn matches_minute(&self, minute: i8) -> bool {
        (0..60).contains(&minute) && self.minutes & (1 << minute) != 0
    }

    /// The matching hours, ascending.
    pub fn hours(&self) -> impl DoubleEndedIterator<Item = i8> + '_ {
        (0..24).filter(|h| self.matches_hour(*h))
    }

    /// The matching minutes, ascending.
    pub fn minutes(&self) -> impl DoubleEndedIterator<Item = i8> + '_ {
        (0..60).filter(|m| self.matches_minute(*m))
    }
}

impl fmt::Display for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cron(minutes={:#x}, hours={:#x}, days={:#x}, months={:#x}, weekdays={:#x})",
            self.minutes, self.hours, self.days, self.months, self.weekdays
        )
    }
}

fn is_star(field: &str) -> bool {
    field == "*" || field == "?"
}

fn parse_value(text: &str, names: &[&str]) -> Result<u32, String> {
    if let Ok(n) = text.parse::<u32>() {
        return Ok(n);
    }
    let lower = text.to_ascii_lowercase();
    let offset = if names.len() == 12 { 1 } else { 0 };
    names
        .iter()
        .position(|n| *n == lower)
        .map(|i| i as u32 + offset)
        .ok_or_else(|| format!("{text:?} is not a number{}", if names.is_empty() { "" } else { " or a name" }))
}

/// The set of values a field matches, as bits.
fn parse_field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step.parse().map_err(|_| format!("step {step:?} is not a number"))?;
                if step == 0 {
                    return Err("a step of 0".into());
                }
                (range, step)
            }
            None => (part, 1),
        };
        let (low, high) = if is_star(range) {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (parse_value(a, names)?, parse_value(b, names)?)
        } else {
            let start = parse_value(range, names)?;
            // `a/n` means from a to the end, stepping n.
            (start, if part.contains('/') { max } else { start })
        };
        if low < min || high > max {
            return Err(format!("{low}-{high} is outside {min}-{max}"));
        }
        if low > high {
            return Err(format!("range {low}-{high} goes backwards"));
        }
        let mut v = low;
        while v <= high {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    #[test]
    fn fields_parse_as_cronjobs_read_them() {
        let c = Cron::parse("*/15 9-17 * * mon-fri").unwrap();
        assert_eq!(c.minutes().collect::<Vec<_>>(), vec![0, 15, 30, 45]);
        assert_eq!(c.hours().collect::<Vec<_>>(), (9..=17).collect::<Vec<_>>());
        assert!(c.matches_day(date(2026, 11, 20))); // a Friday
        assert!(!c.matches_day(date(2026, 11, 21))); // a Saturday
        let c = Cron::parse("5,10-12/2 0 1 jan,JUL ?").unwrap();
        assert_eq!(c.minutes().collect::<Vec<_>>(), vec![5, 10, 12]);
        assert!(
            c.matches_day(date(2026, 7, 1)) && !c.matches_day(date(2026, 8, 1)) && !c.matches_day(date(2026, 7, 2))
        );
        let c = Cron::parse("30/10 * * * *").unwrap();
        assert_eq!(c.minutes().collect::<Vec<_>>(), vec![30, 40, 50]);
    }

    #[test]
    fn sunday_is_0_and_7() {
        for expr in ["0 0 * * 0", "0 0 * * 7", "0 0 * * sun", "@weekly"] {
            let c = Cron::parse(expr).unwrap();
            assert!(c.matches_day(date(2026, 11, 22)), "{expr}"); // a Sunday
            assert!(!c.matches_day(date(2026, 11, 23)), "{expr}");
        }
    }

    #[test]
    fn restricted_day_of_month_and_day_of_week_match_either() {
        let c = Cron::parse("0 0 13 * fri").unwrap();
        assert!(c.matches_day(date(2026, 11, 13))); // the 13th (a Friday too)
        assert!(c.matches_day(date(2026, 11, 20))); // a Friday
        assert!(c.matches_day(date(2026, 12, 13))); // the 13th, a Sunday
        assert!(!c.matches_day(date(2026, 12, 14)));
        // Only one restricted: both must hold (the other is `*`).
        let c = Cron::parse("0 0 13 * *").unwrap();
        assert!(!c.matches_day(date(2026, 11, 20)));
    }

    #[test]
    fn bad_expressions_are_rejected_with_the_field_named() {
        for (expr, needle) in [
            ("* * * *", "expected 5 fields"),
            ("60 * * * *", "minute field"),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day-of-month field"),
            ("* * * 13 *", "month field"),
            ("* * * * 8", "day-of-week field"),
            ("*/0 * * * *", "a step of 0"),
            ("5-1 * * * *", "backwards"),
            ("* * * foo *", "not a number or a name"),
            ("@sometimes", "unknown macro"),
            ("", "expected 5 fields"),
            // Quartz's and croner's extensions, which the CronJob parser refuses.
            ("0 0 L * *", "day-of-month field"),
            ("0 0 15W * *", "day-of-month field"),
            ("0 0 * * 5#2", "day-of-week field"),
            ("0 0 * * 5L", "day-of-week field"),
            ("0 0 0 * * *", "expected 5 fields"),
        ] {
            let err = Cron::parse(expr).unwrap_err();
            assert!(err.to_string().contains(needle), "{expr}: {err}");
        }
    }
}
