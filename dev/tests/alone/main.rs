//! The dev cluster's tests that need the machine to themselves: they compare `plan`'s forecast of a rollout's
//! duration with the rollout that follows, measured in real time, within 10 %. Tests running beside them in the
//! crate's main test binary (`tests/it`) slow the measured rollouts unevenly: there the demo's forecast missed by
//! 10.6 % (issue 31). Cargo runs test binaries one after the other, so these run with nothing else of the crate
//! beside them, and `plan::ALONE` runs them one at a time.

mod plan;
#[path = "../it/support/mod.rs"]
mod support;
