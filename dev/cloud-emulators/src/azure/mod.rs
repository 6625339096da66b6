//! The Azure emulator: the ARM operations on Virtual Machine Scale Sets the Azure provider makes, and Entra ID's
//! token endpoint for workload identity, over HTTPS on a loopback port, whose VMs join the dev cluster as Nodes.
//!
//! # Guarantees
//! - Shapes, status codes and long-running-operation semantics follow the Compute REST reference
//!   (`api-version` 2024-07-01, the only one accepted): a capacity or model change answers 200 with the scale set
//!   (`provisioningState: Updating`) and an `Azure-AsyncOperation` header; a deletion answers 202 with
//!   `Azure-AsyncOperation` and `Location`; the operation status resource is `InProgress` until the change is
//!   done, then `Succeeded` (or `Failed` with an `error`). Errors are `{"error": {"code", "message"}}`.
//! - Every ARM request needs a bearer token the token endpoint issued (401 otherwise), and is recorded with the
//!   RBAC action it needs; a denied action is 403 `AuthorizationFailed`.
//! - A new VM is listed at once (`Creating`, with its computer name; after `set_list_lag(Some(d))`, `d` later: the
//!   capacity counts it before the list shows it), turns `Succeeded`/`running` after the
//!   provisioning time, its host boots and its kubelet registers the Node (`spec.providerID`
//!   `azure:///subscriptions/.../virtualMachines/N`, the role's labels) after the join time. A deleted VM is
//!   `Deleting` (host down) for the termination time, then gone (404), its Node deleted and host retired.
//! - Faults fire before a request does anything: throttling (429 + `Retry-After`), server errors (500), quota
//!   on the next capacity increase (409 `OperationNotAllowed`), slow operations.
//! - No lock is held across an await or an API server write.

mod http;
mod spec;

use crate::apiserver::http::tls::TlsError;
use crate::apiserver::store::Store;
use crate::hosts::Hosts;
use crate::timing::Timing;
use cloud::{AzureScaleSetVm, GroupRole, ProviderId};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why the emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum AzureEmulatorError {
    /// Binding the loopback port failed.
    #[error("cannot listen: {0}")]
    Listen(#[from] std::io::Error),
    /// The TLS identity could not be made.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// Where the emulator listens.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `https://127.0.0.1:PORT/`: the ARM endpoint and the authority host.
    pub url: String,
    /// The PEM of the CA of its serving certificate.
    pub ca_pem: String,
}

/// The `api-version` the emulator serves (the provider's pinned one).
pub const API_VERSION: &str = cloud::azure::model::API_VERSION;
/// The emulated tenant.
pub const TENANT_ID: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
/// The client ID of the emulated workload identity.
pub const CLIENT_ID: &str = "9e3a2b1c-5d4e-4f60-8a7b-0c1d2e3f4a5b";
/// The service-account token the workload identity presents (the content of `AZURE_FEDERATED_TOKEN_FILE`).
pub const FEDERATED_TOKEN: &str =
    "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6dXBkYXRlLW9wZXJhdG9yIn0.sig";
/// The emulated subscription.
pub const SUBSCRIPTION_ID: &str = "0d202bbb-4fa7-4af8-8125-58c269a05435";
/// The emulated resource group.
pub const RESOURCE_GROUP: &str = "constellation-rg";
/// The region of the scale sets.
pub const LOCATION: &str = "westeurope";

/// The RBAC actions of the requests the emulator serves.
pub mod actions {
    /// GET of a scale set, and the list of a resource group's scale sets.
    pub const SCALE_SET_READ: &str = "Microsoft.Compute/virtualMachineScaleSets/read";
    /// PATCH of a scale set (capacity, model).
    pub const SCALE_SET_WRITE: &str = "Microsoft.Compute/virtualMachineScaleSets/write";
    /// POST `.../delete` of VMs of a scale set.
    pub const SCALE_SET_DELETE_VMS: &str = "Microsoft.Compute/virtualMachineScaleSets/delete/action";
    /// GET of a scale set's VMs, and of one VM.
    pub const VM_READ: &str = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read";
    /// GET of a VM's instance view.
    pub const VM_INSTANCE_VIEW_READ: &str =
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/instanceView/read";
    /// GET of an operation status resource.
    pub const OPERATION_READ: &str = "Microsoft.Compute/locations/operations/read";
}

/// A scale set to create at start.
#[derive(Debug, Clone)]
pub struct ScaleSetSpec {
    /// Its name (letters, digits, `-`; its VMs' computer names are the lowercase name and six base-36 digits).
    pub name: String,
    /// Its role (tag `constellation-role`).
    pub role: GroupRole,
    /// VMs at start.
    pub size: u32,
    /// Its maximum (tag `constellation-max-count`).
    pub max: u32,
    /// Its model's image reference (an image string the provider accepts).
    pub image: String,
}

/// Faults of the emulated API. Each with `times` fires that often, then clears.
#[derive(Debug, Clone, Default)]
pub struct AzureFaults {
    /// The next requests are throttled: (times, `Retry-After` seconds).
    pub throttle: Option<(u32, u64)>,
    /// The next requests fail with 500 `InternalServerError`.
    pub server_errors: Option<u32>,
    /// The next capacity increases fail with 409 `OperationNotAllowed` (a cores quota).
    pub quota: Option<u32>,
    /// Operations (capacity and model changes) stay `InProgress` at least this long.
    pub slow_operations: Option<Duration>,
    /// The next writes (capacity or model changes, VM deletions) fail with 409 `Conflict` "The request failed due
    /// to conflict with a concurrent request", ARM's answer to a request that meets another operation in progress
    /// on the resource (nothing was done; retried by cloud-provider-azure after 5 s,
    /// kubernetes-sigs/cloud-provider-azure#2386).
    pub conflicts: Option<u32>,
}

/// One recorded ARM request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The HTTP method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The RBAC action it needs.
    pub action: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provisioning {
    Creating,
    Succeeded,
    Deleting,
}

impl Provisioning {
    fn as_str(self) -> &'static str {
        match self {
            Provisioning::Creating => "Creating",
            Provisioning::Succeeded => "Succeeded",
            Provisioning::Deleting => "Deleting",
        }
    }
}

