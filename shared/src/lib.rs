//! Code both the controller and the agent use: the custom resource types, the node annotation
//! protocol, and the health their loops report.

pub mod accept;
pub mod components;
pub mod crd;
pub mod health;
pub mod protocol;
pub mod selector;
pub mod version;
