//! The status arithmetic of upstream's disruption controller (`pkg/controller/disruption/disruption.go`), as pure
//! functions of the PDB spec, its pods, the owners' scale and the clock.
//!
//! # Guarantees (each mirrors the upstream function named)
//! - `getExpectedPodCount`: `maxUnavailable` (int or percent) counts the owners' scale and subtracts the
//!   rounded-up unavailable count, floored at 0; an integer `minAvailable` is the desired count over the number of
//!   matched pods; a percentage `minAvailable` is rounded up over the owners' scale; neither gives 0 and 0.
//! - `buildDisruptedPodMap`: an entry stays only while its pod exists, is not being deleted and was disrupted
//!   less than [`DELETION_TIMEOUT`] ago; the earliest expiry of the kept entries is when to look again.
//! - `countHealthyPods`: Ready pods that are neither being deleted nor in the kept disrupted entries.
//! - `updatePdbStatus`: `disruptionsAllowed = currentHealthy - desiredHealthy`, 0 when negative or when no pod
//!   is expected.

use jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;
use std::fmt;

/// How long an evicted pod may take to start terminating before the PDB stops counting it as disrupted
/// (upstream's `DeletionTimeout`).
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(2 * 60);

/// An `IntOrString` of a PDB: a count or a percentage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// A number of pods.
    Count(i32),
    /// A percentage of the expected pods.
    Percent(i32),
}

/// Why a PDB's status cannot be computed (upstream's sync error: the status becomes `SyncFailed`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncFailure {
    /// `minAvailable`/`maxUnavailable` is a string that is not a percentage.
    #[error("invalid value for IntOrString: invalid type: string is not a percentage: {0:?}")]
    NotAPercentage(String),
    /// A matched pod's controller is not one whose scale is known.
    #[error("found no controllers for pod {0:?}")]
    NoController(String),
}

impl Amount {
    /// Reads an `IntOrString`.
    pub fn parse(value: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString) -> Result<Amount, SyncFailure> {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        match value {
            IntOrString::Int(count) => Ok(Amount::Count(*count)),
            IntOrString::String(text) => text
                .strip_suffix('%')
                .and_then(|number| number.parse::<i32>().ok())
                .map(Amount::Percent)
                .ok_or_else(|| SyncFailure::NotAPercentage(text.clone())),
        }
    }

    /// Upstream's `GetScaledValueFromIntOrPercent`: a count as it is, a percentage of `total` rounded up or down.
    pub fn scaled(self, total: i32, round_up: bool) -> i32 {
        match self {
            Amount::Count(count) => count,
            Amount::Percent(percent) => {
                let product = i64::from(percent) * i64::from(total);
                let value = if round_up { (product + 99).div_euclid(100) } else { product.div_euclid(100) };
                value.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
            }
        }
    }
}

/// The budget of a PDB spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// `spec.minAvailable`.
    MinAvailable(Amount),
    /// `spec.maxUnavailable`.
    MaxUnavailable(Amount),
    /// Neither is set.
    Unset,
}

/// How many pods a PDB expects and how many of them must stay healthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expectation {
    /// `status.expectedPods`.
    pub expected_pods: i32,
    /// `status.desiredHealthy`.
    pub desired_healthy: i32,
}

/// `getExpectedPodCount`: `owners_scale` is called only when the budget needs the owners' scale (the sum of the
/// replicas of the distinct controllers of the matched pods).
pub fn expectation(
    budget: Budget,
    matched_pods: usize,
    owners_scale: impl FnOnce() -> Result<i32, SyncFailure>,
) -> Result<Expectation, SyncFailure> {
    Ok(match budget {
        Budget::MaxUnavailable(amount) => {
            let expected = owners_scale()?;
            let unavailable = amount.scaled(expected, true);
            Expectation { expected_pods: expected, desired_healthy: (expected - unavailable).max(0) }
        }
        Budget::MinAvailable(Amount::Count(count)) => {
            Expectation { expected_pods: i32::try_from(matched_pods).unwrap_or(i32::MAX), desired_healthy: count }
        }
        Budget::MinAvailable(amount @ Amount::Percent(_)) => {
            let expected = owners_scale()?;
            Expectation { expected_pods: expected, desired_healthy: amount.scaled(expected, true) }
        }
        Budget::Unset => Expectation { expected_pods: 0, desired_healthy: 0 },
    })
}

/// What the disruption controller reads of one matched pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodHealth {
    /// `metadata.name`.
    pub name: String,
    /// The Ready condition is True.
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

