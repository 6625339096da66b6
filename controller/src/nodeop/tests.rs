use super::*;
use shared::crd::nodeop::{NodeOpNodeStatus, NodeOpStatus};
use shared::protocol::{BootId, Step};

fn now() -> Timestamp {
    "2026-11-24T10:00:00Z".parse().unwrap()
}

/// Issue 27 item 3k: the warnings' memory is bounded by the NodeOps there are.
#[test]
fn warnings_of_nodeops_that_are_gone_are_forgotten() {
    let mut warned: HashSet<String> = ["u1/all", "u2/all", "u2/other"].map(String::from).into();
    forget_warnings(&mut warned, &["u2".to_owned(), "u3".to_owned()].into());
    assert_eq!(warned, ["u2/all", "u2/other"].map(String::from).into());
    forget_warnings(&mut warned, &HashSet::new());
    assert!(warned.is_empty());
}

#[test]
fn starting_cordons_with_the_ownership_record_only_a_schedulable_node() {
    let start = Action::Start { cordon: true };
    let (next, mark, unschedulable) =
        next_node_state(&ControllerAnnotations::default(), false, "ns/op@u", &start, now()).unwrap();
    assert!(next.cordoned_by_us && unschedulable);
    assert_eq!(mark.as_deref(), Some("ns/op@u"));
    let (next, _, unschedulable) =
        next_node_state(&ControllerAnnotations::default(), true, "ns/op@u", &start, now()).unwrap();
    assert!(unschedulable && !next.cordoned_by_us, "someone else's cordon is not claimed");
}

#[test]
fn releasing_removes_the_reboot_intent_and_only_our_cordon() {
    let reboot = Action::Reboot { target: "v1".into(), boot_id_before: BootId::parse("k", "b0").unwrap() };
    let (rebooting, _, unschedulable) =
        next_node_state(&ControllerAnnotations::default(), false, "ns/op@u", &reboot, now()).unwrap();
    assert!(unschedulable && rebooting.cordoned_by_us);
    assert_eq!(rebooting.intent.as_ref().map(|i| i.step), Some(Step::Reboot));
    let (released, mark, unschedulable) =
        next_node_state(&rebooting, true, "ns/op@u", &Action::Release, now()).unwrap();
    assert_eq!((released, mark, unschedulable), (ControllerAnnotations::default(), None, false));
    let foreign = ControllerAnnotations::default();
    let (_, _, unschedulable) = next_node_state(&foreign, true, "ns/op@u", &Action::Release, now()).unwrap();
    assert!(unschedulable, "a cordon without our record stays");
}

#[test]
fn the_status_moves_last_updated_only_for_what_changed() {
    let status = NodeOpNodeStatus { phase: shared::crd::nodeop::NodeOpPhase::Running, ..Default::default() };
    let decision = Decision {
        nodes: vec![decide::NodeDecision { node: "w1".into(), action: None, status, notice: None }],
        phase: shared::crd::nodeop::NodeOpPhase::Running,
        total: 1,
        running: 1,
        ..Default::default()
    };
    let first = next_status(&NodeOpStatus::default(), &decision, Some(1), now());
    assert_eq!(first.node_statuses["w1"].last_updated, Some(Time(now())));
    let later: Timestamp = "2026-11-24T10:05:00Z".parse().unwrap();
    let again = next_status(&first, &decision, Some(1), later);
    assert_eq!(again, first, "nothing changed, nothing to write");
    let progressing = first.conditions.iter().find(|c| c.type_ == "Progressing").unwrap();
    assert_eq!(progressing.status, "True");
}
