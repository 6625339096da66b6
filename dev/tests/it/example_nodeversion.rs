//! The example NodeVersion in deploy/examples/ is valid for the API server's schema and for the
//! controller's policy, and means what its comments say.

use controller::policy::Policy;
use controller::policy::budget::{MaxSurge, MaxUnavailable};
use shared::crd::{DrainTimeoutAction, NodeVersion};

#[test]
fn the_example_nodeversion_is_accepted_and_read_as_documented() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/examples/nodeversion.yaml")).unwrap();
    let value: serde_json::Value = yaml_serde::from_str(&text).unwrap();
    let crd = shared::crd::all().into_iter().find(|c| c.spec.names.kind == "NodeVersion").unwrap();
    let schema =
        serde_json::to_value(crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap())
            .unwrap();
    let mut pruned = value.clone();
    dev::apiserver::schema::prune_and_default(&schema, &mut pruned);
    assert_eq!(dev::apiserver::schema::validate(&schema, &pruned), vec![]);
    assert_eq!(pruned["spec"]["rollout"], value["spec"]["rollout"], "the schema drops a field of the example");

    let version: NodeVersion = serde_json::from_value(value).unwrap();
    let policy = Policy::from_spec(&version.spec.rollout, "2026-11-21T12:00:00Z".parse().unwrap()).unwrap();
    assert_eq!(policy.max_unavailable, MaxUnavailable::Percent(10));
    assert_eq!(policy.soak_time, jiff::SignedDuration::from_mins(2));
    assert_eq!(policy.on_drain_timeout, DrainTimeoutAction::Continue);
    assert_eq!(policy.failure_budget, 1);
    assert_eq!(policy.windows[0].zone_name, "Europe/Berlin");
    assert_eq!(policy.windows[1].schedule, "0 10 * * sat");
    assert_eq!(policy.exclusions[0].name, "year-end-freeze");
    assert!(!policy.paused && !policy.drain.force);
    assert_eq!(policy.max_surge, MaxSurge::Count(2));
    assert_eq!(policy.max_staging, Some(MaxUnavailable::Percent(20)));
    assert_eq!(
        (policy.join_timeout, policy.leave_timeout),
        (jiff::SignedDuration::from_mins(30), jiff::SignedDuration::from_mins(5))
    );
    assert_eq!(policy.before_reboot, ["ceph.example.com/noout-set"]);
    assert_eq!(policy.after_reboot, ["ceph.example.com/noout-cleared"]);
    assert_eq!(policy.checkpoint_timeout, jiff::SignedDuration::from_mins(30));
    assert_eq!(policy.max_unavailable_per_zone, Some(1));
    assert_eq!(policy.settle, Some(jiff::SignedDuration::from_mins(15)));
    assert!(policy.prefer_updated_nodes);
}
