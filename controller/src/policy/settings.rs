//! A NodeVersion's spec, validated once per generation into typed settings.
//!
//! # Guarantees
//! - [`ValidSpec::from_spec`] never panics and reports every problem of the spec at once, each
//!   starting with its field's path (`spec.image`, `spec.rollout.drainTimeout`, ...), so a user
//!   fixes them in one go.
//! - A valid spec's image is a target the node protocol carries as it is
//!   ([`shared::protocol::parse_target`]): the controller never writes an intent the agent cannot
//!   read.

use super::budget::{MaxSurge, MaxUnavailable};
use super::cron::Cron;
use super::window::{Exclusion, Window, WindowState};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use shared::crd::{DrainOptions, DrainTimeoutAction, LastValidSpec, NodeVersionSpec, RolloutPolicy};
use shared::protocol::{ProtocolError, keys, parse_target};
use shared::selector::Selector;
use std::collections::BTreeMap;

/// Defaults, chosen to be safe rather than fast.
pub const DEFAULT_DRAIN_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);
pub const DEFAULT_STAGE_TIMEOUT: SignedDuration = SignedDuration::from_mins(30);
pub const DEFAULT_REBOOT_TIMEOUT: SignedDuration = SignedDuration::from_mins(15);
pub const DEFAULT_CHECKPOINT_TIMEOUT: SignedDuration = SignedDuration::from_mins(30);
/// How long a node may wait for its workloads to settle before its hold is reported as timed out.
pub const DEFAULT_SETTLE_TIMEOUT: SignedDuration = SignedDuration::from_mins(10);
/// Most annotations one checkpoint may wait for.
pub const MAX_CHECKPOINT_ANNOTATIONS: usize = 16;
pub const DEFAULT_FAILURE_BUDGET: u32 = 1;
/// How long a new instance may take to become a Ready node, as Constellation.
pub const DEFAULT_JOIN_TIMEOUT: SignedDuration = SignedDuration::from_mins(30);
/// How long deleting a replaced node's instance may take before it is retried and reported.
pub const DEFAULT_LEAVE_TIMEOUT: SignedDuration = SignedDuration::from_mins(5);
/// Longest maintenance window; longer ones are better written as a schedule that matches more.
pub const MAX_WINDOW: SignedDuration = SignedDuration::from_hours(168);

/// A NodeVersion spec the controller validated: the image every node should run, the rollout
/// policy, and the spec as it was written (for `status.lastValidSpec`).
#[derive(Debug, Clone)]
pub struct ValidSpec {
    /// `metadata.generation` of the NodeVersion with this spec.
    pub generation: i64,
    pub target: String,
    pub policy: Policy,
    pub raw: serde_json::Value,
}

impl ValidSpec {
    /// Validates the spec of generation `generation`. `now` is used only to check that a
    /// maintenance window ever opens.
    pub fn from_spec(spec: &NodeVersionSpec, generation: i64, now: Timestamp) -> Result<ValidSpec, Vec<String>> {
        let mut errors = Vec::new();
        if let Err(error) = parse_target("spec.image", &spec.image) {
            errors.push(match error {
                ProtocolError::Malformed { value, reason, .. } => format!("spec.image: {value:?} {reason}"),
                other => format!("spec.image: {other}"),
            });
        }
        let policy = Policy::from_spec(&spec.rollout, now).map_err(|e| errors.extend(e));
        match policy {
            Ok(policy) if errors.is_empty() => {
                let raw = serde_json::to_value(spec).map_err(|e| vec![format!("spec: cannot be stored: {e}")])?;
                Ok(ValidSpec { generation, target: spec.image.clone(), policy, raw })
            }
            _ => Err(errors),
        }
    }

    /// Reads `status.lastValidSpec` back, validating it again (a controller of another version, or
    /// a human, may have written it).
    pub fn from_last_valid(last: &LastValidSpec, now: Timestamp) -> Result<ValidSpec, String> {
        let spec: NodeVersionSpec =
            serde_json::from_value(last.spec.clone()).map_err(|e| format!("status.lastValidSpec.spec: {e}"))?;
        ValidSpec::from_spec(&spec, last.generation, now).map_err(|errors| errors.join("; "))
    }

