//! How long each step of a node's update takes: measured by the controller into the NodeVersion
//! status ([`measure`]), and chosen for a forecast from flags, those measurements or defaults
//! ([`Durations`]).
//!
//! # Measuring
//! A step's duration is from its intent's `since` to the next step's (`stage` to `drain`, `drain` to
//! `reboot` or `kubeadm-upgrade`), and for `reboot` and `kubeadm-upgrade` to the round that verifies the node. The start comes from the
//! last status written (the reconciler's own write while the watch has not delivered it: a status computed from an
//! older one would miss the steps between them) and the end from the plan, both to the millisecond. (Whole seconds are not
//! enough: a rollout's steps keep the same phase within the second, so truncation would bias every
//! sample the same way, by up to a second.) Each NodeVersion keeps a
//! running mean per step that weighs the last [`MEAN_OVER`] samples the most.
//!
//! A replaced node (one of a scaling group) has two steps, both under `intent=replace`: [`REPLACE`], from its
//! `intent=replace` to the fresh one its drain starts with (the new instance's creation, join, soak and pairing),
//! and [`RETIRE`], from there until its Node is deleted (the drain and the deletion). Then its instance is deleted:
//! [`RELEASE`], from the round that finds its Node gone (the status lists it in `releasing` with that time) to the
//! round that finds the instance gone.

use crate::policy::Plan;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use serde::Serialize;
use shared::crd::{InFlightNode, NodeVersionStatus, StepDuration};

/// The running mean weighs about this many of the last samples.
pub const MEAN_OVER: i32 = 50;
/// What a forecast assumes when neither a flag nor a measurement says.
pub const DEFAULT_STAGE: SignedDuration = SignedDuration::from_mins(3);
pub const DEFAULT_DRAIN: SignedDuration = SignedDuration::from_mins(2);
pub const DEFAULT_REBOOT: SignedDuration = SignedDuration::from_mins(3);
pub const DEFAULT_KUBEADM_UPGRADE: SignedDuration = SignedDuration::from_mins(5);
pub const DEFAULT_FETCH: SignedDuration = SignedDuration::from_mins(1);
pub const DEFAULT_REPLACE: SignedDuration = SignedDuration::from_mins(5);
pub const DEFAULT_RETIRE: SignedDuration = SignedDuration::from_mins(3);
pub const DEFAULT_RELEASE: SignedDuration = SignedDuration::from_mins(1);
/// The step name of a kubeadm upgrade, as the status publishes it.
pub const KUBEADM_UPGRADE: &str = "kubeadm-upgrade";
/// The measured step of a replacement until the replaced node's drain starts (see the module documentation).
pub const REPLACE: &str = "replace";
/// The measured step of a replacement from the replaced node's drain until its Node is deleted.
pub const RETIRE: &str = "retire";
/// The measured step of a replacement from its old Node's deletion until its instance is gone.
pub const RELEASE: &str = "release";

/// Where a duration comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind")]
pub enum Source {
    /// A command-line flag.
    Flag,
    /// The mean of `samples` measurements on the nodes of NodeVersion `node_version`.
    #[serde(rename_all = "camelCase")]
    Measured { node_version: String, samples: i32 },
    /// Nothing measured it: an assumption.
    Default,
}

/// The duration of each in-place step, and where each comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Durations {
    pub stage: SignedDuration,
    pub drain: SignedDuration,
    pub reboot: SignedDuration,
    /// A node's `kubeadm upgrade` (apply or node), from its intent to the round that verifies it.
    pub kubeadm_upgrade: SignedDuration,
    /// The fetch of a node's Kubernetes components ahead of its turn (`intent=fetch`), until fetched.
    pub fetch: SignedDuration,
    /// A replaced node, from its `intent=replace` until its drain starts: the new instance's creation and
    /// join, the soak time and the pairing.
    pub replace: SignedDuration,
    /// A replaced node's drain and the deletion of its Node.
    pub retire: SignedDuration,
    /// The deletion of a replaced node's instance, after its Node's (until then it holds a `maxSurge` slot).
    pub release: SignedDuration,
    pub stage_source: Source,
    pub drain_source: Source,
    pub reboot_source: Source,
    pub kubeadm_upgrade_source: Source,
    pub fetch_source: Source,
    pub replace_source: Source,
    pub retire_source: Source,
    pub release_source: Source,
}

