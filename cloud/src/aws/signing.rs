//! SigV4 signatures of the EC2 Query API's requests, with the `aws-sigv4` crate the AWS SDK signs with.
//!
//! The signature goes into headers (`Authorization`, `X-Amz-Date`, and `X-Amz-Security-Token` when the credentials
//! have a session token, signed as the SDK signs it); every header of the request is signed except those SigV4
//! leaves out (`authorization`, `user-agent`, `x-amzn-trace-id`, `transfer-encoding`), the body's SHA-256 is part
//! of the canonical request.

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use bytes::Bytes;
use std::time::SystemTime;

/// Why a request could not be signed (a header value that is not visible ASCII, an unusable URI).
#[derive(Debug, thiserror::Error)]
#[error("SigV4 signing failed: {0}")]
pub(crate) struct SigningFailed(String);

/// Signs `request` for `service` in `region` at `time` with `credentials`: adds the signature's headers.
///
/// # Errors
/// [`SigningFailed`] for a request that cannot be signed.
pub(crate) fn sign_request(
    request: &mut http::Request<Bytes>,
    credentials: &Credentials,
    region: &str,
    service: &str,
    time: SystemTime,
) -> Result<(), SigningFailed> {
    let failed = |e: &dyn std::fmt::Display| SigningFailed(e.to_string());
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| failed(&e))?
        .into();
    let mut headers = Vec::with_capacity(request.headers().len());
    for (name, value) in request.headers() {
        let value = value.to_str().map_err(|e| failed(&format!("header {name}: {e}")))?;
        headers.push((name.as_str(), value));
    }
    let uri = request.uri().to_string();
    let signable =
        SignableRequest::new(request.method().as_str(), uri, headers.into_iter(), SignableBody::Bytes(request.body()))
            .map_err(|e| failed(&e))?;
    let (instructions, _signature) = sign(signable, &params).map_err(|e| failed(&e))?.into_parts();
    let (new_headers, _query) = instructions.into_parts();
    for header in new_headers {
        let name = http::HeaderName::from_bytes(header.name().as_bytes()).map_err(|e| failed(&e))?;
        let mut value = http::HeaderValue::from_str(header.value()).map_err(|e| failed(&e))?;
        value.set_sensitive(header.sensitive());
        request.headers_mut().insert(name, value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// 2015-08-30T12:36:00Z, the time of AWS's SigV4 test suite.
    fn suite_time() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160)
    }

    fn suite_credentials(token: Option<&str>) -> Credentials {
        Credentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token.map(str::to_owned), None, "t")
    }

    fn request(method: &str, body: &'static [u8], headers: &[(&str, &str)]) -> http::Request<Bytes> {
        let mut builder = http::Request::builder().method(method).uri("https://example.amazonaws.com/");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Bytes::from_static(body)).unwrap()
    }

    fn header<'a>(request: &'a http::Request<Bytes>, name: &str) -> &'a str {
        request.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    /// The vectors `post-vanilla` and `get-vanilla-with-session-token` of AWS's SigV4 test suite (shipped in the
    /// aws-sigv4 crate as `aws-signing-test-suite/v4/*/header-signed-request.txt`).
    #[test]
    fn signatures_match_the_aws_sigv4_test_suite() {
        let mut post = request("POST", b"", &[("host", "example.amazonaws.com")]);
        sign_request(&mut post, &suite_credentials(None), "us-east-1", "service", suite_time()).unwrap();
        assert_eq!(header(&post, "x-amz-date"), "20150830T123600Z");
        assert_eq!(
            header(&post, "authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        );

        let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
        let mut get = request("GET", b"", &[("host", "example.amazonaws.com")]);
        sign_request(&mut get, &suite_credentials(Some(token)), "us-east-1", "service", suite_time()).unwrap();
        assert_eq!(header(&get, "x-amz-security-token"), token);
        assert!(get.headers()["x-amz-security-token"].is_sensitive());
        assert_eq!(
            header(&get, "authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date;x-amz-security-token, \
             Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"
        );
    }

    #[test]
    fn a_query_request_signs_its_content_type_and_host_for_ec2_in_its_region_and_its_body() {
        let headers = [
            ("host", "ec2.eu-central-1.amazonaws.com"),
            ("content-type", "application/x-www-form-urlencoded; charset=utf-8"),
            ("user-agent", "update-operator"),
        ];
        let sign = |body: &'static [u8]| {
            let mut signed = request("POST", body, &headers);
            sign_request(&mut signed, &suite_credentials(None), "eu-central-1", "ec2", suite_time()).unwrap();
            header(&signed, "authorization").to_owned()
        };
        let auth = sign(b"Action=DescribeInstances&Version=2016-11-15&InstanceId.1=i-1");
        assert!(auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/eu-central-1/ec2/aws4_request, "));
        assert!(auth.contains("SignedHeaders=content-type;host;x-amz-date, "), "{auth}");
        assert_ne!(auth, sign(b"Action=DescribeInstances&Version=2016-11-15&InstanceId.1=i-2"), "the body is signed");
    }
}
