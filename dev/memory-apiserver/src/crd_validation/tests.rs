use super::*;

const ROOT: &str = "spec.validation.openAPIV3Schema";

fn widget(schema: Value) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema}}]}})
}

fn spec_with(properties: Value) -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": properties}}})
}

fn errors(crd: &Value) -> Vec<String> {
    validate(crd, None).iter().map(ToString::to_string).collect()
}

#[test]
fn a_structural_crd_with_every_feature_is_accepted() {
    let mut crd = widget(json!({"type": "object", "description": "a widget", "properties": {
        "spec": {"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "minimum": 1, "default": 1},
            "surge": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}],
                      "minimum": 1, "pattern": "^[0-9]+%$", "nullable": true, "description": "count or percentage"},
            "mode": {"type": "string", "enum": ["A", "B"], "default": "A"},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            "window": {"type": "object", "default": {"start": "a"}, "properties": {"start": {"type": "string"}}}},
            "x-kubernetes-validations": [{"rule": "self.size < 100", "message": "too big"}]},
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}));
    crd["spec"]["versions"][0]["subresources"] = json!({"status": {}, "scale": {"specReplicasPath": ".spec.size",
        "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"}});
    crd["spec"]["versions"][0]["additionalPrinterColumns"] =
        json!([{"name": "Size", "type": "integer", "format": "int32", "jsonPath": ".spec.size"}]);
    crd["spec"]["versions"][0]["selectableFields"] = json!([{"jsonPath": ".spec.mode"}]);
    crd["spec"]["conversion"] = json!({"strategy": "None"});
    assert_eq!(errors(&crd), Vec::<String>::new());
}

#[test]
fn the_broken_node_version_form_is_refused_as_a_real_server_refuses_it() {
    let crd = widget(json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "rollout": {"type": "object", "properties": {"maxUnavailable": {"x-kubernetes-int-or-string": true,
            "nullable": true, "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^(100|[1-9][0-9]?)%$"}]}}}}}}}));
    let field = format!("{ROOT}.properties[spec].properties[rollout].properties[maxUnavailable]");
    assert_eq!(
        errors(&crd),
        vec![
            format!("{field}.anyOf[0].type: Forbidden: must be empty to be structural"),
            format!("{field}.anyOf[1].type: Forbidden: must be empty to be structural"),
        ]
    );
}

#[test]
fn versions_with_different_schemas_are_reported_per_version() {
    let mut crd = widget(json!({"type": "object"}));
    crd["spec"]["versions"] = json!([
        {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "string"}}},
        {"name": "v3", "served": true, "storage": false}]);
    assert_eq!(
        errors(&crd),
        vec![
            "spec.versions[1].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root",
            "spec.versions[2].schema.openAPIV3Schema: Required value",
        ]
    );
}

