//! JSON values checked against the schemas of a cloud's published API definition: the definitions of an OpenAPI 2.0
//! document (Azure's `azure-rest-api-specs`) and the schemas of a Google discovery document. Both dialects use the
//! same keywords for what is checked here (`type`, `properties`, `required`, `items`, `enum`, `additionalProperties`,
//! `$ref`, and OpenAPI's `allOf`); they differ in how a `$ref` names its target and in how a required property is
//! marked (OpenAPI `required`, discovery `annotations.required` by method), which [`Dialect`] says.
//!
//! # Guarantees
//! - Never stricter than the definition: `null` is accepted for any property that is not required (ARM's PATCH is
//!   a JSON merge patch, proto3 JSON reads `null` as unset), an object schema without `properties` is free-form,
//!   an extensible enum (`x-ms-enum.modelAsString: true`) accepts any string, read-only properties are accepted.
//! - Strict where the services are: a member the definition does not name is refused (Azure's front end:
//!   "Could not find member 'X' on object of type 'Y'", Azure/azure-powershell#9735; Google's:
//!   "Invalid JSON payload received. Unknown name \"X\": Cannot find field."), as are wrong types, values outside a
//!   closed enum and missing required properties.
//! - A `$ref` the document does not resolve is a [`Violation`] (a fixture cut too short), never accepted silently.

use serde_json::Value;

/// How the document names schemas and required properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect<'a> {
    /// OpenAPI 2.0: `$ref` is `[file]#/definitions/NAME`, `required` lists the required properties.
    OpenApi,
    /// Google discovery: `$ref` is the schema's name, `annotations.required` lists the methods (by ID, e.g.
    /// `compute.instanceTemplates.insert`) for which the property is required.
    Discovery { method: &'a str },
}

/// What is wrong with a value, where (a JSON path from the body's root, `a.b[0].c`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub path: String,
    pub kind: ViolationKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViolationKind {
    /// A member the object's schema (`schema`, its definition's name when known) does not define.
    UnknownMember { name: String, schema: String },
    /// A required member is absent.
    MissingRequired { name: String },
    /// The value has another JSON type than `expected`.
    WrongType { expected: String },
    /// The value is not one of the closed enum's.
    NotInEnum { value: String },
    /// The document names a schema it does not contain.
    UnresolvedRef { reference: String },
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = if self.path.is_empty() { "the body".to_owned() } else { format!("'{}'", self.path) };
        match &self.kind {
            ViolationKind::UnknownMember { name, schema } => {
                write!(f, "{at}: could not find member '{name}' on object of type '{schema}'")
            }
            ViolationKind::MissingRequired { name } => write!(f, "{at}: required property '{name}' not found"),
            ViolationKind::WrongType { expected } => write!(f, "{at}: expected {expected}"),
            ViolationKind::NotInEnum { value } => write!(f, "{at}: '{value}' is not one of the allowed values"),
            ViolationKind::UnresolvedRef { reference } => write!(f, "{at}: the definition has no schema {reference}"),
        }
    }
}

/// A document's schemas: `definitions` (OpenAPI) or `schemas` (discovery), by name.
pub struct Schemas<'a> {
    pub by_name: &'a serde_json::Map<String, Value>,
    pub dialect: Dialect<'a>,
}

impl<'a> Schemas<'a> {
    /// The name a `$ref` points to.
    fn target(&self, reference: &str) -> String {
        match self.dialect {
            Dialect::OpenApi => reference.rsplit('/').next().unwrap_or(reference).to_owned(),
            Dialect::Discovery { .. } => reference.to_owned(),
        }
    }

    /// The schema `reference` names, with its name.
    fn resolve(&self, reference: &str) -> Option<(String, &'a Value)> {
        let name = self.target(reference);
        self.by_name.get(&name).map(|schema| (name, schema))
    }

    /// The violations of `value` against `schema` (named `name` when it is a definition), at `path`.
    pub fn check(&self, value: &Value, schema: &Value, name: Option<&str>, path: &str) -> Vec<Violation> {
        let mut found = Vec::new();
        self.walk(value, schema, name, path, &mut found, 0);
        found
    }

