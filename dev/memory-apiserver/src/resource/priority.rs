//! scheduling.k8s.io/v1 PriorityClass: the built-in system classes, defaulting and validation (upstream
//! `pkg/apis/scheduling/validation`); the Priority admission plugin's checks that need the store are in
//! [`crate::ops::admit`].

use super::defaulting::set_default;
use crate::schema::{ErrorKind, FieldError, field_error};
use serde_json::{Value, json};

/// The highest value a user-defined class may have.
pub const HIGHEST_USER_DEFINABLE: i64 = 1_000_000_000;

/// The classes a real API server creates at start: name, value, description.
pub const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// The stored form of a system class (metadata without server-set fields).
pub fn system_class(name: &str, value: i64, description: &str) -> Value {
    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
           "value": value, "globalDefault": false, "description": description,
           "preemptionPolicy": "PreemptLowerPriority"})
}

/// True for the names of the built-in classes.
pub fn is_system_class(name: &str) -> bool {
    SYSTEM_CLASSES.iter().any(|(n, _, _)| *n == name)
}

/// Defaults `preemptionPolicy`.
pub fn default_class(class: &mut Value) {
    set_default(class, "preemptionPolicy", json!("PreemptLowerPriority"));
}

fn preemption_policy(class: &Value, errors: &mut Vec<FieldError>) {
    match class.get("preemptionPolicy").and_then(Value::as_str) {
        None | Some("PreemptLowerPriority" | "Never") => {}
        Some(other) => errors.push(field_error(
            "preemptionPolicy",
            ErrorKind::NotSupported,
            format!("Unsupported value: {other:?}: supported values: \"Never\", \"PreemptLowerPriority\""),
        )),
    }
}

/// Validates a new class (`old` is `None`) or an update.
pub fn validate(class: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = class.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let value = class.get("value").and_then(Value::as_i64).unwrap_or(0);
    let global_default = class.get("globalDefault").and_then(Value::as_bool).unwrap_or(false);
    if name.starts_with("system-") {
        let known = SYSTEM_CLASSES.iter().find(|(n, _, _)| *n == name);
        let why = match known {
            None => Some(format!("{name} is not a known system priority class")),
            Some((_, expected, _)) if *expected != value => {
                Some(format!("value of {name} PriorityClass must be {expected}"))
            }
            Some(_) if global_default => Some(format!("globalDefault of {name} PriorityClass must be false")),
            Some(_) => None,
        };
        if let Some(why) = why {
            errors.push(field_error(
                "metadata.name",
                ErrorKind::Forbidden,
                format!("Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: {why}"),
            ));
        }
    } else if value > HIGHEST_USER_DEFINABLE {
        errors.push(field_error(
            "value",
            ErrorKind::Forbidden,
            format!("Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE}"),
        ));
    }
    preemption_policy(class, &mut errors);
    if let Some(old) = old {
        if old.get("value") != class.get("value") {
            errors.push(field_error("value", ErrorKind::Forbidden, "Forbidden: may not be changed in an update."));
        }
        if old.get("preemptionPolicy") != class.get("preemptionPolicy") {
            let shown = class.get("preemptionPolicy").cloned().unwrap_or(Value::Null);
            errors.push(field_error(
                "preemptionPolicy",
                ErrorKind::Invalid,
                format!("Invalid value: {shown}: field is immutable"),
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64) -> Value {
        let mut class = json!({"metadata": {"name": name}, "value": value});
        default_class(&mut class);
        class
    }

    #[test]
    fn user_classes_stay_below_the_system_range_and_system_names_are_reserved() {
        assert!(validate(&class("high", 1_000_000_000), None).is_empty());
        assert_eq!(
            validate(&class("higher", 1_000_000_001), None)[0].to_string(),
            "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
        );
        assert!(validate(&class("system-bogus", 5), None)[0].message.contains("is not a known system priority class"));
        assert!(validate(&class("system-node-critical", 5), None)[0].message.contains("must be 2000001000"));
        for (name, value, description) in SYSTEM_CLASSES {
            assert!(validate(&system_class(name, value, description), None).is_empty());
        }
    }

    #[test]
    fn value_and_preemption_policy_are_immutable() {
        let old = class("batch", 100);
        assert_eq!(validate(&class("batch", 200), Some(&old))[0].field, "value");
        let mut never = old.clone();
        never["preemptionPolicy"] = json!("Never");
        assert_eq!(validate(&never, Some(&old))[0].field, "preemptionPolicy");
        let mut described = old.clone();
        described["description"] = json!("for batch jobs");
        assert!(validate(&described, Some(&old)).is_empty());
        let mut bogus = class("b", 1);
        bogus["preemptionPolicy"] = json!("Sometimes");
        assert_eq!(validate(&bogus, None)[0].kind, ErrorKind::NotSupported);
    }
}
