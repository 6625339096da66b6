//! Response bodies: objects, lists (JSON streamed from the stored bytes), watch streams, Tables, metadata-only
//! forms and Status errors, in JSON, YAML or protobuf as negotiated ([`super::negotiate`]).

use super::negotiate::{Encoding, Negotiated, Representation};
use crate::error::ApiError;
use crate::object::StoredObject;
use crate::ops::read::ListResult;
use crate::ops::watch::{WatchOutput, WatchSession};
use crate::protobuf;
use crate::resource::{ResourceType, events};
use crate::table::{self, IncludeObject};
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;

/// The body of every response.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// List bodies are sent in chunks of about this size.
const CHUNK: usize = 64 * 1024;

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

/// A JSON response.
pub fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    bytes_response(status, Bytes::from(serde_json::to_vec(value).unwrap_or_default()))
}

/// A JSON response from bytes.
pub fn bytes_response(status: StatusCode, bytes: Bytes) -> Response<Body> {
    let mut response = Response::new(full(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A response of `value` in `encoding` (a JSON value whose `apiVersion` and `kind` name its protobuf message).
pub fn encoded_response(status: StatusCode, value: &Value, encoding: Encoding) -> Response<Body> {
    match encoding {
        Encoding::Json => json_response(status, value),
        Encoding::Yaml => yaml_response(status, value),
        Encoding::Protobuf => match protobuf::encode(value) {
            Ok(bytes) => {
                let mut response = Response::new(full(bytes));
                *response.status_mut() = status;
                response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(protobuf::MEDIA_TYPE));
                response
            }
            Err(error) => {
                error_response(&ApiError::internal(format!("encoding the response failed: {error}")), Encoding::Json)
            }
        },
    }
}

/// A YAML response (keys sorted, as upstream's JSON-to-YAML conversion writes them).
pub fn yaml_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = bytes_response(status, Bytes::from(yaml_serde::to_string(value).unwrap_or_default()));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/yaml"));
    response
}

/// A Status error response in `encoding`, with `Retry-After` when due.
pub fn error_response(error: &ApiError, encoding: Encoding) -> Response<Body> {
    let status = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = encoded_response(status, &error.to_status(), encoding);
    if let Some(seconds) = error.retry_after_header() {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// One object in the negotiated form.
pub fn object_response(
    status: StatusCode,
    rt: &ResourceType,
    object: &StoredObject,
    negotiated: Negotiated,
    include: IncludeObject,
) -> Response<Body> {
    match (negotiated.representation, negotiated.encoding) {
        (Representation::Plain, Encoding::Json) if !events::is_converted(rt) => {
            bytes_response(status, object.bytes.clone())
        }
        (Representation::Plain, encoding) => encoded_response(status, &events::to_served(rt, object.value()), encoding),
        (Representation::Metadata { version, .. }, encoding) => {
            encoded_response(status, &table::partial_metadata(&object.value(), version), encoding)
        }
        (Representation::Table(version), encoding) => {
            encoded_response(status, &table::table(rt, &[object.value()], None, None, include, version), encoding)
        }
    }
}

/// A page of a list in the negotiated form. Plain JSON lists are streamed from the stored bytes.
pub fn list_response(
    rt: &ResourceType,
    page: ListResult,
    negotiated: Negotiated,
    include: IncludeObject,
) -> Response<Body> {
    let mut metadata = json!({"resourceVersion": page.rv.to_string()});
    if let Some(token) = &page.continue_token {
        metadata["continue"] = json!(token);
    }
    if let Some(remaining) = page.remaining {
        metadata["remainingItemCount"] = json!(remaining);
    }
    match (negotiated.representation, negotiated.encoding) {
        (Representation::Table(version), encoding) => {
            let objects: Vec<Value> = page.items.iter().map(|o| o.value()).collect();
            let mut table = table::table(rt, &objects, None, None, include, version);
            table["metadata"] = metadata;
            encoded_response(StatusCode::OK, &table, encoding)
        }
        (Representation::Metadata { version, .. }, encoding) => {
            let items: Vec<Value> = page.items.iter().map(|o| table::partial_metadata(&o.value(), version)).collect();
            let list = json!({"kind": "PartialObjectMetadataList", "apiVersion": format!("meta.k8s.io/{version}"),
                              "metadata": metadata, "items": items});
            encoded_response(StatusCode::OK, &list, encoding)
        }
        (Representation::Plain, encoding) if encoding != Encoding::Json || events::is_converted(rt) => {
            let items: Vec<Value> = page.items.iter().map(|o| events::to_served(rt, o.value())).collect();
            let list = json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(),
                              "metadata": metadata, "items": items});
            encoded_response(StatusCode::OK, &list, encoding)
        }
        (Representation::Plain, _) => {
            let head = format!(
                "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
                rt.kind,
                rt.api_version(),
                metadata
            );
            let chunks = ListChunks { head: Some(Bytes::from(head)), items: page.items, next: 0, done: false };
            let stream = futures::stream::iter(chunks.map(|chunk| Ok::<_, Infallible>(Frame::data(chunk))));
            let mut response = Response::new(StreamBody::new(stream).boxed_unsync());
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
    }
}

/// A list body, built lazily in chunks of about [`CHUNK`] bytes.
struct ListChunks {
    head: Option<Bytes>,
    items: Vec<Arc<StoredObject>>,
    next: usize,
    done: bool,
}

impl Iterator for ListChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut chunk = BytesMut::with_capacity(CHUNK + 4096);
        if let Some(head) = self.head.take() {
            chunk.extend_from_slice(&head);
        }
        while self.next < self.items.len() && chunk.len() < CHUNK {
            if self.next > 0 {
                chunk.extend_from_slice(b",");
            }
            chunk.extend_from_slice(&self.items[self.next].bytes);
            self.next += 1;
        }
        if self.next >= self.items.len() {
            chunk.extend_from_slice(b"]}");
            self.done = true;
        }
        Some(chunk.freeze())
    }
}

