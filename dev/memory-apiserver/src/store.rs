//! The in-process API: a cloneable [`Store`] handle for the built-in controllers and for tests, going through
//! the same operations as HTTP requests (resourceVersions, watch events, validation, status rules, metrics).

use super::auth::{Attributes, UserInfo};
use super::core::{Core, Ctx};
use super::error::ApiError;
use super::faults::{ControllerGate, Controllers};
use super::metrics::Verb;
use super::object::{Filter, StoredObject};
use super::ops::Subresource;
use super::ops::delete::{DeleteOptions, Deleted, Preconditions};
use super::ops::eviction::Eviction;
use super::ops::read::ListOptions;
use super::ops::watch::{WatchOptions, WatchOutput, WatchSession};
use super::patch::PatchType;
use super::resource::{Gvr, ResourceType, events};
use super::selector::{FieldSelector, LabelSelector};
use futures::Stream;
use futures::stream::BoxStream;
use kube::api::{DeleteParams, ListParams, PatchParams, PostParams, PropagationPolicy, VersionMatch, WatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// A patch for [`Store::patch`]: the body and its type.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// JSON merge patch (RFC 7386).
    Merge(Value),
    /// JSON patch (RFC 6902): an array of operations.
    Json(Value),
    /// Strategic merge patch (built-in kinds only).
    Strategic(Value),
    /// Server-side apply; needs `PatchParams::field_manager`.
    Apply(Value),
}

impl Patch {
    fn parts(&self) -> (PatchType, &Value) {
        match self {
            Patch::Merge(v) => (PatchType::Merge, v),
            Patch::Json(v) => (PatchType::Json, v),
            Patch::Strategic(v) => (PatchType::Strategic, v),
            Patch::Apply(v) => (PatchType::Apply, v),
        }
    }
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectList<T> {
    /// The snapshot's resourceVersion.
    pub resource_version: String,
    /// Token of the next page.
    pub continue_token: Option<String>,
    /// How many objects follow this page, when the count is exact (no selectors).
    pub remaining_item_count: Option<u64>,
    /// The objects.
    pub items: Vec<T>,
}

/// What a delete did.
#[derive(Debug, Clone, PartialEq)]
pub enum DeleteOutcome<T> {
    /// The object is gone (its last version).
    Gone(T),
    /// The object stays for now: finalizers, graceful pod termination, namespace termination.
    Pending(T),
}

/// One event of an in-process watch.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent<T> {
    /// ADDED.
    Added(T),
    /// MODIFIED.
    Modified(T),
    /// DELETED (the last version, at the deletion's resourceVersion).
    Deleted(T),
    /// BOOKMARK.
    Bookmark {
        /// The bookmark's resourceVersion.
        resource_version: String,
        /// The `k8s.io/initial-events-end` bookmark of a streaming list.
        initial_events_end: bool,
    },
    /// ERROR (410 Expired when the history no longer reaches the requested resourceVersion); the stream ends.
    Error(ApiError),
}

impl<T> WatchEvent<T> {
    fn map<U>(self, f: impl FnOnce(T) -> Result<U, ApiError>) -> WatchEvent<U> {
        let convert = |object, make: fn(U) -> WatchEvent<U>| match f(object) {
            Ok(u) => make(u),
            Err(e) => WatchEvent::Error(e),
        };
        match self {
            WatchEvent::Added(o) => convert(o, WatchEvent::Added),
            WatchEvent::Modified(o) => convert(o, WatchEvent::Modified),
            WatchEvent::Deleted(o) => convert(o, WatchEvent::Deleted),
            WatchEvent::Bookmark { resource_version, initial_events_end } => {
                WatchEvent::Bookmark { resource_version, initial_events_end }
            }
            WatchEvent::Error(e) => WatchEvent::Error(e),
        }
    }
}

/// A handle on the server's store for in-process writers. Every call is attributed to the handle's identity
/// (the User-Agent in the request metrics).
#[derive(Clone)]
pub struct Store {
    core: Arc<Core>,
    identity: Arc<str>,
    user: Option<Arc<UserInfo>>,
}

