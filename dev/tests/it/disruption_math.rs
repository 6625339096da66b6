//! Table tests of the disruption controller's status arithmetic (§4.3 of the API semantics).

use dev::controllers::disruption::math::{
    Amount, Budget, Computed, DELETION_TIMEOUT, PodHealth, SyncFailure, compute, disruptions_allowed, expectation,
};
use jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;

fn now() -> Timestamp {
    "2026-01-01T12:00:00Z".parse().unwrap()
}

fn pod(name: &str, ready: bool, deleting: bool) -> PodHealth {
    PodHealth { name: name.to_owned(), ready, deleting }
}

fn ready_pods(n: usize) -> Vec<PodHealth> {
    (0..n).map(|i| pod(&format!("p{i}"), true, false)).collect()
}

#[test]
fn expected_and_desired_counts_follow_the_budget_kind() {
    struct Case {
        name: &'static str,
        budget: Budget,
        matched: usize,
        scale: Result<i32, SyncFailure>,
        expected: Result<(i32, i32), SyncFailure>,
    }
    let cases = [
        Case {
            name: "integer minAvailable counts the matched pods, not the scale",
            budget: Budget::MinAvailable(Amount::Count(2)),
            matched: 3,
            scale: Err(SyncFailure::NoController("p".into())),
            expected: Ok((3, 2)),
        },
        Case {
            name: "percentage minAvailable rounds up over the owners' scale",
            budget: Budget::MinAvailable(Amount::Percent(50)),
            matched: 2,
            scale: Ok(5),
            expected: Ok((5, 3)),
        },
        Case {
            name: "integer maxUnavailable subtracts from the owners' scale",
            budget: Budget::MaxUnavailable(Amount::Count(1)),
            matched: 3,
            scale: Ok(3),
            expected: Ok((3, 2)),
        },
        Case {
            name: "percentage maxUnavailable rounds the unavailable count up",
            budget: Budget::MaxUnavailable(Amount::Percent(34)),
            matched: 3,
            scale: Ok(3),
            expected: Ok((3, 1)),
        },
        Case {
            name: "maxUnavailable above the scale floors desiredHealthy at 0",
            budget: Budget::MaxUnavailable(Amount::Count(5)),
            matched: 3,
            scale: Ok(3),
            expected: Ok((3, 0)),
        },
        Case {
            name: "maxUnavailable over bare pods expects nothing",
            budget: Budget::MaxUnavailable(Amount::Count(1)),
            matched: 3,
            scale: Ok(0),
            expected: Ok((0, 0)),
        },
        Case {
            name: "no budget expects nothing",
            budget: Budget::Unset,
            matched: 3,
            scale: Ok(3),
            expected: Ok((0, 0)),
        },
        Case {
            name: "a failed scale lookup fails the sync",
            budget: Budget::MaxUnavailable(Amount::Count(1)),
            matched: 1,
            scale: Err(SyncFailure::NoController("p".into())),
            expected: Err(SyncFailure::NoController("p".into())),
        },
    ];
    for case in cases {
        let got =
            expectation(case.budget, case.matched, || case.scale.clone()).map(|e| (e.expected_pods, e.desired_healthy));
        assert_eq!(got, case.expected, "{}", case.name);
    }
}

#[test]
fn disruptions_allowed_is_never_negative_and_zero_without_expected_pods() {
    use dev::controllers::disruption::math::Expectation;
    let cases = [
        (3, Expectation { expected_pods: 3, desired_healthy: 2 }, 1),
        (3, Expectation { expected_pods: 3, desired_healthy: 3 }, 0),
        (1, Expectation { expected_pods: 3, desired_healthy: 2 }, 0),
        (3, Expectation { expected_pods: 0, desired_healthy: 0 }, 0),
        (5, Expectation { expected_pods: 5, desired_healthy: 0 }, 5),
    ];
    for (healthy, expectation, allowed) in cases {
        assert_eq!(disruptions_allowed(healthy, expectation), allowed, "{healthy} healthy, {expectation:?}");
    }
}

