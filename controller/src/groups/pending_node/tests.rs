use super::*;
use crate::groups::condition::Wanted;
use crate::reason::Reason;
use decide::DONOR_RECHECK;
use shared::protocol::keys;

const T0: i64 = 1_700_000_000;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(T0 + seconds).unwrap()
}

fn facts(goal: PendingNodeGoal, now: i64, node: NodeFact, state: InstanceState) -> Facts<'static> {
    Facts {
        goal,
        reached_goal: false,
        deadline: at(1800),
        created: at(0),
        now: at(now),
        node,
        state: Ok(state),
        leave_overdue: false,
        donor_waits: false,
        expected: None,
    }
}

fn condition<'a>(decision: &'a Decision, type_: &str) -> Option<&'a Wanted> {
    decision.conditions.iter().find(|c| c.type_ == type_)
}

use InstanceState as S;
use NodeFact as N;
use PendingNodeGoal::{Join, Leave};

#[test]
fn a_joining_instance_reaches_its_goal_only_with_a_ready_node_and_a_ready_instance() {
    for node in [N::Absent, N::NotReady, N::Ready] {
        for state in [S::Creating, S::Ready, S::Stopping, S::Stopped] {
            let decision = decide(&facts(Join, 60, node, state));
            let joined = node == N::Ready && state == S::Ready;
            assert_eq!(decision.step == Move::Joined, joined, "{node:?} {state:?}");
            if joined {
                assert_eq!(decision.wake, None, "nothing more to poll");
                assert_eq!(decision.event.as_ref().map(|e| e.reason), Some(Reason::Joined));
            } else {
                assert_eq!(decision.step, Move::Wait);
                assert!(decision.wake.is_some());
            }
            assert_eq!(decision.csp_state, Some(csp_state(state)));
        }
    }
}

#[test]
fn a_joining_instance_is_given_up_at_its_deadline_or_when_the_cloud_failed_it() {
    for (now, node, state, expected) in [
        (1800, N::Absent, S::Creating, Some(JoinFailure::DeadlineExceeded)),
        (1801, N::NotReady, S::Ready, Some(JoinFailure::DeadlineExceeded)),
        (1799, N::NotReady, S::Ready, None),
        (60, N::Absent, S::Failed, Some(JoinFailure::InstanceFailed)),
        (60, N::NotReady, S::Terminated, Some(JoinFailure::InstanceGone)),
        (60, N::Absent, S::Terminating, Some(JoinFailure::InstanceGone)),
        // Ready at the deadline: joined, not failed.
        (5000, N::Ready, S::Ready, None),
    ] {
        let decision = decide(&facts(Join, now, node, state));
        match expected {
            Some(why) => {
                assert_eq!(decision.step, Move::GiveUp(why), "{now} {node:?} {state:?}");
                let failed = condition(&decision, JOIN_FAILED).unwrap();
                assert_eq!((failed.status, failed.reason.as_str()), ("True", why.as_str()));
                let event = decision.event.unwrap();
                assert!(event.warning && event.reason == Reason::JoinFailed);
                assert_eq!(decision.wake, Some(Duration::ZERO));
            }
            None => assert!(matches!(decision.step, Move::Wait | Move::Joined), "{now} {node:?} {state:?}"),
        }
    }
}

#[test]
fn the_deadline_holds_even_when_the_cloud_cannot_be_asked() {
    let error = cloud::Error::transient("503");
    let mut f = facts(Join, 1900, N::Absent, S::Creating);
    f.state = Err(&error);
    let decision = decide(&f);
    assert_eq!(decision.step, Move::GiveUp(JoinFailure::DeadlineExceeded));
    assert_eq!(decision.csp_state, None, "cspState is not guessed");
    assert_eq!(condition(&decision, SYNCED).unwrap().reason, "Transient");
    f.now = at(100);
    let decision = decide(&f);
    assert_eq!(decision.step, Move::Wait);
    assert_eq!(condition(&decision, SYNCED).unwrap().status, "False");
}

#[test]
fn a_joined_pending_node_is_left_alone() {
    let mut f = facts(Join, 5000, N::Absent, S::Terminated);
    f.reached_goal = true;
    let decision = decide(&f);
    assert_eq!((decision.step, decision.wake), (Move::Wait, None));
}

