//! An emulator of the Compute Engine REST API calls of the GCP provider (zonal managed instance groups, instances,
//! disks, global instance templates, zone and global operations) and of the OAuth token endpoints, on a loopback
//! port; its instances join the dev cluster as Nodes with `gce://` provider IDs.
//!
//! # Guarantees
//! - Request paths, bodies, answers and errors have Compute's shapes (`compute/v1` paths; `Operation` resources;
//!   errors `{"error": {"code", "message", "errors": [{"message", "domain", "reason"}]}}`; 429 with `Retry-After`).
//! - Every Compute request needs `Authorization: Bearer TOKEN` with a token this emulator issued: from `POST /token`
//!   (the OAuth refresh-token grant of an `authorized_user` ADC file, [`GcpEmulator::adc_json`]) or from the
//!   metadata server's `GET /computeMetadata/v1/instance/service-accounts/default/token` (header
//!   `Metadata-Flavor: Google`). Otherwise 401.
//! - Operations are `RUNNING` until the operation time passed, then `DONE`; their effect (a template inserted or
//!   deleted, a MIG's template set) is visible only then. `createInstances` records the instances in the MIG and returns:
//!   the MIG creates each one later ([`GcpTiming::create`]; until then `instances.get` is 404 and
//!   `listManagedInstances` lists it `CREATING`), retrying failed attempts with `lastAttempt.errors`
//!   ([`GcpEmulator::fail_creations`], module `creation`); with [`GcpEmulator::set_list_lag`], the list shows an
//!   instance only some time after the request (the MIG's `targetSize` counts it at once). A created instance is `PROVISIONING`, `RUNNING` after the
//!   provisioning time, its host boots and its kubelet registers the Node (NotReady, Ready once booted) after the
//!   join time; a deleted one is `STOPPING` (MIG action `DELETING`, host down) for the termination time, then gone:
//!   its Node is deleted, its host retired.
//! - Each request records the IAM permissions Compute checks for it ([`permissions`]), before faults apply.
//! - No lock is held across an await.

mod creation;
mod http;
mod permissions;
mod spec;

use crate::apiserver::store::Store;
use crate::hosts::{HostError, Hosts};
use cloud::{GceInstance, ProviderId};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use permissions::permissions;

/// The URL prefix Compute writes in front of resource paths.
pub const COMPUTE_URL: &str = "https://www.googleapis.com/compute/v1/";

/// The refresh token of the emulator's `authorized_user` credentials.
const REFRESH_TOKEN: &str = "emulator-refresh-token";

/// How long things take in the emulator.
#[derive(Debug, Clone, Copy)]
pub struct GcpTiming {
    /// `createInstances` to the instance's existence (the MIG creates it after the request; until then
    /// `instances.get` answers 404 and `listManagedInstances` lists it `CREATING` without a status); also the
    /// interval of the MIG's retries of a failed creation.
    pub create: Duration,
    /// `PROVISIONING` to `RUNNING`.
    pub provision: Duration,
    /// `RUNNING` to the Node's registration.
    pub join: Duration,
    /// Registration to Ready.
    pub ready: Duration,
    /// `STOPPING` to gone.
    pub terminate: Duration,
    /// `RUNNING` to `DONE` of an operation.
    pub operation: Duration,
}

impl Default for GcpTiming {
    /// Fast, for tests.
    fn default() -> Self {
        GcpTiming {
            create: Duration::from_millis(150),
            provision: Duration::from_millis(200),
            join: Duration::from_millis(200),
            ready: Duration::from_millis(300),
            terminate: Duration::from_millis(300),
            operation: Duration::from_millis(150),
        }
    }
}

/// A failure injected into the Compute API.
#[derive(Debug, Clone, PartialEq)]
pub enum GcpFault {
    /// 429 `rateLimitExceeded` with `Retry-After` in whole seconds.
    Throttled { retry_after_seconds: u64 },
    /// This 5xx status with reason `backendError`.
    ServerError { status: u16 },
    /// Compute's API rate limit as it answers it: 403, reason `rateLimitExceeded` (domain `usageLimits`), message
    /// `Quota exceeded for quota group 'ReadGroup' and limit '…' of service 'compute.googleapis.com' …`, no
    /// `Retry-After` (as reported in hashicorp/terraform-provider-google#8360 and #8955).
    RateLimited403,
}

#[derive(Default)]
struct Faults {
    /// Fires on the next requests, `times` each.
    next: Vec<(GcpFault, u32)>,
    /// Requests needing one of these permissions are refused with 403 `forbidden`.
    forbidden: BTreeSet<String>,
    /// The next `createInstances` of these MIGs ends in an operation with `QUOTA_EXCEEDED`.
    quota: BTreeSet<String>,
    /// Every attempt of these MIGs to create an instance fails with this error code and message (the MIG keeps
    /// retrying and reports it in `lastAttempt.errors`).
    creation_errors: BTreeMap<String, (String, String)>,
}

#[derive(Clone)]
struct Mig {
    zone: String,
    name: String,
    template: String,
    target_size: i64,
}

struct Instance {
    zone: String,
    mig: String,
    template: String,
    image: String,
    status: &'static str,
    /// The MIG's current action on it.
    action: &'static str,
    control_plane: bool,
    labels: BTreeMap<String, String>,
    id: u64,
}

enum Effect {
    None,
    /// A template becomes visible.
    InsertTemplate(String, Value),
    /// A template is removed.
    DeleteTemplate(String),
    /// A MIG's template is set.
    SetTemplate {
        zone: String,
        mig: String,
        template: String,
    },
}

struct Op {
    json: Value,
    done_at: Instant,
    effect: Effect,
    done: bool,
}

