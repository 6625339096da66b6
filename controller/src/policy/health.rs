//! Health checks (`spec.rollout.healthChecks`, issue 33): their validated form and the gate's decision.
//!
//! The objects are read and the expressions evaluated in the background (`crate::health_checks`), which hands each
//! rollout the [`Verdict`] of each of its checks; the gate ([`hold`]) decides from them, purely:
//! - a check with no verdict yet, false, or true for less than its `for`, holds every new start
//!   (`HealthCheckFailing`, naming the check, the object, what it saw and since when); a true check's `for` ends
//!   on its own (the plan wakes then);
//! - a check false for longer than its `timeout` stops the rollout as failed (`HealthCheckTimedOut`, a Warning),
//!   until it is true again (and then for its `for`) or the spec changes the check (a changed check starts over).

use super::health_cel::Expression;
use super::{Hold, Reason};
use jiff::{SignedDuration, Timestamp};
use shared::crd::{HealthCheck, MAX_EXPRESSION_LEN, MAX_HEALTH_CHECKS};

/// How long a check may be false before the rollout stops, when it says nothing.
pub const DEFAULT_TIMEOUT: SignedDuration = SignedDuration::from_mins(30);

/// How the message of a hold for a check not evaluated yet ends ([`pending`]).
const PENDING: &str = "is not evaluated yet; no node starts before";

/// Whether `hold` only waits for a check's first evaluation (a moment after the spec is read): no Event is
/// published for it, so the first Event names what the check saw.
pub fn pending(hold: &Hold) -> bool {
    hold.reason == Reason::HealthCheckFailing && hold.message.ends_with(PENDING)
}

/// A validated health check.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub name: String,
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub target: Target,
    pub expression: Expression,
    /// `for`: how long the expression must have been true.
    pub hold_for: SignedDuration,
    pub timeout: SignedDuration,
}

/// Which objects a check reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One object, by name.
    Name(String),
    /// Every object the label selector lists (in the API server's `labelSelector` syntax).
    Selector(String),
}

impl Check {
    /// The objects the check reads, for messages: `ConfigMap ceph/health`, `Pod kube-system/-l app=x`.
    pub fn object(&self) -> String {
        let ns = self.namespace.as_deref().map(|n| format!("{n}/")).unwrap_or_default();
        match &self.target {
            Target::Name(name) => format!("{} {ns}{name}", self.kind),
            Target::Selector(selector) => format!("{} {ns}-l {selector}", self.kind),
        }
    }
}

/// What the last evaluation of a check found, and since when that is so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The check's name.
    pub check: String,
    pub passing: bool,
    /// Since when the check has been passing (or failing) without a break.
    pub since: Timestamp,
    /// What it saw: the object and the value or the error (`ConfigMap ceph/health: self.data.health == ... is
    /// false (self.data.health is "HEALTH_WARN")`, `ConfigMap ceph/health not found`).
    pub observed: String,
}

/// The longest message of a check the status holds.
pub const MAX_STATUS_MESSAGE: usize = 1024;

/// `message` cut to [`MAX_STATUS_MESSAGE`] characters.
pub fn shortened(message: &str) -> String {
    if message.chars().count() <= MAX_STATUS_MESSAGE {
        return message.to_owned();
    }
    message.chars().take(MAX_STATUS_MESSAGE - 3).collect::<String>() + "..."
}