#[test]
fn whole_status_for_common_situations() {
    let recent = now() - SignedDuration::from_secs(10);
    let stale = now() - DELETION_TIMEOUT - SignedDuration::from_secs(1);
    struct Case {
        name: &'static str,
        budget: Budget,
        pods: Vec<PodHealth>,
        scale: i32,
        disrupted: Vec<(&'static str, Timestamp)>,
        healthy: i32,
        allowed: i32,
        kept: Vec<&'static str>,
    }
    let cases = [
        Case {
            name: "minAvailable 2 over 2 Ready pods allows nothing",
            budget: Budget::MinAvailable(Amount::Count(2)),
            pods: ready_pods(2),
            scale: 2,
            disrupted: vec![],
            healthy: 2,
            allowed: 0,
            kept: vec![],
        },
        Case {
            name: "maxUnavailable 1 over 3 Ready pods allows one",
            budget: Budget::MaxUnavailable(Amount::Count(1)),
            pods: ready_pods(3),
            scale: 3,
            disrupted: vec![],
            healthy: 3,
            allowed: 1,
            kept: vec![],
        },
        Case {
            name: "a recently disrupted pod that is not yet deleting does not count as healthy",
            budget: Budget::MaxUnavailable(Amount::Count(1)),
            pods: ready_pods(3),
            scale: 3,
            disrupted: vec![("p0", recent)],
            healthy: 2,
            allowed: 0,
            kept: vec!["p0"],
        },
        Case {
            name: "a disrupted pod that is deleting leaves the map and does not count",
            budget: Budget::MaxUnavailable(Amount::Count(1)),
            pods: vec![pod("p0", true, true), pod("p1", true, false), pod("p2", true, false)],
            scale: 3,
            disrupted: vec![("p0", recent)],
            healthy: 2,
            allowed: 0,
            kept: vec![],
        },
        Case {
            name: "a disruption older than the deletion timeout is dropped and the pod counts again",
            budget: Budget::MaxUnavailable(Amount::Count(1)),
            pods: ready_pods(3),
            scale: 3,
            disrupted: vec![("p0", stale)],
            healthy: 3,
            allowed: 1,
            kept: vec![],
        },
        Case {
            name: "entries of pods that no longer exist are dropped",
            budget: Budget::MaxUnavailable(Amount::Count(1)),
            pods: ready_pods(3),
            scale: 3,
            disrupted: vec![("gone", recent)],
            healthy: 3,
            allowed: 1,
            kept: vec![],
        },
        Case {
            name: "not-Ready pods are not healthy",
            budget: Budget::MinAvailable(Amount::Count(1)),
            pods: vec![pod("p0", false, false), pod("p1", true, false)],
            scale: 2,
            disrupted: vec![],
            healthy: 1,
            allowed: 0,
            kept: vec![],
        },
        Case {
            name: "a replacement that turned Ready restores the budget",
            budget: Budget::MaxUnavailable(Amount::Count(1)),
            pods: vec![pod("old", true, true), pod("p1", true, false), pod("p2", true, false), pod("new", true, false)],
            scale: 3,
            disrupted: vec![("old", recent)],
            healthy: 3,
            allowed: 1,
            kept: vec![],
        },
    ];
    for case in cases {
        let disrupted: BTreeMap<String, Timestamp> =
            case.disrupted.iter().map(|(n, t)| ((*n).to_owned(), *t)).collect();
        let Computed { current_healthy, disruptions_allowed, disrupted_pods, recheck_at, .. } =
            compute(case.budget, &case.pods, || Ok(case.scale), &disrupted, now()).unwrap();
        assert_eq!(current_healthy, case.healthy, "{}: currentHealthy", case.name);
        assert_eq!(disruptions_allowed, case.allowed, "{}: disruptionsAllowed", case.name);
        let kept: Vec<&str> = disrupted_pods.keys().map(String::as_str).collect();
        assert_eq!(kept, case.kept, "{}: disruptedPods", case.name);
        assert_eq!(recheck_at.is_some(), !case.kept.is_empty(), "{}: recheck", case.name);
    }
}

#[test]
fn the_recheck_is_when_the_earliest_kept_disruption_expires() {
    let early = now() - SignedDuration::from_secs(60);
    let late = now() - SignedDuration::from_secs(10);
    let disrupted = BTreeMap::from([("p0".to_owned(), late), ("p1".to_owned(), early)]);
    let computed =
        compute(Budget::MaxUnavailable(Amount::Count(1)), &ready_pods(3), || Ok(3), &disrupted, now()).unwrap();
    assert_eq!(computed.recheck_at, Some(early + DELETION_TIMEOUT));
}