    /// The status record of this spec.
    pub fn record(&self) -> LastValidSpec {
        LastValidSpec { generation: self.generation, spec: self.raw.clone() }
    }
}

/// A validated rollout policy.
#[derive(Debug, Clone)]
pub struct Policy {
    pub max_unavailable: MaxUnavailable,
    /// Nodes staged ahead of their turn at once (`maxStaging`); `None`: as many as `maxUnavailable`.
    pub max_staging: Option<MaxUnavailable>,
    /// Extra instances replacements may add at once (`maxSurge`, same count-or-percent form).
    pub max_surge: MaxSurge,
    pub join_timeout: SignedDuration,
    pub leave_timeout: SignedDuration,
    pub soak_time: SignedDuration,
    pub drain_timeout: SignedDuration,
    pub on_drain_timeout: DrainTimeoutAction,
    /// What a spent failure budget does (`onFailure`): stop, or roll back ([`super::rollback`]).
    pub on_failure: shared::crd::FailureAction,
    pub stage_timeout: SignedDuration,
    pub reboot_timeout: SignedDuration,
    pub failure_budget: u32,
    /// The maintenance windows (`maintenanceWindow` first, then `maintenanceWindows`): any open one counts.
    pub windows: Vec<Window>,
    /// The exclusions (`maintenanceExclusions`): no node starts while one runs.
    pub exclusions: Vec<Exclusion>,
    pub selector: NodeSelector,
    pub drain: DrainOptions,
    pub paused: bool,
    /// Annotations a drained node waits for before its reboot (`beforeReboot`, see `crate::checkpoint`).
    pub before_reboot: Vec<String>,
    /// Annotations a verified node waits for before it is uncordoned (`afterReboot`).
    pub after_reboot: Vec<String>,
    pub checkpoint_timeout: SignedDuration,
    /// Nodes of one zone unavailable at once (`maxUnavailablePerZone`); `None`: no limit beyond `maxUnavailable`.
    pub max_unavailable_per_zone: Option<u32>,
    /// With `settleWorkloads`, its `settleTimeout`: a node is not disrupted while a workload of its pods is not
    /// whole (`crate::settle`); `None`: it is not waited for.
    pub settle: Option<SignedDuration>,
    /// The health checks (`healthChecks`, see [`super::health`]): no node starts while one does not pass.
    pub health_checks: Vec<super::health::Check>,
    /// The canary waves (`waves`, see [`super::waves`]), in order.
    pub waves: Vec<super::waves::WavePolicy>,
    /// Whether the rollout's outdated nodes carry the `PreferNoSchedule` taint [`super::taint::OUTDATED_TAINT`]
    /// while it runs (`preferUpdatedNodes`, default true; see [`super::taint`]).
    pub prefer_updated_nodes: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_unavailable: MaxUnavailable::default(),
            max_staging: None,
            max_surge: MaxSurge::default(),
            join_timeout: DEFAULT_JOIN_TIMEOUT,
            leave_timeout: DEFAULT_LEAVE_TIMEOUT,
            soak_time: SignedDuration::ZERO,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            on_drain_timeout: DrainTimeoutAction::Continue,
            on_failure: shared::crd::FailureAction::Stop,
            stage_timeout: DEFAULT_STAGE_TIMEOUT,
            reboot_timeout: DEFAULT_REBOOT_TIMEOUT,
            failure_budget: DEFAULT_FAILURE_BUDGET,
            windows: Vec::new(),
            exclusions: Vec::new(),
            selector: NodeSelector::default(),
            drain: DrainOptions::default(),
            paused: false,
            before_reboot: Vec::new(),
            after_reboot: Vec::new(),
            checkpoint_timeout: DEFAULT_CHECKPOINT_TIMEOUT,
            max_unavailable_per_zone: None,
            settle: None,
            health_checks: Vec::new(),
            waves: Vec::new(),
            prefer_updated_nodes: true,
        }
    }
}