/// Validates `spec.rollout.healthChecks`; each error names its field.
pub fn validate(checks: &[HealthCheck]) -> Result<Vec<Check>, Vec<String>> {
    let mut errors = Vec::new();
    let mut valid = Vec::new();
    if checks.len() > MAX_HEALTH_CHECKS {
        errors.push(format!("spec.rollout.healthChecks: {} checks, at most {MAX_HEALTH_CHECKS}", checks.len()));
    }
    for (i, c) in checks.iter().enumerate() {
        let field = format!("spec.rollout.healthChecks[{i}]");
        let before = errors.len();
        if !dns_label(&c.name) {
            errors.push(format!("{field}.name: {:?} is not a DNS label", c.name));
        } else if checks[..i].iter().any(|o| o.name == c.name) {
            errors.push(format!("{field}.name: {:?} is used by an earlier check", c.name));
        }
        if !api_version(&c.api_version) {
            errors.push(format!("{field}.apiVersion: {:?} is neither VERSION nor GROUP/VERSION", c.api_version));
        }
        if c.kind.is_empty() || !c.kind.chars().all(|ch| ch.is_ascii_alphanumeric()) {
            errors.push(format!("{field}.kind: {:?} is not a kind", c.kind));
        }
        if let Some(ns) = &c.namespace
            && !dns_label(ns)
        {
            errors.push(format!("{field}.namespace: {ns:?} is not a DNS label"));
        }
        let target = match (&c.object_name, &c.selector) {
            (Some(name), None) if !name.is_empty() && name.len() <= 253 => Some(Target::Name(name.clone())),
            (Some(name), None) => {
                errors.push(format!("{field}.objectName: {name:?} is not an object name"));
                None
            }
            (None, Some(selector)) => match shared::selector::parse(selector) {
                Ok(parsed) if parsed.selects_all() => {
                    // An empty selector lists every object of the kind: almost certainly a mistake.
                    errors.push(format!("{field}.selector: an empty selector selects every {}", c.kind));
                    None
                }
                Ok(parsed) => Some(Target::Selector(parsed.to_string())),
                Err(e) => {
                    errors.push(format!("{field}.selector: {e}"));
                    None
                }
            },
            _ => {
                errors.push(format!("{field}: exactly one of objectName and selector must be set"));
                None
            }
        };
        let expression = if c.expression.len() > MAX_EXPRESSION_LEN {
            errors.push(format!("{field}.expression: longer than {MAX_EXPRESSION_LEN} characters"));
            None
        } else {
            Expression::compile(&c.expression).map_err(|e| errors.push(format!("{field}.expression: {e}"))).ok()
        };
        let mut duration = |name: &str, value: &Option<kube::core::Duration>, default: SignedDuration| match value {
            None => default,
            Some(d) if d.is_negative() => {
                errors.push(format!("{field}.{name}: {d} is negative"));
                default
            }
            Some(d) => SignedDuration::try_from(std::time::Duration::from(*d)).unwrap_or(SignedDuration::MAX),
        };
        let hold_for = duration("for", &c.hold_for, SignedDuration::ZERO);
        let timeout = duration("timeout", &c.timeout, DEFAULT_TIMEOUT);
        if timeout.is_zero() {
            errors.push(format!("{field}.timeout: must be longer than 0s"));
        }
        if let (Some(target), Some(expression), true) = (target, expression, errors.len() == before) {
            valid.push(Check {
                name: c.name.clone(),
                api_version: c.api_version.clone(),
                kind: c.kind.clone(),
                namespace: c.namespace.clone(),
                target,
                expression,
                hold_for,
                timeout,
            });
        }
    }
    if errors.is_empty() { Ok(valid) } else { Err(errors) }
}

/// The health-check gate: the hold while a check of `checks` keeps new nodes from starting, and when it may open
/// (or turn into a timeout) on its own.
pub fn hold(checks: &[Check], verdicts: &[Verdict], now: Timestamp) -> Option<(Hold, Option<Timestamp>)> {
    let mut failing: Option<Hold> = None;
    let mut wake: Option<Timestamp> = None;
    let mut soonest = |t: Timestamp| wake = Some(wake.map_or(t, |w: Timestamp| w.min(t)));
    for check in checks {
        let Some(v) = verdicts.iter().find(|v| v.check == check.name) else {
            let message = format!(
                "health check {:?} on {} is not evaluated yet; no node starts before",
                check.name,
                check.object()
            );
            failing.get_or_insert(Hold::new(Reason::HealthCheckFailing, message));
            continue;
        };
        if v.passing {
            let open_at = v.since.checked_add(check.hold_for).unwrap_or(Timestamp::MAX);
            if open_at > now {
                soonest(open_at);
                let message = format!(
                    "health check {:?} passes since {}, for less than its {} (until {open_at}): {}",
                    check.name,
                    v.since,
                    friendly(check.hold_for),
                    v.observed
                );
                failing.get_or_insert(Hold::new(Reason::HealthCheckFailing, message));
            }
            continue;
        }
        let timeout_at = v.since.checked_add(check.timeout).unwrap_or(Timestamp::MAX);
        if timeout_at <= now {
            // The rollout stops as failed: that comes before any check that only waits.
            let message = format!(
                "health check {:?} fails since {}, longer than its timeout {}; the rollout is stopped until it \
                 passes again: {}",
                check.name,
                v.since,
                friendly(check.timeout),
                v.observed
            );
            return Some((Hold::new(Reason::HealthCheckTimedOut, message), None));
        }
        soonest(timeout_at);
        let message = format!("health check {:?} fails since {}: {}", check.name, v.since, v.observed);
        failing.get_or_insert(Hold::new(Reason::HealthCheckFailing, message));
    }
    failing.map(|hold| (hold, wake))
}

