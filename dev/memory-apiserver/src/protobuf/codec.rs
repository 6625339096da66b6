//! Transcodes between the protobuf messages of the built-in API ([`super::schema`]) and their JSON form, as the Go
//! types do: JSON names, `omitempty`, pointers, inlined structs and the hand-written JSON of `Time`,
//! `MicroTime`, `Duration`, `IntOrString`, `Quantity`, `FieldsV1`, `RawExtension` and the CRD schema unions.
//!
//! # Guarantees
//! - Decoding never panics on any input: malformed or truncated bytes, wrong wire types and nesting deeper than
//!   [`MAX_DEPTH`] are a [`CodecError`]. Unknown fields are skipped (as protobuf decoders do).
//! - Decoding produces the JSON the Go type would marshal: a zero scalar of a non-pointer `omitempty` field is
//!   left out, a missing non-pointer field without `omitempty` is its zero value, a pointer field keeps a zero.
//! - Encoding writes the fields present in the JSON (nulls skipped) in tag order, map entries by key; JSON members
//!   the message does not have are skipped, or reported with [`Encoder::strict`].

use super::descriptor::{Field, Label, Message, Presence, Scalar, Shape, Ty};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Number, Value};

/// Messages nest at most this deep (CRD schemas nest; anything deeper is refused, not a stack overflow).
pub const MAX_DEPTH: usize = 100;

/// Why a message could not be transcoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The bytes end inside a field.
    #[error("unexpected end of the protobuf data")]
    Truncated,
    /// The bytes are not a valid encoding of the message.
    #[error("malformed protobuf data: {0}")]
    Malformed(String),
    /// A JSON value does not fit its field.
    #[error("{field}: {problem}")]
    Json {
        /// The field (`spec.replicas`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Messages nest deeper than [`MAX_DEPTH`].
    #[error("the message nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
}

/// The message at `index` of the schema.
pub fn message_at(index: u16) -> &'static Message {
    &super::schema::MESSAGES[usize::from(index)]
}

/// The message named `name`.
pub fn message_named(name: &str) -> Option<&'static Message> {
    let messages = super::schema::MESSAGES;
    messages.binary_search_by(|m| m.name.cmp(name)).ok().map(|i| &messages[i])
}

// ---------------------------------------------------------------------------------------------------------------
// Wire format.

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH_DELIMITED: u8 = 2;
const FIXED32: u8 = 5;

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_key(out: &mut Vec<u8>, tag: u32, wire: u8) {
    put_varint(out, (u64::from(tag) << 3) | u64::from(wire));
}

/// Writes a length-delimited field.
pub fn put_bytes(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    put_key(out, tag, LENGTH_DELIMITED);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Writes a varint field (negative numbers as ten bytes, as Go does for int32 and int64).
pub fn put_int(out: &mut Vec<u8>, tag: u32, value: i64) {
    put_key(out, tag, VARINT);
    put_varint(out, value as u64);
}

/// A field read from the wire.
#[derive(Debug, Clone, Copy)]
pub enum WireValue<'a> {
    /// A varint.
    Varint(u64),
    /// Eight bytes.
    Fixed64(u64),
    /// Length-delimited bytes.
    Bytes(&'a [u8]),
    /// Four bytes.
    Fixed32(u32),
}

/// Reads the fields of a message one by one.
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over the bytes of one message.
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data }
    }

    fn varint(&mut self) -> Result<u64, CodecError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.data.split_first().ok_or(CodecError::Truncated)?;
            self.data = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(CodecError::Malformed("a varint is longer than ten bytes".into()))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.data.len() < n {
            return Err(CodecError::Truncated);
        }
        let (taken, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(taken)
    }

    /// The next field: its tag and value; `None` at the end.
    pub fn next_field(&mut self) -> Result<Option<(u32, WireValue<'a>)>, CodecError> {
        if self.data.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| CodecError::Malformed("a field number is too large".into()))?;
        if tag == 0 {
            return Err(CodecError::Malformed("field number 0".into()));
        }
        let value = match (key & 7) as u8 {
            VARINT => WireValue::Varint(self.varint()?),
            FIXED64 => {
                WireValue::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| CodecError::Truncated)?))
            }
            LENGTH_DELIMITED => {
                let length = usize::try_from(self.varint()?).map_err(|_| CodecError::Truncated)?;
                WireValue::Bytes(self.take(length)?)
            }
            FIXED32 => {
                WireValue::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| CodecError::Truncated)?))
            }
            other => return Err(CodecError::Malformed(format!("unsupported wire type {other}"))),
        };
        Ok(Some((tag, value)))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// JSON → protobuf.

