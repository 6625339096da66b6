//! The emulator held to the published definition of the ARM operations it serves: Microsoft.Compute 2024-07-01 from
//! Azure/azure-rest-api-specs, the subset kept in `dev/cloud-emulators/src/specs/azure-compute-2024-07-01.subset.json` (its
//! `x-fixture` names the files, commits and licence). Every request to an operation of the document is checked
//! against the operation's parameters and body schema before the emulator acts on it, and every answer against the
//! operation's response schema (violations are recorded for the tests, [`super::AzureEmulator::spec_violations`]).
//!
//! # Guarantees
//! - A request the definition refuses is refused as ARM does, with nothing changed: a member the body schema does
//!   not define, a wrong type, a missing required property or body, a value outside a closed enum (400
//!   `InvalidRequestContent`, the message ARM's deserializer gives: "The request content was invalid and could not
//!   be deserialized: 'Could not find member 'X' on object of type 'Y'. Path '...'", Azure/azure-powershell#9735,
//!   #7556), a query parameter of the wrong type or outside its closed enum (400 `InvalidParameter`).
//! - The api-version the emulator accepts is the document's (`info.version`); requests without one, or with
//!   another, are refused by the caller before routing (`MissingApiVersionParameter`, `NoRegisteredProviderFound`).
//! - Never stricter than the definition: see [`crate::schema`]; query parameters the operation does not
//!   declare are ignored (as ARM ignores them; its own `nextLink`s add `$skiptoken`).

use crate::schema::{Dialect, Schemas, Violation, ViolationKind};
use serde_json::Value;
use std::sync::LazyLock;

/// The fixture: the published definitions of the operations the provider uses.
const DOCUMENT: &str = include_str!("../specs/azure-compute-2024-07-01.subset.json");

static SPEC: LazyLock<ArmSpec> = LazyLock::new(|| {
    // The fixture is part of the source tree; a test parses it (`the_fixture_parses_and_every_reference_resolves`).
    ArmSpec { document: serde_json::from_str(DOCUMENT).unwrap_or(Value::Null) }
});

/// The ARM operations of the definition.
pub struct ArmSpec {
    document: Value,
}

/// One operation of the definition, matched by method and path.
#[derive(Clone, Copy)]
pub struct Operation<'a> {
    /// Its `operationId`.
    pub id: &'a str,
    definition: &'a Value,
}

