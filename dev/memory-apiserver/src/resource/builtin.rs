//! The built-in kinds the server serves, with the discovery data, subresources and selectable fields of each.

use super::builtin_kind::Builtin;
use super::resource_type::{Behavior, ResourceType, ScalePaths, SelectableField};
use k8s_openapi::api::{
    admissionregistration, apps, authentication, authorization, batch, coordination, core, events, policy, rbac,
    scheduling,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use schemars::{JsonSchema, SchemaGenerator};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

/// The Rust (k8s-openapi) type of a built-in kind, as what the server needs of it: decoding as the Go type
/// does, and its OpenAPI schema.
#[derive(Clone, Copy)]
pub struct KindType {
    /// Decodes through the type (unknown fields dropped, wrong types refused) and back to JSON.
    pub decode: fn(Value) -> Result<Value, serde_json::Error>,
    /// Adds the type's schema, and those it references, to the generator's definitions; returns its
    /// definition name (`io.k8s.api.core.v1.Pod`).
    pub define: fn(&mut SchemaGenerator) -> String,
}

fn decode<T: Serialize + DeserializeOwned>(value: Value) -> Result<Value, serde_json::Error> {
    serde_json::to_value(serde_json::from_value::<T>(value)?)
}

fn define<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    generator.subschema_for::<T>();
    T::schema_name().into_owned()
}

impl KindType {
    /// The descriptor of `T`.
    pub const fn of<T: Serialize + DeserializeOwned + JsonSchema>() -> Self {
        KindType { decode: decode::<T>, define: define::<T> }
    }
}