/// An object as the API of `rt` serves it.
fn to_value(rt: &ResourceType, stored: &StoredObject) -> Value {
    events::to_served(rt, stored.value())
}

fn filter(
    rt: &ResourceType,
    namespace: Option<&str>,
    labels: Option<&str>,
    fields: Option<&str>,
) -> Result<Filter, ApiError> {
    let labels = match labels {
        Some(text) => LabelSelector::parse(text)
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?,
        None => LabelSelector::everything(),
    };
    let fields = match fields {
        Some(text) => FieldSelector::parse(text, &rt.selectable_field_names(), rt.namespaced)
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        None => FieldSelector::default(),
    };
    Ok(Filter { namespace: namespace.filter(|_| rt.namespaced).map(str::to_owned), labels, fields })
}

fn delete_options(params: &DeleteParams) -> DeleteOptions {
    DeleteOptions {
        grace_period_seconds: params.grace_period_seconds.map(i64::from),
        preconditions: params
            .preconditions
            .as_ref()
            .map(|p| Preconditions { uid: p.uid.clone(), resource_version: p.resource_version.clone() }),
        propagation_policy: params.propagation_policy.as_ref().map(|p| {
            match p {
                PropagationPolicy::Orphan => "Orphan",
                PropagationPolicy::Background => "Background",
                PropagationPolicy::Foreground => "Foreground",
            }
            .to_owned()
        }),
        orphan_dependents: None,
        dry_run: params.dry_run.then(|| vec!["All".to_owned()]),
    }
}

impl Store {
    pub(crate) fn new(core: Arc<Core>, identity: &str) -> Self {
        Store { core, identity: Arc::from(identity), user: None }
    }

    /// The same store, attributed to another writer (e.g. `dev/disruption-controller`).
    pub fn with_identity(&self, identity: &str) -> Store {
        Store { core: self.core.clone(), identity: Arc::from(identity), user: self.user.clone() }
    }

    /// The same store acting as `user`: every call is authorized (403 as over HTTP) and every write goes through
    /// ValidatingAdmissionPolicies. A store without a user is the server itself: neither applies.
    pub fn as_user(&self, user: UserInfo) -> Store {
        Store { core: self.core.clone(), identity: self.identity.clone(), user: Some(Arc::new(user)) }
    }

    /// The user this handle acts as, if any.
    pub fn user(&self) -> Option<&UserInfo> {
        self.user.as_deref()
    }

    /// With a user: 403 unless `verb` on the resource is allowed.
    fn authorize(
        &self,
        verb: &str,
        rt: &ResourceType,
        subresource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), ApiError> {
        let Some(user) = &self.user else { return Ok(()) };
        let namespace = if rt.namespaced { namespace.unwrap_or_default() } else { "" };
        let attributes = Attributes::resource(verb, &rt.group, &rt.version, &rt.plural, subresource, namespace, name);
        self.core.authorize(user, &attributes)
    }

