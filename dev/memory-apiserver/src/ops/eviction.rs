//! `pods/eviction`: upstream's eviction algorithm (`pkg/registry/core/pod/storage/eviction.go`).
//!
//! # Guarantees
//! - Like every create, an eviction in a namespace being deleted is refused (403 with cause `NamespaceTerminating`,
//!   upstream's NamespaceLifecycle admission), before the pod is looked at.
//! - Pending, Succeeded and Failed pods and pods already being deleted are evicted without a PDB check.
//! - More than one matching PDB is a 500 (with upstream's message and no reason); none lets the eviction through.
//! - A not-Ready pod is evicted without touching the budget under `unhealthyPodEvictionPolicy: AlwaysAllow`, or
//!   when the budget is met (`currentHealthy >= desiredHealthy > 0`).
//! - A PDB not yet observed (`observedGeneration < generation`) answers 429 with `Retry-After: 10`; one with no
//!   disruptions allowed answers 429 without Retry-After; otherwise `disruptionsAllowed` is decremented and the
//!   pod recorded in `disruptedPods` before the pod is deleted.
//! - The pod gets the `DisruptionTarget` condition, then the (normally graceful) delete; the answer is
//!   `201 Status Success` while the pod is still terminating.
//! - Only the policy/v1 `deleteOptions` field is read: kube-rs's `delete_options` is an unknown field and is
//!   ignored, as upstream ignores it.

use super::Subresource;
use super::Tracking;
use super::delete::DeleteOptions;
use crate::core::{Core, Ctx};
use crate::error::ApiError;
use crate::object::{Filter, StoredObject, is_deleting, now_rfc3339, object_key};
use crate::resource::{Builtin, ResourceType};
use crate::selector::LabelSelector;
use crate::state::State;
use serde_json::{Value, json};
use std::sync::Arc;

/// Upstream refuses evictions once this many disruptions wait for the disruption controller.
const MAX_DISRUPTED_PODS: usize = 2000;

/// A decoded `Eviction` body.
#[derive(Debug, Clone, Default)]
pub struct Eviction {
    /// `metadata.name`, if given.
    pub name: Option<String>,
    /// `deleteOptions` (policy/v1 and policy/v1beta1).
    pub delete_options: DeleteOptions,
}

impl Eviction {
    /// Decodes an eviction body (policy/v1 or policy/v1beta1; apiVersion and kind may be absent).
    pub fn from_body(body: &Value) -> Result<Eviction, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request("the body of an eviction must be a JSON object"));
        }
        match body.get("apiVersion").and_then(Value::as_str) {
            None | Some("") | Some("policy/v1") | Some("policy/v1beta1") => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({other}) does not match the expected API version (policy/v1)"
                )));
            }
        }
        if let Some(kind) = body.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty() && *k != "Eviction") {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match the expected kind (Eviction)"
            )));
        }
        let delete_options = match body.get("deleteOptions") {
            None | Some(Value::Null) => DeleteOptions::default(),
            Some(options) => serde_json::from_value(options.clone()).map_err(|e| {
                ApiError::bad_request(format!("Eviction in version \"v1\" cannot be handled as a Eviction: {e}"))
            })?,
        };
        let name = body.pointer("/metadata/name").and_then(Value::as_str).map(str::to_owned);
        Ok(Eviction { name, delete_options })
    }
}

fn too_many_requests(cause: String, retry_after: u32) -> ApiError {
    ApiError::too_many_requests("Cannot evict pod as it would violate the pod's disruption budget.")
        .with_cause("DisruptionBudget", cause, None)
        .with_retry_after(retry_after)
}

fn pod_is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|conditions| {
        conditions.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Ready")
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    })
}