#[test]
fn timers_wake_at_the_deadline_or_the_next_poll_whichever_is_first() {
    // Young: polled every second.
    assert_eq!(decide(&facts(Join, 5, N::Absent, S::Creating)).wake, Some(Duration::from_secs(1)));
    // Older: a tenth of its age.
    assert_eq!(decide(&facts(Join, 100, N::Absent, S::Creating)).wake, Some(Duration::from_secs(10)));
    // Old: at most every 30 s.
    assert_eq!(decide(&facts(Join, 1000, N::Absent, S::Creating)).wake, Some(Duration::from_secs(30)));
    // Close to the deadline: at the deadline.
    assert_eq!(decide(&facts(Join, 1790, N::Absent, S::Creating)).wake, Some(Duration::from_secs(10)));
    assert_eq!(decide(&facts(Leave, 1790, N::Absent, S::Terminating)).wake, Some(Duration::from_secs(10)));
}

#[test]
fn a_group_of_known_pace_is_polled_shortly_before_its_instances_usually_get_there() {
    // Its instances leave in 60 s: a young one is next asked 48 s after its creation (at most 30 s on), an older
    // one at a tenth of its age.
    let paced =
        |goal, age, state| Facts { expected: Some(Duration::from_secs(60)), ..facts(goal, age, N::Absent, state) };
    assert_eq!(decide(&paced(Leave, 0, S::Terminating)).wake, Some(Duration::from_secs(30)));
    assert_eq!(decide(&paced(Leave, 40, S::Terminating)).wake, Some(Duration::from_secs(8)));
    assert_eq!(decide(&paced(Leave, 100, S::Terminating)).wake, Some(Duration::from_secs(10)));
    // A fast group (the simulated cloud): a tenth of a second apart, not a second.
    let fast = Facts { expected: Some(Duration::from_millis(300)), ..facts(Leave, 1, N::Absent, S::Terminating) };
    assert_eq!(decide(&fast).wake, Some(MIN_POLL));
}

#[test]
fn a_leaving_instance_is_removed_once_terminated_and_its_deletion_retried_past_the_deadline() {
    for node in [N::Absent, N::NotReady, N::Ready] {
        for state in [S::Creating, S::Ready, S::Stopping, S::Stopped, S::Terminating, S::Failed, S::Terminated] {
            for now in [60, 1800, 2400] {
                let decision = decide(&facts(Leave, now, node, state));
                let expected = if state == S::Terminated {
                    Move::Remove
                } else if now >= 1800 {
                    Move::RetryDelete
                } else {
                    Move::Wait
                };
                assert_eq!(decision.step, expected, "{node:?} {state:?} {now}");
                if expected == Move::RetryDelete {
                    assert_eq!(condition(&decision, LEAVE_OVERDUE).unwrap().status, "True");
                    assert_eq!(
                        decision.event.as_ref().map(|e| (e.reason, e.warning)),
                        Some((Reason::LeaveDeadlineExceeded, true))
                    );
                }
            }
        }
    }
}

#[test]
fn overdue_deletions_back_off_and_warn_once() {
    let just = decide(&facts(Leave, 1800, N::Absent, S::Terminating));
    assert_eq!(just.wake, Some(Duration::from_secs(30)), "at least the poll interval");
    let mut later = facts(Leave, 1800 + 3600, N::Absent, S::Terminating);
    later.leave_overdue = true;
    let later = decide(&later);
    assert_eq!(later.wake, Some(Duration::from_secs(300)));
    assert_eq!(later.event, None, "the Warning came when it became overdue");
}

#[test]
fn a_state_read_is_reused_until_its_poll_is_due_or_the_node_changed() {
    let mut memo = StateMemo::default();
    assert_eq!(memo.fresh("p", N::Absent, at(0)), None);
    memo.record("p", N::Absent, S::Creating, at(100), Duration::from_secs(10));
    // Node events and the controller's own writes within the poll interval: no new call.
    assert_eq!(memo.fresh("p", N::Absent, at(100)), Some(S::Creating));
    assert_eq!(memo.fresh("p", N::Absent, at(109)), Some(S::Creating));
    // The timer that polls next: due.
    assert_eq!(memo.fresh("p", N::Absent, at(110)), None);
    // The Node registered, or became Ready, or left: asked again at once.
    assert_eq!(memo.fresh("p", N::NotReady, at(101)), None);
    assert_eq!(memo.fresh("p", N::Ready, at(101)), None);
    // Another PendingNode, or one whose instance was deleted: nothing kept.
    assert_eq!(memo.fresh("q", N::Absent, at(101)), None);
    memo.forget("p");
    assert_eq!(memo.fresh("p", N::Absent, at(101)), None);
}