/// Encodes JSON as protobuf messages.
#[derive(Debug, Default)]
pub struct Encoder {
    strict: bool,
    /// JSON members no field takes (only collected by a strict encoder), as `path.member`.
    pub unknown: Vec<String>,
}

impl Encoder {
    /// An encoder that skips unknown JSON members.
    pub fn new() -> Self {
        Encoder::default()
    }

    /// An encoder that records unknown JSON members in [`Encoder::unknown`] (for tests of the schema).
    pub fn strict() -> Self {
        Encoder { strict: true, unknown: Vec::new() }
    }

    /// The bytes of `value` as `message`.
    pub fn encode(&mut self, message: &Message, value: &Value) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::new();
        self.message(message, value, &mut out, &mut String::new(), 0)?;
        Ok(out)
    }

    fn message(
        &mut self,
        message: &Message,
        value: &Value,
        out: &mut Vec<u8>,
        path: &mut String,
        depth: usize,
    ) -> Result<(), CodecError> {
        if depth > MAX_DEPTH {
            return Err(CodecError::TooDeep);
        }
        match message.shape {
            Shape::Special => return self.special(message, value, out, path, depth),
            Shape::Wrapper => {
                let items = value.as_array().ok_or_else(|| mismatch(path, "an array", value))?;
                if let Some(field) = message.fields.first() {
                    for item in items {
                        self.single(field, item, out, path, depth)?;
                    }
                }
                return Ok(());
            }
            Shape::Struct => {}
        }
        let object = value.as_object().ok_or_else(|| mismatch(path, "an object", value))?;
        let mut fields: Vec<&Field> = message.fields.iter().collect();
        fields.sort_by_key(|f| f.tag);
        for field in fields {
            if field.presence == Presence::Inline {
                let Ty::Message(index) = field.ty else { continue };
                let mut inner = Vec::new();
                let own = message_at(index);
                let inlined: Map<String, Value> =
                    object.iter().filter(|(key, _)| takes(own, key)).map(|(k, v)| (k.clone(), v.clone())).collect();
                self.message(own, &Value::Object(inlined), &mut inner, path, depth + 1)?;
                put_bytes(out, field.tag, &inner);
                continue;
            }
            let Some(member) = object.get(field.json).filter(|v| !v.is_null()) else { continue };
            let mark = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(field.json);
            match field.label {
                Label::One => self.single(field, member, out, path, depth)?,
                Label::Repeated => {
                    let items = member.as_array().ok_or_else(|| mismatch(path, "an array", member))?;
                    for item in items {
                        self.single(field, item, out, path, depth)?;
                    }
                }
                Label::Map => {
                    let entries = member.as_object().ok_or_else(|| mismatch(path, "an object", member))?;
                    for (key, item) in entries {
                        let mut entry = Vec::new();
                        put_bytes(&mut entry, 1, key.as_bytes());
                        if !item.is_null() {
                            self.single(&Field { tag: 2, ..*field }, item, &mut entry, path, depth)?;
                        }
                        put_bytes(out, field.tag, &entry);
                    }
                }
            }
            path.truncate(mark);
        }
        if self.strict {
            for key in object.keys() {
                if !takes(message, key) && !matches!(key.as_str(), "apiVersion" | "kind") {
                    self.unknown.push(if path.is_empty() { key.clone() } else { format!("{path}.{key}") });
                }
            }
        }
        Ok(())
    }

    fn single(
        &mut self,
        field: &Field,
        value: &Value,
        out: &mut Vec<u8>,
        path: &mut String,
        depth: usize,
    ) -> Result<(), CodecError> {
        match field.ty {
            Ty::Message(index) => {
                let mut inner = Vec::new();
                self.message(message_at(index), value, &mut inner, path, depth + 1)?;
                put_bytes(out, field.tag, &inner);
            }
            Ty::Scalar(scalar) => put_scalar(out, field.tag, scalar, value, path)?,
        }
        Ok(())
    }

    fn special(
        &mut self,
        message: &Message,
        value: &Value,
        out: &mut Vec<u8>,
        path: &mut String,
        depth: usize,
    ) -> Result<(), CodecError> {
        match special(message.name) {
            Some(Special::Time) => {
                let text = value.as_str().ok_or_else(|| mismatch(path, "a time", value))?;
                let time: jiff::Timestamp = text.parse().map_err(|_| mismatch(path, "an RFC 3339 time", value))?;
                put_int(out, 1, time.as_second());
                put_int(out, 2, 0);
            }
            Some(Special::MicroTime) => {
                let text = value.as_str().ok_or_else(|| mismatch(path, "a time", value))?;
                let time: jiff::Timestamp = text.parse().map_err(|_| mismatch(path, "an RFC 3339 time", value))?;
                put_int(out, 1, time.as_second());
                put_int(out, 2, i64::from(time.subsec_nanosecond() / 1000 * 1000));
            }
            Some(Special::Duration) => {
                let text = value.as_str().ok_or_else(|| mismatch(path, "a duration", value))?;
                let nanos = parse_go_duration(text).ok_or_else(|| mismatch(path, "a Go duration", value))?;
                put_int(out, 1, nanos);
            }
            Some(Special::IntOrString) => match value {
                Value::String(s) => {
                    put_int(out, 1, 1);
                    put_int(out, 2, 0);
                    put_bytes(out, 3, s.as_bytes());
                }
                Value::Number(n) => {
                    let int = n.as_i64().and_then(|i| i32::try_from(i).ok());
                    let int = int.ok_or_else(|| mismatch(path, "an int32 or a string", value))?;
                    put_int(out, 1, 0);
                    put_int(out, 2, i64::from(int));
                    put_bytes(out, 3, b"");
                }
                other => return Err(mismatch(path, "an int32 or a string", other)),
            },
            Some(Special::Quantity) => {
                let text = match value {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    other => return Err(mismatch(path, "a quantity", other)),
                };
                put_bytes(out, 1, text.as_bytes());
            }
            Some(Special::RawJson) => {
                let raw = serde_json::to_vec(value).map_err(|e| mismatch(path, &e.to_string(), value))?;
                put_bytes(out, 1, &raw);
            }
            Some(Special::SchemaOrArray) => {
                let schema = schema_props(path)?;
                match value {
                    Value::Array(items) => {
                        for item in items {
                            let mut inner = Vec::new();
                            self.message(schema, item, &mut inner, path, depth + 1)?;
                            put_bytes(out, 2, &inner);
                        }
                    }
                    other => {
                        let mut inner = Vec::new();
                        self.message(schema, other, &mut inner, path, depth + 1)?;
                        put_bytes(out, 1, &inner);
                    }
                }
            }
            Some(Special::SchemaOrBool) => match value {
                Value::Bool(allows) => {
                    put_key(out, 1, VARINT);
                    put_varint(out, u64::from(*allows));
                }
                other => {
                    put_key(out, 1, VARINT);
                    put_varint(out, 1);
                    let mut inner = Vec::new();
                    self.message(schema_props(path)?, other, &mut inner, path, depth + 1)?;
                    put_bytes(out, 2, &inner);
                }
            },
            Some(Special::SchemaOrStringArray) => match value {
                Value::Array(items) => {
                    for item in items {
                        let text = item.as_str().ok_or_else(|| mismatch(path, "an array of strings", item))?;
                        put_bytes(out, 2, text.as_bytes());
                    }
                }
                other => {
                    let mut inner = Vec::new();
                    self.message(schema_props(path)?, other, &mut inner, path, depth + 1)?;
                    put_bytes(out, 1, &inner);
                }
            },
            None => {
                return Err(CodecError::Json {
                    field: path.clone(),
                    problem: format!("{} has no JSON form", message.name),
                });
            }
        }
        Ok(())
    }
}

