//! Field errors as `k8s.io/apimachinery/pkg/util/validation/field` makes and prints them: their kinds, the path
//! of the field they are about, and the constructors the validation code of CRDs and built-in kinds uses.

use serde_json::Value;
use std::fmt;

/// The kind of a field error, as `k8s.io/apimachinery/pkg/util/validation/field` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Required,
    Invalid,
    NotSupported,
    TooLong,
    TooMany,
    TypeInvalid,
    Forbidden,
    Duplicate,
}

impl ErrorKind {
    /// The `reason` of a `StatusCause`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::Required => "FieldValueRequired",
            ErrorKind::Invalid => "FieldValueInvalid",
            ErrorKind::NotSupported => "FieldValueNotSupported",
            ErrorKind::TooLong => "FieldValueTooLong",
            ErrorKind::TooMany => "FieldValueTooMany",
            ErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            ErrorKind::Forbidden => "FieldValueForbidden",
            ErrorKind::Duplicate => "FieldValueDuplicate",
        }
    }
}

/// One validation error of one field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Path of the field, `spec.image`.
    pub field: String,
    pub kind: ErrorKind,
    /// The message without the field: `Invalid value: "": spec.image in body should be at least 1
    /// chars long`.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() { head } else { format!("{head}: {detail}") }
}

impl FieldError {
    /// `Required value[: detail]`.
    pub fn required(field: &FieldPath, detail: &str) -> Self {
        FieldError {
            field: field.to_string(),
            kind: ErrorKind::Required,
            message: with_detail("Required value".into(), detail),
        }
    }

    /// `Forbidden[: detail]`.
    pub fn forbidden(field: &FieldPath, detail: &str) -> Self {
        FieldError {
            field: field.to_string(),
            kind: ErrorKind::Forbidden,
            message: with_detail("Forbidden".into(), detail),
        }
    }

    /// `Invalid value: VALUE[: detail]`, the value rendered as [`bad_value`] does.
    pub fn invalid(field: &FieldPath, value: &Value, detail: &str) -> Self {
        FieldError {
            field: field.to_string(),
            kind: ErrorKind::Invalid,
            message: with_detail(format!("Invalid value: {}", bad_value(value)), detail),
        }
    }

    /// `Unsupported value: VALUE: supported values: "a", "b"`.
    pub fn not_supported(field: &FieldPath, value: &Value, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldError {
            field: field.to_string(),
            kind: ErrorKind::NotSupported,
            message: format!("Unsupported value: {}: supported values: {}", bad_value(value), list.join(", ")),
        }
    }

    /// `Duplicate value: VALUE`.
    pub fn duplicate(field: &FieldPath, value: &Value) -> Self {
        FieldError {
            field: field.to_string(),
            kind: ErrorKind::Duplicate,
            message: format!("Duplicate value: {}", bad_value(value)),
        }
    }

    /// `Too many: ACTUAL: must have at most MAX items`.
    pub fn too_many(field: &FieldPath, actual: usize, max: usize) -> Self {
        FieldError {
            field: field.to_string(),
            kind: ErrorKind::TooMany,
            message: format!("Too many: {actual}: must have at most {max} items"),
        }
    }
}

/// A value as `field.Error` prints it: strings quoted, numbers and booleans bare, `null` as `"null"` (Go
/// prints a nil value as the string "null"). Objects and lists are printed as JSON, where Go prints its
/// struct syntax.
pub fn bad_value(value: &Value) -> String {
    match value {
        Value::Null => "\"null\"".into(),
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// A field path as `field.Path` prints it: `spec.versions[0].schema.openAPIV3Schema.properties[spec]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldPath(String);

impl FieldPath {
    /// The root of a path: `spec`.
    pub fn new(root: &str) -> Self {
        FieldPath(root.to_owned())
    }

    /// `.name` (several names at once, `child("scale.specReplicasPath")`, print as given).
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() { FieldPath(name.to_owned()) } else { FieldPath(format!("{}.{name}", self.0)) }
    }

    /// `[key]`.
    pub fn key(&self, key: &str) -> Self {
        FieldPath(format!("{}[{key}]", self.0))
    }

    /// `[index]`.
    pub fn index(&self, index: usize) -> Self {
        FieldPath(format!("{}[{index}]", self.0))
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A field error, for the validation code of the built-in kinds.
pub fn field_error(field: &str, kind: ErrorKind, message: impl Into<String>) -> FieldError {
    FieldError { field: field.to_owned(), kind, message: message.into() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_print_as_apimachinery_prints_them() {
        let path = FieldPath::new("spec").child("validation").child("openAPIV3Schema").child("properties").key("spec");
        assert_eq!(path.to_string(), "spec.validation.openAPIV3Schema.properties[spec]");
        let versions = FieldPath::new("spec").child("versions").index(0).child("name");
        assert_eq!(
            FieldError::invalid(&versions, &json!("V1"), "a DNS-1035 label").to_string(),
            "spec.versions[0].name: Invalid value: \"V1\": a DNS-1035 label"
        );
        assert_eq!(
            FieldError::required(&path, "").to_string(),
            "spec.validation.openAPIV3Schema.properties[spec]: Required value"
        );
        assert_eq!(
            FieldError::forbidden(&path.child("type"), "must be empty to be structural").message,
            "Forbidden: must be empty to be structural"
        );
        assert_eq!(
            FieldError::not_supported(
                &FieldPath::new("spec").child("scope"),
                &json!("Galaxy"),
                &["Cluster", "Namespaced"]
            )
            .message,
            "Unsupported value: \"Galaxy\": supported values: \"Cluster\", \"Namespaced\""
        );
        assert_eq!(FieldError::invalid(&path, &Value::Null, "x").message, "Invalid value: \"null\": x");
        assert_eq!(FieldError::invalid(&path, &json!(false), "").message, "Invalid value: false");
        assert_eq!(FieldError::too_many(&path, 9, 8).message, "Too many: 9: must have at most 8 items");
    }
}
