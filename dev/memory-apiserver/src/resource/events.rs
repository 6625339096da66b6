//! Events, one resource served through two APIs: core/v1 Events and events.k8s.io/v1 Events are stored once, as
//! core/v1 (upstream's storage version), and converted at the API boundary as kube-apiserver converts them
//! (`pkg/apis/events/v1/conversion.go`); validation is the one each API version gets
//! (`pkg/apis/core/validation/events.go`).
//!
//! # The field mapping (events.k8s.io/v1 ↔ core/v1)
//! `regarding` ↔ `involvedObject`, `note` ↔ `message`, `reportingController` ↔ `reportingComponent`,
//! `deprecatedSource` ↔ `source`, `deprecatedFirstTimestamp` ↔ `firstTimestamp`, `deprecatedLastTimestamp` ↔
//! `lastTimestamp`, `deprecatedCount` ↔ `count`; `metadata`, `eventTime`, `series`, `action`, `reason`, `related`,
//! `reportingInstance` and `type` are the same in both.
//!
//! # Field selectors
//! Both APIs select on the same stored fields: core/v1 names them `involvedObject.*`, `reason`,
//! `reportingComponent`, `source`, `type`; events.k8s.io/v1 `regarding.*`, `reason`, `reportingController`,
//! `source`, `type`. `source` is `source.component`, or `reportingComponent` when that is empty.

use super::{Builtin, ResourceType, SelectableField};
use crate::schema::{ErrorKind, FieldError, field_error};
use crate::selector::label::{is_dns_subdomain, validate_key};
use serde_json::{Map, Value, json};

/// events.k8s.io/v1 member → core/v1 member, for the members that differ.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// The fields of `involvedObject` (`regarding`) selectors may use.
const REFERENCE_FIELDS: [&str; 7] = ["kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"];

/// Upstream's limits on events.k8s.io Events.
const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

/// True for the kinds whose objects are stored in another version than they are served: events.k8s.io/v1 Events.
pub fn is_converted(rt: &ResourceType) -> bool {
    rt.is(Builtin::Event)
}