/// An instance a MIG was asked to create and has not created yet.
struct Creating {
    /// The MIG.
    pub mig: String,
    /// The error of the last failed attempt (code, message).
    pub last_error: Option<(String, String)>,
}

#[derive(Default)]
struct State {
    migs: BTreeMap<(String, String), Mig>,
    templates: BTreeMap<String, Value>,
    /// Names taken by templates whose insertion runs.
    reserved_templates: BTreeSet<String>,
    instances: BTreeMap<(String, String), Instance>,
    /// Instances a MIG was asked to create that do not exist yet, by zone and name.
    creating: BTreeMap<(String, String), Creating>,
    operations: BTreeMap<String, Op>,
    tokens: BTreeSet<String>,
    faults: Faults,
    calls: BTreeMap<String, u64>,
    permissions: BTreeSet<String>,
    next_id: u64,
    /// List calls answer at most this many items a page unless `maxResults` asks for fewer (Compute's default
    /// and maximum is 500).
    page_size: Option<usize>,
    /// What the emulator answered that the published definition does not allow (see `spec`).
    violations: Vec<String>,
    /// How long `listManagedInstances` does not show an instance after its `createInstances` (see
    /// [`GcpEmulator::set_list_lag`]); `None`: at once.
    list_lag: Option<Duration>,
    /// The instances `listManagedInstances` does not show before the given time, by zone and name.
    unlisted_until: BTreeMap<(String, String), Instant>,
}

/// A list request's paging parameters (`maxResults`, `pageToken`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Paging {
    pub max_results: Option<usize>,
    pub page_token: Option<String>,
}

/// One page of `items` and the `nextPageToken` of the rest (an opaque offset), as Compute's list methods answer:
/// `maxResults` "the maximum number of results per page … (Default: 500)", `nextPageToken` "use this value as the
/// pageToken for the next list request" (compute v1, e.g. `instanceGroupManagers.listManagedInstances`).
fn page_of(
    items: Vec<Value>,
    paging: &Paging,
    page_size: Option<usize>,
) -> Result<(Vec<Value>, Option<String>), ApiError> {
    let skip = match paging.page_token.as_deref().filter(|t| !t.is_empty()) {
        None => 0,
        Some(token) => token
            .strip_prefix("page-")
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| ApiError::invalid(format!("Invalid value for field 'pageToken': '{token}'.")))?,
    };
    let size = paging.max_results.unwrap_or(500).clamp(1, 500).min(page_size.unwrap_or(500));
    let total = items.len();
    let page: Vec<Value> = items.into_iter().skip(skip).take(size).collect();
    let next = skip.saturating_add(size);
    Ok((page, (next < total).then(|| format!("page-{next}"))))
}

struct Inner {
    project: String,
    project_number: u64,
    url: String,
    state: Mutex<State>,
    store: Store,
    hosts: Hosts,
    timing: Mutex<GcpTiming>,
    shutdown: CancellationToken,
}

/// A running emulator (a cloneable handle); it stops when [`GcpEmulator::shutdown`] is called.
#[derive(Clone)]
pub struct GcpEmulator {
    inner: Arc<Inner>,
}

/// A Compute error answer.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub status: u16,
    pub reason: &'static str,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, reason, message: message.into(), retry_after: None }
    }

    fn not_found(resource: &str) -> ApiError {
        ApiError::new(404, "notFound", format!("The resource '{resource}' was not found"))
    }

    fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "invalid", message)
    }
}

pub(crate) type ApiResult = Result<Value, ApiError>;

/// An RFC 1035 name, as Compute resource names are.
fn is_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.ends_with('-')
}

