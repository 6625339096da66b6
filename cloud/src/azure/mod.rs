//! The Azure provider: Virtual Machine Scale Sets through the ARM REST API (Compute `api-version` 2024-07-01),
//! authenticated with workload identity or managed identity (`azure_identity`), over `azure_core`'s HTTP client.
//!
//! # Guarantees
//! - Each call makes the ARM requests listed in `docs/cloud.md` (`## Azure`), each bounded by the timeout, with
//!   no retry and no polling inside: long-running operations are answered `Pending`/`InProgress` and their
//!   `Azure-AsyncOperation` (or `Location`) is looked at on the next call.
//! - The bearer token is only sent to the configured ARM endpoint (`nextLink` and operation URLs on other hosts
//!   are refused); redirects are not followed.
//! - ARM error bodies are mapped to typed errors; a 429's `Retry-After` is kept.

mod arm;
mod batch;
mod members;
pub mod model;

pub use self::batch::DELETE_BATCH;

use self::arm::Arm;
use self::model::{ImageReference, InstanceView, OperationStatus, Page, ScaleSet, ScaleSetVm};
use crate::error::{Error, Result};
use crate::provider::{
    BatchLimit, CloudProvider, ClusterTag, Creation, CreationToken, Deletion, GroupId, GroupInfo, GroupMembers,
    GroupRole, ImageUpdate, InstanceState, NewInstance,
};
use crate::provider_id::{AzureScaleSetVm, Cloud, ProviderId};
use async_trait::async_trait;
use azure_core::cloud::{CloudConfiguration, CustomConfiguration};
use azure_core::credentials::TokenCredential;
use azure_core::http::{ClientOptions, HttpClient, Method, Transport, Url};
use azure_identity::{
    ClientAssertionCredentialOptions, ManagedIdentityCredential, ManagedIdentityCredentialOptions, UserAssignedId,
    WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The public cloud's ARM endpoint.
pub const ARM_ENDPOINT: &str = "https://management.azure.com/";
/// The tag naming a scale set's role (`control-plane` or `worker`), as Constellation tags them.
pub const ROLE_TAG: &str = "constellation-role";
/// The tags with a scale set's minimum and maximum size (scale sets have no bounds of their own); without them
/// 0 and [`DEFAULT_MAX`].
pub const MIN_TAG: &str = "constellation-min-count";
/// See [`MIN_TAG`].
pub const MAX_TAG: &str = "constellation-max-count";
/// The most VMs a scale set may have when its [`MAX_TAG`] does not say (Azure's limit for gallery images).
pub const DEFAULT_MAX: u32 = 1000;
/// How long one request may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The prefix of the creation tokens this provider issues.
const TOKEN_PREFIX: &str = "azure-vmss-create;";

/// How the provider authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// As AKS pods do: workload identity when `AZURE_FEDERATED_TOKEN_FILE` is set (with `AZURE_TENANT_ID` and
    /// `AZURE_CLIENT_ID`, which the workload-identity webhook injects), else the VM's managed identity (the
    /// user-assigned one whose client ID is `AZURE_CLIENT_ID`, if set).
    FromEnvironment,
    /// Workload identity: the federated service-account token in `token_file` exchanged for an Entra token.
    WorkloadIdentity {
        /// The Entra tenant.
        tenant_id: String,
        /// The application (or user-assigned identity) client ID.
        client_id: String,
        /// The projected service-account token.
        token_file: PathBuf,
    },
    /// The managed identity of the VM (IMDS); a user-assigned one by its client ID.
    ManagedIdentity {
        /// A user-assigned identity's client ID; `None` for the system-assigned identity.
        client_id: Option<String>,
    },
}

/// The provider's configuration.
#[derive(Debug, Clone)]
pub struct AzureConfig {
    /// The subscription of the cluster's scale sets.
    pub subscription_id: String,
    /// The resource group of the cluster's scale sets (where [`CloudProvider::list_groups`] looks).
    pub resource_group: String,
    /// How to authenticate.
    pub credential: Credential,
    /// The ARM endpoint; [`ARM_ENDPOINT`] when `None`. Overridden only for tests and emulators.
    pub arm_endpoint: Option<String>,
    /// The Entra authority host (`https://login.microsoftonline.com` when `None`). Overridden only for tests and
    /// emulators; must be `https`.
    pub authority_host: Option<String>,
    /// PEM certificates trusted besides the system's roots (an emulator's CA). Only for tests and emulators.
    pub extra_ca_pem: Option<Vec<u8>>,
    /// How long one request may take.
    pub timeout: Duration,
}