fn rename(object: Value, api_version: &str, from_events: bool) -> Value {
    let Value::Object(members) = object else { return object };
    let mut out = Map::with_capacity(members.len());
    for (key, value) in members {
        let key = match RENAMED.iter().find(|(events, core)| if from_events { events == &key } else { core == &key }) {
            Some((events, core)) => {
                if from_events {
                    (*core).to_owned()
                } else {
                    (*events).to_owned()
                }
            }
            None => key,
        };
        out.insert(key, value);
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// The stored (core/v1) form of an object of `rt`.
pub fn to_storage(rt: &ResourceType, object: Value) -> Value {
    if is_converted(rt) { rename(object, "v1", true) } else { object }
}

/// The form `rt` serves of a stored object.
pub fn to_served(rt: &ResourceType, stored: Value) -> Value {
    if is_converted(rt) { rename(stored, &rt.api_version(), false) } else { stored }
}

/// The selectable fields of Events in `api`'s names (core/v1 or events.k8s.io/v1), over the stored form, in the
/// same order for both so that one index serves both APIs.
pub fn selectable_fields(events_api: bool) -> Vec<SelectableField> {
    let mut fields: Vec<SelectableField> = REFERENCE_FIELDS
        .iter()
        .map(|f| {
            let name = if events_api { format!("regarding.{f}") } else { format!("involvedObject.{f}") };
            SelectableField::at(&name, &format!("involvedObject.{f}"), "")
        })
        .collect();
    fields.push(SelectableField::new("reason", ""));
    let reporting = if events_api { "reportingController" } else { "reportingComponent" };
    fields.push(SelectableField::at(reporting, "reportingComponent", ""));
    fields.push(SelectableField::at("source", "source.component", "").or_else("reportingComponent"));
    fields.push(SelectableField::new("type", ""));
    fields
}

/// Validates an Event (in the form `rt` serves) as upstream does for the API version of the request: the
/// legacy rules always, the strict ones for events.k8s.io/v1 (`ValidateEventCreate`, `ValidateEventUpdate`).
pub fn validate(rt: &ResourceType, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let event = to_storage(rt, object.clone());
    let old = old.map(|o| to_storage(rt, o.clone()));
    let mut errors = legacy(&event);
    if !is_converted(rt) {
        return errors;
    }
    let text = |event: &Value, key: &str| event.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let present = |event: &Value, key: &str| event.get(key).is_some_and(|v| !v.is_null());
    match &old {
        None => {
            errors.extend(series(&event));
            if !present(&event, "eventTime") {
                errors.push(field_error("eventTime", ErrorKind::Required, "Required value"));
            }
            let ty = text(&event, "type");
            if ty != "Normal" && ty != "Warning" {
                errors.push(field_error(
                    "type",
                    ErrorKind::Invalid,
                    format!("Invalid value: \"\": has invalid value: {ty}"),
                ));
            }
            for key in ["firstTimestamp", "lastTimestamp"] {
                if present(&event, key) {
                    errors.push(field_error(key, ErrorKind::Invalid, "Invalid value: \"\": needs to be unset"));
                }
            }
            if event.get("count").and_then(Value::as_i64).is_some_and(|c| c != 0) {
                errors.push(field_error("count", ErrorKind::Invalid, "Invalid value: \"\": needs to be unset"));
            }
            let source = event.get("source");
            let set =
                |key: &str| source.and_then(|s| s.get(key)).and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            if set("component") || set("host") {
                errors.push(field_error("source", ErrorKind::Invalid, "Invalid value: \"\": needs to be unset"));
            }
        }
        Some(old) => {
            if event.get("series") != old.get("series") {
                errors.extend(series(&event));
            }
            for key in [
                "involvedObject",
                "reason",
                "message",
                "source",
                "firstTimestamp",
                "lastTimestamp",
                "count",
                "type",
                "eventTime",
                "action",
                "related",
                "reportingComponent",
                "reportingInstance",
            ] {
                if event.get(key) != old.get(key) {
                    let path = if key == "reportingComponent" { "reportingController" } else { key };
                    let value = event.get(key).cloned().unwrap_or(Value::Null);
                    errors.push(field_error(
                        path,
                        ErrorKind::Invalid,
                        format!("Invalid value: {value}: field is immutable"),
                    ));
                }
            }
        }
    }
    errors
}

fn series(event: &Value) -> Vec<FieldError> {
    let Some(series) = event.get("series").filter(|s| !s.is_null()) else { return Vec::new() };
    let mut errors = Vec::new();
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        errors.push(field_error("series.count", ErrorKind::Invalid, "Invalid value: \"\": should be at least 2"));
    }
    if series.get("lastObservedTime").is_none_or(Value::is_null) {
        errors.push(field_error("series.lastObservedTime", ErrorKind::Required, "Required value"));
    }
    errors
}

/// `legacyValidateEvent`: what every Event must satisfy, through either API.
fn legacy(event: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let text = |pointer: &str| event.pointer(pointer).and_then(Value::as_str).unwrap_or_default();
    let namespace = text("/metadata/namespace");
    let involved_namespace = text("/involvedObject/namespace");
    let mismatch = || {
        field_error(
            "involvedObject.namespace",
            ErrorKind::Invalid,
            format!("Invalid value: {involved_namespace:?}: does not match event.namespace"),
        )
    };
    if event.get("eventTime").is_none_or(Value::is_null) {
        // An old-style Event: its namespace is its object's (or default, for cluster-scoped objects).
        let matches = if involved_namespace.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == involved_namespace
        };
        if !matches {
            errors.push(mismatch());
        }
    } else {
        if involved_namespace.is_empty() && namespace != "default" && namespace != "kube-system" {
            errors.push(mismatch());
        }
        let reporting = text("/reportingComponent");
        if reporting.is_empty() {
            errors.push(field_error("reportingController", ErrorKind::Required, "Required value"));
        }
        if !reporting.is_empty()
            && let Err(why) = validate_key(reporting)
        {
            let why = why.split_once("\": ").map_or(why.as_str(), |(_, why)| why);
            errors.push(field_error(
                "reportingController",
                ErrorKind::Invalid,
                format!("Invalid value: {reporting:?}: {why}"),
            ));
        }
        let limited = [
            ("reportingInstance", "reportingInstance", REPORTING_INSTANCE_LIMIT, true),
            ("action", "action", ACTION_LIMIT, true),
            ("reason", "reason", REASON_LIMIT, true),
            ("message", "message", NOTE_LIMIT, false),
        ];
        for (key, path, limit, required) in limited {
            let value = text(&format!("/{key}"));
            if required && value.is_empty() {
                errors.push(field_error(path, ErrorKind::Required, "Required value"));
            }
            if value.len() > limit {
                errors.push(field_error(
                    path,
                    ErrorKind::Invalid,
                    format!("Invalid value: \"\": can have at most {limit} characters"),
                ));
            }
        }
    }
    if !namespace.is_empty() && !is_dns_subdomain(namespace) {
        errors.push(field_error(
            "namespace",
            ErrorKind::Invalid,
            format!("Invalid value: {namespace:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"),
        ));
    }
    errors
}
