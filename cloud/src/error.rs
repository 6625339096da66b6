//! Errors of cloud calls, typed by whether a retry may help.

use std::time::Duration;

/// A boxed cause (an SDK or transport error).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a cloud call failed. Providers map their API's errors onto these variants; callers decide on retries
/// with [`Error::retry`] alone, never by matching provider messages.
///
/// | Variant | Retry |
/// |---|---|
/// | `Throttled` | after `retry_after`, or with backoff when the API named no time |
/// | `Transient` | with backoff (the request may not have been processed, or failed on the way) |
/// | `QuotaExceeded` | not soon: only after something frees capacity (a later reconcile) |
/// | `NotFound`, `PermissionDenied`, `Invalid`, `Permanent` | never: the same request fails again |
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API refused the request because of its rate limit; nothing was done.
    #[error("throttled by the cloud API{}: {message}", retry_after_text(*.retry_after))]
    Throttled {
        /// The API's message.
        message: String,
        /// How long the API asked to wait (`Retry-After`), if it said.
        retry_after: Option<Duration>,
    },
    /// A quota or capacity limit (instances, cores, addresses) refused the request; nothing was done.
    #[error("quota exceeded: {message}")]
    QuotaExceeded {
        /// The API's message.
        message: String,
    },
    /// The instance, group, image or template does not exist.
    #[error("not found: {message}")]
    NotFound {
        /// What was not found.
        message: String,
    },
    /// The credentials may not make this call (a missing IAM permission or role assignment).
    #[error("permission denied: {message}")]
    PermissionDenied {
        /// The API's message.
        message: String,
    },
    /// The request is malformed or does not fit the resource's state (an ID of another cloud, an empty image, a
    /// group at its maximum size).
    #[error("invalid request: {message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// A failure that may pass: a server error (5xx), a timeout, a broken connection.
    #[error("transient failure: {message}")]
    Transient {
        /// What happened.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// Any other failure; retrying does not help.
    #[error("{message}")]
    Permanent {
        /// What happened.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

fn retry_after_text(retry_after: Option<Duration>) -> String {
    retry_after.map(|d| format!(" (retry after {:.1}s)", d.as_secs_f64())).unwrap_or_default()
}

/// Whether and when a failed call may be tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Not before this much time has passed (the API said so).
    After(Duration),
    /// With backoff, soon.
    Backoff,
    /// Not soon: only after the situation changed (a later reconcile).
    Later,
    /// Never: the same request fails again.
    Never,
}

/// The kind of an [`Error`] (or success) as a metric label and log field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// The call succeeded.
    Ok,
    /// [`Error::Throttled`].
    Throttled,
    /// [`Error::QuotaExceeded`].
    QuotaExceeded,
    /// [`Error::NotFound`].
    NotFound,
    /// [`Error::PermissionDenied`].
    PermissionDenied,
    /// [`Error::Invalid`].
    Invalid,
    /// [`Error::Transient`].
    Transient,
    /// [`Error::Permanent`].
    Permanent,
}

