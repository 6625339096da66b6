//! The JSON of the simulated cloud's HTTP API, shared by its server (the dev cluster) and its client.
//!
//! | Request (under `/_dev/cloud/api`) | Answer |
//! |---|---|
//! | `GET /tags/{key}/{value}/groups` | `{"groups": [Group]}` |
//! | `GET /groups/{group}` | `Group` |
//! | `PUT /groups/{group}/image` `{"image"}` | `{"applied": bool}` |
//! | `POST /groups/{group}/instances` | `201 {"instance": Instance}` or `202 {"token"}` |
//! | `GET /groups/{group}/creations/{token}` | `{"instance": Instance or null}` |
//! | `DELETE /groups/{group}/instances/{name}` | `{"alreadyGone": bool}` |
//! | `POST /groups/{group}/creations` `{"count"}` (1 to [`MAX_BATCH`]; one call) | `201 {"results": [CreateResult]}` |
//! | `POST /groups/{group}/deletions` `{"instances": [name]}` (1 to [`MAX_BATCH`]; one call) | `{"results": [DeleteResult]}` |
//! | `GET /instances/{name}` (its state), `GET /instances/{name}/image`, `GET /instances/{name}/group` | `Instance` |
//!
//! Errors are [`ErrorBody`] with the status of its [`ErrorCode`].

use crate::error::Error;
use crate::provider::{GroupRole, InstanceState};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The path prefix of the API on the dev cluster's address.
pub const API_PREFIX: &str = "/_dev/cloud/api";

/// The most instances one batch call (`POST /groups/{group}/creations`, `/deletions`) carries.
pub const MAX_BATCH: usize = 100;

/// `POST /groups/{group}/creations`: `count` instances in one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBatch {
    /// How many instances (1 to [`MAX_BATCH`]).
    pub count: usize,
}

/// One instance's result of a batch creation: as [`CreateAnswer`], or its own error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CreateResult {
    /// The instance, when named at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<Instance>,
    /// The creation's token, for a group whose creates answer with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Why this instance was not created (the others may have been).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// The answer of `POST /groups/{group}/creations`: one result per instance asked for, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateBatchAnswer {
    pub results: Vec<CreateResult>,
}

/// `POST /groups/{group}/deletions`: the instances, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteBatch {
    /// 1 to [`MAX_BATCH`] instance names.
    pub instances: Vec<String>,
}

/// One instance's result of a batch deletion: as [`DeleteAnswer`], or its own error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteResult {
    /// The instance was gone already (absent with an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub already_gone: Option<bool>,
    /// Why this instance's deletion failed (the others' may have started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// The answer of `POST /groups/{group}/deletions`: one result per instance, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeleteBatchAnswer {
    pub results: Vec<DeleteResult>,
}

/// A scaling group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    /// Its name, which is also its ID.
    pub name: String,
    /// The role of its nodes.
    pub role: GroupRole,
    /// The image new instances get.
    pub image: String,
    /// Minimum size.
    pub min: u32,
    /// Maximum size.
    pub max: u32,
    /// Its tags (the cluster tag among them).
    pub tags: std::collections::BTreeMap<String, String>,
    /// Its instances that are not terminated, by name.
    pub instances: Vec<String>,
}

/// An instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// Its name (also its Node's).
    pub name: String,
    /// Its group.
    pub group: String,
    /// Its provider ID.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// The image it was created from.
    pub image: String,
    /// Its state.
    pub state: InstanceState,
}

/// `PUT /groups/{group}/image`.
/// The answer of `GET /groups/{group}/instances`: every instance of the group, in every state but never-created
/// names, with pending token creations counted as `unlisted` (the simulated cloud lists an instance as soon as it
/// exists, so 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceList {
    pub instances: Vec<Instance>,
    #[serde(default)]
    pub unlisted: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageBody {
    /// The image.
    pub image: String,
}

/// The answer of `PUT /groups/{group}/image`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetImageAnswer {
    /// True once new instances get the image; false while the change is in progress.
    pub applied: bool,
}

/// The answer of `POST /groups/{group}/instances` and `GET /groups/{group}/creations/{token}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CreateAnswer {
    /// The instance, once named.
    #[serde(default)]
    pub instance: Option<Instance>,
    /// The creation's token, while the instance is not named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// The answer of `DELETE /groups/{group}/instances/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteAnswer {
    /// The instance was gone already.
    pub already_gone: bool,
}

/// `{"groups": [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupList {
    /// The groups, by name.
    pub groups: Vec<Group>,
}

/// The kind of an API error; each has its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// 429: the API's rate limit.
    Throttled,
    /// 403: a quota.
    QuotaExceeded,
    /// 404.
    NotFound,
    /// 403: missing permission.
    Forbidden,
    /// 400: a bad request.
    Invalid,
    /// 500: a server error that may pass.
    Internal,
    /// 422: an error that does not pass.
    Failed,
}

impl ErrorCode {
    /// The HTTP status.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::Throttled => 429,
            ErrorCode::QuotaExceeded | ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Invalid => 400,
            ErrorCode::Internal => 500,
            ErrorCode::Failed => 422,
        }
    }
}

/// An error answer: `{"code", "message", "retryAfterSeconds"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// The kind.
    pub code: ErrorCode,
    /// What happened.
    pub message: String,
    /// For `Throttled`: how long to wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<f64>,
}

impl ErrorBody {
    /// An error of `code` with `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody { code, message: message.into(), retry_after_seconds: None }
    }

    /// The typed error the client returns for this answer.
    pub fn into_error(self) -> Error {
        let message = self.message;
        match self.code {
            ErrorCode::Throttled => Error::Throttled {
                message,
                retry_after: self.retry_after_seconds.and_then(|s| Duration::try_from_secs_f64(s).ok()),
            },
            ErrorCode::QuotaExceeded => Error::QuotaExceeded { message },
            ErrorCode::NotFound => Error::NotFound { message },
            ErrorCode::Forbidden => Error::PermissionDenied { message },
            ErrorCode::Invalid => Error::Invalid { message },
            ErrorCode::Internal => Error::Transient { message, source: None },
            ErrorCode::Failed => Error::Permanent { message, source: None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Outcome;

    #[test]
    fn every_error_code_maps_to_its_kind_of_error() {
        let cases = [
            (ErrorCode::Throttled, 429, Outcome::Throttled),
            (ErrorCode::QuotaExceeded, 403, Outcome::QuotaExceeded),
            (ErrorCode::NotFound, 404, Outcome::NotFound),
            (ErrorCode::Forbidden, 403, Outcome::PermissionDenied),
            (ErrorCode::Invalid, 400, Outcome::Invalid),
            (ErrorCode::Internal, 500, Outcome::Transient),
            (ErrorCode::Failed, 422, Outcome::Permanent),
        ];
        for (code, status, outcome) in cases {
            assert_eq!(code.status(), status);
            assert_eq!(ErrorBody::new(code, "m").into_error().outcome(), outcome);
        }
        let body: ErrorBody =
            serde_json::from_str(r#"{"code": "Throttled", "message": "slow", "retryAfterSeconds": 1.5}"#).unwrap();
        assert!(
            matches!(body.into_error(), Error::Throttled { retry_after: Some(d), .. } if d == Duration::from_millis(1500))
        );
        let negative: ErrorBody =
            serde_json::from_str(r#"{"code": "Throttled", "message": "slow", "retryAfterSeconds": -1}"#).unwrap();
        assert!(matches!(negative.into_error(), Error::Throttled { retry_after: None, .. }));
    }
}
