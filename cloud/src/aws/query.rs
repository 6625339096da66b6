//! The AWS Query protocol as EC2 speaks it (`ec2Query`): one signed `POST /` per action, its parameters as an
//! `application/x-www-form-urlencoded` body (`Action=…&Version=…&Name=value`, lists as `Name.1`, `Name.2`, members
//! of structures as `Name.Member`), its answer an XML document (`<ActionResponse>`), its errors
//! `<Response><Errors><Error><Code>…</Code><Message>…</Message></Error></Errors><RequestID>…</RequestID></Response>`
//! with a 4xx or 5xx status (EC2 API reference, "Making requests" / "Query requests" and "Error codes").
//!
//! - **Endpoint**: the [`SdkConfig`]'s `endpoint_url()` (`AWS_ENDPOINT_URL`: moto in tests), else
//!   `https://{service}.{region}.amazonaws.com/` (`.com.cn` in the China regions).
//! - **Credentials**: the [`SdkConfig`]'s provider's, kept until shortly before they expire (module
//!   `credentials`: the provider itself does not cache) and then asked again, so that rotating ones (IRSA, Pod
//!   Identity, the instance profile) are renewed; the session token is signed along.
//! - **HTTP**: hyper 1 with rustls on ring and the system's roots (the client stack kube already links), HTTP/1.1,
//!   pooled connections, a 10 s connect timeout; one attempt per request (no retries: [`crate::Governed`] retries),
//!   the whole request (credentials included) bounded by [`REQUEST_TIMEOUT`], the answer by [`MAX_ANSWER`] bytes.
//! - **Errors** as [`super::errors::map_query_error`] classifies them; a timeout, a failed connection or a broken
//!   answer is transient, a 2xx answer that is not XML or an answer larger than [`MAX_ANSWER`] permanent.

use super::REQUEST_TIMEOUT;
use super::credentials::CachedCredentials;
use super::errors::map_query_error;
use super::signing::sign_request;
use super::xml::{self, Element};
use crate::error::{Error, Result};
use aws_config::SdkConfig;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The body's content type.
pub(crate) const CONTENT_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// The largest answer read (a `DescribeInstances` of one instance is a few KiB).
pub(crate) const MAX_ANSWER: usize = 8 << 20;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

const USER_AGENT: &str = concat!("update-operator/", env!("CARGO_PKG_VERSION"), " ec2-query");

/// Bytes of names and values sent as they are: RFC 3986's unreserved characters, as the AWS SDKs encode (a space
/// is `%20`, `$` is `%24`).
const ENCODED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// The parameters of one request, in the order they are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    /// `Action=action&Version=version`.
    pub(crate) fn new(action: &str, version: &str) -> Params {
        Params(vec![("Action".to_owned(), action.to_owned()), ("Version".to_owned(), version.to_owned())])
    }

    /// Adds `name=value`.
    #[must_use]
    pub(crate) fn set(mut self, name: impl Into<String>, value: impl Into<String>) -> Params {
        self.0.push((name.into(), value.into()));
        self
    }

    /// Adds a list: `name.1=first`, `name.2=second`, …
    #[must_use]
    pub(crate) fn list<S: Into<String>>(mut self, name: &str, values: impl IntoIterator<Item = S>) -> Params {
        for (i, value) in values.into_iter().enumerate() {
            self.0.push((format!("{name}.{}", i + 1), value.into()));
        }
        self
    }

    /// The value of `name`, if set.
    #[cfg(test)]
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The form body.
    pub(crate) fn encode(&self) -> String {
        let pairs = self.0.iter().map(|(name, value)| {
            format!("{}={}", utf8_percent_encode(name, ENCODED), utf8_percent_encode(value, ENCODED))
        });
        pairs.collect::<Vec<_>>().join("&")
    }
}

type Https = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Where requests go and how.
#[derive(Clone)]
struct Target {
    uri: http::Uri,
    host: http::HeaderValue,
    http: Https,
}

/// A client of one Query API service (`ec2`) in one region. Cheap to clone (the connection pool is shared).
#[derive(Clone)]
pub(crate) struct QueryClient {
    service: &'static str,
    endpoint: String,
    region: Option<String>,
    credentials: Option<Arc<CachedCredentials>>,
    /// The target, or why there is none (a bad endpoint URL, no TLS roots): then every request fails with it.
    target: std::result::Result<Target, Arc<str>>,
}

impl fmt::Debug for QueryClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryClient")
            .field("service", &self.service)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("ready", &self.target.as_ref().map(|_| ()))
            .finish_non_exhaustive()
    }
}

