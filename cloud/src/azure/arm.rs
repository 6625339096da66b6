//! One ARM request at a time: a bearer token from the credential, the pinned `api-version`, a timeout, and ARM
//! error bodies mapped to [`crate::Error`].

use super::model::{API_VERSION, ErrorResponse};
use crate::error::{Error, Result};
use azure_core::credentials::TokenCredential;
use azure_core::http::headers::{HeaderName, Headers};
use azure_core::http::{HttpClient, Method, Request, Url};
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;

/// The largest answer read; ARM answers of one scale set or one page of VMs are far smaller.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

const RETRY_AFTER: HeaderName = HeaderName::from_static("retry-after");
const ASYNC_OPERATION: HeaderName = HeaderName::from_static("azure-asyncoperation");
const LOCATION: HeaderName = HeaderName::from_static("location");

/// An ARM endpoint with its credential.
#[derive(Debug, Clone)]
pub(crate) struct Arm {
    pub(crate) http: Arc<dyn HttpClient>,
    pub(crate) credential: Arc<dyn TokenCredential>,
    /// `https://management.azure.com/`.
    pub(crate) endpoint: Url,
    /// `https://management.azure.com/.default`.
    pub(crate) scope: String,
    pub(crate) timeout: Duration,
}

/// A successful answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: bytes::Bytes,
    /// The operation to follow, from `Azure-AsyncOperation`, else `Location` (on 201/202).
    pub(crate) operation: Option<String>,
}

impl Answer {
    /// The body as JSON.
    pub(crate) fn json<T: DeserializeOwned>(&self, what: &str) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|e| Error::permanent(format!("ARM answered {what} unreadably: {e}")))
    }
}

impl Arm {
    /// The URL of an ARM path (`/subscriptions/...`) with the pinned `api-version`, or of an absolute URL the
    /// API gave (a `nextLink`, an operation) provided it is on the same endpoint: the token goes nowhere else.
    pub(crate) fn url(&self, path_or_url: &str) -> Result<Url> {
        if path_or_url.starts_with('/') {
            let mut url = self
                .endpoint
                .join(path_or_url.trim_start_matches('/'))
                .map_err(|e| Error::invalid(format!("ARM path {path_or_url:?}: {e}")))?;
            url.query_pairs_mut().append_pair("api-version", API_VERSION);
            return Ok(url);
        }
        let url = Url::parse(path_or_url).map_err(|e| Error::permanent(format!("ARM gave a bad URL: {e}")))?;
        if url.origin() != self.endpoint.origin() {
            return Err(Error::permanent(format!(
                "ARM gave a URL on another host ({}), not following it",
                url.origin().ascii_serialization()
            )));
        }
        Ok(url)
    }

    /// Sends one request; a non-2xx answer is the mapped error.
    pub(crate) async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<&serde_json::Value>,
        if_match: Option<&str>,
    ) -> Result<Answer> {
        let work = async {
            let token = self.credential.get_token(&[self.scope.as_str()], None).await.map_err(credential_error)?;
            let mut request = Request::new(url.clone(), method);
            request.insert_header("authorization", format!("Bearer {}", token.token.secret()));
            request.insert_header("accept", "application/json");
            if let Some(etag) = if_match {
                request.insert_header("if-match", etag.to_owned());
            }
            if let Some(body) = body {
                request.insert_header("content-type", "application/json");
                request.set_body(serde_json::to_vec(body).map_err(|e| Error::permanent(e.to_string()))?);
            }
            let answer = self.http.execute_request(&request).await.map_err(|e| Error::Transient {
                message: format!("{method} {}: {e}", url.path()),
                source: Some(Box::new(e)),
            })?;
            let (status, headers, body) = answer.deconstruct();
            let body = body.collect().await.map_err(|e| Error::Transient {
                message: format!("reading the answer to {method} {}: {e}", url.path()),
                source: Some(Box::new(e)),
            })?;
            if body.len() > MAX_ANSWER_BYTES {
                return Err(Error::permanent(format!("ARM answered {} bytes, more than expected", body.len())));
            }
            Ok((u16::from(status), headers, body))
        };
        let (status, headers, body) = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| Error::transient(format!("{method} {}: no answer within {:?}", url.path(), self.timeout)))??;
        if !(200..300).contains(&status) {
            return Err(arm_error(status, &headers, &body));
        }
        let operation = headers
            .get_optional_str(&ASYNC_OPERATION)
            .or_else(|| headers.get_optional_str(&LOCATION))
            .map(str::to_owned);
        Ok(Answer { status, body, operation })
    }

    /// GET of an ARM path or URL, decoded.
    pub(crate) async fn get<T: DeserializeOwned>(&self, path_or_url: &str, what: &str) -> Result<T> {
        self.send(Method::Get, self.url(path_or_url)?, None, None).await?.json(what)
    }
}

/// A credential's failure: the token endpoint unreachable is transient; anything else (no token file, an
/// identity the tenant refuses) is the credentials' fault.
fn credential_error(error: azure_core::Error) -> Error {
    match error.kind() {
        azure_core::error::ErrorKind::Io | azure_core::error::ErrorKind::Connection => {
            Error::Transient { message: format!("acquiring an ARM token: {error}"), source: Some(Box::new(error)) }
        }
        _ => Error::PermissionDenied { message: format!("acquiring an ARM token: {error}") },
    }
}

