//! Per-kind write rules (upstream's "strategies"): decoding, defaulting, status resets, the status-subresource
//! split, validation and when `metadata.generation` moves.
//!
//! # Guarantees
//! - Built-in objects go through their k8s-openapi type, so wrong field types are a 400 and unknown fields are
//!   dropped, as decoding into the Go types does upstream.
//! - Custom resources are pruned, defaulted and validated against their version's `openAPIV3Schema`.

use super::defaulting::set_default;
use super::{Behavior, Builtin, ResourceType};
use super::{job, pod, priority, service};
use crate::error::ApiError;
use crate::object::{metadata_mut, name_of, omit_empty_metadata};
use crate::schema::{ErrorKind, FieldError, field_error};
use crate::selector::label::{self, LabelSelector, is_dns_label, is_dns_subdomain};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value, json};

/// What decoding into the kind's type said, as the 400 upstream sends when a body does not decode.
fn decoded(rt: &ResourceType, result: Result<Value, serde_json::Error>) -> Result<Value, ApiError> {
    result.map_err(|e| {
        ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            rt.kind, rt.version, rt.kind
        ))
    })
}

/// Decodes `object` as the kind does: through the Go-equivalent type for built-ins, pruning and defaulting for
/// custom resources. `apiVersion` and `kind` are set to the resource's, and the zero values Go's `omitempty`
/// drops from `metadata` are dropped ([`omit_empty_metadata`]).
pub fn normalize(rt: &ResourceType, mut object: Value) -> Result<Value, ApiError> {
    let Some(fields) = object.as_object_mut() else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    fields.remove("apiVersion");
    fields.remove("kind");
    let mut object = match &rt.behavior {
        Behavior::Builtin(kind) => decoded(rt, (kind.kind_type().decode)(object))?,
        Behavior::Custom(custom) => {
            let metadata = object.get("metadata").cloned().unwrap_or_else(|| json!({}));
            let metadata = decoded(rt, serde_json::from_value::<ObjectMeta>(metadata).and_then(serde_json::to_value))?;
            if let Some(schema) = &custom.schema {
                crate::schema::prune_and_default(schema, &mut object);
            }
            metadata_mut(&mut object).clone_from(metadata.as_object().unwrap_or(&Map::new()));
            object
        }
    };
    if let Some(fields) = object.as_object_mut() {
        fields.insert("apiVersion".into(), json!(rt.api_version()));
        fields.insert("kind".into(), json!(rt.kind));
        // A Node's spec and status are Go structs, not pointers: the real server always serves them, `{}` when
        // empty (admission policies compare `object.spec` and would fail on a missing key).
        if rt.is(Builtin::Node) {
            fields.entry("spec").or_insert_with(|| json!({}));
            fields.entry("status").or_insert_with(|| json!({}));
        }
    }
    omit_empty_metadata(&mut object);
    Ok(object)
}

