//! The update-operator agent: watches its own Node, reports its host's facts and carries out the
//! controller's intents on the host.

pub mod components;
pub mod decide;
mod facts;
pub mod host;
pub mod kubeadm;
mod metrics;
mod nodes;
mod operation;
mod own_node;
pub mod releases;
mod retry;
pub mod worker;

pub use metrics::{HostOpLabels, Metrics};
pub use worker::{Error, run};