impl AzureConfig {
    /// The public cloud, credentials from the environment, the default timeout.
    pub fn new(subscription_id: &str, resource_group: &str) -> AzureConfig {
        AzureConfig {
            subscription_id: subscription_id.to_owned(),
            resource_group: resource_group.to_owned(),
            credential: Credential::FromEnvironment,
            arm_endpoint: None,
            authority_host: None,
            extra_ca_pem: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// A scale set named by its resource ID.
#[derive(Debug, Clone)]
struct ScaleSetRef {
    subscription: String,
    resource_group: String,
    name: String,
}

impl ScaleSetRef {
    /// Parses `/subscriptions/S/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/NAME` with
    /// the checks of Azure provider IDs.
    fn parse(group: &GroupId) -> Result<ScaleSetRef> {
        let id = group.as_str();
        let parsed = if id.starts_with('/') { format!("azure://{id}/virtualMachines/0").parse().ok() } else { None };
        match parsed {
            Some(ProviderId::Azure(vm)) => {
                Ok(ScaleSetRef { subscription: vm.subscription, resource_group: vm.resource_group, name: vm.scale_set })
            }
            _ => Err(Error::invalid(format!(
                "group {id:?} is not a scale set ID \
                 (/subscriptions/SUB/resourceGroups/RG/providers/Microsoft.Compute/virtualMachineScaleSets/NAME)"
            ))),
        }
    }

    fn path(&self) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachineScaleSets/{}",
            self.subscription, self.resource_group, self.name
        )
    }

    fn same(&self, vm: &AzureScaleSetVm) -> bool {
        self.subscription.eq_ignore_ascii_case(&vm.subscription)
            && self.resource_group.eq_ignore_ascii_case(&vm.resource_group)
            && self.name.eq_ignore_ascii_case(&vm.scale_set)
    }
}

/// A pending creation: the scale set, the highest instance ID before it, the operation to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    scale_set: String,
    after: Option<u64>,
    operation: Option<String>,
}

impl Token {
    fn encode(&self) -> String {
        let after = self.after.map(|a| a.to_string()).unwrap_or_default();
        let with = |op: &str| format!("{TOKEN_PREFIX}{};{after};{op}", self.scale_set.to_ascii_lowercase());
        let full = with(self.operation.as_deref().unwrap_or(""));
        // Tokens are at most 1024 bytes: without the operation the creation is still found by its VM.
        if full.len() <= 1024 { full } else { with("") }
    }

    fn decode(token: &str) -> Option<Token> {
        let rest = token.strip_prefix(TOKEN_PREFIX)?;
        let mut parts = rest.splitn(3, ';');
        let scale_set = parts.next()?.to_owned();
        let after = match parts.next()? {
            "" => None,
            n => Some(n.parse().ok()?),
        };
        let operation = Some(parts.next()?).filter(|op| !op.is_empty()).map(str::to_owned);
        (!scale_set.is_empty()).then_some(Token { scale_set, after, operation })
    }
}

/// The Azure Virtual Machine Scale Sets provider.
#[derive(Debug)]
pub struct AzureProvider {
    arm: Arm,
    subscription_id: String,
    resource_group: String,
    /// Image changes under way: scale set (lowercase ID) → (image, operation URL).
    image_operations: Mutex<HashMap<String, (String, String)>>,
}

