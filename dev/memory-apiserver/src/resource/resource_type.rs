//! What the server knows of one served resource ([`ResourceType`]): its names, scope, subresources, selectable
//! fields, printer columns, and whether it is a built-in kind or a CRD's.

use super::builtin_kind::Builtin;
use serde_json::Value;
use std::sync::Arc;

/// A field selectors can use, besides `metadata.name` and `metadata.namespace`.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectableField {
    /// Its name in selectors (`spec.nodeName`).
    pub name: String,
    /// Field names from the root of the stored object.
    pub path: Vec<String>,
    /// Where the value comes from when the field is absent or empty (Event `source` falls back to
    /// `reportingComponent`).
    pub fallback: Option<Vec<String>>,
    /// The value when the field (and its fallback) is absent (`"false"` for `spec.unschedulable`).
    pub default: String,
}

impl SelectableField {
    /// A field at the dotted `name`, with a default for when it is absent.
    pub fn new(name: &str, default: &str) -> Self {
        SelectableField::at(name, name, default)
    }

    /// A field selectors call `name` at the dotted `path` of the stored object.
    pub fn at(name: &str, path: &str, default: &str) -> Self {
        SelectableField {
            name: name.to_owned(),
            path: path.split('.').map(str::to_owned).collect(),
            fallback: None,
            default: default.to_owned(),
        }
    }

    /// The same field, read from the dotted `path` when it is absent or empty.
    pub fn or_else(self, path: &str) -> Self {
        SelectableField { fallback: Some(path.split('.').map(str::to_owned).collect()), ..self }
    }

    /// The field's value in `object`, rendered as selectors compare it.
    pub fn value_of(&self, object: &Value) -> String {
        let at = |path: &[String]| path.iter().try_fold(object, |v, key| v.get(key));
        let value = at(&self.path);
        let empty = value.is_none_or(|v| v.is_null() || v.as_str() == Some(""));
        match &self.fallback {
            Some(fallback) if empty => field_text(at(fallback), &self.default),
            _ => field_text(value, &self.default),
        }
    }
}

/// Where a kind keeps what its `scale` subresource shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePaths {
    /// `.spec.replicas`.
    pub spec_replicas: Vec<String>,
    /// `.status.replicas`.
    pub status_replicas: Vec<String>,
    /// `.status.selector` (CRDs) or, for built-ins, `None`: the selector comes from `.spec.selector`.
    pub label_selector: Option<Vec<String>>,
}

/// A column of a kind's table (`additionalPrinterColumns`).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Header.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// Column format (`name`, ...).
    pub format: String,
    /// Description shown by `kubectl explain`.
    pub description: String,
    /// 0 for the default view, more for `-o wide`.
    pub priority: i64,
    /// The JSONPath of the value.
    pub json_path: String,
}

/// What a custom resource kind takes from its CRD.
#[derive(Debug, Clone)]
pub struct CustomBehavior {
    /// `metadata.name` of the CRD.
    pub crd_name: String,
    /// `spec.names.listKind` (`{Kind}List` unless the CRD says otherwise).
    pub list_kind: String,
    /// The version's `openAPIV3Schema`, if any.
    pub schema: Option<Value>,
    /// The version's printer columns (the default `Age` column when the CRD declares none).
    pub printer_columns: Vec<PrinterColumn>,
}

/// How a kind behaves on writes.
#[derive(Debug, Clone)]
pub enum Behavior {
    /// A built-in kind.
    Builtin(Builtin),
    /// A custom resource.
    Custom(Arc<CustomBehavior>),
}

/// One served resource: a (group, version, plural) and everything the server must know about it.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name, as in URLs.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Has a `status` subresource: the main endpoint ignores status, `/status` ignores the rest.
    pub status_subresource: bool,
    /// Has a `scale` subresource.
    pub scale: Option<ScalePaths>,
    /// Other subresources, for discovery (`eviction`, `binding`).
    pub other_subresources: Vec<&'static str>,
    /// Fields selectors may use besides `metadata.name`/`metadata.namespace`.
    pub selectable_fields: Vec<SelectableField>,
    /// Sets and bumps `metadata.generation`.
    pub tracks_generation: bool,
    /// Built-in or custom.
    pub behavior: Behavior,
    /// Identifies the object map: `group/plural`, shared by every version of the resource.
    pub store_id: Arc<str>,
}

impl ResourceType {
    /// `group/version`, or `version` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The built-in kind, if this is one.
    pub fn builtin(&self) -> Option<Builtin> {
        match &self.behavior {
            Behavior::Builtin(b) => Some(*b),
            Behavior::Custom(_) => None,
        }
    }

    /// The CRD-derived behaviour, if this is a custom resource.
    pub fn custom(&self) -> Option<&CustomBehavior> {
        match &self.behavior {
            Behavior::Custom(c) => Some(c),
            Behavior::Builtin(_) => None,
        }
    }

    /// True for `kind` (a built-in kind).
    pub fn is(&self, kind: Builtin) -> bool {
        self.builtin() == Some(kind)
    }

    /// The names of the selectable fields, as the field selector parser wants them.
    pub fn selectable_field_names(&self) -> Vec<String> {
        self.selectable_fields.iter().map(|f| f.name.clone()).collect()
    }

    /// Index of a selectable field.
    pub fn selectable_field(&self, name: &str) -> Option<usize> {
        self.selectable_fields.iter().position(|f| f.name == name)
    }

    /// Where `spec.nodeName` sits among the selectable fields (pods only): the watcher index key.
    pub fn node_name_field(&self) -> Option<usize> {
        if self.is(Builtin::Pod) { self.selectable_field("spec.nodeName") } else { None }
    }
}

/// Renders a JSON value as a selectable-field string: strings as they are, booleans and numbers as text.
fn field_text(value: Option<&Value>, default: &str) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => default.to_owned(),
    }
}
