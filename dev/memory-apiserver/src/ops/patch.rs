//! PATCH: JSON merge, JSON patch, strategic merge and server-side apply, through the main endpoint or `/status`.
//!
//! # Guarantees
//! - Patches apply to the current object and never conflict because it changed, unless the patch itself sets
//!   `metadata.resourceVersion` (a precondition: 409 on mismatch).
//! - A missing object is 404, except for apply, which creates it (201).
//! - Strategic merge patch on a custom resource is 415; apply without `fieldManager` and `force` on a non-apply
//!   patch are 422, with upstream's `PatchOptions` errors.

use super::{Subresource, Tracking};
use crate::core::{Core, Ctx};
use crate::error::ApiError;
use crate::field_validation::{self, FieldValidation};
use crate::object::{StoredObject, metadata_mut, name_of, now_rfc3339, object_key};
use crate::ops::write::{check_name, check_type, place_in_namespace};
use crate::patch::PatchType;
use crate::patch::apply::{Conflict, server_side_apply};
use crate::patch::json::{JsonPatchError, json_patch};
use crate::patch::managed::Writer;
use crate::patch::merge::merge_patch;
use crate::patch::strategic::strategic_merge_patch;
use crate::resource::{ResourceType, events, schema::merge_schema};
use crate::schema::{ErrorKind, field_error};
use serde_json::{Value, json};
use std::sync::Arc;

/// The outcome of a patch.
#[derive(Debug, Clone)]
pub struct Patched {
    /// The object after the patch.
    pub object: Arc<StoredObject>,
    /// True when apply created the object (201).
    pub created: bool,
}

fn patch_options_error(field: &str, kind: ErrorKind, message: &str) -> ApiError {
    ApiError::invalid_named(
        "PatchOptions.meta.k8s.io",
        "meta.k8s.io",
        "PatchOptions",
        "",
        &[field_error(field, kind, message)],
    )
}

/// Parses a patch body: JSON, or YAML for apply.
pub fn parse_patch_body(patch_type: PatchType, body: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) => Ok(value),
        Err(json_error) if patch_type == PatchType::Apply => yaml_serde::from_slice::<Value>(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e} (JSON: {json_error})"))),
        Err(e) => Err(ApiError::bad_request(format!("error decoding patch: {e}"))),
    }
}

fn conflict_error(rt: &ResourceType, name: &str, conflicts: &[Conflict]) -> ApiError {
    let message = match conflicts {
        [one] => format!("Apply failed with 1 conflict: conflict with \"{}\": {}", one.manager, one.field),
        many => {
            let mut managers: Vec<&str> = many.iter().map(|c| c.manager.as_str()).collect();
            managers.dedup();
            let mut text = format!("Apply failed with {} conflicts:", many.len());
            for manager in managers {
                text.push_str(&format!(" conflicts with \"{manager}\":"));
                for conflict in many.iter().filter(|c| c.manager == manager) {
                    text.push_str(&format!("\n- {}", conflict.field));
                }
            }
            text
        }
    };
    let mut error = ApiError::conflict_message(rt, name, message);
    for conflict in conflicts {
        error = error.with_cause(
            "FieldManagerConflict",
            format!("conflict with \"{}\"", conflict.manager),
            Some(&conflict.field),
        );
    }
    error
}

