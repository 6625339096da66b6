use super::*;
use crate::policy::budget::MaxUnavailable;
use crate::policy::tests::{TARGET, node, rollout_with, t, with_intent};
use crate::policy::{NodeAction, Plan, plan_with};
use jiff::SignedDuration;

fn member(group: &str) -> GroupMember {
    GroupMember {
        group_id: group.into(),
        provider_id: "sim://x".into(),
        image: Some("v1".into()),
        ready_since: Some(t(-600)),
        ..Default::default()
    }
}

/// `heir` after its Shield: tainted NoSchedule until it inherits.
fn shielded(mut heir: NodeView, donor: &str) -> NodeView {
    if let Some(m) = &mut heir.group {
        m.taints.push(shield(donor));
    }
    heir
}

fn in_group(name: &str, group: &str) -> NodeView {
    NodeView { group: Some(GroupMember { provider_id: format!("sim://{name}"), ..member(group) }), ..node(name) }
}

fn fleet(groups: &[(&str, bool, &str)]) -> Fleet {
    let groups = groups
        .iter()
        .map(|(id, cp, image)| GroupView { group_id: (*id).into(), control_plane: *cp, image: Some((*image).into()) })
        .collect();
    Fleet { groups, ..Fleet::default() }
}

fn policy(surge: u32, max: u32) -> Policy {
    Policy {
        max_surge: crate::policy::budget::MaxSurge::Count(surge),
        max_unavailable: MaxUnavailable::Count(max),
        ..Policy::default()
    }
}

fn run(nodes: &[NodeView], fleet: &Fleet, policy: Policy, now: Timestamp) -> Plan {
    plan_with(nodes, &[rollout_with(policy)], fleet, None, now).rollouts.remove(0)
}

fn kinds(plan: &Plan) -> Vec<(String, &'static str)> {
    plan.actions.iter().map(|a| (a.node.clone(), a.kind.name())).collect()
}

fn replacing(n: NodeView) -> NodeView {
    with_intent(n, Step::Replace, TARGET, "t1", t(0))
}

fn join(donor: &str, heir: &str) -> PendingView {
    PendingView {
        name: join_name(donor),
        node_name: heir.into(),
        group_id: "a".into(),
        goal: Goal::Join,
        donor: Some(donor.into()),
        reached_goal: false,
        join_failed: None,
        created: Some(t(1)),
    }
}

#[test]
fn group_nodes_are_replaced_and_the_others_updated_in_place_under_one_budget() {
    let nodes = [in_group("a1", "a"), in_group("a2", "a"), in_group("a3", "a"), node("w1")];
    let p = run(&nodes, &fleet(&[("a", false, TARGET)]), policy(2, 3), t(0));
    // maxUnavailable 3 would allow three, maxSurge 2 allows two replacements; the in-place node stages ahead of
    // its turn (outside the budget).
    assert_eq!(kinds(&p), vec![("a1".into(), "Replace"), ("a2".into(), "Replace"), ("w1".into(), "Stage")]);
    assert_eq!(p.in_flight.iter().filter(|f| f.step == Step::Replace).count(), 2);
    // maxUnavailable holds over both kinds: the staged node's turn waits for the replacement's slot.
    let p = run(&nodes, &fleet(&[("a", false, TARGET)]), policy(5, 1), t(0));
    assert_eq!(kinds(&p), vec![("a1".into(), "Replace"), ("w1".into(), "Stage")]);
    let staged = crate::policy::tests::staged(node("w1"));
    let nodes = [replacing(in_group("a1", "a")), in_group("a2", "a"), staged];
    let p = run(&nodes, &fleet(&[("a", false, TARGET)]), policy(5, 1), t(1));
    assert!(p.actions.iter().all(|a| !a.starts_node()), "{:?}", kinds(&p));
}

