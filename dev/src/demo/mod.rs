//! The demo's presentation: live progress (a progress bar and the in-flight nodes on a terminal,
//! timestamped lines otherwise) and the closing summary. Pure functions of what the observer saw,
//! so they are tested without a cluster; `src/bin/demo.rs` wires them to a running rollout.

pub mod display;
pub mod run;
pub mod summary;