    fn walk(
        &self,
        value: &Value,
        schema: &Value,
        name: Option<&str>,
        path: &str,
        found: &mut Vec<Violation>,
        depth: usize,
    ) {
        let violation = |kind| Violation { path: path.to_owned(), kind };
        if depth > 64 || value.is_null() {
            return;
        }
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            match self.resolve(reference) {
                Some((target, resolved)) => self.walk(value, resolved, Some(target.as_str()), path, found, depth + 1),
                None => found.push(violation(ViolationKind::UnresolvedRef { reference: reference.to_owned() })),
            }
            return;
        }
        let mut properties = serde_json::Map::new();
        let mut required: Vec<String> = Vec::new();
        let mut object_schema = false;
        self.collect(schema, &mut properties, &mut required, &mut object_schema, found, path, depth);
        let declared = schema.get("type").and_then(Value::as_str);
        let expected = declared.or(object_schema.then_some("object"));
        match (expected, value) {
            (Some("object"), Value::Object(members)) => {
                for name in &required {
                    if !members.contains_key(name) {
                        found.push(violation(ViolationKind::MissingRequired { name: name.clone() }));
                    }
                }
                let additional = schema.get("additionalProperties");
                let free_form = properties.is_empty() && additional.is_none();
                for (member, member_value) in members {
                    let at = if path.is_empty() { member.clone() } else { format!("{path}.{member}") };
                    match (properties.get(member), additional) {
                        (Some(member_schema), _) => self.walk(member_value, member_schema, None, &at, found, depth + 1),
                        (None, Some(Value::Bool(true))) => {}
                        (None, Some(extra)) if extra.is_object() => {
                            self.walk(member_value, extra, None, &at, found, depth + 1)
                        }
                        (None, _) if free_form => {}
                        (None, _) => found.push(violation(ViolationKind::UnknownMember {
                            name: member.clone(),
                            schema: name.unwrap_or("object").to_owned(),
                        })),
                    }
                }
            }
            (Some("object"), _) => found.push(violation(ViolationKind::WrongType { expected: "an object".into() })),
            (Some("array"), Value::Array(items)) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.walk(item, item_schema, None, &format!("{path}[{i}]"), found, depth + 1);
                    }
                }
            }
            (Some("array"), _) => found.push(violation(ViolationKind::WrongType { expected: "an array".into() })),
            (Some("string"), Value::String(text)) => {
                if let Some(allowed) = closed_enum(schema)
                    && !allowed.iter().any(|a| a.as_str() == Some(text))
                {
                    found.push(violation(ViolationKind::NotInEnum { value: text.clone() }));
                }
            }
            (Some("string"), _) => found.push(violation(ViolationKind::WrongType { expected: "a string".into() })),
            (Some("integer"), Value::Number(n)) if n.is_i64() || n.is_u64() => {}
            (Some("integer"), _) => found.push(violation(ViolationKind::WrongType { expected: "an integer".into() })),
            (Some("number"), Value::Number(_)) => {}
            (Some("number"), _) => found.push(violation(ViolationKind::WrongType { expected: "a number".into() })),
            (Some("boolean"), Value::Bool(_)) => {}
            (Some("boolean"), _) => found.push(violation(ViolationKind::WrongType { expected: "a boolean".into() })),
            _ => {}
        }
    }

    /// The properties and required names of `schema` with those of its `allOf` parts (OpenAPI composes a
    /// definition's members from them); `object` is set when any part describes an object.
    #[allow(clippy::too_many_arguments)]
    fn collect(
        &self,
        schema: &Value,
        properties: &mut serde_json::Map<String, Value>,
        required: &mut Vec<String>,
        object: &mut bool,
        found: &mut Vec<Violation>,
        path: &str,
        depth: usize,
    ) {
        if depth > 64 {
            return;
        }
        if let Some(own) = schema.get("properties").and_then(Value::as_object) {
            *object = true;
            for (name, property) in own {
                properties.insert(name.clone(), property.clone());
                if let Dialect::Discovery { method } = self.dialect
                    && property
                        .pointer("/annotations/required")
                        .and_then(Value::as_array)
                        .is_some_and(|methods| methods.iter().any(|m| m.as_str() == Some(method)))
                {
                    required.push(name.clone());
                }
            }
        }
        if self.dialect == Dialect::OpenApi
            && let Some(names) = schema.get("required").and_then(Value::as_array)
        {
            required.extend(names.iter().filter_map(Value::as_str).map(str::to_owned));
        }
        for part in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            let part = match part.get("$ref").and_then(Value::as_str) {
                Some(reference) => match self.resolve(reference) {
                    Some((_, resolved)) => resolved,
                    None => {
                        let reference = reference.to_owned();
                        found.push(Violation {
                            path: path.to_owned(),
                            kind: ViolationKind::UnresolvedRef { reference },
                        });
                        continue;
                    }
                },
                None => part,
            };
            self.collect(part, properties, required, object, found, path, depth + 1);
        }
    }
}

