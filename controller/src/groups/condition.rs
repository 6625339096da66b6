//! Setting one condition in a status's `conditions` list.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use shared::protocol::truncate_to_seconds;

/// A condition to set: type, status (`True`, `False`, `Unknown`), reason (PascalCase) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The condition type.
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// Why, in PascalCase.
    pub reason: String,
    /// For people.
    pub message: String,
}

impl Wanted {
    /// A condition of `type_` with `status` (true or false), `reason` and `message`.
    pub fn new(type_: &'static str, status: bool, reason: impl Into<String>, message: impl Into<String>) -> Wanted {
        Wanted { type_, status: if status { "True" } else { "False" }, reason: reason.into(), message: message.into() }
    }

    /// A condition of `type_` whose status is not known.
    pub fn unknown(type_: &'static str, reason: impl Into<String>, message: impl Into<String>) -> Wanted {
        Wanted { type_, status: "Unknown", reason: reason.into(), message: message.into() }
    }
}

/// Sets `wanted` in `conditions`, as `meta.SetStatusCondition` does: `lastTransitionTime` moves to `now` only
/// (whole seconds, as the API stores it) when the status changes (or the condition is new); reason, message and `observedGeneration` are updated.
/// Returns whether anything changed.
pub fn set(conditions: &mut Vec<Condition>, wanted: &Wanted, generation: Option<i64>, now: Timestamp) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == wanted.type_) {
        Some(existing) => {
            let before = existing.clone();
            if existing.status != wanted.status {
                existing.status = wanted.status.to_owned();
                existing.last_transition_time = Time(truncate_to_seconds(now));
            }
            existing.reason = wanted.reason.clone();
            existing.message = wanted.message.clone();
            existing.observed_generation = generation;
            *existing != before
        }
        None => {
            conditions.push(Condition {
                type_: wanted.type_.to_owned(),
                status: wanted.status.to_owned(),
                reason: wanted.reason.clone(),
                message: wanted.message.clone(),
                observed_generation: generation,
                last_transition_time: Time(truncate_to_seconds(now)),
            });
            true
        }
    }
}

/// The status of the condition of `type_` in `conditions`, if set.
pub fn status_of<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    conditions.iter().find(|c| c.type_ == type_).map(|c| c.status.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transition_time_moves_only_when_the_status_changes() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let t2 = Timestamp::from_second(3_000).unwrap();
        let mut conditions = Vec::new();
        assert!(set(&mut conditions, &Wanted::new("Ready", true, "Ok", "fine"), Some(1), t0));
        assert!(!set(&mut conditions, &Wanted::new("Ready", true, "Ok", "fine"), Some(1), t1), "no change");
        assert!(set(&mut conditions, &Wanted::new("Ready", true, "Ok", "still fine"), Some(2), t1));
        assert_eq!(conditions[0].last_transition_time, Time(t0));
        assert_eq!(conditions[0].observed_generation, Some(2));
        assert!(set(&mut conditions, &Wanted::new("Ready", false, "Throttled", "slow down"), Some(2), t2));
        assert_eq!(conditions[0].last_transition_time, Time(t2));
        assert!(set(&mut conditions, &Wanted::unknown("Outdated", "NoNodeVersion", "none"), None, t2));
        assert_eq!(conditions.len(), 2);
        assert_eq!(status_of(&conditions, "Ready"), Some("False"));
        assert_eq!(status_of(&conditions, "Outdated"), Some("Unknown"));
        assert_eq!(status_of(&conditions, "Missing"), None);
    }
}
