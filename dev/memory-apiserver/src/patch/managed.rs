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

/// Which top-level fields a write through an endpoint can change (upstream's "reset fields"): the main endpoint
/// of a kind with a status subresource never changes `status`, the status endpoint changes only `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every field.
    Whole,
    /// Everything but `status`.
    WithoutStatus,
    /// Only `status`.
    StatusOnly,
}

impl Scope {
    fn includes(self, key: &str) -> bool {
        match self {
            Scope::Whole => true,
            Scope::WithoutStatus => key != "status",
            Scope::StatusOnly => key == "status",
        }
    }
}

/// What a write changed, in one walk of both versions: the leaf paths of `new` that `old` lacks or holds with
/// another value (a list item counts as changed when anything in it changed), and the leaf paths of `old` that
/// `new` lacks. `old` is `None` for a create.
pub fn changes(old: Option<&Value>, new: &Value, schema: &dyn MergeSchema, scope: Scope) -> (FieldSet, FieldSet) {
    let (mut changed, mut removed) = (FieldSet::new(), FieldSet::new());
    let empty = Map::new();
    let old_fields = old.and_then(Value::as_object).unwrap_or(&empty);
    let new_fields = new.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = old_fields.keys().chain(new_fields.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut diff = Diff { schema, changed: &mut changed, removed: &mut removed };
    for key in keys {
        if matches!(key.as_str(), "apiVersion" | "kind") || !scope.includes(key) {
            continue;
        }
        if key == "metadata" {
            for tracked in TRACKED_METADATA {
                fn at<'v>(fields: &'v Map<String, Value>, tracked: &str) -> Option<&'v Value> {
                    fields.get("metadata").and_then(|m| m.get(tracked))
                }
                let mut names = vec!["metadata".to_owned(), tracked.to_owned()];
                let mut path = vec![PathElement::Field("metadata".into()), PathElement::Field(tracked.into())];
                diff.values(at(old_fields, tracked), at(new_fields, tracked), &mut names, &mut path);
            }
            continue;
        }
        let mut names = vec![key.clone()];
        let mut path = vec![PathElement::Field(key.clone())];
        diff.values(old_fields.get(key), new_fields.get(key), &mut names, &mut path);
    }
    (changed, removed)
}

struct Diff<'a> {
    schema: &'a dyn MergeSchema,
    changed: &'a mut FieldSet,
    removed: &'a mut FieldSet,
}

fn is_leaf_object(fields: &Map<String, Value>) -> bool {
    fields.is_empty()
}

fn is_leaf(value: &Value) -> bool {
    match value {
        Value::Object(fields) => fields.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => true,
    }
}

