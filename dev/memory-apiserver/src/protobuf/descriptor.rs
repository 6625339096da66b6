//! The vocabulary of the protobuf schema ([`super::schema`], generated): messages, their fields, and how each
//! maps to the JSON of the Go types. The codec reads it; the generated schema is written in it.

/// A scalar protobuf type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    /// `string`.
    String,
    /// `bytes` (base64 in JSON).
    Bytes,
    /// `bool`.
    Bool,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `double`.
    Double,
}

/// The type of a field: a scalar or a message (an index into [`super::schema::MESSAGES`], see [`super::codec::message_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    /// A scalar.
    Scalar(Scalar),
    /// A message.
    Message(u16),
}

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// One (`optional`).
    One,
    /// A list (`repeated`).
    Repeated,
    /// A map with string keys (`map<string, T>`).
    Map,
}

/// How the Go field shows in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// A pointer: present (even at its zero value) or absent.
    Pointer,
    /// A non-pointer field with `omitempty`: its zero value is left out.
    OmitEmpty,
    /// A non-pointer field without `omitempty`: always there, at least as its zero value.
    Always,
    /// An embedded struct with `json:",inline"`: its fields are members of the enclosing object.
    Inline,
}

/// How a message maps to JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A JSON object of the fields.
    Struct,
    /// A Go named slice (`type ExtraValue []string`): a JSON array of the one repeated field.
    Wrapper,
    /// Hand-written JSON (time, quantities, raw JSON, schema unions): see [`super::codec::special`].
    Special,
}

/// One field of a message.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The protobuf tag.
    pub tag: u32,
    /// The JSON name (empty for inlined structs).
    pub json: &'static str,
    /// The type.
    pub ty: Ty,
    /// One, list or map.
    pub label: Label,
    /// How the field shows in JSON.
    pub presence: Presence,
}

/// One message type.
#[derive(Debug)]
pub struct Message {
    /// The full protobuf name (`k8s.io.api.core.v1.ConfigMap`).
    pub name: &'static str,
    /// How it maps to JSON.
    pub shape: Shape,
    /// Its fields.
    pub fields: &'static [Field],
}

/// A field, for the generated schema.
pub const fn f(tag: u32, json: &'static str, ty: Ty, label: Label, presence: Presence) -> Field {
    Field { tag, json, ty, label, presence }
}

/// `string`, for the generated schema.
pub const STRING: Ty = Ty::Scalar(Scalar::String);
/// `bytes`.
pub const BYTES: Ty = Ty::Scalar(Scalar::Bytes);
/// `bool`.
pub const BOOL: Ty = Ty::Scalar(Scalar::Bool);
/// `int32`.
pub const INT32: Ty = Ty::Scalar(Scalar::Int32);
/// `int64`.
pub const INT64: Ty = Ty::Scalar(Scalar::Int64);
/// `double`.
pub const DOUBLE: Ty = Ty::Scalar(Scalar::Double);
/// [`Label::One`].
pub const ONE: Label = Label::One;
/// [`Label::Repeated`].
pub const REPEATED: Label = Label::Repeated;
/// [`Label::Map`].
pub const MAP: Label = Label::Map;
/// [`Presence::Pointer`].
pub const POINTER: Presence = Presence::Pointer;
/// [`Presence::OmitEmpty`].
pub const OMIT: Presence = Presence::OmitEmpty;
/// [`Presence::Always`].
pub const ALWAYS: Presence = Presence::Always;
/// [`Presence::Inline`].
pub const INLINE: Presence = Presence::Inline;
