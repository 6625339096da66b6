//! Resource types: what the server serves (built-in kinds and the kinds of registered CRDs), and per kind what
//! each write must do.

mod builtin;
mod builtin_kind;
pub mod defaulting;
pub mod events;
mod gvr;
pub mod job;
pub mod pod;
pub mod priority;
mod registry;
mod resource_type;
pub mod schema;
pub mod service;
pub mod strategy;

pub use builtin::builtin_types;
pub use builtin_kind::Builtin;
pub use gvr::Gvr;
pub use registry::Registry;
pub use resource_type::{Behavior, CustomBehavior, PrinterColumn, ResourceType, ScalePaths, SelectableField};