impl AzureProvider {
    /// A provider as `config` says, with its credential (no request is made yet).
    ///
    /// Installs ring as rustls' process-wide default crypto provider when none is installed (the binary does
    /// that at start anyway; kube uses ring).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a malformed endpoint or CA, or credentials the environment does not provide.
    pub fn new(config: AzureConfig) -> Result<AzureProvider> {
        if config.subscription_id.is_empty() || config.resource_group.is_empty() {
            return Err(Error::invalid("the Azure subscription ID and resource group are required"));
        }
        let endpoint = config.arm_endpoint.as_deref().unwrap_or(ARM_ENDPOINT);
        let mut endpoint =
            Url::parse(endpoint).map_err(|e| Error::invalid(format!("ARM endpoint {endpoint:?}: {e}")))?;
        if endpoint.scheme() != "https" || endpoint.host().is_none() || endpoint.query().is_some() {
            return Err(Error::invalid(format!("ARM endpoint {endpoint} is not an https:// URL")));
        }
        if !endpoint.path().ends_with('/') {
            let path = format!("{}/", endpoint.path());
            endpoint.set_path(&path);
        }
        let http = http_client(config.extra_ca_pem.as_deref())?;
        let credential = credential(&config, http.clone())?;
        let scope = format!("{}.default", endpoint.as_str());
        Ok(AzureProvider {
            arm: Arm { http, credential, endpoint, scope, timeout: config.timeout },
            subscription_id: config.subscription_id,
            resource_group: config.resource_group,
            image_operations: Mutex::new(HashMap::new()),
        })
    }

    fn vm_path(vm: &AzureScaleSetVm) -> String {
        format!("{}/virtualMachines/{}", vm.scale_set_id(), vm.instance_id)
    }

    async fn vms(&self, scale_set: &ScaleSetRef) -> Result<Vec<ScaleSetVm>> {
        let mut vms = Vec::new();
        let mut next = Some(format!("{}/virtualMachines", scale_set.path()));
        while let Some(url) = next.take() {
            let page: Page<ScaleSetVm> = self.arm.get(&url, "the scale set's VMs").await?;
            vms.extend(page.value);
            next = page.next_link;
        }
        Ok(vms)
    }

    async fn operation(&self, url: &str) -> Result<OperationStatus> {
        self.arm.get(url, "an operation's status").await
    }
}

/// The HTTP client of ARM and Entra: reqwest on rustls with the system's roots and `extra_ca`, no redirects.
fn http_client(extra_ca: Option<&[u8]>) -> Result<Arc<dyn HttpClient>> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    if let Some(pem) = extra_ca {
        let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| Error::invalid(format!("extra CA: {e}")))?;
        if certs.is_empty() {
            return Err(Error::invalid("extra CA: no PEM certificate in it"));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    let client = builder.build().map_err(|e| Error::invalid(format!("HTTP client: {e}")))?;
    Ok(Arc::new(client))
}

fn credential(config: &AzureConfig, http: Arc<dyn HttpClient>) -> Result<Arc<dyn TokenCredential>> {
    let client_options = || ClientOptions {
        transport: Some(Transport::new(http.clone())),
        cloud: config.authority_host.as_ref().map(|host| {
            let mut custom = CustomConfiguration::default();
            custom.authority_host = host.clone();
            Arc::new(CloudConfiguration::Custom(custom))
        }),
        ..ClientOptions::default()
    };
    let workload = |tenant_id: Option<String>, client_id: Option<String>, token_file: Option<PathBuf>| {
        let options = WorkloadIdentityCredentialOptions {
            credential_options: ClientAssertionCredentialOptions { client_options: client_options() },
            client_id,
            tenant_id,
            token_file_path: token_file,
        };
        WorkloadIdentityCredential::new(Some(options)).map(|c| c as Arc<dyn TokenCredential>)
    };
    let managed = |client_id: Option<String>| {
        let options = ManagedIdentityCredentialOptions {
            user_assigned_id: client_id.map(UserAssignedId::ClientId),
            client_options: client_options(),
        };
        ManagedIdentityCredential::new(Some(options)).map(|c| c as Arc<dyn TokenCredential>)
    };
    let built = match &config.credential {
        Credential::WorkloadIdentity { tenant_id, client_id, token_file } => {
            workload(Some(tenant_id.clone()), Some(client_id.clone()), Some(token_file.clone()))
        }
        Credential::ManagedIdentity { client_id } => managed(client_id.clone()),
        Credential::FromEnvironment if std::env::var_os("AZURE_FEDERATED_TOKEN_FILE").is_some() => {
            workload(None, None, None)
        }
        Credential::FromEnvironment => managed(std::env::var("AZURE_CLIENT_ID").ok().filter(|id| !id.is_empty())),
    };
    built.map_err(|e| Error::invalid(format!("Azure credentials: {e}")))
}

