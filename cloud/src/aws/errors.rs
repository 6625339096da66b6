//! AWS API errors (Auto Scaling's awsQuery and EC2's ec2Query error codes) mapped onto [`crate::Error`]: those of
//! the Auto Scaling SDK client ([`map_sdk_error`]) and those of the EC2 Query API client ([`map_query_error`]), by
//! the same rules ([`classify`]).

use crate::error::Error;
use aws_sdk_autoscaling::config::http::HttpResponse;
use aws_sdk_autoscaling::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use std::time::Duration;

/// Codes of a refused request because of the API's rate limit (nothing was done).
const THROTTLING: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "SlowDown",
];

/// Codes of failed authentication or authorization.
const PERMISSION: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnauthorizedAccess",
    "AuthFailure",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "OptInRequired",
];

/// Codes of a capacity or quota limit (Auto Scaling `LimitExceeded`, EC2 `InstanceLimitExceeded`,
/// `VcpuLimitExceeded`, `InsufficientInstanceCapacity`, ...). `RequestLimitExceeded` is throttling, matched first.
fn is_quota(code: &str) -> bool {
    code.ends_with("LimitExceeded") || code == "InsufficientInstanceCapacity" || code.ends_with("QuotaExceeded")
}

/// Codes of a failure that may pass: the service's own errors and a group busy with another activity.
const TRANSIENT: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "ScalingActivityInProgress",
    "ResourceContention",
];

/// Maps a failed SDK call (`call` names the API action, for the message) onto a typed error.
pub(crate) fn map_sdk_error<E>(call: &'static str, error: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &error {
        SdkError::ServiceError(context) => {
            let status = context.raw().status().as_u16();
            let retry_after = context.raw().headers().get("retry-after").and_then(parse_retry_after);
            let code = context.err().code().unwrap_or_default().to_owned();
            let message = format!("{call}: {code}: {}", context.err().message().unwrap_or("no message"));
            classify(&code, status, message, retry_after, Some(Box::new(error)))
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => Error::Transient {
            message: format!("{call}: {}", DisplayErrorContext(&error)),
            source: Some(Box::new(error)),
        },
        _ => Error::Permanent {
            message: format!("{call}: {}", DisplayErrorContext(&error)),
            source: Some(Box::new(error)),
        },
    }
}

/// Maps an error answer of the EC2 Query API (`call` names the action) onto a typed error: its HTTP `status`, its
/// `Retry-After` header, and the `Code` and `Message` of its `Response/Errors/Error` when the body had them (as
/// [`map_sdk_error`] maps the SDK's service errors: an answer without a code is classified by its status).
pub(crate) fn map_query_error(
    call: &'static str,
    status: u16,
    retry_after: Option<&str>,
    code: Option<&str>,
    message: Option<&str>,
) -> Error {
    let code = code.unwrap_or_default();
    let text = format!("{call}: {code}: {}", message.unwrap_or("no message"));
    classify(code, status, text, retry_after.and_then(parse_retry_after), None)
}

/// The error of an answer with error `code` and HTTP `status`. Codes decide first; without a known code, 403 is a
/// permission error, 404 not found, 429 throttling and 5xx transient.
pub(crate) fn classify(
    code: &str,
    status: u16,
    message: String,
    retry_after: Option<Duration>,
    source: Option<crate::BoxError>,
) -> Error {
    if THROTTLING.contains(&code) || (code.is_empty() && status == 429) {
        Error::Throttled { message, retry_after }
    } else if PERMISSION.contains(&code) || (code.is_empty() && status == 403) {
        Error::PermissionDenied { message }
    } else if is_quota(code) {
        Error::QuotaExceeded { message }
    } else if code.contains("NotFound")
        || (code == "ValidationError" && message.to_ascii_lowercase().contains("not found"))
        || (code.is_empty() && status == 404)
    {
        Error::NotFound { message }
    } else if TRANSIENT.contains(&code) || status >= 500 {
        // moto answers 500 for an unknown group in SetDesiredCapacity; the provider looks groups up first.
        Error::Transient { message, source }
    } else if code == "ValidationError" || code.starts_with("Invalid") || code.starts_with("MissingParameter") {
        Error::Invalid { message }
    } else {
        Error::Permanent { message, source }
    }
}