/// The object of one watch output (in the negotiated representation) and its event type.
fn watch_object(rt: &ResourceType, output: WatchOutput, representation: Representation) -> (&'static str, WatchObject) {
    match output {
        WatchOutput::Event(item) => {
            let object = match representation {
                Representation::Plain if events::is_converted(rt) => {
                    let stored: Value = serde_json::from_slice(&item.bytes).unwrap_or(Value::Null);
                    WatchObject::Value(events::to_served(rt, stored))
                }
                Representation::Plain => WatchObject::Stored(item.bytes),
                Representation::Table(version) => {
                    let object: Value = serde_json::from_slice(&item.bytes).unwrap_or(Value::Null);
                    WatchObject::Value(table::table(rt, &[object], None, None, IncludeObject::Metadata, version))
                }
                Representation::Metadata { version, .. } => {
                    let object: Value = serde_json::from_slice(&item.bytes).unwrap_or(Value::Null);
                    WatchObject::Value(table::partial_metadata(&object, version))
                }
            };
            (item.ty.as_str(), object)
        }
        WatchOutput::Bookmark { rv, initial_events_end } => {
            let (api_version, kind) = match representation {
                Representation::Metadata { version, .. } => {
                    (format!("meta.k8s.io/{version}"), "PartialObjectMetadata".to_owned())
                }
                _ => (rt.api_version(), rt.kind.clone()),
            };
            let mut metadata = json!({"resourceVersion": rv.to_string()});
            if initial_events_end {
                metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            ("BOOKMARK", WatchObject::Value(json!({"kind": kind, "apiVersion": api_version, "metadata": metadata})))
        }
        WatchOutput::Error(error) => ("ERROR", WatchObject::Value(error.to_status())),
    }
}

/// The object of a watch event: stored JSON bytes, or a value built for this watch.
enum WatchObject {
    Stored(Bytes),
    Value(Value),
}

/// Renders one watch output: a JSON line, or a protobuf frame.
fn watch_event(rt: &ResourceType, output: WatchOutput, negotiated: Negotiated) -> Bytes {
    let (event_type, object) = watch_object(rt, output, negotiated.representation);
    match negotiated.encoding {
        // A YAML watch is refused before it starts (`negotiate::check_stream`).
        Encoding::Json | Encoding::Yaml => {
            let mut line = BytesMut::new();
            line.extend_from_slice(b"{\"type\":\"");
            line.extend_from_slice(event_type.as_bytes());
            line.extend_from_slice(b"\",\"object\":");
            match object {
                WatchObject::Stored(bytes) => line.extend_from_slice(&bytes),
                WatchObject::Value(value) => line.extend_from_slice(&serde_json::to_vec(&value).unwrap_or_default()),
            }
            line.extend_from_slice(b"}\n");
            line.freeze()
        }
        Encoding::Protobuf => {
            let value = match object {
                WatchObject::Stored(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                WatchObject::Value(value) => value,
            };
            let body = protobuf::encode(&value).unwrap_or_else(|error| {
                let error = ApiError::internal(format!("encoding the watch event failed: {error}"));
                protobuf::encode(&error.to_status()).unwrap_or_default()
            });
            Bytes::from(protobuf::watch_frame(event_type, &body))
        }
    }
}

/// A watch response: HTTP 200, then one JSON line or protobuf frame per event until the session ends.
pub fn watch_response(session: WatchSession, negotiated: Negotiated) -> Response<Body> {
    let stream = futures::stream::unfold(session, move |mut session| async move {
        let output = session.next().await?;
        let event = watch_event(session.resource(), output, negotiated);
        Some((Ok::<_, Infallible>(Frame::data(event)), session))
    });
    let mut response = Response::new(StreamBody::new(stream).boxed_unsync());
    let content_type = negotiated.encoding.stream_content_type();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_chunks_form_one_json_document() {
        let rt = crate::resource::builtin_types().into_iter().find(|t| t.plural == "configmaps").unwrap();
        let items: Vec<Arc<StoredObject>> = (0..3000)
            .map(|i| {
                StoredObject::new(
                    &rt,
                    &json!({"metadata": {"name": format!("cm-{i}")}, "data": {"k": "v".repeat(40)}}),
                    1,
                )
            })
            .collect();
        let chunks = ListChunks { head: Some(Bytes::from_static(b"{\"items\":[")), items, next: 0, done: false };
        let all: Vec<Bytes> = chunks.collect();
        assert!(all.len() > 1);
        let joined: Vec<u8> = all.iter().flat_map(|b| b.iter().copied()).collect();
        let list: Value = serde_json::from_slice(&joined).unwrap();
        assert_eq!(list["items"].as_array().unwrap().len(), 3000);
        let empty = ListChunks { head: Some(Bytes::from_static(b"{\"items\":[")), items: vec![], next: 0, done: false };
        let joined: Vec<u8> = empty.flat_map(|b| b.to_vec()).collect();
        assert_eq!(serde_json::from_slice::<Value>(&joined).unwrap(), json!({"items": []}));
    }
}