#[test]
fn names_versions_and_storage_follow_upstream_rules() {
    let mut crd = widget(json!({"type": "object"}));
    crd["spec"]["names"] = json!({"plural": "Widgets", "kind": "Widget", "listKind": "Widget", "shortNames": ["w_1"], "categories": ["All"]});
    crd["spec"]["versions"] = json!([
        {"name": "V1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "V1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]);
    crd["spec"]["group"] = json!("example");
    crd["metadata"]["name"] = json!("Widgets.example");
    let fields: Vec<String> = validate(&crd, None).into_iter().map(|e| e.field).collect();
    assert_eq!(
        fields,
        vec![
            "spec.group",
            "spec.versions[0].name",
            "spec.versions[1].name",
            "spec.versions",
            "spec.versions",
            "spec.names.plural",
            "spec.names.shortNames[0]",
            "spec.names.listKind",
            "spec.names.categories[0]",
        ]
    );
    let text = errors(&crd);
    assert!(
        text.contains(&"spec.group: Invalid value: \"example\": should be a domain with at least one dot".to_owned())
    );
    assert!(
        text.iter()
            .any(|e| e.starts_with("spec.versions: Invalid value: [")
                && e.ends_with("must contain unique version names"))
    );
    assert!(
        text.contains(
            &"spec.names.listKind: Invalid value: \"Widget\": kind and listKind may not be the same".to_owned()
        )
    );
    assert!(
        text.iter()
            .any(|e| e.starts_with("spec.versions[0].name: Invalid value: \"V1\": a DNS-1035 label must consist"))
    );
}

#[test]
fn a_crd_without_a_storage_version_has_no_stored_version_either() {
    let mut crd = widget(json!({"type": "object"}));
    crd["spec"]["versions"][0]["storage"] = json!(false);
    let text = errors(&crd);
    assert_eq!(text.len(), 2, "{text:?}");
    assert!(text[0].ends_with("must have exactly one version marked as storage version"));
    assert_eq!(text[1], "status.storedVersions: Invalid value: []: must have at least one stored version");
}

#[test]
fn printer_columns_subresources_and_conversion_are_checked() {
    let mut crd = widget(spec_with(json!({"size": {"type": "integer"}})));
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = json!([{"name": "", "type": "float", "format": "percent", "jsonPath": "spec.size"}, {"name": "Age", "jsonPath": ""}]);
    crd["spec"]["versions"][0]["subresources"] = json!({"scale": {"specReplicasPath": ".status.size", "statusReplicasPath": "", "labelSelectorPath": "selector"}});
    crd["spec"]["conversion"] = json!({"strategy": "Webhook"});
    assert_eq!(
        errors(&crd),
        vec![
            "spec.subresources.scale.specReplicasPath: Invalid value: \".status.size\": should be a json path under .spec",
            "spec.subresources.scale.statusReplicasPath: Required value",
            "spec.subresources.scale.labelSelectorPath: Invalid value: \"selector\": must be a simple json path starting with .",
            "spec.additionalPrinterColumns[0].name: Required value",
            "spec.additionalPrinterColumns[0].type: Invalid value: \"float\": must be one of boolean,date,integer,number,string",
            "spec.additionalPrinterColumns[0].format: Invalid value: \"percent\": must be one of byte,date,date-time,double,float,int32,int64,password",
            "spec.additionalPrinterColumns[0].JSONPath: Invalid value: \"spec.size\": must be a simple json path starting with .",
            "spec.additionalPrinterColumns[1].type: Required value: must be one of boolean,date,integer,number,string",
            "spec.additionalPrinterColumns[1].JSONPath: Required value",
            "spec.conversion.strategy: Forbidden: the dev API server converts with strategy None only (it has no conversion webhooks)",
        ]
    );
}

#[test]
fn defaults_must_be_pruned_valid_and_outside_metadata() {
    let crd = widget(json!({"type": "object", "properties": {
        "metadata": {"type": "object", "default": {"name": "x"}},
        "spec": {"type": "object", "properties": {
            "size": {"type": "integer", "minimum": 1, "default": 0},
            "window": {"type": "object", "default": {"start": "a", "junk": 1}, "properties": {"start": {"type": "string"}}}}}}}));
    assert_eq!(
        errors(&crd),
        vec![
            format!(
                "{ROOT}.properties[spec].properties[size].default: Invalid value: 0:  in body should be greater than or equal to 1"
            ),
            format!(
                "{ROOT}.properties[spec].properties[window].default: Invalid value: {{\"junk\":1,\"start\":\"a\"}}: must not have unknown fields"
            ),
            format!("{ROOT}.properties[metadata].default: Forbidden: must not be set in top-level metadata"),
        ]
    );
}

#[test]
fn the_root_of_a_schema_with_a_status_subresource_is_restricted() {
    let mut crd = widget(json!({"type": "object", "anyOf": [{"required": ["spec"]}], "nullable": true,
        "properties": {"spec": {"type": "object"}}}));
    crd["spec"]["versions"][0]["subresources"] = json!({"status": {}});
    let text = errors(&crd);
    assert_eq!(text.len(), 2, "{text:?}");
    assert!(text[0].starts_with(&format!("{ROOT}: Invalid value: {{")));
    assert!(text[0].ends_with("fields are allowed at the root of the schema if the status subresource is enabled"));
    assert_eq!(text[1], format!("{ROOT}.nullable: Forbidden: nullable cannot be true at the root"));
}

#[test]
fn list_and_map_extensions_are_checked() {
    let crd = widget(spec_with(json!({
        "keyless": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
        "objects": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "object"}},
        "optional": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                     "items": {"type": "object", "properties": {"k": {"type": "string", "nullable": true}}}},
        "wrong": {"type": "string", "x-kubernetes-list-type": "bag", "x-kubernetes-map-type": "atomic"}})));
    let spec = format!("{ROOT}.properties[spec].properties");
    assert_eq!(
        errors(&crd),
        vec![
            format!(
                "{spec}[keyless].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"
            ),
            format!(
                "{spec}[objects].items.x-kubernetes-map-type: Invalid value: \"null\": must be atomic as item of a list with x-kubernetes-list-type=set"
            ),
            format!(
                "{spec}[optional].items.properties[k].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"
            ),
            format!(
                "{spec}[optional].items.properties[k].nullable: Forbidden: this property is in x-kubernetes-list-map-keys, so it cannot be nullable"
            ),
            format!(
                "{spec}[wrong].type: Invalid value: \"string\": must be object if x-kubernetes-map-type is specified"
            ),
            format!(
                "{spec}[wrong].type: Invalid value: \"string\": must be array if x-kubernetes-list-type is specified"
            ),
            format!(
                "{spec}[wrong].x-kubernetes-list-type: Unsupported value: \"bag\": supported values: \"atomic\", \"set\", \"map\""
            ),
        ]
    );
}