/// True when a field of `message`, or of a struct it inlines, has the JSON name `key`.
fn takes(message: &Message, key: &str) -> bool {
    message.fields.iter().any(|f| match (f.presence, f.ty) {
        (Presence::Inline, Ty::Message(index)) => takes(message_at(index), key),
        _ => f.json == key,
    })
}

fn schema_props(path: &str) -> Result<&'static Message, CodecError> {
    message_named("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps")
        .ok_or_else(|| CodecError::Json { field: path.to_owned(), problem: "the schema has no JSONSchemaProps".into() })
}

fn mismatch(path: &str, expected: &str, value: &Value) -> CodecError {
    let found = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    CodecError::Json { field: path.to_owned(), problem: format!("expected {expected}, found {found}") }
}

fn put_scalar(out: &mut Vec<u8>, tag: u32, scalar: Scalar, value: &Value, path: &str) -> Result<(), CodecError> {
    match scalar {
        Scalar::String => {
            put_bytes(out, tag, value.as_str().ok_or_else(|| mismatch(path, "a string", value))?.as_bytes())
        }
        Scalar::Bytes => {
            let text = value.as_str().ok_or_else(|| mismatch(path, "base64 data", value))?;
            let bytes = BASE64.decode(text).map_err(|_| mismatch(path, "base64 data", value))?;
            put_bytes(out, tag, &bytes);
        }
        Scalar::Bool => {
            put_key(out, tag, VARINT);
            put_varint(out, u64::from(value.as_bool().ok_or_else(|| mismatch(path, "a boolean", value))?));
        }
        Scalar::Int32 => {
            let int = value.as_i64().and_then(|i| i32::try_from(i).ok());
            put_int(out, tag, i64::from(int.ok_or_else(|| mismatch(path, "an int32", value))?));
        }
        Scalar::Int64 => put_int(out, tag, value.as_i64().ok_or_else(|| mismatch(path, "an int64", value))?),
        Scalar::Double => {
            let number = value.as_f64().ok_or_else(|| mismatch(path, "a number", value))?;
            put_key(out, tag, FIXED64);
            out.extend_from_slice(&number.to_bits().to_le_bytes());
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// protobuf → JSON.

/// Decodes the bytes of `message` into the JSON its Go type marshals to.
pub fn decode(message: &Message, bytes: &[u8]) -> Result<Value, CodecError> {
    decode_message(message, bytes, 0)
}

fn decode_message(message: &Message, bytes: &[u8], depth: usize) -> Result<Value, CodecError> {
    if depth > MAX_DEPTH {
        return Err(CodecError::TooDeep);
    }
    match message.shape {
        Shape::Special => return decode_special(message, bytes, depth),
        Shape::Wrapper => {
            let mut items = Vec::new();
            if let Some(field) = message.fields.first() {
                let mut reader = Reader::new(bytes);
                while let Some((tag, wire)) = reader.next_field()? {
                    if tag == field.tag {
                        push_repeated(&mut items, field, wire, depth)?;
                    }
                }
            }
            return Ok(Value::Array(items));
        }
        Shape::Struct => {}
    }
    let mut object = Map::new();
    let mut inlined: Vec<Map<String, Value>> = Vec::new();
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.next_field()? {
        let Some(field) = message.fields.iter().find(|f| f.tag == tag) else { continue };
        match field.label {
            Label::One if field.presence == Presence::Inline => {
                let (WireValue::Bytes(inner), Ty::Message(index)) = (wire, field.ty) else {
                    return Err(wrong_wire(message, field));
                };
                if let Value::Object(members) = decode_message(message_at(index), inner, depth + 1)? {
                    inlined.push(members);
                }
            }
            Label::One => {
                let value = decode_single(field, wire, depth).map_err(|e| in_field(e, message, field))?;
                object.insert(field.json.to_owned(), value);
            }
            Label::Repeated => {
                let entry = object.entry(field.json).or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(items) = entry {
                    push_repeated(items, field, wire, depth).map_err(|e| in_field(e, message, field))?;
                }
            }
            Label::Map => {
                let WireValue::Bytes(entry) = wire else { return Err(wrong_wire(message, field)) };
                let (key, value) = decode_map_entry(field, entry, depth).map_err(|e| in_field(e, message, field))?;
                let map = object.entry(field.json).or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, value);
                }
            }
        }
    }
    for field in message.fields {
        let present = object.get(field.json);
        match (field.presence, field.label, field.ty) {
            (Presence::OmitEmpty, Label::One, Ty::Scalar(_)) if present.is_some_and(is_zero) => {
                object.remove(field.json);
            }
            (Presence::Always, Label::One, Ty::Scalar(scalar)) if present.is_none() => {
                object.insert(field.json.to_owned(), zero(scalar));
            }
            _ => {}
        }
    }
    for members in inlined {
        for (key, value) in members {
            object.entry(key).or_insert(value);
        }
    }
    Ok(Value::Object(object))
}

fn in_field(error: CodecError, message: &Message, field: &Field) -> CodecError {
    match error {
        CodecError::Malformed(problem) => CodecError::Malformed(format!("{}.{}: {problem}", message.name, field.json)),
        other => other,
    }
}

fn wrong_wire(message: &Message, field: &Field) -> CodecError {
    CodecError::Malformed(format!("{}.{} has the wrong wire type", message.name, field.json))
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Null => true,
        _ => false,
    }
}

