//! Code both the controller and the agent use: the custom resource types, the node annotation
//! protocol, the health their loops report, and the structural-schema validation the CRDs are
//! checked with.

pub mod crd;
pub mod health;
pub mod protocol;
pub mod schema;
