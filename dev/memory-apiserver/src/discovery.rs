//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}`, in
//! the legacy (unaggregated) form, which kubectl and `kube::discovery` fall back to.
//!
//! # Guarantees
//! - `/api/v1` lists `pods/eviction` with group `policy`, version `v1`, kind `Eviction`, so `kubectl drain` evicts
//!   rather than deletes; every subresource the server serves is listed.
//! - CRD groups appear as soon as the CRD is stored and disappear when it is gone.

use super::resource::{Registry, ResourceType};
use serde_json::{Value, json};

const VERBS: [&str; 8] = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// `/version`.
pub fn version(git_version: &str) -> Value {
    let trimmed = git_version.trim_start_matches('v');
    let mut parts = trimmed.split('.');
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    json!({
        "major": major, "minor": minor, "gitVersion": git_version, "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    let preferred = versions.first().cloned().unwrap_or_else(|| json!({}));
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

/// `/apis`.
pub fn groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry.groups().iter().map(|(g, versions)| group_entry(g, versions)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, if the group is served.
pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    let (group, versions) = registry.groups().into_iter().find(|(g, _)| g == name)?;
    let mut entry = group_entry(&group, &versions);
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

fn resource_entries(rt: &ResourceType) -> Vec<Value> {
    let verbs: &[&str] = if rt.builtin().is_some_and(|b| b.is_review()) { &["create"] } else { &VERBS };
    let mut main = json!({
        "name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced, "kind": rt.kind, "verbs": verbs,
    });
    if !rt.short_names.is_empty() {
        main["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        main["categories"] = json!(rt.categories);
    }
    let mut entries = vec![main];
    let sub = |name: &str, kind: &str, verbs: &[&str]| json!({"name": format!("{}/{name}", rt.plural), "singularName": "", "namespaced": rt.namespaced, "kind": kind, "verbs": verbs});
    if rt.status_subresource {
        entries.push(sub("status", &rt.kind, &["get", "patch", "update"]));
    }
    if rt.scale.is_some() {
        let mut scale = sub("scale", "Scale", &["get", "patch", "update"]);
        scale["group"] = json!("autoscaling");
        scale["version"] = json!("v1");
        entries.push(scale);
    }
    for name in &rt.other_subresources {
        entries.push(match *name {
            "eviction" => {
                let mut eviction = sub("eviction", "Eviction", &["create"]);
                eviction["group"] = json!("policy");
                eviction["version"] = json!("v1");
                eviction
            }
            "binding" => sub("binding", "Binding", &["create"]),
            "token" => {
                let mut token = sub("token", "TokenRequest", &["create"]);
                token["group"] = json!("authentication.k8s.io");
                token["version"] = json!("v1");
                token
            }
            other => sub(other, &rt.kind, &["update"]),
        });
    }
    entries
}

/// `/api/v1` or `/apis/{group}/{version}`, if served.
pub fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = registry.types_of(group, version);
    if types.is_empty() && !(group.is_empty() && version == "v1") {
        return None;
    }
    let resources: Vec<Value> = types.iter().flat_map(|t| resource_entries(t)).collect();
    let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_v1_lists_pod_eviction_as_kubectl_drain_needs() {
        let registry = Registry::new();
        let list = resources(&registry, "", "v1").unwrap();
        let eviction = list["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods/eviction").unwrap();
        assert_eq!(eviction["group"], "policy");
        assert_eq!(eviction["version"], "v1");
        assert_eq!(eviction["kind"], "Eviction");
        let names: Vec<&str> =
            list["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
        for expected in
            ["pods", "pods/status", "pods/binding", "nodes", "nodes/status", "namespaces", "namespaces/finalize"]
        {
            assert!(names.contains(&expected), "{expected} in {names:?}");
        }
    }

    #[test]
    fn groups_list_every_built_in_group() {
        let registry = Registry::new();
        let list = groups(&registry);
        let names: Vec<&str> = list["groups"].as_array().unwrap().iter().filter_map(|g| g["name"].as_str()).collect();
        assert_eq!(
            names,
            vec![
                "apps",
                "events.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "policy",
                "rbac.authorization.k8s.io",
                "admissionregistration.k8s.io",
                "coordination.k8s.io",
                "apiextensions.k8s.io",
                "batch",
                "scheduling.k8s.io"
            ]
        );
        let authorization = resources(&registry, "authorization.k8s.io", "v1").unwrap();
        let reviews = authorization["resources"].as_array().unwrap();
        assert!(reviews.iter().all(|r| r["verbs"] == json!(["create"])), "{reviews:?}");
        let core = resources(&registry, "", "v1").unwrap();
        let token = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "serviceaccounts/token");
        assert_eq!(token.unwrap()["kind"], "TokenRequest");
        assert_eq!(group(&registry, "apps").unwrap()["preferredVersion"]["groupVersion"], "apps/v1");
        assert!(group(&registry, "nope").is_none());
        assert!(resources(&registry, "apps", "v2").is_none());
    }
}
