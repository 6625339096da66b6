//! The server's own lifecycle work: emptying terminating namespaces and the objects of deleted CRDs (upstream:
//! the namespace controller and the apiextensions finalizer).
//!
//! # Guarantees
//! - A terminating namespace is removed once none of its objects remain; objects still terminating (graceful
//!   pods, finalizers) keep it until they go.
//! - A deleted CRD is removed once none of its custom resources remain.

use super::Subresource;
use super::Tracking;
use super::delete::DeleteOptions;
use crate::core::{Core, Ctx};
use crate::crd::CLEANUP_FINALIZER;
use crate::object::{ObjectKey, finalizers, is_deleting, object_key};
use crate::resource::{Builtin, ResourceType};
use crate::state::State;
use serde_json::json;
use std::collections::HashSet;
use std::ops::Bound;
use std::sync::Arc;

/// Identity of the namespace lifecycle work in metrics.
pub const NAMESPACE_CONTROLLER: &str = "dev/namespace-controller";
/// Identity of the CRD cleanup in metrics.
pub const CRD_CLEANUP: &str = "dev/crd-cleanup";

impl Core {
    /// One pass over terminating namespaces. Returns true while some are left.
    pub fn finalize_namespaces(&self) -> bool {
        let namespaces = self.builtin(Builtin::Namespace);
        let phase = namespaces.selectable_field("status.phase");
        let kinds: Vec<Arc<ResourceType>> = self.unique_types(|t| t.namespaced);
        let ctx = Ctx::new(NAMESPACE_CONTROLLER);
        let mut state = self.state.lock();
        let terminating: Vec<String> = state
            .objects(&namespaces)
            .values()
            .filter(|ns| phase.map(|i| ns.index.field(i)) == Some("Terminating"))
            .map(|ns| ns.index.name.to_string())
            .collect();
        for namespace in &terminating {
            let remaining =
                self.delete_all(&mut state, &kinds, |state, rt| keys_in_namespace(state, rt, namespace), &ctx);
            if remaining == 0 {
                let key = object_key(None, namespace);
                if let Some(current) = state.get(&namespaces, &key) {
                    let mut value = current.value();
                    set_spec_finalizers(&mut value, Vec::new());
                    if finalizers(&value).is_empty() {
                        self.commit_remove(&mut state, &namespaces, &key);
                    } else {
                        self.commit_put(&mut state, &namespaces, key, &mut value);
                    }
                }
            }
        }
        !terminating.is_empty()
    }

    /// One pass over deleted CRDs. Returns true while some are left.
    pub fn cleanup_crds(&self) -> bool {
        let crds = self.builtin(Builtin::CustomResourceDefinition);
        let ctx = Ctx::new(CRD_CLEANUP);
        let mut state = self.state.lock();
        let deleting: Vec<String> = state
            .objects(&crds)
            .values()
            .filter(|crd| crd.index.deleting && finalizers(&crd.value()).iter().any(|f| f == CLEANUP_FINALIZER))
            .map(|crd| crd.index.name.to_string())
            .collect();
        for crd_name in &deleting {
            let kinds = self.unique_types(|t| t.custom().is_some_and(|c| c.crd_name == *crd_name));
            let remaining =
                self.delete_all(&mut state, &kinds, |state, rt| state.objects(rt).keys().cloned().collect(), &ctx);
            if remaining == 0 {
                let key = object_key(None, crd_name);
                if let Some(current) = state.get(&crds, &key) {
                    let mut value = current.value();
                    let kept: Vec<String> = finalizers(&value).into_iter().filter(|f| f != CLEANUP_FINALIZER).collect();
                    value["metadata"]["finalizers"] = json!(kept);
                    let _ = self.commit_update(
                        &mut state,
                        &crds,
                        &key,
                        &current,
                        value,
                        Subresource::Main,
                        &ctx,
                        Tracking::Update,
                        false,
                    );
                }
            }
        }
        !deleting.is_empty()
    }

    /// Deletes (with default options) every object `keys` names that is not already being deleted; returns how
    /// many are left (terminating pods, objects held by finalizers).
    fn delete_all(
        &self,
        state: &mut State,
        kinds: &[Arc<ResourceType>],
        keys: impl Fn(&State, &ResourceType) -> Vec<ObjectKey>,
        ctx: &Ctx<'_>,
    ) -> usize {
        let mut remaining = 0;
        for rt in kinds {
            for key in keys(state, rt) {
                if state.get(rt, &key).is_some_and(|o| !o.index.deleting) {
                    // A failure (a precondition, a vanished object) leaves the object for the next pass.
                    let _ = self.delete_locked(state, rt, &key, &DeleteOptions::default(), ctx);
                }
                if state.get(rt, &key).is_some() {
                    remaining += 1;
                }
            }
        }
        remaining
    }

    /// One type per object map (versions of a resource share it) among those `keep` accepts.
    fn unique_types(&self, keep: impl Fn(&ResourceType) -> bool) -> Vec<Arc<ResourceType>> {
        let registry = self.registry.read();
        let mut seen = HashSet::new();
        registry.types().filter(|t| keep(t) && seen.insert(t.store_id.clone())).cloned().collect()
    }
}

fn keys_in_namespace(state: &State, rt: &ResourceType, namespace: &str) -> Vec<ObjectKey> {
    let start = format!("{namespace}/");
    let end = format!("{namespace}0");
    state
        .objects(rt)
        .range::<str, _>((Bound::Included(start.as_str()), Bound::Excluded(end.as_str())))
        .map(|(key, _)| key.clone())
        .collect()
}

impl Core {
    /// `PUT namespaces/{name}/finalize`: sets `spec.finalizers`; a terminating namespace without finalizers goes.
    pub fn finalize_namespace(
        &self,
        name: &str,
        body: &serde_json::Value,
        ctx: &Ctx<'_>,
    ) -> Result<Arc<crate::object::StoredObject>, crate::error::ApiError> {
        crate::ops::write::check_name(body, name)?;
        let namespaces = self.builtin(Builtin::Namespace);
        let key = object_key(None, name);
        let mut state = self.state.lock();
        let current =
            state.get(&namespaces, &key).ok_or_else(|| crate::error::ApiError::not_found(&namespaces, name))?;
        let old = current.value();
        let mut value = old.clone();
        let requested = body.pointer("/spec/finalizers").and_then(serde_json::Value::as_array).cloned();
        set_spec_finalizers(&mut value, requested.unwrap_or_default());
        if value == old || ctx.dry_run {
            return Ok(current);
        }
        if is_deleting(&value)
            && !crate::ops::write::finalizers_pending(&namespaces, &value)
            && let Some(gone) = self.commit_remove(&mut state, &namespaces, &key)
        {
            return Ok(gone);
        }
        Ok(self.commit_put(&mut state, &namespaces, key, &mut value))
    }
}

/// Sets a namespace's `spec.finalizers`; an empty list is omitted (`NamespaceSpec.Finalizers` is `omitempty`).
fn set_spec_finalizers(namespace: &mut serde_json::Value, finalizers: Vec<serde_json::Value>) {
    let Some(fields) = namespace.as_object_mut() else { return };
    let spec = fields.entry("spec").or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else { return };
    if finalizers.is_empty() {
        spec.remove("finalizers");
    } else {
        spec.insert("finalizers".into(), serde_json::Value::Array(finalizers));
    }
}