/// Resets what a create may not set and fills the defaults (upstream `PrepareForCreate` plus defaulting).
pub fn prepare_create(rt: &ResourceType, object: &mut Value) {
    if let Some(kind) = rt.builtin() {
        crate::admission::validation::default(kind, object);
    }
    match &rt.behavior {
        Behavior::Custom(_) => {
            if rt.status_subresource
                && let Some(fields) = object.as_object_mut()
            {
                fields.remove("status");
            }
        }
        Behavior::Builtin(kind) => match kind {
            Builtin::Pod => {
                if let Some(spec) = object.get_mut("spec") {
                    pod::default_pod_spec(spec);
                }
                let qos = pod::qos_class(object.get("spec"));
                object["status"] = json!({"phase": "Pending", "qosClass": qos});
            }
            Builtin::Namespace => {
                let name = name_of(object).to_owned();
                let labels = metadata_mut(object).entry("labels").or_insert_with(|| json!({}));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
                let spec = object.as_object_mut().map(|o| o.entry("spec").or_insert_with(|| json!({})));
                if let Some(spec) = spec.and_then(Value::as_object_mut) {
                    spec.entry("finalizers").or_insert_with(|| json!(["kubernetes"]));
                }
                object["status"] = json!({"phase": "Active"});
            }
            Builtin::PodDisruptionBudget => {
                object["status"] =
                    json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0});
            }
            Builtin::Deployment => {
                default_workload(object, *kind);
                object["status"] = json!({});
            }
            Builtin::ReplicaSet => {
                default_workload(object, *kind);
                object["status"] = json!({"replicas": 0});
            }
            Builtin::StatefulSet => {
                default_workload(object, *kind);
                object["status"] = json!({"replicas": 0, "availableReplicas": 0});
            }
            Builtin::DaemonSet => {
                default_workload(object, *kind);
                object["status"] = json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                                          "desiredNumberScheduled": 0, "numberReady": 0});
            }
            Builtin::Job => job::prepare_create(object),
            Builtin::Service => {
                service::default_spec(object);
                if let Some(fields) = object.as_object_mut() {
                    fields.insert("status".into(), json!({"loadBalancer": {}}));
                }
            }
            Builtin::PriorityClass => priority::default_class(object),
            Builtin::Secret => {
                if object.get("type").is_none_or(Value::is_null)
                    && let Some(fields) = object.as_object_mut()
                {
                    fields.insert("type".into(), json!("Opaque"));
                }
            }
            _ => {}
        },
    }
}

/// Updates through the main endpoint keep what that endpoint may not change: the status (when the kind has a
/// status subresource) and, for namespaces, `spec.finalizers`. Pod template defaults apply to updates too.
pub fn prepare_update(rt: &ResourceType, old: &Value, new: &mut Value) {
    if let Some(kind) = rt.builtin() {
        crate::admission::validation::default(kind, new);
    }
    if rt.status_subresource {
        copy_field(old, new, "status");
    }
    match rt.builtin() {
        Some(Builtin::Namespace) => {
            let finalizers = old.pointer("/spec/finalizers").cloned();
            let spec = new.as_object_mut().map(|o| o.entry("spec").or_insert_with(|| json!({})));
            if let Some(spec) = spec.and_then(Value::as_object_mut) {
                match finalizers {
                    Some(f) => spec.insert("finalizers".into(), f),
                    None => spec.remove("finalizers"),
                };
            }
        }
        Some(kind @ (Builtin::Deployment | Builtin::ReplicaSet | Builtin::StatefulSet | Builtin::DaemonSet)) => {
            default_workload(new, kind);
        }
        Some(Builtin::Job) => job::prepare_update(new),
        Some(Builtin::Service) => {
            service::keep_allocated(old, new);
            service::default_spec(new);
        }
        Some(Builtin::PriorityClass) => priority::default_class(new),
        _ => {}
    }
}

/// Updates through `/status` keep everything but the status (and, for most built-ins, the metadata the
/// request carries).
pub fn prepare_status_update(rt: &ResourceType, old: &Value, new: &mut Value) {
    match &rt.behavior {
        Behavior::Custom(_) => {
            let status = new.get("status").cloned();
            let managed = new.pointer("/metadata/managedFields").cloned();
            *new = old.clone();
            if let Some(fields) = new.as_object_mut() {
                match status {
                    Some(status) => fields.insert("status".into(), status),
                    None => fields.remove("status"),
                };
            }
            match managed {
                Some(m) => metadata_mut(new).insert("managedFields".into(), m),
                None => metadata_mut(new).remove("managedFields"),
            };
        }
        Behavior::Builtin(kind) => {
            copy_field(old, new, "spec");
            match kind {
                Builtin::Pod => {
                    let owners = old.pointer("/metadata/ownerReferences").cloned();
                    match owners {
                        Some(o) => metadata_mut(new).insert("ownerReferences".into(), o),
                        None => metadata_mut(new).remove("ownerReferences"),
                    };
                }
                Builtin::Deployment | Builtin::ReplicaSet | Builtin::StatefulSet | Builtin::DaemonSet => {
                    let labels = old.pointer("/metadata/labels").cloned();
                    match labels {
                        Some(l) => metadata_mut(new).insert("labels".into(), l),
                        None => metadata_mut(new).remove("labels"),
                    };
                }
                _ => {}
            }
        }
    }
}