impl Default for Durations {
    fn default() -> Self {
        Durations {
            stage: DEFAULT_STAGE,
            drain: DEFAULT_DRAIN,
            reboot: DEFAULT_REBOOT,
            kubeadm_upgrade: DEFAULT_KUBEADM_UPGRADE,
            stage_source: Source::Default,
            drain_source: Source::Default,
            reboot_source: Source::Default,
            kubeadm_upgrade_source: Source::Default,
            fetch: DEFAULT_FETCH,
            fetch_source: Source::Default,
            replace: DEFAULT_REPLACE,
            retire: DEFAULT_RETIRE,
            replace_source: Source::Default,
            retire_source: Source::Default,
            release: DEFAULT_RELEASE,
            release_source: Source::Default,
        }
    }
}

impl Durations {
    /// The measurements of `statuses` (NodeVersion name and status): for each step the one of
    /// `preferred` if it measured the step, else the one with the most samples; defaults for the rest.
    pub fn measured<'a>(
        statuses: impl IntoIterator<Item = (&'a str, &'a NodeVersionStatus)> + Clone,
        preferred: Option<&str>,
    ) -> Durations {
        let mut durations = Durations::default();
        let pick = |step: &str| {
            let mut found: Vec<(&str, &StepDuration)> = statuses
                .clone()
                .into_iter()
                .flat_map(|(name, s)| s.step_durations.iter().filter(|d| d.step == step).map(move |d| (name, d)))
                .collect();
            found.sort_by_key(|(name, d)| (Some(*name) != preferred, -d.samples, name.to_string()));
            found.first().map(|(name, d)| {
                let source = Source::Measured { node_version: (*name).to_owned(), samples: d.samples };
                (SignedDuration::from_millis(d.mean_millis.max(0)), source)
            })
        };
        if let Some((d, s)) = pick("stage") {
            (durations.stage, durations.stage_source) = (d, s);
        }
        if let Some((d, s)) = pick("drain") {
            (durations.drain, durations.drain_source) = (d, s);
        }
        if let Some((d, s)) = pick("reboot") {
            (durations.reboot, durations.reboot_source) = (d, s);
        }
        if let Some((d, s)) = pick(KUBEADM_UPGRADE) {
            (durations.kubeadm_upgrade, durations.kubeadm_upgrade_source) = (d, s);
        }
        if let Some((d, s)) = pick(FETCH_STEP) {
            (durations.fetch, durations.fetch_source) = (d, s);
        }
        if let Some((d, s)) = pick(REPLACE) {
            (durations.replace, durations.replace_source) = (d, s);
        }
        if let Some((d, s)) = pick(RETIRE) {
            (durations.retire, durations.retire_source) = (d, s);
        }
        if let Some((d, s)) = pick(RELEASE) {
            (durations.release, durations.release_source) = (d, s);
        }
        durations
    }

    /// These durations with those of the flags given.
    pub fn with_flags(
        mut self,
        stage: Option<SignedDuration>,
        drain: Option<SignedDuration>,
        reboot: Option<SignedDuration>,
        kubeadm_upgrade: Option<SignedDuration>,
    ) -> Durations {
        if let Some(d) = stage {
            (self.stage, self.stage_source) = (d, Source::Flag);
        }
        if let Some(d) = drain {
            (self.drain, self.drain_source) = (d, Source::Flag);
        }
        if let Some(d) = reboot {
            (self.reboot, self.reboot_source) = (d, Source::Flag);
        }
        if let Some(d) = kubeadm_upgrade {
            (self.kubeadm_upgrade, self.kubeadm_upgrade_source) = (d, Source::Flag);
        }
        self
    }

    /// These durations with those of the replacement's flags given.
    pub fn with_replacement_flags(
        mut self,
        replace: Option<SignedDuration>,
        retire: Option<SignedDuration>,
        release: Option<SignedDuration>,
    ) -> Durations {
        if let Some(d) = replace {
            (self.replace, self.replace_source) = (d, Source::Flag);
        }
        if let Some(d) = retire {
            (self.retire, self.retire_source) = (d, Source::Flag);
        }
        if let Some(d) = release {
            (self.release, self.release_source) = (d, Source::Flag);
        }
        self
    }
}