    /// Who this handle writes as.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.core.state.lock().rv
    }

    /// The resourceVersion of the latest change of the kind at `gvr` (0 when none): an informer of the kind
    /// synced to it holds every object the store does.
    pub fn last_change(&self, gvr: &Gvr) -> Result<u64, ApiError> {
        let rt = self.resource(gvr)?;
        Ok(self.core.state.lock().last_change(&rt))
    }

    /// The served type at `gvr` (404 when not served, e.g. a CRD not yet created).
    pub fn resource(&self, gvr: &Gvr) -> Result<Arc<ResourceType>, ApiError> {
        self.core.resource(gvr).ok_or_else(ApiError::path_not_found)
    }

    /// The pause switches of built-in controllers.
    pub fn controllers(&self) -> Controllers {
        self.core.controllers.clone()
    }

    /// The gate a built-in controller named `name` consults before each unit of work.
    pub fn controller_gate(&self, name: &str) -> ControllerGate {
        self.core.controllers.gate(name)
    }

    fn ctx<'a>(&'a self, field_manager: Option<&'a str>, dry_run: bool) -> Ctx<'a> {
        Ctx { field_manager, dry_run, user: self.user.as_deref(), ..Ctx::new(&self.identity) }
    }

    fn record(&self, verb: Verb, rt: &ResourceType, subresource: &str) {
        self.core.metrics.record(verb, &rt.group, &rt.plural, subresource, &self.identity);
    }

    /// GET one object.
    pub fn get(&self, gvr: &Gvr, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let rt = self.resource(gvr)?;
        self.authorize("get", &rt, "", namespace, name)?;
        self.record(Verb::Get, &rt, "");
        self.core.get(&rt, namespace, name).map(|o| to_value(&rt, &o))
    }

    /// LIST one page (all of them without `limit`). `resource_version` and `version_match` follow the API's rules.
    pub fn list(&self, gvr: &Gvr, namespace: Option<&str>, params: &ListParams) -> Result<ObjectList<Value>, ApiError> {
        let rt = self.resource(gvr)?;
        self.authorize("list", &rt, "", namespace, "")?;
        self.record(Verb::List, &rt, "");
        let options = ListOptions {
            filter: filter(&rt, namespace, params.label_selector.as_deref(), params.field_selector.as_deref())?,
            limit: params.limit.map(|l| l as usize),
            continue_token: params.continue_token.clone(),
            resource_version: params.resource_version.clone(),
            resource_version_match: params.version_match.as_ref().map(|m| match m {
                VersionMatch::NotOlderThan => "NotOlderThan".to_owned(),
                VersionMatch::Exact => "Exact".to_owned(),
            }),
        };
        let page = self.core.list_sync(&rt, &options)?;
        Ok(ObjectList {
            resource_version: page.rv.to_string(),
            continue_token: page.continue_token,
            remaining_item_count: page.remaining,
            items: page.items.iter().map(|o| to_value(&rt, o)).collect(),
        })
    }

    /// POST a new object.
    pub fn create(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        object: Value,
        params: &PostParams,
    ) -> Result<Value, ApiError> {
        let rt = self.resource(gvr)?;
        self.authorize("create", &rt, "", namespace, "")?;
        self.record(Verb::Create, &rt, "");
        let ctx = self.ctx(params.field_manager.as_deref(), params.dry_run);
        self.core.create(&rt, namespace, object, &ctx).map(|o| to_value(&rt, &o))
    }

    /// PUT an object (optimistic concurrency on `metadata.resourceVersion`).
    pub fn update(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        name: &str,
        object: Value,
        params: &PostParams,
    ) -> Result<Value, ApiError> {
        self.put(gvr, namespace, name, object, params, Subresource::Main)
    }

    /// PUT `/status`.
    pub fn update_status(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        name: &str,
        object: Value,
        params: &PostParams,
    ) -> Result<Value, ApiError> {
        self.put(gvr, namespace, name, object, params, Subresource::Status)
    }

    fn put(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        name: &str,
        object: Value,
        params: &PostParams,
        subresource: Subresource,
    ) -> Result<Value, ApiError> {
        let rt = self.resource(gvr)?;
        let sub = if subresource == Subresource::Status { "status" } else { "" };
        self.authorize("update", &rt, sub, namespace, name)?;
        self.record(Verb::Update, &rt, sub);
        let ctx = self.ctx(params.field_manager.as_deref(), params.dry_run);
        self.core.update(&rt, namespace, name, object, subresource, &ctx).map(|o| to_value(&rt, &o))
    }

    /// PATCH an object.
    pub fn patch(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        params: &PatchParams,
    ) -> Result<Value, ApiError> {
        self.patch_at(gvr, namespace, name, patch, params, Subresource::Main)
    }

    /// PATCH `/status`.
    pub fn patch_status(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        params: &PatchParams,
    ) -> Result<Value, ApiError> {
        self.patch_at(gvr, namespace, name, patch, params, Subresource::Status)
    }

    fn patch_at(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        params: &PatchParams,
        subresource: Subresource,
    ) -> Result<Value, ApiError> {
        let rt = self.resource(gvr)?;
        let sub = if subresource == Subresource::Status { "status" } else { "" };
        self.authorize("patch", &rt, sub, namespace, name)?;
        self.record(Verb::Patch, &rt, sub);
        let ctx = self.ctx(params.field_manager.as_deref(), params.dry_run);
        let (patch_type, body) = patch.parts();
        self.core
            .patch(&rt, namespace, name, patch_type, body, subresource, params.force, &ctx)
            .map(|p| to_value(&rt, &p.object))
    }

    /// DELETE an object.
    pub fn delete(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<Value>, ApiError> {
        let rt = self.resource(gvr)?;
        self.authorize("delete", &rt, "", namespace, name)?;
        self.record(Verb::Delete, &rt, "");
        let ctx = self.ctx(None, params.dry_run);
        Ok(match self.core.delete(&rt, namespace, name, &delete_options(params), &ctx)? {
            Deleted::Gone(o) => DeleteOutcome::Gone(to_value(&rt, &o)),
            Deleted::Pending(o) => DeleteOutcome::Pending(to_value(&rt, &o)),
        })
    }

    /// Evicts a pod through `pods/eviction` with these delete options (honoured, as a policy/v1 `deleteOptions`).
    pub fn evict(&self, namespace: &str, name: &str, params: &DeleteParams) -> Result<(), ApiError> {
        let pods = self.core.builtin(super::resource::Builtin::Pod);
        self.authorize("create", &pods, "eviction", Some(namespace), name)?;
        self.record(Verb::Create, &pods, "eviction");
        let eviction = Eviction { name: Some(name.to_owned()), delete_options: delete_options(params) };
        self.core.evict(namespace, name, &eviction, &self.ctx(None, params.dry_run))
    }

    /// Binds a pod to a node through `pods/binding`, as a scheduler does.
    pub fn bind(&self, namespace: &str, name: &str, node: &str) -> Result<(), ApiError> {
        let pods = self.core.builtin(super::resource::Builtin::Pod);
        self.authorize("create", &pods, "binding", Some(namespace), name)?;
        self.record(Verb::Create, &pods, "binding");
        let binding = serde_json::json!({"metadata": {"name": name}, "target": {"kind": "Node", "name": node}});
        self.core.bind(namespace, name, &binding, &self.ctx(None, false))
    }

    /// WATCH from `resource_version` ("" or "0": current objects first as ADDED). As over HTTP, the stream ends
    /// at its timeout (`params.timeout`, else `ApiServerConfig::default_watch_timeout`), when the watcher falls
    /// behind its buffer, on `Faults::close_all_watches` and at shutdown; it yields `WatchEvent::Error` (410)
    /// when the history no longer reaches `resource_version`. Re-watch from the last resourceVersion seen
    /// (bookmarks included), or relist after a 410.
    pub fn watch(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<BoxStream<'static, WatchEvent<Value>>, ApiError> {
        let rt = self.resource(gvr)?;
        self.authorize("watch", &rt, "", namespace, "")?;
        self.record(Verb::Watch, &rt, "");
        let options = WatchOptions {
            filter: filter(&rt, namespace, params.label_selector.as_deref(), params.field_selector.as_deref())?,
            resource_version: Some(resource_version.to_owned()),
            send_initial_events: params.send_initial_events,
            allow_bookmarks: params.bookmarks,
            timeout: params.timeout.map(|t| Duration::from_secs(u64::from(t))),
        };
        let session = WatchSession::start(self.core.clone(), rt, options)?;
        Ok(Box::pin(futures::stream::unfold(session, |mut session| async move {
            let event = match session.next().await? {
                WatchOutput::Event(item) => {
                    let stored: Value = serde_json::from_slice(&item.bytes).unwrap_or(Value::Null);
                    let object = events::to_served(session.resource(), stored);
                    match item.ty {
                        super::state::event::EventType::Added => WatchEvent::Added(object),
                        super::state::event::EventType::Modified => WatchEvent::Modified(object),
                        super::state::event::EventType::Deleted => WatchEvent::Deleted(object),
                    }
                }
                WatchOutput::Bookmark { rv, initial_events_end } => {
                    WatchEvent::Bookmark { resource_version: rv.to_string(), initial_events_end }
                }
                WatchOutput::Error(error) => WatchEvent::Error(error),
            };
            Some((event, session))
        })))
    }

    /// A typed view for a kube-rs resource type (`store.api::<Pod>()`).
    pub fn api<K>(&self) -> TypedStore<K>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        TypedStore { store: self.clone(), gvr: Gvr::of::<K>(), kind: PhantomData }
    }
}

