//! DELETE and deletecollection: preconditions, finalizers, garbage-collection finalizers, graceful pod deletion
//! and namespace termination.
//!
//! # Guarantees
//! - Without finalizers an object goes at once: one DELETED event at a new resourceVersion.
//! - With finalizers it gets `deletionTimestamp` and `deletionGracePeriodSeconds: 0` and stays until an update
//!   removes the last finalizer.
//! - A bound, running pod gets `deletionTimestamp = now + grace` and stays until a DELETE with grace 0 (the
//!   kubelet's); a later DELETE can only shorten the grace period. Unbound and finished pods go at once.
//! - A namespace becomes `Terminating`; the namespace lifecycle loop empties and removes it.

use crate::core::{Core, Ctx};
use crate::error::ApiError;
use crate::object::{
    Filter, ObjectKey, StoredObject, finalizers, format_time, is_deleting, metadata_mut, now_rfc3339, object_key,
    parse_time,
};
use crate::ops::write::{deletion_grace, finalizers_pending};
use crate::resource::{Builtin, ResourceType, priority};
use crate::state::State;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// `metav1.DeleteOptions` as the body of a DELETE (or of an eviction) carries it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteOptions {
    /// Seconds before the object should go; 0 means at once.
    pub grace_period_seconds: Option<i64>,
    /// Conditions the object must meet.
    pub preconditions: Option<Preconditions>,
    /// `Orphan`, `Background` or `Foreground`.
    pub propagation_policy: Option<String>,
    /// Deprecated form of `propagationPolicy: Orphan`.
    pub orphan_dependents: Option<bool>,
    /// `["All"]` for a dry run.
    pub dry_run: Option<Vec<String>>,
}

/// `metav1.Preconditions`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    /// The object must have this uid.
    pub uid: Option<String>,
    /// The object must be at this resourceVersion.
    pub resource_version: Option<String>,
}

/// What a DELETE did.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object is gone; this is its last version, stamped with the DELETED event's resourceVersion.
    Gone(Arc<StoredObject>),
    /// The object stays (finalizers, graceful pod deletion, namespace termination); this is its new version.
    Pending(Arc<StoredObject>),
}

impl Deleted {
    /// The object, gone or pending.
    pub fn object(&self) -> &Arc<StoredObject> {
        match self {
            Deleted::Gone(o) | Deleted::Pending(o) => o,
        }
    }
}

const ORPHAN: &str = "orphan";
const FOREGROUND: &str = "foregroundDeletion";

fn time_after(seconds: i64) -> String {
    let now = jiff::Timestamp::now();
    format_time(now.checked_add(jiff::SignedDuration::from_secs(seconds)).unwrap_or(now))
}

/// The finalizers the propagation policy asks for (upstream `deletionFinalizersForGarbageCollection`); without a
/// policy, batch/v1 Jobs orphan their pods (upstream's `DefaultGarbageCollectionPolicy` for that version).
fn gc_finalizers(rt: &ResourceType, object: &mut Value, options: &DeleteOptions) {
    let policy = match (options.propagation_policy.as_deref(), options.orphan_dependents) {
        (Some(policy), _) => policy,
        (None, Some(true)) => "Orphan",
        (None, Some(false)) => "Background",
        (None, None) if rt.is(Builtin::Job) => "Orphan",
        (None, None) => return,
    };
    let (add, drop): (Option<&str>, &[&str]) = match policy {
        "Orphan" => (Some(ORPHAN), &[FOREGROUND]),
        "Foreground" => (Some(FOREGROUND), &[ORPHAN]),
        _ => (None, &[ORPHAN, FOREGROUND]),
    };
    let mut list = finalizers(object);
    let before = list.clone();
    list.retain(|f| !drop.contains(&f.as_str()));
    if let Some(add) = add
        && !list.iter().any(|f| f == add)
    {
        list.push(add.to_owned());
    }
    if list != before {
        metadata_mut(object).insert("finalizers".into(), json!(list));
    }
}

