//! The clouds of the dev cluster: the simulated cloud (scaling groups of instances with faults, over HTTP under
//! `/_dev/cloud`: the API the `cloud` crate's `SimulatedProvider` calls, and dev controls), and emulators of the
//! real clouds' APIs the product's providers call, Azure virtual machine scale sets ([`azure`], feature `azure`)
//! and GCP managed instance groups ([`gcp`]). The emulators refuse what the published API definition refuses
//! (`specs/`: a misspelt field, a missing parameter, a wrong api-version) and model what the real service does
//! that a client must survive (asynchronous creation, per-instance errors, throttling, paging, lists that lag a
//! create). An instance is a simulated host (`cluster-simulation`) whose kubelet registers its Node in the in-memory
//! API server.
//!
//! # The simulated cloud's guarantees
//! - A created instance is `Creating` for the provisioning time, then `Ready`: its host (named after the instance,
//!   running the group's image at creation) boots, its kubelet registers the Node (with `spec.providerID`, the
//!   role's labels and taint, the managed label) after the join time, NotReady at first, and the Node is Ready
//!   once the host's first boot completes, the ready time later. The kubelets of the dev cluster then run it like
//!   any other node (an agent can drive its host).
//! - A deleted instance is `Terminating` (its host is down, so its Node turns NotReady) for the termination time,
//!   then `Terminated`: its Node is deleted (as the cloud node lifecycle controller does) and its host retired.
//!   Terminated instances stay known (state, image, group) for the cluster's life; unknown ones are 404.
//! - Stopping and starting go `Ready → Stopping → Stopped → Creating → Ready`, the host down while not Ready.
//! - Every API call is counted by operation, then delayed by the slowest `slowSeconds` that applies, then fails if
//!   an injected failure applies (the cloud's, the group's, the instance's, then the operation's own, in that
//!   order; a failure with `times` fires that often, one without fires until cleared).
//! - No lock is held across an API server write or an await.

#[cfg(feature = "azure")]
pub mod azure;
mod batch;
pub mod gcp;
pub mod http;
pub mod schema;

use cluster_simulation::{dev_routes, hosts, node_manifest, timing};
use memory_apiserver as apiserver;

use crate::apiserver::object::generated_suffix;
use crate::apiserver::store::Store;
use crate::hosts::{HostError, Hosts};
use crate::timing::Timing;
use cloud::simulated::wire::{self, ErrorBody, ErrorCode};
use cloud::{ClusterTag, GroupRole, InstanceState, Operation, ProviderId, SimulatedInstance};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, PostParams};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The tag key that marks the cluster's groups (Constellation's).
pub const CLUSTER_TAG_KEY: &str = "constellation-uid";

/// A group to create at start: `NAME:SIZE[:control-plane|worker]` on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    /// The group's name (an RFC 1035 label; its instances are `NAME-xxxxx`).
    pub name: String,
    /// The role of its nodes.
    pub role: GroupRole,
    /// Instances at start.
    pub size: u32,
    /// The most instances it may have (at start: `size` plus room for surge instances).
    pub max: u32,
}

impl GroupSpec {
    /// A group of `size` instances with room for 3 surge instances.
    pub fn new(name: &str, role: GroupRole, size: u32) -> GroupSpec {
        GroupSpec { name: name.to_owned(), role, size, max: size + 3 }
    }

    /// Parses one `NAME:SIZE[:control-plane|worker]` (the role defaults to worker).
    pub fn parse(item: &str) -> Result<GroupSpec, String> {
        let parts: Vec<&str> = item.trim().split(':').collect();
        let (name, size, role) = match parts.as_slice() {
            [name, size] => (*name, *size, GroupRole::Worker),
            [name, size, "control-plane"] => (*name, *size, GroupRole::ControlPlane),
            [name, size, "worker"] => (*name, *size, GroupRole::Worker),
            _ => return Err(format!("{item:?} is not NAME:SIZE[:control-plane|worker]")),
        };
        // Instance names are NAME-xxxxx and must stay RFC 1035 labels.
        if !valid_name(name) || name.len() > 57 {
            return Err(format!("group name {name:?} is not a lowercase name of at most 57 characters"));
        }
        let size: u32 = size.parse().map_err(|_| format!("{item:?}: the size {size:?} is not a number"))?;
        Ok(GroupSpec::new(name, role, size))
    }

    /// Parses a comma-separated list of [`GroupSpec::parse`] items with distinct names.
    pub fn parse_list(text: &str) -> Result<Vec<GroupSpec>, String> {
        let mut groups: Vec<GroupSpec> = Vec::new();
        for item in text.split(',').filter(|i| !i.trim().is_empty()) {
            let group = GroupSpec::parse(item)?;
            if groups.iter().any(|g| g.name == group.name) {
                return Err(format!("group {:?} is given twice", group.name));
            }
            groups.push(group);
        }
        Ok(groups)
    }
}

/// An RFC 1035 label.
fn valid_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.ends_with('-')
}