/// `buildDisruptedPodMap`: the entries of `status.disruptedPods` to keep, and the earliest time one of them
/// expires.
pub fn kept_disruptions(
    pods: &[PodHealth],
    disrupted: &BTreeMap<String, Timestamp>,
    now: Timestamp,
) -> (BTreeMap<String, Timestamp>, Option<Timestamp>) {
    let mut kept = BTreeMap::new();
    let mut recheck: Option<Timestamp> = None;
    for pod in pods.iter().filter(|p| !p.deleting) {
        let Some(since) = disrupted.get(&pod.name) else { continue };
        let expires = since.saturating_add(DELETION_TIMEOUT).unwrap_or(*since);
        if expires > now {
            recheck = Some(recheck.map_or(expires, |r| r.min(expires)));
            kept.insert(pod.name.clone(), *since);
        }
    }
    (kept, recheck)
}

/// `countHealthyPods`.
pub fn current_healthy(pods: &[PodHealth], kept_disruptions: &BTreeMap<String, Timestamp>, now: Timestamp) -> i32 {
    let count = pods
        .iter()
        .filter(|pod| !pod.deleting)
        .filter(|pod| {
            kept_disruptions
                .get(&pod.name)
                .is_none_or(|since| since.saturating_add(DELETION_TIMEOUT).unwrap_or(*since) <= now)
        })
        .filter(|pod| pod.ready)
        .count();
    i32::try_from(count).unwrap_or(i32::MAX)
}

/// `updatePdbStatus`'s rule for `disruptionsAllowed`.
pub fn disruptions_allowed(current_healthy: i32, expectation: Expectation) -> i32 {
    let allowed = current_healthy - expectation.desired_healthy;
    if expectation.expected_pods <= 0 || allowed <= 0 { 0 } else { allowed }
}

/// The computed part of a PDB's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Computed {
    /// `status.currentHealthy`.
    pub current_healthy: i32,
    /// `status.desiredHealthy`.
    pub desired_healthy: i32,
    /// `status.expectedPods`.
    pub expected_pods: i32,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// `status.disruptedPods`.
    pub disrupted_pods: BTreeMap<String, Timestamp>,
    /// When a disrupted entry expires and the PDB must be computed again.
    pub recheck_at: Option<Timestamp>,
}

/// The whole computation of one PDB (`trySync`).
pub fn compute(
    budget: Budget,
    pods: &[PodHealth],
    owners_scale: impl FnOnce() -> Result<i32, SyncFailure>,
    disrupted: &BTreeMap<String, Timestamp>,
    now: Timestamp,
) -> Result<Computed, SyncFailure> {
    let expectation = expectation(budget, pods.len(), owners_scale)?;
    let (disrupted_pods, recheck_at) = kept_disruptions(pods, disrupted, now);
    let current_healthy = current_healthy(pods, &disrupted_pods, now);
    Ok(Computed {
        current_healthy,
        desired_healthy: expectation.desired_healthy,
        expected_pods: expectation.expected_pods,
        disruptions_allowed: disruptions_allowed(current_healthy, expectation),
        disrupted_pods,
        recheck_at,
    })
}

/// The reason of the `DisruptionAllowed` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Disruptions are allowed.
    SufficientPods,
    /// No disruption is allowed.
    InsufficientPods,
    /// The status could not be computed; no disruption is allowed.
    SyncFailed,
}

impl Reason {
    /// The reason for a computed `disruptionsAllowed`.
    pub fn for_allowed(disruptions_allowed: i32) -> Reason {
        if disruptions_allowed > 0 { Reason::SufficientPods } else { Reason::InsufficientPods }
    }

    /// The condition's status: `True` only with [`Reason::SufficientPods`].
    pub fn status(self) -> &'static str {
        match self {
            Reason::SufficientPods => "True",
            Reason::InsufficientPods | Reason::SyncFailed => "False",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::SufficientPods => "SufficientPods",
            Reason::InsufficientPods => "InsufficientPods",
            Reason::SyncFailed => "SyncFailed",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_as_upstream_does() {
        assert_eq!(Amount::Percent(50).scaled(3, true), 2);
        assert_eq!(Amount::Percent(50).scaled(3, false), 1);
        assert_eq!(Amount::Percent(0).scaled(3, true), 0);
        assert_eq!(Amount::Count(7).scaled(3, true), 7);
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        assert_eq!(Amount::parse(&IntOrString::String("25%".into())), Ok(Amount::Percent(25)));
        assert!(Amount::parse(&IntOrString::String("25".into())).is_err());
    }
}
