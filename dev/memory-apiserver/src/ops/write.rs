//! Create and update (PUT, main endpoint and `/status`), and the commit steps every write shares.
//!
//! # Guarantees
//! - Create fills uid, creationTimestamp (seconds), resourceVersion, generation (kinds that track it) and a
//!   generated name; it answers 404 for a missing namespace, 403 for a terminating one, 409 for a taken name.
//! - Update checks the resourceVersion precondition (409 with upstream's message), requires it for custom
//!   resources (422), keeps immutable metadata, bumps the generation only when the spec changes.
//! - A write that changes nothing keeps the resourceVersion and sends no watch event.
//! - An update that removes the last finalizer of an object being deleted (grace period 0) deletes it: watchers
//!   see one DELETED event.

use super::{Subresource, Tracking};
use crate::admission::Operation;
use crate::core::{Core, Ctx};
use crate::crd;
use crate::error::ApiError;
use crate::object::{
    ObjectKey, StoredObject, finalizers, generated_suffix, is_deleting, meta_str, metadata_mut, name_of, new_uid,
    now_rfc3339, object_key,
};
use crate::patch::managed::{self, Requested, Scope, Writer};
use crate::resource::{Builtin, ResourceType, events, schema::merge_schema, strategy};
use crate::schema::{ErrorKind, field_error};
use crate::state::State;
use serde_json::{Value, json};
use std::sync::Arc;

/// How many generated names are tried before giving up (upstream retries generateName collisions too).
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// Metadata only the server sets: copied from the stored object on every update.
const SYSTEM_METADATA: [&str; 10] = [
    "name",
    "generateName",
    "namespace",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "selfLink",
];

/// Checks that a body's `apiVersion` and `kind`, when given, name the resource of the URL.
pub fn check_type(rt: &ResourceType, body: &Value) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    if let Some(api_version) = body.get("apiVersion").and_then(Value::as_str).filter(|v| !v.is_empty())
        && api_version != rt.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            rt.api_version()
        )));
    }
    if let Some(kind) = body.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty())
        && kind != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    Ok(())
}

