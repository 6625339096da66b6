use super::*;
use crate::policy::Reason;
use shared::protocol::BootId;

fn action(kind: ActionKind) -> NodeAction {
    NodeAction { node: "n".into(), kind, reason: Reason::DrainStarted, message: "m".into() }
}

fn now() -> Timestamp {
    "2026-11-21T10:00:00.700Z".parse().unwrap()
}

fn tok() -> Token {
    Token::parse("k", "t").unwrap()
}

#[test]
fn cordon_records_ownership_only_when_it_cordons() {
    let (next, unsched) = next_state(
        &ControllerAnnotations::default(),
        false,
        &action(ActionKind::Drain { target: "v2".into() }),
        tok(),
        now(),
    );
    assert!(unsched && next.cordoned_by_us);
    assert_eq!(next.intent.as_ref().unwrap().step, Step::Drain);
    assert_eq!(next.intent.unwrap().since, "2026-11-21T10:00:00.700Z".parse::<Timestamp>().unwrap());
    let (next, unsched) = next_state(
        &ControllerAnnotations::default(),
        true,
        &action(ActionKind::Drain { target: "v2".into() }),
        tok(),
        now(),
    );
    assert!(unsched && !next.cordoned_by_us, "someone else's cordon is not claimed");
}

#[test]
fn finishing_actions_uncordon_only_what_the_controller_cordoned() {
    let ours = ControllerAnnotations { intent: None, cordoned_by_us: true };
    for kind in [
        ActionKind::Done { target: "v2".into() },
        ActionKind::Fail { target: "v2".into() },
        ActionKind::Block { target: "v2".into() },
        ActionKind::Release,
        ActionKind::Uncordon,
    ] {
        let (next, unsched) = next_state(&ours, true, &action(kind.clone()), tok(), now());
        assert!(!unsched && !next.cordoned_by_us, "{kind:?}");
        let (next, unsched) = next_state(&ControllerAnnotations::default(), true, &action(kind.clone()), tok(), now());
        assert!(unsched && !next.cordoned_by_us, "{kind:?} lifted a foreign cordon");
    }
}

#[test]
fn failures_record_reason_and_message() {
    let (next, _) = next_state(
        &ControllerAnnotations::default(),
        false,
        &NodeAction {
            node: "n".into(),
            kind: ActionKind::Fail { target: "v2".into() },
            reason: Reason::StageTimedOut,
            message: "slow".into(),
        },
        tok(),
        now(),
    );
    assert_eq!(next.intent.unwrap().message.as_deref(), Some("StageTimedOut: slow"));
}

#[test]
fn a_reboot_intent_carries_the_boot_id() {
    let boot = BootId::parse("k", "b0").unwrap();
    let (next, _) = next_state(
        &ControllerAnnotations::default(),
        true,
        &action(ActionKind::Reboot { target: "v2".into(), boot_id_before: boot.clone() }),
        tok(),
        now(),
    );
    assert_eq!(next.intent.unwrap().boot_id_before, Some(boot));
}
