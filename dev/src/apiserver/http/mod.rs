//! The HTTP/1.1 front end: a hyper server on 127.0.0.1 that kube-rs clients and kubectl talk to.

mod handler;
pub mod negotiate;
pub mod response;
pub mod route;

use super::core::Core;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves connections from `listener` until `shutdown` is cancelled; then drops every connection (open watches
/// end as if the server went away).
pub async fn serve(listener: TcpListener, core: Arc<Core>, shutdown: CancellationToken) {
    let address: Arc<str> = listener.local_addr().map(|a| a.to_string()).unwrap_or_default().into();
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, _) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let core = core.clone();
        let address = address.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| handler::handle(core.clone(), address.clone(), request));
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                result = connection => {
                    if let Err(error) = result {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                }
                () = shutdown.cancelled() => {}
            }
        });
    }
    connections.close();
    connections.wait().await;
}
