//! Stored objects: serialized JSON bytes plus a small parsed index, and the metadata helpers every write uses.
//!
//! # Invariants
//! - `StoredObject::bytes` is the complete object as served, `metadata.resourceVersion` included, so lists and
//!   watch events never re-serialize: they copy (`Bytes` clones are reference counts).
//! - The index holds exactly what selectors and watcher fan-out read: namespace, name, labels and the values of the
//!   kind's selectable fields, each set as one allocation.

use super::resource::ResourceType;
use super::selector::{FieldRef, FieldSelector, LabelSelector};
use bytes::Bytes;
use rand::Rng;
use serde_json::{Map, Value};
use std::sync::Arc;

/// The key of an object in its kind's map: `namespace/name`, or `name` for cluster-scoped kinds. Its byte order is
/// etcd's key order, which lists follow.
pub type ObjectKey = Arc<str>;

/// The key of `name` in `namespace`.
pub fn object_key(namespace: Option<&str>, name: &str) -> ObjectKey {
    match namespace {
        Some(ns) => Arc::from(format!("{ns}/{name}")),
        None => Arc::from(name),
    }
}

/// One stored version of an object.
#[derive(Debug)]
pub struct StoredObject {
    /// The JSON of the object as served.
    pub bytes: Bytes,
    /// Its `metadata.resourceVersion`.
    pub rv: u64,
    /// What selectors and watcher fan-out read.
    pub index: ObjectIndex,
}

/// The parsed part of a stored object.
#[derive(Debug, Clone)]
pub struct ObjectIndex {
    /// `metadata.namespace` (empty for cluster-scoped kinds).
    pub namespace: Box<str>,
    /// `metadata.name`.
    pub name: Box<str>,
    /// `metadata.uid`.
    pub uid: Box<str>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `k\0v\0k\0v...`.
    labels: Box<str>,
    /// The selectable field values, in the order of `ResourceType::selectable_fields`, `\0`-separated.
    fields: Box<str>,
}

impl ObjectIndex {
    /// Builds the index of `object` for its kind.
    pub fn of(rt: &ResourceType, object: &Value) -> ObjectIndex {
        let metadata = object.get("metadata");
        let text = |key: &str| metadata.and_then(|m| m.get(key)).and_then(Value::as_str).unwrap_or_default();
        let mut labels = String::new();
        if let Some(map) = metadata.and_then(|m| m.get("labels")).and_then(Value::as_object) {
            for (key, value) in map {
                if !labels.is_empty() {
                    labels.push('\0');
                }
                labels.push_str(key);
                labels.push('\0');
                labels.push_str(value.as_str().unwrap_or_default());
            }
        }
        let fields: Vec<String> = rt.selectable_fields.iter().map(|f| f.value_of(object)).collect();
        ObjectIndex {
            namespace: text("namespace").into(),
            name: text("name").into(),
            uid: text("uid").into(),
            deleting: is_deleting(object),
            labels: labels.into(),
            fields: fields.join("\0").into(),
        }
    }

    /// The value of a label.
    pub fn label(&self, key: &str) -> Option<&str> {
        if self.labels.is_empty() {
            return None;
        }
        let mut parts = self.labels.split('\0');
        while let (Some(k), Some(v)) = (parts.next(), parts.next()) {
            if k == key {
                return Some(v);
            }
        }
        None
    }

    /// The value of the n-th selectable field.
    pub fn field(&self, index: usize) -> &str {
        self.fields.split('\0').nth(index).unwrap_or_default()
    }

    /// The value a field selector compares.
    pub fn field_ref(&self, field: FieldRef) -> &str {
        match field {
            FieldRef::Name => &self.name,
            FieldRef::Namespace => &self.namespace,
            FieldRef::Custom(index) => self.field(index),
        }
    }
}

/// Namespace, label and field constraints of a list or watch.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// The label selector.
    pub labels: LabelSelector,
    /// The field selector.
    pub fields: FieldSelector,
}

impl Filter {
    /// True when the object passes every constraint.
    pub fn matches(&self, index: &ObjectIndex) -> bool {
        self.namespace.as_deref().is_none_or(|ns| *index.namespace == *ns)
            && self.labels.matches(|key| index.label(key))
            && self.fields.matches(|field| index.field_ref(field))
    }
}

impl StoredObject {
    /// Serializes `object` (whose `metadata.resourceVersion` must already be `rv`).
    pub fn new(rt: &ResourceType, object: &Value, rv: u64) -> Arc<StoredObject> {
        let bytes = Bytes::from(serde_json::to_vec(object).unwrap_or_default());
        Arc::new(StoredObject { bytes, rv, index: ObjectIndex::of(rt, object) })
    }

