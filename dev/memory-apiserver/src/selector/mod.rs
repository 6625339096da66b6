//! Label and field selectors, as list and watch requests carry them.

pub mod field;
pub mod label;

pub use field::{FieldRef, FieldSelector, FieldSelectorError};
pub use label::LabelSelector;