impl Policy {
    /// Validates a NodeVersion's `spec.rollout`. `now` is used only to check that a maintenance
    /// window ever opens.
    pub fn from_spec(spec: &RolloutPolicy, now: Timestamp) -> Result<Policy, Vec<String>> {
        let mut errors = Vec::new();
        let mut policy = Policy {
            paused: spec.paused,
            drain: spec.drain,
            prefer_updated_nodes: spec.prefer_updated_nodes.unwrap_or(true),
            ..Policy::default()
        };
        let mut amount = |field: &str, value: &Option<IntOrString>| match value {
            None => None,
            Some(IntOrString::Int(n)) if *n >= 1 => Some(MaxUnavailable::Count(*n as u32)),
            Some(IntOrString::Int(n)) => {
                errors.push(format!("spec.rollout.{field}: {n} is less than 1"));
                None
            }
            Some(IntOrString::String(s)) => match s.strip_suffix('%').map(str::parse::<u32>) {
                Some(Ok(p)) if (1..=100).contains(&p) => Some(MaxUnavailable::Percent(p)),
                _ => {
                    errors.push(format!(
                        "spec.rollout.{field}: {s:?} is neither a count nor a percentage from 1% to 100%"
                    ));
                    None
                }
            },
        };
        policy.max_unavailable = amount("maxUnavailable", &spec.max_unavailable).unwrap_or_default();
        policy.max_staging = amount("maxStaging", &spec.max_staging);
        policy.max_surge = amount("maxSurge", &spec.max_surge).map(MaxSurge::from).unwrap_or_default();
        let wave_sizes: Vec<Option<MaxUnavailable>> = spec
            .waves
            .iter()
            .enumerate()
            .map(|(i, w)| amount(&format!("waves[{i}].nodes"), &Some(w.nodes.clone())))
            .collect();
        let mut duration = |field: &str, value: &Option<kube::core::Duration>, default: SignedDuration| match value {
            None => default,
            Some(d) if d.is_negative() => {
                errors.push(format!("spec.rollout.{field}: {d} is negative"));
                default
            }
            Some(d) => SignedDuration::try_from(std::time::Duration::from(*d)).unwrap_or(SignedDuration::MAX),
        };
        policy.soak_time = duration("soakTime", &spec.soak_time, SignedDuration::ZERO);
        let wave_soaks: Vec<SignedDuration> = spec
            .waves
            .iter()
            .enumerate()
            .map(|(i, w)| duration(&format!("waves[{i}].soak"), &w.soak, SignedDuration::ZERO))
            .collect();
        policy.drain_timeout = duration("drainTimeout", &spec.drain_timeout, DEFAULT_DRAIN_TIMEOUT);
        policy.stage_timeout = duration("stageTimeout", &spec.stage_timeout, DEFAULT_STAGE_TIMEOUT);
        policy.reboot_timeout = duration("rebootTimeout", &spec.reboot_timeout, DEFAULT_REBOOT_TIMEOUT);
        policy.checkpoint_timeout = duration("checkpointTimeout", &spec.checkpoint_timeout, DEFAULT_CHECKPOINT_TIMEOUT);
        policy.join_timeout = duration("joinTimeout", &spec.join_timeout, DEFAULT_JOIN_TIMEOUT);
        policy.leave_timeout = duration("leaveTimeout", &spec.leave_timeout, DEFAULT_LEAVE_TIMEOUT);
        let settle_timeout = duration("settleTimeout", &spec.settle_timeout, DEFAULT_SETTLE_TIMEOUT);
        policy.settle = spec.settle_workloads.then_some(settle_timeout);
        for (field, value) in [
            ("drainTimeout", policy.drain_timeout),
            ("stageTimeout", policy.stage_timeout),
            ("rebootTimeout", policy.reboot_timeout),
            ("checkpointTimeout", policy.checkpoint_timeout),
            ("joinTimeout", policy.join_timeout),
            ("leaveTimeout", policy.leave_timeout),
            ("settleTimeout", settle_timeout),
        ] {
            if value.is_zero() {
                errors.push(format!("spec.rollout.{field}: must be longer than 0s"));
            }
        }
        if spec.waves.len() > super::waves::MAX_WAVES {
            errors.push(format!("spec.rollout.waves: {} waves, at most {}", spec.waves.len(), super::waves::MAX_WAVES));
        }
        policy.waves = wave_sizes
            .into_iter()
            .zip(wave_soaks)
            .filter_map(|(nodes, soak)| Some(super::waves::WavePolicy { nodes: nodes?, soak }))
            .collect();
        policy.on_drain_timeout = spec.on_drain_timeout.unwrap_or_default();
        policy.on_failure = spec.on_failure.unwrap_or_default();
        for (field, names, into) in [
            ("beforeReboot", &spec.before_reboot, &mut policy.before_reboot),
            ("afterReboot", &spec.after_reboot, &mut policy.after_reboot),
        ] {
            if names.len() > MAX_CHECKPOINT_ANNOTATIONS {
                errors.push(format!(
                    "spec.rollout.{field}: {} annotations, at most {MAX_CHECKPOINT_ANNOTATIONS}",
                    names.len()
                ));
            }
            for (i, name) in names.iter().enumerate() {
                if let Err(why) = qualified_name(name) {
                    errors.push(format!("spec.rollout.{field}[{i}]: {name:?} {why}"));
                } else if names[..i].contains(name) {
                    errors.push(format!("spec.rollout.{field}[{i}]: {name:?} is listed twice"));
                } else if name.starts_with(shared::protocol::keys::PREFIX) {
                    errors.push(format!(
                        "spec.rollout.{field}[{i}]: {name:?} is under {}, which only the operator writes",
                        shared::protocol::keys::PREFIX
                    ));
                }
            }
            into.clone_from(names);
        }
        match spec.max_unavailable_per_zone {
            None => {}
            Some(n) if n >= 1 => policy.max_unavailable_per_zone = Some(n as u32),
            Some(n) => errors.push(format!("spec.rollout.maxUnavailablePerZone: {n} is less than 1")),
        }
        match spec.failure_budget {
            None => {}
            Some(n) if n >= 1 => policy.failure_budget = n as u32,
            Some(n) => errors.push(format!("spec.rollout.failureBudget: {n} is less than 1")),
        }
        let windows = spec.maintenance_window.iter().map(|w| ("maintenanceWindow".to_owned(), w));
        let more = spec.maintenance_windows.iter().enumerate().map(|(i, w)| (format!("maintenanceWindows[{i}]"), w));
        for (field, w) in windows.chain(more) {
            match window(&field, w, now) {
                Ok(window) => policy.windows.push(window),
                Err(e) => errors.extend(e),
            }
        }
        for (i, e) in spec.maintenance_exclusions.iter().enumerate() {
            if e.end.0 <= e.start.0 {
                errors.push(format!(
                    "spec.rollout.maintenanceExclusions[{i}]: end {} is not after start {}",
                    e.end.0, e.start.0
                ));
            } else {
                policy.exclusions.push(Exclusion { name: e.name.clone(), start: e.start.0, end: e.end.0 });
            }
        }
        match super::health::validate(&spec.health_checks) {
            Ok(checks) => policy.health_checks = checks,
            Err(e) => errors.extend(e),
        }
        if let Some(selector) = &spec.node_selector {
            match NodeSelector::from_label_selector(selector) {
                Ok(s) => policy.selector = s,
                Err(e) => errors.push(format!("spec.rollout.nodeSelector: {e}")),
            }
        }
        if errors.is_empty() { Ok(policy) } else { Err(errors) }
    }
}