#[test]
fn a_percentage_of_surge_counts_the_nodes_to_be_replaced_rounding_up() {
    let nodes: Vec<NodeView> = (0..5).map(|i| in_group(&format!("a{i}"), "a")).collect();
    let policy = Policy { max_surge: crate::policy::budget::MaxSurge::Percent(30), ..policy(1, 5) };
    let p = run(&nodes, &fleet(&[("a", false, TARGET)]), policy, t(0));
    assert_eq!(p.actions.len(), 2, "30% of 5 is 2: {:?}", kinds(&p));
}

#[test]
fn no_replacement_starts_before_the_group_has_the_target_image() {
    let nodes = [in_group("a1", "a")];
    let p = run(&nodes, &fleet(&[("a", false, "v1")]), policy(1, 1), t(0));
    assert!(p.actions.is_empty());
    assert_eq!(p.held[0].hold.reason, Reason::GroupImagePending);
    // A node whose image no one reported is held, not replaced blindly.
    let unknown = NodeView { group: Some(GroupMember { image: None, ..member("a") }), ..node("a1") };
    let unknown = NodeView { agent: Ok(Default::default()), ..unknown };
    let p = run(&[unknown], &fleet(&[("a", false, TARGET)]), policy(1, 1), t(0));
    assert_eq!(p.held[0].hold.reason, Reason::ImageUnknown);
    // A node of a group the fleet does not know is updated in place.
    let p = run(&[in_group("x1", "x")], &fleet(&[("a", false, TARGET)]), policy(1, 1), t(0));
    assert_eq!(kinds(&p), vec![("x1".into(), "Stage")]);
}

/// Issue 28: while a create sent for a donor's unrecorded request may still make an instance, its creation step is
/// still asked for (it adopts the instance once listed, and requests none before), and the status says why
/// nothing joins.
#[test]
fn a_request_in_flight_is_named_in_the_status_while_its_step_is_still_asked_for() {
    let f = fleet(&[("a", false, TARGET)]);
    let donor = replacing(in_group("a1", "a"));
    let waiting = Fleet { requests_in_flight: [("a1".to_owned(), t(65))].into(), ..f.clone() };
    let p = run(std::slice::from_ref(&donor), &waiting, policy(1, 1), t(5));
    assert!(matches!(p.actions[0].kind, ActionKind::CreateInstance { .. }), "{:?}", kinds(&p));
    let said = p.in_flight[0].waiting_on.clone().unwrap_or_default();
    assert!(said.contains("may still make one until") && said.ends_with("(InstanceRequestInFlight)"), "{said}");
    // Past that time, or for another node, nothing is said.
    let p = run(std::slice::from_ref(&donor), &waiting, policy(1, 1), t(65));
    assert_eq!(p.in_flight[0].waiting_on, None);
    let p = run(std::slice::from_ref(&donor), &f, policy(1, 1), t(5));
    assert_eq!(p.in_flight[0].waiting_on, None);
}