/// The error code that names a scale set whose settings the provider refuses to act on.
pub const UNSUPPORTED_SETTINGS: &str = "UnsupportedScaleSetSettings";

/// Refuses a scale set whose settings defeat the replacement, before anything is changed:
/// - `overprovision` on (Azure's default when absent): a scale-out creates extra VMs and deletes the surplus, so
///   the "lowest new instance ID" a creation is matched to may be a VM Azure deletes;
/// - `upgradePolicy.mode` `Automatic` or `Rolling`: an image change of the model is rolled to every existing VM
///   by Azure, behind the rollout's back (`Manual`, the default, leaves them alone).
///
/// (Microsoft.Compute 2024-07-01 `VirtualMachineScaleSetProperties.overprovision`, `UpgradePolicy.mode`;
/// Constellation creates its scale sets with overprovisioning off and a manual upgrade policy.)
fn check_settings(name: &str, scale_set: &ScaleSet) -> Result<()> {
    let properties = &scale_set.properties;
    let mut wrong = Vec::new();
    if properties.overprovision != Some(false) {
        wrong.push("overprovision is on (set properties.overprovision to false)".to_owned());
    }
    let mode = properties.upgrade_policy.as_ref().and_then(|p| p.mode.as_deref()).unwrap_or("Manual");
    if !mode.eq_ignore_ascii_case("Manual") {
        wrong.push(format!("upgradePolicy.mode is {mode} (set it to Manual)"));
    }
    if wrong.is_empty() {
        return Ok(());
    }
    Err(Error::invalid(format!("{UNSUPPORTED_SETTINGS}: scale set {name}: {}; nothing was changed", wrong.join(", "))))
}

/// A scale set VM's ID spelt as cloud-provider-azure writes it into `spec.providerID`: the resource group in
/// lower case (`convertResourceGroupNameToLower`, kubernetes-sigs/cloud-provider-azure `pkg/provider/azure_wrap.go`),
/// the rest as given. ARM IDs are case-insensitive ([`ProviderId`] compares them so), but Nodes are matched by
/// their `spec.providerID` string in places that cannot parse it (PendingNodes' watch, the replacer's sets), so the
/// IDs this provider hands out are spelt as the Nodes'.
fn node_spelling(mut vm: AzureScaleSetVm) -> AzureScaleSetVm {
    vm.resource_group = vm.resource_group.to_ascii_lowercase();
    vm
}

/// The scale set's ID spelt as [`node_spelling`] spells its VMs'.
fn node_spelling_of_scale_set(scale_set: &ScaleSetRef) -> String {
    node_spelling(AzureScaleSetVm {
        subscription: scale_set.subscription.clone(),
        resource_group: scale_set.resource_group.clone(),
        scale_set: scale_set.name.clone(),
        instance_id: String::new(),
    })
    .scale_set_id()
}

fn azure_vm(instance: &ProviderId) -> Result<&AzureScaleSetVm> {
    match instance {
        ProviderId::Azure(vm) => Ok(vm),
        other => Err(Error::invalid(format!("{other} is not an Azure scale set VM"))),
    }
}

fn model_image(scale_set: &ScaleSet) -> Option<ImageReference> {
    scale_set.properties.virtual_machine_profile.as_ref()?.storage_profile.as_ref()?.image_reference.clone()
}

/// The typed error of a failed operation.
fn operation_error(status: &OperationStatus) -> Error {
    let (code, message) = status.error.as_ref().map(|e| (e.code.clone(), e.message.clone())).unwrap_or_default();
    let text = format!("operation {}: {code}: {message}", status.status);
    let lower = code.to_ascii_lowercase();
    if lower.contains("quota")
        || lower.contains("allocationfailed")
        || (lower == "operationnotallowed" && message.to_ascii_lowercase().contains("quota"))
    {
        Error::QuotaExceeded { message: text }
    } else {
        Error::permanent(text)
    }
}

/// The whole image reference for a PATCH: the unused kinds null, so that ARM's merge drops the old kind.
fn image_patch(reference: &ImageReference) -> serde_json::Value {
    serde_json::json!({
        "properties": {"virtualMachineProfile": {"storageProfile": {"imageReference": {
            "id": reference.id,
            "sharedGalleryImageId": reference.shared_gallery_image_id,
            "communityGalleryImageId": reference.community_gallery_image_id,
            "publisher": reference.publisher,
            "offer": reference.offer,
            "sku": reference.sku,
            "version": reference.version,
        }}}}
    })
}