#[test]
fn keywords_crds_may_not_use_are_refused() {
    let crd = widget(spec_with(json!({
        "uniq": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
        "both": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
        "nil": {"type": "null"},
        "rules": {"type": "string", "x-kubernetes-validations": [{"rule": " "}, {"rule": "self != ''", "reason": "Nope"}]}})));
    let spec = format!("{ROOT}.properties[spec].properties");
    assert_eq!(
        errors(&crd),
        vec![
            format!(
                "{spec}[both].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
            ),
            format!(
                "{spec}[nil].type: Unsupported value: \"null\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
            ),
            format!("{spec}[nil].type: Forbidden: type cannot be set to null, use nullable as an alternative"),
            format!("{spec}[rules].x-kubernetes-validations[0].rule: Required value: rule is not specified"),
            format!(
                "{spec}[rules].x-kubernetes-validations[1].reason: Unsupported value: \"Nope\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
            ),
            format!(
                "{spec}[uniq].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
            ),
        ]
    );
    let reference = widget(spec_with(json!({"r": {"$ref": "#/definitions/x"}})));
    assert_eq!(errors(&reference), vec![format!("{spec}[r].$ref: Forbidden: $ref is not supported"),]);
}

#[test]
fn selectable_fields_name_scalar_fields_outside_metadata() {
    let mut crd =
        widget(spec_with(json!({"color": {"type": "string"}, "list": {"type": "array", "items": {"type": "string"}}})));
    crd["spec"]["versions"][0]["selectableFields"] = json!([{"jsonPath": ".spec.color"}, {"jsonPath": ".spec.color"}, {"jsonPath": ".spec.list"}, {"jsonPath": ".spec.nope"}, {"jsonPath": ""}]);
    assert_eq!(
        errors(&crd),
        vec![
            "spec.selectableFields[1].jsonPath: Duplicate value: \".spec.color\"",
            "spec.selectableFields[2].jsonPath: Invalid value: \".spec.list\": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            "spec.selectableFields[3].jsonPath: Invalid value: \".spec.nope\": is an invalid path: does not refer to a valid field: \"nope\"",
            "spec.selectableFields[4].jsonPath: Required value",
        ]
    );
}

#[test]
fn updates_keep_identity_and_stored_versions() {
    let mut old = widget(json!({"type": "object"}));
    old["status"] = json!({"storedVersions": ["v1"], "conditions": [{"type": "Established", "status": "True"}]});
    let mut new = old.clone();
    new["spec"]["group"] = json!("other.com");
    new["spec"]["scope"] = json!("Cluster");
    new["spec"]["versions"][0]["name"] = json!("v2");
    let text: Vec<String> = validate(&new, Some(&old)).iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        vec![
            "status.storedVersions[0]: Invalid value: \"v1\": missing from spec.versions; v1 was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in v1 and removes v1 from status.storedVersions",
            "spec.scope: Invalid value: \"Cluster\": field is immutable",
            "spec.group: Invalid value: \"other.com\": field is immutable",
        ]
    );
}

#[test]
fn protected_groups_need_api_approval() {
    let mut crd = widget(json!({"type": "object"}));
    crd["spec"]["group"] = json!("widgets.k8s.io");
    crd["metadata"]["name"] = json!("widgets.widgets.k8s.io");
    assert_eq!(
        errors(&crd),
        vec![
            "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation \"api-approved.kubernetes.io\", see https://github.com/kubernetes/enhancements/pull/1111"
        ]
    );
    crd["metadata"]["annotations"] =
        json!({"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/1"});
    assert_eq!(errors(&crd), Vec::<String>::new());
    crd["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": "yes"});
    assert_eq!(errors(&crd).len(), 1);
}

/// validation.go `ValidateCustomResourceDefinitionOpenAPISchema`: rules that do not compile refuse the CRD, on the
/// rule's path with the rule as the value; a `fieldPath` may not index a list (`cel.ValidFieldPath`).
#[test]
fn rules_that_do_not_compile_and_list_indexes_in_field_paths_are_refused() {
    let crd = widget(spec_with(json!({
        "broken": {"type": "string", "x-kubernetes-validations": [{"rule": "self =="}]},
        "fine": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() < 4", "messageExpression": "'too long: ' + self"}]}})));
    let spec = format!("{ROOT}.properties[spec].properties");
    let found = errors(&crd);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(&format!(
            "{spec}[broken].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{{Rule:\"self ==\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}}: compilation failed: ERROR: <input>:1:"
        )),
        "{found:?}"
    );
    let indexed = widget(spec_with(json!({"list": {"type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "string"}}},
        "x-kubernetes-validations": [{"rule": "true", "fieldPath": ".items[0]"}]}})));
    assert_eq!(
        errors(&indexed),
        vec![format!(
            "{spec}[list].x-kubernetes-validations[0].fieldPath: Invalid value: \".items[0]\": fieldPath must be a valid path"
        )]
    );
}