#[test]
fn each_step_of_a_replacement_follows_from_the_cluster() {
    let f = fleet(&[("a", false, TARGET)]);
    let mut donor = replacing(in_group("a1", "a"));
    if let Some(m) = &mut donor.group {
        m.labels = [("pool".into(), "a".into()), ("node.kubernetes.io/instance-type".into(), "big".into())].into();
        m.taints = vec![
            TaintView { key: "dedicated".into(), value: None, effect: "NoSchedule".into() },
            TaintView { key: "node.kubernetes.io/unschedulable".into(), value: None, effect: "NoSchedule".into() },
        ];
    }
    // No instance yet: one is created, named after the donor.
    let p = run(&[donor.clone()], &f, policy(1, 1), t(5));
    assert_eq!(
        p.actions[0].kind,
        ActionKind::CreateInstance { group_id: "a".into(), pending: "heir-of-a1".into(), deadline: t(5 + 1800) }
    );
    // Not while the cluster-autoscaler runs.
    let running = Fleet { autoscaler_running: Some("not confirmed down".into()), ..f.clone() };
    let p = run(&[donor.clone()], &running, policy(1, 1), t(5));
    assert!(p.actions.is_empty() && p.counts.in_progress == 1, "{:?}", kinds(&p));
    // Joining: nothing to do, the donor keeps its slot.
    let mut f = f.clone();
    f.pending.push(join("a1", "a1-new"));
    let p = run(&[donor.clone()], &f, policy(1, 1), t(6));
    assert!(p.actions.is_empty());
    assert_eq!(p.counts.in_progress, 1);
    // The status names the donor, its heir and its PendingNode, and what the donor waits for.
    assert_eq!(p.in_flight[0].waiting_on.as_deref(), Some("the new instance a1-new to join (PendingNode heir-of-a1)"));
    assert_eq!(p.replacements.donors, ["a1"]);
    assert_eq!(p.replacements.heirs, ["a1-new"]);
    assert_eq!(p.replacements.pending, ["heir-of-a1"]);
    assert!(p.replacements.obsolete.is_empty() && p.replacements.retiring.is_empty());
    // Joined and Ready, soaked: the heir gets the donor's own labels and an administrator's taints.
    f.pending[0].reached_goal = true;
    let heir = NodeView {
        group: Some(GroupMember { image: Some(TARGET.into()), ready_since: Some(t(10)), ..member("a") }),
        agent: Ok(Default::default()),
        ..node("a1-new")
    };
    // Seen: tainted NoSchedule first (before it is Ready and soaked), so that no pod lands on it before it
    // carries the donor's taints.
    let p = run(&[donor.clone(), heir.clone()], &f, policy(1, 1), t(20));
    assert_eq!(kinds(&p), vec![("a1-new".into(), "Shield")]);
    assert_eq!(p.actions[0].kind, ActionKind::Shield { donor: "a1".into() });
    assert_eq!(p.actions[0].reason, Reason::HeirShielded);
    let heir = shielded(heir, "a1");
    let soaking = Policy { soak_time: SignedDuration::from_secs(60), ..policy(1, 1) };
    let p = run(&[donor.clone(), heir.clone()], &f, soaking.clone(), t(20));
    assert!(p.actions.is_empty() && p.wake_at == Some(t(70)), "{:?}", kinds(&p));
    let p = run(&[donor.clone(), heir.clone()], &f, soaking, t(70));
    let ActionKind::Inherit { donor: reference, labels, taints } = &p.actions[0].kind else {
        panic!("{:?}", p.actions)
    };
    assert_eq!(p.actions[0].node, "a1-new");
    assert_eq!(reference.name, "a1");
    assert_eq!(labels.keys().collect::<Vec<_>>(), ["pool"]);
    assert_eq!(taints.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(), ["dedicated"]);
    // Inherited, the shield still there: inherited again (the same patch removes it).
    let mut heir = heir;
    if let Some(m) = &mut heir.group {
        m.donor = Some(reference.clone());
        m.labels.extend(labels.clone());
        m.taints.extend(taints.clone());
    }
    let p = run(&[donor.clone(), heir.clone()], &f, policy(1, 1), t(80));
    assert_eq!(kinds(&p), vec![("a1-new".into(), "Inherit")]);
    // Inherited, the shield gone: never shielded again; the donor is cordoned and drained.
    if let Some(m) = &mut heir.group {
        m.taints.retain(|t| t.key != SHIELD_TAINT);
    }
    let p = run(&[donor.clone(), heir.clone()], &f, policy(1, 1), t(80));
    assert_eq!(p.actions[0].kind, ActionKind::DrainDonor { target: TARGET.into(), heir: "a1-new".into() });
    // Draining, then drained: retired (a worker: no etcd member).
    let mut draining = with_intent(donor.clone(), Step::Replace, TARGET, "t2", t(80));
    draining.unschedulable = true;
    if let Some(m) = &mut draining.group {
        m.heir = Some("a1-new".into());
    }
    let p = run(&[draining.clone(), heir.clone()], &f, policy(1, 1), t(90));
    assert_eq!(kinds(&p), vec![("a1".into(), "KeepDraining")]);
    assert_eq!(p.replacements.retiring, ["a1"], "its drain started");
    draining.drain = DrainProgress::Drained;
    let p = run(&[draining.clone(), heir.clone()], &f, policy(1, 1), t(95));
    assert_eq!(
        p.actions[0].kind,
        ActionKind::Retire {
            remove_etcd_member: false,
            heir: "a1-new".into(),
            join_pending: Some("heir-of-a1".into())
        }
    );
    // A control-plane donor: deleted only once its etcd member can be removed. Without etcd access it stays,
    // drained and in flight (its slot held), with the reason named; never deleted with its member left.
    let cp = NodeView { control_plane: true, ..draining.clone() };
    assert_eq!(f.etcd, EtcdAccess::Unconfigured, "the default");
    let p = run(&[cp.clone(), heir.clone()], &f, policy(1, 1), t(95));
    assert_eq!(kinds(&p), vec![("a1".into(), "Report")]);
    assert_eq!(p.actions[0].reason, Reason::EtcdUnavailable);
    assert!(p.in_flight.iter().any(|i| i.node == "a1" && i.waiting_on.as_deref().is_some_and(|w| w.contains("etcd"))));
    let with_client = Fleet { etcd: EtcdAccess::Client, ..f.clone() };
    let p = run(&[cp.clone(), heir.clone()], &with_client, policy(1, 1), t(95));
    assert!(
        matches!(p.actions[0].kind, ActionKind::Retire { remove_etcd_member: true, ref heir, .. } if heir == "a1-new")
    );
    let external = Fleet { etcd: EtcdAccess::External, ..f.clone() };
    let p = run(&[cp, heir.clone()], &external, policy(1, 1), t(95));
    assert!(matches!(p.actions[0].kind, ActionKind::Retire { remove_etcd_member: false, .. }));
    // The donor's Node is gone: its instance is released from the heir's record.
    f.pending.clear();
    let p = run(&[heir.clone()], &f, policy(1, 1), t(100));
    assert_eq!(
        p.actions[0].kind,
        ActionKind::ReleaseInstance { pending: "leaving-a1".into(), donor: reference.clone(), deadline: t(100 + 300) }
    );
    assert_eq!(p.counts.up_to_date, 1);
    assert_eq!(p.replacements.obsolete, ["a1"]);
    assert_eq!(p.replacements.heirs, ["a1-new"]);
}

