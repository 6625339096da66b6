//! Canary waves (`spec.rollout.waves`, issue 34 item 4): a rollout's nodes go in waves, and the next wave starts
//! only once every node of the previous one is done and has soaked.
//!
//! Wave `i` ends when `nodes` of waves 1 to `i` together (each resolved against the rollout's members, a
//! percentage rounded up; never more than the members) are done: up to date, failed or blocked (a failure is the
//! failure budget's to judge). While the rollout is in wave `i`, at most that many nodes have started: done, or
//! past their staging ([`progress`] gives the allowance, which the pipeline applies beside `maxUnavailable`, to
//! the disruptive starts and to staging ahead). Once wave `i` is complete its soak runs from when the controller
//! first found it complete ([`Completed`], kept in `status.waves` so that a restart or a new leader goes on from
//! there; a completion not yet recorded counts from now) and holds the rollout (`WaveSoaking`), every gate
//! checked as always. Past the last wave the rest goes with no limit but the others. A new target starts again at
//! wave 1.

use super::budget::MaxUnavailable;
use super::{Hold, Reason};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use shared::crd::WaveCompleted;
use std::collections::BTreeMap;

/// At most this many waves.
pub const MAX_WAVES: usize = 16;

/// A validated wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WavePolicy {
    pub nodes: MaxUnavailable,
    pub soak: SignedDuration,
}

/// When each wave of a target was found complete: (target, wave from 1) → when.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completed(BTreeMap<(String, u32), Timestamp>);

impl Completed {
    /// The completions `status.waves` records (an entry with a wave below 1 is ignored).
    pub fn from_status(waves: &[WaveCompleted]) -> Completed {
        Completed(
            waves
                .iter()
                .filter_map(|w| Some(((w.target.clone(), u32::try_from(w.wave).ok().filter(|n| *n >= 1)?), w.at.0)))
                .collect(),
        )
    }

    /// For `status.waves`.
    pub fn to_status(&self) -> Vec<WaveCompleted> {
        self.0
            .iter()
            .map(|((target, wave), at)| WaveCompleted {
                target: target.clone(),
                wave: i32::try_from(*wave).unwrap_or(i32::MAX),
                at: MicroTime(*at),
            })
            .collect()
    }

    /// The completions to keep after a plan whose waves are at `progress`: those of its target, with the waves it
    /// found complete and not yet recorded at `now`; the other targets' are forgotten. Without waves, none.
    pub fn record(&self, progress: Option<&Progress>, now: Timestamp) -> Completed {
        let Some(p) = progress else { return Completed::default() };
        let mut kept: BTreeMap<(String, u32), Timestamp> = self
            .0
            .iter()
            .filter(|((t, w), _)| *t == p.target && *w <= p.complete)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for wave in 1..=p.complete {
            kept.entry((p.target.clone(), wave)).or_insert(now);
        }
        Completed(kept)
    }

    fn get(&self, target: &str, wave: u32) -> Option<Timestamp> {
        self.0.get(&(target.to_owned(), wave)).copied()
    }
}

/// How many of a flow's members are where, for [`progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Members of the flow.
    pub total: u32,
    /// Done with the target: up to date, failed or blocked.
    pub done: u32,
    /// In flight past their staging (disrupted, or being replaced).
    pub moving: u32,
}

/// Where a rollout is in its waves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// What the flow moves its nodes to (the completions are kept per target).
    pub target: String,
    /// The wave it is in, from 1 (None: past the last one).
    pub wave: Option<u32>,
    /// How many waves there are.
    pub of: u32,
    /// How many waves are complete.
    pub complete: u32,
    pub state: State,
}

/// Whether nodes may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// At most this many more may start (None: no limit from the waves).
    Open { allowance: Option<u32> },
    /// The wave is complete and soaks: nothing starts before `until`.
    Soaking { until: Timestamp, nodes: u32 },
}

impl Progress {
    /// The hold while the wave soaks, and when it ends.
    pub fn hold(&self) -> Option<(Hold, Timestamp)> {
        let State::Soaking { until, nodes } = self.state else { return None };
        let wave = self.wave.unwrap_or(self.of);
        let next = if wave < self.of { format!("wave {}", wave + 1) } else { "the rest".to_owned() };
        let message = format!(
            "wave {wave} of {} ({nodes} node(s) of {} done) soaks until {until}; then {next} starts",
            self.of, self.target
        );
        Some((Hold::new(Reason::WaveSoaking, message), until))
    }

    /// How many more nodes may start now (None: no limit from the waves).
    pub fn allowance(&self) -> Option<u32> {
        match self.state {
            State::Open { allowance } => allowance,
            State::Soaking { .. } => Some(0),
        }
    }
}