impl QueryClient {
    /// The client of `service` with the region, endpoint and credentials of `config`.
    pub(crate) fn new(config: &SdkConfig, service: &'static str) -> QueryClient {
        let region = config.region().map(|r| r.as_ref().to_owned());
        let endpoint = match config.endpoint_url() {
            Some(url) => format!("{}/", url.trim_end_matches('/')),
            None => default_endpoint(service, region.as_deref().unwrap_or_default()),
        };
        QueryClient {
            service,
            target: target(&endpoint).map_err(Arc::from),
            endpoint,
            region,
            credentials: config.credentials_provider().map(|p| Arc::new(CachedCredentials::new(p))),
        }
    }

    /// The endpoint requests are sent to.
    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Makes the request `call` (the action, for messages) with `params`, and returns the answer's root element.
    ///
    /// # Errors
    /// The service's error answers as [`map_query_error`] maps them; [`Error::Transient`] for a timeout, a failed
    /// connection, an answer cut short or failed credentials; [`Error::Permanent`] for a 2xx answer that is not XML
    /// and a client that cannot send (see [`QueryClient::new`]).
    pub(crate) async fn call(&self, call: &'static str, params: &Params) -> Result<Element> {
        let target = self.target.as_ref().map_err(|why| Error::permanent(format!("{call}: {why}")))?;
        let Some(region) = self.region.as_deref().filter(|r| !r.is_empty()) else {
            return Err(Error::invalid(format!("{call}: no AWS region is configured")));
        };
        let Some(credentials) = &self.credentials else {
            return Err(Error::PermissionDenied { message: format!("{call}: no AWS credentials are configured") });
        };
        let exchange = async {
            let credentials = credentials.get().await.map_err(|e| Error::Transient {
                message: format!("{call}: loading AWS credentials: {}", chain(&e)),
                source: Some(Box::new(e)),
            })?;
            let mut request = http::Request::post(target.uri.clone())
                .header(http::header::HOST, target.host.clone())
                .header(http::header::CONTENT_TYPE, CONTENT_TYPE)
                .header(http::header::USER_AGENT, USER_AGENT)
                .body(Bytes::from(params.encode()))
                .map_err(|e| Error::permanent(format!("{call}: building the request: {e}")))?;
            sign_request(&mut request, &credentials, region, self.service, SystemTime::now())
                .map_err(|e| Error::Permanent { message: format!("{call}: {e}"), source: Some(Box::new(e)) })?;
            let answer = target.http.request(request.map(Full::new)).await.map_err(|e| Error::Transient {
                message: format!("{call}: {}", chain(&e)),
                source: Some(Box::new(e)),
            })?;
            let (parts, body) = answer.into_parts();
            let body = Limited::new(body, MAX_ANSWER).collect().await.map_err(|e| {
                let message = format!("{call}: reading the answer: {}", chain(e.as_ref()));
                if e.is::<LengthLimitError>() {
                    Error::Permanent { message, source: Some(e) }
                } else {
                    Error::Transient { message, source: Some(e) }
                }
            })?;
            answer_of(call, parts.status.as_u16(), &parts.headers, &body.to_bytes())
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::transient(format!("{call}: no answer within {} s", REQUEST_TIMEOUT.as_secs()))),
        }
    }
}

/// AWS's endpoint of `service` in `region` (the standard and the China partitions; others through
/// `AWS_ENDPOINT_URL`).
fn default_endpoint(service: &str, region: &str) -> String {
    let domain = if region.starts_with("cn-") { "amazonaws.com.cn" } else { "amazonaws.com" };
    format!("https://{service}.{region}.{domain}/")
}

/// The target of `endpoint`: its URI, its `Host` header, the HTTP client.
fn target(endpoint: &str) -> std::result::Result<Target, String> {
    let uri: http::Uri = endpoint.parse().map_err(|e| format!("the endpoint {endpoint:?} is not a URL: {e}"))?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    let authority = uri
        .authority()
        .filter(|_| scheme_ok)
        .ok_or_else(|| format!("the endpoint {endpoint:?} is not an http(s) URL"))?;
    let host = http::HeaderValue::from_str(authority.as_str())
        .map_err(|e| format!("the endpoint {endpoint:?} has an unusable host: {e}"))?;
    let mut connector = HttpConnector::new();
    connector.enforce_http(false);
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| format!("no TLS root certificates for the EC2 endpoint: {e}"))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    Ok(Target { uri, host, http: Client::builder(TokioExecutor::new()).build(https) })
}

