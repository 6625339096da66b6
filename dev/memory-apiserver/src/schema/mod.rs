//! OpenAPI v3 schemas as the apiextensions server uses them: field errors, value validation, pruning and
//! defaulting of custom resources, and the structural-schema rules a CRD's schema must meet.

pub mod field_errors;
mod pruning;
pub mod structural;
mod validation;

pub use field_errors::{ErrorKind, FieldError, FieldPath, bad_value, field_error};
pub use pruning::{default, prune, prune_and_default};
pub use validation::{validate, validate_update, validate_value_at};
