//! The emulator held to the published definition of the Compute Engine methods it serves: the Compute v1 discovery
//! document, the subset kept in `dev/cloud-emulators/src/specs/gcp-compute-v1.subset.json` (extracted by `extract_gcp.py`
//! beside it; its `x-fixture` names the source, revision and licence). Every request to a method of the document is
//! checked against the method's parameters and request schema before the emulator acts on it, and every successful
//! answer against the method's response schema (violations are recorded for the tests,
//! [`super::GcpEmulator::spec_violations`]).
//!
//! # Guarantees
//! - A request the definition refuses is refused as Compute does (400, nothing changed): a body member the request
//!   schema does not define ("Invalid JSON payload received. Unknown name \"X\": Cannot find field."), a query
//!   parameter the method does not declare ("... Cannot bind query parameter. Field 'X' could not be found in
//!   request message."), a path parameter outside its pattern, a wrong type or enum value, a field the method
//!   requires (`annotations.required`, "Required field 'resource.X' not specified").
//! - The document's standard parameters (`alt`, `fields`, `key`, `prettyPrint`, `quotaUser`, ...), also with a `$`
//!   as Google's system parameters may be sent (`$alt`), are accepted on every method. Never stricter than the definition otherwise (see [`crate::schema`]).

use super::ApiError;
use crate::schema::{Dialect, Schemas, Violation, ViolationKind};
use serde_json::Value;
use std::sync::LazyLock;

/// The fixture: the published definitions of the methods the emulator serves.
const DOCUMENT: &str = include_str!("../specs/gcp-compute-v1.subset.json");

static SPEC: LazyLock<DiscoverySpec> = LazyLock::new(|| {
    // The fixture is part of the source tree; a test parses it (`the_fixture_parses_and_every_reference_resolves`).
    DiscoverySpec { document: serde_json::from_str(DOCUMENT).unwrap_or(Value::Null) }
});

/// The Compute methods of the discovery document.
pub struct DiscoverySpec {
    document: Value,
}

/// One method of the document, matched by HTTP method and path.
#[derive(Clone, Copy)]
pub struct Method<'a> {
    /// Its ID, e.g. `compute.instanceGroupManagers.createInstances`.
    pub id: &'a str,
    definition: &'a Value,
    /// The path's segments (after `projects/`' root, as `flatPath` names them) by parameter name.
    path: &'a str,
}

