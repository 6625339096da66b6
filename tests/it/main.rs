//! The update-operator binary's integration tests.
//!
//! One test binary for the crate (issue 31): each file of this directory is one module, as each was its own
//! binary before, so the crate's tests link once. Tests of one process share its globals: see each module.

mod dev_targets;
mod image;
mod json_logs;
mod metrics_docs;
mod plan_cli;
mod plan_clouds;