fn int(value: &Value, pointer: &str) -> i64 {
    value.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

impl Core {
    /// Evicts a pod.
    pub fn evict(&self, namespace: &str, name: &str, eviction: &Eviction, ctx: &Ctx<'_>) -> Result<(), ApiError> {
        let pods = self.builtin(Builtin::Pod);
        if eviction.name.as_deref().is_some_and(|n| n != name) {
            return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
        }
        let dry_run =
            ctx.dry_run || eviction.delete_options.dry_run.as_ref().is_some_and(|d| d.iter().any(|v| v == "All"));
        let ctx = Ctx { dry_run, ..*ctx };
        let mut state = self.state.lock();
        // An eviction is a create (of `pods/eviction`): admission refuses it in a namespace being
        // deleted before the pod is even looked at.
        self.check_namespace_open(&state, &pods, namespace, name)?;
        let pod_object =
            state.get(&pods, &object_key(Some(namespace), name)).ok_or_else(|| ApiError::not_found(&pods, name))?;
        let pod = pod_object.value();
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
        let mut options = eviction.delete_options.clone();
        if matches!(phase, "Succeeded" | "Failed" | "Pending") || is_deleting(&pod) {
            if !matches!(phase, "Succeeded" | "Failed") {
                enforce_resource_version(&mut options, &pod_object);
            }
            return self.condition_and_delete(&mut state, &pods, namespace, name, options, &ctx);
        }
        let pdbs = self.matching_pdbs(&state, namespace, &pod);
        let pdb = match pdbs.as_slice() {
            [] => return self.condition_and_delete(&mut state, &pods, namespace, name, options, &ctx),
            [one] => one.clone(),
            _ => {
                return Err(ApiError::new(
                    500,
                    "",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
        };
        let budget = pdb.value();
        if !pod_is_ready(&pod) {
            let always =
                budget.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) == Some("AlwaysAllow");
            let current = int(&budget, "/status/currentHealthy");
            let desired = int(&budget, "/status/desiredHealthy");
            if always || (current >= desired && desired > 0) {
                enforce_resource_version(&mut options, &pod_object);
                return self.condition_and_delete(&mut state, &pods, namespace, name, options, &ctx);
            }
        }
        self.check_and_decrement(&mut state, &pdb, budget, name, &ctx)?;
        self.condition_and_delete(&mut state, &pods, namespace, name, options, &ctx)
    }

    fn matching_pdbs(&self, state: &State, namespace: &str, pod: &Value) -> Vec<Arc<StoredObject>> {
        let pdbs = self.builtin(Builtin::PodDisruptionBudget);
        let labels = pod.pointer("/metadata/labels").and_then(Value::as_object);
        let filter = Filter { namespace: Some(namespace.to_owned()), ..Default::default() };
        state
            .objects(&pdbs)
            .iter()
            .filter(|(_, pdb)| filter.matches(&pdb.index))
            .filter(|(_, pdb)| {
                let value = pdb.value();
                // A missing selector matches nothing; an invalid one too; `{}` matches every pod (policy/v1).
                value
                    .pointer("/spec/selector")
                    .and_then(|s| LabelSelector::from_object(s).ok())
                    .is_some_and(|selector| selector.matches_map(labels))
            })
            .map(|(_, pdb)| pdb.clone())
            .collect()
    }

    fn check_and_decrement(
        &self,
        state: &mut State,
        pdb: &Arc<StoredObject>,
        mut budget: Value,
        pod_name: &str,
        ctx: &Ctx<'_>,
    ) -> Result<(), ApiError> {
        let pdbs = self.builtin(Builtin::PodDisruptionBudget);
        let pdb_name = pdb.index.name.to_string();
        if int(&budget, "/status/observedGeneration") < int(&budget, "/metadata/generation") {
            return Err(too_many_requests(
                format!("The disruption budget {pdb_name} is still being processed by the server."),
                10,
            ));
        }
        let allowed = int(&budget, "/status/disruptionsAllowed");
        if allowed < 0 {
            return Err(ApiError::forbidden(&pdbs, &pdb_name, "pdb disruptions allowed is negative"));
        }
        let disrupted = budget.pointer("/status/disruptedPods").and_then(Value::as_object).map_or(0, |m| m.len());
        if disrupted > MAX_DISRUPTED_PODS {
            return Err(ApiError::forbidden(
                &pdbs,
                &pdb_name,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            ));
        }
        if allowed == 0 {
            return Err(too_many_requests(
                format!(
                    "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                    int(&budget, "/status/desiredHealthy"),
                    int(&budget, "/status/currentHealthy")
                ),
                0,
            ));
        }
        let generation = int(&budget, "/metadata/generation");
        let status = budget.as_object_mut().map(|b| b.entry("status").or_insert_with(|| json!({})));
        let Some(status) = status.and_then(Value::as_object_mut) else {
            return Err(ApiError::internal("the PodDisruptionBudget has no status object"));
        };
        status.insert("disruptionsAllowed".into(), json!(allowed - 1));
        let pods = status.entry("disruptedPods").or_insert_with(|| json!({}));
        if !pods.is_object() {
            *pods = json!({});
        }
        pods[pod_name] = json!(now_rfc3339());
        if allowed - 1 == 0 {
            let conditions = status.entry("conditions").or_insert_with(|| json!([]));
            if let Some(list) = conditions.as_array_mut() {
                list.retain(|c| c.get("type").and_then(Value::as_str) != Some("DisruptionAllowed"));
                list.push(json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods",
                    "message": "", "observedGeneration": generation,
                    "lastTransitionTime": now_rfc3339()}));
            }
        }
        if ctx.dry_run {
            return Ok(());
        }
        let key = object_key(Some(&pdb.index.namespace), &pdb_name);
        self.commit_update(state, &pdbs, &key, pdb, budget, Subresource::Status, ctx, Tracking::Update, false)?;
        Ok(())
    }

    /// Adds `DisruptionTarget=True` to the pod, then deletes it with the eviction's options.
    fn condition_and_delete(
        &self,
        state: &mut State,
        pods: &ResourceType,
        namespace: &str,
        name: &str,
        mut options: DeleteOptions,
        ctx: &Ctx<'_>,
    ) -> Result<(), ApiError> {
        let key = object_key(Some(namespace), name);
        if !ctx.dry_run {
            let current = state.get(pods, &key).ok_or_else(|| ApiError::not_found(pods, name))?;
            let mut pod = current.value();
            let conditions = pod
                .as_object_mut()
                .map(|p| p.entry("status").or_insert_with(|| json!({})))
                .and_then(Value::as_object_mut)
                .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
            if let Some(list) = conditions.and_then(Value::as_array_mut) {
                let existing =
                    list.iter().position(|c| c.get("type").and_then(Value::as_str) == Some("DisruptionTarget"));
                let transition = existing
                    .filter(|i| list[*i].get("status").and_then(Value::as_str) == Some("True"))
                    .and_then(|i| list[i].get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| json!(now_rfc3339()));
                let condition = json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting", "lastTransitionTime": transition});
                match existing {
                    Some(i) => list[i] = condition,
                    None => list.push(condition),
                }
            }
            let updated = self.commit_update(
                state,
                pods,
                &key,
                &current,
                pod,
                Subresource::Status,
                ctx,
                Tracking::Update,
                false,
            )?;
            if let Some(preconditions) = options.preconditions.as_mut()
                && preconditions.resource_version.is_some()
            {
                preconditions.resource_version = Some(updated.rv.to_string());
            }
        }
        self.delete_locked(state, pods, &key, &options, ctx)?;
        Ok(())
    }
}

/// Upstream adds a resourceVersion precondition to the delete of non-terminal pods that are evicted without a
/// budget check, so an eviction cannot race a pod that changed meanwhile.
fn enforce_resource_version(options: &mut DeleteOptions, pod: &StoredObject) {
    let preconditions = options.preconditions.get_or_insert_with(Default::default);
    if preconditions.resource_version.is_none() {
        preconditions.resource_version = Some(pod.rv.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_rs_snake_case_delete_options_are_ignored() {
        let body = json!({"delete_options": {"gracePeriodSeconds": 0}, "metadata": {"name": "p"}});
        let eviction = Eviction::from_body(&body).unwrap();
        assert_eq!(eviction.delete_options, DeleteOptions::default());
        let body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"},
                          "deleteOptions": {"gracePeriodSeconds": 0}});
        assert_eq!(Eviction::from_body(&body).unwrap().delete_options.grace_period_seconds, Some(0));
        let body = json!({"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "p"}});
        assert!(Eviction::from_body(&body).is_ok());
        assert!(Eviction::from_body(&json!({"apiVersion": "v1"})).is_err());
    }

    #[test]
    fn readiness_is_the_ready_condition() {
        assert!(pod_is_ready(&json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})));
        assert!(!pod_is_ready(&json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})));
        assert!(!pod_is_ready(&json!({})));
    }
}