/// A closed enum's values: discovery enums, and OpenAPI enums not marked extensible (`x-ms-enum.modelAsString: true`).
fn closed_enum(schema: &Value) -> Option<&Vec<Value>> {
    let values = schema.get("enum")?.as_array()?;
    let extensible = schema.pointer("/x-ms-enum/modelAsString").and_then(Value::as_bool) == Some(true);
    (!extensible).then_some(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kinds(found: Vec<Violation>) -> Vec<ViolationKind> {
        found.into_iter().map(|v| v.kind).collect()
    }

    #[test]
    fn openapi_members_types_enums_and_required_are_checked_and_nulls_accepted() {
        let definitions = json!({
            "Outer": {"properties": {"sku": {"$ref": "./other.json#/definitions/Sku"}, "mode": {"type": "string",
                "enum": ["Manual", "Automatic"], "x-ms-enum": {"modelAsString": false}}, "kind": {"type": "string",
                "enum": ["A"], "x-ms-enum": {"modelAsString": true}}, "settings": {"type": "object"},
                "tags": {"type": "object", "additionalProperties": {"type": "string"}}},
                "allOf": [{"$ref": "#/definitions/Base"}]},
            "Base": {"properties": {"id": {"type": "string", "readOnly": true}}, "required": ["id"]},
            "Sku": {"properties": {"capacity": {"type": "integer", "format": "int64"}}}
        });
        let schemas = Schemas { by_name: definitions.as_object().unwrap(), dialect: Dialect::OpenApi };
        let outer = json!({"$ref": "#/definitions/Outer"});
        let good = json!({"id": "x", "sku": {"capacity": 3}, "mode": "Manual", "kind": "B", "settings": {"any": 1},
            "tags": {"a": "b"}});
        assert_eq!(schemas.check(&good, &outer, None, ""), vec![]);
        assert_eq!(schemas.check(&json!({"id": "x", "sku": null, "mode": null}), &outer, None, ""), vec![]);
        let bad = json!({"sku": {"capacty": 3}, "mode": "Rolling", "tags": {"a": 1}});
        let found = kinds(schemas.check(&bad, &outer, None, ""));
        let expected = [
            ViolationKind::MissingRequired { name: "id".into() },
            ViolationKind::NotInEnum { value: "Rolling".into() },
            ViolationKind::UnknownMember { name: "capacty".into(), schema: "Sku".into() },
            ViolationKind::WrongType { expected: "a string".into() },
        ];
        assert_eq!(found.len(), expected.len(), "{found:?}");
        assert!(expected.iter().all(|e| found.contains(e)), "{found:?}");
        let found = schemas.check(&json!({"sku": {"capacity": "3"}, "id": "x"}), &outer, None, "");
        assert_eq!(found[0].path, "sku.capacity");
        assert_eq!(
            kinds(schemas.check(&json!({}), &json!({"$ref": "#/definitions/Missing"}), None, "")),
            vec![ViolationKind::UnresolvedRef { reference: "#/definitions/Missing".into() }]
        );
    }

    #[test]
    fn discovery_required_properties_are_per_method() {
        let schemas = json!({"Template": {"type": "object", "properties": {"name": {"type": "string",
            "annotations": {"required": ["compute.instanceTemplates.insert"]}}, "size": {"type": "string",
            "format": "int64"}}}});
        let template = json!({"$ref": "Template"});
        let insert = Schemas {
            by_name: schemas.as_object().unwrap(),
            dialect: Dialect::Discovery { method: "compute.instanceTemplates.insert" },
        };
        let get = Schemas { dialect: Dialect::Discovery { method: "compute.instanceTemplates.get" }, ..insert };
        assert_eq!(
            kinds(insert.check(&json!({}), &template, None, "")),
            vec![ViolationKind::MissingRequired { name: "name".into() }]
        );
        assert_eq!(get.check(&json!({}), &template, None, ""), vec![]);
        // int64 is a string in discovery JSON.
        assert_eq!(
            kinds(get.check(&json!({"size": 5}), &template, None, "")),
            vec![ViolationKind::WrongType { expected: "a string".into() }]
        );
    }
}