/// Where the rollout of `target` with `waves` is, from its members' `tally` and the `completed` waves, at `now`.
/// `None` without waves.
pub fn progress(
    waves: &[WavePolicy],
    tally: Tally,
    completed: &Completed,
    target: &str,
    now: Timestamp,
) -> Option<Progress> {
    if waves.is_empty() {
        return None;
    }
    let of = waves.len() as u32;
    let at = |wave: Option<u32>, complete: u32, state: State| Progress {
        target: target.to_owned(),
        wave,
        of,
        complete,
        state,
    };
    let mut end = 0u32;
    for (i, w) in waves.iter().enumerate() {
        let number = i as u32 + 1;
        end = end.saturating_add(w.nodes.resolve(tally.total)).min(tally.total);
        if tally.done < end {
            let started = tally.done.saturating_add(tally.moving);
            return Some(at(Some(number), i as u32, State::Open { allowance: Some(end.saturating_sub(started)) }));
        }
        let since = completed.get(target, number).unwrap_or(now);
        let until = since.checked_add(w.soak).unwrap_or(Timestamp::MAX);
        if now < until {
            return Some(at(Some(number), number, State::Soaking { until, nodes: end }));
        }
    }
    Some(at(None, of, State::Open { allowance: None }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// 1 node for an hour, 10 % for half an hour, then the rest.
    fn canary() -> Vec<WavePolicy> {
        vec![
            WavePolicy { nodes: MaxUnavailable::Count(1), soak: SignedDuration::from_hours(1) },
            WavePolicy { nodes: MaxUnavailable::Percent(10), soak: SignedDuration::from_mins(30) },
            WavePolicy { nodes: MaxUnavailable::Percent(100), soak: SignedDuration::ZERO },
        ]
    }

    fn tally(done: u32, moving: u32) -> Tally {
        Tally { total: 50, done, moving }
    }

    #[test]
    fn the_first_wave_lets_one_node_start_then_soaks_from_its_completion() {
        let none = Completed::default();
        let p = progress(&canary(), tally(0, 0), &none, "v2", t(0)).unwrap();
        assert_eq!((p.wave, p.complete, p.allowance()), (Some(1), 0, Some(1)));
        let p = progress(&canary(), tally(0, 1), &none, "v2", t(0)).unwrap();
        assert_eq!(p.allowance(), Some(0), "the canary is moving");
        // Done at t(100), found so at t(100): it soaks until an hour later, recorded.
        let p = progress(&canary(), tally(1, 0), &none, "v2", t(100)).unwrap();
        assert_eq!(p.state, State::Soaking { until: t(3_700), nodes: 1 });
        let (hold, until) = p.hold().unwrap();
        assert_eq!(hold.reason, Reason::WaveSoaking);
        assert_eq!(
            hold.message,
            format!("wave 1 of 3 (1 node(s) of v2 done) soaks until {}; then wave 2 starts", t(3_700))
        );
        assert_eq!(until, t(3_700));
        let recorded = none.record(Some(&p), t(100));
        // A restart later goes on from the record, not from its own clock.
        let p = progress(&canary(), tally(1, 0), &recorded, "v2", t(2_000)).unwrap();
        assert_eq!(p.state, State::Soaking { until: t(3_700), nodes: 1 });
        // Then wave 2: 10 % of 50, 5 more nodes.
        let p = progress(&canary(), tally(1, 0), &recorded, "v2", t(3_700)).unwrap();
        assert_eq!((p.wave, p.complete, p.allowance()), (Some(2), 1, Some(5)));
        let p = progress(&canary(), tally(3, 2), &recorded, "v2", t(3_800)).unwrap();
        assert_eq!(p.allowance(), Some(1));
        let p = progress(&canary(), tally(4, 2), &recorded, "v2", t(3_800)).unwrap();
        assert_eq!(p.allowance(), Some(0));
    }

    #[test]
    fn past_the_last_wave_nothing_is_limited_and_a_new_target_starts_over() {
        // Two waves, 1 + 5 nodes: six done at once.
        let waves = &canary()[..2];
        let mut recorded = Completed::default();
        for now in [t(0), t(3_600)] {
            recorded = recorded.record(progress(waves, tally(6, 0), &recorded, "v2", now).as_ref(), now);
        }
        assert_eq!(recorded.to_status().len(), 2, "both waves complete: {recorded:?}");
        let p = progress(waves, tally(6, 0), &recorded, "v2", t(5_399)).unwrap();
        assert_eq!((p.wave, p.allowance()), (Some(2), Some(0)), "the second wave soaks from its own completion");
        let p = progress(waves, tally(6, 0), &recorded, "v2", t(5_400)).unwrap();
        assert_eq!((p.wave, p.allowance()), (None, None));
        // v3: the records of v2 do not count, and are dropped with the next record.
        let p = progress(waves, tally(0, 0), &recorded, "v3", t(3_600)).unwrap();
        assert_eq!((p.wave, p.allowance()), (Some(1), Some(1)));
        assert_eq!(recorded.record(Some(&p), t(3_600)), Completed::default());
        // Without waves: no progress, no records.
        assert_eq!(progress(&[], tally(0, 0), &recorded, "v3", t(0)), None);
        assert_eq!(recorded.record(None, t(0)), Completed::default());
    }

    #[test]
    fn the_status_round_trips_and_ignores_a_wave_below_one() {
        let p = progress(&canary(), tally(5, 0), &Completed::default(), "v2", t(0)).unwrap();
        let recorded = Completed::default().record(Some(&p), t(0));
        assert_eq!(Completed::from_status(&recorded.to_status()), recorded);
        let bad = WaveCompleted { target: "v2".into(), wave: 0, at: MicroTime(t(0)) };
        assert_eq!(Completed::from_status(&[bad]), Completed::default());
    }

    #[test]
    fn a_wave_larger_than_the_rest_ends_with_the_members() {
        let waves = [WavePolicy { nodes: MaxUnavailable::Count(80), soak: SignedDuration::ZERO }];
        let p = progress(&waves, tally(49, 1), &Completed::default(), "v2", t(0)).unwrap();
        assert_eq!(p.allowance(), Some(0));
        let p = progress(&waves, tally(50, 0), &Completed::default(), "v2", t(0)).unwrap();
        assert_eq!((p.wave, p.complete), (None, 1));
    }
}