impl Core {
    /// Patches an object.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: &Value,
        subresource: Subresource,
        force: bool,
        ctx: &Ctx<'_>,
    ) -> Result<Patched, ApiError> {
        if force && patch_type != PatchType::Apply {
            return Err(patch_options_error(
                "force",
                ErrorKind::Forbidden,
                "Forbidden: may not be specified for non-apply patch",
            ));
        }
        if patch_type == PatchType::Apply && ctx.field_manager.is_none_or(str::is_empty) {
            return Err(patch_options_error(
                "fieldManager",
                ErrorKind::Required,
                "Required value: is required for apply patch",
            ));
        }
        if patch_type == PatchType::Strategic && rt.custom().is_some() {
            return Err(ApiError::unsupported_media_type(&[
                PatchType::Json.content_type(),
                PatchType::Merge.content_type(),
                PatchType::Apply.content_type(),
            ]));
        }
        let api_version = rt.api_version();
        let now = now_rfc3339();
        let writer = Writer {
            manager: ctx.field_manager.unwrap_or_default(),
            api_version: &api_version,
            subresource: matches!(subresource, Subresource::Status).then_some("status"),
            now: &now,
        };
        if patch_type == PatchType::Apply {
            check_applied(rt, patch, name)?;
        }
        let key = object_key(namespace.filter(|_| rt.namespaced), name);
        let mut state = self.state.lock();
        let Some(current) = state.get(rt, &key) else {
            if patch_type != PatchType::Apply {
                return Err(ApiError::not_found(rt, name));
            }
            let applied = server_side_apply(None, patch, &writer, force, merge_schema(rt).as_ref())
                .map_err(|conflicts| conflict_error(rt, name, &conflicts))?;
            let object = self.prepare_new(rt, namespace, applied, true)?;
            let object = self.insert_new(&mut state, rt, object, ctx, Tracking::Applied)?;
            return Ok(Patched { object, created: true });
        };
        let old = events::to_served(rt, current.value());
        let mut new = old.clone();
        let schema = merge_schema(rt);
        let tracking = match patch_type {
            PatchType::Merge => {
                merge_patch(&mut new, patch);
                Tracking::Update
            }
            PatchType::Json => {
                json_patch(&mut new, patch).map_err(|e| match e {
                    JsonPatchError::Malformed(m) => ApiError::bad_request(m),
                    JsonPatchError::TooManyOperations(_) => ApiError::too_large(e.to_string()),
                    JsonPatchError::Failed(m) => ApiError::unprocessable(m),
                })?;
                Tracking::Update
            }
            PatchType::Strategic => {
                strategic_merge_patch(&mut new, patch, schema.as_ref())
                    .map_err(|e| ApiError::unprocessable(e.to_string()))?;
                Tracking::Update
            }
            PatchType::Apply => {
                new = server_side_apply(Some(&old), patch, &writer, force, schema.as_ref())
                    .map_err(|conflicts| conflict_error(rt, name, &conflicts))?;
                // The applied configuration carries no resourceVersion precondition unless it names one.
                let precondition = patch.pointer("/metadata/resourceVersion").cloned();
                match precondition {
                    Some(rv) => metadata_mut(&mut new).insert("resourceVersion".into(), rv),
                    None => metadata_mut(&mut new).insert("resourceVersion".into(), json!(current.rv.to_string())),
                };
                Tracking::Applied
            }
        };
        if patch_type != PatchType::Apply && ctx.field_validation != FieldValidation::Ignore {
            let mut findings = ctx.body_findings.to_vec();
            findings.extend(match rt.custom() {
                Some(custom) => field_validation::custom_errors(custom.schema.as_ref(), &new, None),
                None => field_validation::builtin_unknown(rt, &new),
            });
            ctx.field_findings(findings, |findings| {
                // Upstream shows the patched object, or for a strategic merge patch the patch as Go prints a map.
                let shown = match patch_type {
                    PatchType::Strategic => go_value(patch),
                    _ => new.to_string(),
                };
                field_validation::strict_patch_error(&shown, findings)
            })?;
        }
        check_type(rt, &new)?;
        check_name(&new, name_of(&old))?;
        place_in_namespace(rt, namespace, &mut new)?;
        let object = self.commit_update(&mut state, rt, &key, &current, new, subresource, ctx, tracking, false)?;
        Ok(Patched { object, created: false })
    }
}

/// An applied configuration must name its type and the object of the URL.
fn check_applied(rt: &ResourceType, patch: &Value, name: &str) -> Result<(), ApiError> {
    if !patch.is_object() {
        return Err(ApiError::bad_request("the applied configuration must be an object"));
    }
    for (field, wanted) in [("apiVersion", rt.api_version()), ("kind", rt.kind.clone())] {
        match patch.get(field).and_then(Value::as_str) {
            None | Some("") => return Err(ApiError::bad_request(format!("{field} must be set"))),
            Some(given) if given != wanted => {
                return Err(ApiError::bad_request(format!(
                    "the {field} in the data ({given}) does not match the expected {field} ({wanted})"
                )));
            }
            Some(_) => {}
        }
    }
    check_name(patch, name)
}

/// A JSON value as Go's `%+v` prints the `map[string]interface{}` it decodes to: `map[a:1 b:[x y]]`, keys
/// sorted.
fn go_value(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(items) => format!("[{}]", items.iter().map(go_value).collect::<Vec<_>>().join(" ")),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let members: Vec<String> = keys.iter().map(|k| format!("{k}:{}", go_value(&map[*k]))).collect();
            format!("map[{}]", members.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_print_as_go_prints_their_maps() {
        let patch = json!({"spec": {"replicas": 2, "paused": true, "ports": [1, "a"], "x": null, "f": 1.5}, "a": "b"});
        assert_eq!(go_value(&patch), "map[a:b spec:map[f:1.5 paused:true ports:[1 a] replicas:2 x:<nil>]]");
    }
}
