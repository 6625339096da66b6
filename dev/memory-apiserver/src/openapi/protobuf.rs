//! The protobuf form of an OpenAPI v2 document (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`),
//! gnostic's `openapi.v2.Document`, which client-go's `OpenAPISchema()` asks for and only it can read.
//!
//! The messages below are the subset of gnostic's `OpenAPIv2.proto` the server's documents use, with the field
//! numbers of that file; vendor extensions and example or default values are YAML text, as gnostic stores them
//! (JSON is YAML).

use prost::Message;
use serde_json::Value;

#[derive(Clone, PartialEq, Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Paths {
    #[prost(message, repeated, tag = "2")]
    pub path: Vec<NamedPathItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedPathItem {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<PathItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct PathItem {
    #[prost(message, optional, tag = "2")]
    pub get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    pub put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    pub post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    pub delete: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    pub patch: Option<Operation>,
    #[prost(message, repeated, tag = "9")]
    pub parameters: Vec<ParametersItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Operation {
    #[prost(string, repeated, tag = "1")]
    pub tags: Vec<String>,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "5")]
    pub operation_id: String,
    #[prost(string, repeated, tag = "6")]
    pub produces: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub consumes: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    pub responses: Option<Responses>,
    #[prost(string, repeated, tag = "10")]
    pub schemes: Vec<String>,
    #[prost(message, repeated, tag = "13")]
    pub vendor_extension: Vec<NamedAny>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ParametersItem {
    #[prost(oneof = "parameters_item::Oneof", tags = "1")]
    pub oneof: Option<parameters_item::Oneof>,
}

pub mod parameters_item {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        Parameter(super::Parameter),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct Parameter {
    #[prost(oneof = "parameter::Oneof", tags = "1, 2")]
    pub oneof: Option<parameter::Oneof>,
}

pub mod parameter {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        BodyParameter(Box<super::BodyParameter>),
        #[prost(message, tag = "2")]
        NonBodyParameter(super::NonBodyParameter),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct BodyParameter {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub r#in: String,
    #[prost(bool, tag = "4")]
    pub required: bool,
    #[prost(message, optional, tag = "5")]
    pub schema: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NonBodyParameter {
    #[prost(oneof = "non_body_parameter::Oneof", tags = "3, 4")]
    pub oneof: Option<non_body_parameter::Oneof>,
}

pub mod non_body_parameter {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "3")]
        QueryParameterSubSchema(super::QueryParameterSubSchema),
        #[prost(message, tag = "4")]
        PathParameterSubSchema(super::PathParameterSubSchema),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct QueryParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "6")]
    pub r#type: String,
    #[prost(bool, tag = "20")]
    pub unique_items: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct PathParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "5")]
    pub r#type: String,
    #[prost(bool, tag = "19")]
    pub unique_items: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Responses {
    #[prost(message, repeated, tag = "1")]
    pub response_code: Vec<NamedResponseValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedResponseValue {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<ResponseValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResponseValue {
    #[prost(message, optional, tag = "1")]
    pub response: Option<Response>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(message, optional, tag = "2")]
    pub schema: Option<SchemaItem>,
}

#[derive(Clone, PartialEq, Message)]
pub struct SchemaItem {
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "additional_properties_item::Oneof", tags = "1, 2")]
    pub oneof: Option<additional_properties_item::Oneof>,
}

pub mod additional_properties_item {
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        Schema(Box<super::Schema>),
        #[prost(bool, tag = "2")]
        Boolean(bool),
    }
}

#[derive(Clone, PartialEq, Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "3")]
    pub title: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    #[prost(double, tag = "6")]
    pub multiple_of: f64,
    #[prost(double, tag = "7")]
    pub maximum: f64,
    #[prost(bool, tag = "8")]
    pub exclusive_maximum: bool,
    #[prost(double, tag = "9")]
    pub minimum: f64,
    #[prost(bool, tag = "10")]
    pub exclusive_minimum: bool,
    #[prost(int64, tag = "11")]
    pub max_length: i64,
    #[prost(int64, tag = "12")]
    pub min_length: i64,
    #[prost(string, tag = "13")]
    pub pattern: String,
    #[prost(int64, tag = "14")]
    pub max_items: i64,
    #[prost(int64, tag = "15")]
    pub min_items: i64,
    #[prost(bool, tag = "16")]
    pub unique_items: bool,
    #[prost(int64, tag = "17")]
    pub max_properties: i64,
    #[prost(int64, tag = "18")]
    pub min_properties: i64,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(bool, tag = "27")]
    pub read_only: bool,
    #[prost(message, optional, tag = "30")]
    pub example: Option<Any>,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

