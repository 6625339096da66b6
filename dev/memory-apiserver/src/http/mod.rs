//! The HTTP/1.1 front end: a hyper server on 127.0.0.1 that kube-rs clients and kubectl talk to.

mod access;
mod handler;
pub mod negotiate;
pub mod response;
pub mod route;
pub mod tls;

use super::core::Core;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Serves connections from `listener`, each plain HTTP/1.1 or HTTPS (see [`tls`]), until `shutdown` is
/// cancelled; then drops every connection (open watches end as if the server went away).
pub async fn serve(listener: TcpListener, core: Arc<Core>, tls: tls::Tls, shutdown: CancellationToken) {
    let address: Arc<str> = listener.local_addr().map(|a| a.to_string()).unwrap_or_default().into();
    let connections = tokio_util::task::TaskTracker::new();
    let mut backoff = shared::accept::AcceptBackoff::default();
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, _) = match accepted {
            Ok(accepted) => {
                backoff.accepted();
                accepted
            }
            Err(error) => {
                // Out of descriptors, say: pause, or the loop spins and starves the connections that would free one.
                let pause = backoff.failed();
                core.accept_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(%error, retry_in = ?pause, "accepting a connection failed");
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(pause) => continue,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let core = core.clone();
        let address = address.clone();
        let shutdown = shutdown.clone();
        let acceptor = tls.acceptor.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| handler::handle(core.clone(), address.clone(), request));
            let mut first = [0u8; 1];
            let serving = async {
                let result = match stream.peek(&mut first).await {
                    Ok(1) if first[0] == tls::HANDSHAKE => match acceptor.accept(stream).await {
                        Ok(stream) => http1::Builder::new().serve_connection(TokioIo::new(stream), service).await,
                        Err(error) => {
                            tracing::debug!(%error, "TLS handshake failed");
                            return;
                        }
                    },
                    Ok(_) => http1::Builder::new().serve_connection(TokioIo::new(stream), service).await,
                    Err(_) => return,
                };
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
            };
            tokio::select! {
                () = serving => {}
                () = shutdown.cancelled() => {}
            }
        });
    }
    connections.close();
    connections.wait().await;
}

/// A kube-rs client whose requests reach the server's handler in this process without a socket, authenticated
/// with `token` and sent with the User-Agent `user_agent`: the same routing, admission, authorization, metrics
/// and request log as over TCP, but no descriptor per connection. The benchmarks run thousands of agents in one
/// process, which over TCP would need two descriptors per open watch (both ends) and run into the process's
/// descriptor limit.
///
/// # Contract
/// - Each request carries `Authorization: Bearer <token>` and the User-Agent, replacing any it had.
/// - A watch ends when the client drops its response body, as when a TCP connection closes.
/// - No connection-level behaviour is simulated (no TLS, no HTTP/1.1 framing, no `Content-Length` limits
///   beyond the handler's own body limit).
pub fn in_memory_client(
    core: Arc<Core>,
    address: Arc<str>,
    token: &str,
    user_agent: &str,
) -> Result<kube::Client, ::http::header::InvalidHeaderValue> {
    let authorization = ::http::HeaderValue::from_str(&format!("Bearer {token}"))?;
    let user_agent = ::http::HeaderValue::from_str(user_agent)?;
    let service = tower::service_fn(move |mut request: ::http::Request<kube::client::Body>| {
        let headers = request.headers_mut();
        headers.insert(::http::header::AUTHORIZATION, authorization.clone());
        headers.insert(::http::header::USER_AGENT, user_agent.clone());
        handler::handle(core.clone(), address.clone(), request)
    });
    Ok(kube::Client::new(service, "default"))
}