impl Diff<'_> {
    /// Compares the values at `path`; true when anything there changed.
    fn values(
        &mut self,
        old: Option<&Value>,
        new: Option<&Value>,
        names: &mut Vec<String>,
        path: &mut FieldPath,
    ) -> bool {
        match (old, new) {
            (None, None) => false,
            (Some(old), None) => {
                walk(old, self.schema, names, path, self.removed);
                true
            }
            (None, Some(new)) => {
                walk(new, self.schema, names, path, self.changed);
                true
            }
            (Some(old), Some(new)) if is_leaf(old) && is_leaf(new) => {
                if old != new {
                    self.changed.insert(path.clone());
                }
                old != new
            }
            (Some(old_value @ Value::Object(old)), Some(new_value @ Value::Object(new)))
                if !is_leaf_object(old) && !is_leaf_object(new) =>
            {
                self.object_fields(Some(old_value), Some(new_value), names, path)
            }
            (Some(old @ Value::Array(old_items)), Some(new @ Value::Array(new_items)))
                if !old_items.is_empty() && !new_items.is_empty() =>
            {
                self.lists(old_items, new_items, names, path, old, new)
            }
            // A leaf on one side and not on the other (or another type): the old leaves go, the new ones come.
            (Some(old), Some(new)) => {
                walk(old, self.schema, names, path, self.removed);
                walk(new, self.schema, names, path, self.changed);
                true
            }
        }
    }

    fn lists(
        &mut self,
        old_items: &[Value],
        new_items: &[Value],
        names: &mut Vec<String>,
        path: &mut FieldPath,
        old: &Value,
        new: &Value,
    ) -> bool {
        match self.schema.list_kind(names) {
            ListKind::Atomic => {
                if old != new {
                    self.changed.insert(path.clone());
                }
                old != new
            }
            ListKind::Set => {
                let mut any = false;
                for item in new_items.iter().filter(|i| !old_items.contains(i)) {
                    path.push(PathElement::Value(item.to_string()));
                    self.changed.insert(path.clone());
                    path.pop();
                    any = true;
                }
                for item in old_items.iter().filter(|i| !new_items.contains(i)) {
                    path.push(PathElement::Value(item.to_string()));
                    self.removed.insert(path.clone());
                    path.pop();
                    any = true;
                }
                any
            }
            ListKind::Map(keys) => {
                let keyed = |items: &[Value]| -> Option<Vec<(String, usize)>> {
                    items.iter().enumerate().map(|(i, item)| item_key(item, &keys).map(|k| (k, i))).collect()
                };
                let (Some(old_keys), Some(new_keys)) = (keyed(old_items), keyed(new_items)) else {
                    // Items without their keys make the list one leaf, as in `object_field_set`.
                    walk(old, self.schema, names, path, self.removed);
                    walk(new, self.schema, names, path, self.changed);
                    return old != new;
                };
                let mut any = false;
                for (key, index) in &new_keys {
                    path.push(PathElement::Key(key.clone()));
                    let item = &new_items[*index];
                    match old_keys.iter().find(|(k, _)| k == key) {
                        None => {
                            self.changed.insert(path.clone());
                            self.object_fields(None, Some(item), names, path);
                            any = true;
                        }
                        Some((_, old_index)) => {
                            if self.object_fields(Some(&old_items[*old_index]), Some(item), names, path) {
                                self.changed.insert(path.clone());
                                any = true;
                            }
                        }
                    }
                    path.pop();
                }
                for (key, index) in &old_keys {
                    if new_keys.iter().any(|(k, _)| k == key) {
                        continue;
                    }
                    path.push(PathElement::Key(key.clone()));
                    self.removed.insert(path.clone());
                    self.object_fields(Some(&old_items[*index]), None, names, path);
                    path.pop();
                    any = true;
                }
                any
            }
        }
    }

    /// Compares two objects (a missing one has no fields) field by field; true when any changed.
    fn object_fields(
        &mut self,
        old: Option<&Value>,
        new: Option<&Value>,
        names: &mut Vec<String>,
        path: &mut FieldPath,
    ) -> bool {
        let empty = Map::new();
        let old_fields = old.and_then(Value::as_object).unwrap_or(&empty);
        let new_fields = new.and_then(Value::as_object).unwrap_or(&empty);
        let mut keys: Vec<&String> = old_fields.keys().chain(new_fields.keys()).collect();
        keys.sort();
        keys.dedup();
        let mut any = false;
        for key in keys {
            names.push(key.clone());
            path.push(PathElement::Field(key.clone()));
            any |= self.values(old_fields.get(key), new_fields.get(key), names, path);
            path.pop();
            names.pop();
        }
        any
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
    /// Entries the request sets (`kubectl replace` of an object read before, or an edit of them), as JSON.
    Entries(Vec<Value>),
}

