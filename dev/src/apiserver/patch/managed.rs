//! Field sets and `metadata.managedFields`: who owns which field, in the `FieldsV1` format upstream uses.
//!
//! A field set holds leaf paths. A path is a list of elements: `f:<field>`, `k:<json key of a list item>` for
//! maps-as-lists (the path of the item itself stands for "the item exists", rendered as `"."`), and
//! `v:<json value>` for set items. Atomic lists and empty objects are leaves.
//!
//! # Invariants
//! - Only `metadata.labels`, `metadata.annotations`, `metadata.finalizers` and `metadata.ownerReferences` of the
//!   metadata are tracked, as upstream does; `apiVersion` and `kind` are not.
//! - Ownership only moves when the object changes: an update that changes nothing leaves every entry alone.

use super::{ListKind, MergeSchema};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// One element of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathElement {
    /// An object member.
    Field(String),
    /// A list item identified by its key fields, as canonical JSON (`{"type":"Ready"}`).
    Key(String),
    /// A set item, as JSON.
    Value(String),
}

/// A path from the object root.
pub type FieldPath = Vec<PathElement>;
/// The fields one manager owns.
pub type FieldSet = BTreeSet<FieldPath>;

const TRACKED_METADATA: [&str; 4] = ["labels", "annotations", "finalizers", "ownerReferences"];

/// The leaf paths of an object.
pub fn object_field_set(object: &Value, schema: &dyn MergeSchema) -> FieldSet {
    let mut set = FieldSet::new();
    let Some(fields) = object.as_object() else { return set };
    for (key, value) in fields {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                for tracked in TRACKED_METADATA {
                    if let Some(value) = value.get(tracked) {
                        let mut names = vec!["metadata".to_owned(), tracked.to_owned()];
                        let mut path = vec![PathElement::Field("metadata".into()), PathElement::Field(tracked.into())];
                        walk(value, schema, &mut names, &mut path, &mut set);
                    }
                }
            }
            _ => {
                let mut names = vec![key.clone()];
                let mut path = vec![PathElement::Field(key.clone())];
                walk(value, schema, &mut names, &mut path, &mut set);
            }
        }
    }
    set
}