fn zero(scalar: Scalar) -> Value {
    match scalar {
        Scalar::String | Scalar::Bytes => Value::String(String::new()),
        Scalar::Bool => Value::Bool(false),
        Scalar::Int32 | Scalar::Int64 => Value::Number(0.into()),
        Scalar::Double => Value::Number(Number::from_f64(0.0).unwrap_or_else(|| 0.into())),
    }
}

fn push_repeated(items: &mut Vec<Value>, field: &Field, wire: WireValue<'_>, depth: usize) -> Result<(), CodecError> {
    match (field.ty, wire) {
        // Packed numbers (Go writes them unpacked, other encoders may not).
        (Ty::Scalar(scalar @ (Scalar::Int32 | Scalar::Int64 | Scalar::Bool)), WireValue::Bytes(packed)) => {
            let mut reader = Reader::new(packed);
            while !reader.data.is_empty() {
                items.push(scalar_value(scalar, WireValue::Varint(reader.varint()?))?);
            }
        }
        (Ty::Scalar(Scalar::Double), WireValue::Bytes(packed)) => {
            for chunk in packed.chunks(8) {
                let bits: [u8; 8] = chunk.try_into().map_err(|_| CodecError::Truncated)?;
                items.push(scalar_value(Scalar::Double, WireValue::Fixed64(u64::from_le_bytes(bits)))?);
            }
        }
        _ => items.push(decode_single(field, wire, depth)?),
    }
    Ok(())
}

