//! What a request asks to do, as authorizers see it (upstream's `authorizer.Attributes` from `RequestInfo`), and
//! the 403 a denial answers with.

use crate::error::ApiError;

/// The authorization attributes of one request (the user travels beside them).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`, `impersonate`, ...;
    /// for non-resource requests the lower-case HTTP method.
    pub verb: String,
    /// True for `/api/...` and `/apis/...` resource paths.
    pub resource_request: bool,
    /// API group ("" for core).
    pub api_group: String,
    /// API version.
    pub api_version: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource ("" for none).
    pub subresource: String,
    /// Namespace ("" for cluster scope; a namespace's own name for `namespaces/NAME`).
    pub namespace: String,
    /// Object name ("" for collections; from a `metadata.name=` field selector of a list or watch).
    pub name: String,
    /// The URL path of a non-resource request.
    pub path: String,
}

impl Attributes {
    /// A resource request.
    pub fn resource(
        verb: &str,
        api_group: &str,
        api_version: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.to_owned(),
            resource_request: true,
            api_group: api_group.to_owned(),
            api_version: api_version.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            path: String::new(),
        }
    }

    /// A non-resource request (`/healthz`, `/apis`, `/version`).
    pub fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.to_owned(),
            resource_request: false,
            api_group: String::new(),
            api_version: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: path.to_owned(),
        }
    }

    /// The 403 upstream answers a denied request with (`responsewriters.ForbiddenStatusError`):
    /// `nodes "x" is forbidden: User "u" cannot patch resource "nodes" in API group "" at the cluster scope`,
    /// followed by `: REASON` when the authorizer gave one.
    pub fn forbidden(&self, username: &str, reason: &str) -> ApiError {
        let what = if self.resource_request {
            let resource = if self.subresource.is_empty() {
                self.resource.clone()
            } else {
                format!("{}/{}", self.resource, self.subresource)
            };
            let scope = if self.namespace.is_empty() {
                "at the cluster scope".to_owned()
            } else {
                format!("in the namespace \"{}\"", self.namespace)
            };
            format!(
                "User \"{username}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
                self.verb, self.api_group
            )
        } else {
            format!("User \"{username}\" cannot {} path \"{}\"", self.verb, self.path)
        };
        let what = sanitize(&what);
        let why = if reason.is_empty() { what } else { format!("{what}: {reason}") };
        let group_resource = if self.api_group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.api_group)
        };
        let message = match (group_resource.is_empty(), self.name.is_empty()) {
            (true, _) => format!("forbidden: {why}"),
            (false, true) => format!("{group_resource} is forbidden: {why}"),
            (false, false) => format!("{group_resource} \"{}\" is forbidden: {why}", self.name),
        };
        let mut error = ApiError::new(403, "Forbidden", message);
        error.details.name = (!self.name.is_empty()).then(|| self.name.clone());
        error.details.group = (!self.api_group.is_empty()).then(|| self.api_group.clone());
        error.details.kind = (!self.resource.is_empty()).then(|| self.resource.clone());
        error
    }
}

/// Upstream escapes what could read as HTML in denial messages.
fn sanitize(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// 401 for a request without valid credentials, as upstream answers with anonymous authentication off.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_read_like_upstream() {
        let patch = Attributes::resource("patch", "", "v1", "nodes", "", "", "worker-1");
        let status = patch.forbidden("system:serviceaccount:ns:sa", "").to_status();
        assert_eq!(
            status["message"],
            "nodes \"worker-1\" is forbidden: User \"system:serviceaccount:ns:sa\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
        );
        assert_eq!(status["reason"], "Forbidden");
        assert_eq!(status["code"], 403);
        assert_eq!(status["details"], serde_json::json!({"name": "worker-1", "kind": "nodes"}));
        let list = Attributes::resource("list", "coordination.k8s.io", "v1", "leases", "", "ops", "");
        assert_eq!(
            list.forbidden("u", "RBAC: x").message,
            "leases.coordination.k8s.io is forbidden: User \"u\" cannot list resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"ops\": RBAC: x"
        );
        let evict = Attributes::resource("create", "", "v1", "pods", "eviction", "ns", "p");
        assert!(evict.forbidden("u", "").message.contains("cannot create resource \"pods/eviction\""));
        let path = Attributes::non_resource("get", "/apis");
        assert_eq!(path.forbidden("u", "").message, "forbidden: User \"u\" cannot get path \"/apis\"");
        assert_eq!(unauthorized().to_status()["message"], "Unauthorized");
    }
}