/// Sets the namespace of the URL into the body (400 when the body names another one).
pub fn place_in_namespace(rt: &ResourceType, namespace: Option<&str>, body: &mut Value) -> Result<(), ApiError> {
    let in_body = meta_str(body, "namespace").filter(|n| !n.is_empty()).map(str::to_owned);
    let metadata = metadata_mut(body);
    if rt.namespaced {
        let namespace = namespace.ok_or_else(|| ApiError::bad_request("the namespace of the request is missing"))?;
        if in_body.is_some_and(|n| n != namespace) {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        metadata.insert("namespace".into(), json!(namespace));
    } else {
        metadata.remove("namespace");
    }
    Ok(())
}

/// 400 when the body names another object than the URL.
pub fn check_name(body: &Value, name: &str) -> Result<(), ApiError> {
    let in_body = name_of(body);
    if in_body != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({in_body}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// `metadata.deletionGracePeriodSeconds` (0 when absent).
pub fn deletion_grace(object: &Value) -> i64 {
    object.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0)
}

/// True while finalizers keep a deleted object: `metadata.finalizers`, and `spec.finalizers` of namespaces.
pub fn finalizers_pending(rt: &ResourceType, object: &Value) -> bool {
    !finalizers(object).is_empty()
        || (rt.is(Builtin::Namespace)
            && object.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty()))
}

/// Records a non-apply write in `metadata.managedFields` for the request's manager ([`Ctx::manager`]): every
/// create and update is recorded, whoever makes it, as upstream does.
fn record_update(
    rt: &ResourceType,
    old: Option<&Value>,
    requested: Requested,
    new: &mut Value,
    subresource: Subresource,
    ctx: &Ctx<'_>,
) {
    let api_version = rt.api_version();
    let now = now_rfc3339();
    let manager = ctx.manager();
    let scope = match subresource {
        Subresource::Status => Scope::StatusOnly,
        Subresource::Main if rt.status_subresource => Scope::WithoutStatus,
        Subresource::Main => Scope::Whole,
    };
    let subresource = matches!(subresource, Subresource::Status).then_some("status");
    let writer = Writer { manager: &manager, api_version: &api_version, subresource, now: &now };
    managed::track_update(old, requested, new, &writer, merge_schema(rt).as_ref(), scope);
}

fn restore_system_metadata(old: &Value, new: &mut Value) {
    let old_metadata = old.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
    let metadata = metadata_mut(new);
    for key in SYSTEM_METADATA {
        match old_metadata.get(key) {
            Some(value) => metadata.insert(key.to_owned(), value.clone()),
            None => metadata.remove(key),
        };
    }
}

impl Core {
    /// Creates an object (POST).
    pub fn create(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        body: Value,
        ctx: &Ctx<'_>,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let object = self.prepare_new(rt, namespace, body, false)?;
        let mut state = self.state.lock();
        self.insert_new(&mut state, rt, object, ctx, Tracking::Update)
    }

    /// Decodes and defaults a new object and sets the metadata only the server sets (name generation aside).
    pub(crate) fn prepare_new(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        body: Value,
        keep_managed_fields: bool,
    ) -> Result<Value, ApiError> {
        check_type(rt, &body)?;
        let requested = Requested::of(&body);
        let mut object = strategy::normalize(rt, body)?;
        place_in_namespace(rt, namespace, &mut object)?;
        let metadata = metadata_mut(&mut object);
        metadata.insert("uid".into(), json!(new_uid()));
        metadata.insert("creationTimestamp".into(), json!(now_rfc3339()));
        strategy::prepare_create(rt, &mut object);
        let metadata = metadata_mut(&mut object);
        for key in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
            metadata.remove(key);
        }
        if !keep_managed_fields {
            // What a create records starts from the entries the request sets (none when it resets them).
            match requested {
                Requested::Entries(entries) => metadata_mut(&mut object).insert("managedFields".into(), json!(entries)),
                Requested::Live | Requested::Reset => metadata_mut(&mut object).remove("managedFields"),
            };
        }
        let metadata = metadata_mut(&mut object);
        if rt.tracks_generation {
            metadata.insert("generation".into(), json!(1));
        } else {
            metadata.remove("generation");
        }
        Ok(object)
    }

    /// Stores a prepared new object: generates its name, checks the namespace, validates, refuses a taken name.
    pub(crate) fn insert_new(
        &self,
        state: &mut State,
        rt: &ResourceType,
        mut object: Value,
        ctx: &Ctx<'_>,
        tracking: Tracking,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let namespace = meta_str(&object, "namespace").map(str::to_owned);
        if name_of(&object).is_empty() {
            let prefix = meta_str(&object, "generateName").unwrap_or_default().to_owned();
            if prefix.is_empty() {
                let error = field_error(
                    "metadata.name",
                    ErrorKind::Required,
                    "Required value: name or generateName is required",
                );
                return Err(ApiError::invalid(rt, "", &[error]));
            }
            let free = (0..GENERATE_NAME_ATTEMPTS)
                .map(|_| format!("{prefix}{}", generated_suffix()))
                .find(|name| state.get(rt, &object_key(namespace.as_deref(), name)).is_none());
            let name = free.unwrap_or_else(|| format!("{prefix}{}", generated_suffix()));
            metadata_mut(&mut object).insert("name".into(), json!(name));
        }
        let name = name_of(&object).to_owned();
        if let Some(namespace) = namespace.as_deref() {
            self.check_namespace_open(state, rt, namespace, &name)?;
        }
        self.admit_builtin(state, rt, &mut object, None)?;
        let mut errors = strategy::validate(rt, &object, None);
        if rt.is(Builtin::CustomResourceDefinition) {
            errors.extend(crd::validate(&object, None));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, &name, &errors));
        }
        self.admit(state, ctx, rt, Operation::Create, "", Some(&object), None)?;
        let key = object_key(namespace.as_deref(), &name);
        if state.get(rt, &key).is_some() {
            return Err(ApiError::already_exists(rt, &name));
        }
        if rt.is(Builtin::CustomResourceDefinition) {
            crd::prepare(&mut object, None);
        }
        if matches!(tracking, Tracking::Update) {
            let requested = Requested::of(&object);
            record_update(rt, None, requested, &mut object, Subresource::Main, ctx);
        }
        if ctx.dry_run {
            return Ok(StoredObject::new(rt, &events::to_storage(rt, object), 0));
        }
        Ok(self.commit_put(state, rt, key, &mut object))
    }

    /// 404 when the namespace is missing; 403 NamespaceTerminating while it is being deleted (events excepted):
    /// upstream's NamespaceLifecycle admission of every create, subresource creates (evictions) included.
    pub(super) fn check_namespace_open(
        &self,
        state: &State,
        rt: &ResourceType,
        namespace: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        let namespaces = self.builtin(Builtin::Namespace);
        let Some(stored) = state.get(&namespaces, &object_key(None, namespace)) else {
            return Err(ApiError::namespace_not_found(namespace));
        };
        let phase = namespaces.selectable_field("status.phase").map(|i| stored.index.field(i)).unwrap_or_default();
        if phase == "Terminating" && !rt.is(Builtin::CoreEvent) && !rt.is(Builtin::Event) {
            return Err(ApiError::forbidden(
                rt,
                name,
                &format!("unable to create new content in namespace {namespace} because it is being terminated"),
            )
            .with_cause(
                "NamespaceTerminating",
                format!("namespace {namespace} is being terminated"),
                Some("metadata.namespace"),
            ));
        }
        Ok(())
    }

    /// Replaces an object (PUT) through the main endpoint or `/status`.
    pub fn update(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        mut body: Value,
        subresource: Subresource,
        ctx: &Ctx<'_>,
    ) -> Result<Arc<StoredObject>, ApiError> {
        check_type(rt, &body)?;
        check_name(&body, name)?;
        place_in_namespace(rt, namespace, &mut body)?;
        let key = object_key(namespace.filter(|_| rt.namespaced), name);
        let mut state = self.state.lock();
        let current = state.get(rt, &key).ok_or_else(|| ApiError::not_found(rt, name))?;
        let require_rv = rt.custom().is_some();
        self.commit_update(&mut state, rt, &key, &current, body, subresource, ctx, Tracking::Update, require_rv)
    }

    /// The update steps every write of an existing object takes (PUT, PATCH, apply, eviction's condition).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn commit_update(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: &ObjectKey,
        current: &Arc<StoredObject>,
        new: Value,
        subresource: Subresource,
        ctx: &Ctx<'_>,
        tracking: Tracking,
        require_rv: bool,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let name = current.index.name.to_string();
        match meta_str(&new, "resourceVersion").filter(|rv| !rv.is_empty()) {
            Some(rv) if rv != current.rv.to_string() => return Err(ApiError::conflict_modified(rt, &name)),
            Some(_) => {}
            None if require_rv => {
                let error = field_error(
                    "metadata.resourceVersion",
                    ErrorKind::Invalid,
                    "Invalid value: 0x0: must be specified for an update",
                );
                return Err(ApiError::invalid(rt, &name, &[error]));
            }
            None => {}
        }
        if let Some(uid) = meta_str(&new, "uid").filter(|u| !u.is_empty())
            && uid != &*current.index.uid
        {
            return Err(ApiError::conflict(
                rt,
                &name,
                &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {}", current.index.uid),
            ));
        }
        // The write is in the form the request's API serves; the stored form may differ (Events).
        let old = events::to_served(rt, current.value());
        let requested = Requested::of(&new);
        let mut new = strategy::normalize(rt, new)?;
        match subresource {
            Subresource::Main => strategy::prepare_update(rt, &old, &mut new),
            Subresource::Status => strategy::prepare_status_update(rt, &old, &mut new),
        }
        restore_system_metadata(&old, &mut new);
        if is_deleting(&old) {
            let before = finalizers(&old);
            let added: Vec<String> = finalizers(&new).into_iter().filter(|f| !before.contains(f)).collect();
            if !added.is_empty() {
                let error = field_error(
                    "metadata.finalizers",
                    ErrorKind::Forbidden,
                    format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                    ),
                );
                return Err(ApiError::invalid(rt, &name, &[error]));
            }
        }
        if matches!(subresource, Subresource::Main) {
            self.admit_builtin(state, rt, &mut new, Some(&old))?;
        }
        let mut errors = strategy::validate(rt, &new, Some(&old));
        if rt.is(Builtin::CustomResourceDefinition) {
            errors.extend(crd::validate(&new, Some(&old)));
            crd::prepare(&mut new, Some(&old));
        }
        if !errors.is_empty() {
            return Err(ApiError::invalid(rt, &name, &errors));
        }
        if rt.tracks_generation && strategy::generation_changes(rt, &old, &new) {
            let generation = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            metadata_mut(&mut new).insert("generation".into(), json!(generation + 1));
        }
        if matches!(tracking, Tracking::Update) {
            record_update(rt, Some(&old), requested, &mut new, subresource, ctx);
        }
        let sub = if subresource == Subresource::Status { "status" } else { "" };
        self.admit(state, ctx, rt, Operation::Update, sub, Some(&new), Some(&old))?;
        if new == old {
            return Ok(current.clone());
        }
        if ctx.dry_run {
            return Ok(StoredObject::new(rt, &events::to_storage(rt, new), current.rv));
        }
        if is_deleting(&new)
            && !finalizers_pending(rt, &new)
            && deletion_grace(&new) == 0
            && let Some(deleted) = self.commit_remove(state, rt, key)
        {
            return Ok(deleted);
        }
        Ok(self.commit_put(state, rt, key.clone(), &mut new))
    }

    /// Stores a new version (in the stored form of its resource: `object` becomes it) and keeps the registry in
    /// step with CRDs.
    pub(crate) fn commit_put(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: ObjectKey,
        object: &mut Value,
    ) -> Arc<StoredObject> {
        if events::is_converted(rt) {
            *object = events::to_storage(rt, std::mem::take(object));
        }
        let stored = state.put(rt, key, object);
        if rt.is(Builtin::CustomResourceDefinition) {
            self.registry.write().set_crd_types(name_of(object), crd::resource_types(object));
        }
        self.follow_policy_objects(rt);
        stored
    }

    /// After a write of an RBAC or admission-policy object (under the state lock): the authorizer and admission
    /// rebuild what they derived from those objects.
    fn follow_policy_objects(&self, rt: &ResourceType) {
        match rt.builtin() {
            Some(kind) if kind.is_rbac() => self.auth.rbac_changed(),
            Some(kind) if kind.is_admission_policy() => self.admission.changed(),
            _ => {}
        }
    }

    /// Removes an object and, for a CRD, stops serving its kinds.
    pub(crate) fn commit_remove(
        &self,
        state: &mut State,
        rt: &ResourceType,
        key: &ObjectKey,
    ) -> Option<Arc<StoredObject>> {
        let removed = state.remove(rt, key)?;
        self.follow_policy_objects(rt);
        if rt.is(Builtin::CustomResourceDefinition) {
            let crd_name = removed.index.name.to_string();
            let mut registry = self.registry.write();
            let served: Vec<Arc<str>> = registry
                .types()
                .filter(|t| t.custom().is_some_and(|c| c.crd_name == crd_name))
                .map(|t| t.store_id.clone())
                .collect();
            registry.remove_crd(&crd_name);
            for store_id in served {
                state.forget_kind(&store_id);
            }
        }
        Some(removed)
    }
}
