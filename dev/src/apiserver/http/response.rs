//! Response bodies: objects, lists (streamed from the stored bytes), watch streams, Tables, metadata-only forms
//! and Status errors.

use crate::apiserver::error::ApiError;
use crate::apiserver::object::StoredObject;
use crate::apiserver::ops::read::ListResult;
use crate::apiserver::ops::watch::{WatchOutput, WatchSession};
use crate::apiserver::resource::ResourceType;
use crate::apiserver::table::{self, IncludeObject};
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

/// The representation a client asked for with `Accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// The object (or list) itself.
    Plain,
    /// `as=Table`.
    Table,
    /// `as=PartialObjectMetadata` / `as=PartialObjectMetadataList`.
    Metadata,
    /// The object (or list) itself as `application/yaml`; not for watches, as upstream has no YAML stream.
    Yaml,
}

/// Picks the first acceptable representation of an `Accept` header; `None` when nothing offered is served.
pub fn negotiate(accept: Option<&str>) -> Option<Representation> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else { return Some(Representation::Plain) };
    for offer in accept.split(',') {
        let mut parts = offer.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default();
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |name: &str| params.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
        if media == "application/yaml" && param("as").is_none() {
            return Some(Representation::Yaml);
        }
        if !matches!(media, "application/json" | "*/*" | "application/*" | "application/json+stream") {
            continue;
        }
        match param("as") {
            None => return Some(Representation::Plain),
            Some("Table") if param("g") == Some("meta.k8s.io") => return Some(Representation::Table),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList") if param("g") == Some("meta.k8s.io") => {
                return Some(Representation::Metadata);
            }
            Some(_) => continue,
        }
    }
    None
}

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

/// A Status error response, with `Retry-After` when due.
pub fn error_response(error: &ApiError) -> Response<Body> {
    let status = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(status, &error.to_status());
    if let Some(seconds) = error.retry_after_header() {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// One object in the asked representation.
pub fn object_response(
    status: StatusCode,
    rt: &ResourceType,
    object: &StoredObject,
    representation: Representation,
    include: IncludeObject,
) -> Response<Body> {
    match representation {
        Representation::Plain => bytes_response(status, object.bytes.clone()),
        Representation::Metadata => json_response(status, &table::partial_metadata(&object.value())),
        Representation::Table => json_response(status, &table::table(rt, &[object.value()], None, None, include)),
        Representation::Yaml => yaml_response(status, &object.value()),
    }
}

/// A YAML response (keys sorted, as upstream's JSON-to-YAML conversion writes them).
pub fn yaml_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = bytes_response(status, Bytes::from(yaml_serde::to_string(value).unwrap_or_default()));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/yaml"));
    response
}

/// A page of a list in the asked representation. Plain lists are streamed from the stored bytes.
pub fn list_response(
    rt: &ResourceType,
    page: ListResult,
    representation: Representation,
    include: IncludeObject,
) -> Response<Body> {
    let mut metadata = json!({"resourceVersion": page.rv.to_string()});
    if let Some(token) = &page.continue_token {
        metadata["continue"] = json!(token);
    }
    match representation {
        Representation::Table => {
            let objects: Vec<Value> = page.items.iter().map(|o| o.value()).collect();
            json_response(
                StatusCode::OK,
                &table::table(rt, &objects, Some(page.rv), page.continue_token.as_deref(), include),
            )
        }
        Representation::Metadata => {
            let items: Vec<Value> = page.items.iter().map(|o| table::partial_metadata(&o.value())).collect();
            json_response(
                StatusCode::OK,
                &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items}),
            )
        }
        Representation::Yaml => {
            let items: Vec<Value> = page.items.iter().map(|o| o.value()).collect();
            yaml_response(
                StatusCode::OK,
                &json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(), "metadata": metadata, "items": items}),
            )
        }
        Representation::Plain => {
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

/// Renders one watch output as a line.
fn watch_line(rt: &ResourceType, output: WatchOutput, representation: Representation) -> Bytes {
    let mut line = BytesMut::new();
    match output {
        WatchOutput::Event(item) => {
            line.extend_from_slice(b"{\"type\":\"");
            line.extend_from_slice(item.ty.as_str().as_bytes());
            line.extend_from_slice(b"\",\"object\":");
            match representation {
                Representation::Plain | Representation::Yaml => line.extend_from_slice(&item.bytes),
                other => {
                    let object: Value = serde_json::from_slice(&item.bytes).unwrap_or(Value::Null);
                    let rendered = if other == Representation::Table {
                        table::table(rt, &[object], None, None, IncludeObject::Metadata)
                    } else {
                        table::partial_metadata(&object)
                    };
                    line.extend_from_slice(&serde_json::to_vec(&rendered).unwrap_or_default());
                }
            }
            line.extend_from_slice(b"}\n");
        }
        WatchOutput::Bookmark { rv, initial_events_end } => {
            let (api_version, kind) = match representation {
                Representation::Metadata => ("meta.k8s.io/v1".to_owned(), "PartialObjectMetadata".to_owned()),
                _ => (rt.api_version(), rt.kind.clone()),
            };
            let mut metadata = json!({"resourceVersion": rv.to_string()});
            if initial_events_end {
                metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            let event =
                json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": metadata}});
            line.extend_from_slice(&serde_json::to_vec(&event).unwrap_or_default());
            line.extend_from_slice(b"\n");
        }
        WatchOutput::Error(error) => {
            let event = json!({"type": "ERROR", "object": error.to_status()});
            line.extend_from_slice(&serde_json::to_vec(&event).unwrap_or_default());
            line.extend_from_slice(b"\n");
        }
    }
    line.freeze()
}

/// A watch response: HTTP 200, then one JSON object per line until the session ends.
pub fn watch_response(session: WatchSession, representation: Representation) -> Response<Body> {
    let stream = futures::stream::unfold(session, move |mut session| async move {
        let output = session.next().await?;
        let line = watch_line(session.resource(), output, representation);
        Some((Ok::<_, Infallible>(Frame::data(line)), session))
    });
    let mut response = Response::new(StreamBody::new(stream).boxed_unsync());
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_and_kube_rs_accept_headers_are_understood() {
        assert_eq!(negotiate(None), Some(Representation::Plain));
        assert_eq!(negotiate(Some("application/json")), Some(Representation::Plain));
        assert_eq!(
            negotiate(Some(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
            )),
            Some(Representation::Table)
        );
        assert_eq!(
            negotiate(Some("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")),
            Some(Representation::Metadata)
        );
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf, */*")), Some(Representation::Plain));
        assert_eq!(negotiate(Some("application/vnd.kubernetes.protobuf")), None);
        assert_eq!(negotiate(Some("application/yaml")), Some(Representation::Yaml));
        assert_eq!(negotiate(Some("application/yaml;as=Table;v=v1;g=meta.k8s.io")), None);
        assert_eq!(negotiate(Some("application/json;as=Widget;g=x")), None);
    }

    #[test]
    fn list_chunks_form_one_json_document() {
        let rt = crate::apiserver::resource::builtin_types().into_iter().find(|t| t.plural == "configmaps").unwrap();
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