/// The step a node stages in (ahead of its turn), as the status names it.
const STAGE_STEP: &str = "stage";
/// The step a node fetches its Kubernetes components in (ahead of its turn), as the status names it.
pub const FETCH_STEP: &str = "fetch";

/// The step durations to publish: those of `previous`, with a sample for each node that left a step
/// between `previous` (its `inFlight` and `replacing`) and `plan`, at `now`. `same_target`: `previous` describes
/// the same target, so a node gone from the nodes in flight after its reboot was verified.
pub fn measure(
    previous: Option<&NodeVersionStatus>,
    plan: &Plan,
    same_target: bool,
    now: Timestamp,
) -> Vec<StepDuration> {
    let Some(previous) = previous else { return Vec::new() };
    let mut durations = previous.step_durations.clone();
    let problem = |node: &str| plan.failed.iter().chain(&plan.blocked).any(|p| p.node == node);
    let replacing = replacing(Some(previous), plan, now);
    for before in &previous.replacing {
        // A replacement's later steps: each ends when the next one is listed (a node seen two steps on is not
        // measured), `release` when its instance is gone.
        let now_in = replacing.iter().find(|r| r.name == before.name);
        let ended = match (before.step.as_str(), now_in.map(|r| r.step.as_str())) {
            (RETIRE, Some(RELEASE)) => now,
            (RELEASE, None) if same_target && !problem(&before.name) => now,
            _ => continue,
        };
        add_sample(&mut durations, &before.step, ended.duration_since(before.since.0).max(SignedDuration::ZERO));
    }
    for before in &previous.in_flight {
        let started = before.since.0;
        let now_in = plan.in_flight.iter().find(|f| f.node == before.name);
        if before.step == REPLACE {
            // Its first step ends when its drain starts (with a fresh intent: a new `since`).
            if let Some(retiring) = replacing.iter().find(|r| r.name == before.name && r.step == RETIRE)
                && retiring.since.0 > started
            {
                add_sample(&mut durations, REPLACE, retiring.since.0.duration_since(started));
            }
            continue;
        }
        if before.step == STAGE_STEP || before.step == FETCH_STEP {
            if before.waiting_on.is_some() {
                // Staged ahead already, waiting for its turn: its staging was measured when it was staged.
                continue;
            }
            if now_in.is_some_and(|f| f.step.as_str() == before.step && f.waiting_on.is_some()) {
                // Staged ahead of its turn: the staging ends here, not when the turn comes.
                add_sample(&mut durations, &before.step, now.duration_since(started).max(SignedDuration::ZERO));
                continue;
            }
        }
        let ended = match now_in {
            Some(now_in) if now_in.step.as_str() != before.step && follows(&before.step, now_in.step.as_str()) => {
                now_in.since
            }
            None if verified_after(&before.step) && same_target && !problem(&before.name) => now,
            _ => continue,
        };
        let took = ended.duration_since(started).max(SignedDuration::ZERO);
        add_sample(&mut durations, &before.step, took);
    }
    durations
}

/// The donors of `plan` past their new instance's join, for the status's `replacing`: those whose drain started
/// (`retire`, since the drain's intent), and those whose Node is gone (`release`, since the first round that found
/// it gone, kept from `previous`).
pub fn replacing(previous: Option<&NodeVersionStatus>, plan: &Plan, now: Timestamp) -> Vec<InFlightNode> {
    let retiring = plan.in_flight.iter().filter(|f| plan.replacements.retiring.contains(&f.node)).map(|f| {
        InFlightNode { name: f.node.clone(), step: RETIRE.to_owned(), since: MicroTime(f.since), waiting_on: None }
    });
    let releasing = plan.replacements.obsolete.iter().map(|name| {
        let known = previous.and_then(|p| p.replacing.iter().find(|r| &r.name == name && r.step == RELEASE));
        InFlightNode {
            name: name.clone(),
            step: RELEASE.to_owned(),
            since: known.map_or(MicroTime(now), |r| r.since.clone()),
            waiting_on: None,
        }
    });
    retiring.chain(releasing).collect()
}

/// Whether `next` is the step that follows `step` (a node seen two steps on is not measured).
fn follows(step: &str, next: &str) -> bool {
    matches!(
        (step, next),
        ("stage" | "fetch", "drain")
            | ("drain", "reboot")
            | ("drain", KUBEADM_UPGRADE)
            | ("reboot", "done")
            | (KUBEADM_UPGRADE, "done")
    ) || !matches!(step, "stage" | "fetch" | "drain" | "reboot" | KUBEADM_UPGRADE)
}