fn text(value: &Value, key: &str) -> String {
    value.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn yaml(value: &Value) -> Any {
    Any { yaml: value.to_string() }
}

fn extensions(value: &Value) -> Vec<NamedAny> {
    value
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny { name: k.clone(), value: Some(yaml(v)) })
        .collect()
}

fn named_schemas(value: Option<&Value>) -> Vec<NamedSchema> {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, s)| NamedSchema { name: name.clone(), value: Some(schema(s)) })
        .collect()
}

/// A v2 JSON schema as gnostic's `Schema`.
pub fn schema(value: &Value) -> Schema {
    let number = |key: &str| value.get(key).and_then(Value::as_f64).unwrap_or_default();
    let integer = |key: &str| value.get(key).and_then(Value::as_i64).unwrap_or_default();
    let flag = |key: &str| value.get(key).and_then(Value::as_bool).unwrap_or_default();
    Schema {
        r#ref: text(value, "$ref"),
        format: text(value, "format"),
        title: text(value, "title"),
        description: text(value, "description"),
        default: value.get("default").map(yaml),
        multiple_of: number("multipleOf"),
        maximum: number("maximum"),
        exclusive_maximum: flag("exclusiveMaximum"),
        minimum: number("minimum"),
        exclusive_minimum: flag("exclusiveMinimum"),
        max_length: integer("maxLength"),
        min_length: integer("minLength"),
        pattern: text(value, "pattern"),
        max_items: integer("maxItems"),
        min_items: integer("minItems"),
        unique_items: flag("uniqueItems"),
        max_properties: integer("maxProperties"),
        min_properties: integer("minProperties"),
        required: strings(value, "required"),
        r#enum: value.get("enum").and_then(Value::as_array).into_iter().flatten().map(yaml).collect(),
        additional_properties: value.get("additionalProperties").and_then(|a| {
            let oneof = match a {
                Value::Bool(b) => additional_properties_item::Oneof::Boolean(*b),
                Value::Object(_) => additional_properties_item::Oneof::Schema(Box::new(schema(a))),
                _ => return None,
            };
            Some(Box::new(AdditionalPropertiesItem { oneof: Some(oneof) }))
        }),
        r#type: match value.get("type") {
            Some(Value::String(t)) => Some(TypeItem { value: vec![t.clone()] }),
            Some(Value::Array(_)) => Some(TypeItem { value: strings(value, "type") }),
            _ => None,
        },
        items: match value.get("items") {
            Some(object @ Value::Object(_)) => Some(ItemsItem { schema: vec![schema(object)] }),
            Some(Value::Array(list)) => Some(ItemsItem { schema: list.iter().map(schema).collect() }),
            _ => None,
        },
        all_of: value.get("allOf").and_then(Value::as_array).into_iter().flatten().map(schema).collect(),
        properties: value.get("properties").map(|p| Properties { additional_properties: named_schemas(Some(p)) }),
        read_only: flag("readOnly"),
        example: value.get("example").map(yaml),
        vendor_extension: extensions(value),
    }
}

fn parameter(value: &Value) -> ParametersItem {
    let kind = match text(value, "in").as_str() {
        "body" => parameter::Oneof::BodyParameter(Box::new(BodyParameter {
            description: text(value, "description"),
            name: text(value, "name"),
            r#in: "body".into(),
            required: value.get("required").and_then(Value::as_bool).unwrap_or_default(),
            schema: value.get("schema").map(schema),
        })),
        "path" => parameter::Oneof::NonBodyParameter(NonBodyParameter {
            oneof: Some(non_body_parameter::Oneof::PathParameterSubSchema(PathParameterSubSchema {
                required: true,
                r#in: "path".into(),
                description: text(value, "description"),
                name: text(value, "name"),
                r#type: text(value, "type"),
                unique_items: value.get("uniqueItems").and_then(Value::as_bool).unwrap_or_default(),
            })),
        }),
        _ => parameter::Oneof::NonBodyParameter(NonBodyParameter {
            oneof: Some(non_body_parameter::Oneof::QueryParameterSubSchema(QueryParameterSubSchema {
                required: value.get("required").and_then(Value::as_bool).unwrap_or_default(),
                r#in: "query".into(),
                description: text(value, "description"),
                name: text(value, "name"),
                r#type: text(value, "type"),
                unique_items: value.get("uniqueItems").and_then(Value::as_bool).unwrap_or_default(),
            })),
        }),
    };
    ParametersItem { oneof: Some(parameters_item::Oneof::Parameter(Parameter { oneof: Some(kind) })) }
}

