//! Code both the controller and the agent use: the custom resource types and the node annotation
//! protocol.

pub mod crd;
pub mod probes;
pub mod protocol;