    /// Parses the stored JSON.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.bytes).unwrap_or(Value::Null)
    }

    /// The object with `metadata.resourceVersion` set to `rv`, as DELETED events and selector transitions need.
    pub fn restamped(&self, rt: &ResourceType, rv: u64) -> Arc<StoredObject> {
        let mut value = self.value();
        set_resource_version(&mut value, rv);
        StoredObject::new(rt, &value, rv)
    }
}

/// `metadata` as a map, created when missing (or not an object).
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let Value::Object(fields) = object else { unreachable!("made an object above") };
    let metadata = fields.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    let Value::Object(metadata) = metadata else { unreachable!("made an object above") };
    metadata
}

/// Drops what a Go client and the real server never write into `metadata`: the `omitempty` fields of
/// `ObjectMeta` at their zero value. Empty `labels`, `annotations`, `finalizers`, `ownerReferences` and
/// `managedFields`, empty strings and a zero `generation` are omitted, so that `{"metadata":{"finalizers":[]}}`
/// is stored as no finalizers at all (kube-runtime's first-finalizer patch tests `/metadata/finalizers` for null).
pub fn omit_empty_metadata(object: &mut Value) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    metadata.retain(|key, value| match key.as_str() {
        "labels" | "annotations" => value.as_object().is_some_and(|m| !m.is_empty()),
        "finalizers" | "ownerReferences" | "managedFields" => value.as_array().is_some_and(|a| !a.is_empty()),
        "name" | "generateName" | "namespace" | "selfLink" | "uid" | "resourceVersion" => {
            value.as_str().is_some_and(|s| !s.is_empty())
        }
        "generation" => value.as_i64().is_some_and(|g| g != 0),
        _ => true,
    });
}

/// A string field of `metadata`.
pub fn meta_str<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.get("metadata")?.get(key)?.as_str()
}

/// `metadata.name` (empty when missing).
pub fn name_of(object: &Value) -> &str {
    meta_str(object, "name").unwrap_or_default()
}

/// Sets `metadata.resourceVersion`.
pub fn set_resource_version(object: &mut Value, rv: u64) {
    metadata_mut(object).insert("resourceVersion".into(), Value::String(rv.to_string()));
}

/// `metadata.finalizers` (empty when missing).
pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// True when `metadata.deletionTimestamp` is set.
pub fn is_deleting(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null())
}

/// Now in RFC 3339 with seconds precision, as `metav1.Time` serializes.
pub fn now_rfc3339() -> String {
    format_time(jiff::Timestamp::now())
}

/// Now with microseconds, as `metav1.MicroTime` serializes.
pub fn now_micro() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// `t` in RFC 3339 with seconds precision.
pub fn format_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses an RFC 3339 time.
pub fn parse_time(text: &str) -> Option<jiff::Timestamp> {
    text.parse().ok()
}

/// A random version-4 UUID.
pub fn new_uid() -> String {
    let mut bytes: [u8; 16] = rand::rng().random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// The alphabet upstream's `utilrand.String` draws from: no vowels, no confusable characters.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Five random characters for `generateName`.
pub fn generated_suffix() -> String {
    let mut rng = rand::rng();
    (0..5).map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::builtin_types;
    use serde_json::json;

    #[test]
    fn the_index_reads_labels_and_selectable_fields() {
        let pods = builtin_types().into_iter().find(|t| t.plural == "pods").unwrap();
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": ""}},
                         "spec": {"nodeName": "n1", "hostNetwork": true}, "status": {"phase": "Running"}});
        let index = ObjectIndex::of(&pods, &pod);
        assert_eq!(index.label("app"), Some("web"));
        assert_eq!(index.label("tier"), Some(""));
        assert_eq!(index.label("nope"), None);
        let node = pods.selectable_fields.iter().position(|f| f.name == "spec.nodeName").unwrap();
        assert_eq!(index.field(node), "n1");
        let host = pods.selectable_fields.iter().position(|f| f.name == "spec.hostNetwork").unwrap();
        assert_eq!(index.field(host), "true");
        let nominated = pods.selectable_fields.iter().position(|f| f.name == "status.nominatedNodeName").unwrap();
        assert_eq!(index.field(nominated), "");
    }

    #[test]
    fn generated_names_and_uids_have_the_upstream_shape() {
        let suffix = generated_suffix();
        assert_eq!(suffix.len(), 5);
        assert!(suffix.bytes().all(|b| NAME_ALPHABET.contains(&b)));
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
    }

    #[test]
    fn times_have_seconds_and_microseconds_precision() {
        assert!(now_rfc3339().ends_with('Z'));
        assert_eq!(now_rfc3339().len(), "2026-01-01T00:00:00Z".len());
        assert_eq!(now_micro().len(), "2026-01-01T00:00:00.123456Z".len());
    }
}