impl Requested {
    /// Reads the request body's `metadata.managedFields` (before decoding drops empty lists).
    pub fn of(body: &Value) -> Requested {
        match body.pointer("/metadata/managedFields").and_then(Value::as_array) {
            Some(list) if list.is_empty() => Requested::Reset,
            Some(list) if list.len() == 1 && list[0].as_object().is_some_and(Map::is_empty) => Requested::Reset,
            Some(list) => {
                let valid: Vec<Value> =
                    list.iter().filter(|e| e.get("manager").and_then(Value::as_str).is_some()).cloned().collect();
                if valid.is_empty() { Requested::Live } else { Requested::Entries(valid) }
            }
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
/// `time` moves only for the writer and only when it changed something. Only the fields the endpoint can change
/// count (`scope`).
///
/// The entries are edited in their `fieldsV1` form: a write costs in proportion to what it changed, not to the
/// size of the object's field sets.
pub fn track_update(
    old: Option<&Value>,
    requested: Requested,
    new: &mut Value,
    writer: &Writer<'_>,
    schema: &dyn MergeSchema,
    scope: Scope,
) {
    let live = || -> Vec<Value> {
        old.and_then(|o| o.pointer("/metadata/managedFields")).and_then(Value::as_array).cloned().unwrap_or_default()
    };
    let mut entries = match (writer.subresource, requested) {
        (Some(_), _) | (None, Requested::Live) => live(),
        (None, Requested::Reset) => Vec::new(),
        (None, Requested::Entries(entries)) => entries,
    };
    if entries.is_empty() && old.is_some() {
        // An existing object nobody tracked (or whose entries the request resets) stays untracked.
        write_entry_values(new, Vec::new());
        return;
    }
    let (changed, removed) = changes(old, new, schema, scope);
    if changed.is_empty() && removed.is_empty() {
        write_entry_values(new, entries);
        return;
    }
    for entry in &mut entries {
        if let Some(tree) = entry.get_mut("fieldsV1") {
            for path in changed.iter().chain(&removed) {
                tree_remove(tree, path);
            }
        }
    }
    if !changed.is_empty() {
        let own = entries.iter().position(|e| {
            let text = |key: &str| e.get(key).and_then(Value::as_str);
            text("operation") == Some("Update")
                && text("manager") == Some(writer.manager)
                && text("apiVersion") == Some(writer.api_version)
                && text("subresource") == writer.subresource
        });
        let index = own.unwrap_or_else(|| {
            let mut entry = json!({"manager": writer.manager, "operation": "Update",
                "apiVersion": writer.api_version, "fieldsType": "FieldsV1", "fieldsV1": {}});
            if let Some(subresource) = writer.subresource {
                entry["subresource"] = json!(subresource);
            }
            entries.push(entry);
            entries.len() - 1
        });
        let entry = &mut entries[index];
        if let Some(tree) = entry.as_object_mut().map(|e| e.entry("fieldsV1").or_insert_with(|| json!({}))) {
            for path in &changed {
                tree_insert(tree, path);
            }
        }
        entry["time"] = json!(writer.now);
    }
    entries.retain(|e| e.get("fieldsV1").and_then(Value::as_object).is_some_and(|t| !t.is_empty()));
    cap_update_managers(&mut entries);
    write_entry_values(new, entries);
}

/// Sets `metadata.managedFields` to `entries` (removing it when there are none).
fn write_entry_values(object: &mut Value, entries: Vec<Value>) {
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    if entries.is_empty() {
        metadata.remove("managedFields");
    } else {
        metadata.insert("managedFields".into(), Value::Array(entries));
    }
}

/// The `fieldsV1` key of a path element.
fn tree_key(element: &PathElement) -> String {
    match element {
        PathElement::Field(name) => format!("f:{name}"),
        PathElement::Key(key) => format!("k:{key}"),
        PathElement::Value(value) => format!("v:{value}"),
    }
}

/// Adds `path` to a `fieldsV1` tree (a list item itself is its `"."` member).
fn tree_insert(tree: &mut Value, path: &[PathElement]) {
    let mut node = tree;
    for element in path {
        let Some(members) = node.as_object_mut() else { return };
        node = members.entry(tree_key(element)).or_insert_with(|| json!({}));
        if !node.is_object() {
            *node = json!({});
        }
    }
    if matches!(path.last(), Some(PathElement::Key(_)))
        && let Some(members) = node.as_object_mut()
    {
        members.insert(".".into(), json!({}));
    }
}

/// Removes `path` from a `fieldsV1` tree, and the members it leaves empty (an empty member is a leaf).
fn tree_remove(tree: &mut Value, path: &[PathElement]) {
    let Some((first, rest)) = path.split_first() else { return };
    let Some(members) = tree.as_object_mut() else { return };
    let key = tree_key(first);
    let Some(child) = members.get_mut(&key) else { return };
    if rest.is_empty() {
        match (first, child.as_object_mut()) {
            // An item's own path is its "." member; what its fields hold stays.
            (PathElement::Key(_), Some(item)) => {
                item.remove(".");
                if item.is_empty() {
                    members.remove(&key);
                }
            }
            (_, Some(node)) if !node.is_empty() => {}
            _ => {
                members.remove(&key);
            }
        }
        return;
    }
    tree_remove(child, rest);
    if child.as_object().is_some_and(Map::is_empty) {
        members.remove(&key);
    }
}

/// Adds every path of `from` to `into`.
fn tree_merge(into: &mut Value, from: &Value) {
    let (Some(into), Some(from)) = (into.as_object_mut(), from.as_object()) else { return };
    for (key, child) in from {
        let target = into.entry(key.clone()).or_insert_with(|| json!({}));
        tree_merge(target, child);
    }
}

/// Merges the oldest `Update` entries beyond [`MAX_UPDATE_MANAGERS`] into `ancient-changes` entries, one per
/// apiVersion (upstream `capManagersManager`): ordered by time, then name; per apiVersion the first of them
/// becomes the bucket, the later ones are merged into it.
fn cap_update_managers(entries: &mut Vec<Value>) {
    let text = |e: &Value, key: &str| e.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let is_update = |e: &Value| text(e, "operation") == "Update";
    let mut length = entries.iter().filter(|e| is_update(e)).count();
    if length <= MAX_UPDATE_MANAGERS {
        return;
    }
    let mut order: Vec<usize> = (0..entries.len()).filter(|i| is_update(&entries[*i])).collect();
    order.sort_by(|a, b| {
        let (a, b) = (&entries[*a], &entries[*b]);
        text(a, "time").cmp(&text(b, "time")).then_with(|| text(a, "manager").cmp(&text(b, "manager")))
    });
    let mut first_of_version: Vec<(String, usize)> = Vec::new();
    let mut gone = vec![false; entries.len()];
    for index in order {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = text(&entries[index], "apiVersion");
        match first_of_version.iter().find(|(v, _)| *v == version).map(|(_, first)| *first) {
            Some(first) => {
                let existing = entries.iter().enumerate().position(|(i, e)| {
                    !gone[i]
                        && text(e, "manager") == ANCIENT_CHANGES
                        && is_update(e)
                        && text(e, "apiVersion") == version
                        && e.get("subresource").is_none()
                });
                let merged = entries[index].get("fieldsV1").cloned().unwrap_or_else(|| json!({}));
                let time = entries[index].get("time").cloned().unwrap_or(Value::Null);
                let bucket = &mut entries[existing.unwrap_or(first)];
                bucket["manager"] = json!(ANCIENT_CHANGES);
                if let Some(fields) = bucket.as_object_mut() {
                    fields.remove("subresource");
                    let tree = fields.entry("fieldsV1").or_insert_with(|| json!({}));
                    tree_merge(tree, &merged);
                    fields.insert("time".into(), time);
                }
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
        track_update(None, Requested::Live, &mut first, &writer("one"), &Conditions, Scope::Whole);
        let mut second = json!({"metadata": first["metadata"].clone(), "spec": {"a": 2, "b": 1}});
        track_update(Some(&first), Requested::Live, &mut second, &writer("two"), &Conditions, Scope::Whole);
        let entries = read_entries(&second);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].manager, "one");
        assert_eq!(render_paths(&entries[0].fields), vec![".spec.b"]);
        assert_eq!(render_paths(&entries[1].fields), vec![".spec.a"]);
        let mut third = second.clone();
        track_update(Some(&second), Requested::Live, &mut third, &writer("three"), &Conditions, Scope::Whole);
        assert_eq!(read_entries(&third).len(), 2, "a write that changes nothing moves nothing");
    }

    /// What `changes` must compute, by its definition over the two field sets.
    fn changes_by_definition(old: &Value, new: &Value) -> (FieldSet, FieldSet) {
        let old_set = object_field_set(old, &Conditions);
        let new_set = object_field_set(new, &Conditions);
        let changed =
            new_set.iter().filter(|p| !old_set.contains(*p) || value_at(old, p) != value_at(new, p)).cloned().collect();
        (changed, old_set.difference(&new_set).cloned().collect())
    }

    #[test]
    fn one_walk_finds_what_the_field_sets_say_changed() {
        let base = json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}, "finalizers": ["f", "g"]},
            "spec": {"x": 1, "list": [1, 2], "empty": {}, "deep": {"a": {"b": 1}}},
            "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]}});
        let variants = [
            json!({"metadata": {"name": "y", "labels": {"a": "1"}, "finalizers": ["g", "h"]},
                   "spec": {"x": 2, "list": [1, 2], "empty": {"now": true}, "deep": {}},
                   "status": {"conditions": [{"type": "B", "status": "True"}, {"type": "C", "status": "True"}]}}),
            json!({"spec": {"x": 1, "list": [2, 1], "empty": {}, "deep": {"a": {"b": 1, "c": [1]}}}}),
            json!({"metadata": {"labels": {}}, "spec": [], "status": {"conditions": [{"status": "True"}]}}),
            json!({}),
            base.clone(),
        ];
        for new in &variants {
            for (old, new) in [(&base, new), (new, &base)] {
                let expected = changes_by_definition(old, new);
                assert_eq!(changes(Some(old), new, &Conditions, Scope::Whole), expected, "{old} -> {new}");
            }
        }
        let (created, _) = changes(None, &base, &Conditions, Scope::Whole);
        assert_eq!(created, object_field_set(&base, &Conditions));
        let (without_status, _) = changes(None, &base, &Conditions, Scope::WithoutStatus);
        assert!(without_status.iter().all(|p| p[0] != PathElement::Field("status".into())));
        let (only_status, _) = changes(None, &base, &Conditions, Scope::StatusOnly);
        assert!(!only_status.is_empty() && only_status.iter().all(|p| p[0] == PathElement::Field("status".into())));
    }

    #[test]
    fn editing_a_fields_v1_tree_edits_the_field_set_it_encodes() {
        let object = json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["f"]},
            "spec": {"x": 1, "deep": {"a": {"b": 1, "c": 2}}},
            "status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "False"}]}});
        let set = object_field_set(&object, &Conditions);
        let paths: Vec<FieldPath> = set.iter().cloned().collect();
        for removed in &paths {
            let mut tree = encode(&set);
            tree_remove(&mut tree, removed);
            let mut expected = set.clone();
            expected.remove(removed);
            assert_eq!(decode(&tree), expected, "removing {}", render_path(removed));
            tree_insert(&mut tree, removed);
            assert_eq!(decode(&tree), set, "adding {} back", render_path(removed));
        }
        let mut merged = encode(&paths[..2].iter().cloned().collect());
        tree_merge(&mut merged, &encode(&paths[2..].iter().cloned().collect()));
        assert_eq!(decode(&merged), set);
    }

