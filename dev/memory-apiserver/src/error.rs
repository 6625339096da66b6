//! Kubernetes `Status` errors with the exact reasons, codes, messages and details the real API server sends.
//!
//! # Guarantees
//! - Every error renders as `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",...}` with a
//!   non-empty `reason` and the HTTP `code`, so kube-rs's `is_not_found`/`is_conflict`/`is_invalid` work.
//! - `details.kind` is the plural resource, except for 422 Invalid where it is the Kind (as upstream does).
//! - A `Retry-After` header is due exactly when `details.retryAfterSeconds > 0`.

use super::resource::ResourceType;
use crate::schema::FieldError;
use serde_json::{Map, Value, json};

/// One `details.causes` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `reason` of the cause (`FieldValueRequired`, `DisruptionBudget`, `FieldManagerConflict` ...).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// Field path, when the cause is about a field.
    pub field: Option<String>,
}

/// An API error: the HTTP code plus the `Status` body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code, also `Status.code`.
    pub code: u16,
    /// `Status.reason` (`NotFound`, `Conflict`, `Invalid` ...).
    pub reason: String,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`.
    pub details: Box<Details>,
}

/// `Status.details`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    /// `details.name`.
    pub name: Option<String>,
    /// `details.group`.
    pub group: Option<String>,
    /// `details.kind`: the plural resource, or the Kind for 422.
    pub kind: Option<String>,
    /// `details.uid`.
    pub uid: Option<String>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `details.retryAfterSeconds`; also sent as a `Retry-After` header when positive.
    pub retry_after_seconds: Option<u32>,
}

/// `pods` for the core group, `widgets.example.com` otherwise: how upstream names a resource in messages.
pub fn qualified_resource(rt: &ResourceType) -> String {
    if rt.group.is_empty() { rt.plural.clone() } else { format!("{}.{}", rt.plural, rt.group) }
}

/// `Pod` for the core group, `Widget.example.com` otherwise: how upstream names a kind in 422 messages.
pub fn qualified_kind(rt: &ResourceType) -> String {
    if rt.group.is_empty() { rt.kind.clone() } else { format!("{}.{}", rt.kind, rt.group) }
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError { code, reason: reason.to_owned(), message: message.into(), details: Box::default() }
    }

    fn for_resource(mut self, rt: &ResourceType, name: &str) -> Self {
        self.details.name = Some(name.to_owned());
        self.details.group = (!rt.group.is_empty()).then(|| rt.group.clone());
        self.details.kind = Some(rt.plural.clone());
        self
    }

    /// Adds a cause.
    pub fn with_cause(mut self, reason: &str, message: impl Into<String>, field: Option<&str>) -> Self {
        self.details.causes.push(Cause {
            reason: reason.to_owned(),
            message: message.into(),
            field: field.map(str::to_owned),
        });
        self
    }

    /// Sets `details.retryAfterSeconds` (and with it the `Retry-After` header).
    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        self.details.retry_after_seconds = Some(seconds);
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 403 Forbidden for a resource.
    pub fn forbidden(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(403, "Forbidden", format!("{} \"{name}\" is forbidden: {why}", qualified_resource(rt)))
            .for_resource(rt, name)
    }

    /// 404 NotFound: `pods "foo" not found`.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", qualified_resource(rt))).for_resource(rt, name)
    }

    /// 404 for a URL that names no resource.
    pub fn path_not_found() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource")
    }

    /// 404 for a namespace that does not exist: `namespaces "x" not found`.
    pub fn namespace_not_found(namespace: &str) -> Self {
        let mut error = Self::new(404, "NotFound", format!("namespaces \"{namespace}\" not found"));
        error.details.name = Some(namespace.to_owned());
        error.details.kind = Some("namespaces".into());
        error
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(message: &str) -> Self {
        Self::new(406, "NotAcceptable", message.to_owned())
    }

    /// 409 AlreadyExists: `pods "foo" already exists`.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", qualified_resource(rt)))
            .for_resource(rt, name)
    }

    /// 409 Conflict with the optimistic-concurrency message.
    pub fn conflict_modified(rt: &ResourceType, name: &str) -> Self {
        Self::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict: `Operation cannot be fulfilled on pods "foo": <why>`.
    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", qualified_resource(rt)),
        )
        .for_resource(rt, name)
    }

    /// 409 Conflict of a failed DELETE precondition; upstream names the Kind here, not the resource.
    pub fn precondition_failed(rt: &ResourceType, name: &str, why: &str) -> Self {
        let mut error = Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", qualified_kind(rt)),
        );
        error.details.name = Some(name.to_owned());
        error.details.group = (!rt.group.is_empty()).then(|| rt.group.clone());
        error.details.kind = Some(rt.kind.clone());
        error
    }

    /// 409 Conflict with a message of its own (server-side apply conflicts).
    pub fn conflict_message(rt: &ResourceType, name: &str, message: String) -> Self {
        Self::new(409, "Conflict", message).for_resource(rt, name)
    }

    /// 410 Expired (the reason is `Expired`, not `Gone`).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// 422 Invalid: `Pod "foo" is invalid: spec.containers: Required value`, details.kind = Kind.
    pub fn invalid(rt: &ResourceType, name: &str, errors: &[FieldError]) -> Self {
        Self::invalid_named(&qualified_kind(rt), &rt.group, &rt.kind, name, errors)
    }

    /// 422 Invalid for something that is not a stored resource (`PatchOptions.meta.k8s.io`).
    pub fn invalid_named(qualified: &str, group: &str, kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let mut error = Self::new(422, "Invalid", format!("{qualified} \"{name}\" is invalid: {}", aggregate(errors)));
        error.details.name = Some(name.to_owned());
        error.details.group = (!group.is_empty()).then(|| group.to_owned());
        error.details.kind = Some(kind.to_owned());
        error.details.causes = errors
            .iter()
            .map(|e| Cause {
                reason: e.kind.reason().to_owned(),
                message: e.message.clone(),
                field: Some(e.field.clone()),
            })
            .collect();
        error
    }

    /// 422 with a bare message and no details (failed JSON-patch operations).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 429 TooManyRequests.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 503 ServiceUnavailable.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// 504 Timeout.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// An error with any code, as fault injection needs; the reason is the one upstream uses for the code.
    pub fn with_code(code: u16, message: impl Into<String>) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        Self::new(code, reason, message)
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut details = Map::new();
        // Go omits empty strings (`omitempty`).
        for (key, value) in [
            ("name", &self.details.name),
            ("group", &self.details.group),
            ("kind", &self.details.kind),
            ("uid", &self.details.uid),
        ] {
            if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
                details.insert(key.into(), json!(value));
            }
        }
        if !self.details.causes.is_empty() {
            let causes: Vec<Value> = self
                .details
                .causes
                .iter()
                .map(|c| {
                    let mut cause = Map::new();
                    // Go omits an empty reason (admission denials carry only a message).
                    if !c.reason.is_empty() {
                        cause.insert("reason".into(), json!(c.reason));
                    }
                    cause.insert("message".into(), json!(c.message));
                    if let Some(field) = &c.field {
                        cause.insert("field".into(), json!(field));
                    }
                    Value::Object(cause)
                })
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(seconds) = self.details.retry_after_seconds.filter(|s| *s > 0) {
            details.insert("retryAfterSeconds".into(), json!(seconds));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        });
        // Go omits an empty reason; only the eviction's "more than one PodDisruptionBudget" has none.
        if !self.reason.is_empty() {
            status["reason"] = json!(self.reason);
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }

    /// The value of a `Retry-After` header, when one is due.
    pub fn retry_after_header(&self) -> Option<u32> {
        self.details.retry_after_seconds.filter(|s| *s > 0)
    }
}

/// `utilerrors.NewAggregate(...).Error()`: one message alone, several in brackets.
fn aggregate(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!("[{}]", many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// A `Status` of success, as DELETE of a non-pod object and eviction answer.
pub fn success_status(details: Option<Value>, code: Option<u16>) -> Value {
    let mut status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
    if let Some(details) = details {
        status["details"] = details;
    }
    if let Some(code) = code {
        status["code"] = json!(code);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::builtin_types;
    use crate::schema::{ErrorKind, field_error};

    fn pods() -> ResourceType {
        builtin_types().into_iter().find(|t| t.plural == "pods").unwrap()
    }

    #[test]
    fn conflict_has_the_exact_upstream_body() {
        let status = ApiError::conflict_modified(&pods(), "foo").to_status();
        assert_eq!(
            status,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                "message":"Operation cannot be fulfilled on pods \"foo\": the object has been modified; please apply your changes to the latest version and try again",
                "reason":"Conflict","details":{"name":"foo","kind":"pods"},"code":409})
        );
    }

    #[test]
    fn invalid_names_the_kind_and_lists_causes() {
        let errors = [field_error("spec.containers", ErrorKind::Required, "Required value")];
        let status = ApiError::invalid(&pods(), "foo", &errors).to_status();
        assert_eq!(status["message"], "Pod \"foo\" is invalid: spec.containers: Required value");
        assert_eq!(status["details"]["kind"], "Pod");
        assert_eq!(
            status["details"]["causes"],
            json!([{"reason":"FieldValueRequired","message":"Required value","field":"spec.containers"}])
        );
        let two = [errors[0].clone(), field_error("spec.x", ErrorKind::Invalid, "Invalid value: 1")];
        assert_eq!(
            ApiError::invalid(&pods(), "foo", &two).message,
            "Pod \"foo\" is invalid: [spec.containers: Required value, spec.x: Invalid value: 1]"
        );
    }

    #[test]
    fn retry_after_is_only_due_when_positive() {
        let error = ApiError::too_many_requests("x").with_retry_after(0);
        assert_eq!(error.retry_after_header(), None);
        assert!(error.to_status().get("details").is_none());
        let error = ApiError::too_many_requests("x").with_retry_after(10);
        assert_eq!(error.retry_after_header(), Some(10));
        assert_eq!(error.to_status()["details"]["retryAfterSeconds"], 10);
    }
}