/// Why a request is refused: ARM's status, error code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl ArmSpec {
    /// The definition the emulator serves.
    pub fn get() -> &'static ArmSpec {
        &SPEC
    }

    /// Its API version (`info.version`).
    pub fn version(&self) -> &str {
        self.document.pointer("/info/version").and_then(Value::as_str).unwrap_or_default()
    }

    /// The operation for `method` (lowercase HTTP method) on `path`: literal segments compared case-insensitively
    /// (ARM's paths are), `{parameter}` segments matching any non-empty segment.
    pub fn operation(&self, method: &str, path: &str) -> Option<Operation<'_>> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let paths = self.document.get("paths")?.as_object()?;
        paths.iter().find_map(|(template, operations)| {
            let parts: Vec<&str> = template.trim_matches('/').split('/').collect();
            let matches = parts.len() == segments.len()
                && parts.iter().zip(&segments).all(|(part, segment)| {
                    if part.starts_with('{') && part.ends_with('}') {
                        !segment.is_empty()
                    } else {
                        part.eq_ignore_ascii_case(segment)
                    }
                });
            let definition = operations.get(method).filter(|_| matches)?;
            Some(Operation { id: definition.get("operationId")?.as_str()?, definition })
        })
    }

    fn schemas(&self) -> Option<Schemas<'_>> {
        Some(Schemas { by_name: self.document.get("definitions")?.as_object()?, dialect: Dialect::OpenApi })
    }

    /// `operation`'s parameters, `$ref`s to the document's `parameters` resolved.
    fn parameters<'a>(&'a self, operation: &Operation<'a>) -> Vec<&'a Value> {
        let declared = operation.definition.get("parameters").and_then(Value::as_array);
        declared
            .into_iter()
            .flatten()
            .filter_map(|p| match p.get("$ref").and_then(Value::as_str) {
                Some(reference) => {
                    let name = reference.rsplit('/').next()?;
                    self.document.get("parameters")?.get(name)
                }
                None => Some(p),
            })
            .collect()
    }

    /// Checks a request to `operation` (its query pairs and body) against the definition.
    ///
    /// # Errors
    /// How ARM refuses what the definition refuses.
    pub fn check_request(
        &self,
        operation: Operation<'_>,
        query: &[(String, String)],
        body: &[u8],
    ) -> Result<(), Refusal> {
        let invalid_parameter = |message: String| Refusal { status: 400, code: "InvalidParameter", message };
        let content = |detail: String| Refusal {
            status: 400,
            code: "InvalidRequestContent",
            message: format!("The request content was invalid and could not be deserialized: '{detail}'."),
        };
        for parameter in self.parameters(&operation) {
            let name = parameter.get("name").and_then(Value::as_str).unwrap_or_default();
            let required = parameter.get("required").and_then(Value::as_bool).unwrap_or(false);
            match parameter.get("in").and_then(Value::as_str) {
                Some("query") => {
                    let Some(value) = query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str()) else {
                        if required {
                            return Err(invalid_parameter(format!("The parameter '{name}' is required.")));
                        }
                        continue;
                    };
                    let kind = parameter.get("type").and_then(Value::as_str);
                    if kind == Some("boolean")
                        && !value.eq_ignore_ascii_case("true")
                        && !value.eq_ignore_ascii_case("false")
                    {
                        return Err(invalid_parameter(format!(
                            "The value '{value}' of parameter '{name}' is not a boolean."
                        )));
                    }
                    let closed = parameter.pointer("/x-ms-enum/modelAsString").and_then(Value::as_bool) != Some(true);
                    if let Some(allowed) = parameter.get("enum").and_then(Value::as_array).filter(|_| closed)
                        && !allowed.iter().any(|a| a.as_str().is_some_and(|a| a.eq_ignore_ascii_case(value)))
                    {
                        return Err(invalid_parameter(format!(
                            "The value '{value}' of parameter '{name}' is not allowed. Allowed values are: {}.",
                            allowed.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
                        )));
                    }
                }
                Some("body") => {
                    if body.iter().all(u8::is_ascii_whitespace) {
                        if required {
                            return Err(content(format!("Required parameter '{name}' is missing (null)")));
                        }
                        continue;
                    }
                    let value: Value = serde_json::from_slice(body).map_err(|e| content(e.to_string()))?;
                    let (Some(schemas), Some(schema)) = (self.schemas(), parameter.get("schema")) else { continue };
                    if let Some(violation) = schemas.check(&value, schema, None, "").into_iter().next() {
                        return Err(content(arm_detail(&violation)));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// What in an answer to `operation` (`status`, JSON `body`) the definition does not allow: a body not described
    /// by the response of that status (or `default`), a body where the response has none.
    pub fn check_response(&self, operation: Operation<'_>, status: u16, body: Option<&Value>) -> Vec<String> {
        let responses = operation.definition.get("responses");
        let Some(response) = responses.and_then(|r| r.get(status.to_string()).or_else(|| r.get("default"))) else {
            return vec![format!("{}: the definition has no response {status}", operation.id)];
        };
        match (response.get("schema"), body) {
            (None, None) => Vec::new(),
            (None, Some(_)) => vec![format!("{}: the response {status} has no body in the definition", operation.id)],
            (Some(_), None) => vec![format!("{}: the response {status} has a body in the definition", operation.id)],
            (Some(schema), Some(body)) => match self.schemas() {
                Some(schemas) => schemas
                    .check(body, schema, None, "")
                    .into_iter()
                    .map(|v| format!("{} {status}: {v}", operation.id))
                    .collect(),
                None => vec!["the fixture has no definitions".to_owned()],
            },
        }
    }
}

/// A violation as ARM's deserializer words it ("Could not find member 'X' on object of type 'Y'. Path 'a.X'",
/// "Required property 'X' not found in JSON. Path 'a'").
fn arm_detail(violation: &Violation) -> String {
    let at =
        |name: &str| if violation.path.is_empty() { name.to_owned() } else { format!("{}.{name}", violation.path) };
    match &violation.kind {
        ViolationKind::UnknownMember { name, schema } => {
            format!("Could not find member '{name}' on object of type '{schema}'. Path '{}'", at(name))
        }
        ViolationKind::MissingRequired { name } => {
            format!("Required property '{name}' not found in JSON. Path '{}'", violation.path)
        }
        _ => violation.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SS: &str = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/ss";

    fn query() -> Vec<(String, String)> {
        vec![("api-version".to_owned(), "2024-07-01".to_owned())]
    }

    #[test]
    fn the_fixture_parses_and_every_reference_resolves() {
        let spec = ArmSpec::get();
        assert_eq!(spec.version(), "2024-07-01");
        assert_eq!(spec.version(), cloud::azure::model::API_VERSION, "the provider's pinned version is the fixture's");
        let text = DOCUMENT;
        let document: Value = serde_json::from_str(text).unwrap();
        let definitions = document["definitions"].as_object().unwrap();
        let parameters = document["parameters"].as_object().unwrap();
        let mut references = Vec::new();
        fn collect(value: &Value, into: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    for (k, v) in map {
                        match (k.as_str(), v.as_str()) {
                            ("$ref", Some(r)) => into.push(r.to_owned()),
                            _ => collect(v, into),
                        }
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| collect(v, into)),
                _ => {}
            }
        }
        collect(&document, &mut references);
        for reference in references {
            let name = reference.rsplit('/').next().unwrap();
            assert!(definitions.contains_key(name) || parameters.contains_key(name), "{reference}");
        }
    }

    #[test]
    fn operations_are_matched_by_method_and_path_whatever_the_case() {
        let spec = ArmSpec::get();
        assert_eq!(spec.operation("get", SS).map(|o| o.id), Some("VirtualMachineScaleSets_Get"));
        assert_eq!(spec.operation("patch", SS).map(|o| o.id), Some("VirtualMachineScaleSets_Update"));
        assert_eq!(
            spec.operation("post", &format!("{SS}/delete")).map(|o| o.id),
            Some("VirtualMachineScaleSets_DeleteInstances")
        );
        let vm = format!("{}/virtualmachines/3/instanceView", SS.to_ascii_uppercase());
        assert_eq!(spec.operation("get", &vm).map(|o| o.id), Some("VirtualMachineScaleSetVMs_GetInstanceView"));
        assert!(spec.operation("delete", SS).is_none(), "not an operation the provider uses");
    }

    #[test]
    fn requests_are_checked_against_the_operations_definition() {
        let spec = ArmSpec::get();
        let update = spec.operation("patch", SS).unwrap();
        let image = json!({"properties": {"virtualMachineProfile": {"storageProfile": {"imageReference": {
            "id": null, "communityGalleryImageId": "/CommunityGalleries/g/Images/i/Versions/1.0.0",
            "sharedGalleryImageId": null, "publisher": null, "offer": null, "sku": null, "version": null}}}}});
        assert_eq!(spec.check_request(update, &query(), image.to_string().as_bytes()), Ok(()));
        assert_eq!(spec.check_request(update, &query(), br#"{"sku": {"capacity": 4}}"#), Ok(()));
        let misspelt = spec.check_request(update, &query(), br#"{"sku": {"capacty": 4}}"#).unwrap_err();
        assert_eq!((misspelt.status, misspelt.code), (400, "InvalidRequestContent"));
        assert!(
            misspelt.message.contains("Could not find member 'capacty' on object of type 'Sku'. Path 'sku.capacty'"),
            "{}",
            misspelt.message
        );
        let wrong_type = spec.check_request(update, &query(), br#"{"sku": {"capacity": "4"}}"#).unwrap_err();
        assert!(wrong_type.message.contains("'sku.capacity': expected an integer"), "{}", wrong_type.message);
        let delete = spec.operation("post", &format!("{SS}/delete")).unwrap();
        assert_eq!(spec.check_request(delete, &query(), br#"{"instanceIds": ["3"]}"#), Ok(()));
        let missing = spec.check_request(delete, &query(), b"{}").unwrap_err();
        assert!(missing.message.contains("Required property 'instanceIds' not found in JSON"), "{}", missing.message);
        assert!(spec.check_request(delete, &query(), b"").is_err(), "the body is required");
        let vm = spec.operation("get", &format!("{SS}/virtualMachines/3")).unwrap();
        let mut expand = query();
        expand.push(("$expand".into(), "instanceView".into()));
        assert_eq!(spec.check_request(vm, &expand, b""), Ok(()));
        expand[1].1 = "everything".into();
        assert_eq!(spec.check_request(vm, &expand, b"").unwrap_err().code, "InvalidParameter");
    }

    #[test]
    fn answers_are_checked_against_the_operations_responses() {
        let spec = ArmSpec::get();
        let list = spec.operation("get", &format!("{SS}/virtualMachines")).unwrap();
        let vm = json!({"id": "x", "name": "ss_0", "type": "t", "location": "westeurope", "instanceId": "0",
            "properties": {"provisioningState": "Succeeded", "osProfile": {"computerName": "ss000000"},
            "storageProfile": {"imageReference": {"communityGalleryImageId": "/CommunityGalleries/g"}}}});
        assert_eq!(spec.check_response(list, 200, Some(&json!({"value": [vm]}))), Vec::<String>::new());
        assert_eq!(
            spec.check_response(list, 200, Some(&json!({"items": []}))).len(),
            2,
            "value required, items unknown"
        );
        let error = json!({"error": {"code": "NotFound", "message": "gone"}});
        assert_eq!(spec.check_response(list, 404, Some(&error)), Vec::<String>::new());
        let delete = spec.operation("post", &format!("{SS}/delete")).unwrap();
        assert_eq!(spec.check_response(delete, 202, None), Vec::<String>::new());
        assert_eq!(spec.check_response(delete, 202, Some(&json!({}))).len(), 1);
    }
}