/// `2m`, `1h30m`, `45s`, `1.5s`: a duration as a spec writes it.
fn friendly(d: SignedDuration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let millis = d.subsec_millis();
    let mut text = String::new();
    if h > 0 {
        text.push_str(&format!("{h}h"));
    }
    if m > 0 {
        text.push_str(&format!("{m}m"));
    }
    if s > 0 || millis > 0 || text.is_empty() {
        match millis {
            0 => text.push_str(&format!("{s}s")),
            ms => text.push_str(&format!("{}s", s as f64 + f64::from(ms) / 1000.0)),
        }
    }
    text
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `v1`, `apps/v1`, `ceph.rook.io/v1`.
fn api_version(s: &str) -> bool {
    let version_ok = |v: &str| !v.is_empty() && v.len() <= 63 && v.bytes().all(|b| b.is_ascii_alphanumeric());
    match s.split_once('/') {
        None => version_ok(s),
        Some((group, version)) => {
            version_ok(version) && !group.is_empty() && group.len() <= 253 && group.split('.').all(dns_label)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::t;

    fn spec(json: serde_json::Value) -> Vec<HealthCheck> {
        serde_json::from_value(json).unwrap()
    }

    fn ceph(hold_for: &str, timeout: &str) -> Vec<Check> {
        validate(&spec(serde_json::json!([{
            "name": "ceph", "apiVersion": "ceph.rook.io/v1", "kind": "CephCluster", "namespace": "rook-ceph",
            "objectName": "rook-ceph", "expression": "self.status.ceph.health == 'HEALTH_OK'",
            "for": hold_for, "timeout": timeout
        }])))
        .unwrap()
    }

    fn verdict(passing: bool, since: Timestamp) -> Verdict {
        Verdict { check: "ceph".into(), passing, since, observed: "CephCluster rook-ceph/rook-ceph: saw it".into() }
    }

    #[test]
    fn health_validation_names_each_bad_field() {
        let errors = validate(&spec(serde_json::json!([
            {"name": "a", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "x", "objectName": "h",
             "expression": "self.data.ok =="},
            {"name": "b", "apiVersion": "v1", "kind": "ConfigMap", "objectName": "h", "expression": "other.ok"},
            {"name": "c", "apiVersion": "v1", "kind": "ConfigMap", "expression": "self.ok",
             "selector": {"matchLabels": {"app": "x"}}, "objectName": "y"},
            {"name": "c", "apiVersion": "/v1", "kind": "Config-Map", "expression": "self.ok", "objectName": "y",
             "timeout": "0s"},
            {"name": "e", "apiVersion": "v1", "kind": "Pod", "expression": "self.ok", "selector": {}}
        ])))
        .unwrap_err();
        assert!(errors[0].starts_with("spec.rollout.healthChecks[0].expression: does not compile"), "{errors:?}");
        assert!(errors[1].starts_with("spec.rollout.healthChecks[1].expression: refers to \"other\""), "{errors:?}");
        assert_eq!(errors[2], "spec.rollout.healthChecks[2]: exactly one of objectName and selector must be set");
        assert_eq!(errors[3], "spec.rollout.healthChecks[3].name: \"c\" is used by an earlier check");
        assert!(errors[4].starts_with("spec.rollout.healthChecks[3].apiVersion"), "{errors:?}");
        assert!(errors[5].starts_with("spec.rollout.healthChecks[3].kind"), "{errors:?}");
        assert_eq!(errors[6], "spec.rollout.healthChecks[3].timeout: must be longer than 0s");
        assert!(errors[7].starts_with("spec.rollout.healthChecks[4].selector: an empty selector"), "{errors:?}");
        assert_eq!(errors.len(), 8);
        let checks = ceph("2m", "10m");
        assert_eq!(checks[0].hold_for, SignedDuration::from_mins(2));
        assert_eq!(checks[0].object(), "CephCluster rook-ceph/rook-ceph");
    }

    #[test]
    fn health_a_bad_expression_makes_the_spec_invalid_naming_the_field() {
        let rollout: shared::crd::RolloutPolicy = serde_json::from_value(serde_json::json!({"healthChecks": [
            {"name": "ceph", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "ceph", "objectName": "health",
             "expression": "self.data.health == "}
        ]}))
        .unwrap();
        let errors = crate::policy::Policy::from_spec(&rollout, t(0)).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("spec.rollout.healthChecks[0].expression: does not compile"), "{errors:?}");
    }

    #[test]
    fn health_gate_holds_while_a_check_is_false_or_unknown_naming_it() {
        let checks = ceph("0s", "10m");
        let (hold, wake) = hold(&checks, &[], t(0)).unwrap();
        assert_eq!(hold.reason, Reason::HealthCheckFailing);
        assert!(hold.message.contains("not evaluated yet") && hold.message.contains("rook-ceph/rook-ceph"));
        assert!(pending(&hold));
        assert_eq!(wake, None);
        let (hold, wake) = super::hold(&checks, &[verdict(false, t(0))], t(60)).unwrap();
        assert_eq!(hold.reason, Reason::HealthCheckFailing);
        assert!(hold.message.contains("\"ceph\" fails since") && hold.message.contains("saw it"), "{}", hold.message);
        assert!(!pending(&hold));
        assert_eq!(wake, Some(t(600)), "it wakes when the timeout would stop the rollout");
        assert_eq!(super::hold(&checks, &[verdict(true, t(0))], t(0)), None);
    }

    #[test]
    fn health_gate_holds_a_true_check_until_it_held_for_its_for() {
        let checks = ceph("2m", "10m");
        let (hold, wake) = super::hold(&checks, &[verdict(true, t(0))], t(60)).unwrap();
        assert_eq!(hold.reason, Reason::HealthCheckFailing);
        assert!(hold.message.contains("for less than its 2m"), "{}", hold.message);
        assert_eq!(wake, Some(t(120)));
        assert_eq!(super::hold(&checks, &[verdict(true, t(0))], t(120)), None);
    }

    #[test]
    fn health_gate_in_the_pipeline_starts_nothing_new_while_in_flight_nodes_finish() {
        use crate::policy::tests::{node, rollout_with, staged, with_intent, with_report};
        use crate::policy::{ActionKind, DrainProgress, NodeView, Policy, plan};
        use shared::protocol::{AgentState, Step};
        let in_flight = with_report(with_intent(node("a"), Step::Drain, "v2", "d1", t(0)), AgentState::Done, "s1");
        let nodes = [NodeView { drain: DrainProgress::Drained, ..in_flight }, staged(node("b")), node("c")];
        let two = crate::policy::budget::MaxUnavailable::Count(2);
        let policy = Policy {
            health_checks: ceph("0s", "10m"),
            max_unavailable: two,
            max_staging: Some(two),
            ..Policy::default()
        };
        let mut rollout = rollout_with(policy);
        rollout.health = vec![verdict(false, t(0))];
        let p = plan(&nodes, std::slice::from_ref(&rollout), None, t(60)).rollouts.remove(0);
        let acted: Vec<&str> = p.actions.iter().map(|a| a.node.as_str()).collect();
        assert_eq!(acted, ["a"], "only the node in flight moves: {:?}", p.actions);
        assert!(matches!(p.actions[0].kind, ActionKind::Reboot { .. }));
        assert_eq!(p.hold.as_ref().map(|h| h.reason), Some(Reason::HealthCheckFailing));
        assert_eq!(p.wake_at, Some(t(600)));
        // Passing: the staged node's turn comes, and the next one stages.
        rollout.health = vec![verdict(true, t(0))];
        let p = plan(&nodes, std::slice::from_ref(&rollout), None, t(60)).rollouts.remove(0);
        let acted: Vec<&str> = p.actions.iter().map(|a| a.node.as_str()).collect();
        assert_eq!(acted, ["a", "b", "c"], "{:?}", p.actions);
        assert_eq!(p.hold, None);
    }

    #[test]
    fn health_gate_stops_the_rollout_once_a_check_failed_past_its_timeout() {
        let checks = ceph("0s", "10m");
        let (hold, wake) = super::hold(&checks, &[verdict(false, t(0))], t(600)).unwrap();
        assert_eq!((hold.reason, wake), (Reason::HealthCheckTimedOut, None));
        assert!(hold.message.contains("longer than its timeout 10m"), "{}", hold.message);
        assert!(Reason::HealthCheckTimedOut.is_warning());
        // Passing again opens it.
        assert_eq!(super::hold(&checks, &[verdict(true, t(700))], t(700)), None);
    }
}