#[test]
fn expired_states_are_dropped_as_new_ones_are_recorded() {
    let mut memo = StateMemo::default();
    memo.record("a", N::Absent, S::Creating, at(0), Duration::from_secs(1));
    memo.record("b", N::Ready, S::Ready, at(0), Duration::from_secs(30));
    // Kept for twice their validity, so that a read after expiry still knows the PendingNode's first look.
    memo.record("c", N::Absent, S::Creating, at(5), Duration::from_secs(1));
    assert_eq!(memo.len(), 2, "a expired twice over");
    let now = tokio::time::Instant::now();
    assert!(memo.list_since("c", now, LIST_REUSE).is_some() && memo.list_since("a", now, LIST_REUSE).is_none());
    memo.record("d", N::Absent, S::Creating, at(40), Duration::from_secs(1));
    assert_eq!(memo.len(), 2, "b is kept until 60 s");
    memo.record("e", N::Absent, S::Creating, at(70), Duration::from_secs(1));
    assert_eq!(memo.len(), 1);
    assert!(!memo.is_empty());
}

#[test]
fn a_failed_deletion_names_the_error() {
    let (synced, event) = delete_failed(&cloud::Error::transient("connection reset"));
    assert_eq!((synced.status, synced.reason.as_str()), ("False", "Transient"));
    assert!(event.warning);
    assert!(event.message.contains("connection reset"));
}

#[test]
fn deadlines_default_to_the_goal_timeout_from_creation() {
    let mut pending = PendingNode::new("p", Default::default());
    let join = Duration::from_secs(1800);
    let leave = Duration::from_secs(300);
    assert_eq!(deadline_of(&pending, at(0), join, leave), at(1800));
    pending.spec.goal = Leave;
    assert_eq!(deadline_of(&pending, at(0), join, leave), at(300));
    pending.spec.deadline = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(42)));
    assert_eq!(deadline_of(&pending, at(0), join, leave), at(42));
}

#[test]
fn failed_joins_are_counted_from_the_condition() {
    let mut failed = PendingNode::new("a", Default::default());
    let mut status = shared::crd::PendingNodeStatus::default();
    condition::set(&mut status.conditions, &Wanted::new(JOIN_FAILED, true, "DeadlineExceeded", ""), None, at(0));
    failed.status = Some(status);
    let fine = PendingNode::new("b", Default::default());
    assert_eq!(failed_joins([&failed, &fine]), 1);
    // A failed join's record counts its join too: it tells nothing of the group's pace of leaving.
    assert_eq!(leave_took(&failed, at(0), at(90)), None);
    assert_eq!(leave_took(&fine, at(0), at(90)), Some(Duration::from_secs(90)));
}