/// A failure to inject: `{"code": "QuotaExceeded", "message": "...", "times": 2, "retryAfterSeconds": 1.5}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InjectedFailure {
    /// The kind of error (its HTTP status follows).
    pub code: ErrorCode,
    /// The message; a default one names the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How many calls fail; every call until cleared without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u32>,
    /// For `Throttled`: the `retryAfterSeconds` of the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<f64>,
}

impl InjectedFailure {
    fn check(&self) -> Result<(), String> {
        match self.retry_after_seconds {
            Some(s) if !(s.is_finite() && s >= 0.0) => Err(format!("retryAfterSeconds {s} is not a duration")),
            Some(_) if self.code != ErrorCode::Throttled => Err("retryAfterSeconds is for Throttled only".to_owned()),
            _ => Ok(()),
        }
    }
}

/// Faults of the whole API (`PUT /_dev/cloud/faults`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudFaults {
    /// Every API call fails so (e.g. `{"code": "Throttled", "retryAfterSeconds": 2, "times": 3}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<InjectedFailure>,
    /// Every API call takes this long.
    #[serde(default, with = "crate::hosts::seconds", skip_serializing_if = "Option::is_none")]
    pub slow_seconds: Option<Duration>,
}

/// Faults and durations of one group (`PUT /_dev/cloud/groups/{group}/faults`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupFaults {
    /// Every call on the group or its instances fails so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<InjectedFailure>,
    /// Creating an instance fails so (e.g. `{"code": "QuotaExceeded"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_failure: Option<InjectedFailure>,
    /// Reading or setting the group's image, or reading its instances' images, fails so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_failure: Option<InjectedFailure>,
    /// Instances created while this is set run, but their nodes never register.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub never_joins: bool,
    /// Instances created while this is set end `Failed` instead of `Ready`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fails_to_boot: bool,
    /// Creates answer with a token, as capacity-based groups (AWS, Azure) do; the instance is named once it
    /// runs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_returns_token: bool,
    /// Calls on the group or its instances take this long.
    #[serde(default, with = "crate::hosts::seconds", skip_serializing_if = "Option::is_none")]
    pub slow_seconds: Option<Duration>,
    /// Creates in the group are answered this long after the instance was made (a slow answer, other calls not
    /// slowed).
    #[serde(default, with = "crate::hosts::seconds", skip_serializing_if = "Option::is_none")]
    pub create_seconds: Option<Duration>,
    /// This group's provisioning time.
    #[serde(default, with = "crate::hosts::seconds", skip_serializing_if = "Option::is_none")]
    pub provision_seconds: Option<Duration>,
    /// This group's join time.
    #[serde(default, with = "crate::hosts::seconds", skip_serializing_if = "Option::is_none")]
    pub join_seconds: Option<Duration>,
    /// This group's ready time.
    #[serde(default, with = "crate::hosts::seconds", skip_serializing_if = "Option::is_none")]
    pub ready_seconds: Option<Duration>,
    /// This group's termination time.
    #[serde(default, with = "crate::hosts::seconds", skip_serializing_if = "Option::is_none")]
    pub terminate_seconds: Option<Duration>,
    /// How long an image change takes to apply (`InProgress` until then); at once without it.
    #[serde(default, with = "crate::hosts::seconds", skip_serializing_if = "Option::is_none")]
    pub image_update_seconds: Option<Duration>,
}

/// Faults of one instance (`PUT /_dev/cloud/instances/{name}/faults`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceFaults {
    /// Every call on the instance fails so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<InjectedFailure>,
    /// Deleting it fails so (e.g. `{"code": "Internal", "times": 2}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_failure: Option<InjectedFailure>,
    /// Reading its image fails so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_failure: Option<InjectedFailure>,
    /// Its node never registers (if it has not yet).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub never_joins: bool,
    /// Calls on it take this long.
    #[serde(default, with = "crate::hosts::seconds", skip_serializing_if = "Option::is_none")]
    pub slow_seconds: Option<Duration>,
}

/// A dev control request that could not be carried out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControlError {
    /// No such group or instance.
    #[error("{0} not found")]
    NotFound(String),
    /// A bad fault or request.
    #[error("{0}")]
    Invalid(String),
}

struct Group {
    role: GroupRole,
    image: String,
    max: u32,
    faults: GroupFaults,
    /// An image change in progress, applied at the instant.
    pending_image: Option<(String, Instant)>,
}

struct Instance {
    group: String,
    image: String,
    state: InstanceState,
    faults: InstanceFaults,
    /// Whether its Node was registered.
    registered: bool,
    /// It ends `Failed` when provisioned.
    fails_to_boot: bool,
    /// Bumped on every state change that starts a timer: a timer of an older epoch does nothing.
    epoch: u64,
}

/// An instance [`SimulatedCloud::create_locked`] made.
struct Made {
    name: String,
    /// Its creation token, for a group whose creates answer with one.
    token: Option<String>,
    provision: Duration,
}

/// What [`SimulatedCloud::delete_locked`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deleted {
    /// Terminated or unknown: nothing.
    AlreadyGone,
    /// Being deleted already.
    Terminating,
    /// Deleting it now: its epoch and termination time.
    Started { epoch: u64, terminate: Duration },
}