fn copy_field(from: &Value, to: &mut Value, key: &str) {
    let value = from.get(key).cloned();
    if let Some(fields) = to.as_object_mut() {
        match value {
            Some(v) => fields.insert(key.to_owned(), v),
            None => fields.remove(key),
        };
    }
}

/// True when a write changes what `metadata.generation` counts: the spec for built-ins; everything but metadata
/// (and status, with a status subresource) for custom resources.
pub fn generation_changes(rt: &ResourceType, old: &Value, new: &Value) -> bool {
    match &rt.behavior {
        Behavior::Builtin(_) => old.get("spec") != new.get("spec"),
        Behavior::Custom(_) => {
            let strip = |v: &Value| -> Map<String, Value> {
                v.as_object()
                    .map(|o| {
                        o.iter()
                            .filter(|(k, _)| *k != "metadata" && !(rt.status_subresource && *k == "status"))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            strip(old) != strip(new)
        }
    }
}

/// `utilvalidation.IsDNS1123Subdomain`'s message.
pub(crate) const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_MESSAGE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// Validates a new object (`old` is `None`) or an update. An empty result means valid.
pub fn validate(rt: &ResourceType, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if old.is_none() {
        let name = name_of(object);
        let dns_label = rt.is(Builtin::Namespace);
        let valid = if dns_label { is_dns_label(name) } else { is_dns_subdomain(name) };
        if !valid {
            let message = if dns_label { LABEL_MESSAGE } else { SUBDOMAIN_MESSAGE };
            errors.push(field_error(
                "metadata.name",
                ErrorKind::Invalid,
                format!("Invalid value: {name:?}: {message}"),
            ));
        }
    }
    validate_labels(object, &mut errors);
    match &rt.behavior {
        Behavior::Custom(custom) => {
            if let Some(schema) = &custom.schema {
                // An update is ratcheted: errors in values left as they were are not reported (GA in 1.30).
                match old {
                    Some(old) => errors.extend(crate::schema::validate_update(schema, object, old)),
                    None => errors.extend(crate::schema::validate(schema, object)),
                }
                // customresource/strategy.go runs the CEL rules (if the schema has any) after the schema's
                // validation, unless an error the rules were not written for (`hasBlockingErr`: type, required,
                // enum, size) was found.
                let has_rules = crate::crd_cel::has_rules(schema);
                let blocking = errors.iter().any(|e| {
                    matches!(
                        e.kind,
                        ErrorKind::NotSupported
                            | ErrorKind::Required
                            | ErrorKind::TooLong
                            | ErrorKind::TooMany
                            | ErrorKind::TypeInvalid
                    )
                });
                if has_rules && blocking {
                    errors.push(field_error(
                        "<nil>",
                        ErrorKind::Invalid,
                        "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                    ));
                } else if has_rules {
                    errors.extend(crate::crd_cel::validate(schema, object, old));
                }
            }
        }
        Behavior::Builtin(kind) => match kind {
            Builtin::Pod => pod::validate_pod(object, old, &mut errors),
            Builtin::Lease => validate_lease(object, &mut errors),
            Builtin::PodDisruptionBudget => validate_pdb(object, &mut errors),
            Builtin::Deployment | Builtin::ReplicaSet | Builtin::StatefulSet | Builtin::DaemonSet => {
                validate_workload(object, old, &mut errors);
            }
            Builtin::ConfigMap | Builtin::Secret => validate_immutable_data(object, old, &mut errors),
            Builtin::CoreEvent | Builtin::Event => errors.extend(super::events::validate(rt, object, old)),
            Builtin::Job => errors.extend(job::validate(object, old)),
            Builtin::Service => errors.extend(service::validate(object, old)),
            Builtin::PriorityClass => errors.extend(priority::validate(object, old)),
            kind if kind.is_rbac() || kind.is_admission_policy() => {
                errors.extend(crate::admission::validation::validate(*kind, object, old));
            }
            _ => {}
        },
    }
    errors
}

/// A ConfigMap or Secret marked `immutable: true` keeps its data and the mark for good.
fn validate_immutable_data(object: &Value, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    let Some(old) = old.filter(|o| o.get("immutable").and_then(Value::as_bool) == Some(true)) else { return };
    const MESSAGE: &str = "Forbidden: field is immutable when `immutable` is set";
    if object.get("immutable") != old.get("immutable") {
        errors.push(field_error("immutable", ErrorKind::Forbidden, MESSAGE));
    }
    for field in ["data", "binaryData"] {
        if object.get(field) != old.get(field) {
            errors.push(field_error(field, ErrorKind::Forbidden, MESSAGE));
        }
    }
}

fn validate_labels(object: &Value, errors: &mut Vec<FieldError>) {
    let Some(labels) = object.pointer("/metadata/labels").and_then(Value::as_object) else { return };
    for (key, value) in labels {
        if let Err(why) = label::validate_key(key) {
            errors.push(field_error("metadata.labels", ErrorKind::Invalid, format!("Invalid value: {key:?}: {why}")));
        }
        let value = value.as_str().unwrap_or_default();
        if let Err(why) = label::validate_value(value) {
            errors.push(field_error("metadata.labels", ErrorKind::Invalid, format!("Invalid value: {value:?}: {why}")));
        }
    }
}

fn validate_lease(lease: &Value, errors: &mut Vec<FieldError>) {
    if let Some(duration) = lease.pointer("/spec/leaseDurationSeconds").and_then(Value::as_i64)
        && duration <= 0
    {
        errors.push(field_error(
            "spec.leaseDurationSeconds",
            ErrorKind::Invalid,
            format!("Invalid value: {duration}: must be greater than 0"),
        ));
    }
    if let Some(transitions) = lease.pointer("/spec/leaseTransitions").and_then(Value::as_i64)
        && transitions < 0
    {
        errors.push(field_error(
            "spec.leaseTransitions",
            ErrorKind::Invalid,
            format!("Invalid value: {transitions}: must be greater than or equal to 0"),
        ));
    }
}

fn validate_pdb(pdb: &Value, errors: &mut Vec<FieldError>) {
    let spec = pdb.get("spec");
    let has = |key| spec.and_then(|s| s.get(key)).is_some_and(|v| !v.is_null());
    if has("minAvailable") && has("maxUnavailable") {
        errors.push(field_error(
            "spec",
            ErrorKind::Invalid,
            format!(
                "Invalid value: {}: minAvailable and maxUnavailable cannot be both set",
                spec.cloned().unwrap_or_default()
            ),
        ));
    }
    if let Some(selector) = spec.and_then(|s| s.get("selector"))
        && let Err(why) = LabelSelector::from_object(selector)
    {
        errors.push(field_error("spec.selector", ErrorKind::Invalid, format!("Invalid value: {selector}: {why}")));
    }
}

fn validate_workload(object: &Value, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    let selector = object.pointer("/spec/selector");
    match selector {
        None => errors.push(field_error("spec.selector", ErrorKind::Required, "Required value")),
        Some(selector) => match LabelSelector::from_object(selector) {
            Err(why) => errors.push(field_error(
                "spec.selector",
                ErrorKind::Invalid,
                format!("Invalid value: {selector}: {why}"),
            )),
            Ok(parsed) if parsed.is_empty() => errors.push(field_error(
                "spec.selector",
                ErrorKind::Invalid,
                format!("Invalid value: {selector}: empty selector is invalid for deployment"),
            )),
            Ok(parsed) => {
                let labels = object.pointer("/spec/template/metadata/labels").and_then(Value::as_object);
                if !parsed.matches_map(labels) {
                    errors.push(field_error(
                        "spec.template.metadata.labels",
                        ErrorKind::Invalid,
                        format!(
                            "Invalid value: {}: `selector` does not match template `labels`",
                            labels.map(|l| Value::Object(l.clone())).unwrap_or_default()
                        ),
                    ));
                }
            }
        },
    }
    if let Some(replicas) = object.pointer("/spec/replicas").and_then(Value::as_i64)
        && replicas < 0
    {
        errors.push(field_error(
            "spec.replicas",
            ErrorKind::Invalid,
            format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        ));
    }
    if let Some(old) = old
        && old.pointer("/spec/selector") != selector
    {
        errors.push(field_error(
            "spec.selector",
            ErrorKind::Invalid,
            format!("Invalid value: {}: field is immutable", selector.cloned().unwrap_or_default()),
        ));
    }
}

fn default_workload(object: &mut Value, kind: Builtin) {
    let Some(spec) = object.get_mut("spec") else { return };
    match kind {
        Builtin::Deployment => {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
            let parameters = [("maxUnavailable", json!("25%")), ("maxSurge", json!("25%"))];
            default_rolling_update(spec, "strategy", &parameters, false);
        }
        Builtin::ReplicaSet => set_default(spec, "replicas", json!(1)),
        Builtin::StatefulSet => {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "podManagementPolicy", json!("OrderedReady"));
            default_rolling_update(spec, "updateStrategy", &[("partition", json!(0))], true);
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "persistentVolumeClaimRetentionPolicy", json!({}));
            if let Some(policy) = spec.get_mut("persistentVolumeClaimRetentionPolicy") {
                set_default(policy, "whenDeleted", json!("Retain"));
                set_default(policy, "whenScaled", json!("Retain"));
            }
        }
        Builtin::DaemonSet => {
            let parameters = [("maxUnavailable", json!(1)), ("maxSurge", json!(0))];
            default_rolling_update(spec, "updateStrategy", &parameters, false);
            set_default(spec, "revisionHistoryLimit", json!(10));
        }
        _ => {}
    }
    if let Some(pod_spec) = spec.pointer_mut("/template/spec") {
        pod::default_pod_spec(pod_spec);
    }
}

/// A workload's update strategy as upstream defaults it (`SetDefaults_Deployment`, `_DaemonSet`,
/// `_StatefulSet`): an empty `type` is `RollingUpdate`, whose `rollingUpdate` gets each missing parameter. A Go
/// client always sends the strategy, often as `{}`.
///
/// A StatefulSet (`only_when_typed_here`) gets a `rollingUpdate` only when its type was empty.
fn default_rolling_update(spec: &mut Value, field: &str, parameters: &[(&str, Value)], only_when_typed_here: bool) {
    set_default(spec, field, json!({}));
    let Some(strategy) = spec.get_mut(field) else { return };
    let untyped = strategy.get("type").and_then(Value::as_str).is_none_or(str::is_empty);
    if untyped && let Some(fields) = strategy.as_object_mut() {
        fields.insert("type".into(), json!("RollingUpdate"));
    }
    if strategy.get("type").and_then(Value::as_str) != Some("RollingUpdate") {
        return;
    }
    if untyped || !only_when_typed_here {
        set_default(strategy, "rollingUpdate", json!({}));
    }
    if let Some(rolling_update) = strategy.get_mut("rollingUpdate") {
        for (name, value) in parameters {
            set_default(rolling_update, name, value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::builtin_types;

    fn rt(plural: &str) -> ResourceType {
        builtin_types().into_iter().find(|t| t.plural == plural).unwrap()
    }

    #[test]
    fn built_ins_decode_through_their_type() {
        let pods = rt("pods");
        let pod =
            normalize(&pods, json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}, "junk": 1}))
                .unwrap();
        assert_eq!(pod["apiVersion"], "v1");
        assert_eq!(pod["kind"], "Pod");
        assert!(pod.get("junk").is_none());
        let error = normalize(&pods, json!({"spec": {"containers": "nope"}})).unwrap_err();
        assert_eq!(error.code, 400);
    }

    #[test]
    fn pod_creation_resets_status_and_fills_defaults() {
        let pods = rt("pods");
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx:1.2",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}, "status": {"phase": "Running"}});
        prepare_create(&pods, &mut pod);
        assert_eq!(pod["status"], json!({"phase": "Pending", "qosClass": "Guaranteed"}));
        assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "IfNotPresent");
    }

    #[test]
    fn an_empty_update_strategy_is_defaulted_inside() {
        let deployments = rt("deployments");
        let mut deployment = json!({"spec": {"strategy": {}, "template": {"spec": {"containers": []}}}});
        prepare_create(&deployments, &mut deployment);
        assert_eq!(
            deployment["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        let mut recreate = json!({"spec": {"strategy": {"type": "Recreate"}}});
        prepare_create(&deployments, &mut recreate);
        assert_eq!(recreate["spec"]["strategy"], json!({"type": "Recreate"}));
        let daemon_sets = rt("daemonsets");
        let mut daemon_set = json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxSurge": 1}}}});
        prepare_create(&daemon_sets, &mut daemon_set);
        assert_eq!(
            daemon_set["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}})
        );
    }

    #[test]
    fn status_and_spec_go_through_their_own_endpoints() {
        let nodes = rt("nodes");
        let old = json!({"spec": {"unschedulable": true}, "status": {"phase": "Running"}});
        let mut main = json!({"spec": {}, "status": {"phase": "Lost"}});
        prepare_update(&nodes, &old, &mut main);
        assert_eq!(main, json!({"spec": {}, "status": {"phase": "Running"}}));
        let mut status = json!({"spec": {}, "status": {"phase": "Lost"}});
        prepare_status_update(&nodes, &old, &mut status);
        assert_eq!(status, json!({"spec": {"unschedulable": true}, "status": {"phase": "Lost"}}));
    }

    #[test]
    fn validation_reports_the_upstream_errors() {
        let leases = rt("leases");
        let errors = validate(&leases, &json!({"metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": 0}}), None);
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec!["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"]
        );
        let pods = rt("pods");
        let errors = validate(&pods, &json!({"metadata": {"name": "Bad_Name"}, "spec": {}}), None);
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[1].to_string(), "spec.containers: Required value");
        let old =
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "", "containers": [{"name": "c", "image": "a"}]}});
        let new =
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "a"}]}});
        assert_eq!(validate(&pods, &new, Some(&old))[0].kind, ErrorKind::Forbidden);
        let image =
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "", "containers": [{"name": "c", "image": "b"}]}});
        assert!(validate(&pods, &image, Some(&old)).is_empty());
        let deployments = rt("deployments");
        let deployment = json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "b"}}}}});
        assert_eq!(validate(&deployments, &deployment, None)[0].field, "spec.template.metadata.labels");
    }

    #[test]
    fn immutable_config_maps_keep_their_data() {
        let config_maps = rt("configmaps");
        let old = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"k": "v"}});
        let changed = json!({"metadata": {"name": "c"}, "immutable": true, "data": {"k": "w"}});
        assert_eq!(validate(&config_maps, &changed, Some(&old))[0].field, "data");
        let unlocked = json!({"metadata": {"name": "c"}, "immutable": false, "data": {"k": "v"}});
        assert_eq!(validate(&config_maps, &unlocked, Some(&old))[0].field, "immutable");
        let labelled = json!({"metadata": {"name": "c", "labels": {"a": "b"}}, "immutable": true, "data": {"k": "v"}});
        assert!(validate(&config_maps, &labelled, Some(&old)).is_empty());
        let mutable = json!({"metadata": {"name": "c"}, "data": {"k": "v"}});
        assert!(validate(&config_maps, &changed, Some(&mutable)).is_empty());
    }

    #[test]
    fn generation_counts_spec_changes_only() {
        let pdbs = rt("poddisruptionbudgets");
        assert!(!generation_changes(
            &pdbs,
            &json!({"spec": {"a": 1}, "metadata": {"labels": {}}}),
            &json!({"spec": {"a": 1}})
        ));
        assert!(generation_changes(&pdbs, &json!({"spec": {"a": 1}}), &json!({"spec": {"a": 2}})));
    }
}