/// The root element of a 2xx answer, or the error of any other.
pub(crate) fn answer_of(call: &'static str, status: u16, headers: &http::HeaderMap, body: &[u8]) -> Result<Element> {
    if (200..300).contains(&status) {
        let text = std::str::from_utf8(body)
            .map_err(|e| Error::permanent(format!("{call}: the answer (HTTP {status}) is not UTF-8: {e}")))?;
        return xml::parse(text).map_err(|e| Error::Permanent {
            message: format!("{call}: the answer (HTTP {status}) is not the expected XML: {e}"),
            source: Some(Box::new(e)),
        });
    }
    let retry_after = headers.get(http::header::RETRY_AFTER).and_then(|v| v.to_str().ok());
    let root = std::str::from_utf8(body).ok().and_then(|text| xml::parse(text).ok());
    // EC2's `Response/Errors/Error`; also the `ErrorResponse/Error` of the other Query services.
    let error = root.as_ref().and_then(|r| r.path(&["Errors", "Error"]).or_else(|| r.child("Error")));
    let code = error.and_then(|e| e.text_of("Code"));
    let message = error.and_then(|e| e.text_of("Message"));
    Err(map_query_error(call, status, retry_after, code, message))
}

/// An error and its sources, `: `-separated (hyper's own messages name only the outermost kind).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Outcome;

    #[test]
    fn parameters_are_form_encoded_in_order_with_only_unreserved_characters_left() {
        let params = Params::new("DescribeLaunchTemplateVersions", "2016-11-15")
            .set("LaunchTemplateName", "my template/ü")
            .list("LaunchTemplateVersion", ["$Default", "$Latest"])
            .set("VersionDescription", "a=b&c~d_e.f-g+h*");
        assert_eq!(
            params.encode(),
            "Action=DescribeLaunchTemplateVersions&Version=2016-11-15&LaunchTemplateName=my%20template%2F%C3%BC\
             &LaunchTemplateVersion.1=%24Default&LaunchTemplateVersion.2=%24Latest\
             &VersionDescription=a%3Db%26c~d_e.f-g%2Bh%2A"
        );
        assert_eq!(params.get("LaunchTemplateVersion.2"), Some("$Latest"));
        assert_eq!(params.get("Nothing"), None);
        let decoded: Vec<(String, String)> = form_pairs(&params.encode());
        assert_eq!(decoded[2], ("LaunchTemplateName".to_owned(), "my template/ü".to_owned()));
    }

    /// The form as a server decodes it (percent-decoding; `+` never appears).
    fn form_pairs(body: &str) -> Vec<(String, String)> {
        let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
        body.split('&').filter_map(|p| p.split_once('=')).map(|(n, v)| (decode(n), decode(v))).collect()
    }

    #[test]
    fn endpoints_come_from_the_config_or_the_region() {
        assert_eq!(default_endpoint("ec2", "eu-central-1"), "https://ec2.eu-central-1.amazonaws.com/");
        assert_eq!(default_endpoint("ec2", "cn-north-1"), "https://ec2.cn-north-1.amazonaws.com.cn/");
        let config = |endpoint: Option<&str>| {
            let mut builder = SdkConfig::builder().region(aws_config::Region::new("us-west-2"));
            builder.set_endpoint_url(endpoint.map(str::to_owned));
            QueryClient::new(&builder.build(), "ec2")
        };
        assert_eq!(config(None).endpoint(), "https://ec2.us-west-2.amazonaws.com/");
        assert_eq!(config(Some("http://127.0.0.1:5000")).endpoint(), "http://127.0.0.1:5000/");
        assert_eq!(config(Some("http://127.0.0.1:5000/")).endpoint(), "http://127.0.0.1:5000/");
        let target = target("http://127.0.0.1:5000/").unwrap();
        assert_eq!(target.host, "127.0.0.1:5000");
        for bad in ["", "127.0.0.1:5000", "ftp://x/", "http://"] {
            assert!(self::target(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn a_client_without_credentials_region_or_endpoint_fails_each_request_clearly() {
        let params = Params::new("DescribeInstances", "2016-11-15");
        let no_credentials = QueryClient::new(
            &SdkConfig::builder()
                .region(aws_config::Region::new("us-east-1"))
                .endpoint_url("http://127.0.0.1:9")
                .build(),
            "ec2",
        );
        let error = no_credentials.call("DescribeInstances", &params).await.unwrap_err();
        assert_eq!(error.outcome(), Outcome::PermissionDenied, "{error}");
        let no_region = QueryClient::new(&SdkConfig::builder().endpoint_url("http://127.0.0.1:9").build(), "ec2");
        let error = no_region.call("DescribeInstances", &params).await.unwrap_err();
        assert!(matches!(&error, Error::Invalid { message } if message.contains("region")), "{error}");
        let bad_endpoint = QueryClient::new(&SdkConfig::builder().endpoint_url("not a url").build(), "ec2");
        let error = bad_endpoint.call("DescribeInstances", &params).await.unwrap_err();
        assert!(matches!(&error, Error::Permanent { message, .. } if message.contains("not a URL")), "{error}");
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        pairs.iter().map(|(n, v)| (http::HeaderName::from_static(n), http::HeaderValue::from_static(v))).collect()
    }

    /// Error answers as EC2 sends them (EC2 API reference, "Error codes": `Response/Errors/Error/Code`, `Message`,
    /// `RequestID`), classified as the SDK's errors were.
    #[test]
    fn error_answers_are_typed_by_code_then_status_with_their_retry_after() {
        let ec2_error = |code: &str| {
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>\
                 The thing &apos;x&apos; does not exist</Message></Error></Errors>\
                 <RequestID>ea966190-f9aa-478e-9ede-cb5432daacc0</RequestID></Response>"
            )
        };
        let cases = [
            ("RequestLimitExceeded", 503, Outcome::Throttled),
            ("Throttling", 400, Outcome::Throttled),
            ("InvalidInstanceID.NotFound", 400, Outcome::NotFound),
            ("InvalidLaunchTemplateId.NotFound", 400, Outcome::NotFound),
            ("InvalidLaunchTemplateName.NotFoundException", 400, Outcome::NotFound),
            ("UnauthorizedOperation", 403, Outcome::PermissionDenied),
            ("AuthFailure", 401, Outcome::PermissionDenied),
            ("LaunchTemplateVersionLimitExceeded", 400, Outcome::QuotaExceeded),
            ("InternalError", 500, Outcome::Transient),
            ("Unavailable", 503, Outcome::Transient),
            ("InvalidParameterValue", 400, Outcome::Invalid),
            ("MissingParameter", 400, Outcome::Invalid),
            ("DryRunOperation", 412, Outcome::Permanent),
        ];
        for (code, status, expected) in cases {
            let error = answer_of("DescribeInstances", status, &headers(&[]), ec2_error(code).as_bytes()).unwrap_err();
            assert_eq!(error.outcome(), expected, "{code}: {error}");
            assert!(error.to_string().contains(&format!("DescribeInstances: {code}: The thing 'x' does not exist")));
        }
        let throttled = answer_of(
            "ModifyLaunchTemplate",
            503,
            &headers(&[("retry-after", "3")]),
            ec2_error("RequestLimitExceeded").as_bytes(),
        );
        assert!(matches!(throttled, Err(Error::Throttled { retry_after: Some(d), .. }) if d == Duration::from_secs(3)));
        // No code (a proxy's page, an empty or cut body): the status decides.
        for (body, status, expected) in [
            (&b"<html>bad gateway</html>"[..], 502, Outcome::Transient),
            (b"", 429, Outcome::Throttled),
            (b"\xff\xfe", 403, Outcome::PermissionDenied),
            (b"<Response><Errors><Error><Code>", 404, Outcome::NotFound),
            (b"", 400, Outcome::Permanent),
        ] {
            let error = answer_of("DescribeInstances", status, &headers(&[]), body).unwrap_err();
            assert_eq!(error.outcome(), expected, "{status} {body:?}: {error}");
            assert!(error.to_string().contains("DescribeInstances: : no message"), "{error}");
        }
    }

    #[test]
    fn a_success_that_is_not_xml_is_a_permanent_error_naming_the_call() {
        for body in [&b"not xml"[..], b"", b"\xff", b"<a><b></a>"] {
            let error = answer_of("DescribeInstances", 200, &headers(&[]), body).unwrap_err();
            assert!(matches!(&error, Error::Permanent { message, .. } if message.starts_with("DescribeInstances: ")));
        }
        let root = answer_of("DescribeInstances", 200, &headers(&[]), b"<DescribeInstancesResponse/>").unwrap();
        assert_eq!(root.name, "DescribeInstancesResponse");
    }

    #[test]
    fn error_chains_name_every_cause_once() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl fmt::Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let error = Outer(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"));
        assert_eq!(chain(&error), "client error (Connect): connection refused");
    }
}
