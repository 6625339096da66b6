//! The Pod kind's own rules: upstream's defaults of a pod spec (a pod's or a template's), the containers every pod
//! spec needs, what an update of a pod may change, and its QoS class.

use super::defaulting::set_default;
use crate::schema::{ErrorKind, FieldError, field_error};
use serde_json::{Value, json};

/// The defaults upstream fills into every PodSpec (`SetDefaults_PodSpec`, `SetDefaults_Container`); a pod's
/// priority comes from the Priority admission plugin (`ops::admit`), not from here.
pub fn default_pod_spec(spec: &mut Value) {
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    for list in ["containers", "initContainers"] {
        if let Some(items) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for container in items {
                let image = container.get("image").and_then(Value::as_str).unwrap_or_default();
                let last = image.rsplit('/').next().unwrap_or_default();
                let pull = if !last.contains(':') || image.ends_with(":latest") { "Always" } else { "IfNotPresent" };
                let pull = if image.contains('@') { "IfNotPresent" } else { pull };
                set_default(container, "imagePullPolicy", json!(pull));
                set_default(container, "terminationMessagePath", json!("/dev/termination-log"));
                set_default(container, "terminationMessagePolicy", json!("File"));
                if let Some(ports) = container.get_mut("ports").and_then(Value::as_array_mut) {
                    for port in ports {
                        set_default(port, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

const POD_UPDATE_FORBIDDEN: &str = "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// A pod has containers, and an update changes only what upstream lets it change.
pub(super) fn validate_pod(pod: &Value, old: Option<&Value>, errors: &mut Vec<FieldError>) {
    match pod.get("spec") {
        Some(spec) => validate_containers(spec, "spec", errors),
        None => errors.push(field_error("spec.containers", ErrorKind::Required, "Required value")),
    }
    if let Some(old) = old
        && mutable_pod_spec(old.get("spec")) != mutable_pod_spec(pod.get("spec"))
    {
        errors.push(field_error("spec", ErrorKind::Forbidden, POD_UPDATE_FORBIDDEN));
    }
}

/// Every pod spec (of a pod or a template at `path`) has containers, each with a name and an image.
pub fn validate_containers(spec: &Value, path: &str, errors: &mut Vec<FieldError>) {
    match spec.get("containers").and_then(Value::as_array) {
        None => errors.push(field_error(&format!("{path}.containers"), ErrorKind::Required, "Required value")),
        Some(list) if list.is_empty() => {
            errors.push(field_error(&format!("{path}.containers"), ErrorKind::Required, "Required value"))
        }
        Some(list) => {
            for (i, container) in list.iter().enumerate() {
                for key in ["name", "image"] {
                    if container.get(key).and_then(Value::as_str).is_none_or(str::is_empty) {
                        errors.push(field_error(
                            &format!("{path}.containers[{i}].{key}"),
                            ErrorKind::Required,
                            "Required value",
                        ));
                    }
                }
            }
        }
    }
}

/// The pod spec with the fields an update may change taken out.
fn mutable_pod_spec(spec: Option<&Value>) -> Value {
    let mut spec = spec.cloned().unwrap_or(Value::Null);
    if let Some(fields) = spec.as_object_mut() {
        for key in ["activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds"] {
            fields.remove(key);
        }
        for list in ["containers", "initContainers"] {
            if let Some(items) = fields.get_mut(list).and_then(Value::as_array_mut) {
                for item in items.iter_mut().filter_map(Value::as_object_mut) {
                    item.remove("image");
                }
            }
        }
    }
    spec
}

/// `BestEffort` without any requests or limits, `Guaranteed` when every container limits cpu and memory and
/// requests (if given) equal the limits, `Burstable` otherwise.
pub(super) fn qos_class(spec: Option<&Value>) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| spec.and_then(|s| s.get(l)).and_then(Value::as_array))
        .flatten()
        .collect();
    let resources =
        |c: &Value, kind: &str| c.pointer(&format!("/resources/{kind}")).and_then(Value::as_object).cloned();
    let any = containers.iter().any(|c| {
        resources(c, "requests").is_some_and(|r| !r.is_empty()) || resources(c, "limits").is_some_and(|r| !r.is_empty())
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let limits = resources(c, "limits").unwrap_or_default();
        let requests = resources(c, "requests").unwrap_or_default();
        ["cpu", "memory"].iter().all(|r| limits.contains_key(*r))
            && requests.iter().all(|(k, v)| limits.get(k) == Some(v))
    });
    if guaranteed { "Guaranteed" } else { "Burstable" }
}