/// A `Retry-After` of delay-seconds (AWS does not send HTTP dates there).
fn parse_retry_after(value: &str) -> Option<Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && (0.0..=86_400.0).contains(&seconds)).then(|| Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Outcome;

    fn outcome(code: &str, status: u16) -> Outcome {
        classify(code, status, format!("{code} test"), None, None).outcome()
    }

    #[test]
    fn codes_map_to_the_kinds_callers_retry_by() {
        let cases = [
            ("Throttling", 400, Outcome::Throttled),
            ("RequestLimitExceeded", 503, Outcome::Throttled),
            ("", 429, Outcome::Throttled),
            ("LimitExceeded", 400, Outcome::QuotaExceeded),
            ("InstanceLimitExceeded", 400, Outcome::QuotaExceeded),
            ("VcpuLimitExceeded", 400, Outcome::QuotaExceeded),
            ("InsufficientInstanceCapacity", 500, Outcome::QuotaExceeded),
            ("AccessDenied", 403, Outcome::PermissionDenied),
            ("UnauthorizedOperation", 403, Outcome::PermissionDenied),
            ("", 403, Outcome::PermissionDenied),
            ("InvalidInstanceID.NotFound", 400, Outcome::NotFound),
            ("InvalidLaunchTemplateId.NotFound", 400, Outcome::NotFound),
            ("InternalError", 500, Outcome::Transient),
            ("", 503, Outcome::Transient),
            ("ScalingActivityInProgress", 400, Outcome::Transient),
            ("ValidationError", 400, Outcome::Invalid),
            ("InvalidParameterValue", 400, Outcome::Invalid),
            ("SomethingElse", 400, Outcome::Permanent),
        ];
        for (code, status, expected) in cases {
            assert_eq!(outcome(code, status), expected, "{code} {status}");
        }
        let missing = classify(
            "ValidationError",
            400,
            "SetDesiredCapacity: AutoScalingGroup name not found - no such group".into(),
            None,
            None,
        );
        assert_eq!(missing.outcome(), Outcome::NotFound);
    }

    #[test]
    fn ec2_query_errors_are_classified_as_the_sdks_were_and_name_the_call() {
        let error = map_query_error("DescribeInstances", 503, Some("2"), Some("RequestLimitExceeded"), Some("slow"));
        assert!(matches!(&error, Error::Throttled { retry_after: Some(d), .. } if *d == Duration::from_secs(2)));
        assert_eq!(
            error.to_string(),
            "throttled by the cloud API (retry after 2.0s): DescribeInstances: RequestLimitExceeded: slow"
        );
        let error = map_query_error(
            "ModifyLaunchTemplate",
            400,
            None,
            Some("InvalidLaunchTemplateName.NotFoundException"),
            None,
        );
        assert_eq!(
            error.to_string(),
            "not found: ModifyLaunchTemplate: InvalidLaunchTemplateName.NotFoundException: no message"
        );
        assert_eq!(map_query_error("DescribeInstances", 502, None, None, None).outcome(), Outcome::Transient);
        assert_eq!(map_query_error("DescribeInstances", 403, None, None, None).outcome(), Outcome::PermissionDenied);
        assert_eq!(map_query_error("DescribeInstances", 400, Some("soon"), None, None).outcome(), Outcome::Permanent);
    }

    #[test]
    fn retry_after_is_read_in_seconds_and_nonsense_is_ignored() {
        let parse = parse_retry_after;
        assert_eq!(parse("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(parse("-1"), None);
        assert_eq!(parse("NaN"), None);
        assert_eq!(parse("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }
}