#[test]
fn a_heir_on_an_older_kubernetes_is_upgraded_outside_the_budget_before_it_takes_its_donors_place() {
    use crate::policy::kubernetes::{KubernetesSpec, KubernetesTarget};
    use crate::policy::{Rollout, plan_with};
    use shared::protocol::{AgentState, ComponentsHash, KubeadmIntent, KubeadmRole};
    const VERSION: &str = "v1.34.1";
    const HASH: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    let upgraded = |mut n: NodeView| {
        n.kubelet_version = Some(VERSION.into());
        if let Ok(a) = &mut n.agent {
            a.components_hash = Some(ComponentsHash::parse("k", HASH).unwrap());
        }
        n
    };
    let run = |nodes: &[NodeView], f: &Fleet, api_server: &str, now: Timestamp| {
        let kubernetes = KubernetesSpec::Upgrade(KubernetesTarget {
            version: VERSION.parse().unwrap(),
            components: "k8s-components-sha256-11".into(),
            hash: HASH.into(),
            api_server: api_server.parse().unwrap(),
        });
        let rollout = Rollout { kubernetes: Some(kubernetes), ..rollout_with(policy(1, 1)) };
        plan_with(nodes, &[rollout], f, None, now).rollouts.remove(0)
    };
    let mut f = fleet(&[("a", false, TARGET)]);
    f.pending.push(PendingView { reached_goal: true, ..join("a1", "a1-new") });
    // The donor runs the version (upgraded in place first); its heir joined with the group's old one.
    let donor = upgraded(replacing(in_group("a1", "a")));
    let heir = NodeView {
        group: Some(GroupMember { image: Some(TARGET.into()), ready_since: Some(t(10)), ..member("a") }),
        ..node("a1-new")
    };
    let heir = shielded(heir, "a1");
    let p = run(&[donor.clone(), heir.clone()], &f, VERSION, t(20));
    // The donor holds the only slot; the heir is drained for its upgrade all the same, and not paired.
    assert_eq!(kinds(&p), vec![("a1-new".into(), "Drain")]);
    assert_eq!(p.actions[0].kind, ActionKind::Drain { target: VERSION.into() });
    let donor_waits = p.in_flight.iter().find(|f| f.node == "a1").and_then(|f| f.waiting_on.clone());
    assert_eq!(donor_waits.as_deref(), Some("the new node a1-new to be upgraded from Kubernetes v1.33.0 to v1.34.1"));
    // Drained: kubeadm upgrade node, still not paired.
    let draining = with_intent(heir.clone(), Step::Drain, VERSION, "h1", t(20));
    let drained = NodeView { drain: DrainProgress::Drained, ..draining };
    let p = run(&[donor.clone(), drained], &f, VERSION, t(25));
    let kubeadm = KubeadmIntent { components: "k8s-components-sha256-11".into(), role: Some(KubeadmRole::Node) };
    assert_eq!(kinds(&p), vec![("a1-new".into(), "KubeadmUpgrade")]);
    assert!(matches!(&p.actions[0].kind, ActionKind::KubeadmUpgrade { kubeadm: k, .. } if *k == kubeadm));
    // Upgraded and verified: it takes its donor's place.
    let mut verified = upgraded(with_intent(heir.clone(), Step::KubeadmUpgrade, VERSION, "h2", t(25)));
    if let Ok(c) = &mut verified.controller
        && let Some(i) = &mut c.intent
    {
        i.kubeadm = Some(kubeadm);
    }
    let verified = crate::policy::tests::with_report(verified, AgentState::Done, "h2");
    let p = run(&[donor.clone(), verified], &f, VERSION, t(30));
    assert_eq!(kinds(&p), vec![("a1-new".into(), "Done")]);
    let done = upgraded(with_intent(heir.clone(), Step::Done, VERSION, "h3", t(30)));
    let done = NodeView { unschedulable: false, ..done };
    let p = run(&[donor.clone(), done], &f, VERSION, t(40));
    assert_eq!(kinds(&p), vec![("a1-new".into(), "Inherit")]);
    // While the API server is older than the version (the control plane is not upgraded yet), the heir
    // cannot run `kubeadm upgrade node`: it takes its place as it is and is upgraded later with the others.
    let donor_old = replacing(in_group("a1", "a"));
    let p = run(&[donor_old, heir], &f, "v1.33.5", t(20));
    assert_eq!(kinds(&p), vec![("a1-new".into(), "Inherit")]);
}