#[test]
fn the_node_is_found_by_its_provider_id_and_its_ready_condition() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n"},
        "spec": {"providerID": "simulated://g/n"},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]}
    }))
    .unwrap();
    assert_eq!(node_fact([&node], "simulated://g/n"), N::NotReady);
    assert_eq!(node_fact([&node], "simulated://g/other"), N::Absent);
    let ready: Node = serde_json::from_value(json!({
        "metadata": {"name": "n"},
        "spec": {"providerID": "simulated://g/n"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    assert_eq!(node_fact([&ready], "simulated://g/n"), N::Ready);
}

/// Issue 28 defect 3: the Node's provider ID spelt as cloud-provider-azure spells it (resource group in lower
/// case), the PendingNode's as ARM listed it: the same instance.
#[test]
fn azure_provider_ids_match_whatever_the_case_of_their_resource_group() {
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "workers000002"},
        "spec": {"providerID": "azure:///subscriptions/s-1/resourceGroups/my-rg/providers/Microsoft.Compute/virtualMachineScaleSets/workers/virtualMachines/2"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    let listed = "azure:///subscriptions/s-1/resourceGroups/MY-RG/providers/Microsoft.Compute/virtualMachineScaleSets/workers/virtualMachines/2";
    assert_eq!(node_fact([&node], listed), N::Ready);
    let other = listed.replace("virtualMachines/2", "virtualMachines/3");
    assert_eq!(node_fact([&node], &other), N::Absent);
    assert!(!same_instance("simulated://g/n", "simulated://g/m"));
}

#[test]
fn a_failed_join_stays_recorded_until_its_donor_is_marked_then_goes() {
    // Terminated, but the donor still waits for it: kept (looked at again shortly), so the rollout sees the
    // failure instead of taking the missing record for an unrecorded request.
    let waiting = Facts { donor_waits: true, ..facts(Leave, 60, N::Absent, S::Terminated) };
    let decision = decide(&waiting);
    assert_eq!(decision.step, Move::Wait);
    assert_eq!(decision.wake, Some(DONOR_RECHECK));
    assert_eq!(decide(&facts(Leave, 60, N::Absent, S::Terminated)).step, Move::Remove);
    // Not terminated yet: as any leaving instance.
    assert_eq!(decide(&Facts { donor_waits: true, ..facts(Leave, 60, N::Absent, S::Terminating) }).step, Move::Wait);
}

#[test]
fn a_donor_waits_for_the_record_of_its_own_attempt_only() {
    use std::collections::BTreeMap;
    let intent = |step: &str, since: &str| {
        BTreeMap::from([
            (keys::INTENT.to_owned(), step.to_owned()),
            (keys::INTENT_TARGET.to_owned(), "v2".to_owned()),
            (keys::INTENT_SINCE.to_owned(), since.to_owned()),
            (keys::INTENT_TOKEN.to_owned(), "t1".to_owned()),
        ])
    };
    let created: Timestamp = "2026-11-29T10:30:10Z".parse().unwrap();
    // Written in the second the record was created (creationTimestamp drops the fraction): this attempt's.
    assert!(attempt_waits(&intent("replace", "2026-11-29T10:30:10.805Z"), Some(created)));
    assert!(attempt_waits(&intent("replace", "2026-11-29T10:30:09.100Z"), Some(created)));
    // Marked failed, or a later attempt (an administrator retried it), or paired with a heir: not waiting.
    assert!(!attempt_waits(&intent("failed", "2026-11-29T10:30:10.805Z"), Some(created)));
    assert!(!attempt_waits(&intent("replace", "2026-11-29T10:30:11.000Z"), Some(created)));
    let mut paired = intent("replace", "2026-11-29T10:30:10.805Z");
    paired.insert(keys::HEIR.to_owned(), "n-new".to_owned());
    assert!(!attempt_waits(&paired, Some(created)));
    assert!(!attempt_waits(&BTreeMap::new(), Some(created)));
}

/// Issue 28, one list per group per poll: a PendingNode's first look asks nothing (its instance was just created or
/// deleted), and no list started before that look answers for it later (it would not show a new instance).
#[tokio::test(start_paused = true)]
async fn lists_older_than_a_pending_nodes_first_look_never_answer_for_it() {
    use tokio::time::Instant;
    let mut memo = StateMemo::default();
    assert_eq!(memo.list_since("p", Instant::now(), LIST_REUSE), None, "the first look");
    assert_eq!((first_look(Join), first_look(Leave)), (S::Creating, S::Terminating));
    let first = Instant::now();
    memo.record("p", N::Absent, first_look(Join), at(0), LIST_REUSE);
    tokio::time::advance(Duration::from_millis(400)).await;
    assert_eq!(
        memo.list_since("p", Instant::now(), LIST_REUSE),
        Some(first),
        "never a list from before the first look"
    );
    tokio::time::advance(Duration::from_secs(2)).await;
    memo.record("p", N::NotReady, S::Creating, at(2), Duration::from_secs(1));
    let now = Instant::now();
    assert_eq!(memo.list_since("p", now, LIST_REUSE), Some(now - LIST_REUSE), "later, a list up to LIST_REUSE old");
    let poll = Duration::from_millis(100);
    assert_eq!(memo.list_since("p", now, poll), Some(now - poll), "polled more often: a list up to its interval old");
    let slow = Duration::from_secs(30);
    assert_eq!(memo.list_since("p", now, slow), Some(now - LIST_REUSE), "never older than LIST_REUSE");
    // Its instance deleted by the controller: nothing remembered, and only a list started since is taken.
    memo.deleted("p", at(3));
    assert_eq!(memo.fresh("p", N::NotReady, at(3)), None);
    assert_eq!(memo.list_since("p", now, LIST_REUSE), Some(now), "a list started after the deletion");
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(memo.list_since("p", Instant::now(), LIST_REUSE), Some(Instant::now() - LIST_REUSE));
    memo.forget("p");
    assert_eq!(memo.list_since("p", now, LIST_REUSE), None, "done: nothing kept");
}
