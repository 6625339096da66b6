//! Code both the controller and the agent use: the custom resource types, the node annotation
//! protocol, and the structural-schema validation the CRDs are checked with.

pub mod crd;
pub mod probes;
pub mod protocol;
pub mod schema;