/// Whether a node in `step` that leaves the nodes in flight was verified (its last step ended then).
fn verified_after(step: &str) -> bool {
    matches!(step, "reboot" | KUBEADM_UPGRADE)
}

/// How many of the last measurements of a step the status keeps for its 95th percentile.
pub const RECENT: usize = 20;

/// Folds one sample of `step` into the running means and the recent measurements (and their 95th percentile).
fn add_sample(durations: &mut Vec<StepDuration>, step: &str, took: SignedDuration) {
    let millis = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
    let d = match durations.iter().position(|d| d.step == step) {
        Some(i) => {
            let d = &mut durations[i];
            let weight = i64::from(d.samples.saturating_add(1).min(MEAN_OVER));
            d.mean_millis += (millis - d.mean_millis) / weight;
            d.samples = d.samples.saturating_add(1);
            d
        }
        None => {
            durations.push(StepDuration {
                step: step.to_owned(),
                samples: 1,
                mean_millis: millis,
                ..Default::default()
            });
            durations.sort_by(|a, b| a.step.cmp(&b.step));
            let Some(d) = durations.iter_mut().find(|d| d.step == step) else { return };
            d
        }
    };
    d.recent_millis.push(millis);
    let excess = d.recent_millis.len().saturating_sub(RECENT);
    d.recent_millis.drain(..excess);
    d.p95_millis = p95(&d.recent_millis);
}