/// A resource path without Compute's URL prefix.
fn strip_url(url: &str) -> &str {
    url.strip_prefix(COMPUTE_URL)
        .or_else(|| url.strip_prefix("https://compute.googleapis.com/compute/v1/"))
        .unwrap_or(url)
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

impl GcpEmulator {
    /// Stops serving and cancels the timers.
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    /// The endpoint to give the client (`GcpConfig::endpoint`).
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The project.
    pub fn project(&self) -> &str {
        &self.inner.project
    }

    /// An `authorized_user` ADC file's content whose `token_uri` is this emulator.
    pub fn adc_json(&self) -> Value {
        json!({
            "type": "authorized_user",
            "client_id": "emulator-client.apps.googleusercontent.com",
            "client_secret": "emulator-secret",
            "refresh_token": REFRESH_TOKEN,
            "token_uri": format!("{}/token", self.inner.url),
        })
    }

    /// Sets how long things take from now on.
    pub fn set_timing(&self, timing: GcpTiming) {
        *self.inner.timing.lock() = timing;
    }

    fn timing(&self) -> GcpTiming {
        *self.inner.timing.lock()
    }

    /// Adds a global instance template whose boot disk is created from `image`, with these instance labels.
    pub fn add_template(&self, name: &str, image: &str, labels: &[(&str, &str)]) {
        let labels: serde_json::Map<String, Value> =
            labels.iter().map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned()))).collect();
        let body = json!({
            "name": name,
            "properties": {
                "machineType": "n2d-standard-4",
                "labels": labels,
                "disks": [{
                    "boot": true, "autoDelete": true, "type": "PERSISTENT", "mode": "READ_WRITE",
                    "initializeParams": {"sourceImage": image, "diskSizeGb": "10"}
                }],
                "networkInterfaces": [{"network": format!("projects/{}/global/networks/default", self.inner.project)}]
            }
        });
        let mut state = self.inner.state.lock();
        let resource = self.template_resource(&mut state, name, body);
        state.templates.insert(name.to_owned(), resource);
    }

    /// Adds an empty zonal MIG using template `template`; returns its group ID (its path).
    pub fn add_mig(&self, zone: &str, name: &str, template: &str) -> String {
        let mig = Mig { zone: zone.to_owned(), name: name.to_owned(), template: template.to_owned(), target_size: 0 };
        self.inner.state.lock().migs.insert((zone.to_owned(), name.to_owned()), mig);
        format!("projects/{}/zones/{zone}/instanceGroupManagers/{name}", self.inner.project)
    }

    /// Adds a running instance to a MIG whose Node is registered now and whose host is up (the instances a
    /// cluster starts with). Returns its name.
    pub fn add_running_instance(&self, zone: &str, mig: &str) -> Result<String, String> {
        let name = {
            let mut state = self.inner.state.lock();
            let Some(m) = state.migs.get(&(zone.to_owned(), mig.to_owned())).cloned() else {
                return Err(format!("no MIG {zone}/{mig}"));
            };
            let name = (0..)
                .map(|i| format!("{mig}-{i:04}"))
                .find(|n| !state.instances.contains_key(&(zone.to_owned(), n.clone())))
                .unwrap_or_default();
            let instance = self.new_instance(&mut state, &m, "RUNNING")?;
            state.instances.insert((zone.to_owned(), name.clone()), instance);
            if let Some(m) = state.migs.get_mut(&(zone.to_owned(), mig.to_owned())) {
                m.target_size += 1;
            }
            name
        };
        let (image, control_plane) = self.instance_facts(zone, &name).ok_or("the instance vanished")?;
        self.inner.hosts.add(&name, &image).map_err(|e| e.to_string())?;
        self.register_node(zone, &name, control_plane)?;
        Ok(name)
    }

    /// The next `times` Compute requests fail so.
    pub fn inject(&self, fault: GcpFault, times: u32) {
        self.inner.state.lock().faults.next.push((fault, times));
    }

    /// Requests that need `permission` are refused (403 `forbidden`) until [`GcpEmulator::clear_faults`].
    pub fn forbid(&self, permission: &str) {
        self.inner.state.lock().faults.forbidden.insert(permission.to_owned());
    }

    /// The next `createInstances` of MIG `name` ends in an operation with error `QUOTA_EXCEEDED`.
    pub fn quota_on_next_create(&self, name: &str) {
        self.inner.state.lock().faults.quota.insert(name.to_owned());
    }

    /// Clears every injected fault.
    pub fn clear_faults(&self) {
        self.inner.state.lock().faults = Faults::default();
    }

    /// The IAM permissions of every request so far.
    pub fn recorded_permissions(&self) -> BTreeSet<String> {
        self.inner.state.lock().permissions.clone()
    }

    /// What the emulator answered that the Compute v1 discovery document does not allow (each successful answer of
    /// a method of the definition is checked against its response schema): empty, or the emulator drifted from GCE.
    pub fn spec_violations(&self) -> Vec<String> {
        self.inner.state.lock().violations.clone()
    }

    /// Records answers the definition does not allow.
    fn record_violations(&self, violations: Vec<String>) {
        if !violations.is_empty() {
            self.inner.state.lock().violations.extend(violations);
        }
    }

    /// Requests so far by Compute method (`instanceGroupManagers.get`, ...).
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.inner.state.lock().calls.clone()
    }

    /// List calls (`aggregatedList`, `listManagedInstances`, `instanceTemplates.list`) answer at most `size`
    /// items a page from now on, with a `nextPageToken`; `None`: Compute's default of 500.
    pub fn set_page_size(&self, size: Option<usize>) {
        self.inner.state.lock().page_size = size.map(|s| s.max(1));
    }

    /// From now on, `listManagedInstances` shows an instance `lag` after the `createInstances` that asked for it
    /// (before and after the MIG created it: `instances.get` finds a created one at once), as Compute's lists are
    /// eventually consistent with its writes; the MIG's `targetSize` counts it at once. `None`: every instance is
    /// listed again.
    pub fn set_list_lag(&self, lag: Option<Duration>) {
        let mut state = self.inner.state.lock();
        state.list_lag = lag;
        if lag.is_none() {
            state.unlisted_until.clear();
        }
    }

    /// The template a MIG uses now.
    pub fn mig_template(&self, zone: &str, name: &str) -> Option<String> {
        self.inner.state.lock().migs.get(&(zone.to_owned(), name.to_owned())).map(|m| m.template.clone())
    }

    /// The names of the templates that exist.
    pub fn template_names(&self) -> Vec<String> {
        self.inner.state.lock().templates.keys().cloned().collect()
    }

    /// The names of a MIG's instances (deleting ones included).
    pub fn instance_names(&self, zone: &str, mig: &str) -> Vec<String> {
        let state = self.inner.state.lock();
        state.instances.iter().filter(|((z, _), i)| z == zone && i.mig == mig).map(|((_, n), _)| n.clone()).collect()
    }

    fn instance_facts(&self, zone: &str, name: &str) -> Option<(String, bool)> {
        let state = self.inner.state.lock();
        state.instances.get(&(zone.to_owned(), name.to_owned())).map(|i| (i.image.clone(), i.control_plane))
    }

    fn next_id(state: &mut State) -> u64 {
        state.next_id += 1;
        state.next_id
    }

    fn template_resource(&self, state: &mut State, name: &str, mut body: Value) -> Value {
        let id = Self::next_id(state);
        if let Some(object) = body.as_object_mut() {
            object.insert("kind".into(), json!("compute#instanceTemplate"));
            object.insert("id".into(), json!(id.to_string()));
            object.insert("creationTimestamp".into(), json!(now_rfc3339()));
            object.insert(
                "selfLink".into(),
                json!(format!("{COMPUTE_URL}projects/{}/global/instanceTemplates/{name}", self.inner.project)),
            );
        }
        body
    }

    /// A new instance of `mig` from its current template.
    fn new_instance(&self, state: &mut State, mig: &Mig, status: &'static str) -> Result<Instance, String> {
        let template = state.templates.get(&mig.template).ok_or_else(|| format!("no template {}", mig.template))?;
        let properties = &template["properties"];
        let image = properties["disks"]
            .as_array()
            .and_then(|disks| disks.iter().find(|d| d["boot"] == json!(true)))
            .and_then(|d| d["initializeParams"]["sourceImage"].as_str())
            .ok_or_else(|| format!("template {} has no boot image", mig.template))?;
        let labels: BTreeMap<String, String> = properties["labels"]
            .as_object()
            .map(|l| l.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        let control_plane =
            matches!(labels.get("constellation-role").map(String::as_str), Some("control-plane" | "controlplane"));
        Ok(Instance {
            zone: mig.zone.clone(),
            mig: mig.name.clone(),
            template: mig.template.clone(),
            image: strip_url(image).to_owned(),
            status,
            action: if status == "RUNNING" { "NONE" } else { "CREATING" },
            control_plane,
            labels,
            id: Self::next_id(state),
        })
    }

    /// The kubelet of a new instance registers its Node.
    fn register_node(&self, zone: &str, name: &str, control_plane: bool) -> Result<(), String> {
        let mut node = crate::node_manifest::node_manifest(name, control_plane);
        let id = ProviderId::Gce(GceInstance {
            project: self.inner.project.clone(),
            zone: zone.to_owned(),
            name: name.to_owned(),
        });
        node.spec.get_or_insert_default().provider_id = Some(id.to_string());
        node.metadata.labels.get_or_insert_default().insert("topology.kubernetes.io/zone".into(), zone.to_owned());
        let store = self.inner.store.with_identity("dev/kubelet");
        store.api::<Node>().create(None, &node, &PostParams::default()).map(drop).map_err(|e| e.to_string())
    }

    /// Runs `step` after `delay` unless the emulator stopped.
    fn after(&self, delay: Duration, step: impl FnOnce(&GcpEmulator) + Send + 'static) {
        let emulator = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => step(&emulator),
                () = emulator.inner.shutdown.cancelled() => {}
            }
        });
    }

    /// `PROVISIONING` → `RUNNING`: the host boots; the Node registers after the join time.
    fn provisioned(&self, zone: &str, name: &str) {
        let facts = {
            let mut state = self.inner.state.lock();
            match state.instances.get_mut(&(zone.to_owned(), name.to_owned())) {
                Some(instance) if instance.status == "PROVISIONING" => {
                    instance.status = "RUNNING";
                    instance.action = "NONE";
                    Some((instance.image.clone(), instance.control_plane))
                }
                _ => None,
            }
        };
        let Some((image, control_plane)) = facts else { return };
        let timing = self.timing();
        if let Err(error) = self.inner.hosts.add_booting(name, &image, timing.join + timing.ready) {
            tracing::warn!(instance = name, %error, "the GCP emulator could not add a host");
        }
        let (zone, name) = (zone.to_owned(), name.to_owned());
        self.after(timing.join, move |emulator| {
            let running = emulator
                .inner
                .state
                .lock()
                .instances
                .get(&(zone.clone(), name.clone()))
                .is_some_and(|i| i.status == "RUNNING");
            if running && let Err(error) = emulator.register_node(&zone, &name, control_plane) {
                tracing::warn!(instance = name, error, "the GCP emulator's kubelet could not register");
            }
        });
    }

    /// `STOPPING` → gone: the Node is deleted and the host retired.
    fn deleted(&self, zone: &str, name: &str) {
        let removed = self.inner.state.lock().instances.remove(&(zone.to_owned(), name.to_owned())).is_some();
        if !removed {
            return;
        }
        let store = self.inner.store.with_identity("dev/cloud-node-lifecycle");
        match store.api::<Node>().delete(None, name, &DeleteParams::default()) {
            Ok(_) => {}
            Err(error) if error.code == 404 => {}
            Err(error) => tracing::warn!(instance = name, %error, "the GCP emulator could not delete a node"),
        }
        self.inner.hosts.retire(name);
    }

    // The API (called by `http` after authentication, permissions and faults).

    /// Applies the operations whose time has come.
    fn advance(&self, state: &mut State) {
        let now = Instant::now();
        let due: Vec<String> =
            state.operations.iter().filter(|(_, op)| !op.done && op.done_at <= now).map(|(n, _)| n.clone()).collect();
        for name in due {
            let Some(op) = state.operations.get_mut(&name) else { continue };
            op.done = true;
            op.json["status"] = json!("DONE");
            op.json["progress"] = json!(100);
            op.json["endTime"] = json!(now_rfc3339());
            match std::mem::replace(&mut op.effect, Effect::None) {
                Effect::None => {}
                Effect::InsertTemplate(template, body) => {
                    state.reserved_templates.remove(&template);
                    let resource = self.template_resource(state, &template, body);
                    state.templates.insert(template, resource);
                }
                Effect::DeleteTemplate(template) => {
                    // A MIG that took the template up while the deletion ran keeps it: the operation fails.
                    if let Some(user) = self.template_user(state, &template) {
                        let message = format!(
                            "The instance_template resource 'projects/{}/global/instanceTemplates/{template}' is already being used by '{user}'",
                            self.inner.project
                        );
                        if let Some(op) = state.operations.get_mut(&name) {
                            op.json["httpErrorStatusCode"] = json!(400);
                            op.json["httpErrorMessage"] = json!("BAD REQUEST");
                            op.json["error"] = json!({"errors": [{"code": "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE", "message": message}]});
                        }
                    } else {
                        state.templates.remove(&template);
                    }
                }
                Effect::SetTemplate { zone, mig, template } => {
                    if let Some(m) = state.migs.get_mut(&(zone, mig)) {
                        m.template = template;
                    }
                }
            }
        }
    }

    /// The MIG that uses a template or is being set to it, if any.
    fn template_user(&self, state: &State, template: &str) -> Option<String> {
        let pending = state.operations.values().filter(|op| !op.done).find_map(|op| match &op.effect {
            Effect::SetTemplate { zone, mig, template: t } if t == template => Some((zone.clone(), mig.clone())),
            _ => None,
        });
        let using = state.migs.values().find(|m| m.template == template).map(|m| (m.zone.clone(), m.name.clone()));
        let (zone, mig) = using.or(pending)?;
        Some(format!("projects/{}/zones/{zone}/instanceGroupManagers/{mig}", self.inner.project))
    }

    /// A new operation; `zone` `None` for a global one. Returns its JSON as first answered.
    fn operation(
        &self,
        state: &mut State,
        zone: Option<&str>,
        kind: &str,
        target: &str,
        effect: Effect,
        error: Option<(&str, &str, u16)>,
    ) -> Value {
        let id = Self::next_id(state);
        let name = format!("operation-{id}-{:08x}", id.wrapping_mul(0x9e37_79b9) as u32);
        let project = &self.inner.project;
        let scope = match zone {
            Some(zone) => format!("projects/{project}/zones/{zone}"),
            None => format!("projects/{project}/global"),
        };
        let mut json = json!({
            "kind": "compute#operation",
            "id": id.to_string(),
            "name": name,
            "operationType": kind,
            "targetLink": format!("{COMPUTE_URL}{target}"),
            "targetId": id.to_string(),
            "status": "RUNNING",
            "user": "emulator-user@example.com",
            "progress": 0,
            "insertTime": now_rfc3339(),
            "startTime": now_rfc3339(),
            "selfLink": format!("{COMPUTE_URL}{scope}/operations/{name}"),
        });
        if let Some(zone) = zone {
            json["zone"] = json!(format!("{COMPUTE_URL}projects/{project}/zones/{zone}"));
        }
        let done = error.is_some();
        if let Some((code, message, status)) = error {
            json["status"] = json!("DONE");
            json["progress"] = json!(100);
            json["endTime"] = json!(now_rfc3339());
            json["httpErrorStatusCode"] = json!(status);
            json["httpErrorMessage"] = json!(if status == 403 { "FORBIDDEN" } else { "BAD REQUEST" });
            json["error"] = json!({"errors": [{"code": code, "message": message}]});
        }
        let done_at = Instant::now() + self.timing().operation;
        state.operations.insert(name, Op { json: json.clone(), done_at, effect, done });
        json
    }

    fn mig_json(&self, mig: &Mig, state: &State) -> Value {
        let project = &self.inner.project;
        let (zone, name) = (&mig.zone, &mig.name);
        let template = format!("{COMPUTE_URL}projects/{project}/global/instanceTemplates/{}", mig.template);
        let being_created = state.creating.iter().filter(|((z, _), c)| z == zone && c.mig == *name).count();
        let actions = |action: &str| {
            state.instances.values().filter(|i| i.zone == *zone && i.mig == *name && i.action == action).count()
                + if action == "CREATING" { being_created } else { 0 }
        };
        json!({
            "kind": "compute#instanceGroupManager",
            "id": (mig.name.len() as u64 * 7919).to_string(),
            "name": name,
            "zone": format!("{COMPUTE_URL}projects/{project}/zones/{zone}"),
            "instanceTemplate": template,
            "versions": [{"instanceTemplate": template, "targetSize": {"calculated": mig.target_size}}],
            "instanceGroup": format!("{COMPUTE_URL}projects/{project}/zones/{zone}/instanceGroups/{name}"),
            "baseInstanceName": name,
            "targetSize": mig.target_size,
            "currentActions": {
                "creating": actions("CREATING"), "deleting": actions("DELETING"), "none": actions("NONE"),
                "abandoning": 0, "recreating": 0, "refreshing": 0, "restarting": 0, "verifying": 0,
                "creatingWithoutRetries": 0, "resuming": 0, "starting": 0, "stopping": 0, "suspending": 0
            },
            "status": {"isStable": actions("NONE") as i64 == mig.target_size},
            "updatePolicy": {"type": "OPPORTUNISTIC", "minimalAction": "REPLACE"},
            "selfLink": format!("{COMPUTE_URL}projects/{project}/zones/{zone}/instanceGroupManagers/{name}"),
        })
    }

    fn mig<'s>(&self, state: &'s State, zone: &str, name: &str) -> Result<&'s Mig, ApiError> {
        state.migs.get(&(zone.to_owned(), name.to_owned())).ok_or_else(|| {
            ApiError::not_found(&format!("projects/{}/zones/{zone}/instanceGroupManagers/{name}", self.inner.project))
        })
    }

    pub(crate) fn get_mig(&self, zone: &str, name: &str) -> ApiResult {
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        let mig = self.mig(&state, zone, name)?;
        Ok(self.mig_json(mig, &state))
    }

    pub(crate) fn aggregated_migs(&self, paging: &Paging) -> ApiResult {
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        let all: Vec<Value> = state.migs.values().map(|mig| self.mig_json(mig, &state)).collect();
        let (page, next) = page_of(all, paging, state.page_size)?;
        let mut items: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for mig in page {
            let zone = mig["zone"].as_str().and_then(|z| z.rsplit('/').next()).unwrap_or_default().to_owned();
            items.entry(format!("zones/{zone}")).or_default().push(mig);
        }
        let items: serde_json::Map<String, Value> =
            items.into_iter().map(|(scope, migs)| (scope, json!({"instanceGroupManagers": migs}))).collect();
        let mut list = json!({
            "kind": "compute#instanceGroupManagerAggregatedList",
            "id": format!("projects/{}/aggregated/instanceGroupManagers", self.inner.project),
            "items": items,
            "selfLink": format!("{COMPUTE_URL}projects/{}/aggregated/instanceGroupManagers", self.inner.project),
        });
        if let Some(next) = next {
            list["nextPageToken"] = json!(next);
        }
        Ok(list)
    }

    pub(crate) fn create_instances(&self, zone: &str, name: &str, body: &Value) -> ApiResult {
        let names: Vec<String> = body["instances"]
            .as_array()
            .map(|list| list.iter().filter_map(|i| i["name"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let created = {
            let mut state = self.inner.state.lock();
            self.advance(&mut state);
            let mig = self.mig(&state, zone, name)?.clone();
            if names.is_empty() {
                return Err(ApiError::invalid(
                    "Invalid value for field 'resource.instances': ''. At least one instance must be given.",
                ));
            }
            if let Some(bad) = names.iter().find(|n| !is_name(n)) {
                return Err(ApiError::invalid(format!(
                    "Invalid value for field 'resource.instances[].name': '{bad}'. Must be a match of regex '[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?'"
                )));
            }
            if let Some(taken) = names.iter().find(|n| {
                let key = (zone.to_owned(), (*n).clone());
                state.instances.contains_key(&key) || state.creating.contains_key(&key)
            }) {
                return Err(ApiError::new(
                    409,
                    "alreadyExists",
                    format!(
                        "The resource 'projects/{}/zones/{zone}/instances/{taken}' already exists",
                        self.inner.project
                    ),
                ));
            }
            let target = format!("projects/{}/zones/{zone}/instanceGroupManagers/{name}", self.inner.project);
            if state.faults.quota.remove(name) {
                let message = "Quota 'CPUS' exceeded.  Limit: 24.0 in region europe-west3.";
                let op = self.operation(
                    &mut state,
                    Some(zone),
                    "compute.instanceGroupManagers.createInstances",
                    &target,
                    Effect::None,
                    Some(("QUOTA_EXCEEDED", message, 403)),
                );
                return Ok(op);
            }
            if !state.templates.contains_key(&mig.template) {
                return Err(ApiError::new(500, "backendError", format!("no template {}", mig.template)));
            }
            // The MIG creates them later (see `creation`).
            self.start_creations(&mut state, &mig, &names);
            if let Some(m) = state.migs.get_mut(&(zone.to_owned(), name.to_owned())) {
                m.target_size += names.len() as i64;
            }
            self.operation(
                &mut state,
                Some(zone),
                "compute.instanceGroupManagers.createInstances",
                &target,
                Effect::None,
                None,
            )
        };
        Ok(created)
    }

    pub(crate) fn delete_instances(&self, zone: &str, name: &str, body: &Value) -> ApiResult {
        let skip = body["skipInstancesOnValidationError"].as_bool().unwrap_or(false);
        let urls: Vec<String> = body["instances"]
            .as_array()
            .map(|list| list.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let mut deleting = Vec::new();
        let mut cancelled = 0_i64;
        let op = {
            let mut state = self.inner.state.lock();
            self.advance(&mut state);
            self.mig(&state, zone, name)?;
            for url in &urls {
                let path = strip_url(url);
                let segments: Vec<&str> = path.split('/').collect();
                let instance = match segments.as_slice() {
                    ["projects", _, "zones", z, "instances", n] | ["zones", z, "instances", n] if *z == zone => *n,
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "Invalid value for field 'resource.instances[]': '{url}'"
                        )));
                    }
                };
                let key = (zone.to_owned(), instance.to_owned());
                if state.creating.get(&key).is_some_and(|c| c.mig == name) {
                    // Not created yet: the MIG does not create it (and lowers its target size).
                    state.creating.remove(&key);
                    cancelled += 1;
                    continue;
                }
                match state.instances.get_mut(&key) {
                    Some(i) if i.mig == name => {
                        if i.action != "DELETING" {
                            i.status = "STOPPING";
                            i.action = "DELETING";
                            deleting.push(instance.to_owned());
                        }
                    }
                    _ if skip => {}
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "The instance 'projects/{}/zones/{zone}/instances/{instance}' is not a member of the instance group",
                            self.inner.project
                        )));
                    }
                }
            }
            if let Some(m) = state.migs.get_mut(&(zone.to_owned(), name.to_owned())) {
                m.target_size -= deleting.len() as i64 + cancelled;
            }
            let target = format!("projects/{}/zones/{zone}/instanceGroupManagers/{name}", self.inner.project);
            self.operation(
                &mut state,
                Some(zone),
                "compute.instanceGroupManagers.deleteInstances",
                &target,
                Effect::None,
                None,
            )
        };
        let terminate = self.timing().terminate;
        for instance in deleting {
            match self.inner.hosts.power_off(&instance) {
                Ok(()) | Err(HostError::UnknownHost(_)) => {}
                Err(error) => tracing::warn!(instance, %error, "powering off"),
            }
            let zone = zone.to_owned();
            self.after(terminate, move |emulator| emulator.deleted(&zone, &instance));
        }
        Ok(op)
    }

    pub(crate) fn list_managed_instances(&self, zone: &str, name: &str, paging: &Paging) -> ApiResult {
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        self.mig(&state, zone, name)?;
        let project = &self.inner.project;
        let template = self.mig(&state, zone, name)?.template.clone();
        let now = Instant::now();
        state.unlisted_until.retain(|_, until| *until > now);
        let listed = |key: &(String, String)| !state.unlisted_until.contains_key(key);
        let creating = state
            .creating
            .iter()
            .filter(|(key, c)| key.0 == zone && c.mig == name && listed(key))
            .map(|((_, n), c)| self.creating_json(zone, n, &template, c));
        let managed: Vec<Value> = state
            .instances
            .iter()
            .filter(|(key, i)| key.0 == zone && i.mig == name && listed(key))
            .map(|((_, n), i)| {
                json!({
                    "instance": format!("{COMPUTE_URL}projects/{project}/zones/{zone}/instances/{n}"),
                    "id": i.id.to_string(),
                    "name": n,
                    "instanceStatus": i.status,
                    "currentAction": i.action,
                    "version": {"instanceTemplate": format!("{COMPUTE_URL}projects/{project}/global/instanceTemplates/{}", i.template)},
                })
            })
            .chain(creating)
            .collect();
        let (managed, next) = page_of(managed, paging, state.page_size)?;
        let mut list = json!({"managedInstances": managed});
        if let Some(next) = next {
            list["nextPageToken"] = json!(next);
        }
        Ok(list)
    }

    pub(crate) fn set_instance_template(&self, zone: &str, name: &str, body: &Value) -> ApiResult {
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        self.mig(&state, zone, name)?;
        let url = body["instanceTemplate"].as_str().unwrap_or_default();
        let template = match strip_url(url).split('/').collect::<Vec<_>>().as_slice() {
            ["projects", p, "global", "instanceTemplates", t] if *p == self.inner.project => (*t).to_owned(),
            _ => {
                return Err(ApiError::invalid(format!("Invalid value for field 'resource.instanceTemplate': '{url}'")));
            }
        };
        if !state.templates.contains_key(&template) {
            return Err(ApiError::not_found(&format!(
                "projects/{}/global/instanceTemplates/{template}",
                self.inner.project
            )));
        }
        let target = format!("projects/{}/zones/{zone}/instanceGroupManagers/{name}", self.inner.project);
        let effect = Effect::SetTemplate { zone: zone.to_owned(), mig: name.to_owned(), template };
        Ok(self.operation(
            &mut state,
            Some(zone),
            "compute.instanceGroupManagers.setInstanceTemplate",
            &target,
            effect,
            None,
        ))
    }

    pub(crate) fn get_instance(&self, zone: &str, name: &str) -> ApiResult {
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        let project = &self.inner.project;
        let instance = state
            .instances
            .get(&(zone.to_owned(), name.to_owned()))
            .ok_or_else(|| ApiError::not_found(&format!("projects/{project}/zones/{zone}/instances/{name}")))?;
        Ok(json!({
            "kind": "compute#instance",
            "id": instance.id.to_string(),
            "name": name,
            "zone": format!("{COMPUTE_URL}projects/{project}/zones/{zone}"),
            "machineType": format!("{COMPUTE_URL}projects/{project}/zones/{zone}/machineTypes/n2d-standard-4"),
            "status": instance.status,
            "labels": instance.labels,
            "disks": [{
                "kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": "READ_WRITE", "boot": true,
                "autoDelete": true, "index": 0, "deviceName": "persistent-disk-0", "interface": "SCSI",
                "source": format!("{COMPUTE_URL}projects/{project}/zones/{zone}/disks/{name}"),
            }],
            "metadata": {"kind": "compute#metadata", "items": [
                {"key": "created-by", "value": format!("projects/{}/zones/{zone}/instanceGroupManagers/{}", self.inner.project_number, instance.mig)},
                {"key": "instance-template", "value": format!("projects/{}/global/instanceTemplates/{}", self.inner.project_number, instance.template)},
            ]},
            "selfLink": format!("{COMPUTE_URL}projects/{project}/zones/{zone}/instances/{name}"),
        }))
    }

    pub(crate) fn get_disk(&self, zone: &str, name: &str) -> ApiResult {
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        let project = &self.inner.project;
        let instance = state
            .instances
            .get(&(zone.to_owned(), name.to_owned()))
            .ok_or_else(|| ApiError::not_found(&format!("projects/{project}/zones/{zone}/disks/{name}")))?;
        Ok(json!({
            "kind": "compute#disk",
            "id": (instance.id + 1).to_string(),
            "name": name,
            "zone": format!("{COMPUTE_URL}projects/{project}/zones/{zone}"),
            "sizeGb": "10",
            "status": "READY",
            "sourceImage": format!("{COMPUTE_URL}{}", instance.image),
            "users": [format!("{COMPUTE_URL}projects/{project}/zones/{zone}/instances/{name}")],
            "selfLink": format!("{COMPUTE_URL}projects/{project}/zones/{zone}/disks/{name}"),
        }))
    }

    pub(crate) fn get_template(&self, name: &str) -> ApiResult {
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        state.templates.get(name).cloned().ok_or_else(|| {
            ApiError::not_found(&format!("projects/{}/global/instanceTemplates/{name}", self.inner.project))
        })
    }

    /// Lists templates; `filter` may be empty or `name eq REGEX` (RE2, the whole name), as Compute's list filters.
    pub(crate) fn list_templates(&self, filter: Option<&str>, paging: &Paging) -> ApiResult {
        let pattern = match filter.map(str::trim).filter(|f| !f.is_empty()) {
            None => None,
            Some(filter) => {
                let Some(expression) = filter.strip_prefix("name eq ") else {
                    return Err(ApiError::invalid(format!(
                        "Invalid value for field 'filter': '{filter}'. The emulator supports 'name eq REGEX' only."
                    )));
                };
                let expression = expression.trim().trim_matches('"').trim_matches('\'');
                Some(
                    regex::Regex::new(&format!("^(?:{expression})$"))
                        .map_err(|e| ApiError::invalid(format!("Invalid value for field 'filter': {e}")))?,
                )
            }
        };
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        let items: Vec<Value> = state
            .templates
            .iter()
            .filter(|(name, _)| pattern.as_ref().is_none_or(|p| p.is_match(name)))
            .map(|(_, t)| t.clone())
            .collect();
        let (items, next) = page_of(items, paging, state.page_size)?;
        let mut list = json!({
            "kind": "compute#instanceTemplateList",
            "id": format!("projects/{}/global/instanceTemplates", self.inner.project),
            "items": items,
            "selfLink": format!("{COMPUTE_URL}projects/{}/global/instanceTemplates", self.inner.project),
        });
        if let Some(next) = next {
            list["nextPageToken"] = json!(next);
        }
        Ok(list)
    }

    pub(crate) fn insert_template(&self, body: &Value) -> ApiResult {
        let name = body["name"].as_str().unwrap_or_default().to_owned();
        if !is_name(&name) {
            return Err(ApiError::invalid(format!(
                "Invalid value for field 'resource.name': '{name}'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
            )));
        }
        let boot_image = body["properties"]["disks"]
            .as_array()
            .and_then(|disks| disks.iter().find(|d| d["boot"] == json!(true)))
            .and_then(|d| d["initializeParams"]["sourceImage"].as_str());
        if boot_image.is_none_or(|i| i.is_empty()) {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.properties.disks[0].initializeParams.sourceImage': ''. A boot disk with a source image is required.",
            ));
        }
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        let path = format!("projects/{}/global/instanceTemplates/{name}", self.inner.project);
        if state.templates.contains_key(&name) || state.reserved_templates.contains(&name) {
            return Err(ApiError::new(409, "alreadyExists", format!("The resource '{path}' already exists")));
        }
        state.reserved_templates.insert(name.clone());
        let effect = Effect::InsertTemplate(name, body.clone());
        Ok(self.operation(&mut state, None, "insert", &path, effect, None))
    }

    pub(crate) fn delete_template(&self, name: &str) -> ApiResult {
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        let path = format!("projects/{}/global/instanceTemplates/{name}", self.inner.project);
        if !state.templates.contains_key(name) {
            return Err(ApiError::not_found(&path));
        }
        if let Some(user) = self.template_user(&state, name) {
            return Err(ApiError::new(
                400,
                "resourceInUseByAnotherResource",
                format!("The instance_template resource '{path}' is already being used by '{user}'"),
            ));
        }
        Ok(self.operation(&mut state, None, "delete", &path, Effect::DeleteTemplate(name.to_owned()), None))
    }

    /// An operation; `zone` `None` for a global one.
    pub(crate) fn get_operation(&self, zone: Option<&str>, name: &str) -> ApiResult {
        let mut state = self.inner.state.lock();
        self.advance(&mut state);
        let scope = match zone {
            Some(zone) => format!("zones/{zone}"),
            None => "global".to_owned(),
        };
        let op = state
            .operations
            .get(name)
            .filter(|op| match zone {
                Some(zone) => op.json["zone"].as_str().is_some_and(|z| z.ends_with(&format!("/zones/{zone}"))),
                None => op.json.get("zone").is_none(),
            })
            .ok_or_else(|| {
                ApiError::not_found(&format!("projects/{}/{scope}/operations/{name}", self.inner.project))
            })?;
        Ok(op.json.clone())
    }

    /// `wait`: the operation once `DONE`, or as it stands after at most 2 minutes (Compute's limit).
    pub(crate) async fn wait_operation(&self, zone: Option<&str>, name: &str) -> ApiResult {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let op = self.get_operation(zone, name)?;
            if op["status"] == json!("DONE") || Instant::now() >= deadline {
                return Ok(op);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// An access token for a refresh-token grant with the emulator's refresh token.
    pub(crate) fn issue_token(&self, refresh_token: Option<&str>) -> Result<Value, (u16, Value)> {
        if refresh_token.is_some_and(|t| t != REFRESH_TOKEN) {
            return Err((400, json!({"error": "invalid_grant", "error_description": "Bad Request"})));
        }
        let mut state = self.inner.state.lock();
        let token = format!("ya29.emulator-{}", Self::next_id(&mut state));
        state.tokens.insert(token.clone());
        Ok(
            json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer", "scope": "https://www.googleapis.com/auth/cloud-platform"}),
        )
    }

    fn token_known(&self, token: &str) -> bool {
        self.inner.state.lock().tokens.contains(token)
    }

    /// Records a request's method and permissions, then fires the fault that applies, if any.
    fn admit(&self, method: &str, permissions: &[&str]) -> Result<(), ApiError> {
        let mut state = self.inner.state.lock();
        *state.calls.entry(method.to_owned()).or_insert(0) += 1;
        state.permissions.extend(permissions.iter().map(|p| (*p).to_owned()));
        if let Some(denied) = permissions.iter().find(|p| state.faults.forbidden.contains(**p)) {
            return Err(ApiError::new(
                403,
                "forbidden",
                format!("Required '{denied}' permission for 'projects/{}'", self.inner.project),
            ));
        }
        let Some(index) = state.faults.next.iter().position(|(_, times)| *times > 0) else { return Ok(()) };
        let (fault, times) = &mut state.faults.next[index];
        *times -= 1;
        let fault = fault.clone();
        state.faults.next.retain(|(_, times)| *times > 0);
        Err(match fault {
            GcpFault::Throttled { retry_after_seconds } => ApiError {
                retry_after: Some(retry_after_seconds),
                ..ApiError::new(429, "rateLimitExceeded", "Rate Limit Exceeded")
            },
            GcpFault::RateLimited403 => ApiError::new(
                403,
                "rateLimitExceeded",
                format!(
                    "Quota exceeded for quota group 'ReadGroup' and limit 'Read requests per user per 100 seconds' of service 'compute.googleapis.com' for consumer 'project_number:{}'.",
                    self.inner.project_number
                ),
            ),
            GcpFault::ServerError { status } => ApiError::new(
                status,
                "backendError",
                "Internal error. Please try again or contact Google Support. (Code: '-1234567890')",
            ),
        })
    }
}
