//! List merge strategies per kind: the `patchStrategy`/`patchMergeKey` tags of the built-in Go types, and the
//! `x-kubernetes-list-type`/`x-kubernetes-list-map-keys` of CRD schemas.
//!
//! Only lists with a strategy upstream are listed; every other list is atomic (replaced whole). Node
//! `spec.taints` and Pod `spec.tolerations` have no strategy upstream and are atomic here too.

use super::{Behavior, Builtin, ResourceType};
use crate::patch::{ListKind, MergeSchema};
use serde_json::Value;

/// The merge schema of a resource type.
pub fn merge_schema(rt: &ResourceType) -> Box<dyn MergeSchema + '_> {
    match &rt.behavior {
        Behavior::Builtin(kind) => Box::new(BuiltinSchema(*kind)),
        Behavior::Custom(custom) => Box::new(CustomSchema(custom.schema.as_ref())),
    }
}

/// The strategies of a built-in kind.
pub struct BuiltinSchema(pub Builtin);

fn map(key: &str) -> ListKind {
    ListKind::Map(vec![key.to_owned()])
}

/// Lists inside a PodSpec, by path relative to the PodSpec.
fn pod_spec_list(rest: &[&str]) -> ListKind {
    const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];
    match rest {
        [list] if CONTAINER_LISTS.contains(list) => map("name"),
        [list, field] if CONTAINER_LISTS.contains(list) => match *field {
            "env" => map("name"),
            "ports" => map("containerPort"),
            "volumeMounts" => map("mountPath"),
            "volumeDevices" => map("devicePath"),
            "resizePolicy" => map("resourceName"),
            _ => ListKind::Atomic,
        },
        ["volumes"] | ["imagePullSecrets"] | ["resourceClaims"] | ["schedulingGates"] => map("name"),
        ["hostAliases"] => map("ip"),
        ["topologySpreadConstraints"] => map("topologyKey"),
        _ => ListKind::Atomic,
    }
}

impl MergeSchema for BuiltinSchema {
    fn list_kind(&self, path: &[String]) -> ListKind {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        match path.as_slice() {
            ["metadata", "finalizers"] => return ListKind::Set,
            ["metadata", "ownerReferences"] => return map("uid"),
            _ => {}
        }
        match (self.0, path.as_slice()) {
            (Builtin::Pod, ["spec", rest @ ..]) => pod_spec_list(rest),
            (Builtin::Pod, ["status", "conditions"]) => map("type"),
            (Builtin::Pod, ["status", "podIPs" | "hostIPs"]) => map("ip"),
            (Builtin::Pod, ["status", "resourceClaimStatuses"]) => map("name"),
            (Builtin::Node, ["spec", "podCIDRs"]) => ListKind::Set,
            (Builtin::Node, ["status", "conditions"]) => map("type"),
            (Builtin::Node, ["status", "addresses"]) => map("type"),
            (
                Builtin::Deployment | Builtin::ReplicaSet | Builtin::StatefulSet | Builtin::DaemonSet,
                ["spec", "template", "spec", rest @ ..],
            ) => pod_spec_list(rest),
            (
                Builtin::Deployment
                | Builtin::ReplicaSet
                | Builtin::StatefulSet
                | Builtin::DaemonSet
                | Builtin::Namespace
                | Builtin::PodDisruptionBudget
                | Builtin::CustomResourceDefinition,
                ["status", "conditions"],
            ) => map("type"),
            (Builtin::ServiceAccount, ["secrets"]) => map("name"),
            _ => ListKind::Atomic,
        }
    }
}

/// The strategies a CRD's structural schema declares.
pub struct CustomSchema<'a>(pub Option<&'a Value>);

impl MergeSchema for CustomSchema<'_> {
    fn list_kind(&self, path: &[String]) -> ListKind {
        if let [first, second] = path
            && first == "metadata"
        {
            return BuiltinSchema(Builtin::ConfigMap).list_kind(&[first.clone(), second.clone()]);
        }
        let Some(mut node) = self.0 else { return ListKind::Atomic };
        for name in path {
            if node.get("type").and_then(Value::as_str) == Some("array") {
                match node.get("items") {
                    Some(items) => node = items,
                    None => return ListKind::Atomic,
                }
            }
            match node.get("properties").and_then(|p| p.get(name)) {
                Some(child) => node = child,
                None => match node.get("additionalProperties").filter(|a| a.is_object()) {
                    Some(child) => node = child,
                    None => return ListKind::Atomic,
                },
            }
        }
        match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListKind::Set,
            Some("map") => {
                let keys: Vec<String> = node
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                    .unwrap_or_default();
                if keys.is_empty() { ListKind::Atomic } else { ListKind::Map(keys) }
            }
            _ => ListKind::Atomic,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn built_in_tags_are_followed() {
        let pod = BuiltinSchema(Builtin::Pod);
        assert_eq!(pod.list_kind(&path("spec.containers")), map("name"));
        assert_eq!(pod.list_kind(&path("spec.containers.env")), map("name"));
        assert_eq!(pod.list_kind(&path("spec.tolerations")), ListKind::Atomic);
        assert_eq!(pod.list_kind(&path("metadata.finalizers")), ListKind::Set);
        let deployment = BuiltinSchema(Builtin::Deployment);
        assert_eq!(deployment.list_kind(&path("spec.template.spec.volumes")), map("name"));
        assert_eq!(BuiltinSchema(Builtin::Node).list_kind(&path("spec.taints")), ListKind::Atomic);
        assert_eq!(BuiltinSchema(Builtin::Node).list_kind(&path("status.addresses")), map("type"));
    }

    #[test]
    fn crd_list_types_are_read_from_the_schema() {
        let schema = json!({"type": "object", "properties": {"status": {"type": "object", "properties": {
            "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                           "items": {"type": "object", "properties": {"tags": {"type": "array", "x-kubernetes-list-type": "set"}}}},
            "plain": {"type": "array"}
        }}}});
        let custom = CustomSchema(Some(&schema));
        assert_eq!(custom.list_kind(&path("status.conditions")), map("type"));
        assert_eq!(custom.list_kind(&path("status.conditions.tags")), ListKind::Set);
        assert_eq!(custom.list_kind(&path("status.plain")), ListKind::Atomic);
        assert_eq!(custom.list_kind(&path("metadata.finalizers")), ListKind::Set);
        assert_eq!(CustomSchema(None).list_kind(&path("spec.x")), ListKind::Atomic);
    }
}