impl Core {
    /// Deletes one object.
    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
        ctx: &Ctx<'_>,
    ) -> Result<Deleted, ApiError> {
        let key = object_key(namespace.filter(|_| rt.namespaced), name);
        let mut state = self.state.lock();
        self.delete_locked(&mut state, rt, &key, options, ctx)
    }

    /// Deletes every object matching `filter`; returns what was deleted or is now pending.
    pub fn delete_collection(
        &self,
        rt: &ResourceType,
        filter: &Filter,
        options: &DeleteOptions,
        ctx: &Ctx<'_>,
    ) -> Result<Vec<Arc<StoredObject>>, ApiError> {
        let mut state = self.state.lock();
        let keys: Vec<ObjectKey> = state
            .objects(rt)
            .iter()
            .filter(|(_, object)| filter.matches(&object.index))
            .map(|(key, _)| key.clone())
            .collect();
        let mut deleted = Vec::new();
        for key in keys {
            match self.delete_locked(&mut state, rt, &key, options, ctx) {
                Ok(outcome) => deleted.push(outcome.object().clone()),
                Err(error) if error.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        Ok(deleted)
    }

    pub(crate) fn delete_locked(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: &ObjectKey,
        options: &DeleteOptions,
        ctx: &Ctx<'_>,
    ) -> Result<Deleted, ApiError> {
        let name = key.rsplit('/').next().unwrap_or_default().to_owned();
        let current = state.get(rt, key).ok_or_else(|| ApiError::not_found(rt, &name))?;
        if rt.is(Builtin::PriorityClass) && priority::is_system_class(&name) {
            return Err(ApiError::forbidden(rt, &name, "this is a system priority class and cannot be deleted"));
        }
        if let Some(preconditions) = &options.preconditions {
            if let Some(uid) = preconditions.uid.as_deref()
                && uid != &*current.index.uid
            {
                return Err(ApiError::precondition_failed(
                    rt,
                    &name,
                    &format!(
                        "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                        current.index.uid
                    ),
                ));
            }
            if let Some(rv) = preconditions.resource_version.as_deref()
                && rv != current.rv.to_string()
            {
                return Err(ApiError::precondition_failed(
                    rt,
                    &name,
                    &format!(
                        "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                        current.rv
                    ),
                ));
            }
        }
        let dry_run = ctx.dry_run || options.dry_run.as_ref().is_some_and(|d| d.iter().any(|v| v == "All"));
        let old = current.value();
        let admitted = Ctx { dry_run, ..*ctx };
        self.admit(state, &admitted, rt, crate::admission::Operation::Delete, "", None, Some(&old))?;
        let deleting = is_deleting(&old);
        let mut new = old.clone();
        if !deleting {
            gc_finalizers(rt, &mut new, options);
        }
        if rt.is(Builtin::Namespace) {
            if !deleting {
                metadata_mut(&mut new).insert("deletionTimestamp".into(), json!(now_rfc3339()));
                new["status"] = json!({"phase": "Terminating"});
            }
        } else if let Some(grace) = self.pod_grace(rt, &old, options) {
            let metadata = metadata_mut(&mut new);
            metadata.insert("deletionTimestamp".into(), json!(grace.deletion_timestamp));
            metadata.insert("deletionGracePeriodSeconds".into(), json!(grace.seconds));
        } else if deleting && deletion_grace(&old) > 0 && rt.is(Builtin::Pod) {
            // A longer or no grace period on a pod already terminating: nothing changes.
            return Ok(Deleted::Pending(current));
        } else if finalizers_pending(rt, &new) {
            let metadata = metadata_mut(&mut new);
            metadata.entry("deletionTimestamp").or_insert_with(|| json!(now_rfc3339()));
            metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        let keep = finalizers_pending(rt, &new) || (is_deleting(&new) && deletion_grace(&new) > 0);
        if dry_run {
            let object = StoredObject::new(rt, &new, current.rv);
            return Ok(if keep { Deleted::Pending(object) } else { Deleted::Gone(object) });
        }
        if !keep {
            return self.commit_remove(state, rt, key).map(Deleted::Gone).ok_or_else(|| ApiError::not_found(rt, &name));
        }
        if new == old {
            return Ok(Deleted::Pending(current));
        }
        Ok(Deleted::Pending(self.commit_put(state, rt, key.clone(), &mut new)))
    }

    /// The graceful deletion of a pod, if this DELETE starts or shortens one.
    fn pod_grace(&self, rt: &ResourceType, pod: &Value, options: &DeleteOptions) -> Option<Grace> {
        if !rt.is(Builtin::Pod) {
            return None;
        }
        let requested = options.grace_period_seconds.map(|g| if g < 0 { 1 } else { g });
        if is_deleting(pod) {
            let existing = deletion_grace(pod);
            let wanted = requested?;
            if existing == 0 || wanted >= existing {
                return None;
            }
            let timestamp = pod.pointer("/metadata/deletionTimestamp").and_then(Value::as_str).and_then(parse_time)?;
            let shortened = timestamp.checked_add(jiff::SignedDuration::from_secs(wanted - existing)).ok()?;
            return Some(Grace { seconds: wanted, deletion_timestamp: format_time(shortened) });
        }
        let mut seconds = requested
            .or_else(|| pod.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
            .unwrap_or(0);
        let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default();
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
        if node.is_empty() || phase == "Succeeded" || phase == "Failed" {
            seconds = 0;
        }
        if seconds < 0 {
            seconds = 1;
        }
        Some(Grace { seconds, deletion_timestamp: time_after(seconds) })
    }
}

struct Grace {
    seconds: i64,
    deletion_timestamp: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn propagation_policies_add_and_drop_gc_finalizers() {
        let configmaps = crate::resource::builtin_types().into_iter().find(|t| t.plural == "configmaps").unwrap();
        let mut object = json!({"metadata": {"finalizers": ["a", "orphan"]}});
        gc_finalizers(
            &configmaps,
            &mut object,
            &DeleteOptions { propagation_policy: Some("Foreground".into()), ..Default::default() },
        );
        assert_eq!(object["metadata"]["finalizers"], json!(["a", "foregroundDeletion"]));
        gc_finalizers(
            &configmaps,
            &mut object,
            &DeleteOptions { propagation_policy: Some("Background".into()), ..Default::default() },
        );
        assert_eq!(object["metadata"]["finalizers"], json!(["a"]));
        gc_finalizers(&configmaps, &mut object, &DeleteOptions { orphan_dependents: Some(true), ..Default::default() });
        assert_eq!(object["metadata"]["finalizers"], json!(["a", "orphan"]));
        let before = object.clone();
        gc_finalizers(&configmaps, &mut object, &DeleteOptions::default());
        assert_eq!(object, before);
        let jobs = crate::resource::builtin_types().into_iter().find(|t| t.plural == "jobs").unwrap();
        let mut job = json!({"metadata": {}});
        gc_finalizers(&jobs, &mut job, &DeleteOptions::default());
        assert_eq!(job["metadata"]["finalizers"], json!(["orphan"]), "batch/v1 Jobs orphan their pods by default");
    }

    #[test]
    fn delete_options_parse_from_the_wire_and_ignore_unknown_fields() {
        let options: DeleteOptions =
            serde_json::from_value(json!({"gracePeriodSeconds": 5, "propagationPolicy": "Orphan",
            "preconditions": {"uid": "u", "resourceVersion": "3"}, "dryRun": ["All"], "kind": "DeleteOptions"}))
            .unwrap();
        assert_eq!(options.grace_period_seconds, Some(5));
        assert_eq!(options.preconditions.unwrap().resource_version.as_deref(), Some("3"));
    }
}
