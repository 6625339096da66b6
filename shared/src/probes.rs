//! The HTTP endpoints of both modes: `/metrics` (Prometheus text format), `/healthz` (the
//! process serves requests) and `/readyz` (the process has synced what it watches).

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Whether the process is ready to do its job; shared between the worker that knows and the probe
/// that tells.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Serves the probe endpoints on `listener` until `shutdown` is cancelled.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>, readiness: Readiness, shutdown: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::warn!(%error, "probe endpoint: accept failed");
                continue;
            }
        };
        let registry = registry.clone();
        let readiness = readiness.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let response = respond(&request, &registry, &readiness);
            async move { Ok::<_, std::convert::Infallible>(response) }
        });
        let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "probe endpoint: connection ended with an error");
            }
        });
    }
}

fn respond(request: &Request<Incoming>, registry: &Registry, readiness: &Readiness) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String, content_type: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
        response
    };
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into(), "text/plain");
    }
    match request.uri().path() {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => text(StatusCode::OK, body, "application/openmetrics-text; version=1.0.0; charset=utf-8"),
                Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n"), "text/plain"),
            }
        }
        "/healthz" => text(StatusCode::OK, "ok\n".into(), "text/plain"),
        "/readyz" if readiness.is_ready() => text(StatusCode::OK, "ok\n".into(), "text/plain"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into(), "text/plain"),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
    }
}