fn decode_single(field: &Field, wire: WireValue<'_>, depth: usize) -> Result<Value, CodecError> {
    match field.ty {
        Ty::Scalar(scalar) => scalar_value(scalar, wire),
        Ty::Message(index) => match wire {
            WireValue::Bytes(inner) => decode_message(message_at(index), inner, depth + 1),
            _ => Err(CodecError::Malformed("a message field has the wrong wire type".into())),
        },
    }
}

fn decode_map_entry(field: &Field, entry: &[u8], depth: usize) -> Result<(String, Value), CodecError> {
    let mut key = String::new();
    let mut value = None;
    let mut reader = Reader::new(entry);
    while let Some((tag, wire)) = reader.next_field()? {
        match tag {
            1 => {
                let Value::String(k) = scalar_value(Scalar::String, wire)? else {
                    unreachable!("strings decode as strings")
                };
                key = k;
            }
            2 => value = Some(decode_single(field, wire, depth)?),
            _ => {}
        }
    }
    let value = match (value, field.ty) {
        (Some(value), _) => value,
        (None, Ty::Scalar(scalar)) => zero(scalar),
        (None, Ty::Message(index)) => decode_message(message_at(index), &[], depth + 1)?,
    };
    Ok((key, value))
}

fn scalar_value(scalar: Scalar, wire: WireValue<'_>) -> Result<Value, CodecError> {
    let wrong = || CodecError::Malformed(format!("a {scalar:?} field has the wrong wire type"));
    Ok(match (scalar, wire) {
        (Scalar::String, WireValue::Bytes(bytes)) => Value::String(
            String::from_utf8(bytes.to_vec()).map_err(|_| CodecError::Malformed("a string is not UTF-8".into()))?,
        ),
        (Scalar::Bytes, WireValue::Bytes(bytes)) => Value::String(BASE64.encode(bytes)),
        (Scalar::Bool, WireValue::Varint(v)) => Value::Bool(v != 0),
        (Scalar::Int32, WireValue::Varint(v)) => Value::Number(i64::from(v as i32).into()),
        (Scalar::Int64, WireValue::Varint(v)) => Value::Number((v as i64).into()),
        (Scalar::Double, WireValue::Fixed64(bits)) => {
            Number::from_f64(f64::from_bits(bits)).map(Value::Number).unwrap_or(Value::Null)
        }
        _ => return Err(wrong()),
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Messages with hand-written JSON.

/// The messages whose JSON form is not their fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// `metav1.Time`: RFC 3339 with seconds (`null` when zero).
    Time,
    /// `metav1.MicroTime`: RFC 3339 with microseconds (`null` when zero).
    MicroTime,
    /// `metav1.Duration`: a Go duration string (`1m30s`).
    Duration,
    /// `intstr.IntOrString`: a number or a string.
    IntOrString,
    /// `resource.Quantity`: a string.
    Quantity,
    /// `FieldsV1`, `RawExtension`, apiextensions `JSON`: raw JSON bytes.
    RawJson,
    /// `JSONSchemaPropsOrArray`: a schema or an array of schemas.
    SchemaOrArray,
    /// `JSONSchemaPropsOrBool`: a schema or a boolean.
    SchemaOrBool,
    /// `JSONSchemaPropsOrStringArray`: a schema or an array of strings.
    SchemaOrStringArray,
}

/// The hand-written JSON form of a message, if it has one.
pub fn special(name: &str) -> Option<Special> {
    const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.";
    const EXTENSIONS: &str = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.";
    Some(match name {
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
        "k8s.io.apimachinery.pkg.api.resource.Quantity" | "k8s.io.apimachinery.pkg.api.resource.QuantityValue" => {
            Special::Quantity
        }
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => Special::RawJson,
        _ => match (name.strip_prefix(META), name.strip_prefix(EXTENSIONS)) {
            (Some("Time"), _) => Special::Time,
            (Some("MicroTime"), _) => Special::MicroTime,
            (Some("Duration"), _) => Special::Duration,
            (Some("FieldsV1"), _) => Special::RawJson,
            (_, Some("JSON")) => Special::RawJson,
            (_, Some("JSONSchemaPropsOrArray")) => Special::SchemaOrArray,
            (_, Some("JSONSchemaPropsOrBool")) => Special::SchemaOrBool,
            (_, Some("JSONSchemaPropsOrStringArray")) => Special::SchemaOrStringArray,
            _ => return None,
        },
    })
}

fn decode_special(message: &Message, bytes: &[u8], depth: usize) -> Result<Value, CodecError> {
    let Some(kind) = special(message.name) else {
        return Err(CodecError::Malformed(format!("{} has no JSON form", message.name)));
    };
    let mut ints = [0i64; 3];
    let mut strings: [Option<&[u8]>; 3] = [None; 3];
    let mut repeated: Vec<&[u8]> = Vec::new();
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.next_field()? {
        let slot = usize::try_from(tag).unwrap_or(usize::MAX).wrapping_sub(1);
        match wire {
            WireValue::Varint(v) if slot < 3 => ints[slot] = v as i64,
            WireValue::Bytes(b) if kind == Special::SchemaOrArray && tag == 2 => repeated.push(b),
            WireValue::Bytes(b) if kind == Special::SchemaOrStringArray && tag == 2 => repeated.push(b),
            WireValue::Bytes(b) if slot < 3 => strings[slot] = Some(b),
            _ => {}
        }
    }
    let text = |b: Option<&[u8]>| -> Result<String, CodecError> {
        String::from_utf8(b.unwrap_or_default().to_vec()).map_err(|_| CodecError::Malformed("not UTF-8".into()))
    };
    let schema = |b: &[u8]| -> Result<Value, CodecError> {
        let props = schema_props("").map_err(|e| CodecError::Malformed(e.to_string()))?;
        decode_message(props, b, depth + 1)
    };
    Ok(match kind {
        // Go keeps the zero time for an empty message and marshals it as null; `Time` drops the nanoseconds.
        Special::Time | Special::MicroTime if bytes.is_empty() => Value::Null,
        Special::Time => {
            let time = jiff::Timestamp::from_second(ints[0]).map_err(|e| CodecError::Malformed(e.to_string()))?;
            Value::String(time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        }
        Special::MicroTime => {
            let nanos = i32::try_from(ints[1]).map_err(|_| CodecError::Malformed("nanos out of range".into()))?;
            let time = jiff::Timestamp::new(ints[0], nanos).map_err(|e| CodecError::Malformed(e.to_string()))?;
            Value::String(time.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        }
        Special::Duration => Value::String(format_go_duration(ints[0])),
        Special::IntOrString if ints[0] == 1 => Value::String(text(strings[2])?),
        Special::IntOrString => Value::Number(i64::from(ints[1] as i32).into()),
        Special::Quantity => Value::String(text(strings[0])?),
        Special::RawJson => match strings[0] {
            None | Some([]) => Value::Null,
            Some(raw) => serde_json::from_slice(raw)
                .map_err(|e| CodecError::Malformed(format!("raw JSON of {}: {e}", message.name)))?,
        },
        Special::SchemaOrArray if !repeated.is_empty() => {
            Value::Array(repeated.into_iter().map(schema).collect::<Result<_, _>>()?)
        }
        Special::SchemaOrArray => strings[0].map(schema).transpose()?.unwrap_or(Value::Null),
        Special::SchemaOrBool => match strings[1] {
            Some(inner) => schema(inner)?,
            None => Value::Bool(ints[0] != 0),
        },
        Special::SchemaOrStringArray if !repeated.is_empty() => {
            Value::Array(repeated.into_iter().map(|b| text(Some(b)).map(Value::String)).collect::<Result<_, _>>()?)
        }
        Special::SchemaOrStringArray => strings[0].map(schema).transpose()?.unwrap_or(Value::Null),
    })
}

/// Go's `time.Duration.String()` of `nanos`: `1h2m3.5s`, `1.5ms`, `0s`.
pub fn format_go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let negative = nanos < 0;
    let magnitude = nanos.unsigned_abs();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    let fraction = |value: u64, unit: u64| {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            return whole.to_string();
        }
        let digits = unit.to_string().len() - 1;
        let rest = format!("{rest:0digits$}");
        format!("{whole}.{}", rest.trim_end_matches('0'))
    };
    if magnitude < 1_000 {
        out.push_str(&format!("{magnitude}ns"));
    } else if magnitude < 1_000_000 {
        out.push_str(&format!("{}µs", fraction(magnitude, 1_000)));
    } else if magnitude < 1_000_000_000 {
        out.push_str(&format!("{}ms", fraction(magnitude, 1_000_000)));
    } else {
        let hours = magnitude / 3_600_000_000_000;
        let minutes = magnitude / 60_000_000_000 % 60;
        let seconds = magnitude % 60_000_000_000;
        if hours > 0 {
            out.push_str(&format!("{hours}h"));
        }
        if hours > 0 || minutes > 0 {
            out.push_str(&format!("{minutes}m"));
        }
        out.push_str(&format!("{}s", fraction(seconds, 1_000_000_000)));
    }
    out
}

/// Go's `time.ParseDuration`: a sequence of decimal numbers with units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`.
pub fn parse_go_duration(text: &str) -> Option<i64> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        if number_end == 0 {
            return None;
        }
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * scale;
    }
    if total > i64::MAX as f64 {
        return None;
    }
    let nanos = total.round() as i64;
    Some(if negative { -nanos } else { nanos })
}
