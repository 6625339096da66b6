//! The one gate every decision to disrupt a node passes through: the rollouts' reconciler and the NodeOp
//! controller decide their starts from their caches, so without it each could start a node on a view that misses
//! the other's last start, and together take more nodes out than a rollout's `maxUnavailable` allows.
//!
//! # Guarantees
//! - A decider holds the gate from reading the nodes until every write of its decision has returned: the other
//!   decides only after, and then sees those writes (the watch's objects corrected by [`crate::own_writes`]).
//! - The reconciler leaves in the gate the rollouts it last planned. The NodeOp controller decides under the
//!   budgets they give ([`crate::policy::budgets`]); until the reconciler has planned once in the current term
//!   (they are forgotten when a term ends), it starts nothing.
//! - The gate is a `tokio` mutex: a decider whose leadership term ends is cancelled and releases it at once.

use crate::policy::Rollout;
use crate::replacer::Replacer;
use std::sync::Arc;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// What the gate keeps between decisions.
#[derive(Default)]
pub struct Known {
    /// The rollouts as the reconciler last planned them, oldest first; `None` before its first plan.
    pub rollouts: Option<Vec<Rollout>>,
    /// The replacement's view of the cloud the reconciler plans with (`None` without a cloud): the scaling groups,
    /// the PendingNodes and each node's group, so that the budgets a NodeOp keeps to count replacements as the
    /// rollouts count them.
    pub replacer: Option<Arc<Replacer>>,
}

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Known")
            .field("rollouts", &self.rollouts.as_ref().map(Vec::len))
            .field("replacer", &self.replacer.is_some())
            .finish()
    }
}

/// The gate, shared by the deciders of one controller process.
#[derive(Debug, Clone, Default)]
pub struct DisruptionGate {
    inner: Arc<Mutex<Known>>,
}

impl DisruptionGate {
    pub fn new() -> Self {
        DisruptionGate::default()
    }

    /// Waits for the gate; the decision holds it until the guard is dropped.
    pub async fn enter(&self) -> OwnedMutexGuard<Known> {
        self.inner.clone().lock_owned().await
    }

    /// Forgets the rollouts (the reconciler's term ended): until it plans again, nothing new is started.
    pub async fn forget(&self) {
        let mut known = self.enter().await;
        known.rollouts = None;
        known.replacer = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_second_decider_waits_until_the_first_is_done_and_then_sees_what_it_left() {
        let gate = DisruptionGate::new();
        let mut first = gate.enter().await;
        let other = gate.clone();
        let second = tokio::spawn(async move { other.enter().await.rollouts.as_ref().map(Vec::len) });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "entered while the first decider held the gate");
        first.rollouts = Some(Vec::new());
        drop(first);
        assert_eq!(second.await.unwrap(), Some(0));
        // A term's end forgets them.
        gate.forget().await;
        assert!(gate.enter().await.rollouts.is_none());
    }
}
