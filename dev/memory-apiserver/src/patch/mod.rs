//! The four patch types of the Kubernetes API and the field ownership behind server-side apply.

pub mod apply;
pub mod json;
pub mod managed;
pub mod merge;
pub mod strategic;

/// How a list field merges, in strategic merge patches and server-side apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced whole (no `patchStrategy`, `x-kubernetes-list-type: atomic` or unset).
    Atomic,
    /// A set of scalars (`patchStrategy: merge` on a primitive list, `x-kubernetes-list-type: set`).
    Set,
    /// A map keyed by these fields (`patchMergeKey`, `x-kubernetes-list-map-keys`).
    Map(Vec<String>),
}

/// Knows the list strategy of every field of a kind. `path` holds field names from the root, list items elided
/// (`["spec", "containers", "env"]`).
pub trait MergeSchema {
    /// The strategy of the list at `path`.
    fn list_kind(&self, path: &[String]) -> ListKind;
}

/// The patch types, by their `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type` header (parameters ignored).
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(PatchType::Apply),
            _ => None,
        }
    }

    /// The `Content-Type` of the patch type.
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Json => "application/json-patch+json",
            PatchType::Merge => "application/merge-patch+json",
            PatchType::Strategic => "application/strategic-merge-patch+json",
            PatchType::Apply => "application/apply-patch+yaml",
        }
    }
}
