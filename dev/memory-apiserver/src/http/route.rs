//! URL paths of the Kubernetes API, parsed into what they address.

/// A resource path: `/api/v1/namespaces/{ns}/pods/{name}/{subresource}` and its variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// API group (empty for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Namespace from the path.
    pub namespace: Option<String>,
    /// Plural resource.
    pub plural: String,
    /// Object name.
    pub name: Option<String>,
    /// Subresource.
    pub subresource: Option<String>,
    /// The deprecated `/watch/` prefix was used.
    pub legacy_watch: bool,
}

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/healthz`, `/readyz`, `/livez` (and their sub-checks).
    Health,
    /// `/version`.
    Version,
    /// `/api`.
    CoreVersions,
    /// `/apis`.
    Groups,
    /// `/apis/{group}`.
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`.
    Resources(String, String),
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/openapi/v3`.
    OpenApiV3Index,
    /// `/openapi/v3/{api/v1 | apis/group/version}`: the rest of the path.
    OpenApiV3(String),
    /// `/_dev/metrics`.
    DevMetrics,
    /// `/_dev/faults`.
    DevFaults,
    /// Any other `/_dev/...` path: the decoded segments after `_dev`, for routes mounted from outside the API
    /// server ([`crate::core::DevRoutes`]).
    DevMounted(Vec<String>),
    /// A resource path.
    Resource(ResourcePath),
    /// Nothing served here.
    NotFound,
}

/// Subresources of namespaces: `/api/v1/namespaces/{name}/status` is one, not a collection named `status`.
const NAMESPACE_SUBRESOURCES: [&str; 2] = ["status", "finalize"];

/// Parses a URL path (without the query).
pub fn parse(path: &str) -> Route {
    let segments: Vec<String> =
        path.split('/').filter(|s| !s.is_empty()).map(|s| percent_decode(s).unwrap_or_else(|| s.to_owned())).collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match segments.as_slice() {
        ["healthz" | "readyz" | "livez", ..] => Route::Health,
        ["version"] => Route::Version,
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", group] => Route::Group((*group).to_owned()),
        ["api", "v1"] => Route::Resources(String::new(), "v1".into()),
        ["apis", group, version] => Route::Resources((*group).to_owned(), (*version).to_owned()),
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3Index,
        ["openapi", "v3", rest @ ..] => Route::OpenApiV3(rest.join("/")),
        ["_dev", "metrics"] => Route::DevMetrics,
        ["_dev", "faults"] => Route::DevFaults,
        ["_dev", rest @ ..] => Route::DevMounted(rest.iter().map(|s| (*s).to_owned()).collect()),
        ["api", "v1", rest @ ..] => resource("", "v1", rest),
        ["apis", group, version, rest @ ..] => resource(group, version, rest),
        _ => Route::NotFound,
    }
}

fn resource(group: &str, version: &str, rest: &[&str]) -> Route {
    let (legacy_watch, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    let path = |namespace: Option<&str>, plural: &str, name: Option<&str>, subresource: Option<&str>| {
        Route::Resource(ResourcePath {
            group: group.to_owned(),
            version: version.to_owned(),
            namespace: namespace.map(str::to_owned),
            plural: plural.to_owned(),
            name: name.map(str::to_owned),
            subresource: subresource.map(str::to_owned),
            legacy_watch,
        })
    };
    match rest {
        ["namespaces", ns, sub] if group.is_empty() && NAMESPACE_SUBRESOURCES.contains(sub) => {
            path(None, "namespaces", Some(ns), Some(sub))
        }
        ["namespaces", ns, plural] => path(Some(ns), plural, None, None),
        ["namespaces", ns, plural, name] => path(Some(ns), plural, Some(name), None),
        ["namespaces", ns, plural, name, sub] => path(Some(ns), plural, Some(name), Some(sub)),
        [plural] => path(None, plural, None, None),
        [plural, name] => path(None, plural, Some(name), None),
        [plural, name, sub] => path(None, plural, Some(name), Some(sub)),
        _ => Route::NotFound,
    }
}

fn percent_decode(segment: &str) -> Option<String> {
    if !segment.contains('%') {
        return Some(segment.to_owned());
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The query parameters (the first value of each name).
pub fn query(query: Option<&str>) -> std::collections::HashMap<String, String> {
    let mut params = std::collections::HashMap::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        params.entry(key.into_owned()).or_insert_with(|| value.into_owned());
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(group: &str, ns: Option<&str>, plural: &str, name: Option<&str>, sub: Option<&str>) -> Route {
        Route::Resource(ResourcePath {
            group: group.into(),
            version: "v1".into(),
            namespace: ns.map(Into::into),
            plural: plural.into(),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
            legacy_watch: false,
        })
    }

    #[test]
    fn every_shape_of_resource_path_is_recognised() {
        assert_eq!(parse("/api/v1/pods"), res("", None, "pods", None, None));
        assert_eq!(parse("/api/v1/namespaces"), res("", None, "namespaces", None, None));
        assert_eq!(parse("/api/v1/namespaces/kube-system"), res("", None, "namespaces", Some("kube-system"), None));
        assert_eq!(parse("/api/v1/namespaces/x/status"), res("", None, "namespaces", Some("x"), Some("status")));
        assert_eq!(parse("/api/v1/namespaces/x/pods"), res("", Some("x"), "pods", None, None));
        assert_eq!(
            parse("/api/v1/namespaces/x/pods/p/eviction"),
            res("", Some("x"), "pods", Some("p"), Some("eviction"))
        );
        assert_eq!(parse("/api/v1/nodes/n1/status"), res("", None, "nodes", Some("n1"), Some("status")));
        assert_eq!(
            parse("/apis/apps/v1/namespaces/d/deployments/web/scale"),
            res("apps", Some("d"), "deployments", Some("web"), Some("scale"))
        );
        assert_eq!(parse("/apis/example.com/v1/widgets/w%2Fx"), res("example.com", None, "widgets", Some("w/x"), None));
        assert_eq!(parse("/api/v1"), Route::Resources(String::new(), "v1".into()));
        assert_eq!(parse("/apis/apps"), Route::Group("apps".into()));
        assert_eq!(parse("/readyz/ping"), Route::Health);
        assert_eq!(parse("/nope"), Route::NotFound);
        assert_eq!(parse("/openapi/v2"), Route::OpenApiV2);
        assert_eq!(parse("/openapi/v3"), Route::OpenApiV3Index);
        assert_eq!(parse("/openapi/v3/apis/apps/v1"), Route::OpenApiV3("apis/apps/v1".into()));
        let Route::Resource(watch) = parse("/api/v1/watch/namespaces/x/pods") else { panic!() };
        assert!(watch.legacy_watch);
    }

    #[test]
    fn query_parameters_are_decoded() {
        let q = query(Some("labelSelector=a%3Db%2Cc&limit=2&limit=3&fieldSelector=spec.nodeName%3D"));
        assert_eq!(q["labelSelector"], "a=b,c");
        assert_eq!(q["limit"], "2");
        assert_eq!(q["fieldSelector"], "spec.nodeName=");
    }
}
