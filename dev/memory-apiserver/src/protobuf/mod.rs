//! Protobuf bodies (`application/vnd.kubernetes.protobuf`) of the built-in kinds, transcoded to and from the
//! JSON the server keeps.
//!
//! # The wire format (apimachinery `runtime/serializer/protobuf`)
//! - A body is the magic `k8s\0` followed by a `runtime.Unknown` message: `typeMeta` (apiVersion, kind), `raw`
//!   (the object's own message), `contentEncoding` and `contentType` (both empty).
//! - A watch (`;stream=watch`) is a sequence of frames: a 4-byte big-endian length, then a `meta.v1.WatchEvent`
//!   message without the envelope whose `object.raw` is the object in the envelope above.
//! - Only kinds with a message in [`schema`] are protobuf (built-in kinds, their lists, `Status`,
//!   `DeleteOptions`, `PartialObjectMetadata`, ...); custom resources are JSON only.
//!
//! The schema is generated from the Kubernetes sources by `dev/memory-apiserver/examples/protobuf-schema.rs`.

pub mod codec;
pub mod descriptor;
mod schema;

pub use codec::{CodecError, Encoder};
pub use descriptor::Message;

use codec::Reader;
use serde_json::Value;

/// The media type of protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The first four bytes of every protobuf body.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// The package of the types every group version shares (`Status`, `DeleteOptions`, `WatchEvent`, ...).
const META_PACKAGE: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

/// Why a protobuf body could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    /// The body does not start with `k8s\0`.
    #[error("provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]")]
    NoMagic,
    /// The envelope names no kind.
    #[error("Object 'Kind' is missing in the protobuf envelope")]
    MissingKind,
    /// No message is known for the kind.
    #[error("no kind \"{kind}\" is registered for version \"{api_version}\"")]
    UnknownKind {
        /// `apiVersion` of the envelope.
        api_version: String,
        /// `kind` of the envelope.
        kind: String,
    },
    /// The message or the JSON is malformed.
    #[error(transparent)]
    Codec(#[from] CodecError),
}

/// The message of `kind` in `api_version`; kinds every group version shares (`Status`, `DeleteOptions`, ...)
/// are found in meta.k8s.io/v1 whatever the group.
pub fn message_for(api_version: &str, kind: &str) -> Option<&'static Message> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let own = schema::GROUPS
        .iter()
        .find(|(g, _)| *g == group)
        .and_then(|(_, prefix)| codec::message_named(&format!("{prefix}.{version}.{kind}")));
    own.or_else(|| codec::message_named(&format!("{META_PACKAGE}.{kind}")))
        .filter(|m| m.shape == descriptor::Shape::Struct)
}

/// True when objects of `kind` in `group`/`version` have a protobuf form (a kind of its own in that group, not
/// one of the shared meta kinds).
pub fn has_message(group: &str, version: &str, kind: &str) -> bool {
    schema::GROUPS
        .iter()
        .find(|(g, _)| *g == group)
        .and_then(|(_, prefix)| codec::message_named(&format!("{prefix}.{version}.{kind}")))
        .is_some()
}

/// Encodes a JSON object, whose `apiVersion` and `kind` name its message, as a protobuf body.
pub fn encode(object: &Value) -> Result<Vec<u8>, ProtobufError> {
    let text = |key: &str| object.get(key).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    if kind.is_empty() {
        return Err(ProtobufError::MissingKind);
    }
    let message = message_for(api_version, kind)
        .ok_or_else(|| ProtobufError::UnknownKind { api_version: api_version.into(), kind: kind.into() })?;
    let raw = Encoder::new().encode(message, object)?;
    Ok(envelope(api_version, kind, &raw))
}

/// The body of a message: `k8s\0` and the `runtime.Unknown` around `raw`.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut type_meta = Vec::with_capacity(api_version.len() + kind.len() + 4);
    codec::put_bytes(&mut type_meta, 1, api_version.as_bytes());
    codec::put_bytes(&mut type_meta, 2, kind.as_bytes());
    let mut out = Vec::with_capacity(raw.len() + type_meta.len() + 16);
    out.extend_from_slice(&MAGIC);
    codec::put_bytes(&mut out, 1, &type_meta);
    codec::put_bytes(&mut out, 2, raw);
    codec::put_bytes(&mut out, 3, b"");
    codec::put_bytes(&mut out, 4, b"");
    out
}

/// The `apiVersion`, `kind` and message bytes of a protobuf body.
pub fn open_envelope(body: &[u8]) -> Result<(String, String, &[u8]), ProtobufError> {
    let unknown = body.strip_prefix(&MAGIC).ok_or(ProtobufError::NoMagic)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    let mut reader = Reader::new(unknown);
    while let Some((tag, value)) = reader.next_field()? {
        match (tag, value) {
            (1, codec::WireValue::Bytes(type_meta)) => {
                let mut fields = Reader::new(type_meta);
                while let Some((tag, value)) = fields.next_field()? {
                    if let codec::WireValue::Bytes(text) = value {
                        let text = String::from_utf8(text.to_vec())
                            .map_err(|_| CodecError::Malformed("typeMeta is not UTF-8".into()))?;
                        match tag {
                            1 => api_version = text,
                            2 => kind = text,
                            _ => {}
                        }
                    }
                }
            }
            (2, codec::WireValue::Bytes(bytes)) => raw = bytes,
            _ => {}
        }
    }
    Ok((api_version, kind, raw))
}

/// Decodes a protobuf body into the JSON object, with `apiVersion` and `kind` from the envelope.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let (api_version, kind, raw) = open_envelope(body)?;
    if kind.is_empty() {
        return Err(ProtobufError::MissingKind);
    }
    let message = message_for(&api_version, &kind)
        .ok_or_else(|| ProtobufError::UnknownKind { api_version: api_version.clone(), kind: kind.clone() })?;
    let mut object = codec::decode(message, raw)?;
    if let Some(fields) = object.as_object_mut() {
        fields.insert("apiVersion".into(), Value::String(api_version));
        fields.insert("kind".into(), Value::String(kind));
    }
    Ok(object)
}

/// One frame of a protobuf watch: the length, then a `WatchEvent` of `event_type` whose object is `body` (a
/// protobuf body, envelope included).
pub fn watch_frame(event_type: &str, body: &[u8]) -> Vec<u8> {
    let mut raw_extension = Vec::with_capacity(body.len() + 6);
    codec::put_bytes(&mut raw_extension, 1, body);
    let mut event = Vec::with_capacity(raw_extension.len() + event_type.len() + 8);
    codec::put_bytes(&mut event, 1, event_type.as_bytes());
    codec::put_bytes(&mut event, 2, &raw_extension);
    let mut frame = Vec::with_capacity(event.len() + 4);
    frame.extend_from_slice(&(event.len() as u32).to_be_bytes());
    frame.extend_from_slice(&event);
    frame
}

#[cfg(test)]
mod tests;
