//! Compute Engine errors (HTTP answers and failed operations) as typed [`crate::Error`]s.

use crate::error::Error;
use google_cloud_compute_v1::model::Operation;
use google_cloud_gax::error::rpc::StatusDetails;
use std::error::Error as _;
use std::time::Duration;

/// The error of a request that Compute answered with an error, or that did not reach it.
///
/// | Answer | Error |
/// |---|---|
/// | 429, or 403 with reason `rateLimitExceeded` / `RATE_LIMIT_EXCEEDED` / `userRateLimitExceeded` or a rate-limit message (`Quota exceeded for quota group …`) | `Throttled` (with `Retry-After`) |
/// | 403 with a quota message (`Quota 'CPUS' exceeded`) or reason `quotaExceeded` / `QUOTA_EXCEEDED` | `QuotaExceeded` |
/// | other 403, 401, credentials refused | `PermissionDenied` |
/// | 404 | `NotFound` |
/// | 400, 409 | `Invalid` |
/// | 412, 5xx, timeouts, broken connections, credentials temporarily unavailable | `Transient` |
/// | anything else | `Permanent` |
pub fn from_gax(what: &str, error: google_cloud_gax::error::Error) -> Error {
    let message = format!("{what}: {}", describe(&error));
    if let Some(code) = error.http_status_code() {
        let reasons: Vec<String> = error
            .status()
            .map(|s| {
                s.details
                    .iter()
                    .filter_map(|d| match d {
                        StatusDetails::ErrorInfo(info) => Some(info.reason.clone()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let retry_after = error.http_headers().and_then(|h| h.get(http::header::RETRY_AFTER)).and_then(|v| {
            let text = v.to_str().ok()?;
            text.trim().parse::<u64>().ok().map(Duration::from_secs)
        });
        return from_status(code, &reasons, message, retry_after);
    }
    if error.is_authentication() {
        let transient = error
            .source()
            .and_then(|s| s.downcast_ref::<google_cloud_gax::error::CredentialsError>())
            .is_some_and(|c| c.is_transient());
        return if transient {
            Error::Transient { message, source: Some(Box::new(error)) }
        } else {
            Error::PermissionDenied { message }
        };
    }
    if error.is_timeout() || error.is_io() || error.is_connect() || error.is_transport() || error.is_exhausted() {
        return Error::Transient { message, source: Some(Box::new(error)) };
    }
    Error::Permanent { message, source: Some(Box::new(error)) }
}

/// The message of a gax error, with the service's own message when it sent one.
fn describe(error: &google_cloud_gax::error::Error) -> String {
    match error.status() {
        Some(status) if !status.message.is_empty() => status.message.clone(),
        _ => error.to_string(),
    }
}

/// An HTTP error status with the reasons of its `ErrorInfo` details (see [`from_gax`]).
fn from_status(code: u16, reasons: &[String], message: String, retry_after: Option<Duration>) -> Error {
    let has = |wanted: &[&str]| reasons.iter().any(|r| wanted.iter().any(|w| r.eq_ignore_ascii_case(w)));
    let rate_limited =
        has(&["rateLimitExceeded", "RATE_LIMIT_EXCEEDED", "userRateLimitExceeded"]) || is_rate_limit_message(&message);
    let quota = has(&["quotaExceeded", "QUOTA_EXCEEDED"]) || is_quota_message(&message);
    match code {
        429 => Error::Throttled { message, retry_after },
        403 if rate_limited => Error::Throttled { message, retry_after },
        403 if quota => Error::QuotaExceeded { message },
        401 | 403 => Error::PermissionDenied { message },
        404 => Error::NotFound { message },
        400 | 409 => Error::Invalid { message },
        412 | 500..=599 => Error::Transient { message, source: None },
        _ => Error::Permanent { message, source: None },
    }
}

/// Compute's API rate-limit messages. Compute answers its rate limits with 403 and the legacy reason
/// `rateLimitExceeded` in `error.errors[]`, which the client does not keep (it parses `code`, `message`, `status` and
/// `details` only), so the message is what is left: `Quota exceeded for quota group 'ReadGroup' and limit 'Read
/// requests per user per 100 seconds' of service 'compute.googleapis.com' …` (hashicorp/terraform-provider-google
/// #8360, #8955; Google's retry predicates in that provider match these texts too), `Quota exceeded for quota metric
/// 'Queries' and limit 'Queries per minute' …`, `Rate Limit Exceeded`. Resource quotas (`Quota 'CPUS' exceeded`)
/// are another text.
fn is_rate_limit_message(message: &str) -> bool {
    message.contains("Quota exceeded for quota group")
        || message.contains("Quota exceeded for quota metric")
        || message.contains("Rate Limit Exceeded")
        || message.contains("User Rate Limit Exceeded")
}

/// Compute's resource-quota messages: `Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1.`
fn is_quota_message(message: &str) -> bool {
    message.contains("Quota '") && message.contains("' exceeded")
}

/// The error of an operation that is `DONE` with `error.errors[]`, or `None` for one that succeeded or runs.
///
/// Codes `QUOTA_EXCEEDED` and `ZONE_RESOURCE_POOL_EXHAUSTED*` are `QuotaExceeded` (capacity, not soon);
/// `RESOURCE_NOT_FOUND` is `NotFound`; `RESOURCE_ALREADY_EXISTS` is `Invalid`; others follow the operation's
/// `httpErrorStatusCode` as an HTTP answer would.
pub fn from_operation(what: &str, operation: &Operation) -> Option<Error> {
    let errors = &operation.error.as_ref()?.errors;
    let first = errors.first()?;
    let code = first.code.clone().unwrap_or_default();
    let message = format!(
        "{what}: operation {} failed: {code}: {}",
        operation.name.as_deref().unwrap_or("?"),
        first.message.as_deref().unwrap_or(""),
    );
    Some(match code.as_str() {
        "QUOTA_EXCEEDED" => Error::QuotaExceeded { message },
        c if c.starts_with("ZONE_RESOURCE_POOL_EXHAUSTED") => Error::QuotaExceeded { message },
        "RESOURCE_NOT_FOUND" => Error::NotFound { message },
        "RESOURCE_ALREADY_EXISTS" => Error::Invalid { message },
        _ => {
            let status = operation.http_error_status_code.and_then(|c| u16::try_from(c).ok()).unwrap_or(500);
            from_status(status, &[code], message, None)
        }
    })
}

/// The error of a MIG's failed attempt to create an instance (`lastAttempt.errors`): quota and stock-outs
/// (`QUOTA_EXCEEDED`, `ZONE_RESOURCE_POOL_EXHAUSTED*`) are `QuotaExceeded`; anything else `Transient`, since the MIG
/// keeps retrying.
pub fn from_creation_error(code: &str, message: String) -> Error {
    if code == "QUOTA_EXCEEDED" || code.starts_with("ZONE_RESOURCE_POOL_EXHAUSTED") {
        Error::QuotaExceeded { message }
    } else {
        Error::Transient { message, source: None }
    }
}

/// Whether the operation's error is `RESOURCE_ALREADY_EXISTS` (an insert that an earlier call already made).
pub fn already_exists(operation: &Operation) -> bool {
    operation
        .error
        .as_ref()
        .is_some_and(|e| e.errors.iter().any(|e| e.code.as_deref() == Some("RESOURCE_ALREADY_EXISTS")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Outcome;
    use google_cloud_compute_v1::model::operation;

    #[test]
    fn http_answers_map_to_typed_errors() {
        let cases: [(u16, &[&str], &str, Outcome); 14] = [
            (429, &[], "Rate Limit Exceeded", Outcome::Throttled),
            (
                403,
                &[],
                "x: Quota exceeded for quota group 'ReadGroup' and limit 'Read requests per 100 seconds' of service 'compute.googleapis.com' for consumer 'project_number:1'.",
                Outcome::Throttled,
            ),
            (
                403,
                &[],
                "x: Quota exceeded for quota metric 'Queries' and limit 'Queries per minute'",
                Outcome::Throttled,
            ),
            (403, &["RATE_LIMIT_EXCEEDED"], "Quota exceeded for quota metric 'Read requests'", Outcome::Throttled),
            (403, &["rateLimitExceeded"], "x", Outcome::Throttled),
            (403, &[], "Quota 'CPUS' exceeded. Limit: 24.0 in region us-central1.", Outcome::QuotaExceeded),
            (403, &["QUOTA_EXCEEDED"], "x", Outcome::QuotaExceeded),
            (403, &[], "Required 'compute.instances.get' permission", Outcome::PermissionDenied),
            (401, &[], "x", Outcome::PermissionDenied),
            (404, &[], "The resource was not found", Outcome::NotFound),
            (400, &[], "Invalid value", Outcome::Invalid),
            (409, &[], "already exists", Outcome::Invalid),
            (503, &[], "backend error", Outcome::Transient),
            (418, &[], "x", Outcome::Permanent),
        ];
        for (code, reasons, message, outcome) in cases {
            let reasons: Vec<String> = reasons.iter().map(|r| (*r).to_owned()).collect();
            let error = from_status(code, &reasons, message.to_owned(), None);
            assert_eq!(error.outcome(), outcome, "{code} {reasons:?} {message}");
        }
        let throttled = from_status(429, &[], "slow".into(), Some(Duration::from_secs(3)));
        assert!(matches!(throttled, Error::Throttled { retry_after: Some(d), .. } if d == Duration::from_secs(3)));
    }

    fn failed(code: &str, http: i32) -> Operation {
        Operation::new()
            .set_name("operation-1")
            .set_status(operation::Status::Done)
            .set_http_error_status_code(http)
            .set_error(
                operation::Error::new()
                    .set_errors([operation::error::Errors::new().set_code(code).set_message("it failed")]),
            )
    }

    #[test]
    fn failed_operations_map_to_typed_errors() {
        let outcome = |code, http| from_operation("op", &failed(code, http)).map(|e| e.outcome());
        assert_eq!(outcome("QUOTA_EXCEEDED", 403), Some(Outcome::QuotaExceeded));
        assert_eq!(outcome("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", 503), Some(Outcome::QuotaExceeded));
        assert_eq!(outcome("RESOURCE_NOT_FOUND", 404), Some(Outcome::NotFound));
        assert_eq!(outcome("RESOURCE_ALREADY_EXISTS", 409), Some(Outcome::Invalid));
        assert_eq!(outcome("INTERNAL_ERROR", 500), Some(Outcome::Transient));
        assert!(already_exists(&failed("RESOURCE_ALREADY_EXISTS", 409)));
        assert!(from_operation("op", &Operation::new().set_status(operation::Status::Done)).is_none());
    }
}