#[derive(Debug, Clone)]
struct ScaleSet {
    name: String,
    role: GroupRole,
    tags: BTreeMap<String, String>,
    image: Value,
    next_id: u64,
    etag: u64,
    /// The operation that changes the model, while it runs.
    updating: Option<String>,
    /// `properties.overprovision` (the emulator creates no extra VMs either way).
    overprovision: bool,
    /// `properties.upgradePolicy.mode`: `Manual`, `Automatic` or `Rolling` (the emulator never rolls VMs).
    upgrade_mode: String,
}

#[derive(Debug, Clone)]
struct Vm {
    computer_name: String,
    image: Value,
    provisioning: Provisioning,
    running: bool,
    registered: bool,
    /// The VM list does not show it before this (see [`AzureEmulator::set_list_lag`]).
    unlisted_until: Option<Instant>,
}

#[derive(Debug, Clone)]
struct Operation {
    done_at: Instant,
    started: jiff::Timestamp,
    error: Option<(String, String)>,
}

#[derive(Default)]
struct State {
    /// By lowercase name.
    scale_sets: BTreeMap<String, ScaleSet>,
    /// By (lowercase scale set name, instance ID).
    vms: BTreeMap<(String, u64), Vm>,
    operations: BTreeMap<String, Operation>,
    tokens: HashSet<String>,
    faults: AzureFaults,
    denied: BTreeSet<&'static str>,
    calls: Vec<Call>,
    next_operation: u64,
    /// List calls answer at most this many resources a page, with a `nextLink` to the rest (`None`: all at once).
    page_size: Option<usize>,
    /// A scale set's VM list shows a VM created by a capacity increase only this long after it (ARM's lists are
    /// eventually consistent with a capacity change: the capacity counts a VM the list does not show yet).
    list_lag: Option<Duration>,
    /// What the emulator answered that the published definition does not allow (see `spec`).
    violations: Vec<String>,
}

struct Inner {
    state: Mutex<State>,
    store: Store,
    hosts: Hosts,
    timing: Timing,
    cluster_uid: String,
    shutdown: CancellationToken,
}

/// The emulated Azure of one dev cluster (a cloneable handle). Serve it with [`AzureEmulator::serve`].
#[derive(Clone)]
pub struct AzureEmulator {
    inner: Arc<Inner>,
}

/// The base-36 suffix of a uniform scale set's computer names.
fn computer_name(scale_set: &str, id: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut suffix = [b'0'; 6];
    let mut n = id;
    for digit in suffix.iter_mut().rev() {
        *digit = DIGITS[(n % 36) as usize];
        n /= 36;
    }
    format!("{}{}", scale_set.to_ascii_lowercase(), String::from_utf8_lossy(&suffix))
}

