//! The agent's integration tests.
//!
//! One test binary for the crate (issue 31): each file of this directory is one module, as each was its own
//! binary before, so the crate's tests link once. Tests of one process share its globals: see each module.

mod bottlerocket_agent;
mod bottlerocket_fake;
mod bottlerocket_host;
mod command_cgroup;
mod command_host;
mod liveness;
mod simulated_host;
mod support;