#[test]
fn a_heir_that_never_joined_fails_its_donor_and_a_stuck_drain_blocks_it() {
    let mut f = fleet(&[("a", false, TARGET)]);
    let mut failed = join("a1", "a1-new");
    failed.goal = Goal::Leave;
    failed.join_failed = Some("DeadlineExceeded: not Ready by 12:00".into());
    f.pending.push(failed);
    let donor = replacing(in_group("a1", "a"));
    let p = run(&[donor], &f, policy(1, 1), t(10));
    assert_eq!(p.actions[0].kind, ActionKind::Fail { target: TARGET.into() });
    assert_eq!(p.actions[0].reason, Reason::HeirNotReady);
    assert_eq!(p.counts.failed, 1);
    // The record's creationTimestamp keeps whole seconds: one created in the second the intent was written (at
    // 1.805 s, recorded 1 s) is this attempt's, not an earlier one's.
    let since = t(1).checked_add(jiff::SignedDuration::from_millis(805)).unwrap();
    let same_second = with_intent(in_group("a1", "a"), Step::Replace, TARGET, "t1", since);
    let p = run(&[same_second], &f, policy(1, 1), t(10));
    assert_eq!(p.actions.first().map(|a| a.reason), Some(Reason::HeirNotReady), "{:?}", kinds(&p));
    // A failed join left by an earlier attempt only makes a new attempt wait for its instance to go.
    let later = with_intent(in_group("a1", "a"), Step::Replace, TARGET, "t3", t(20));
    let p = run(&[later], &f, policy(1, 1), t(30));
    assert!(p.actions.is_empty() && p.counts.in_progress == 1, "{:?}", kinds(&p));

    let mut draining = with_intent(in_group("a1", "a"), Step::Replace, TARGET, "t2", t(0));
    draining.unschedulable = true;
    if let Ok(c) = &mut draining.controller {
        c.cordoned_by_us = true;
    }
    if let Some(m) = &mut draining.group {
        m.heir = Some("a1-new".into());
    }
    draining.drain = DrainProgress::Running { waiting_on: Some("pod x (PDB y)".into()) };
    let p = run(&[draining], &fleet(&[("a", false, TARGET)]), policy(1, 1), t(601));
    assert_eq!(p.actions[0].kind, ActionKind::Block { target: TARGET.into() });
    assert_eq!(p.actions[0].reason, Reason::DrainTimedOut);
    assert!(p.actions[0].message.contains("pod x"), "{}", p.actions[0].message);
}