/// [`Store`] with objects as kube-rs types.
#[derive(Clone)]
pub struct TypedStore<K> {
    store: Store,
    gvr: Gvr,
    kind: PhantomData<fn() -> K>,
}

fn decode<K: DeserializeOwned>(value: Value) -> Result<K, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::internal(format!("stored object does not decode: {e}")))
}

fn encode<K: Serialize>(object: &K) -> Result<Value, ApiError> {
    serde_json::to_value(object).map_err(|e| ApiError::bad_request(format!("object does not encode: {e}")))
}

impl<K> TypedStore<K>
where
    K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Send + 'static,
{
    fn name_of(object: &K) -> String {
        object.meta().name.clone().unwrap_or_default()
    }

    /// GET.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Result<K, ApiError> {
        decode(self.store.get(&self.gvr, namespace, name)?)
    }

    /// GET, `None` when missing.
    pub fn get_opt(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>, ApiError> {
        match self.get(namespace, name) {
            Ok(object) => Ok(Some(object)),
            Err(error) if error.code == 404 => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// LIST one page.
    pub fn list(&self, namespace: Option<&str>, params: &ListParams) -> Result<ObjectList<K>, ApiError> {
        let page = self.store.list(&self.gvr, namespace, params)?;
        Ok(ObjectList {
            resource_version: page.resource_version,
            continue_token: page.continue_token,
            remaining_item_count: page.remaining_item_count,
            items: page.items.into_iter().map(decode).collect::<Result<_, _>>()?,
        })
    }

    /// POST.
    pub fn create(&self, namespace: Option<&str>, object: &K, params: &PostParams) -> Result<K, ApiError> {
        decode(self.store.create(&self.gvr, namespace, encode(object)?, params)?)
    }

    /// PUT.
    pub fn update(&self, namespace: Option<&str>, object: &K, params: &PostParams) -> Result<K, ApiError> {
        decode(self.store.update(&self.gvr, namespace, &Self::name_of(object), encode(object)?, params)?)
    }

    /// PUT `/status`.
    pub fn update_status(&self, namespace: Option<&str>, object: &K, params: &PostParams) -> Result<K, ApiError> {
        decode(self.store.update_status(&self.gvr, namespace, &Self::name_of(object), encode(object)?, params)?)
    }

    /// PATCH.
    pub fn patch(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        params: &PatchParams,
    ) -> Result<K, ApiError> {
        decode(self.store.patch(&self.gvr, namespace, name, patch, params)?)
    }

    /// PATCH `/status`.
    pub fn patch_status(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch,
        params: &PatchParams,
    ) -> Result<K, ApiError> {
        decode(self.store.patch_status(&self.gvr, namespace, name, patch, params)?)
    }

    /// DELETE.
    pub fn delete(
        &self,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<DeleteOutcome<K>, ApiError> {
        Ok(match self.store.delete(&self.gvr, namespace, name, params)? {
            DeleteOutcome::Gone(v) => DeleteOutcome::Gone(decode(v)?),
            DeleteOutcome::Pending(v) => DeleteOutcome::Pending(decode(v)?),
        })
    }

    /// WATCH.
    pub fn watch(
        &self,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<impl Stream<Item = WatchEvent<K>> + Send + use<K>, ApiError> {
        use futures::StreamExt;
        Ok(self.store.watch(&self.gvr, namespace, params, resource_version)?.map(|event| event.map(decode)))
    }
}