    #[test]
    fn an_untracked_object_stays_untracked_and_a_reset_clears_the_entries() {
        let writer = Writer { manager: "w", api_version: "v1", subresource: None, now: "t" };
        let live = json!({"metadata": {}, "spec": {"a": 1}});
        let mut new = json!({"metadata": {}, "spec": {"a": 2}});
        track_update(Some(&live), Requested::Live, &mut new, &writer, &Conditions, Scope::Whole);
        assert!(new["metadata"].get("managedFields").is_none(), "upstream skips objects that were never tracked");

        let mut tracked = json!({"metadata": {}, "spec": {"a": 1}});
        track_update(None, Requested::Live, &mut tracked, &writer, &Conditions, Scope::Whole);
        let mut reset = tracked.clone();
        reset["spec"]["a"] = json!(3);
        track_update(Some(&tracked), Requested::Reset, &mut reset, &writer, &Conditions, Scope::Whole);
        assert!(reset["metadata"].get("managedFields").is_none());
        assert_eq!(Requested::of(&json!({"metadata": {"managedFields": [{}]}})), Requested::Reset);
        assert_eq!(Requested::of(&json!({"metadata": {"managedFields": []}})), Requested::Reset);
        assert_eq!(Requested::of(&json!({"metadata": {}})), Requested::Live);
    }

    #[test]
    fn a_status_write_starts_from_the_live_entries_whatever_the_request_says() {
        let main = Writer { manager: "creator", api_version: "v1", subresource: None, now: "t1" };
        let mut live = json!({"metadata": {}, "spec": {"a": 1}, "status": {"s": 1}});
        track_update(None, Requested::Live, &mut live, &main, &Conditions, Scope::Whole);
        let status = Writer { manager: "kubelet", api_version: "v1", subresource: Some("status"), now: "t2" };
        let mut new = live.clone();
        new["status"]["s"] = json!(2);
        track_update(Some(&live), Requested::Reset, &mut new, &status, &Conditions, Scope::Whole);
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
            track_update((i > 0).then_some(&old), Requested::Live, &mut object, &writer, &Conditions, Scope::Whole);
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
