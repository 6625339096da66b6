//! Resource types: what the server serves (built-in kinds and the kinds of registered CRDs), and per kind what
//! each write must do.

mod builtin;
pub mod job;
pub mod priority;
mod registry;
pub mod schema;
pub mod service;
pub mod strategy;

pub use builtin::{Builtin, builtin_types};
pub use registry::Registry;

use super::object::field_text;
use serde_json::Value;
use std::sync::Arc;

/// A field selectors can use, besides `metadata.name` and `metadata.namespace`.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectableField {
    /// Its name in selectors (`spec.nodeName`).
    pub name: String,
    /// Field names from the root.
    pub path: Vec<String>,
    /// The value when the field is absent (`"false"` for `spec.unschedulable`).
    pub default: String,
}

impl SelectableField {
    /// A field at the dotted `name`, with a default for when it is absent.
    pub fn new(name: &str, default: &str) -> Self {
        SelectableField {
            name: name.to_owned(),
            path: name.split('.').map(str::to_owned).collect(),
            default: default.to_owned(),
        }
    }

    /// The field's value in `object`, rendered as selectors compare it.
    pub fn value_of(&self, object: &Value) -> String {
        let value = self.path.iter().try_fold(object, |v, key| v.get(key));
        field_text(value, &self.default)
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

/// The identity of a served resource in requests: group, version and plural.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvr {
    /// API group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource name.
    pub plural: String,
}

impl Gvr {
    /// A (group, version, plural).
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Gvr { group: group.to_owned(), version: version.to_owned(), plural: plural.to_owned() }
    }

    /// The resource of a kube-rs type (`Gvr::of::<Pod>()`).
    pub fn of<K: kube::Resource<DynamicType = ()>>() -> Self {
        Gvr::new(&K::group(&()), &K::version(&()), &K::plural(&()))
    }
}

impl std::fmt::Display for Gvr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.plural)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.plural)
        }
    }
}
