//! The agent's backoff policies: how long it waits before trying something again.
//!
//! Every policy doubles its delay from a first delay up to a longest one, with jitter (up to the
//! delay again, so that agents that failed together do not retry together).

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use std::time::Duration;

/// A backoff policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Delay before the first retry.
    pub first: Duration,
    /// Longest delay between two attempts.
    pub longest: Duration,
    /// Retries after the first attempt; `None` retries until the caller stops.
    pub retries: Option<usize>,
}

/// Host work of an intent (stage, reboot) after a transient error: until the work succeeds, fails
/// for good or the controller moves on (the step's timeout is the controller's). At most a minute
/// apart: a host that healed is used again within a minute, a host that did not costs one attempt
/// a minute.
pub const HOST_WORK: Policy = Policy { first: Duration::from_secs(1), longest: Duration::from_secs(60), retries: None };

/// Undoing a stage (see [`crate::host::HostUpdater::release`]): about two minutes of attempts,
/// then it gives up (it is a courtesy to the host's settings, not a step of the rollout, and must
/// not hold up the next stage for long).
pub const RELEASE: Policy =
    Policy { first: Duration::from_secs(1), longest: Duration::from_secs(30), retries: Some(6) };

/// Reading the host's facts after a failed read: until one succeeds.
pub const FACTS: Policy = Policy { first: Duration::from_secs(2), longest: Duration::from_secs(120), retries: None };

/// Writing the report after a failed write (the API server is down or overloaded): until one
/// succeeds, at most half a minute apart, so that thousands of agents do not hammer it.
pub const WRITE: Policy = Policy { first: Duration::from_secs(1), longest: Duration::from_secs(30), retries: None };

impl Policy {
    /// The policy for `backon`'s retry combinators.
    pub fn builder(self) -> ExponentialBuilder {
        let builder =
            ExponentialBuilder::default().with_min_delay(self.first).with_max_delay(self.longest).with_jitter();
        match self.retries {
            Some(retries) => builder.with_max_times(retries),
            None => builder.without_max_times(),
        }
    }

    /// The delays, one per failure; a policy without a limit never runs out.
    pub fn delays(self) -> ExponentialBackoff {
        self.builder().build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_to_the_longest_and_an_unlimited_policy_never_runs_out() {
        let delays: Vec<Duration> = HOST_WORK.delays().take(100).collect();
        assert_eq!(delays.len(), 100);
        assert!(delays[0] >= Duration::from_secs(1) && delays[0] <= Duration::from_secs(2), "{delays:?}");
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(120)), "jitter adds at most the delay again");
        assert!(delays[99] >= Duration::from_secs(60), "{:?}", delays[99]);
    }

    #[test]
    fn a_limited_policy_runs_out() {
        assert_eq!(RELEASE.delays().count(), 6);
    }
}