fn walk(value: &Value, schema: &dyn MergeSchema, names: &mut Vec<String>, path: &mut FieldPath, out: &mut FieldSet) {
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            for (key, child) in fields {
                names.push(key.clone());
                path.push(PathElement::Field(key.clone()));
                walk(child, schema, names, path, out);
                path.pop();
                names.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match schema.list_kind(names) {
            ListKind::Atomic => {
                out.insert(path.clone());
            }
            ListKind::Set => {
                for item in items {
                    path.push(PathElement::Value(item.to_string()));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListKind::Map(keys) => {
                for item in items {
                    let Some(key) = item_key(item, &keys) else {
                        out.insert(path.clone());
                        continue;
                    };
                    path.push(PathElement::Key(key));
                    out.insert(path.clone());
                    if let Some(fields) = item.as_object() {
                        for (field, child) in fields {
                            names.push(field.clone());
                            path.push(PathElement::Field(field.clone()));
                            walk(child, schema, names, path, out);
                            path.pop();
                            names.pop();
                        }
                    }
                    path.pop();
                }
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The canonical JSON of a list item's key fields, or `None` when a key field is missing.
pub fn item_key(item: &Value, keys: &[String]) -> Option<String> {
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    let mut map = Map::new();
    for key in sorted {
        map.insert(key.clone(), item.get(key)?.clone());
    }
    Some(Value::Object(map).to_string())
}

/// The value at `path`, if present.
pub fn value_at<'a>(root: &'a Value, path: &[PathElement]) -> Option<&'a Value> {
    path.iter().try_fold(root, |cursor, element| match element {
        PathElement::Field(name) => cursor.get(name),
        PathElement::Key(key) => {
            let key: Map<String, Value> = serde_json::from_str(key).ok()?;
            cursor.as_array()?.iter().find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v)))
        }
        PathElement::Value(value) => {
            let value: Value = serde_json::from_str(value).ok()?;
            cursor.as_array()?.iter().find(|item| **item == value)
        }
    })
}

/// Removes the field, list item or set value at `path`.
pub fn remove_at(root: &mut Value, path: &[PathElement]) {
    let Some((last, parent)) = path.split_last() else { return };
    let mut cursor = root;
    for element in parent {
        let next = match element {
            PathElement::Field(name) => cursor.get_mut(name),
            PathElement::Key(key) => {
                let Ok(key) = serde_json::from_str::<Map<String, Value>>(key) else { return };
                cursor
                    .as_array_mut()
                    .and_then(|items| items.iter_mut().find(|item| key.iter().all(|(k, v)| item.get(k) == Some(v))))
            }
            PathElement::Value(_) => None,
        };
        match next {
            Some(next) => cursor = next,
            None => return,
        }
    }
    match last {
        PathElement::Field(name) => {
            if let Some(fields) = cursor.as_object_mut() {
                fields.remove(name);
            }
        }
        PathElement::Key(key) => {
            if let (Ok(key), Some(items)) = (serde_json::from_str::<Map<String, Value>>(key), cursor.as_array_mut()) {
                items.retain(|item| !key.iter().all(|(k, v)| item.get(k) == Some(v)));
            }
        }
        PathElement::Value(value) => {
            if let (Ok(value), Some(items)) = (serde_json::from_str::<Value>(value), cursor.as_array_mut()) {
                items.retain(|item| *item != value);
            }
        }
    }
}

/// `.spec.x`, `.status.conditions[type="Ready"].status`: how upstream prints a path in conflict messages.
pub fn render_path(path: &[PathElement]) -> String {
    let mut out = String::new();
    for element in path {
        match element {
            PathElement::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            PathElement::Key(key) => {
                let rendered = serde_json::from_str::<Map<String, Value>>(key)
                    .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
                    .unwrap_or_else(|_| key.clone());
                out.push_str(&format!("[{rendered}]"));
            }
            PathElement::Value(value) => out.push_str(&format!("[={value}]")),
        }
    }
    out
}

/// The `fieldsV1` JSON of a field set.
pub fn encode(set: &FieldSet) -> Value {
    let mut root = json!({});
    for path in set {
        let mut node = &mut root;
        for element in path {
            let key = match element {
                PathElement::Field(name) => format!("f:{name}"),
                PathElement::Key(key) => format!("k:{key}"),
                PathElement::Value(value) => format!("v:{value}"),
            };
            if !node.get(&key).is_some_and(Value::is_object) {
                node[key.as_str()] = json!({});
            }
            node = &mut node[key.as_str()];
        }
        if matches!(path.last(), Some(PathElement::Key(_))) {
            node["."] = json!({});
        }
    }
    root
}

/// The field set of a `fieldsV1` JSON; unknown prefixes are skipped.
pub fn decode(fields: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    decode_into(fields, &mut Vec::new(), &mut set);
    set
}

fn decode_into(node: &Value, path: &mut FieldPath, out: &mut FieldSet) {
    let Some(fields) = node.as_object() else { return };
    for (key, child) in fields {
        if key == "." {
            out.insert(path.clone());
            continue;
        }
        let element = if let Some(name) = key.strip_prefix("f:") {
            PathElement::Field(name.to_owned())
        } else if let Some(k) = key.strip_prefix("k:") {
            PathElement::Key(k.to_owned())
        } else if let Some(v) = key.strip_prefix("v:") {
            PathElement::Value(v.to_owned())
        } else {
            continue;
        };
        path.push(element);
        if child.as_object().is_none_or(Map::is_empty) {
            out.insert(path.clone());
        } else {
            decode_into(child, path, out);
        }
        path.pop();
    }
}

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    /// `manager`.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// `apiVersion` of the write.
    pub api_version: String,
    /// `time` of the last change of the set.
    pub time: String,
    /// `subresource` (`status`), if the write went through one.
    pub subresource: Option<String>,
    /// The owned fields.
    pub fields: FieldSet,
}

impl ManagedEntry {
    /// True for the entry of `writer`'s updates: the identity of an `Update` entry is its manager, apiVersion
    /// and subresource (upstream `BuildManagerIdentifier`).
    fn is_update_of(&self, writer: &Writer<'_>) -> bool {
        self.operation == "Update"
            && self.manager == writer.manager
            && self.api_version == writer.api_version
            && self.subresource.as_deref() == writer.subresource
    }
}