#[test]
fn a_control_plane_and_a_worker_are_never_replaced_at_once() {
    let f = fleet(&[("cp", true, TARGET), ("a", false, TARGET)]);
    let cp = NodeView { control_plane: true, ..in_group("cp1", "cp") };
    // A worker replacement in flight (from an earlier target order): the control-plane node waits.
    let worker = replacing(in_group("a1", "a"));
    let p = run(&[cp.clone(), worker], &f, policy(3, 3), t(0));
    assert!(!p.actions.iter().any(|a| a.node == "cp1"), "{:?}", kinds(&p));
    // A control-plane donor gone while its instance is deleted: workers (of both kinds) wait.
    let mut f = f.clone();
    f.pending.push(PendingView { goal: Goal::Leave, group_id: "cp".into(), ..join("cp0", "cp0") });
    let p = run(&[in_group("a1", "a"), crate::policy::tests::staged(node("w1"))], &f, policy(3, 3), t(0));
    assert!(p.actions.is_empty(), "{:?}", kinds(&p));
    assert_eq!(p.hold.map(|h| h.reason), Some(Reason::WaitingForControlPlane));
}

/// A new leader's first rounds, before the cloud told the group of a donor whose replacement is under way: the
/// donor keeps its slot and waits, named; no `UnsupportedStep` warning for a step this controller drives.
#[test]
fn a_donor_whose_group_is_not_known_yet_waits_in_flight_without_a_warning() {
    let mut f = fleet(&[("a", false, TARGET)]);
    let donor = NodeView { group: None, ..replacing(in_group("a1", "a")) };
    f.unresolved.insert("a1".into());
    let p = run(&[donor.clone(), node("w1")], &f, policy(1, 1), t(5));
    assert!(p.actions.iter().all(|a| a.reason != Reason::UnsupportedStep), "{:?}", p.actions);
    // w1 stages ahead (no slot), but is not drained: the donor's slot is held.
    let disruptive = |a: &&NodeAction| a.starts_node() && !matches!(a.kind, ActionKind::Stage { .. });
    assert!(!p.actions.iter().any(|a| disruptive(&a)), "its slot is held: {:?}", p.actions);
    let waiting = p.in_flight.iter().find(|i| i.node == "a1").and_then(|i| i.waiting_on.clone());
    assert!(waiting.is_some_and(|w| w.contains("scaling group")));
    assert_eq!(p.counts.in_progress, 2, "the donor, and w1 staging");
}

