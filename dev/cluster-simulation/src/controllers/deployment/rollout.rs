//! The rollout arithmetic of upstream's deployment controller (`pkg/controller/deployment/rolling.go`,
//! `recreate.go`, `util/deployment_util.go`), as pure functions over the ReplicaSets' replica counts.

use super::super::disruption::math::{Amount, SyncFailure};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Upstream's default for both `maxSurge` and `maxUnavailable`.
const DEFAULT_FRACTION: Amount = Amount::Percent(25);

/// `ResolveFenceposts`: `maxSurge` rounds up and `maxUnavailable` down over `desired`; when both come out 0,
/// `maxUnavailable` is 1, so that a rollout can always make progress.
///
/// Examples: 10 desired with 25%/25% gives surge 3, unavailable 2; 1 desired with 25%/25% gives 1/0; 2 desired
/// with 0/1% gives 0/1.
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: i32,
) -> Result<(i32, i32), SyncFailure> {
    let surge = max_surge.map(Amount::parse).transpose()?.unwrap_or(DEFAULT_FRACTION).scaled(desired, true);
    let unavailable =
        max_unavailable.map(Amount::parse).transpose()?.unwrap_or(DEFAULT_FRACTION).scaled(desired, false);
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge.max(0), unavailable.max(0)))
}

/// What the rollout reads of one ReplicaSet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicas {
    /// `spec.replicas`.
    pub wanted: i32,
    /// `status.availableReplicas`.
    pub available: i32,
}

/// `NewRSNewReplicas` for a rolling update: how far the new ReplicaSet may grow without exceeding
/// `desired + surge` pods in total.
pub fn new_replicas(desired: i32, surge: i32, new: Replicas, old: &[Replicas]) -> i32 {
    if new.wanted >= desired {
        return desired;
    }
    let total: i32 = new.wanted + old.iter().map(|r| r.wanted).sum::<i32>();
    let room = desired + surge - total;
    if room <= 0 {
        return new.wanted;
    }
    new.wanted + room.min(desired - new.wanted)
}

/// `reconcileOldReplicaSets`: the new `spec.replicas` of each old ReplicaSet (oldest first), shrinking the
/// unavailable pods first and the available ones only while at least `desired - unavailable` stay available.
pub fn old_replicas(desired: i32, unavailable: i32, new: Replicas, old: &[Replicas]) -> Vec<i32> {
    let mut wanted: Vec<i32> = old.iter().map(|r| r.wanted).collect();
    if wanted.iter().sum::<i32>() == 0 {
        return wanted;
    }
    let min_available = desired - unavailable;
    let all: i32 = new.wanted + wanted.iter().sum::<i32>();
    let new_unavailable = (new.wanted - new.available).max(0);
    let max_scaled_down = all - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return wanted;
    }
    // Pods that are not available anyway go first: removing them costs no availability.
    let mut cleaned = 0;
    for (target, rs) in wanted.iter_mut().zip(old) {
        if cleaned >= max_scaled_down {
            break;
        }
        let unhealthy = (*target - rs.available).max(0);
        let step = unhealthy.min(max_scaled_down - cleaned);
        *target -= step;
        cleaned += step;
    }
    let available: i32 = new.available + old.iter().zip(&wanted).map(|(rs, w)| rs.available.min(*w)).sum::<i32>();
    if available <= min_available {
        return wanted;
    }
    let mut budget = available - min_available;
    for target in wanted.iter_mut() {
        if budget == 0 {
            break;
        }
        let step = (*target).min(budget);
        *target -= step;
        budget -= step;
    }
    wanted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(wanted: i32, available: i32) -> Replicas {
        Replicas { wanted, available }
    }

    #[test]
    fn fenceposts_round_and_never_both_zero() {
        let pct = |p: &str| IntOrString::String(p.to_owned());
        let cases = [
            (None, None, 10, (3, 2)),
            (None, None, 1, (1, 0)),
            (Some(pct("0%")), Some(pct("1%")), 2, (0, 1)),
            (Some(IntOrString::Int(0)), Some(IntOrString::Int(0)), 5, (0, 1)),
            (Some(IntOrString::Int(2)), Some(IntOrString::Int(1)), 5, (2, 1)),
        ];
        for (surge, unavailable, desired, expected) in cases {
            assert_eq!(resolve_fenceposts(surge.as_ref(), unavailable.as_ref(), desired).unwrap(), expected);
        }
        assert!(resolve_fenceposts(Some(&pct("x")), None, 3).is_err());
    }

    #[test]
    fn the_new_replicaset_grows_within_the_surge() {
        // 3 desired, surge 1: an old RS of 3 lets the new one have 1.
        assert_eq!(new_replicas(3, 1, r(0, 0), &[r(3, 3)]), 1);
        // Already at desired + surge in total: no growth.
        assert_eq!(new_replicas(3, 1, r(1, 0), &[r(3, 3)]), 1);
        // Old ones gone: straight to desired.
        assert_eq!(new_replicas(3, 1, r(1, 1), &[r(0, 0)]), 3);
        assert_eq!(new_replicas(3, 1, r(5, 5), &[]), 3);
    }

    #[test]
    fn old_replicasets_shrink_without_breaking_availability() {
        // 3 desired, unavailable 0, new RS 1 not yet available: nothing old may go.
        assert_eq!(old_replicas(3, 0, r(1, 0), &[r(3, 3)]), vec![3]);
        // The new pod is available: one old pod may go.
        assert_eq!(old_replicas(3, 0, r(1, 1), &[r(3, 3)]), vec![2]);
        // Unavailable old pods go first, as far as the budget reaches.
        assert_eq!(old_replicas(3, 1, r(1, 1), &[r(3, 1)]), vec![1]);
        // Oldest first across several old RSs.
        assert_eq!(old_replicas(4, 1, r(2, 2), &[r(1, 1), r(2, 2)]), vec![0, 1]);
        assert_eq!(old_replicas(3, 1, r(3, 3), &[r(0, 0)]), vec![0]);
    }
}
