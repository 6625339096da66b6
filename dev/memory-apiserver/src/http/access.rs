//! Who may make an HTTP request: authentication, impersonation and authorization before a request is handled, with
//! the authorization attributes upstream's `RequestInfoFactory` derives from the URL.
//!
//! # Guarantees
//! - `/_dev/` routes are tools of the dev cluster, not Kubernetes API: they need no credentials.
//! - Every other request is authenticated (401 without a valid bearer token) and authorized before anything else
//!   happens, so a denied request never reaches the store, faults or metrics.

use super::response::Body;
use super::route::{ResourcePath, Route};
use crate::auth::{Attributes, UserInfo};
use crate::core::Core;
use crate::error::ApiError;
use http::{HeaderMap, HeaderValue, Method, Response};
use std::collections::HashMap;

/// The user a request is made as, authorized for what it asks; `None` for `/_dev/` routes.
pub fn admit_request(
    core: &Core,
    route: &Route,
    method: &Method,
    path: &str,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<Option<UserInfo>, ApiError> {
    if matches!(route, Route::DevMetrics | Route::DevFaults | Route::DevMounted(_)) {
        return Ok(None);
    }
    let authorization = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let user = core.authenticate(authorization)?;
    let user = core.impersonate(user, headers)?;
    let attributes = match route {
        Route::Resource(resource) => resource_attributes(resource, method, params),
        _ => Attributes::non_resource(&method.as_str().to_ascii_lowercase(), path),
    };
    core.authorize(&user, &attributes)?;
    Ok(Some(user))
}

/// The attributes of a resource request (upstream `NewRequestInfo`): the verb from the method, `watch`,
/// `list`/`get` and `deletecollection`; a namespace's own name as its namespace; the name a list or watch selects
/// with `metadata.name=`.
pub fn resource_attributes(path: &ResourcePath, method: &Method, params: &HashMap<String, String>) -> Attributes {
    let named = path.name.is_some();
    let watch_param = params.get("watch").is_some_and(|w| !matches!(w.to_ascii_lowercase().as_str(), "false" | "0"));
    let verb = match method.as_str() {
        _ if path.legacy_watch => "watch",
        "GET" | "HEAD" if named => "get",
        "GET" | "HEAD" if watch_param => "watch",
        "GET" | "HEAD" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if named => "delete",
        "DELETE" => "deletecollection",
        _ => "",
    };
    let mut name = path.name.clone().unwrap_or_default();
    if name.is_empty()
        && matches!(verb, "list" | "watch")
        && let Some(selector) = params.get("fieldSelector")
    {
        name = selector
            .split(',')
            .find_map(|term| term.strip_prefix("metadata.name==").or_else(|| term.strip_prefix("metadata.name=")))
            .filter(|n| !n.is_empty() && !n.contains('/'))
            .unwrap_or_default()
            .to_owned();
    }
    let namespace = match (&path.namespace, path.group.is_empty() && path.plural == "namespaces") {
        (Some(namespace), _) => namespace.clone(),
        (None, true) => path.name.clone().unwrap_or_default(),
        (None, false) => String::new(),
    };
    Attributes::resource(
        verb,
        &path.group,
        &path.version,
        &path.plural,
        path.subresource.as_deref().unwrap_or_default(),
        &namespace,
        &name,
    )
}

/// Adds a `Warning: 299 - "..."` header per admission warning (upstream's format, quotes escaped).
pub fn add_warnings(response: &mut Response<Body>, warnings: &[String]) {
    for warning in warnings {
        if let Ok(value) = HeaderValue::from_str(&crate::field_validation::warning_header(warning)) {
            response.headers_mut().append(http::header::WARNING, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::route;
    use super::*;

    fn attributes(method: Method, uri: &str) -> Attributes {
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let Route::Resource(resource) = route::parse(path) else { panic!("{uri} is not a resource path") };
        resource_attributes(&resource, &method, &route::query(Some(query)))
    }

    #[test]
    fn verbs_names_and_namespaces_follow_request_info() {
        let a = attributes(Method::GET, "/api/v1/nodes");
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("list", ""));
        assert_eq!(attributes(Method::GET, "/api/v1/nodes?watch=true").verb, "watch");
        assert_eq!(attributes(Method::GET, "/api/v1/nodes?watch=false").verb, "list");
        assert_eq!(attributes(Method::GET, "/api/v1/watch/nodes").verb, "watch");
        let a = attributes(
            Method::GET,
            "/apis/coordination.k8s.io/v1/namespaces/ops/leases?fieldSelector=metadata.name%3Dmine&watch=1",
        );
        assert_eq!((a.verb.as_str(), a.name.as_str(), a.namespace.as_str()), ("watch", "mine", "ops"));
        let a = attributes(Method::PATCH, "/api/v1/nodes/n1/status");
        assert_eq!((a.verb.as_str(), a.resource.as_str(), a.subresource.as_str()), ("patch", "nodes", "status"));
        let a = attributes(Method::POST, "/api/v1/namespaces/x/pods/p/eviction");
        assert_eq!((a.verb.as_str(), a.subresource.as_str(), a.name.as_str()), ("create", "eviction", "p"));
        assert_eq!(attributes(Method::DELETE, "/api/v1/namespaces/x/pods").verb, "deletecollection");
        let a = attributes(Method::GET, "/api/v1/namespaces/kube-system");
        assert_eq!((a.namespace.as_str(), a.name.as_str()), ("kube-system", "kube-system"));
        assert_eq!(attributes(Method::GET, "/api/v1/namespaces").namespace, "");
    }
}