/// A validated label selector over nodes: kube's [`Selector`] read as the API server reads it (see
/// [`shared::selector`]), never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSelector {
    selector: Selector,
}

impl Default for NodeSelector {
    /// The opt-in label.
    fn default() -> Self {
        NodeSelector { selector: Selector::from_iter([(keys::MANAGED_LABEL, keys::MANAGED_VALUE)]) }
    }
}

impl NodeSelector {
    pub fn from_label_selector(selector: &LabelSelector) -> Result<Self, String> {
        let selector = shared::selector::parse(selector).map_err(|e| e.to_string())?;
        if selector.selects_all() {
            // An empty selector would select every node of the cluster, agent or not: almost
            // certainly a mistake, and a dangerous one.
            return Err("an empty selector would select every node; leave it out to select the opt-in label".into());
        }
        Ok(NodeSelector { selector })
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        shared::selector::matches(&self.selector, labels)
    }
}

/// The window `w` of `spec.rollout.<field>`, validated: its schedule, zone and duration, and that it ever opens.
fn window(field: &str, w: &shared::crd::MaintenanceWindow, now: Timestamp) -> Result<Window, Vec<String>> {
    let cron = Cron::parse(&w.schedule).map_err(|e| format!("spec.rollout.{field}.schedule: {e}"));
    let zone_name = w.time_zone.clone().unwrap_or_else(|| "UTC".to_owned());
    let zone = jiff::tz::TimeZone::get(&zone_name)
        .map_err(|_| format!("spec.rollout.{field}.timeZone: {zone_name:?} is not an IANA time zone"));
    let length = if w.duration.is_negative() {
        Err(format!("spec.rollout.{field}.duration: {} is negative", w.duration))
    } else {
        let d = SignedDuration::try_from(std::time::Duration::from(w.duration)).unwrap_or(SignedDuration::MAX);
        if d.is_zero() || d > MAX_WINDOW {
            Err(format!("spec.rollout.{field}.duration: {} is not between 1s and 168h", w.duration))
        } else {
            Ok(d)
        }
    };
    match (cron, zone, length) {
        (Ok(cron), Ok(time_zone), Ok(duration)) => {
            let window = Window { cron, duration, time_zone, schedule: w.schedule.clone(), zone_name };
            if window.state(now) == (WindowState::Closed { opens_at: None }) {
                return Err(vec![format!(
                    "spec.rollout.{field}.schedule: {:?} never opens in the next 5 years",
                    w.schedule
                )]);
            }
            Ok(window)
        }
        (cron, zone, length) => Err([cron.err(), zone.err(), length.err()].into_iter().flatten().collect()),
    }
}