/// The 95th percentile of `millis` by nearest rank (the smallest value at least 95 % of them are at most); `None`
/// for none.
pub fn p95(millis: &[i64]) -> Option<i64> {
    let mut sorted = millis.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * 95).div_ceil(100);
    sorted.get(rank.checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{InFlight, Problem};
    use shared::protocol::Step;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap()
    }

    /// A step measured once, at `millis`.
    fn one(step: &str, millis: i64) -> StepDuration {
        StepDuration {
            step: step.into(),
            samples: 1,
            mean_millis: millis,
            p95_millis: Some(millis),
            recent_millis: vec![millis],
        }
    }

    fn published(node: &str, step: &str, at: Timestamp) -> InFlightNode {
        InFlightNode { name: node.into(), step: step.into(), since: MicroTime(at), waiting_on: None }
    }

    #[test]
    fn a_step_left_is_measured_from_its_published_start_to_the_next_steps_start_to_the_millisecond() {
        let previous = NodeVersionStatus {
            in_flight: vec![
                published("a", "stage", t(300)),
                published("b", "drain", t(0)),
                published("c", "reboot", t(0)),
            ],
            ..Default::default()
        };
        let mut plan = Plan::default();
        plan.in_flight.push(InFlight { node: "a".into(), step: Step::Drain, since: t(2_500), waiting_on: None });
        // b: still draining; c: verified (gone from the nodes in flight).
        plan.in_flight.push(InFlight { node: "b".into(), step: Step::Drain, since: t(0), waiting_on: None });
        let measured = measure(Some(&previous), &plan, true, t(4_000));
        assert_eq!(measured, vec![one("reboot", 4_000), one("stage", 2_200),]);
        // The same view again (a status not yet written back) gives the same record.
        assert_eq!(measure(Some(&previous), &plan, true, t(4_000)), measured);
        // A node gone because it failed, or a status of another target, measures nothing.
        plan.failed.push(Problem { node: "c".into(), message: "x".into() });
        assert_eq!(measure(Some(&previous), &plan, true, t(4_000)).len(), 1);
        assert_eq!(measure(Some(&previous), &Plan::default(), false, t(4_000)), vec![]);
    }

    /// A node staged ahead of its turn: its staging ends when it is staged (its in-flight entry starts to say what
    /// its turn waits for), not when its turn comes; the wait is measured in no step.
    #[test]
    fn a_staging_ahead_of_the_turn_is_measured_until_the_node_is_staged() {
        let previous = NodeVersionStatus { in_flight: vec![published("a", "stage", t(0))], ..Default::default() };
        let mut plan = Plan::default();
        let waiting = Some("its turn: staged".to_owned());
        plan.in_flight.push(InFlight { node: "a".into(), step: Step::Stage, since: t(0), waiting_on: waiting.clone() });
        let measured = measure(Some(&previous), &plan, true, t(1_500));
        assert_eq!(measured, vec![one("stage", 1_500)]);
        // Its turn comes much later: no second sample of its staging.
        let staged = InFlightNode { waiting_on: waiting, ..published("a", "stage", t(0)) };
        let previous =
            NodeVersionStatus { in_flight: vec![staged], step_durations: measured.clone(), ..Default::default() };
        let mut plan = Plan::default();
        plan.in_flight.push(InFlight { node: "a".into(), step: Step::Drain, since: t(60_000), waiting_on: None });
        assert_eq!(measure(Some(&previous), &plan, true, t(60_000)), measured);
    }

    #[test]
    fn a_kubeadm_upgrade_is_measured_from_its_start_to_the_round_that_verifies_the_node() {
        let previous = NodeVersionStatus {
            in_flight: vec![published("a", "drain", t(0)), published("b", KUBEADM_UPGRADE, t(1_000))],
            ..Default::default()
        };
        let mut plan = Plan::default();
        // a: drained, now in its kubeadm upgrade; b: verified.
        plan.in_flight.push(InFlight { node: "a".into(), step: Step::KubeadmUpgrade, since: t(700), waiting_on: None });
        assert_eq!(
            measure(Some(&previous), &plan, true, t(6_000)),
            vec![one("drain", 700), one(KUBEADM_UPGRADE, 5_000),]
        );
        let status =
            NodeVersionStatus { step_durations: measure(Some(&previous), &plan, true, t(6_000)), ..Default::default() };
        let d = Durations::measured([("nv", &status)], None);
        assert_eq!(d.kubeadm_upgrade, SignedDuration::from_secs(5));
        assert_eq!(d.kubeadm_upgrade_source, Source::Measured { node_version: "nv".into(), samples: 1 });
        let d = d.with_flags(None, None, None, Some(SignedDuration::from_secs(9)));
        assert_eq!((d.kubeadm_upgrade, d.kubeadm_upgrade_source), (SignedDuration::from_secs(9), Source::Flag));
        assert_eq!(Durations::default().kubeadm_upgrade, DEFAULT_KUBEADM_UPGRADE);
    }

    #[test]
    fn the_mean_runs_over_the_samples_and_weighs_the_last_ones() {
        let mut d = Vec::new();
        add_sample(&mut d, "stage", SignedDuration::from_secs(1));
        add_sample(&mut d, "stage", SignedDuration::from_secs(3));
        let both = vec![1_000, 3_000];
        let expected = StepDuration {
            step: "stage".into(),
            samples: 2,
            mean_millis: 2_000,
            p95_millis: Some(3_000),
            recent_millis: both,
        };
        assert_eq!(d, vec![expected]);
        for _ in 0..200 {
            add_sample(&mut d, "stage", SignedDuration::from_secs(10));
        }
        assert!(d[0].mean_millis > 9_900, "{d:?}");
        assert_eq!(d[0].samples, 202);
        assert_eq!((d[0].recent_millis.len(), d[0].p95_millis), (RECENT, Some(10_000)));
    }

    #[test]
    fn the_95th_percentile_is_the_nearest_rank_of_the_last_twenty() {
        assert_eq!(p95(&[]), None);
        assert_eq!(p95(&[7]), Some(7));
        // 20 values 1..=20: rank 19.
        let values: Vec<i64> = (1..=20).rev().collect();
        assert_eq!(p95(&values), Some(19));
        // 10 values: rank 10 (the largest).
        assert_eq!(p95(&(1..=10).collect::<Vec<_>>()), Some(10));
        // One slow node among the last twenty shows; once twenty faster ones follow, it is forgotten.
        let mut d = Vec::new();
        add_sample(&mut d, "reboot", SignedDuration::from_secs(60));
        for _ in 0..19 {
            add_sample(&mut d, "reboot", SignedDuration::from_secs(5));
        }
        assert_eq!(d[0].p95_millis, Some(5_000), "one in twenty is above the 95th percentile");
        add_sample(&mut d, "reboot", SignedDuration::from_secs(50));
        assert_eq!(d[0].p95_millis, Some(5_000), "the 60 s sample fell out of the window: {d:?}");
        add_sample(&mut d, "reboot", SignedDuration::from_secs(40));
        assert_eq!(d[0].p95_millis, Some(40_000), "two in twenty are: {d:?}");
    }

    #[test]
    fn flags_win_over_measurements_and_the_named_node_version_over_others() {
        let status = |stage: i64, samples: i32| NodeVersionStatus {
            step_durations: vec![StepDuration {
                step: "stage".into(),
                samples,
                mean_millis: stage,
                ..Default::default()
            }],
            ..Default::default()
        };
        let (a, b) = (status(1_000, 3), status(2_000, 9));
        let statuses = [("a", &a), ("b", &b)];
        let d = Durations::measured(statuses, Some("a"));
        assert_eq!(d.stage, SignedDuration::from_secs(1));
        assert_eq!(d.stage_source, Source::Measured { node_version: "a".into(), samples: 3 });
        assert_eq!(Durations::measured(statuses, None).stage, SignedDuration::from_secs(2));
        assert_eq!((d.drain, d.drain_source.clone()), (DEFAULT_DRAIN, Source::Default));
        let d = d.with_flags(None, Some(SignedDuration::from_secs(7)), None, None);
        assert_eq!((d.drain, d.drain_source), (SignedDuration::from_secs(7), Source::Flag));
    }

    #[test]
    fn a_replacement_is_measured_step_by_step_and_a_step_seen_skipped_is_not() {
        let in_flight = |node: &str, since: i64| InFlight {
            node: node.into(),
            step: Step::Replace,
            since: t(since),
            waiting_on: None,
        };
        // a: waiting for its new instance; b: draining since 1 s; c: its Node gone.
        let previous = NodeVersionStatus {
            in_flight: vec![published("a", REPLACE, t(0)), published("b", REPLACE, t(1_000))],
            replacing: vec![published("b", RETIRE, t(1_000)), published("c", RELEASE, t(500))],
            ..Default::default()
        };
        // a: its drain started (a fresh intent); b: its Node is gone; c: its instance is gone.
        let mut plan = Plan::default();
        plan.in_flight.push(in_flight("a", 4_000));
        plan.replacements.retiring.push("a".into());
        plan.replacements.obsolete.push("b".into());
        assert_eq!(
            measure(Some(&previous), &plan, true, t(6_000)),
            vec![one(RELEASE, 5_500), one(REPLACE, 4_000), one(RETIRE, 5_000),]
        );
        // The status lists a and b with their steps; b keeps its time while its instance is being deleted.
        let listed = replacing(Some(&previous), &plan, t(6_000));
        assert_eq!(listed, vec![published("a", RETIRE, t(4_000)), published("b", RELEASE, t(6_000))]);
        let later = NodeVersionStatus { replacing: listed.clone(), ..Default::default() };
        assert_eq!(replacing(Some(&later), &plan, t(7_000)), listed);
        assert_eq!(measure(Some(&later), &plan, true, t(7_000)), vec![], "nothing left a step");
        // A status that missed a's drain (seen waiting for its instance, then gone): neither step is measured.
        let mut gone = Plan::default();
        gone.replacements.obsolete.push("a".into());
        let missed = NodeVersionStatus { in_flight: vec![published("a", REPLACE, t(0))], ..Default::default() };
        assert_eq!(measure(Some(&missed), &gone, true, t(9_000)), vec![]);
        // Still waiting for its instance (the same intent): nothing measured.
        let mut waiting = Plan::default();
        waiting.in_flight.push(in_flight("a", 0));
        assert_eq!(measure(Some(&missed), &waiting, true, t(6_000)), vec![]);

        let status =
            NodeVersionStatus { step_durations: measure(Some(&previous), &plan, true, t(6_000)), ..Default::default() };
        let d = Durations::measured([("nv", &status)], None);
        assert_eq!(
            (d.replace, d.retire, d.release),
            (SignedDuration::from_secs(4), SignedDuration::from_secs(5), SignedDuration::from_millis(5_500))
        );
        assert_eq!(d.retire_source, Source::Measured { node_version: "nv".into(), samples: 1 });
        let d = d.with_replacement_flags(Some(SignedDuration::from_secs(9)), None, None);
        assert_eq!((d.replace, d.replace_source), (SignedDuration::from_secs(9), Source::Flag));
        assert_eq!((Durations::default().replace, Durations::default().retire), (DEFAULT_REPLACE, DEFAULT_RETIRE));
    }
}