/// Whether an ARM error is a quota or capacity refusal (ARM answers quota errors as `OperationNotAllowed` with a
/// message naming the quota, capacity as `AllocationFailed` and its kin).
fn is_quota(code: &str, message: &str) -> bool {
    let code = code.to_ascii_lowercase();
    matches!(
        code.as_str(),
        "quotaexceeded"
            | "allocationfailed"
            | "zonalallocationfailed"
            | "overconstrainedallocationrequest"
            | "overconstrainedzonalallocationrequest"
            | "skunotavailable"
    ) || (code == "operationnotallowed" && message.to_ascii_lowercase().contains("quota"))
}

/// Whether a 409 says another operation on the resource is in progress: ARM's `Conflict` ("The request failed due
/// to conflict with a concurrent request"), `AnotherOperationInProgress`, `OperationPreempted`, or a message naming
/// an operation in progress.
fn is_in_progress(code: &str, message: &str) -> bool {
    let code = code.to_ascii_lowercase();
    let message = message.to_ascii_lowercase();
    matches!(code.as_str(), "conflict" | "anotheroperationinprogress" | "operationpreempted")
        || message.contains("concurrent request")
        || (message.contains("operation") && message.contains("in progress"))
}

/// The typed error of a non-2xx ARM answer (see the table in `docs/cloud.md`, `## Azure`).
pub(crate) fn arm_error(status: u16, headers: &Headers, body: &[u8]) -> Error {
    let detail = serde_json::from_slice::<ErrorResponse>(body).map(|e| e.error).unwrap_or_default();
    let code = if detail.code.is_empty() { format!("HTTP{status}") } else { detail.code.clone() };
    let message = format!("{code}: {} (HTTP {status})", detail.message);
    match status {
        429 => Error::Throttled { message, retry_after: retry_after(headers) },
        // The If-Match of a capacity change failed: someone changed the scale set meanwhile, nothing was done.
        412 => Error::Throttled { message, retry_after: None },
        401 | 403 => Error::PermissionDenied { message },
        404 => Error::NotFound { message },
        400 | 409 if is_quota(&code, &detail.message) => Error::QuotaExceeded { message },
        // Another operation on the resource is in progress: nothing was done, try again (cloud-provider-azure
        // retries these after 5 s, kubernetes-sigs/cloud-provider-azure#2386).
        409 if is_in_progress(&code, &detail.message) => {
            Error::Throttled { message, retry_after: retry_after(headers) }
        }
        400 | 409 | 422 => Error::Invalid { message },
        408 | 500..=599 => Error::transient(message),
        _ => Error::permanent(message),
    }
}

/// `Retry-After` in seconds (ARM sends delta seconds).
fn retry_after(headers: &Headers) -> Option<Duration> {
    let value = headers.get_optional_str(&RETRY_AFTER)?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(status: u16, code: &str, message: &str, retry: Option<&str>) -> Error {
        let mut headers = Headers::new();
        if let Some(retry) = retry {
            headers.insert("retry-after", retry.to_owned());
        }
        let body = serde_json::json!({"error": {"code": code, "message": message}}).to_string();
        arm_error(status, &headers, body.as_bytes())
    }

    #[test]
    fn arm_errors_are_typed() {
        assert!(matches!(
            error(429, "TooManyRequests", "slow down", Some("7")),
            Error::Throttled { retry_after: Some(d), .. } if d == Duration::from_secs(7)
        ));
        assert!(matches!(error(429, "TooManyRequests", "", None), Error::Throttled { retry_after: None, .. }));
        assert!(matches!(error(412, "PreconditionFailed", "", None), Error::Throttled { .. }));
        assert!(matches!(error(403, "AuthorizationFailed", "no", None), Error::PermissionDenied { .. }));
        assert!(matches!(error(401, "InvalidAuthenticationToken", "no", None), Error::PermissionDenied { .. }));
        assert!(matches!(error(404, "ResourceNotFound", "gone", None), Error::NotFound { .. }));
        assert!(matches!(
            error(409, "OperationNotAllowed", "exceeding approved Total Regional Cores quota", None),
            Error::QuotaExceeded { .. }
        ));
        assert!(matches!(error(409, "OperationNotAllowed", "VM is being deleted", None), Error::Invalid { .. }));
        assert!(matches!(
            error(409, "Conflict", "The request failed due to conflict with a concurrent request.", None),
            Error::Throttled { .. }
        ));
        assert!(matches!(
            error(409, "OperationNotAllowed", "Another operation (Updating) is in progress, please wait", None),
            Error::Throttled { .. }
        ));
        assert!(matches!(error(400, "InvalidParameter", "bad", None), Error::Invalid { .. }));
        assert!(matches!(error(503, "ServiceUnavailable", "", None), Error::Transient { .. }));
        assert!(matches!(error(302, "", "", None), Error::Permanent { .. }));
        let plain = arm_error(500, &Headers::new(), b"<html>");
        assert!(plain.to_string().contains("HTTP500"), "{plain}");
    }
}