struct Creation {
    group: String,
    instance: String,
    named_at: Instant,
}

#[derive(Default)]
struct State {
    groups: BTreeMap<String, Group>,
    instances: BTreeMap<String, Instance>,
    creations: BTreeMap<String, Creation>,
    faults: CloudFaults,
    calls: BTreeMap<Operation, u64>,
    /// Instances asked for by create calls, single and batch (refused ones included, as calls are counted).
    asked: u64,
}

struct Inner {
    state: Mutex<State>,
    store: Store,
    hosts: Hosts,
    timing: Timing,
    tag: ClusterTag,
    shutdown: CancellationToken,
}

/// The simulated cloud of one dev cluster (a cloneable handle).
#[derive(Clone)]
pub struct SimulatedCloud {
    inner: Arc<Inner>,
}

/// What an API call touches, for faults and delays.
#[derive(Clone, Copy)]
enum Target<'a> {
    Cloud,
    Group(&'a str),
    Instance(&'a str),
}

/// A fired failure as the API's answer.
fn fire(failure: &mut Option<InjectedFailure>, default_message: &str) -> Option<ErrorBody> {
    let current = failure.as_mut()?;
    match &mut current.times {
        Some(0) => {
            *failure = None;
            return None;
        }
        Some(n) => *n -= 1,
        None => {}
    }
    let body = ErrorBody {
        code: current.code,
        message: current.message.clone().unwrap_or_else(|| default_message.to_owned()),
        retry_after_seconds: current.retry_after_seconds,
    };
    if current.times == Some(0) {
        *failure = None;
    }
    Some(body)
}

fn not_found(what: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::NotFound, what)
}

fn invalid(what: impl Into<String>) -> ErrorBody {
    ErrorBody::new(ErrorCode::Invalid, what)
}