impl DiscoverySpec {
    /// The definition the emulator serves.
    pub fn get() -> &'static DiscoverySpec {
        &SPEC
    }

    /// The service path methods are under (`compute/v1/`).
    pub fn service_path(&self) -> &str {
        self.document.get("servicePath").and_then(Value::as_str).unwrap_or_default()
    }

    /// The method for `http_method` (upper case, as discovery writes it) on `path`, the request path after the
    /// service path (`projects/P/zones/Z/...`).
    pub fn method<'a>(&'a self, http_method: &str, path: &'a str) -> Option<Method<'a>> {
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let resources = self.document.get("resources")?.as_object()?;
        resources.values().filter_map(|r| r.get("methods")?.as_object()).flat_map(|m| m.values()).find_map(
            |definition| {
                let template = definition.get("flatPath").or_else(|| definition.get("path"))?.as_str()?;
                let parts: Vec<&str> = template.split('/').collect();
                let matches = definition.get("httpMethod")?.as_str()? == http_method
                    && parts.len() == segments.len()
                    && parts
                        .iter()
                        .zip(&segments)
                        .all(|(part, segment)| (part.starts_with('{') && part.ends_with('}')) || part == segment);
                matches.then_some(Method { id: definition.get("id")?.as_str()?, definition, path })
            },
        )
    }

    fn schemas<'a>(&'a self, method: &'a str) -> Option<Schemas<'a>> {
        Some(Schemas { by_name: self.document.get("schemas")?.as_object()?, dialect: Dialect::Discovery { method } })
    }

    /// Checks a request to `method` (its query pairs and raw body) against the definition.
    ///
    /// # Errors
    /// How Compute refuses what the definition refuses.
    pub fn check_request(&self, method: Method<'_>, query: &[(String, String)], body: &[u8]) -> Result<(), ApiError> {
        let parameters = method.definition.get("parameters").and_then(Value::as_object);
        let standard = self.document.get("parameters").and_then(Value::as_object);
        // Path parameters: present and within their patterns.
        let template = method.definition.get("flatPath").and_then(Value::as_str).unwrap_or_default();
        for (part, segment) in template.split('/').zip(method.path.trim_matches('/').split('/')) {
            let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) else { continue };
            let pattern = parameters.and_then(|p| p.get(name)).and_then(|p| p.get("pattern")).and_then(Value::as_str);
            let fits = match pattern {
                Some(pattern) => regex::Regex::new(&format!("^(?:{pattern})$")).is_ok_and(|r| r.is_match(segment)),
                None => !segment.is_empty(),
            };
            if !fits {
                return Err(invalid(format!(
                    "Invalid value for field '{name}': '{segment}'. Must be a match of regex '{}'",
                    pattern.unwrap_or(".+")
                )));
            }
        }
        // Query parameters: declared by the method (or standard), of their type.
        for (key, value) in query {
            let declared = parameters
                .and_then(|p| p.get(key))
                .filter(|p| p.get("location").and_then(Value::as_str) == Some("query"))
                // System parameters are also sent with a `$` (`$alt` for `alt`: "a system parameter $foo is sent as
                // ?$foo=xxx", https://cloud.google.com/apis/docs/system-parameters).
                .or_else(|| standard.and_then(|s| s.get(key).or_else(|| s.get(key.strip_prefix('$')?))));
            let Some(declared) = declared else {
                return Err(invalid(format!(
                    "Invalid JSON payload received. Unknown name \"{key}\": Cannot bind query parameter. Field '{key}' could not be found in request message."
                )));
            };
            let fits = match declared.get("type").and_then(Value::as_str) {
                Some("integer") => value.parse::<i64>().is_ok(),
                Some("boolean") => value == "true" || value == "false",
                _ => true,
            };
            // Enums of the method's own parameters; a system parameter's value may carry options the document's
            // enum does not list (`$alt=json;enum-encoding=int`).
            let own = parameters.is_some_and(|p| p.contains_key(key));
            let closed = declared.get("enum").and_then(Value::as_array).filter(|_| own);
            if !fits || closed.is_some_and(|allowed| !allowed.iter().any(|a| a.as_str() == Some(value))) {
                return Err(invalid(format!("Invalid value at '{key}', \"{value}\"")));
            }
        }
        for (name, parameter) in parameters.into_iter().flatten() {
            let required = parameter.get("required").and_then(Value::as_bool) == Some(true);
            if required
                && parameter.get("location").and_then(Value::as_str) == Some("query")
                && !query.iter().any(|(k, _)| k == name)
            {
                return Err(ApiError::new(400, "required", format!("Required parameter '{name}' not specified")));
            }
        }
        // The body: the request schema, with the fields this method requires.
        let Some(request) = method.definition.get("request") else { return Ok(()) };
        let value: Value = if body.iter().all(u8::is_ascii_whitespace) {
            Value::Object(serde_json::Map::new())
        } else {
            serde_json::from_slice(body).map_err(|e| invalid(format!("Invalid JSON payload received. {e}")))?
        };
        let Some(schemas) = self.schemas(method.id) else { return Ok(()) };
        match schemas.check(&value, request, None, "").into_iter().next() {
            None => Ok(()),
            Some(violation) => Err(compute_refusal(&violation)),
        }
    }

    /// What in a successful answer to `method` the definition does not allow.
    pub fn check_response(&self, method: Method<'_>, body: &Value) -> Vec<String> {
        let (Some(response), Some(schemas)) = (method.definition.get("response"), self.schemas(method.id)) else {
            return Vec::new();
        };
        schemas.check(body, response, None, "").into_iter().map(|v| format!("{}: {v}", method.id)).collect()
    }
}

fn invalid(message: String) -> ApiError {
    ApiError::new(400, "invalid", message)
}