/// Whether `name` is a Kubernetes qualified name (an annotation key), as `IsQualifiedName` in
/// k8s.io/apimachinery/pkg/util/validation checks it: an optional DNS-1123 subdomain prefix (at most 253
/// characters) and `/`, then a name of 1 to 63 characters, alphanumeric at both ends, with `-`, `_` and `.`
/// inside.
fn qualified_name(name: &str) -> Result<(), &'static str> {
    let (prefix, name) = match name.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, name),
    };
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err("has a prefix that is not a DNS subdomain");
        }
    }
    let alphanumeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty() || name.len() > 63 {
        return Err("has a name part that is empty or longer than 63 characters");
    }
    if !alphanumeric(name.chars().next())
        || !alphanumeric(name.chars().last())
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err("is not a qualified name (alphanumeric at both ends, '-', '_' or '.' inside)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::crd::MaintenanceWindow;

    fn now() -> Timestamp {
        "2026-11-21T12:00:00Z".parse().unwrap()
    }

    fn spec(json: serde_json::Value) -> RolloutPolicy {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn an_empty_spec_gives_the_safe_defaults() {
        let p = Policy::from_spec(&RolloutPolicy::default(), now()).unwrap();
        assert_eq!(p.max_unavailable, MaxUnavailable::Count(1));
        assert_eq!(p.failure_budget, 1);
        assert_eq!(p.drain_timeout, SignedDuration::from_mins(10));
        assert!(p.soak_time.is_zero() && !p.paused && p.windows.is_empty() && p.exclusions.is_empty());
        assert_eq!(p.on_drain_timeout, DrainTimeoutAction::Continue);
        assert_eq!(p.max_surge, MaxSurge::Count(1));
        assert_eq!((p.join_timeout, p.leave_timeout), (SignedDuration::from_mins(30), SignedDuration::from_mins(5)));
        assert!(p.prefer_updated_nodes, "preferUpdatedNodes is on by default");
    }

    #[test]
    fn every_field_is_read() {
        let p = Policy::from_spec(
            &spec(serde_json::json!({
                "maxUnavailable": "25%", "soakTime": "90s", "drainTimeout": "1h", "onDrainTimeout": "Stop",
                "stageTimeout": "5m", "rebootTimeout": "7m", "failureBudget": 3, "paused": true,
                "maintenanceWindow": {"schedule": "0 22 * * *", "duration": "4h", "timeZone": "Europe/Berlin"},
                "nodeSelector": {"matchLabels": {"pool": "a"}},
                "drain": {"deleteEmptyDirData": true, "force": true},
                "maxSurge": "50%", "joinTimeout": "20m", "leaveTimeout": "2m", "maxStaging": 4,
                "preferUpdatedNodes": false
            })),
            now(),
        )
        .unwrap();
        assert_eq!(p.max_unavailable, MaxUnavailable::Percent(25));
        assert_eq!(p.soak_time, SignedDuration::from_secs(90));
        assert_eq!(p.drain_timeout, SignedDuration::from_hours(1));
        assert_eq!(p.on_drain_timeout, DrainTimeoutAction::Stop);
        assert_eq!(p.stage_timeout, SignedDuration::from_mins(5));
        assert_eq!(p.reboot_timeout, SignedDuration::from_mins(7));
        assert_eq!(p.failure_budget, 3);
        assert_eq!(p.max_surge, MaxSurge::Percent(50));
        assert!(!p.prefer_updated_nodes);
        assert_eq!(p.max_staging, Some(MaxUnavailable::Count(4)));
        assert_eq!((p.join_timeout, p.leave_timeout), (SignedDuration::from_mins(20), SignedDuration::from_mins(2)));
        assert!(p.paused && p.drain.force && p.drain.delete_empty_dir_data);
        assert_eq!(p.windows[0].zone_name, "Europe/Berlin");
        let labels: BTreeMap<String, String> = [("pool".to_string(), "a".to_string())].into();
        assert!(p.selector.matches(Some(&labels)));
        assert!(!p.selector.matches(None));
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let errors = Policy::from_spec(
            &spec(serde_json::json!({
                "maxUnavailable": "0%", "failureBudget": 0, "drainTimeout": "0s",
                "maxSurge": 0, "joinTimeout": "0s", "leaveTimeout": "0s", "maxStaging": "0%",
                "maintenanceWindow": {"schedule": "0 25 * * *", "duration": "200h", "timeZone": "Mars/Olympus"},
                "nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}
            })),
            now(),
        )
        .unwrap_err();
        for needle in [
            "spec.rollout.maxUnavailable",
            "spec.rollout.failureBudget",
            "spec.rollout.drainTimeout",
            "spec.rollout.maintenanceWindow.schedule",
            "spec.rollout.maintenanceWindow.timeZone",
            "spec.rollout.maintenanceWindow.duration",
            "spec.rollout.nodeSelector",
            "spec.rollout.maxSurge",
            "spec.rollout.maxStaging",
            "spec.rollout.joinTimeout",
            "spec.rollout.leaveTimeout",
        ] {
            assert!(errors.iter().any(|e| e.starts_with(needle)), "{needle} not in {errors:?}");
        }
    }

    fn node_version_spec(json: serde_json::Value) -> NodeVersionSpec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn settling_workloads_is_off_by_default_and_its_timeout_is_validated() {
        assert_eq!(Policy::from_spec(&RolloutPolicy::default(), now()).unwrap().settle, None);
        let on = Policy::from_spec(&spec(serde_json::json!({"settleWorkloads": true})), now()).unwrap();
        assert_eq!(on.settle, Some(DEFAULT_SETTLE_TIMEOUT));
        let custom =
            Policy::from_spec(&spec(serde_json::json!({"settleWorkloads": true, "settleTimeout": "90s"})), now());
        assert_eq!(custom.unwrap().settle, Some(SignedDuration::from_secs(90)));
        // A timeout alone does not turn it on; a zero or negative one is refused either way.
        let off = Policy::from_spec(&spec(serde_json::json!({"settleTimeout": "90s"})), now()).unwrap();
        assert_eq!(off.settle, None);
        for bad in ["0s", "-1m"] {
            let errors = Policy::from_spec(&spec(serde_json::json!({"settleTimeout": bad})), now()).unwrap_err();
            assert!(errors.iter().any(|e| e.starts_with("spec.rollout.settleTimeout: ")), "{bad}: {errors:?}");
        }
    }

    #[test]
    fn the_image_is_validated_as_the_node_protocol_reads_a_target() {
        for (image, reason) in [
            ("v2 ", "white space"),
            ("\tv2", "control"),
            ("v2\n", "control"),
            ("v\u{0}2", "control"),
            ("\u{a0}v2", "white space"),
            ("", "empty"),
        ] {
            let errors =
                ValidSpec::from_spec(&node_version_spec(serde_json::json!({"image": image})), 1, now()).unwrap_err();
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].starts_with("spec.image: ") && errors[0].contains(reason), "{image:?}: {errors:?}");
        }
        let spec = ValidSpec::from_spec(&node_version_spec(serde_json::json!({"image": "v 2"})), 7, now()).unwrap();
        assert_eq!((spec.target.as_str(), spec.generation), ("v 2", 7));
    }

    #[test]
    fn image_and_rollout_problems_are_reported_together() {
        let errors = ValidSpec::from_spec(
            &node_version_spec(serde_json::json!({"image": "v2 ", "rollout": {"failureBudget": 0}})),
            1,
            now(),
        )
        .unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[1].starts_with("spec.rollout.failureBudget"), "{errors:?}");
    }

    #[test]
    fn a_recorded_spec_reads_back_as_it_was_validated() {
        let spec = node_version_spec(serde_json::json!({
            "image": "v2",
            "rollout": {"drainTimeout": "1h", "nodeSelector": {"matchLabels": {"pool": "a"}}}
        }));
        let valid = ValidSpec::from_spec(&spec, 4, now()).unwrap();
        let record = valid.record();
        assert_eq!(record.generation, 4);
        let back = ValidSpec::from_last_valid(&record, now()).unwrap();
        assert_eq!((back.generation, back.target.as_str()), (4, "v2"));
        assert_eq!(back.policy.drain_timeout, SignedDuration::from_hours(1));
        assert_eq!(back.policy.selector, valid.policy.selector);
        // A record that does not read as a spec, or no longer validates, is refused with a reason.
        let garbage = LastValidSpec { generation: 2, spec: serde_json::json!({"image": 5}) };
        assert!(ValidSpec::from_last_valid(&garbage, now()).unwrap_err().starts_with("status.lastValidSpec.spec"));
        let stale = LastValidSpec { generation: 2, spec: serde_json::json!({"image": "v2 "}) };
        assert!(ValidSpec::from_last_valid(&stale, now()).unwrap_err().contains("spec.image"));
    }

    #[test]
    fn a_window_that_never_opens_is_rejected() {
        let s = RolloutPolicy {
            maintenance_window: Some(MaintenanceWindow {
                schedule: "0 0 31 2 *".into(),
                duration: "1h".parse().unwrap(),
                time_zone: None,
            }),
            ..Default::default()
        };
        let errors = Policy::from_spec(&s, now()).unwrap_err();
        assert!(errors[0].contains("never opens"), "{errors:?}");
    }

    #[test]
    fn selectors_match_as_kubernetes_label_selectors_do() {
        let selector = NodeSelector::from_label_selector(
            &serde_json::from_value(serde_json::json!({
                "matchLabels": {"a": "1"},
                "matchExpressions": [
                    {"key": "b", "operator": "In", "values": ["x", "y"]},
                    {"key": "c", "operator": "NotIn", "values": ["z"]},
                    {"key": "d", "operator": "Exists"},
                    {"key": "e", "operator": "DoesNotExist"}
                ]
            }))
            .unwrap(),
        )
        .unwrap();
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert!(selector.matches(Some(&labels(&[("a", "1"), ("b", "y"), ("d", "")]))));
        assert!(!selector.matches(Some(&labels(&[("a", "1"), ("b", "y"), ("d", ""), ("c", "z")]))));
        assert!(!selector.matches(Some(&labels(&[("a", "1"), ("b", "y"), ("d", ""), ("e", "1")]))));
        assert!(!selector.matches(Some(&labels(&[("a", "1"), ("b", "q"), ("d", "")]))));
        assert!(NodeSelector::from_label_selector(&LabelSelector::default()).is_err());
        assert!(NodeSelector::default().matches(Some(&labels(&[(keys::MANAGED_LABEL, "true")]))));
    }

    #[test]
    fn several_windows_and_exclusions_are_read_and_each_bad_field_named() {
        let spec: RolloutPolicy = serde_json::from_value(serde_json::json!({
            "maintenanceWindow": {"schedule": "0 3 * * *", "duration": "1h"},
            "maintenanceWindows": [{"schedule": "0 22 * * *", "duration": "2h"}, {"schedule": "0 1 * * *", "duration": "0s"}],
            "maintenanceExclusions": [
                {"name": "freeze", "start": "2026-12-20T00:00:00Z", "end": "2027-01-03T00:00:00Z"},
                {"name": "backwards", "start": "2026-12-20T00:00:00Z", "end": "2026-12-19T00:00:00Z"}
            ]
        }))
        .unwrap();
        let errors = Policy::from_spec(&spec, "2026-11-21T12:00:00Z".parse().unwrap()).unwrap_err();
        assert_eq!(
            errors,
            vec![
                "spec.rollout.maintenanceWindows[1].duration: 0ns is not between 1s and 168h".to_owned(),
                "spec.rollout.maintenanceExclusions[1]: end 2026-12-19T00:00:00Z is not after start 2026-12-20T00:00:00Z"
                    .to_owned(),
            ]
        );
        let mut good = spec.clone();
        good.maintenance_windows.pop();
        good.maintenance_exclusions.pop();
        let p = Policy::from_spec(&good, "2026-11-21T12:00:00Z".parse().unwrap()).unwrap();
        assert_eq!(p.windows.iter().map(|w| w.schedule.as_str()).collect::<Vec<_>>(), ["0 3 * * *", "0 22 * * *"]);
        assert_eq!(p.exclusions.len(), 1);
    }

    #[test]
    fn canary_waves_are_read_and_each_bad_field_named() {
        let spec: RolloutPolicy = serde_json::from_value(serde_json::json!({
            "waves": [{"nodes": 1, "soak": "1h"}, {"nodes": "10%", "soak": "30m"}, {"nodes": "100%"}]
        }))
        .unwrap();
        let p = Policy::from_spec(&spec, "2026-11-21T12:00:00Z".parse().unwrap()).unwrap();
        let read: Vec<(MaxUnavailable, i64)> = p.waves.iter().map(|w| (w.nodes, w.soak.as_secs())).collect();
        assert_eq!(
            read,
            [(MaxUnavailable::Count(1), 3600), (MaxUnavailable::Percent(10), 1800), (MaxUnavailable::Percent(100), 0)]
        );
        let bad: RolloutPolicy = serde_json::from_value(serde_json::json!({
            "waves": [{"nodes": 0}, {"nodes": "150%"}, {"nodes": 2, "soak": "-1m"}]
        }))
        .unwrap();
        let errors = Policy::from_spec(&bad, "2026-11-21T12:00:00Z".parse().unwrap()).unwrap_err();
        assert_eq!(
            errors,
            [
                "spec.rollout.waves[0].nodes: 0 is less than 1",
                "spec.rollout.waves[1].nodes: \"150%\" is neither a count nor a percentage from 1% to 100%",
                "spec.rollout.waves[2].soak: -60s is negative",
            ]
        );
        let many: RolloutPolicy =
            serde_json::from_value(serde_json::json!({"waves": vec![serde_json::json!({"nodes": 1}); 17]})).unwrap();
        let errors = Policy::from_spec(&many, "2026-11-21T12:00:00Z".parse().unwrap()).unwrap_err();
        assert_eq!(errors, ["spec.rollout.waves: 17 waves, at most 16"]);
    }
}