impl Outcome {
    /// Every outcome, in order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Ok,
        Outcome::Throttled,
        Outcome::QuotaExceeded,
        Outcome::NotFound,
        Outcome::PermissionDenied,
        Outcome::Invalid,
        Outcome::Transient,
        Outcome::Permanent,
    ];

    /// The outcome of a call's result.
    pub fn of<T>(result: &Result<T, Error>) -> Outcome {
        match result {
            Ok(_) => Outcome::Ok,
            Err(error) => error.outcome(),
        }
    }

    /// PascalCase, as in metric labels and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "Ok",
            Outcome::Throttled => "Throttled",
            Outcome::QuotaExceeded => "QuotaExceeded",
            Outcome::NotFound => "NotFound",
            Outcome::PermissionDenied => "PermissionDenied",
            Outcome::Invalid => "Invalid",
            Outcome::Transient => "Transient",
            Outcome::Permanent => "Permanent",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// Whether and when the same call may be tried again (see the table on [`Error`]).
    pub fn retry(&self) -> Retry {
        match self {
            Error::Throttled { retry_after: Some(after), .. } => Retry::After(*after),
            Error::Throttled { retry_after: None, .. } | Error::Transient { .. } => Retry::Backoff,
            Error::QuotaExceeded { .. } => Retry::Later,
            Error::NotFound { .. }
            | Error::PermissionDenied { .. }
            | Error::Invalid { .. }
            | Error::Permanent { .. } => Retry::Never,
        }
    }

    /// True when a retry soon may succeed ([`Retry::After`] or [`Retry::Backoff`]).
    pub fn is_retryable(&self) -> bool {
        matches!(self.retry(), Retry::After(_) | Retry::Backoff)
    }

    /// True when the request certainly changed nothing at the provider, so that even a call that is not
    /// idempotent (creating an instance) may be repeated: the API throttled it.
    pub fn was_refused(&self) -> bool {
        matches!(self, Error::Throttled { .. })
    }

    /// The kind of the error, as a metric label.
    pub fn outcome(&self) -> Outcome {
        match self {
            Error::Throttled { .. } => Outcome::Throttled,
            Error::QuotaExceeded { .. } => Outcome::QuotaExceeded,
            Error::NotFound { .. } => Outcome::NotFound,
            Error::PermissionDenied { .. } => Outcome::PermissionDenied,
            Error::Invalid { .. } => Outcome::Invalid,
            Error::Transient { .. } => Outcome::Transient,
            Error::Permanent { .. } => Outcome::Permanent,
        }
    }

    /// [`Error::NotFound`] with `message`.
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::NotFound { message: message.into() }
    }

    /// [`Error::Invalid`] with `message`.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::Invalid { message: message.into() }
    }

    /// [`Error::Transient`] with `message` and no cause.
    pub fn transient(message: impl Into<String>) -> Error {
        Error::Transient { message: message.into(), source: None }
    }

    /// [`Error::Permanent`] with `message` and no cause.
    pub fn permanent(message: impl Into<String>) -> Error {
        Error::Permanent { message: message.into(), source: None }
    }
}

/// `Result` with a cloud [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_error_says_whether_a_retry_may_help() {
        let throttled = |after| Error::Throttled { message: "slow down".into(), retry_after: after };
        let cases = [
            (throttled(Some(Duration::from_secs(3))), Retry::After(Duration::from_secs(3)), true),
            (throttled(None), Retry::Backoff, true),
            (Error::transient("503"), Retry::Backoff, true),
            (Error::QuotaExceeded { message: "cores".into() }, Retry::Later, false),
            (Error::not_found("i-1"), Retry::Never, false),
            (Error::PermissionDenied { message: "autoscaling:SetDesiredCapacity".into() }, Retry::Never, false),
            (Error::invalid("empty image"), Retry::Never, false),
            (Error::permanent("boom"), Retry::Never, false),
        ];
        for (error, retry, retryable) in cases {
            assert_eq!(error.retry(), retry, "{error}");
            assert_eq!(error.is_retryable(), retryable, "{error}");
            assert_eq!(error.was_refused(), matches!(error, Error::Throttled { .. }), "{error}");
        }
    }

    #[test]
    fn messages_name_the_kind_and_the_wait() {
        let error =
            Error::Throttled { message: "Rate exceeded".into(), retry_after: Some(Duration::from_millis(2500)) };
        assert_eq!(error.to_string(), "throttled by the cloud API (retry after 2.5s): Rate exceeded");
        assert_eq!(error.outcome().to_string(), "Throttled");
        assert_eq!(Outcome::of::<()>(&Ok(())), Outcome::Ok);
        let source: BoxError = "connection reset".into();
        let error = Error::Transient { message: "DescribeInstances".into(), source: Some(source) };
        assert_eq!(std::error::Error::source(&error).map(ToString::to_string).as_deref(), Some("connection reset"));
    }
}
