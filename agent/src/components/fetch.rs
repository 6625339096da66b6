//! HTTP(S) GETs of component artifacts as real download servers need them: redirects followed and
//! the host's proxy settings honoured.
//!
//! # Guarantees
//! - Redirects (301, 302, 303, 307, 308) are followed, at most [`MAX_REDIRECTS`] of them, as
//!   `dl.k8s.io` (to its CDN) and GitHub release URLs (to their object store, with a signed query)
//!   answer. A redirect from `https:` to anything but `https:` is refused: the artifact's hash is
//!   checked anyway, but a downgrade would leak the rest of the path and query in clear text.
//!   Only `http:` and `https:` locations are followed; relative locations are resolved against the
//!   URL that answered (RFC 9110, section 10.2.2).
//! - The proxy settings are those of curl and Go: `HTTPS_PROXY`/`https_proxy` for `https:` URLs (a
//!   `CONNECT` tunnel, TLS end to end), `HTTP_PROXY`/`http_proxy` for `http:` URLs (the request in
//!   absolute form), `NO_PROXY`/`no_proxy` for the hosts and networks reached directly (hyper-util's
//!   `Matcher::from_env`, the implementation reqwest uses).
//! - TLS with the system's CA certificates, HTTP/1.1.

use bytes::Bytes;
use http::Uri;
use http::uri::Scheme;
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpStream;
use tower_service::Service;

/// Most redirects followed for one download (as Go's and reqwest's clients).
pub const MAX_REDIRECTS: usize = 10;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Downloads with redirects and proxies.
pub struct Fetcher {
    client: Client<hyper_rustls::HttpsConnector<ProxyConnector>, Empty<Bytes>>,
}

impl Fetcher {
    /// A fetcher using `proxies` (normally [`Matcher::from_env`]).
    pub fn new(proxies: Matcher) -> Result<Self, String> {
        let mut direct = HttpConnector::new();
        // The TLS layer above hands https: URIs down to open their TCP connection.
        direct.enforce_http(false);
        let connector = ProxyConnector { direct, proxies: Arc::new(proxies) };
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| format!("CA certificates: {e}"))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new()).build(https);
        Ok(Fetcher { client })
    }

    /// GETs `url`, following redirects; the final answer (any status but a redirect) and the URL
    /// that gave it.
    pub async fn get(&self, url: Uri) -> Result<(http::Response<Incoming>, Uri), String> {
        let mut url = url;
        for _ in 0..=MAX_REDIRECTS {
            let response = self.client.get(url.clone()).await.map_err(|e| describe(&e))?;
            if !response.status().is_redirection() || response.status() == http::StatusCode::NOT_MODIFIED {
                return Ok((response, url));
            }
            let location = response
                .headers()
                .get(http::header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .ok_or_else(|| format!("{url} answered {} without a usable Location", response.status()))?;
            url = next_location(&url, location)?;
        }
        Err(format!("more than {MAX_REDIRECTS} redirects"))
    }
}

/// The error with its causes, which hyper's and the connectors' errors keep apart.
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Where a redirect from `from` to `location` leads, if it may be followed.
pub fn next_location(from: &Uri, location: &str) -> Result<Uri, String> {
    let base = url::Url::parse(&from.to_string()).map_err(|e| format!("{from}: {e}"))?;
    let next = base.join(location).map_err(|e| format!("{from} redirected to {location:?}: {e}"))?;
    match (base.scheme(), next.scheme()) {
        ("https", "https") | ("http", "http" | "https") => {}
        ("https", _) => return Err(format!("{from} redirected to {next}: a redirect away from https: is refused")),
        (_, scheme) => return Err(format!("{from} redirected to {next}: the scheme {scheme}: is not followed")),
    }
    next.as_str().parse().map_err(|e: http::uri::InvalidUri| format!("{from} redirected to {next}: {e}"))
}

/// Opens the TCP connection of a request: directly, through a `CONNECT` tunnel of the proxy for
/// `https:`, or to the proxy for `http:`.
#[derive(Clone)]
struct ProxyConnector {
    direct: HttpConnector,
    proxies: Arc<Matcher>,
}

impl Service<Uri> for ProxyConnector {
    type Response = ProxiedStream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<ProxiedStream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let mut direct = self.direct.clone();
        let Some(proxy) = self.proxies.intercept(&dst) else {
            return Box::pin(async move { Ok(ProxiedStream { io: direct.call(dst).await?, proxied: false }) });
        };
        if dst.scheme() == Some(&Scheme::HTTPS) {
            let mut tunnel = Tunnel::new(proxy.uri().clone(), direct);
            if let Some(auth) = proxy.basic_auth() {
                tunnel = tunnel.with_auth(auth.clone());
            }
            return Box::pin(async move { Ok(ProxiedStream { io: tunnel.call(dst).await?, proxied: false }) });
        }
        let proxy = proxy.uri().clone();
        Box::pin(async move { Ok(ProxiedStream { io: direct.call(proxy).await?, proxied: true }) })
    }
}

/// A connection; `proxied` when it leads to an HTTP proxy that takes requests in absolute form.
pub struct ProxiedStream {
    io: TokioIo<TcpStream>,
    proxied: bool,
}

impl Connection for ProxiedStream {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxied)
    }
}

impl hyper::rt::Read for ProxiedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for ProxiedStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(from: &str, location: &str) -> Result<String, String> {
        next_location(&from.parse().unwrap(), location).map(|uri| uri.to_string())
    }

    #[test]
    fn redirects_resolve_as_browsers_do_and_never_leave_https() {
        // dl.k8s.io answers with an absolute URL of its CDN.
        assert_eq!(
            next(
                "https://dl.k8s.io/v1.34.1/bin/linux/amd64/kubeadm",
                "https://cdn.dl.k8s.io/release/v1.34.1/bin/linux/amd64/kubeadm"
            ),
            Ok("https://cdn.dl.k8s.io/release/v1.34.1/bin/linux/amd64/kubeadm".into())
        );
        assert_eq!(next("https://a.example/x/y", "/z?q=1"), Ok("https://a.example/z?q=1".into()));
        assert_eq!(next("https://a.example/x/y", "w"), Ok("https://a.example/x/w".into()));
        assert_eq!(next("http://a.example/x", "https://b.example/y"), Ok("https://b.example/y".into()));
        let downgrade = next("https://a.example/x", "http://b.example/y").unwrap_err();
        assert!(downgrade.contains("a redirect away from https: is refused"), "{downgrade}");
        assert!(next("https://a.example/x", "ftp://b.example/y").is_err());
        assert!(next("http://a.example/x", "file:///etc/passwd").is_err());
    }
}