/// A heir of group `a` that registered and is not Ready yet.
fn joining_heir(name: &str) -> NodeView {
    NodeView {
        ready: false,
        agent: Ok(Default::default()),
        group: Some(GroupMember { image: Some(TARGET.into()), ready_since: None, ..member("a") }),
        ..node(name)
    }
}

#[test]
fn joining_heirs_are_extra_capacity_and_surge_is_held_until_the_old_instance_is_gone() {
    let mut f = fleet(&[("a", false, TARGET)]);
    f.pending.push(join("a1", "a1-new"));
    let heir = joining_heir("a1-new");
    let nodes = [replacing(in_group("a1", "a")), shielded(heir, "a1"), in_group("a2", "a"), node("w1")];
    // The NotReady heir does not take a maxUnavailable slot; the surge of 1 is taken, so a2 waits and the
    // in-place node takes the free slot.
    let p = run(&nodes, &f, policy(1, 2), t(0));
    assert_eq!(kinds(&p), vec![("w1".into(), "Stage")]);
    // A leaving instance whose donor is gone still holds the surge slot, for every rollout.
    let mut f = fleet(&[("a", false, TARGET)]);
    f.pending.push(PendingView { goal: Goal::Leave, ..join("a0", "a0") });
    let p = run(&[in_group("a2", "a")], &f, policy(1, 2), t(0));
    assert!(p.actions.is_empty() && p.hold.is_none(), "{:?} {:?}", kinds(&p), p.hold);
    // A blocked donor whose heir stays takes it for good: that is said.
    let mut blocked = with_intent(in_group("a0", "a"), Step::Blocked, TARGET, "t1", t(0));
    if let Some(m) = &mut blocked.group {
        m.heir = Some("a0-new".into());
    }
    // (Its joined PendingNode stays until the donor is retired: it frees nothing by itself.)
    let mut f = fleet(&[("a", false, TARGET)]);
    f.pending.push(PendingView { reached_goal: true, ..join("a0", "a0-new") });
    let p = run(&[blocked, in_group("a2", "a")], &f, policy(1, 2), t(0));
    assert!(p.actions.is_empty());
    assert_eq!(p.hold.map(|h| h.reason), Some(Reason::SurgeExhausted));
}

#[test]
fn without_a_node_version_a_swap_under_way_finishes_and_any_other_replacement_is_abandoned() {
    let f = fleet(&[("a", false, TARGET)]);
    let unowned = |nodes: &[NodeView], f: &Fleet| plan_with(nodes, &[], f, None, t(50)).unowned;
    // No instance recorded yet: the donor is released, nothing is created.
    let p = unowned(&[replacing(in_group("a1", "a"))], &f);
    assert_eq!(
        p.actions.iter().map(|a| (a.node.as_str(), &a.kind)).collect::<Vec<_>>(),
        [("a1", &ActionKind::AbandonReplacement { join_pending: None, deadline: t(50 + 300) })]
    );
    assert_eq!(p.actions[0].reason, Reason::NoNodeVersion);
    // Joining: its instance is deleted and the donor released.
    let mut joining = f.clone();
    joining.pending.push(join("a1", "a1-new"));
    let heir = shielded(NodeView { ready: false, ..in_group("a1-new", "a") }, "a1");
    let p = unowned(&[replacing(in_group("a1", "a")), heir.clone()], &joining);
    assert_eq!(
        p.actions[0].kind,
        ActionKind::AbandonReplacement { join_pending: Some("heir-of-a1".into()), deadline: t(50 + 300) }
    );
    assert!(ActionKind::AbandonReplacement { join_pending: None, deadline: t(0) }.uncordons());
    // The heir is a Ready node: the swap goes on (it is paired with the donor).
    joining.pending[0].reached_goal = true;
    let ready = NodeView { ready: true, ..heir };
    let p = unowned(&[replacing(in_group("a1", "a")), ready.clone()], &joining);
    assert_eq!(kinds(&p), vec![("a1-new".into(), "Inherit")]);
    // A donor being drained goes on to its retirement.
    let mut draining = with_intent(in_group("a1", "a"), Step::Replace, TARGET, "t2", t(40));
    draining.unschedulable = true;
    draining.drain = DrainProgress::Drained;
    if let Some(m) = &mut draining.group {
        m.heir = Some("a1-new".into());
    }
    let p = unowned(&[draining, ready.clone()], &joining);
    assert_eq!(kinds(&p), vec![("a1".into(), "Retire")]);
    // The donor is gone: the heir releases its instance.
    let mut heir = ready;
    if let Some(m) = &mut heir.group {
        m.donor = Some(DonorRef { name: "a1".into(), provider_id: "sim://a1".into(), group_id: "a".into() });
    }
    let p = unowned(&[heir.clone()], &f);
    assert_eq!(kinds(&p), vec![("a1-new".into(), "ReleaseInstance")]);
    // Nothing of a replacement: the in-place wind-down (no action for an idle node).
    assert!(unowned(&[in_group("a2", "a")], &f).actions.is_empty());
}