fn succeeded(state: Option<&str>) -> bool {
    state.is_none_or(|s| s.eq_ignore_ascii_case("Succeeded"))
}

fn tag_number(scale_set: &ScaleSet, key: &str) -> Option<u32> {
    scale_set.tags.get(key).and_then(|v| v.trim().parse().ok())
}

/// A DNS-1123 label from a scale set's name (ScaleSet object names).
fn label(name: &str) -> String {
    let mut label: String =
        name.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    label.truncate(63);
    let trimmed = label.trim_matches('-');
    if trimmed.is_empty() { "scale-set".to_owned() } else { trimmed.to_owned() }
}

#[async_trait]
impl CloudProvider for AzureProvider {
    fn cloud(&self) -> Cloud {
        Cloud::Azure
    }

    async fn instance_image(&self, instance: &ProviderId) -> Result<String> {
        let vm: ScaleSetVm = self.arm.get(&Self::vm_path(azure_vm(instance)?), "a VM").await?;
        vm.properties
            .storage_profile
            .and_then(|s| s.image_reference)
            .and_then(|r| r.image())
            .ok_or_else(|| Error::permanent(format!("VM {instance} has no image reference")))
    }

    async fn instance_group(&self, instance: &ProviderId) -> Result<GroupId> {
        let vm = azure_vm(instance)?;
        let _: ScaleSetVm = self.arm.get(&Self::vm_path(vm), "a VM").await?;
        Ok(GroupId(vm.scale_set_id()))
    }

    async fn create_instance(&self, group: &GroupId) -> Result<Creation> {
        let target = ScaleSetRef::parse(group)?;
        let scale_set: ScaleSet = self.arm.get(&target.path(), "a scale set").await?;
        check_settings(&target.name, &scale_set)?;
        let capacity = scale_set.sku.capacity.unwrap_or(0);
        let max = tag_number(&scale_set, MAX_TAG).unwrap_or(DEFAULT_MAX);
        if capacity >= u64::from(max) {
            return Err(Error::invalid(format!("scale set {} is at its maximum size {max}", target.name)));
        }
        // Read after the scale set: a change by someone else in between fails the If-Match below.
        let after = self.vms(&target).await?.iter().filter_map(|vm| vm.instance_id.parse::<u64>().ok()).max();
        let body = serde_json::json!({"sku": {"capacity": capacity + 1}});
        let answer =
            self.arm.send(Method::Patch, self.arm.url(&target.path())?, Some(&body), scale_set.etag.as_deref()).await?;
        let token = Token { scale_set: target.name, after, operation: answer.operation };
        Ok(Creation::Pending(CreationToken(token.encode())))
    }

    async fn created_instance(&self, group: &GroupId, token: &CreationToken) -> Result<Option<NewInstance>> {
        let target = ScaleSetRef::parse(group)?;
        let parsed = Token::decode(&token.0)
            .filter(|t| t.scale_set.eq_ignore_ascii_case(&target.name))
            .ok_or_else(|| Error::invalid(format!("{:?} is not a creation token of {}", token.0, target.name)))?;
        let vms = self.vms(&target).await?;
        let newest = vms
            .iter()
            .filter_map(|vm| vm.instance_id.parse::<u64>().ok().map(|id| (id, vm)))
            .filter(|(id, _)| parsed.after.is_none_or(|after| *id > after))
            .min_by_key(|(id, _)| *id);
        if let Some((id, vm)) = newest {
            let Some(name) = vm.properties.os_profile.as_ref().and_then(|o| o.computer_name.as_deref()) else {
                return Ok(None);
            };
            let provider_id = ProviderId::Azure(node_spelling(AzureScaleSetVm {
                subscription: target.subscription,
                resource_group: target.resource_group,
                scale_set: target.name,
                instance_id: id.to_string(),
            }));
            return Ok(Some(NewInstance { provider_id, node_name: name.to_ascii_lowercase() }));
        }
        if let Some(operation) = &parsed.operation {
            let status = self.operation(operation).await?;
            if status.status.eq_ignore_ascii_case("Failed") || status.status.eq_ignore_ascii_case("Canceled") {
                return Err(operation_error(&status));
            }
        }
        Ok(None)
    }

