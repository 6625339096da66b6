//! CustomResourceDefinitions: validation, the status the apiextensions server reports, and the resource types
//! a CRD makes the server serve.
//!
//! # Guarantees
//! - A CRD is `NamesAccepted` and `Established` as soon as it is stored, so
//!   `kube::runtime::wait::conditions::is_crd_established` is satisfied by the first watch event after create.
//! - Every served version becomes a resource type with the version's schema, subresources, printer columns and
//!   selectable fields; the CRD's objects are shared by all its versions (conversion strategy `None`).

use super::object::now_rfc3339;
use super::resource::{Behavior, CustomBehavior, PrinterColumn, ResourceType, ScalePaths, SelectableField};
use crate::schema::FieldError;
use serde_json::{Value, json};
use std::sync::Arc;

/// The finalizer under which the CRD's objects are deleted before the CRD goes.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// Validates a CRD (`old` on update): see [`super::crd_validation`].
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    super::crd_validation::validate(crd, old)
}

/// Fills in the status the apiextensions server maintains: accepted names, conditions, stored versions. Also
/// adds the cleanup finalizer on create.
pub fn prepare(crd: &mut Value, old: Option<&Value>) {
    let mut names = crd.pointer("/spec/names").cloned().unwrap_or_else(|| json!({}));
    let kind = text(crd, "/spec/names/kind").to_owned();
    if let Some(names) = names.as_object_mut() {
        names.entry("singular").or_insert_with(|| json!(kind.to_lowercase()));
        names.entry("listKind").or_insert_with(|| json!(format!("{kind}List")));
    }
    if let Some(spec_names) = crd.pointer_mut("/spec/names") {
        *spec_names = names.clone();
    }
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|v| {
            v.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    let mut stored: Vec<Value> =
        old.and_then(|o| o.pointer("/status/storedVersions")).and_then(Value::as_array).cloned().unwrap_or_default();
    for version in storage {
        if !stored.contains(&version) {
            stored.push(version);
        }
    }
    let since = |kind: &str| {
        old.and_then(|o| o.pointer("/status/conditions"))
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(kind)))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now_rfc3339()))
    };
    let mut conditions = vec![
        json!({"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found",
               "lastTransitionTime": since("NamesAccepted")}),
        json!({"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
               "message": "the initial names have been accepted", "lastTransitionTime": since("Established")}),
    ];
    if crd.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        conditions.push(json!({"type": "Terminating", "status": "True", "reason": "InstanceDeletionInProgress",
            "message": "CustomResource deletion is in progress", "lastTransitionTime": since("Terminating")}));
    }
    crd["status"] = json!({"acceptedNames": names, "conditions": conditions, "storedVersions": stored});
    if old.is_none() {
        let metadata = super::object::metadata_mut(crd);
        let finalizers = metadata.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = finalizers.as_array_mut()
            && !list.iter().any(|f| f == CLEANUP_FINALIZER)
        {
            list.push(json!(CLEANUP_FINALIZER));
        }
    }
}

/// The resource types a CRD serves: one per served version.
pub fn resource_types(crd: &Value) -> Vec<ResourceType> {
    let crd_name = text(crd, "/metadata/name").to_owned();
    let group = text(crd, "/spec/group").to_owned();
    let plural = text(crd, "/spec/names/plural").to_owned();
    let kind = text(crd, "/spec/names/kind").to_owned();
    let singular = match text(crd, "/spec/names/singular") {
        "" => kind.to_lowercase(),
        s => s.to_owned(),
    };
    let strings = |pointer: &str| -> Vec<String> {
        crd.pointer(pointer)
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let list_kind = match text(crd, "/spec/names/listKind") {
        "" => format!("{kind}List"),
        s => s.to_owned(),
    };
    let short_names = strings("/spec/names/shortNames");
    let categories = strings("/spec/names/categories");
    let namespaced = text(crd, "/spec/scope") != "Cluster";
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .map(|version| {
            let path = |p: &str| -> Vec<String> { p.trim_start_matches('.').split('.').map(str::to_owned).collect() };
            let scale = version.pointer("/subresources/scale").map(|scale| ScalePaths {
                spec_replicas: path(text(scale, "/specReplicasPath")),
                status_replicas: path(text(scale, "/statusReplicasPath")),
                label_selector: scale.get("labelSelectorPath").and_then(Value::as_str).map(path),
            });
            let mut printer_columns: Vec<PrinterColumn> = version
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|columns| {
                    columns
                        .iter()
                        .map(|c| PrinterColumn {
                            name: text(c, "/name").to_owned(),
                            type_: text(c, "/type").to_owned(),
                            format: text(c, "/format").to_owned(),
                            description: text(c, "/description").to_owned(),
                            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                            json_path: text(c, "/jsonPath").to_owned(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            if printer_columns.is_empty() {
                printer_columns.push(PrinterColumn {
                    name: "Age".into(),
                    type_: "date".into(),
                    format: String::new(),
                    description: String::new(),
                    priority: 0,
                    json_path: ".metadata.creationTimestamp".into(),
                });
            }
            let selectable_fields = version
                .get("selectableFields")
                .and_then(Value::as_array)
                .map(|fields| {
                    fields
                        .iter()
                        .map(|f| SelectableField::new(text(f, "/jsonPath").trim_start_matches('.'), ""))
                        .collect()
                })
                .unwrap_or_default();
            ResourceType {
                group: group.clone(),
                version: text(version, "/name").to_owned(),
                plural: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced,
                short_names: short_names.clone(),
                categories: categories.clone(),
                status_subresource: version.pointer("/subresources/status").is_some(),
                scale,
                other_subresources: Vec::new(),
                selectable_fields,
                tracks_generation: true,
                behavior: Behavior::Custom(Arc::new(CustomBehavior {
                    crd_name: crd_name.clone(),
                    list_kind: list_kind.clone(),
                    schema: version.pointer("/schema/openAPIV3Schema").cloned(),
                    printer_columns,
                })),
                store_id: Arc::from(format!("{group}/{plural}")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget_crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                    "selectableFields": [{"jsonPath": ".spec.color"}],
                    "additionalPrinterColumns": [{"name": "Color", "type": "string", "jsonPath": ".spec.color"}],
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                        "properties": {"color": {"type": "string"}, "replicas": {"type": "integer"}}}}}}}]}})
    }

    #[test]
    fn a_valid_crd_is_established_and_serves_its_versions() {
        let mut crd = widget_crd();
        assert!(validate(&crd, None).is_empty());
        prepare(&mut crd, None);
        assert_eq!(crd["status"]["conditions"][1]["type"], "Established");
        assert_eq!(crd["status"]["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
        assert_eq!(crd["metadata"]["finalizers"], json!([CLEANUP_FINALIZER]));
        let types = resource_types(&crd);
        assert_eq!(types.len(), 1);
        let widgets = &types[0];
        assert!(widgets.status_subresource && widgets.namespaced && widgets.scale.is_some());
        assert_eq!(widgets.selectable_fields[0].name, "spec.color");
        assert_eq!(widgets.custom().unwrap().printer_columns[0].name, "Color");
    }

    #[test]
    fn invalid_crds_are_reported() {
        let mut crd = widget_crd();
        crd["metadata"]["name"] = json!("wrong");
        crd["spec"]["versions"][0]["storage"] = json!(false);
        crd["spec"]["scope"] = json!("Galaxy");
        let fields: Vec<String> = validate(&crd, None).into_iter().map(|e| e.field).collect();
        assert_eq!(fields, vec!["metadata.name", "spec.scope", "spec.versions", "status.storedVersions"]);
    }
}