#[test]
fn a_node_whose_group_is_not_known_yet_waits() {
    let mut f = fleet(&[("a", false, TARGET)]);
    f.unresolved.insert("x1".into());
    let p = run(&[node("x1"), node("w1")], &f, policy(1, 2), t(0));
    assert_eq!(kinds(&p), vec![("w1".into(), "Stage")]);
    assert_eq!(p.held[0].hold.reason, Reason::ImageUnknown);
}

#[test]
fn kubernetes_labels_and_taints_stay_behind() {
    let labels: BTreeMap<String, String> = [
        ("pool", "a"),
        ("kubernetes.io/hostname", "x"),
        ("node-role.kubernetes.io/worker", ""),
        ("topology.k8s.io/zone", "z"),
        ("example.com/team", "t"),
        ("notkubernetes.io/x", "kept"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let kept: Vec<String> = inherited_labels(&labels).into_keys().collect();
    assert_eq!(kept, ["example.com/team", "notkubernetes.io/x", "pool"]);
}

#[test]
fn derived_names_are_stable_and_fit_an_object_name() {
    assert_eq!(join_name("a1"), "heir-of-a1");
    assert_eq!(leave_name("a1"), "leaving-a1");
    let long = "n".repeat(253);
    let name = join_name(&long);
    assert!(name.len() <= super::super::fleet::MAX_NAME, "{}", name.len());
    assert_eq!(name, join_name(&long));
    assert_ne!(name, join_name(&format!("{}m", "n".repeat(252))));
}

#[test]
fn a_node_operations_budget_counts_a_joining_heir_as_extra_capacity_as_the_rollout_does() {
    let mut f = fleet(&[("a", false, TARGET)]);
    f.pending.push(join("a1", "a1-new"));
    let heir = joining_heir("a1-new");
    let nodes = [replacing(in_group("a1", "a")), shielded(heir, "a1"), node("w1"), node("w2")];
    let rollouts = [rollout_with(policy(1, 2))];
    // The donor holds one of the two slots; the NotReady heir is a new instance, not a node out.
    let mut b = crate::policy::budgets(&nodes, &rollouts, &f, t(0));
    assert_eq!(b.room("w1"), Ok(()));
    b.take("w1");
    assert!(b.room("w2").is_err(), "the donor and w1 take both slots");
    // Without the cloud's view the heir looks like a NotReady node taking the last slot: what the NodeOps saw.
    let b = crate::policy::budgets(&nodes, &rollouts, &Fleet::default(), t(0));
    assert!(b.room("w1").is_err());
}