impl Builtin {
    /// The Rust type of the kind. A new built-in kind needs an arm here and an entry in the list below.
    pub fn kind_type(self) -> KindType {
        match self {
            Builtin::Namespace => KindType::of::<core::v1::Namespace>(),
            Builtin::Node => KindType::of::<core::v1::Node>(),
            Builtin::Pod => KindType::of::<core::v1::Pod>(),
            Builtin::ConfigMap => KindType::of::<core::v1::ConfigMap>(),
            Builtin::Secret => KindType::of::<core::v1::Secret>(),
            Builtin::ServiceAccount => KindType::of::<core::v1::ServiceAccount>(),
            Builtin::Service => KindType::of::<core::v1::Service>(),
            Builtin::PriorityClass => KindType::of::<scheduling::v1::PriorityClass>(),
            Builtin::Job => KindType::of::<batch::v1::Job>(),
            Builtin::CoreEvent => KindType::of::<core::v1::Event>(),
            Builtin::Event => KindType::of::<events::v1::Event>(),
            Builtin::PodDisruptionBudget => KindType::of::<policy::v1::PodDisruptionBudget>(),
            Builtin::Lease => KindType::of::<coordination::v1::Lease>(),
            Builtin::Deployment => KindType::of::<apps::v1::Deployment>(),
            Builtin::ReplicaSet => KindType::of::<apps::v1::ReplicaSet>(),
            Builtin::StatefulSet => KindType::of::<apps::v1::StatefulSet>(),
            Builtin::DaemonSet => KindType::of::<apps::v1::DaemonSet>(),
            Builtin::ControllerRevision => KindType::of::<apps::v1::ControllerRevision>(),
            Builtin::CustomResourceDefinition => KindType::of::<CustomResourceDefinition>(),
            Builtin::ClusterRole => KindType::of::<rbac::v1::ClusterRole>(),
            Builtin::ClusterRoleBinding => KindType::of::<rbac::v1::ClusterRoleBinding>(),
            Builtin::Role => KindType::of::<rbac::v1::Role>(),
            Builtin::RoleBinding => KindType::of::<rbac::v1::RoleBinding>(),
            Builtin::ValidatingAdmissionPolicy => {
                KindType::of::<admissionregistration::v1::ValidatingAdmissionPolicy>()
            }
            Builtin::ValidatingAdmissionPolicyBinding => {
                KindType::of::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>()
            }
            Builtin::SelfSubjectAccessReview => KindType::of::<authorization::v1::SelfSubjectAccessReview>(),
            Builtin::SelfSubjectRulesReview => KindType::of::<authorization::v1::SelfSubjectRulesReview>(),
            Builtin::SubjectAccessReview => KindType::of::<authorization::v1::SubjectAccessReview>(),
            Builtin::LocalSubjectAccessReview => KindType::of::<authorization::v1::LocalSubjectAccessReview>(),
            Builtin::SelfSubjectReview => KindType::of::<authentication::v1::SelfSubjectReview>(),
            Builtin::TokenReview => KindType::of::<authentication::v1::TokenReview>(),
        }
    }
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
        Spec {
            short_names: &["sa"],
            other_subresources: &["token"],
            ..base(Builtin::ServiceAccount, "", "serviceaccounts", "ServiceAccount", true)
        },
        Spec {
            short_names: &["svc"],
            categories: &["all"],
            status: true,
            fields: &[("spec.clusterIP", ""), ("spec.type", "")],
            ..base(Builtin::Service, "", "services", "Service", true)
        },
        Spec {
            short_names: &["pc"],
            ..base(Builtin::PriorityClass, "scheduling.k8s.io", "priorityclasses", "PriorityClass", false)
        },
        Spec {
            categories: &["all"],
            status: true,
            generation: true,
            fields: &[("status.successful", "0")],
            ..base(Builtin::Job, "batch", "jobs", "Job", true)
        },
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
        base(Builtin::ClusterRole, RBAC, "clusterroles", "ClusterRole", false),
        base(Builtin::ClusterRoleBinding, RBAC, "clusterrolebindings", "ClusterRoleBinding", false),
        base(Builtin::Role, RBAC, "roles", "Role", true),
        base(Builtin::RoleBinding, RBAC, "rolebindings", "RoleBinding", true),
        Spec {
            status: true,
            generation: true,
            ..base(
                Builtin::ValidatingAdmissionPolicy,
                ADMISSION,
                "validatingadmissionpolicies",
                "ValidatingAdmissionPolicy",
                false,
            )
        },
        Spec {
            generation: true,
            ..base(
                Builtin::ValidatingAdmissionPolicyBinding,
                ADMISSION,
                "validatingadmissionpolicybindings",
                "ValidatingAdmissionPolicyBinding",
                false,
            )
        },
        base(Builtin::SelfSubjectAccessReview, AUTHZ, "selfsubjectaccessreviews", "SelfSubjectAccessReview", false),
        base(Builtin::SelfSubjectRulesReview, AUTHZ, "selfsubjectrulesreviews", "SelfSubjectRulesReview", false),
        base(Builtin::SubjectAccessReview, AUTHZ, "subjectaccessreviews", "SubjectAccessReview", false),
        base(Builtin::LocalSubjectAccessReview, AUTHZ, "localsubjectaccessreviews", "LocalSubjectAccessReview", true),
        base(Builtin::SelfSubjectReview, AUTHN, "selfsubjectreviews", "SelfSubjectReview", false),
        base(Builtin::TokenReview, AUTHN, "tokenreviews", "TokenReview", false),
    ]
}

/// A selectable field; its path is its name, except where upstream's selector names another field (a Job's
/// `status.successful` is `status.succeeded`).
fn selectable(name: &str, default: &str) -> SelectableField {
    let mut field = SelectableField::new(name, default);
    if name == "status.successful" {
        field.path = vec!["status".to_owned(), "succeeded".to_owned()];
    }
    field
}

const RBAC: &str = "rbac.authorization.k8s.io";
const ADMISSION: &str = "admissionregistration.k8s.io";
const AUTHZ: &str = "authorization.k8s.io";
const AUTHN: &str = "authentication.k8s.io";

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
                    Builtin::CoreEvent | Builtin::Event => {
                        super::events::selectable_fields(spec.kind == Builtin::Event)
                    }
                    _ => spec.fields.iter().map(|(name, default)| selectable(name, default)).collect(),
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