/// The entries of `metadata.managedFields` (malformed entries are skipped).
pub fn read_entries(object: &Value) -> Vec<ManagedEntry> {
    let Some(entries) = object.pointer("/metadata/managedFields").and_then(Value::as_array) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            Some(ManagedEntry {
                manager: entry.get("manager")?.as_str()?.to_owned(),
                operation: entry.get("operation").and_then(Value::as_str).unwrap_or("Update").to_owned(),
                api_version: entry.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_owned(),
                time: entry.get("time").and_then(Value::as_str).unwrap_or_default().to_owned(),
                subresource: entry.get("subresource").and_then(Value::as_str).map(str::to_owned),
                fields: entry.get("fieldsV1").map(decode).unwrap_or_default(),
            })
        })
        .collect()
}

/// Writes `entries` as `metadata.managedFields` (removing the field when there are none).
pub fn write_entries(object: &mut Value, entries: &[ManagedEntry]) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    if entries.is_empty() {
        metadata.remove("managedFields");
        return;
    }
    let rendered: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut entry = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(&e.fields),
            });
            if let Some(subresource) = &e.subresource {
                entry["subresource"] = json!(subresource);
            }
            entry
        })
        .collect();
    metadata.insert("managedFields".into(), Value::Array(rendered));
}

/// Who writes and how, for the bookkeeping of one write.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// `apiVersion` the write was made with.
    pub api_version: &'a str,
    /// The subresource written through, if any.
    pub subresource: Option<&'a str>,
    /// Now, as `managedFields[].time` wants it.
    pub now: &'a str,
}

/// At most this many managers of `Update` operations keep their own entry; the oldest beyond it are merged into
/// one `ancient-changes` entry per apiVersion (upstream's `DefaultMaxUpdateManagers`).
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager that the entries merged by [`MAX_UPDATE_MANAGERS`] go to.
const ANCIENT_CHANGES: &str = "ancient-changes";

/// What a write request says about `metadata.managedFields` (upstream `decodeLiveOrNew`).
#[derive(Debug, Clone, PartialEq)]
pub enum Requested {
    /// No usable entries: the live object's entries stand.
    Live,
    /// `[]` or `[{}]`: the request clears the entries.
    Reset,
    /// Entries the request sets (`kubectl replace` of an object read before, or an edit of them).
    Entries(Vec<ManagedEntry>),
}

impl Requested {
    /// Reads the request body's `metadata.managedFields` (before decoding drops empty lists).
    pub fn of(body: &Value) -> Requested {
        match body.pointer("/metadata/managedFields").and_then(Value::as_array) {
            Some(list) if list.is_empty() => Requested::Reset,
            Some(list) if list.len() == 1 && list[0].as_object().is_some_and(Map::is_empty) => Requested::Reset,
            Some(_) => match read_entries(body) {
                entries if entries.is_empty() => Requested::Live,
                entries => Requested::Entries(entries),
            },
            None => Requested::Live,
        }
    }
}

/// Records a non-apply write as upstream's field manager does, and writes the entries into `new`.
///
/// `old` is the live object (`None` on create). The entries start from the request's when it sets some through
/// the main endpoint, else from the live object's. An existing object without entries stays without (upstream
/// skips tracking objects that were never tracked; a create is always tracked). The writer takes over every field
/// whose value it changed or added, fields the write removed leave every entry, entries left empty go, and
/// `time` moves only for the writer and only when it changed something.
pub fn track_update(
    old: Option<&Value>,
    requested: Requested,
    new: &mut Value,
    writer: &Writer<'_>,
    schema: &dyn MergeSchema,
) {
    let live = || old.map(read_entries).unwrap_or_default();
    let mut entries = match (writer.subresource, requested) {
        (Some(_), _) | (None, Requested::Live) => live(),
        (None, Requested::Reset) => Vec::new(),
        (None, Requested::Entries(entries)) => entries,
    };
    if entries.is_empty() && old.is_some() {
        write_entries(new, &[]);
        return;
    }
    let old_set = old.map(|o| object_field_set(o, schema)).unwrap_or_default();
    let new_set = object_field_set(new, schema);
    let changed: FieldSet = new_set
        .iter()
        .filter(|path| match old {
            None => true,
            Some(old) => !old_set.contains(*path) || value_at(old, path) != value_at(new, path),
        })
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    if !changed.is_empty() || !removed.is_empty() {
        for entry in &mut entries {
            entry.fields.retain(|p| !changed.contains(p) && !removed.contains(p));
        }
        if !changed.is_empty() {
            let position = entries.iter().position(|e| e.is_update_of(writer));
            let index = match position {
                Some(i) => i,
                None => {
                    entries.push(ManagedEntry {
                        manager: writer.manager.to_owned(),
                        operation: "Update".into(),
                        api_version: writer.api_version.to_owned(),
                        time: String::new(),
                        subresource: writer.subresource.map(str::to_owned),
                        fields: FieldSet::new(),
                    });
                    entries.len() - 1
                }
            };
            entries[index].fields.extend(changed);
            entries[index].time = writer.now.to_owned();
        }
        entries.retain(|e| !e.fields.is_empty());
        cap_update_managers(&mut entries);
    }
    write_entries(new, &entries);
}

