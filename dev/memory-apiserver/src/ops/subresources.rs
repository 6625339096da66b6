//! `pods/binding` (what a scheduler does) and the `scale` subresource.

use super::{Subresource, Tracking};
use crate::core::{Core, Ctx};
use crate::error::ApiError;
use crate::object::{is_deleting, meta_str, now_rfc3339, object_key};
use crate::patch::PatchType;
use crate::patch::json::json_patch;
use crate::patch::merge::merge_patch;
use crate::resource::{Builtin, ResourceType};
use crate::selector::LabelSelector;
use crate::selector::label::Requirement;
use serde_json::{Value, json};

fn at<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

fn set_at(value: &mut Value, path: &[String], new: Value) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut cursor = value;
    for key in parents {
        if !cursor.get(key).is_some_and(Value::is_object) {
            cursor[key.as_str()] = json!({});
        }
        cursor = &mut cursor[key.as_str()];
    }
    cursor[last.as_str()] = new;
}

/// The string form of a `LabelSelector` object, as `Scale.status.selector` carries it.
fn selector_string(selector: &Value) -> String {
    let Ok(parsed) = LabelSelector::from_object(selector) else { return String::new() };
    parsed
        .requirements()
        .iter()
        .map(|r| match r {
            Requirement::In(k, v) if v.len() == 1 => format!("{k}={}", v[0]),
            Requirement::In(k, v) => format!("{k} in ({})", v.join(",")),
            Requirement::NotIn(k, v) => format!("{k} notin ({})", v.join(",")),
            Requirement::Exists(k) => k.clone(),
            Requirement::DoesNotExist(k) => format!("!{k}"),
            Requirement::GreaterThan(k, n) => format!("{k}>{n}"),
            Requirement::LessThan(k, n) => format!("{k}<{n}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl Core {
    /// Binds an unscheduled pod to a node (`POST pods/{name}/binding`).
    pub fn bind(&self, namespace: &str, name: &str, binding: &Value, ctx: &Ctx<'_>) -> Result<(), ApiError> {
        let pods = self.builtin(Builtin::Pod);
        if let Some(in_body) = meta_str(binding, "name").filter(|n| !n.is_empty())
            && in_body != name
        {
            return Err(ApiError::bad_request("name in URL does not match name in Binding object"));
        }
        let node = binding.pointer("/target/name").and_then(Value::as_str).filter(|n| !n.is_empty());
        let Some(node) = node else {
            return Err(ApiError::bad_request("the Binding has no target.name"));
        };
        let key = object_key(Some(namespace), name);
        let mut state = self.state.lock();
        let current = state.get(&pods, &key).ok_or_else(|| ApiError::not_found(&pods, name))?;
        let mut pod = current.value();
        if is_deleting(&pod) {
            return Err(ApiError::conflict(
                &pods,
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        let assigned = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default();
        if !assigned.is_empty() {
            return Err(ApiError::conflict(
                &pods,
                name,
                &format!("pod {name} is already assigned to node \"{assigned}\""),
            ));
        }
        pod["spec"]["nodeName"] = json!(node);
        let status = pod.as_object_mut().map(|p| p.entry("status").or_insert_with(|| json!({})));
        if let Some(status) = status.and_then(Value::as_object_mut) {
            let conditions = status.entry("conditions").or_insert_with(|| json!([]));
            if let Some(list) = conditions.as_array_mut() {
                list.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
                list.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()}));
            }
        }
        if ctx.dry_run {
            return Ok(());
        }
        // Binding is the one way to set spec.nodeName: it bypasses the pod update rules on purpose.
        self.commit_put(&mut state, &pods, key, &mut pod);
        Ok(())
    }

    /// The `autoscaling/v1` Scale of an object.
    pub fn get_scale(&self, rt: &ResourceType, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let object = self.get(rt, namespace, name)?;
        scale_of(rt, &object.value())
    }

    /// Sets the replicas of an object through its Scale (PUT or PATCH of `/scale`).
    #[allow(clippy::too_many_arguments)]
    pub fn write_scale(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        patch: Option<(PatchType, &Value)>,
        scale: Option<Value>,
        ctx: &Ctx<'_>,
    ) -> Result<Value, ApiError> {
        let paths = rt.scale.clone().ok_or_else(ApiError::path_not_found)?;
        let key = object_key(namespace.filter(|_| rt.namespaced), name);
        let mut state = self.state.lock();
        let current = state.get(rt, &key).ok_or_else(|| ApiError::not_found(rt, name))?;
        let object = current.value();
        let mut wanted = match (patch, scale) {
            (Some((patch_type, patch)), _) => {
                let mut scale = scale_of(rt, &object)?;
                match patch_type {
                    PatchType::Json => {
                        json_patch(&mut scale, patch).map_err(|e| ApiError::unprocessable(e.to_string()))?
                    }
                    _ => merge_patch(&mut scale, patch),
                }
                scale
            }
            (None, Some(scale)) => scale,
            (None, None) => return Err(ApiError::bad_request("no Scale given")),
        };
        let replicas = wanted.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
        if replicas < 0 {
            let error = crate::schema::field_error(
                "spec.replicas",
                crate::schema::ErrorKind::Invalid,
                format!("Invalid value: {replicas}: must be greater than or equal to 0"),
            );
            return Err(ApiError::invalid_named("Scale.autoscaling", "autoscaling", "Scale", name, &[error]));
        }
        let mut updated = object.clone();
        set_at(&mut updated, &paths.spec_replicas, json!(replicas));
        if let Some(rv) = wanted.pointer_mut("/metadata/resourceVersion").map(Value::take) {
            updated["metadata"]["resourceVersion"] = rv;
        }
        let stored = self.commit_update(
            &mut state,
            rt,
            &key,
            &current,
            updated,
            Subresource::Main,
            ctx,
            Tracking::Update,
            false,
        )?;
        scale_of(rt, &stored.value())
    }
}

/// Builds the Scale of `object`.
fn scale_of(rt: &ResourceType, object: &Value) -> Result<Value, ApiError> {
    let paths = rt.scale.as_ref().ok_or_else(ApiError::path_not_found)?;
    let selector = match &paths.label_selector {
        Some(path) => at(object, path).and_then(Value::as_str).unwrap_or_default().to_owned(),
        None => object.pointer("/spec/selector").map(selector_string).unwrap_or_default(),
    };
    let metadata = object.get("metadata").cloned().unwrap_or_default();
    let mut scale_metadata = json!({});
    for key in ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"] {
        if let Some(value) = metadata.get(key) {
            scale_metadata[key] = value.clone();
        }
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_metadata,
        "spec": {"replicas": at(object, &paths.spec_replicas).and_then(Value::as_i64).unwrap_or(0)},
        "status": {"replicas": at(object, &paths.status_replicas).and_then(Value::as_i64).unwrap_or(0), "selector": selector},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_render_as_strings() {
        let selector = json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]});
        assert_eq!(selector_string(&selector), "app=web,tier in (a,b)");
    }

    #[test]
    fn nested_fields_are_set_and_read() {
        let mut object = json!({});
        let path = vec!["spec".to_owned(), "replicas".to_owned()];
        set_at(&mut object, &path, json!(3));
        assert_eq!(at(&object, &path), Some(&json!(3)));
    }
}