impl SimulatedCloud {
    /// A cloud without groups, whose instances' hosts are in `hosts` and whose Nodes are registered in `store`.
    /// Its groups are tagged `constellation-uid: {cluster_uid}`.
    pub fn new(store: &Store, hosts: &Hosts, timing: &Timing, cluster_uid: &str) -> SimulatedCloud {
        SimulatedCloud {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                store: store.clone(),
                hosts: hosts.clone(),
                timing: timing.clone(),
                tag: ClusterTag { key: CLUSTER_TAG_KEY.to_owned(), value: cluster_uid.to_owned() },
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// The tag of the cluster's groups.
    pub fn cluster_tag(&self) -> &ClusterTag {
        &self.inner.tag
    }

    /// Adds a group tagged with the cluster's tag, whose new instances run `image`.
    pub fn add_group(&self, spec: &GroupSpec, image: &str) -> Result<(), ControlError> {
        if !valid_name(&spec.name) {
            return Err(ControlError::Invalid(format!("group name {:?} is not an RFC 1035 label", spec.name)));
        }
        let mut state = self.inner.state.lock();
        if state.groups.contains_key(&spec.name) {
            return Err(ControlError::Invalid(format!("group {:?} exists", spec.name)));
        }
        let group = Group {
            role: spec.role,
            image: image.to_owned(),
            max: spec.max,
            faults: GroupFaults::default(),
            pending_image: None,
        };
        state.groups.insert(spec.name.clone(), group);
        Ok(())
    }

    /// Adds a running instance to `group` whose Node is registered now and whose host is up (the instances a
    /// cluster starts with). Returns its name.
    pub fn add_running_instance(&self, group: &str) -> Result<String, ControlError> {
        let (name, image, role) = {
            let mut state = self.inner.state.lock();
            let g = state.groups.get(group).ok_or_else(|| ControlError::NotFound(format!("group {group}")))?;
            let (image, role) = (g.image.clone(), g.role);
            let name = unused_name(&state, group);
            state.instances.insert(
                name.clone(),
                Instance {
                    group: group.to_owned(),
                    image: image.clone(),
                    state: InstanceState::Ready,
                    faults: InstanceFaults::default(),
                    registered: true,
                    fails_to_boot: false,
                    epoch: 0,
                },
            );
            (name, image, role)
        };
        self.inner.hosts.add(&name, &image).map_err(|e| ControlError::Invalid(e.to_string()))?;
        self.register_node(group, &name, role).map_err(|e| ControlError::Invalid(e.message))?;
        Ok(name)
    }

    /// The Node of an instance, as its kubelet registers it.
    fn register_node(&self, group: &str, name: &str, role: GroupRole) -> Result<(), ErrorBody> {
        let mut node = crate::node_manifest::node_manifest(name, role == GroupRole::ControlPlane);
        let provider_id = ProviderId::Simulated(SimulatedInstance { group: group.to_owned(), name: name.to_owned() });
        node.spec.get_or_insert_default().provider_id = Some(provider_id.to_string());
        let store = self.inner.store.with_identity("dev/kubelet");
        match store.api::<Node>().create(None, &node, &PostParams::default()) {
            Ok(_) => Ok(()),
            Err(error) => Err(ErrorBody::new(ErrorCode::Internal, format!("registering node {name}: {error}"))),
        }
    }

    /// Counts the call, waits for the slowest delay that applies, then fails with the first injected failure that
    /// applies (see the module docs).
    async fn begin(&self, operation: Operation, target: Target<'_>) -> Result<(), ErrorBody> {
        let delay = {
            let mut state = self.inner.state.lock();
            *state.calls.entry(operation).or_insert(0) += 1;
            let (group, instance) = resolve(&state, target);
            [
                state.faults.slow_seconds,
                group.and_then(|g| state.groups.get(&g)).and_then(|g| g.faults.slow_seconds),
                instance.and_then(|i| state.instances.get(i)).and_then(|i| i.faults.slow_seconds),
            ]
            .into_iter()
            .flatten()
            .max()
        };
        if let Some(delay) = delay {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.inner.shutdown.cancelled() => return Err(ErrorBody::new(ErrorCode::Internal, "shutting down")),
            }
        }
        let mut state = self.inner.state.lock();
        let (group, instance) = resolve(&state, target);
        let state = &mut *state;
        if let Some(error) = fire(&mut state.faults.failure, "injected failure of the cloud API") {
            return Err(error);
        }
        if let Some(group) = group.and_then(|g| state.groups.get_mut(&g))
            && let Some(error) = fire(&mut group.faults.failure, "injected failure of the group")
        {
            return Err(error);
        }
        if let Some(instance) = instance.and_then(|i| state.instances.get_mut(i))
            && let Some(error) = fire(&mut instance.faults.failure, "injected failure of the instance")
        {
            return Err(error);
        }
        Ok(())
    }

    fn durations(&self, group: &str) -> (Duration, Duration, Duration, Duration) {
        let state = self.inner.state.lock();
        let faults = state.groups.get(group).map(|g| g.faults.clone()).unwrap_or_default();
        let timing = &self.inner.timing;
        (
            faults.provision_seconds.unwrap_or(timing.instance_provision),
            faults.join_seconds.unwrap_or(timing.node_join),
            faults.ready_seconds.unwrap_or(timing.node_ready),
            faults.terminate_seconds.unwrap_or(timing.instance_terminate),
        )
    }

    /// Runs `step` on instance `name` after `delay`, unless its epoch moved on meanwhile.
    fn after(&self, delay: Duration, name: &str, epoch: u64, step: fn(&SimulatedCloud, &str)) {
        let cloud = self.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = cloud.inner.shutdown.cancelled() => return,
            }
            let current = cloud.inner.state.lock().instances.get(&name).map(|i| i.epoch);
            if current == Some(epoch) {
                step(&cloud, &name);
            }
        });
    }

    /// `Creating` → `Ready` (host booting, registration due) or `Failed`.
    fn provisioned(&self, name: &str) {
        let (group, image, fails) = {
            let mut state = self.inner.state.lock();
            let Some(instance) = state.instances.get_mut(name) else { return };
            let fails = instance.fails_to_boot;
            instance.state = if fails { InstanceState::Failed } else { InstanceState::Ready };
            (instance.group.clone(), instance.image.clone(), fails)
        };
        if fails {
            return;
        }
        let (_, join, ready, _) = self.durations(&group);
        if self.inner.hosts.state(name).is_some() {
            // A started instance: its host boots again.
            let _ = self.inner.hosts.power_on(name);
        } else if let Err(error) = self.inner.hosts.add_booting(name, &image, join + ready) {
            tracing::warn!(instance = name, %error, "the simulated cloud could not add a host");
        }
        let epoch = self.inner.state.lock().instances.get(name).map_or(0, |i| i.epoch);
        self.after(join, name, epoch, SimulatedCloud::joined);
    }

    /// The kubelet registers the Node, unless the instance never joins.
    fn joined(&self, name: &str) {
        let (group, role) = {
            let mut state = self.inner.state.lock();
            let Some(instance) = state.instances.get(name) else { return };
            let group = instance.group.clone();
            let Some(role) = state.groups.get(&group).map(|g| g.role) else { return };
            let Some(instance) = state.instances.get_mut(name) else { return };
            if instance.faults.never_joins || instance.registered || instance.state != InstanceState::Ready {
                return;
            }
            instance.registered = true;
            (group, role)
        };
        if let Err(error) = self.register_node(&group, name, role) {
            tracing::warn!(instance = name, message = error.message, "the simulated kubelet could not register");
        }
    }

    /// `Terminating` → `Terminated`: the Node is deleted and the host retired.
    fn terminated(&self, name: &str) {
        if let Some(instance) = self.inner.state.lock().instances.get_mut(name) {
            instance.state = InstanceState::Terminated;
        }
        let store = self.inner.store.with_identity("dev/cloud-node-lifecycle");
        match store.api::<Node>().delete(None, name, &DeleteParams::default()) {
            Ok(_) => {}
            Err(error) if error.code == 404 => {}
            Err(error) => tracing::warn!(instance = name, %error, "the simulated cloud could not delete a node"),
        }
        self.inner.hosts.retire(name);
    }

    /// `Stopping` → `Stopped`.
    fn stopped(&self, name: &str) {
        if let Some(instance) = self.inner.state.lock().instances.get_mut(name) {
            instance.state = InstanceState::Stopped;
        }
    }

    fn instance_wire(name: &str, instance: &Instance) -> wire::Instance {
        let id = ProviderId::Simulated(SimulatedInstance { group: instance.group.clone(), name: name.to_owned() });
        wire::Instance {
            name: name.to_owned(),
            group: instance.group.clone(),
            provider_id: id.to_string(),
            image: instance.image.clone(),
            state: instance.state,
        }
    }

    fn group_wire(&self, state: &State, name: &str, group: &Group) -> wire::Group {
        let instances = state
            .instances
            .iter()
            .filter(|(_, i)| i.group == name && i.state != InstanceState::Terminated)
            .map(|(n, _)| n.clone())
            .collect();
        wire::Group {
            name: name.to_owned(),
            role: group.role,
            image: group.image.clone(),
            min: 0,
            max: group.max,
            tags: BTreeMap::from([(self.inner.tag.key.clone(), self.inner.tag.value.clone())]),
            instances,
        }
    }

    // The API (one method per route of `cloud::simulated::wire`).

    /// The cluster's groups with the tag `key=value`.
    pub async fn list_groups(&self, key: &str, value: &str) -> Result<wire::GroupList, ErrorBody> {
        self.begin(Operation::ListGroups, Target::Cloud).await?;
        let state = self.inner.state.lock();
        let tagged = key == self.inner.tag.key && value == self.inner.tag.value;
        let groups =
            state.groups.iter().filter(|_| tagged).map(|(name, group)| self.group_wire(&state, name, group)).collect();
        Ok(wire::GroupList { groups })
    }

    /// A group (its image among its facts).
    pub async fn group(&self, name: &str) -> Result<wire::Group, ErrorBody> {
        self.begin(Operation::GroupImage, Target::Group(name)).await?;
        let mut state = self.inner.state.lock();
        let group = state.groups.get_mut(name).ok_or_else(|| not_found(format!("group {name}")))?;
        if let Some(error) = fire(&mut group.faults.image_failure, "injected failure of the image lookup") {
            return Err(error);
        }
        apply_due_image(group);
        let group = state.groups.get(name).ok_or_else(|| not_found(format!("group {name}")))?;
        Ok(self.group_wire(&state, name, group))
    }

    /// Sets a group's image (see [`GroupFaults::image_update_seconds`]).
    pub async fn set_group_image(&self, name: &str, image: &str) -> Result<wire::SetImageAnswer, ErrorBody> {
        self.begin(Operation::SetGroupImage, Target::Group(name)).await?;
        if let Err(HostError::InvalidImage { reason, .. }) = crate::hosts::check_image(image) {
            return Err(invalid(format!("image {image:?}: {reason}")));
        }
        let mut state = self.inner.state.lock();
        let group = state.groups.get_mut(name).ok_or_else(|| not_found(format!("group {name}")))?;
        if let Some(error) = fire(&mut group.faults.image_failure, "injected failure of the image update") {
            return Err(error);
        }
        apply_due_image(group);
        if group.image == image {
            group.pending_image = None;
            return Ok(wire::SetImageAnswer { applied: true });
        }
        match (&group.pending_image, group.faults.image_update_seconds) {
            (Some((pending, _)), _) if pending == image => {}
            (_, Some(delay)) if !delay.is_zero() => {
                group.pending_image = Some((image.to_owned(), Instant::now() + delay))
            }
            _ => {
                group.image = image.to_owned();
                group.pending_image = None;
            }
        }
        Ok(wire::SetImageAnswer { applied: group.image == image })
    }

    /// Adds an instance to a group (see [`GroupFaults::create_returns_token`]).
    pub async fn create_instance(&self, group: &str) -> Result<wire::CreateAnswer, ErrorBody> {
        self.inner.state.lock().asked += 1;
        self.begin(Operation::CreateInstance, Target::Group(group)).await?;
        let made = {
            let mut state = self.inner.state.lock();
            if !state.groups.contains_key(group) {
                return Err(not_found(format!("group {group}")));
            }
            self.create_locked(&mut state, group)?
        };
        self.after(made.provision, &made.name, 0, SimulatedCloud::provisioned);
        self.answer_creates_late(group).await?;
        let state = self.inner.state.lock();
        Ok(SimulatedCloud::create_answer(&state, made))
    }

    /// Makes one instance of `group` (a known group) under the lock: the group's create failure, image and size
    /// limit apply. Its provisioning timer is the caller's to start, once the lock is released.
    fn create_locked(&self, state: &mut State, group: &str) -> Result<Made, ErrorBody> {
        let g = state.groups.get_mut(group).ok_or_else(|| not_found(format!("group {group}")))?;
        if let Some(error) = fire(&mut g.faults.create_failure, "injected failure of the create: quota exceeded") {
            return Err(error);
        }
        apply_due_image(g);
        let (image, max, returns_token) = (g.image.clone(), g.max, g.faults.create_returns_token);
        let (never_joins, fails_to_boot) = (g.faults.never_joins, g.faults.fails_to_boot);
        let provision = g.faults.provision_seconds.unwrap_or(self.inner.timing.instance_provision);
        let alive =
            state.instances.values().filter(|i| i.group == group && i.state != InstanceState::Terminated).count();
        if alive >= max as usize {
            return Err(invalid(format!("group {group} is at its maximum size {max}")));
        }
        let name = unused_name(state, group);
        state.instances.insert(
            name.clone(),
            Instance {
                group: group.to_owned(),
                image,
                state: InstanceState::Creating,
                faults: InstanceFaults { never_joins, ..InstanceFaults::default() },
                registered: false,
                fails_to_boot,
                epoch: 0,
            },
        );
        let token = returns_token.then(|| {
            let token = crate::apiserver::object::new_uid();
            let named_at = Instant::now() + provision / 2;
            state
                .creations
                .insert(token.clone(), Creation { group: group.to_owned(), instance: name.clone(), named_at });
            token
        });
        Ok(Made { name, token, provision })
    }

    /// Waits the group's `createSeconds` before a create is answered (the instances exist already).
    async fn answer_creates_late(&self, group: &str) -> Result<(), ErrorBody> {
        let delay = self.inner.state.lock().groups.get(group).and_then(|g| g.faults.create_seconds);
        if let Some(delay) = delay {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.inner.shutdown.cancelled() => return Err(ErrorBody::new(ErrorCode::Internal, "shutting down")),
            }
        }
        Ok(())
    }

    /// The answer for an instance made: its token, or the instance as it is now.
    fn create_answer(state: &State, made: Made) -> wire::CreateAnswer {
        match made.token {
            Some(token) => wire::CreateAnswer { instance: None, token: Some(token) },
            None => wire::CreateAnswer {
                instance: state.instances.get(&made.name).map(|i| SimulatedCloud::instance_wire(&made.name, i)),
                token: None,
            },
        }
    }

    /// Every instance of a group, in every state (terminated ones stay listed, as the cloud keeps them known); an
    /// instance is listed from its creation on, so nothing is `unlisted`.
    pub async fn group_instances(&self, group: &str) -> Result<wire::InstanceList, ErrorBody> {
        self.begin(Operation::GroupInstances, Target::Group(group)).await?;
        let state = self.inner.state.lock();
        if !state.groups.contains_key(group) {
            return Err(not_found(format!("group {group}")));
        }
        let instances = state
            .instances
            .iter()
            .filter(|(_, i)| i.group == group)
            .map(|(name, i)| SimulatedCloud::instance_wire(name, i))
            .collect();
        Ok(wire::InstanceList { instances, unlisted: 0 })
    }

    /// The instance of a pending creation, once named.
    pub async fn creation(&self, group: &str, token: &str) -> Result<wire::CreateAnswer, ErrorBody> {
        self.begin(Operation::CreatedInstance, Target::Group(group)).await?;
        let state = self.inner.state.lock();
        let creation = state
            .creations
            .get(token)
            .filter(|c| c.group == group)
            .ok_or_else(|| invalid(format!("no creation {token:?} in group {group}")))?;
        let instance = (Instant::now() >= creation.named_at)
            .then(|| {
                state.instances.get(&creation.instance).map(|i| SimulatedCloud::instance_wire(&creation.instance, i))
            })
            .flatten();
        Ok(wire::CreateAnswer { instance, token: None })
    }

    /// Deletes an instance of a group.
    pub async fn delete_instance(&self, group: &str, name: &str) -> Result<wire::DeleteAnswer, ErrorBody> {
        self.begin(Operation::DeleteInstance, Target::Instance(name)).await?;
        let deleted = {
            let mut state = self.inner.state.lock();
            if !state.groups.contains_key(group) {
                return Err(not_found(format!("group {group}")));
            }
            self.delete_locked(&mut state, group, name, false)?
        };
        Ok(self.deleted(name, deleted))
    }

    /// Starts deleting instance `name` of `group` (a known group) under the lock; `Some((epoch, termination
    /// time))` when it was started now. The instance's own failure fires too with `instance_failure` (a batch: the
    /// call's start fired only the cloud's and the group's).
    fn delete_locked(
        &self,
        state: &mut State,
        group: &str,
        name: &str,
        instance_failure: bool,
    ) -> Result<Deleted, ErrorBody> {
        let terminate = state
            .groups
            .get(group)
            .and_then(|g| g.faults.terminate_seconds)
            .unwrap_or(self.inner.timing.instance_terminate);
        let Some(instance) = state.instances.get_mut(name) else { return Ok(Deleted::AlreadyGone) };
        if instance.group != group {
            return Err(invalid(format!("instance {name} belongs to group {}, not {group}", instance.group)));
        }
        if instance_failure && let Some(error) = fire(&mut instance.faults.failure, "injected failure of the instance")
        {
            return Err(error);
        }
        if let Some(error) = fire(&mut instance.faults.delete_failure, "injected failure of the delete") {
            return Err(error);
        }
        match instance.state {
            InstanceState::Terminated => return Ok(Deleted::AlreadyGone),
            InstanceState::Terminating => return Ok(Deleted::Terminating),
            _ => {}
        }
        instance.state = InstanceState::Terminating;
        instance.epoch += 1;
        Ok(Deleted::Started { epoch: instance.epoch, terminate })
    }

    /// After [`SimulatedCloud::delete_locked`], with the lock released: powers a deleted instance's host off and
    /// starts its termination timer.
    fn deleted(&self, name: &str, deleted: Deleted) -> wire::DeleteAnswer {
        let Deleted::Started { epoch, terminate } = deleted else {
            return wire::DeleteAnswer { already_gone: deleted == Deleted::AlreadyGone };
        };
        match self.inner.hosts.power_off(name) {
            Ok(()) | Err(HostError::UnknownHost(_)) => {}
            Err(error) => tracing::warn!(instance = name, %error, "powering off"),
        }
        self.after(terminate, name, epoch, SimulatedCloud::terminated);
        wire::DeleteAnswer { already_gone: false }
    }

    /// An instance.
    pub async fn instance(&self, name: &str, operation: Operation) -> Result<wire::Instance, ErrorBody> {
        self.begin(operation, Target::Instance(name)).await?;
        let mut guard = self.inner.state.lock();
        let state = &mut *guard;
        let instance = state.instances.get_mut(name).ok_or_else(|| not_found(format!("instance {name}")))?;
        if operation == Operation::InstanceImage {
            if let Some(error) = fire(&mut instance.faults.image_failure, "injected failure of the image lookup") {
                return Err(error);
            }
            if let Some(group) = state.groups.get_mut(&instance.group)
                && let Some(error) = fire(&mut group.faults.image_failure, "injected failure of the image lookup")
            {
                return Err(error);
            }
        }
        Ok(SimulatedCloud::instance_wire(name, instance))
    }

    // Dev controls.

    /// Replaces the API's faults.
    pub fn set_faults(&self, faults: CloudFaults) -> Result<(), ControlError> {
        faults.failure.as_ref().map(InjectedFailure::check).transpose().map_err(ControlError::Invalid)?;
        self.inner.state.lock().faults = faults;
        Ok(())
    }

    /// Replaces a group's faults.
    pub fn set_group_faults(&self, group: &str, faults: GroupFaults) -> Result<(), ControlError> {
        for failure in [&faults.failure, &faults.create_failure, &faults.image_failure].into_iter().flatten() {
            failure.check().map_err(ControlError::Invalid)?;
        }
        let mut state = self.inner.state.lock();
        let g = state.groups.get_mut(group).ok_or_else(|| ControlError::NotFound(format!("group {group}")))?;
        g.faults = faults;
        Ok(())
    }

    /// Replaces an instance's faults.
    pub fn set_instance_faults(&self, name: &str, faults: InstanceFaults) -> Result<(), ControlError> {
        for failure in [&faults.failure, &faults.delete_failure, &faults.image_failure].into_iter().flatten() {
            failure.check().map_err(ControlError::Invalid)?;
        }
        let mut state = self.inner.state.lock();
        let i = state.instances.get_mut(name).ok_or_else(|| ControlError::NotFound(format!("instance {name}")))?;
        i.faults = faults;
        Ok(())
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        let mut state = self.inner.state.lock();
        state.faults = CloudFaults::default();
        state.groups.values_mut().for_each(|g| g.faults = GroupFaults::default());
        state.instances.values_mut().for_each(|i| i.faults = InstanceFaults::default());
    }

    /// Stops a `Ready` instance: `Stopping` (host down) then `Stopped`.
    pub fn stop(&self, name: &str) -> Result<(), ControlError> {
        let (epoch, delay) = {
            let mut state = self.inner.state.lock();
            let i = state.instances.get_mut(name).ok_or_else(|| ControlError::NotFound(format!("instance {name}")))?;
            if i.state != InstanceState::Ready {
                return Err(ControlError::Invalid(format!("instance {name} is {}, not Ready", i.state)));
            }
            i.state = InstanceState::Stopping;
            i.epoch += 1;
            (i.epoch, self.inner.timing.instance_terminate)
        };
        let _ = self.inner.hosts.power_off(name);
        self.after(delay, name, epoch, SimulatedCloud::stopped);
        Ok(())
    }

    /// Starts a `Stopped` instance: `Creating` then `Ready` (its host boots again).
    pub fn start(&self, name: &str) -> Result<(), ControlError> {
        let (epoch, delay) = {
            let mut state = self.inner.state.lock();
            let i = state.instances.get_mut(name).ok_or_else(|| ControlError::NotFound(format!("instance {name}")))?;
            if i.state != InstanceState::Stopped {
                return Err(ControlError::Invalid(format!("instance {name} is {}, not Stopped", i.state)));
            }
            i.state = InstanceState::Creating;
            i.epoch += 1;
            (i.epoch, self.inner.timing.instance_provision)
        };
        self.after(delay, name, epoch, SimulatedCloud::provisioned);
        Ok(())
    }

    /// Instances asked for so far: one per `create_instance` call, `count` per `create_instances` call (counted as
    /// the calls are, refused ones included): with batches, the calls no longer count the instances.
    pub fn instances_asked(&self) -> u64 {
        self.inner.state.lock().asked
    }

    /// API calls so far, by operation.
    pub fn calls(&self) -> BTreeMap<Operation, u64> {
        self.inner.state.lock().calls.clone()
    }

    /// An instance's state, without an API call (tests).
    pub fn instance_state(&self, name: &str) -> Option<InstanceState> {
        self.inner.state.lock().instances.get(name).map(|i| i.state)
    }

    /// The names of a group's instances that are not terminated, without an API call.
    pub fn instances_of(&self, group: &str) -> Vec<String> {
        let state = self.inner.state.lock();
        state
            .instances
            .iter()
            .filter(|(_, i)| i.group == group && i.state != InstanceState::Terminated)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Everything, for `GET /_dev/cloud`.
    pub fn snapshot(&self) -> serde_json::Value {
        let state = self.inner.state.lock();
        let groups: Vec<serde_json::Value> = state
            .groups
            .iter()
            .map(|(name, group)| {
                serde_json::json!({"group": self.group_wire(&state, name, group), "faults": group.faults,
                                   "pendingImage": group.pending_image.as_ref().map(|(image, _)| image)})
            })
            .collect();
        let instances: Vec<serde_json::Value> = state
            .instances
            .iter()
            .map(|(name, i)| {
                serde_json::json!({"instance": SimulatedCloud::instance_wire(name, i), "registered": i.registered,
                                   "faults": i.faults})
            })
            .collect();
        let calls: BTreeMap<&str, u64> = state.calls.iter().map(|(op, n)| (op.as_str(), *n)).collect();
        serde_json::json!({"tag": {"key": self.inner.tag.key, "value": self.inner.tag.value},
                           "groups": groups, "instances": instances, "faults": state.faults, "calls": calls})
    }

    /// Ends every timer and delayed answer.
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }
}