impl AzureEmulator {
    /// An emulator without scale sets whose VMs' hosts are in `hosts` and whose Nodes are registered in `store`;
    /// scale sets are tagged `constellation-uid: {cluster_uid}`.
    pub fn new(store: &Store, hosts: &Hosts, timing: &Timing, cluster_uid: &str) -> AzureEmulator {
        AzureEmulator {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                store: store.clone(),
                hosts: hosts.clone(),
                timing: timing.clone(),
                cluster_uid: cluster_uid.to_owned(),
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// The ARM resource ID of the scale set `name`.
    pub fn scale_set_id(name: &str) -> String {
        format!(
            "/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"
        )
    }

    /// The provider ID of VM `id` of scale set `name`, as the Azure cloud provider writes it.
    pub fn provider_id(name: &str, id: u64) -> ProviderId {
        ProviderId::Azure(AzureScaleSetVm {
            subscription: SUBSCRIPTION_ID.to_owned(),
            resource_group: RESOURCE_GROUP.to_owned(),
            scale_set: name.to_owned(),
            instance_id: id.to_string(),
        })
    }

    /// Adds a scale set with `spec.size` running VMs whose Nodes are registered now; returns their node names.
    ///
    /// # Errors
    /// A message when the name is taken or malformed, the image is not one the provider accepts, or a Node
    /// cannot be registered.
    pub fn add_scale_set(&self, spec: &ScaleSetSpec) -> Result<Vec<String>, String> {
        if spec.name.is_empty() || !spec.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(format!("scale set name {:?} is not letters, digits and -", spec.name));
        }
        let reference = cloud::azure::model::ImageReference::parse(&spec.image).map_err(|e| e.to_string())?;
        let image = serde_json::to_value(reference).map_err(|e| e.to_string())?;
        let key = spec.name.to_ascii_lowercase();
        let role = match spec.role {
            GroupRole::ControlPlane => "control-plane",
            GroupRole::Worker => "worker",
        };
        let tags = BTreeMap::from([
            ("constellation-uid".to_owned(), self.inner.cluster_uid.clone()),
            (cloud::azure::ROLE_TAG.to_owned(), role.to_owned()),
            (cloud::azure::MAX_TAG.to_owned(), spec.max.to_string()),
        ]);
        let mut names = Vec::new();
        {
            let mut state = self.inner.state.lock();
            if state.scale_sets.contains_key(&key) {
                return Err(format!("scale set {} exists", spec.name));
            }
            state.scale_sets.insert(
                key.clone(),
                ScaleSet {
                    name: spec.name.clone(),
                    role: spec.role,
                    tags,
                    image: image.clone(),
                    next_id: u64::from(spec.size),
                    etag: 1,
                    updating: None,
                    overprovision: false,
                    upgrade_mode: "Manual".into(),
                },
            );
            for id in 0..u64::from(spec.size) {
                let name = computer_name(&spec.name, id);
                state.vms.insert(
                    (key.clone(), id),
                    Vm {
                        computer_name: name.clone(),
                        image: image.clone(),
                        provisioning: Provisioning::Succeeded,
                        running: true,
                        registered: true,
                        unlisted_until: None,
                    },
                );
                names.push((id, name));
            }
        }
        for (id, name) in &names {
            self.inner.hosts.add(name, &spec.image).map_err(|e| e.to_string())?;
            self.register_node(&spec.name, *id, name, spec.role)?;
        }
        Ok(names.into_iter().map(|(_, n)| n).collect())
    }

    fn register_node(&self, scale_set: &str, id: u64, name: &str, role: GroupRole) -> Result<(), String> {
        let mut node = crate::node_manifest::node_manifest(name, role == GroupRole::ControlPlane);
        node.spec.get_or_insert_default().provider_id = Some(Self::provider_id(scale_set, id).to_string());
        let store = self.inner.store.with_identity("dev/kubelet");
        store
            .api::<Node>()
            .create(None, &node, &PostParams::default())
            .map(|_| ())
            .map_err(|e| format!("registering node {name}: {e}"))
    }

    /// List calls (scale sets, a scale set's VMs) answer at most `size` resources a page from now on, with a
    /// `nextLink` (carrying `$skiptoken`) to the next page, as ARM pages its lists; `None` answers all at once.
    pub fn set_page_size(&self, size: Option<usize>) {
        self.inner.state.lock().page_size = size.map(|s| s.max(1));
    }

    /// From now on a scale set's VM list shows a VM a capacity increase makes only `lag` after it (GETs of the VM
    /// answer at once); `None` lists every VM at once again, those made meanwhile included.
    pub fn set_list_lag(&self, lag: Option<Duration>) {
        let mut state = self.inner.state.lock();
        state.list_lag = lag;
        if lag.is_none() {
            state.vms.values_mut().for_each(|vm| vm.unlisted_until = None);
        }
    }

    /// Sets a scale set's `properties.overprovision` and `properties.upgradePolicy.mode` (`Manual`, `Automatic`,
    /// `Rolling`), as an administrator may have created it; returns false for an unknown scale set.
    pub fn set_scale_set_settings(&self, name: &str, overprovision: bool, upgrade_mode: &str) -> bool {
        let mut state = self.inner.state.lock();
        match state.scale_sets.get_mut(&name.to_ascii_lowercase()) {
            Some(scale_set) => {
                scale_set.overprovision = overprovision;
                scale_set.upgrade_mode = upgrade_mode.to_owned();
                true
            }
            None => false,
        }
    }
    /// Replaces the faults.
    pub fn set_faults(&self, faults: AzureFaults) {
        self.inner.state.lock().faults = faults;
    }

    /// Denies an RBAC action (403 `AuthorizationFailed`) until [`AzureEmulator::allow_all`].
    pub fn deny(&self, action: &'static str) {
        self.inner.state.lock().denied.insert(action);
    }

    /// Grants every action again.
    pub fn allow_all(&self) {
        self.inner.state.lock().denied.clear();
    }

    /// The ARM requests served so far (authenticated ones, faulted or not).
    pub fn calls(&self) -> Vec<Call> {
        self.inner.state.lock().calls.clone()
    }

    /// What the emulator answered that Microsoft.Compute 2024-07-01 does not allow (each answer of an operation
    /// of the definition is checked against its response schema): empty, or the emulator drifted from Azure.
    pub fn spec_violations(&self) -> Vec<String> {
        self.inner.state.lock().violations.clone()
    }

    /// The RBAC actions of the requests served so far.
    pub fn actions(&self) -> BTreeSet<&'static str> {
        self.inner.state.lock().calls.iter().map(|c| c.action).collect()
    }

