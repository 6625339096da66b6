//! What admission sees of a write: the operation and the request's attributes, objects and user.

use crate::auth::UserInfo;
use serde_json::{Value, json};

/// An admission operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// CREATE.
    Create,
    /// UPDATE (PUT and PATCH, main resource and subresources).
    Update,
    /// DELETE.
    Delete,
}

impl Operation {
    /// `CREATE`, `UPDATE`, `DELETE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// What admission sees of a write.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The operation.
    pub operation: Operation,
    /// API group.
    pub group: &'a str,
    /// Version.
    pub version: &'a str,
    /// Plural resource.
    pub resource: &'a str,
    /// Subresource ("" for the main resource).
    pub subresource: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Object name.
    pub name: &'a str,
    /// Namespace ("" for cluster-scoped kinds).
    pub namespace: &'a str,
    /// The kind is namespaced.
    pub namespaced: bool,
    /// The new object (`None` on DELETE).
    pub object: Option<&'a Value>,
    /// The current object (`None` on CREATE).
    pub old_object: Option<&'a Value>,
    /// The request's Namespace object, for namespaced kinds.
    pub namespace_object: Option<&'a Value>,
    /// Who asks.
    pub user: &'a UserInfo,
    /// `dryRun=All`.
    pub dry_run: bool,
}

impl Request<'_> {
    /// The `request` variable: an `admission.k8s.io/v1 AdmissionRequest` without the objects.
    pub(super) fn to_json(self) -> Value {
        let kind = json!({"group": self.group, "version": self.version, "kind": self.kind});
        let resource = json!({"group": self.group, "version": self.version, "resource": self.resource});
        json!({
            "uid": "", "kind": kind, "resource": resource, "subResource": self.subresource,
            "requestKind": kind, "requestResource": resource, "requestSubResource": self.subresource,
            "name": self.name, "namespace": self.namespace, "operation": self.operation.as_str(),
            "userInfo": self.user.to_json(), "dryRun": self.dry_run,
        })
    }
}