fn parameters(value: &Value) -> Vec<ParametersItem> {
    value.get("parameters").and_then(Value::as_array).into_iter().flatten().map(parameter).collect()
}

fn operation(value: Option<&Value>) -> Option<Operation> {
    let value = value?;
    let responses = value.get("responses").and_then(Value::as_object).map(|codes| Responses {
        response_code: codes
            .iter()
            .map(|(code, response)| NamedResponseValue {
                name: code.clone(),
                value: Some(ResponseValue {
                    response: Some(Response {
                        description: text(response, "description"),
                        schema: response.get("schema").map(|s| SchemaItem { schema: Some(schema(s)) }),
                    }),
                }),
            })
            .collect(),
    });
    Some(Operation {
        tags: strings(value, "tags"),
        description: text(value, "description"),
        operation_id: text(value, "operationId"),
        produces: strings(value, "produces"),
        consumes: strings(value, "consumes"),
        parameters: parameters(value),
        responses,
        schemes: strings(value, "schemes"),
        vendor_extension: extensions(value),
    })
}

/// A v2 JSON document as gnostic's `Document`.
pub fn document(value: &Value) -> Document {
    let paths = value.get("paths").and_then(Value::as_object).map(|paths| Paths {
        path: paths
            .iter()
            .map(|(name, item)| NamedPathItem {
                name: name.clone(),
                value: Some(PathItem {
                    get: operation(item.get("get")),
                    put: operation(item.get("put")),
                    post: operation(item.get("post")),
                    delete: operation(item.get("delete")),
                    patch: operation(item.get("patch")),
                    parameters: parameters(item),
                }),
            })
            .collect(),
    });
    Document {
        swagger: text(value, "swagger"),
        info: value.get("info").map(|i| Info { title: text(i, "title"), version: text(i, "version") }),
        paths,
        definitions: value.get("definitions").map(|d| Definitions { additional_properties: named_schemas(Some(d)) }),
    }
}

/// The protobuf bytes of a v2 JSON document.
pub fn encode(value: &Value) -> Vec<u8> {
    document(value).encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_survives_encoding_with_gnostic_field_numbers() {
        let v2 = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"},
            "paths": {"/api/v1/nodes/{name}": {"parameters": [{"name": "name", "in": "path", "required": true, "type": "string"}],
                "patch": {"operationId": "patchCoreV1Node", "x-kubernetes-group-version-kind": {"group": "", "kind": "Node", "version": "v1"},
                    "parameters": [{"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/P"}},
                                   {"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true}],
                    "responses": {"200": {"description": "OK", "schema": {"$ref": "#/definitions/N"}}}}}},
            "definitions": {"N": {"type": "object", "required": ["spec"], "properties": {
                "spec": {"type": "object", "additionalProperties": {"type": "string"}},
                "list": {"type": "array", "items": {"$ref": "#/definitions/P"}}},
                "x-kubernetes-group-version-kind": [{"group": "", "kind": "Node", "version": "v1"}]},
                "P": {"type": "object"}}});
        let bytes = encode(&v2);
        let decoded = Document::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded, document(&v2));
        assert_eq!(decoded.swagger, "2.0");
        let path = &decoded.paths.as_ref().unwrap().path[0];
        assert_eq!(path.name, "/api/v1/nodes/{name}");
        let patch = path.value.as_ref().unwrap().patch.as_ref().unwrap();
        assert_eq!(patch.vendor_extension[0].name, "x-kubernetes-group-version-kind");
        let Some(parameters_item::Oneof::Parameter(Parameter {
            oneof: Some(parameter::Oneof::NonBodyParameter(query)),
        })) = &patch.parameters[1].oneof
        else {
            panic!("{:?}", patch.parameters[1]);
        };
        assert!(
            matches!(&query.oneof, Some(non_body_parameter::Oneof::QueryParameterSubSchema(q)) if q.name == "fieldValidation")
        );
        let node = &decoded.definitions.as_ref().unwrap().additional_properties[0];
        assert_eq!(node.name, "N");
        let node = node.value.as_ref().unwrap();
        assert_eq!(node.r#type.as_ref().unwrap().value, vec!["object"]);
        assert_eq!(node.required, vec!["spec"]);
        // The first bytes are field 1 (swagger), length-delimited: tag 0x0a, length 3, "2.0".
        assert_eq!(&bytes[..5], b"\x0a\x032.0");
    }
}