    async fn delete_instance(&self, group: &GroupId, instance: &ProviderId) -> Result<Deletion> {
        let target = ScaleSetRef::parse(group)?;
        let vm = azure_vm(instance)?;
        if !target.same(vm) {
            return Err(Error::invalid(format!("{instance} is not a VM of scale set {}", target.name)));
        }
        let current: ScaleSetVm = match self.arm.get(&Self::vm_path(vm), "a VM").await {
            Ok(current) => current,
            Err(Error::NotFound { .. }) => return Ok(Deletion::AlreadyGone),
            Err(error) => return Err(error),
        };
        if current.properties.provisioning_state.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("Deleting")) {
            return Ok(Deletion::Started);
        }
        let body = serde_json::json!({"instanceIds": [vm.instance_id]});
        let url = self.arm.url(&format!("{}/delete", target.path()))?;
        match self.arm.send(Method::Post, url, Some(&body), None).await {
            Ok(_) => Ok(Deletion::Started),
            Err(Error::NotFound { .. }) => Ok(Deletion::AlreadyGone),
            Err(error) => Err(error),
        }
    }

    async fn instance_state(&self, instance: &ProviderId) -> Result<InstanceState> {
        let path = format!("{}/instanceView", Self::vm_path(azure_vm(instance)?));
        match self.arm.get::<InstanceView>(&path, "a VM's instance view").await {
            Ok(view) => Ok(view.state()),
            Err(Error::NotFound { .. }) => Ok(InstanceState::Terminated),
            Err(error) => Err(error),
        }
    }

    async fn group_image(&self, group: &GroupId) -> Result<String> {
        let target = ScaleSetRef::parse(group)?;
        let scale_set: ScaleSet = self.arm.get(&target.path(), "a scale set").await?;
        // Refused here too, so that the ScalingGroup's Synced condition names the settings before any change.
        check_settings(&target.name, &scale_set)?;
        model_image(&scale_set)
            .and_then(|r| r.image())
            .ok_or_else(|| Error::permanent(format!("scale set {} has no image in its model", target.name)))
    }

    async fn set_group_image(&self, group: &GroupId, image: &str) -> Result<ImageUpdate> {
        let target = ScaleSetRef::parse(group)?;
        let wanted = ImageReference::parse(image)?;
        let key = target.path().to_ascii_lowercase();
        let pending = self.image_operations.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        if let Some((pending_image, operation)) = pending.filter(|(i, _)| i.eq_ignore_ascii_case(image)) {
            let status = self.operation(&operation).await?;
            let finished = !status.status.eq_ignore_ascii_case("InProgress");
            if finished {
                self.image_operations.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
            }
            return match status.status.as_str() {
                s if s.eq_ignore_ascii_case("Succeeded") => Ok(ImageUpdate::Applied),
                s if s.eq_ignore_ascii_case("InProgress") => Ok(ImageUpdate::InProgress),
                _ => Err(operation_error(&status)).map_err(|e| {
                    tracing::warn!(image = pending_image, error = %e, "a scale set's image change failed");
                    e
                }),
            };
        }
        let scale_set: ScaleSet = self.arm.get(&target.path(), "a scale set").await?;
        check_settings(&target.name, &scale_set)?;
        if model_image(&scale_set).is_some_and(|current| current.same_image(&wanted)) {
            return Ok(if succeeded(scale_set.properties.provisioning_state.as_deref()) {
                ImageUpdate::Applied
            } else {
                ImageUpdate::InProgress
            });
        }
        let answer =
            self.arm.send(Method::Patch, self.arm.url(&target.path())?, Some(&image_patch(&wanted)), None).await?;
        let state = if answer.status == 200 {
            answer.json::<ScaleSet>("the updated scale set")?.properties.provisioning_state
        } else {
            None
        };
        if answer.status == 200 && succeeded(state.as_deref()) {
            return Ok(ImageUpdate::Applied);
        }
        if let Some(operation) = answer.operation {
            self.image_operations.lock().unwrap_or_else(|e| e.into_inner()).insert(key, (image.to_owned(), operation));
        }
        Ok(ImageUpdate::InProgress)
    }

    async fn list_groups(&self, cluster: &ClusterTag) -> Result<Vec<GroupInfo>> {
        let mut next = Some(format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Compute/virtualMachineScaleSets",
            self.subscription_id, self.resource_group
        ));
        let mut groups = Vec::new();
        while let Some(url) = next.take() {
            let page: Page<ScaleSet> = self.arm.get(&url, "the resource group's scale sets").await?;
            for scale_set in page.value {
                if scale_set.tags.get(&cluster.key) != Some(&cluster.value) {
                    continue;
                }
                let role = match scale_set.tags.get(ROLE_TAG).map(|r| r.to_ascii_lowercase()).as_deref() {
                    Some("control-plane" | "controlplane") => GroupRole::ControlPlane,
                    _ => GroupRole::Worker,
                };
                // List calls may spell the resource group in upper case: the group ID is spelt as the scale set
                // of its Nodes' provider IDs is (`controller::groups::instances::named_group`).
                let id = ScaleSetRef::parse(&GroupId(scale_set.id.clone()))
                    .map(|r| GroupId(node_spelling_of_scale_set(&r)))
                    .unwrap_or_else(|_| GroupId(scale_set.id.clone()));
                groups.push(GroupInfo {
                    id,
                    name: label(&scale_set.name),
                    role,
                    autoscaler_group_name: scale_set.name.clone(),
                    min: tag_number(&scale_set, MIN_TAG).unwrap_or(0),
                    max: tag_number(&scale_set, MAX_TAG).unwrap_or(DEFAULT_MAX),
                });
            }
            next = page.next_link;
        }
        groups.sort_by_key(|g| g.id.as_str().to_ascii_lowercase());
        Ok(groups)
    }

    async fn group_instances(&self, group: &GroupId) -> Result<GroupMembers> {
        self.members(&ScaleSetRef::parse(group)?).await
    }

    /// Deletions in batches of up to [`batch::DELETE_BATCH`] (module `batch`); creations one at a time (a creation
    /// token matches the lowest new instance ID, one creation per capacity change).
    fn batch_limit(&self) -> BatchLimit {
        BatchLimit { create: 1, delete: batch::DELETE_BATCH }
    }

    async fn delete_instances(&self, group: &GroupId, instances: &[ProviderId]) -> Result<Vec<Result<Deletion>>> {
        self.delete_vms(group, instances).await
    }

    fn autoscaler_group_name(&self, group: &GroupId) -> Result<String> {
        Ok(ScaleSetRef::parse(group)?.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_stay_short() {
        let token = Token { scale_set: "Workers".into(), after: Some(7), operation: Some("https://x/op?a=1;b".into()) };
        let decoded = Token::decode(&token.encode());
        assert_eq!(decoded, Some(Token { scale_set: "workers".into(), ..token }));
        let none = Token { scale_set: "w".into(), after: None, operation: None };
        assert_eq!(Token::decode(&none.encode()), Some(none));
        let long = Token { scale_set: "w".into(), after: Some(1), operation: Some("x".repeat(2000)) };
        assert!(long.encode().len() <= 1024);
        assert_eq!(Token::decode(&long.encode()).and_then(|t| t.operation), None);
        for bad in ["", "azure-vmss-create;", "azure-vmss-create;w;x;", "simulated"] {
            assert_eq!(Token::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn scale_set_ids_parse_case_insensitively_and_others_are_invalid() {
        let id = GroupId::from(
            "/subscriptions/0d202bbb-4fa7-4af8-8125-58c269a05435/resourceGroups/rg/providers/microsoft.compute/virtualMachineScaleSets/ss",
        );
        let parsed = ScaleSetRef::parse(&id).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.name, "ss");
        for bad in ["ss", "", "projects/p/zones/z/instanceGroupManagers/m", "/subscriptions/s/resourceGroups/rg"] {
            assert!(matches!(ScaleSetRef::parse(&GroupId::from(bad)), Err(Error::Invalid { .. })), "{bad:?}");
        }
        assert_eq!(label("CP_Scale.Set"), "cp-scale-set");
    }
}