/// Merges the oldest `Update` entries beyond [`MAX_UPDATE_MANAGERS`] into `ancient-changes` entries, one per
/// apiVersion (upstream `capManagersManager`): ordered by time, then name; per apiVersion the first of them
/// becomes the bucket, the later ones are merged into it.
fn cap_update_managers(entries: &mut Vec<ManagedEntry>) {
    let updaters = || entries.iter().filter(|e| e.operation == "Update").count();
    let mut length = updaters();
    if length <= MAX_UPDATE_MANAGERS {
        return;
    }
    let mut order: Vec<usize> = (0..entries.len()).filter(|i| entries[*i].operation == "Update").collect();
    order.sort_by(|a, b| {
        let (a, b) = (&entries[*a], &entries[*b]);
        a.time.cmp(&b.time).then_with(|| a.manager.cmp(&b.manager))
    });
    let mut first_of_version: Vec<(String, usize)> = Vec::new();
    let mut gone = vec![false; entries.len()];
    for index in order {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[index].api_version.clone();
        match first_of_version.iter().find(|(v, _)| *v == version).map(|(_, first)| *first) {
            Some(first) => {
                let existing = entries.iter().enumerate().position(|(i, e)| {
                    !gone[i]
                        && e.manager == ANCIENT_CHANGES
                        && e.operation == "Update"
                        && e.api_version == version
                        && e.subresource.is_none()
                });
                let merged = std::mem::take(&mut entries[index].fields);
                let time = entries[index].time.clone();
                let bucket = &mut entries[existing.unwrap_or(first)];
                bucket.manager = ANCIENT_CHANGES.to_owned();
                bucket.subresource = None;
                bucket.fields.extend(merged);
                bucket.time = time;
                gone[index] = true;
                length -= 1;
            }
            None => first_of_version.push((version, index)),
        }
    }
    let mut index = 0;
    entries.retain(|_| {
        index += 1;
        !gone[index - 1]
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Conditions;

    impl MergeSchema for Conditions {
        fn list_kind(&self, path: &[String]) -> ListKind {
            match path.join(".").as_str() {
                "status.conditions" => ListKind::Map(vec!["type".into()]),
                "metadata.finalizers" => ListKind::Set,
                _ => ListKind::Atomic,
            }
        }
    }

    #[test]
    fn field_sets_round_trip_through_fields_v1() {
        let object = json!({"apiVersion": "v1", "kind": "X",
            "metadata": {"name": "x", "labels": {"a": "1"}, "finalizers": ["f"]},
            "spec": {"x": 1, "list": [1, 2], "empty": {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let set = object_field_set(&object, &Conditions);
        let encoded = encode(&set);
        assert_eq!(
            encoded,
            json!({
                "f:metadata": {"f:labels": {"f:a": {}}, "f:finalizers": {"v:\"f\"": {}}},
                "f:spec": {"f:x": {}, "f:list": {}, "f:empty": {}},
                "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:type": {}, "f:status": {}}}}
            })
        );
        assert_eq!(decode(&encoded), set);
    }

    #[test]
    fn values_are_found_and_removed_by_path() {
        let mut object = json!({"status": {"conditions": [{"type": "A", "status": "1"}, {"type": "B", "status": "2"}]},
            "metadata": {"finalizers": ["x", "y"]}});
        let path = vec![
            PathElement::Field("status".into()),
            PathElement::Field("conditions".into()),
            PathElement::Key("{\"type\":\"B\"}".into()),
            PathElement::Field("status".into()),
        ];
        assert_eq!(value_at(&object, &path), Some(&json!("2")));
        assert_eq!(render_path(&path), ".status.conditions[type=\"B\"].status");
        remove_at(&mut object, &path[..3]);
        assert_eq!(object["status"]["conditions"], json!([{"type": "A", "status": "1"}]));
        remove_at(
            &mut object,
            &[
                PathElement::Field("metadata".into()),
                PathElement::Field("finalizers".into()),
                PathElement::Value("\"x\"".into()),
            ],
        );
        assert_eq!(object["metadata"]["finalizers"], json!(["y"]));
    }

    #[test]
    fn an_update_takes_over_the_fields_it_changes() {
        let writer = |m| Writer { manager: m, api_version: "v1", subresource: None, now: "t" };
        let mut first = json!({"metadata": {}, "spec": {"a": 1, "b": 1}});
        track_update(None, Requested::Live, &mut first, &writer("one"), &Conditions);
        let mut second = json!({"metadata": first["metadata"].clone(), "spec": {"a": 2, "b": 1}});
        track_update(Some(&first), Requested::Live, &mut second, &writer("two"), &Conditions);
        let entries = read_entries(&second);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].manager, "one");
        assert_eq!(render_paths(&entries[0].fields), vec![".spec.b"]);
        assert_eq!(render_paths(&entries[1].fields), vec![".spec.a"]);
        let mut third = second.clone();
        track_update(Some(&second), Requested::Live, &mut third, &writer("three"), &Conditions);
        assert_eq!(read_entries(&third).len(), 2, "a write that changes nothing moves nothing");
    }

    #[test]
    fn an_untracked_object_stays_untracked_and_a_reset_clears_the_entries() {
        let writer = Writer { manager: "w", api_version: "v1", subresource: None, now: "t" };
        let live = json!({"metadata": {}, "spec": {"a": 1}});
        let mut new = json!({"metadata": {}, "spec": {"a": 2}});
        track_update(Some(&live), Requested::Live, &mut new, &writer, &Conditions);
        assert!(new["metadata"].get("managedFields").is_none(), "upstream skips objects that were never tracked");

        let mut tracked = json!({"metadata": {}, "spec": {"a": 1}});
        track_update(None, Requested::Live, &mut tracked, &writer, &Conditions);
        let mut reset = tracked.clone();
        reset["spec"]["a"] = json!(3);
        track_update(Some(&tracked), Requested::Reset, &mut reset, &writer, &Conditions);
        assert!(reset["metadata"].get("managedFields").is_none());
        assert_eq!(Requested::of(&json!({"metadata": {"managedFields": [{}]}})), Requested::Reset);
        assert_eq!(Requested::of(&json!({"metadata": {"managedFields": []}})), Requested::Reset);
        assert_eq!(Requested::of(&json!({"metadata": {}})), Requested::Live);
    }

    #[test]
    fn a_status_write_starts_from_the_live_entries_whatever_the_request_says() {
        let main = Writer { manager: "creator", api_version: "v1", subresource: None, now: "t1" };
        let mut live = json!({"metadata": {}, "spec": {"a": 1}, "status": {"s": 1}});
        track_update(None, Requested::Live, &mut live, &main, &Conditions);
        let status = Writer { manager: "kubelet", api_version: "v1", subresource: Some("status"), now: "t2" };
        let mut new = live.clone();
        new["status"]["s"] = json!(2);
        track_update(Some(&live), Requested::Reset, &mut new, &status, &Conditions);
        let entries = read_entries(&new);
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[1].manager.as_str(), entries[1].subresource.as_deref()), ("kubelet", Some("status")));
        assert_eq!(render_paths(&entries[1].fields), vec![".status.s"]);
    }

    #[test]
    fn more_than_ten_update_managers_age_into_ancient_changes() {
        let mut object = json!({"metadata": {}, "spec": {}});
        for i in 0..12 {
            let (manager, now) = (format!("m{i:02}"), format!("2026-01-01T00:00:{i:02}Z"));
            let writer = Writer { manager: &manager, api_version: "v1", subresource: None, now: &now };
            let old = object.clone();
            object["spec"][format!("f{i}")] = json!(i);
            track_update((i > 0).then_some(&old), Requested::Live, &mut object, &writer, &Conditions);
        }
        let entries = read_entries(&object);
        assert_eq!(entries.len(), MAX_UPDATE_MANAGERS);
        let ancient = entries.iter().find(|e| e.manager == ANCIENT_CHANGES).unwrap();
        assert_eq!(render_paths(&ancient.fields), vec![".spec.f0", ".spec.f1", ".spec.f2"]);
        assert_eq!(ancient.time, "2026-01-01T00:00:02Z");
        assert!(!entries.iter().any(|e| ["m00", "m01", "m02"].contains(&e.manager.as_str())));
    }

    fn render_paths(set: &FieldSet) -> Vec<String> {
        set.iter().map(|p| render_path(p)).collect()
    }
}
