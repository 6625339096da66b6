//! The HTTP endpoints of both modes: `/metrics` (Prometheus text format), `/healthz` (every loop
//! of the process beats: [`shared::health`]) and `/readyz` (the process has synced what it watches).

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, body::Incoming, service::service_fn};
use hyper_util::rt::TokioIo;
use prometheus_client::registry::Registry;
use shared::accept::AcceptBackoff;
use shared::health::Health;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves the probe endpoints on `listener` until `shutdown` is cancelled.
pub async fn serve(listener: TcpListener, registry: Arc<Registry>, health: Health, shutdown: CancellationToken) {
    let mut backoff = AcceptBackoff::default();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff.accepted();
                stream
            }
            Err(error) => {
                // Out of descriptors, say: without a pause the loop would spin a core until one is freed.
                let pause = backoff.failed();
                tracing::warn!(%error, retry_in = ?pause, "probe endpoint: accept failed");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(pause) => continue,
                }
            }
        };
        let registry = registry.clone();
        let health = health.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let response = respond(request.method(), request.uri().path(), &registry, &health);
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

fn respond(method: &Method, path: &str, registry: &Registry, health: &Health) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String, content_type: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
        response
    };
    if method != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into(), "text/plain");
    }
    match path {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => text(StatusCode::OK, body, "application/openmetrics-text; version=1.0.0; charset=utf-8"),
                Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{error}\n"), "text/plain"),
            }
        }
        "/healthz" => match health.live() {
            Ok(()) => text(StatusCode::OK, "ok\n".into(), "text/plain"),
            Err(stuck) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{stuck}\n"), "text/plain"),
        },
        "/readyz" if health.is_ready() => text(StatusCode::OK, "ok\n".into(), "text/plain"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into(), "text/plain"),
        _ => text(StatusCode::NOT_FOUND, "not found\n".into(), "text/plain"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::time::Duration;

    async fn get(path: &str, health: &Health) -> (StatusCode, String) {
        let response = respond(&Method::GET, path, &Registry::default(), health);
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test(start_paused = true)]
    async fn healthz_fails_while_a_loop_is_stuck_and_readyz_follows_readiness() {
        let health = Health::default();
        assert_eq!(get("/readyz", &health).await.0, StatusCode::SERVICE_UNAVAILABLE);
        health.set_ready(true);
        assert_eq!(get("/readyz", &health).await, (StatusCode::OK, "ok\n".into()));
        let beat = health.heartbeat("reconciler", Duration::from_secs(60));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(get("/healthz", &health).await, (StatusCode::OK, "ok\n".into()));
        tokio::time::sleep(Duration::from_secs(30)).await;
        let (status, body) = get("/healthz", &health).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "reconciler: no heartbeat for 90s (stuck after 60s)\n");
        beat.beat();
        assert_eq!(get("/healthz", &health).await.0, StatusCode::OK);
        assert_eq!(get("/readyz", &health).await.0, StatusCode::OK, "liveness does not change readiness");
    }
}