/// A violation as Compute words it.
fn compute_refusal(violation: &Violation) -> ApiError {
    let field =
        |name: &str| if violation.path.is_empty() { name.to_owned() } else { format!("{}.{name}", violation.path) };
    match &violation.kind {
        ViolationKind::UnknownMember { name, .. } => {
            let at = if violation.path.is_empty() { String::new() } else { format!(" at '{}'", violation.path) };
            invalid(format!("Invalid JSON payload received. Unknown name \"{name}\"{at}: Cannot find field."))
        }
        ViolationKind::MissingRequired { name } => {
            ApiError::new(400, "required", format!("Required field 'resource.{}' not specified", field(name)))
        }
        _ => invalid(format!("Invalid value at '{}': {violation}", violation.path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MIG: &str = "projects/my-project/zones/europe-west3-a/instanceGroupManagers/workers";

    #[test]
    fn the_fixture_parses_and_every_reference_resolves() {
        let spec = DiscoverySpec::get();
        assert_eq!(spec.service_path(), "compute/v1/");
        let schemas = spec.document["schemas"].as_object().unwrap();
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
        collect(&spec.document, &mut references);
        assert!(references.len() > 100);
        for reference in references {
            assert!(schemas.contains_key(&reference), "{reference}");
        }
    }

    #[test]
    fn requests_are_checked_against_the_methods_definition() {
        let spec = DiscoverySpec::get();
        let path = format!("{MIG}/createInstances");
        let create = spec.method("POST", &path).unwrap();
        assert_eq!(create.id, "compute.instanceGroupManagers.createInstances");
        let body = json!({"instances": [{"name": "workers-abcd"}]}).to_string();
        assert!(spec.check_request(create, &[], body.as_bytes()).is_ok());
        let misspelt = spec.check_request(create, &[], br#"{"instances": [{"nmae": "x"}]}"#).unwrap_err();
        assert_eq!((misspelt.status, misspelt.reason), (400, "invalid"));
        assert!(
            misspelt.message.contains("Unknown name \"nmae\" at 'instances[0]': Cannot find field."),
            "{}",
            misspelt.message
        );
        let unknown_query = spec.check_request(create, &[("requestID".into(), "x".into())], b"{}").unwrap_err();
        assert!(unknown_query.message.contains("Cannot bind query parameter"), "{}", unknown_query.message);
        assert!(
            spec.check_request(
                create,
                &[("requestId".into(), "x".into()), ("prettyPrint".into(), "false".into())],
                b"{}"
            )
            .is_ok()
        );
        // instanceTemplates.insert requires the template's name and its properties' machine type.
        let insert = spec.method("POST", "projects/my-project/global/instanceTemplates").unwrap();
        let missing =
            spec.check_request(insert, &[], br#"{"properties": {"machineType": "n2-standard-4"}}"#).unwrap_err();
        assert_eq!(
            (missing.reason, missing.message.as_str()),
            ("required", "Required field 'resource.name' not specified")
        );
        assert!(
            spec.check_request(insert, &[], br#"{"name": "t", "properties": {"machineType": "n2-standard-4"}}"#)
                .is_ok()
        );
        // Path parameters within their patterns.
        let get = spec.method("GET", "projects/my-project/zones/europe-west3-a/instances/Bad_Name").unwrap();
        assert!(spec.check_request(get, &[], b"").is_err());
        let path = format!("{MIG}/listManagedInstances");
        let list = spec.method("POST", &path).unwrap();
        assert!(spec.check_request(list, &[("maxResults".into(), "ten".into())], b"").is_err());
        assert!(spec.method("GET", "projects/my-project/zones/z/instanceGroupManagers/w/unknownVerb").is_none());
    }

    #[test]
    fn answers_are_checked_against_the_methods_response() {
        let spec = DiscoverySpec::get();
        let path = format!("{MIG}/listManagedInstances");
        let list = spec.method("POST", &path).unwrap();
        let good = json!({"managedInstances": [{"instance": "https://x", "instanceStatus": "RUNNING",
            "currentAction": "NONE", "id": "123"}]});
        assert_eq!(spec.check_response(list, &good), Vec::<String>::new());
        let bad = json!({"managedInstances": [{"instanceStatus": "SLEEPING", "id": 123}]});
        assert_eq!(spec.check_response(list, &bad).len(), 2, "{:?}", spec.check_response(list, &bad));
    }
}
