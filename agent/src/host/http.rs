//! A minimal HTTP/1.1 client for the hosts' local update services: one connection per request,
//! over a Unix socket or TCP, with a deadline and a bounded answer.
//!
//! # Guarantees
//! - Every exchange ends within its timeout; the connection is closed when it ends.
//! - Answers larger than [`MAX_ANSWER_BYTES`] are refused, never buffered whole.

use super::{HostError, text};
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;

/// Largest answer body read. The update services answer with small JSON documents (the
/// Bottlerocket update status is about 1 KiB); anything near this is broken.
pub(crate) const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Where an update service listens.
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    /// A Unix socket, e.g. Bottlerocket's `/run/api.sock`.
    Unix(PathBuf),
    /// A TCP `host:port`.
    Tcp(String),
}

/// A complete answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
}

impl Answer {
    /// The answer as a refusal of `operation` by `service`.
    pub fn refusal(&self, service: &str, operation: &str) -> HostError {
        HostError::Refused {
            service: service.to_owned(),
            operation: operation.to_owned(),
            status: self.status.as_u16(),
            message: self.message(),
        }
    }

    /// The body as text for an error message: at most `MAX_MESSAGE_CHARS` characters, trimmed.
    /// Services that answer `{"message": ...}` get their message shown.
    pub fn message(&self) -> String {
        const MAX_MESSAGE_CHARS: usize = 300;
        #[derive(serde::Deserialize)]
        struct WithMessage {
            message: String,
        }
        match serde_json::from_slice::<WithMessage>(&self.body) {
            Ok(with_message) => text::head(&with_message.message, MAX_MESSAGE_CHARS),
            Err(_) => text::head(&String::from_utf8_lossy(&self.body), MAX_MESSAGE_CHARS),
        }
    }
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TransportError {
    /// The connection could not be opened.
    #[error("cannot connect: {0}")]
    Connect(#[source] std::io::Error),
    /// The connection closed after the request was sent, before a complete answer arrived.
    #[error("the connection closed before an answer arrived")]
    ClosedBeforeAnswer,
    /// The HTTP exchange failed.
    #[error("{0}")]
    Http(#[source] hyper::Error),
    /// The request could not be built (a bad path).
    #[error("bad request: {0}")]
    Request(#[source] http::Error),
    /// The answer body was larger than [`MAX_ANSWER_BYTES`].
    #[error("the answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    /// The connection broke while the answer body was read.
    #[error("cannot read the answer: {0}")]
    Body(String),
    /// No complete answer arrived in time.
    #[error("no answer within {}s", .0.as_secs_f32())]
    Timeout(Duration),
}

impl TransportError {
    /// The error as a [`HostError`] of `operation` on `service`.
    pub fn into_host_error(self, service: &str, operation: &str) -> HostError {
        let (service, operation) = (service.to_owned(), operation.to_owned());
        match self {
            TransportError::Timeout(after) => HostError::TimedOut { operation, after },
            TransportError::TooLarge | TransportError::Request(_) => {
                HostError::BadAnswer { service, operation, reason: self.to_string() }
            }
            TransportError::Connect(_)
            | TransportError::ClosedBeforeAnswer
            | TransportError::Http(_)
            | TransportError::Body(_) => HostError::Unreachable { service, operation, reason: self.to_string() },
        }
    }
}

/// Sends one request and reads the whole answer, within `timeout`.
pub(crate) async fn exchange(
    endpoint: &Endpoint,
    method: Method,
    path_and_query: &str,
    json_body: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<Answer, TransportError> {
    let request = build_request(endpoint, method, path_and_query, json_body)?;
    let exchange = async {
        match endpoint {
            Endpoint::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await.map_err(TransportError::Connect)?;
                over(stream, request).await
            }
            Endpoint::Tcp(authority) => {
                let stream =
                    tokio::net::TcpStream::connect(authority.as_str()).await.map_err(TransportError::Connect)?;
                over(stream, request).await
            }
        }
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| TransportError::Timeout(timeout))?
}

fn build_request(
    endpoint: &Endpoint,
    method: Method,
    path_and_query: &str,
    json_body: Option<Vec<u8>>,
) -> Result<Request<Full<Bytes>>, TransportError> {
    let host = match endpoint {
        Endpoint::Unix(_) => "localhost",
        Endpoint::Tcp(authority) => authority.as_str(),
    };
    let mut builder = Request::builder()
        .method(method)
        .uri(path_and_query)
        .header(header::HOST, host)
        .header(header::ACCEPT, "application/json");
    if json_body.is_some() {
        builder = builder.header(header::CONTENT_TYPE, "application/json");
    }
    builder.body(Full::new(Bytes::from(json_body.unwrap_or_default()))).map_err(TransportError::Request)
}

/// Aborts the connection task when the exchange ends, however it ends.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn over<S>(stream: S, request: Request<Full<Bytes>>) -> Result<Answer, TransportError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(TransportError::Http)?;
    let _connection = AbortOnDrop(tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "update service connection ended with an error");
        }
    }));
    let response = sender.send_request(request).await.map_err(|error| {
        if error.is_incomplete_message() { TransportError::ClosedBeforeAnswer } else { TransportError::Http(error) }
    })?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|error| {
            if error.is::<http_body_util::LengthLimitError>() {
                TransportError::TooLarge
            } else {
                TransportError::Body(error.to_string())
            }
        })?
        .to_bytes();
    Ok(Answer { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_show_the_services_message_cut_to_size() {
        let answer = |body: &str| Answer { status: StatusCode::BAD_REQUEST, body: Bytes::from(body.to_owned()) };
        assert_eq!(answer(r#"{"message": "disk full"}"#).message(), "disk full");
        assert_eq!(answer("Update lock held\n").message(), "Update lock held");
        assert_eq!(answer("").message(), "(no message)");
        let long = answer(&"x".repeat(1000)).message();
        assert!(long.len() < 310 && long.ends_with(" ..."), "{long}");
    }

    #[tokio::test]
    async fn a_missing_socket_is_a_connect_error() {
        let endpoint = Endpoint::Unix(PathBuf::from("/nonexistent/api.sock"));
        let error = exchange(&endpoint, Method::GET, "/os", None, Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(error, TransportError::Connect(_)), "{error:?}");
    }

    #[tokio::test]
    async fn a_service_that_never_answers_times_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = Endpoint::Tcp(listener.local_addr().unwrap().to_string());
        // Accepts the connection but never answers.
        let _held = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(stream);
        });
        let error = exchange(&endpoint, Method::GET, "/", None, Duration::from_millis(200)).await.unwrap_err();
        assert!(matches!(error, TransportError::Timeout(_)), "{error:?}");
    }

    #[tokio::test]
    async fn a_connection_closed_after_the_request_is_told_apart() {
        let endpoint = answer_once(Vec::new()).await;
        let error =
            exchange(&endpoint, Method::POST, "/actions/reboot", None, Duration::from_secs(10)).await.unwrap_err();
        assert!(matches!(error, TransportError::ClosedBeforeAnswer), "{error:?}");
    }

    /// Serves one connection: reads the request, writes `answer`, closes.
    async fn answer_once(answer: Vec<u8>) -> Endpoint {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = Endpoint::Tcp(listener.local_addr().unwrap().to_string());
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buffer = [0u8; 1024];
            let _ = stream.read(&mut buffer).await;
            let _ = stream.write_all(&answer).await;
        });
        endpoint
    }

    #[tokio::test]
    async fn an_answer_too_large_is_a_bad_answer_not_worth_retrying() {
        let body = vec![b'x'; MAX_ANSWER_BYTES + 1];
        let mut answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
        answer.extend_from_slice(&body);
        let endpoint = answer_once(answer).await;
        let error = exchange(&endpoint, Method::GET, "/", None, Duration::from_secs(10)).await.unwrap_err();
        assert!(matches!(error, TransportError::TooLarge), "{error:?}");
        assert!(!error.into_host_error("s", "o").is_retryable());
    }

    #[tokio::test]
    async fn a_connection_broken_in_the_middle_of_the_answer_is_worth_retrying() {
        let endpoint = answer_once(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial".to_vec()).await;
        let error = exchange(&endpoint, Method::GET, "/", None, Duration::from_secs(10)).await.unwrap_err();
        assert!(matches!(error, TransportError::Body(_)), "{error:?}");
        let error = error.into_host_error("the API", "reading");
        assert!(matches!(error, HostError::Unreachable { .. }), "{error:?}");
        assert!(error.is_retryable());
    }
}