    /// The instance IDs of a scale set's VMs (deleting ones included).
    pub fn instance_ids(&self, scale_set: &str) -> Vec<u64> {
        let key = scale_set.to_ascii_lowercase();
        self.inner.state.lock().vms.keys().filter(|(s, _)| *s == key).map(|(_, id)| *id).collect()
    }

    /// The image reference of a scale set's model (as an image string).
    pub fn model_image(&self, scale_set: &str) -> Option<String> {
        let state = self.inner.state.lock();
        Some(image_of(&state.scale_sets.get(&scale_set.to_ascii_lowercase())?.image)).filter(|i| !i.is_empty())
    }

    /// Stops timers (the server stops with [`AzureEmulator::serve`]'s shutdown too).
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    /// Runs `step` after `delay` unless the emulator shuts down.
    fn after(&self, delay: Duration, step: impl FnOnce(&AzureEmulator) + Send + 'static) {
        let emulator = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => step(&emulator),
                () = emulator.inner.shutdown.cancelled() => {}
            }
        });
    }

    fn new_operation(state: &mut State, duration: Duration, error: Option<(String, String)>) -> String {
        state.next_operation += 1;
        let id = format!("{:08x}-0000-4000-8000-{:012x}", state.next_operation, state.next_operation);
        let slow = state.faults.slow_operations.unwrap_or_default();
        let operation =
            Operation { done_at: Instant::now() + duration.max(slow), started: jiff::Timestamp::now(), error };
        state.operations.insert(id.clone(), operation);
        id
    }

    /// A VM finished provisioning: running, its host boots, its Node registers after the join time.
    fn provisioned(&self, key: &str, id: u64) {
        let facts = {
            let mut state = self.inner.state.lock();
            let role = state.scale_sets.get(key).map(|s| (s.name.clone(), s.role));
            let Some(vm) = state.vms.get_mut(&(key.to_owned(), id)) else { return };
            if vm.provisioning != Provisioning::Creating {
                return;
            }
            vm.provisioning = Provisioning::Succeeded;
            vm.running = true;
            let image = image_of(&vm.image);
            role.map(|(name, role)| (name, role, vm.computer_name.clone(), image))
        };
        let Some((scale_set, role, name, image)) = facts else { return };
        let (join, ready) = (self.inner.timing.node_join, self.inner.timing.node_ready);
        if let Err(error) = self.inner.hosts.add_booting(&name, &image, join + ready) {
            tracing::warn!(vm = name, %error, "the Azure emulator could not add a host");
        }
        let key = key.to_owned();
        self.after(join, move |emulator| {
            let registering = {
                let mut state = emulator.inner.state.lock();
                match state.vms.get_mut(&(key.clone(), id)) {
                    Some(vm) if !vm.registered && vm.provisioning == Provisioning::Succeeded => {
                        vm.registered = true;
                        true
                    }
                    _ => false,
                }
            };
            if registering && let Err(error) = emulator.register_node(&scale_set, id, &name, role) {
                tracing::warn!(vm = name, error, "the emulated kubelet could not register");
            }
        });
    }

    /// A deleted VM is gone: its Node is deleted and its host retired.
    fn deleted(&self, key: &str, id: u64) {
        let Some(vm) = self.inner.state.lock().vms.remove(&(key.to_owned(), id)) else { return };
        let store = self.inner.store.with_identity("dev/cloud-node-lifecycle");
        match store.api::<Node>().delete(None, &vm.computer_name, &DeleteParams::default()) {
            Ok(_) => {}
            Err(error) if error.code == 404 => {}
            Err(error) => tracing::warn!(vm = vm.computer_name, %error, "the Azure emulator could not delete a node"),
        }
        self.inner.hosts.retire(&vm.computer_name);
    }

    /// The scale set's ARM representation.
    fn scale_set_json(state: &State, key: &str, scale_set: &ScaleSet) -> Value {
        let capacity =
            state.vms.iter().filter(|((s, _), vm)| s == key && vm.provisioning != Provisioning::Deleting).count();
        let updating = scale_set
            .updating
            .as_ref()
            .and_then(|op| state.operations.get(op))
            .is_some_and(|op| op.done_at > Instant::now());
        json!({
            "id": Self::scale_set_id(&scale_set.name),
            "name": scale_set.name,
            "type": "Microsoft.Compute/virtualMachineScaleSets",
            "location": LOCATION,
            "tags": scale_set.tags,
            "etag": format!("\"{}\"", scale_set.etag),
            "sku": {"name": "Standard_D4s_v3", "tier": "Standard", "capacity": capacity},
            "properties": {
                "provisioningState": if updating { "Updating" } else { "Succeeded" },
                "orchestrationMode": "Uniform",
                "upgradePolicy": {"mode": scale_set.upgrade_mode},
                "overprovision": scale_set.overprovision,
                "uniqueId": format!("{:032x}", scale_set.name.len()),
                "virtualMachineProfile": {
                    "osProfile": {"computerNamePrefix": scale_set.name.to_ascii_lowercase(), "adminUsername": "azureuser"},
                    "storageProfile": {
                        "imageReference": scale_set.image,
                        "osDisk": {"createOption": "FromImage", "caching": "ReadWrite", "managedDisk": {"storageAccountType": "Premium_LRS"}}
                    }
                }
            }
        })
    }

    fn vm_json(scale_set: &ScaleSet, id: u64, vm: &Vm) -> Value {
        json!({
            "id": format!("{}/virtualMachines/{id}", Self::scale_set_id(&scale_set.name)),
            "name": format!("{}_{id}", scale_set.name),
            "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
            "location": LOCATION,
            "instanceId": id.to_string(),
            "sku": {"name": "Standard_D4s_v3", "tier": "Standard"},
            "properties": {
                "provisioningState": vm.provisioning.as_str(),
                "latestModelApplied": vm.image == scale_set.image,
                "osProfile": {"computerName": vm.computer_name, "adminUsername": "azureuser"},
                "storageProfile": {"imageReference": vm.image}
            }
        })
    }

    fn instance_view_json(vm: &Vm) -> Value {
        let provisioning = format!("ProvisioningState/{}", vm.provisioning.as_str().to_ascii_lowercase());
        let mut statuses =
            vec![json!({"code": provisioning, "level": "Info", "displayStatus": vm.provisioning.as_str()})];
        let power = match (vm.provisioning, vm.running) {
            (Provisioning::Creating, _) => None,
            (_, true) => Some(("PowerState/running", "VM running")),
            (_, false) => Some(("PowerState/stopped", "VM stopped")),
        };
        if let Some((code, display)) = power {
            statuses.push(json!({"code": code, "level": "Info", "displayStatus": display}));
        }
        json!({"computerName": vm.computer_name, "statuses": statuses})
    }
}

/// The image string of a stored image reference (a host's image).
fn image_of(value: &Value) -> String {
    serde_json::from_value::<cloud::azure::model::ImageReference>(value.clone())
        .ok()
        .and_then(|r| r.image())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computer_names_are_the_prefix_and_six_base36_digits() {
        assert_eq!(computer_name("Workers", 0), "workers000000");
        assert_eq!(computer_name("w", 35), "w00000z");
        assert_eq!(computer_name("w", 36), "w000010");
    }
}
