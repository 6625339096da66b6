//! A tiny HTTP/1.1 server for test doubles, on a Unix socket or TCP.

use bytes::Bytes;
use http::{Method, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::task::JoinHandle;

/// A request as a handler sees it.
pub struct Call {
    pub method: Method,
    pub uri: Uri,
    pub body: Bytes,
}

/// An answer: status and body (JSON or text).
pub struct Reply {
    pub status: StatusCode,
    pub body: String,
}

impl Reply {
    pub fn new(status: StatusCode, body: impl Into<String>) -> Self {
        Reply { status, body: body.into() }
    }
}

/// Handles one request.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, call: Call) -> impl Future<Output = Reply> + Send;
}

/// Serves `handler` on `listener` until the returned task is aborted.
pub fn serve_unix<H: Handler>(listener: UnixListener, handler: Arc<H>) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream, handler.clone()));
        }
    })
}

/// Serves `handler` on `listener` until the returned task is aborted.
pub fn serve_tcp<H: Handler>(listener: TcpListener, handler: Arc<H>) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_connection(stream, handler.clone()));
        }
    })
}

async fn serve_connection<S, H>(stream: S, handler: Arc<H>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    H: Handler,
{
    let service = service_fn(move |request: hyper::Request<Incoming>| {
        let handler = handler.clone();
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map(|collected| collected.to_bytes()).unwrap_or_default();
            let reply = handler.handle(Call { method: parts.method, uri: parts.uri, body }).await;
            let mut response = Response::new(Full::new(Bytes::from(reply.body)));
            *response.status_mut() = reply.status;
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
}
