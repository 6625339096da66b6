//! OpenAPI v2 (Swagger 2.0) forms of the v3 schemas and paths: `#/definitions/` references, body and query
//! parameters, `consumes`/`produces`, and only what kubectl's v2 parser accepts (one type per schema, no
//! `anyOf`/`oneOf`/`allOf`/`not`, no `nullable`).

use super::definitions::V3_PREFIX;
use serde_json::{Map, Value, json};

/// Where v2 documents keep their definitions.
pub const V2_PREFIX: &str = "#/definitions/";

/// A v3 schema in v2 form.
pub fn schema(v3: &Value) -> Value {
    match v3 {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, value) in map {
                match key.as_str() {
                    "anyOf" | "oneOf" | "allOf" | "not" | "nullable" => {}
                    "$ref" => {
                        let target = value.as_str().unwrap_or_default();
                        out.insert(key.clone(), json!(target.replacen(V3_PREFIX, V2_PREFIX, 1)));
                    }
                    // Maps of schemas by name (whatever the names are).
                    "properties" | "patternProperties" => {
                        let children = value.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), schema(v)));
                        out.insert(key.clone(), Value::Object(children.collect()));
                    }
                    "items" | "additionalProperties" => {
                        out.insert(key.clone(), schema(value));
                    }
                    // Values, not schemas: copied as they are.
                    _ => {
                        out.insert(key.clone(), value.clone());
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// A built-in definition in v2 form; the types v3 describes with `oneOf` are strings in v2, as upstream
/// publishes them.
pub fn builtin_definition(name: &str, v3: &Value) -> Value {
    let described = |mut s: Value| {
        if let Some(description) = v3.get("description") {
            s["description"] = description.clone();
        }
        s
    };
    match name {
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString" => {
            described(json!({"type": "string", "format": "int-or-string"}))
        }
        "io.k8s.apimachinery.pkg.api.resource.Quantity" => described(json!({"type": "string"})),
        _ => schema(v3),
    }
}

fn parameter(v3: &Value) -> Value {
    let mut out = Map::new();
    for key in ["name", "in", "description", "required"] {
        if let Some(value) = v3.get(key).filter(|v| !v.is_null() && v.as_str() != Some("")) {
            out.insert(key.into(), value.clone());
        }
    }
    if let Some(schema) = v3.get("schema").and_then(Value::as_object) {
        for (key, value) in schema {
            out.insert(key.clone(), value.clone());
        }
    }
    Value::Object(out)
}

fn operation(v3: &Value, method: &str) -> Value {
    let mut op = Map::new();
    for key in ["description", "operationId", "tags", "x-kubernetes-action", "x-kubernetes-group-version-kind"] {
        if let Some(value) = v3.get(key) {
            op.insert(key.into(), value.clone());
        }
    }
    let mut parameters: Vec<Value> =
        v3.get("parameters").and_then(Value::as_array).into_iter().flatten().map(parameter).collect();
    let mut consumes = Vec::new();
    if let Some(content) = v3.pointer("/requestBody/content").and_then(Value::as_object) {
        consumes = content.keys().cloned().collect();
        if let Some(body) = content.values().next().and_then(|c| c.get("schema")) {
            parameters.insert(
                0,
                json!({"name": "body", "in": "body", "required": method != "delete", "schema": schema(body)}),
            );
        }
    }
    if consumes.is_empty() {
        consumes.push("*/*".into());
    }
    if !parameters.is_empty() {
        op.insert("parameters".into(), Value::Array(parameters));
    }
    op.insert("consumes".into(), json!(consumes));
    op.insert("produces".into(), json!(["application/json", "application/yaml"]));
    op.insert("schemes".into(), json!(["https"]));
    let mut responses = Map::new();
    for (code, response) in v3.get("responses").and_then(Value::as_object).into_iter().flatten() {
        let mut out = json!({"description": response.get("description").cloned().unwrap_or_else(|| json!(""))});
        if let Some(body) = response
            .get("content")
            .and_then(Value::as_object)
            .and_then(|c| c.values().next())
            .and_then(|c| c.get("schema"))
        {
            out["schema"] = schema(body);
        }
        responses.insert(code.clone(), out);
    }
    op.insert("responses".into(), Value::Object(responses));
    Value::Object(op)
}

/// A v3 path item in v2 form.
pub fn path_item(v3: &Value) -> Value {
    let mut out = Map::new();
    for (key, value) in v3.as_object().into_iter().flatten() {
        match key.as_str() {
            "parameters" => {
                let parameters: Vec<Value> = value.as_array().into_iter().flatten().map(parameter).collect();
                out.insert(key.clone(), Value::Array(parameters));
            }
            method => {
                out.insert(key.clone(), operation(value, method));
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_lose_v3_keywords_and_point_at_definitions() {
        let v3 = json!({"type": "object", "properties": {"a": {"$ref": "#/components/schemas/X", "description": "d"},
            "b": {"anyOf": [{"type": "integer"}], "nullable": true, "x-kubernetes-int-or-string": true}},
            "required": ["a"], "default": {"anyOf": 1}});
        assert_eq!(
            schema(&v3),
            json!({"type": "object", "properties": {"a": {"$ref": "#/definitions/X", "description": "d"},
                "b": {"x-kubernetes-int-or-string": true}}, "required": ["a"], "default": {"anyOf": 1}})
        );
        assert_eq!(
            builtin_definition(
                "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
                &json!({"description": "d", "oneOf": []})
            ),
            json!({"type": "string", "format": "int-or-string", "description": "d"})
        );
    }

    #[test]
    fn operations_get_body_parameters_and_media_types() {
        let v3 = json!({"patch": {"operationId": "patchX", "parameters": [{"name": "fieldValidation", "in": "query",
            "schema": {"type": "string", "uniqueItems": true}}],
            "requestBody": {"content": {"application/merge-patch+json": {"schema": {"$ref": "#/components/schemas/P"}}}},
            "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/X"}}}}}},
            "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}]});
        let v2 = path_item(&v3);
        assert_eq!(v2["parameters"][0], json!({"name": "name", "in": "path", "required": true, "type": "string"}));
        assert_eq!(v2["patch"]["parameters"][0]["in"], "body");
        assert_eq!(v2["patch"]["parameters"][0]["schema"]["$ref"], "#/definitions/P");
        assert_eq!(
            v2["patch"]["parameters"][1],
            json!({"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true})
        );
        assert_eq!(v2["patch"]["consumes"], json!(["application/merge-patch+json"]));
        assert_eq!(v2["patch"]["responses"]["200"]["schema"]["$ref"], "#/definitions/X");
    }
}