/// The group and instance a target touches.
fn resolve<'a>(state: &State, target: Target<'a>) -> (Option<String>, Option<&'a str>) {
    match target {
        Target::Cloud => (None, None),
        Target::Group(group) => (Some(group.to_owned()), None),
        Target::Instance(name) => (state.instances.get(name).map(|i| i.group.clone()), Some(name)),
    }
}

/// Applies a group's pending image change that is due.
fn apply_due_image(group: &mut Group) {
    if let Some((image, due)) = &group.pending_image
        && Instant::now() >= *due
    {
        group.image = image.clone();
        group.pending_image = None;
    }
}

/// `GROUP-xxxxx`, not used by any instance yet.
fn unused_name(state: &State, group: &str) -> String {
    loop {
        let name = format!("{group}-{}", generated_suffix());
        if !state.instances.contains_key(&name) {
            return name;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lists_parse_with_roles_and_refuse_bad_items() {
        let groups = GroupSpec::parse_list("cp:3:control-plane, workers-a:4,workers-b:2:worker").unwrap();
        assert_eq!(
            groups,
            vec![
                GroupSpec::new("cp", GroupRole::ControlPlane, 3),
                GroupSpec::new("workers-a", GroupRole::Worker, 4),
                GroupSpec::new("workers-b", GroupRole::Worker, 2),
            ]
        );
        assert_eq!(groups[0].max, 6);
        assert_eq!(GroupSpec::parse_list("").unwrap(), vec![]);
        for bad in ["cp", "cp:x", "cp:3:boss", "Cp:3", "a_b:1", "cp:1,cp:2", &format!("{}:1", "a".repeat(58))] {
            assert!(GroupSpec::parse_list(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_failure_fires_as_often_as_asked_then_clears() {
        let mut failure = Some(InjectedFailure {
            code: ErrorCode::Throttled,
            message: None,
            times: Some(2),
            retry_after_seconds: Some(1.0),
        });
        let first = fire(&mut failure, "x").unwrap();
        assert_eq!(
            (first.code, first.retry_after_seconds, first.message.as_str()),
            (ErrorCode::Throttled, Some(1.0), "x")
        );
        assert!(fire(&mut failure, "x").is_some());
        assert!(failure.is_none());
        assert!(fire(&mut failure, "x").is_none());
        let mut always = Some(InjectedFailure {
            code: ErrorCode::Internal,
            message: Some("m".into()),
            times: None,
            retry_after_seconds: None,
        });
        for _ in 0..5 {
            assert_eq!(fire(&mut always, "x").unwrap().message, "m");
        }
        let bad =
            InjectedFailure { code: ErrorCode::Internal, message: None, times: None, retry_after_seconds: Some(1.0) };
        assert!(bad.check().is_err());
        let negative =
            InjectedFailure { code: ErrorCode::Throttled, message: None, times: None, retry_after_seconds: Some(-1.0) };
        assert!(negative.check().is_err());
    }
}
