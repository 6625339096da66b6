//! The built-in kinds the server serves, with the discovery data, subresources and selectable fields of each.

use super::{Behavior, ResourceType, ScalePaths, SelectableField, events};
use std::sync::Arc;

/// The built-in kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// core/v1 Namespace.
    Namespace,
    /// core/v1 Node.
    Node,
    /// core/v1 Pod.
    Pod,
    /// core/v1 ConfigMap.
    ConfigMap,
    /// core/v1 Secret.
    Secret,
    /// core/v1 ServiceAccount.
    ServiceAccount,
    /// core/v1 Event.
    CoreEvent,
    /// events.k8s.io/v1 Event.
    Event,
    /// policy/v1 PodDisruptionBudget.
    PodDisruptionBudget,
    /// coordination.k8s.io/v1 Lease.
    Lease,
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
    /// apps/v1 ControllerRevision.
    ControllerRevision,
    /// apiextensions.k8s.io/v1 CustomResourceDefinition.
    CustomResourceDefinition,
}

struct Spec {
    kind: Builtin,
    group: &'static str,
    plural: &'static str,
    kind_name: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    scale: bool,
    other_subresources: &'static [&'static str],
    fields: &'static [(&'static str, &'static str)],
    generation: bool,
}

const POD_FIELDS: &[(&str, &str)] = &[
    ("spec.nodeName", ""),
    ("spec.restartPolicy", ""),
    ("spec.schedulerName", ""),
    ("spec.serviceAccountName", ""),
    ("spec.hostNetwork", "false"),
    ("status.phase", ""),
    ("status.podIP", ""),
    ("status.nominatedNodeName", ""),
];

fn specs() -> Vec<Spec> {
    let base = |kind, group, plural, kind_name, namespaced| Spec {
        kind,
        group,
        plural,
        kind_name,
        namespaced,
        short_names: &[],
        categories: &[],
        status: false,
        scale: false,
        other_subresources: &[],
        fields: &[],
        generation: false,
    };
    vec![
        Spec {
            short_names: &["ns"],
            status: true,
            other_subresources: &["finalize"],
            fields: &[("status.phase", "")],
            ..base(Builtin::Namespace, "", "namespaces", "Namespace", false)
        },
        Spec {
            short_names: &["no"],
            status: true,
            fields: &[("spec.unschedulable", "false")],
            ..base(Builtin::Node, "", "nodes", "Node", false)
        },
        Spec {
            short_names: &["po"],
            categories: &["all"],
            status: true,
            other_subresources: &["eviction", "binding"],
            fields: POD_FIELDS,
            ..base(Builtin::Pod, "", "pods", "Pod", true)
        },
        Spec { short_names: &["cm"], ..base(Builtin::ConfigMap, "", "configmaps", "ConfigMap", true) },
        Spec { fields: &[("type", "")], ..base(Builtin::Secret, "", "secrets", "Secret", true) },
        Spec { short_names: &["sa"], ..base(Builtin::ServiceAccount, "", "serviceaccounts", "ServiceAccount", true) },
        // Their selectable fields come from `events::selectable_fields`: one store serves both.
        Spec { short_names: &["ev"], ..base(Builtin::CoreEvent, "", "events", "Event", true) },
        Spec { short_names: &["ev"], ..base(Builtin::Event, "events.k8s.io", "events", "Event", true) },
        Spec {
            short_names: &["pdb"],
            status: true,
            generation: true,
            ..base(Builtin::PodDisruptionBudget, "policy", "poddisruptionbudgets", "PodDisruptionBudget", true)
        },
        base(Builtin::Lease, "coordination.k8s.io", "leases", "Lease", true),
        Spec {
            short_names: &["deploy"],
            categories: &["all"],
            status: true,
            scale: true,
            generation: true,
            ..base(Builtin::Deployment, "apps", "deployments", "Deployment", true)
        },
        Spec {
            short_names: &["rs"],
            categories: &["all"],
            status: true,
            scale: true,
            generation: true,
            fields: &[("status.replicas", "0")],
            ..base(Builtin::ReplicaSet, "apps", "replicasets", "ReplicaSet", true)
        },
        Spec {
            short_names: &["sts"],
            categories: &["all"],
            status: true,
            scale: true,
            generation: true,
            ..base(Builtin::StatefulSet, "apps", "statefulsets", "StatefulSet", true)
        },
        Spec {
            short_names: &["ds"],
            categories: &["all"],
            status: true,
            generation: true,
            ..base(Builtin::DaemonSet, "apps", "daemonsets", "DaemonSet", true)
        },
        base(Builtin::ControllerRevision, "apps", "controllerrevisions", "ControllerRevision", true),
        Spec {
            short_names: &["crd", "crds"],
            status: true,
            generation: true,
            ..base(
                Builtin::CustomResourceDefinition,
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
            )
        },
    ]
}

/// Every built-in resource type.
pub fn builtin_types() -> Vec<ResourceType> {
    specs()
        .into_iter()
        .map(|spec| {
            ResourceType {
                group: spec.group.to_owned(),
                // Every built-in kind served here is at v1 in its group.
                version: "v1".to_owned(),
                plural: spec.plural.to_owned(),
                singular: spec.kind_name.to_lowercase(),
                kind: spec.kind_name.to_owned(),
                namespaced: spec.namespaced,
                short_names: spec.short_names.iter().map(|s| (*s).to_owned()).collect(),
                categories: spec.categories.iter().map(|s| (*s).to_owned()).collect(),
                status_subresource: spec.status,
                scale: spec.scale.then(|| ScalePaths {
                    spec_replicas: vec!["spec".into(), "replicas".into()],
                    status_replicas: vec!["status".into(), "replicas".into()],
                    label_selector: None,
                }),
                other_subresources: spec.other_subresources.to_vec(),
                selectable_fields: match spec.kind {
                    Builtin::CoreEvent | Builtin::Event => events::selectable_fields(spec.kind == Builtin::Event),
                    _ => spec.fields.iter().map(|(name, default)| SelectableField::new(name, default)).collect(),
                },
                tracks_generation: spec.generation,
                behavior: Behavior::Builtin(spec.kind),
                // core/v1 and events.k8s.io/v1 Events are one resource, stored as core/v1.
                store_id: match spec.kind {
                    Builtin::Event => Arc::from("/events"),
                    _ => Arc::from(format!("{}/{}", spec.group, spec.plural)),
                },
            }
        })
        .collect()
}
