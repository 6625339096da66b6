//! Google Compute Engine zonal managed instance groups (MIGs) as a [`CloudProvider`], through Google's official
//! `google-cloud-compute-v1` client and Application Default Credentials.
//!
//! # Contracts (beyond the trait's)
//! - Groups are MIG paths `projects/PROJECT/zones/ZONE/instanceGroupManagers/NAME`; instances `gce://PROJECT/ZONE/NAME`.
//! - The client never retries ([`NeverRetry`]) and no call waits for an operation: a call that starts one returns,
//!   and the next call looks at the operation once (`zoneOperations.get` / `globalOperations.get`). Retries and rate
//!   limits are [`crate::Governed`]'s.
//! - `set_group_image` is a small state machine, one write per call: copy the current template with the new boot
//!   image (`instanceTemplates.insert`, named deterministically, see [`names::template_for_image`]), then
//!   `setInstanceTemplate`; `InProgress` until the MIG names a template with the image. Once the image is in
//!   effect, each call deletes at most one template the operator made for this MIG that is neither the MIG's nor
//!   used by one of its instances (Constellation never deletes them).
//! - The groups of a cluster are the MIGs whose instance template carries the label `constellation-uid=<uid>`
//!   (`constellation-role` `control-plane` or `controlplane` gives the role, else worker), as Constellation labels
//!   them.

mod errors;
mod image;
mod membership;
pub mod names;

use crate::error::{Error, Result};
use crate::provider::{
    BatchLimit, CloudProvider, ClusterTag, Creation, CreationToken, Deletion, GroupId, GroupInfo, GroupMembers,
    GroupRole, ImageUpdate, InstanceState, NewInstance,
};
use crate::provider_id::{Cloud, GceInstance, ProviderId};
use async_trait::async_trait;
use google_cloud_compute_v1::client::{
    Disks, GlobalOperations, InstanceGroupManagers, InstanceTemplates, Instances, ZoneOperations,
};
use google_cloud_compute_v1::model::{
    self, InstanceGroupManagersCreateInstancesRequest, InstanceGroupManagersDeleteInstancesRequest,
    InstanceGroupManagersSetInstanceTemplateRequest, InstanceTemplate, Operation, PerInstanceConfig, managed_instance,
};
use google_cloud_gax::retry_policy::NeverRetry;
use image::{Started, template_image};
use names::{MigPath, gce, last_segment, normalize_image};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub use google_cloud_auth::credentials;

/// The label of a template that names the cluster (Constellation's).
pub const ROLE_LABEL: &str = "constellation-role";

/// A zonal MIG holds at most this many instances (Compute Engine's limit); MIGs have no bounds of their own.
const MIG_MAX_SIZE: u32 = 1000;

/// The most instances one `createInstances` of this provider carries. The compute v1 reference names no limit
/// for `createInstances` itself (a zonal MIG holds at most 1000 instances); 100 keeps a request small.
pub const CREATE_BATCH: usize = 100;

/// How the provider reaches Compute Engine.
#[derive(Debug, Clone, Default)]
pub struct GcpConfig {
    /// The project whose MIGs `list_groups` lists.
    pub project: String,
    /// Another Compute endpoint than `https://compute.googleapis.com` (for emulators in tests only).
    pub endpoint: Option<String>,
    /// Credentials; Application Default Credentials (`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's file, the
    /// metadata server: GKE workload identity, a VM's service account) without them.
    pub credentials: Option<credentials::Credentials>,
}

/// The GCP provider (see the module docs).
pub struct GcpProvider {
    project: String,
    migs: InstanceGroupManagers,
    instances: Instances,
    disks: Disks,
    templates: InstanceTemplates,
    zone_operations: ZoneOperations,
    global_operations: GlobalOperations,
    /// The operation of each group's image change in progress (in memory: after a restart the state machine
    /// reads where it stands from the MIG and its templates).
    image_changes: Mutex<HashMap<GroupId, Started>>,
    /// Makes instance names unique within this process.
    counter: AtomicU64,
    /// The instances this process asked MIGs to create lately, and when (see `membership`).
    created: Mutex<HashMap<GceInstance, (MigPath, std::time::Instant)>>,
}

macro_rules! client {
    ($client:ty, $config:expr) => {{
        let mut builder = <$client>::builder().with_retry_policy(NeverRetry);
        if let Some(endpoint) = &$config.endpoint {
            builder = builder.with_endpoint(endpoint.clone());
        }
        if let Some(credentials) = &$config.credentials {
            builder = builder.with_credentials(credentials.clone());
        }
        builder.build().await.map_err(|e| Error::Permanent {
            message: format!("building the {} client: {e}", stringify!($client)),
            source: Some(Box::new(e)),
        })?
    }};
}

impl GcpProvider {
    /// A provider for `config.project`; credentials are looked up once here (ADC without explicit ones).
    pub async fn new(config: GcpConfig) -> Result<GcpProvider> {
        if config.project.is_empty() {
            return Err(Error::invalid("the GCP project is empty (--gcp-project)"));
        }
        Ok(GcpProvider {
            migs: client!(InstanceGroupManagers, config),
            instances: client!(Instances, config),
            disks: client!(Disks, config),
            templates: client!(InstanceTemplates, config),
            zone_operations: client!(ZoneOperations, config),
            global_operations: client!(GlobalOperations, config),
            project: config.project,
            image_changes: Mutex::new(HashMap::new()),
            counter: AtomicU64::new(0),
            created: Mutex::new(HashMap::new()),
        })
    }

    async fn get_instance(&self, id: &GceInstance) -> Result<model::Instance> {
        self.instances
            .get()
            .set_project(&id.project)
            .set_zone(&id.zone)
            .set_instance(&id.name)
            .send()
            .await
            .map_err(|e| errors::from_gax(&format!("instances.get {}", id.name), e))
    }

    /// The instance, or `None` when Compute does not know it.
    async fn find_instance(&self, id: &GceInstance) -> Result<Option<model::Instance>> {
        match self.get_instance(id).await {
            Ok(instance) => Ok(Some(instance)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn get_mig(&self, mig: &MigPath) -> Result<model::InstanceGroupManager> {
        self.migs
            .get()
            .set_project(&mig.project)
            .set_zone(&mig.zone)
            .set_instance_group_manager(&mig.name)
            .send()
            .await
            .map_err(|e| errors::from_gax(&format!("instanceGroupManagers.get {}", mig.name), e))
    }

    async fn get_template(&self, project: &str, name: &str) -> Result<InstanceTemplate> {
        self.templates
            .get()
            .set_project(project)
            .set_instance_template(name)
            .send()
            .await
            .map_err(|e| errors::from_gax(&format!("instanceTemplates.get {name}"), e))
    }

    /// The MIG's current template (project and name; global templates only).
    fn template_of(mig_path: &MigPath, mig: &model::InstanceGroupManager) -> Result<(String, String)> {
        let url = mig.instance_template.as_deref().unwrap_or_default();
        let path = names::strip_url(url);
        match path.split('/').collect::<Vec<_>>().as_slice() {
            ["projects", project, "global", "instanceTemplates", name] => {
                Ok(((*project).to_owned(), (*name).to_owned()))
            }
            _ => Err(Error::permanent(format!(
                "{}: the instance template {url:?} is not a global instance template (regional templates are not supported)",
                mig_path.name
            ))),
        }
    }

    /// The managed instances of a MIG (every page).
    async fn managed_instances(&self, mig: &MigPath) -> Result<Vec<model::ManagedInstance>> {
        let mut all = Vec::new();
        let mut page = None::<String>;
        loop {
            let mut request = self
                .migs
                .list_managed_instances()
                .set_project(&mig.project)
                .set_zone(&mig.zone)
                .set_instance_group_manager(&mig.name);
            if let Some(token) = page.take() {
                request = request.set_page_token(token);
            }
            let answer = request.send().await.map_err(|e| {
                errors::from_gax(&format!("instanceGroupManagers.listManagedInstances {}", mig.name), e)
            })?;
            all.extend(answer.managed_instances);
            match answer.next_page_token {
                Some(token) if !token.is_empty() => page = Some(token),
                _ => return Ok(all),
            }
        }
    }

    /// A new instance name in the MIG: `NAME-` and 5 base-36 characters (unique per process and time).
    fn new_instance_name(&self, mig: &MigPath) -> String {
        let count = self.counter.fetch_add(1, Ordering::Relaxed);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mut seed = (nanos as u64) ^ count.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (std::process::id() as u64) << 32;
        let mut suffix = String::with_capacity(5);
        for _ in 0..5 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let digit = ((seed >> 33) % 36) as u8;
            suffix.push(char::from(if digit < 10 { b'0' + digit } else { b'a' + digit - 10 }));
        }
        let keep = mig.name.len().min(63 - 6);
        format!("{}-{suffix}", mig.name[..keep].trim_end_matches('-'))
    }

    /// `deleteInstances` of one instance of `mig`, lowering its target size.
    async fn delete_from_mig(&self, mig: &MigPath, id: &GceInstance, instance: &ProviderId) -> Result<Deletion> {
        self.forget_creation(id);
        let body = InstanceGroupManagersDeleteInstancesRequest::new()
            .set_instances([format!("zones/{}/instances/{}", id.zone, id.name)])
            .set_skip_instances_on_validation_error(true);
        let operation = self
            .migs
            .delete_instances()
            .set_project(&mig.project)
            .set_zone(&mig.zone)
            .set_instance_group_manager(&mig.name)
            .set_body(body)
            .send()
            .await;
        match operation {
            Ok(operation) => match errors::from_operation(&format!("deleting {instance}"), &operation) {
                Some(Error::NotFound { .. }) => Ok(Deletion::AlreadyGone),
                Some(error) => Err(error),
                None => Ok(Deletion::Started),
            },
            Err(error) => match errors::from_gax(&format!("instanceGroupManagers.deleteInstances {}", mig.name), error)
            {
                Error::NotFound { .. } => Ok(Deletion::AlreadyGone),
                other => Err(other),
            },
        }
    }

    /// One `createInstances` of `count` instances with chosen names `MIG-xxxxx` (see [`CloudProvider::create_instance`]).
    async fn create_named(&self, group: &GroupId, count: usize) -> Result<Vec<Creation>> {
        if !(1..=CREATE_BATCH).contains(&count) {
            return Err(Error::invalid(format!(
                "{group}: a createInstances carries 1 to {CREATE_BATCH} instances, not {count}"
            )));
        }
        let mig = MigPath::parse(group)?;
        let names: Vec<String> = (0..count).map(|_| self.new_instance_name(&mig)).collect();
        let body = InstanceGroupManagersCreateInstancesRequest::new()
            .set_instances(names.iter().map(|name| PerInstanceConfig::new().set_name(name)));
        let operation = self
            .migs
            .create_instances()
            .set_project(&mig.project)
            .set_zone(&mig.zone)
            .set_instance_group_manager(&mig.name)
            .set_body(body)
            .send()
            .await
            .map_err(|e| errors::from_gax(&format!("instanceGroupManagers.createInstances {}", mig.name), e))?;
        if let Some(error) = errors::from_operation(&format!("creating {} in {group}", names.join(", ")), &operation) {
            return Err(error);
        }
        // The MIG creates the instances later (module `membership`).
        Ok(names
            .into_iter()
            .map(|name| {
                let instance = GceInstance { project: mig.project.clone(), zone: mig.zone.clone(), name: name.clone() };
                self.remember_creation(&instance, &mig);
                Creation::Created(NewInstance { provider_id: ProviderId::Gce(instance), node_name: name })
            })
            .collect())
    }

    /// The state of an instance that is `STOPPING` or `DEPROVISIONING`: `Terminating` when its MIG is deleting it.
    async fn stopping_or_terminating(&self, id: &GceInstance, instance: &model::Instance) -> Result<InstanceState> {
        let Some(mig) = created_by(instance).and_then(|c| names::mig_of_created_by(id, &c)) else {
            return Ok(InstanceState::Stopping);
        };
        let deleting = self.managed_instances(&mig).await?.into_iter().any(|m| {
            m.name.as_deref() == Some(id.name.as_str())
                && matches!(m.current_action, Some(managed_instance::CurrentAction::Deleting))
        });
        Ok(if deleting { InstanceState::Terminating } else { InstanceState::Stopping })
    }
}

/// Whether the operation is `DONE`.
fn is_done(operation: &Operation) -> bool {
    operation.status.as_ref().and_then(|s| s.name()) == Some("DONE")
}

/// The `created-by` metadata of a MIG's instance.
fn created_by(instance: &model::Instance) -> Option<String> {
    instance
        .metadata
        .as_ref()?
        .items
        .iter()
        .find(|item| item.key.as_deref() == Some("created-by"))
        .and_then(|item| item.value.clone())
}

/// The trait's state of a Compute instance status.
fn state_of(status: Option<&str>) -> InstanceState {
    match status {
        Some("PROVISIONING" | "STAGING" | "PENDING" | "REPAIRING") => InstanceState::Creating,
        Some("RUNNING") => InstanceState::Ready,
        Some("STOPPING" | "SUSPENDING" | "PENDING_STOP" | "DEPROVISIONING") => InstanceState::Stopping,
        Some("STOPPED" | "SUSPENDED" | "TERMINATED") => InstanceState::Stopped,
        _ => InstanceState::Failed,
    }
}

#[async_trait]
impl CloudProvider for GcpProvider {
    fn cloud(&self) -> Cloud {
        Cloud::Gce
    }

    async fn instance_image(&self, instance: &ProviderId) -> Result<String> {
        let id = gce(instance)?;
        let found = self.get_instance(id).await?;
        let disk = found
            .disks
            .iter()
            .find(|d| d.boot == Some(true))
            .and_then(|d| d.source.clone())
            .ok_or_else(|| Error::permanent(format!("{instance} has no boot disk")))?;
        let disk_name = last_segment(&disk).to_owned();
        let disk = self
            .disks
            .get()
            .set_project(&id.project)
            .set_zone(&id.zone)
            .set_disk(&disk_name)
            .send()
            .await
            .map_err(|e| errors::from_gax(&format!("disks.get {disk_name}"), e))?;
        let image = disk
            .source_image
            .ok_or_else(|| Error::permanent(format!("the boot disk {disk_name} of {instance} has no source image")))?;
        normalize_image(&image).map_err(|_| Error::permanent(format!("{instance} boots {image:?}, not an image")))
    }

    async fn instance_group(&self, instance: &ProviderId) -> Result<GroupId> {
        let id = gce(instance)?;
        let found = self.get_instance(id).await?;
        created_by(&found)
            .and_then(|c| names::mig_of_created_by(id, &c))
            .map(|mig| mig.group_id())
            .ok_or_else(|| Error::not_found(format!("{instance} is not in a managed instance group (no created-by)")))
    }

    async fn create_instance(&self, group: &GroupId) -> Result<Creation> {
        let mut created = self.create_named(group, 1).await?;
        created.pop().ok_or_else(|| Error::permanent(format!("{group}: no instance was named")))
    }

    /// `createInstances` with up to [`CREATE_BATCH`] per-instance configs: one request. The MIG reports failures
    /// of single instances later (`listManagedInstances` `lastAttempt.errors`, see `instance_state`), so every
    /// instance of an accepted request is named here; a request refused or whose operation failed is the outer
    /// error (nothing made).
    async fn create_instances(&self, group: &GroupId, count: usize) -> Result<Vec<Result<Creation>>> {
        Ok(self.create_named(group, count).await?.into_iter().map(Ok).collect())
    }

    /// Creations in batches of up to [`CREATE_BATCH`]; deletions one at a time (a deletion checks the instance's
    /// MIG first).
    fn batch_limit(&self) -> BatchLimit {
        BatchLimit { create: CREATE_BATCH, delete: 1 }
    }

    async fn created_instance(&self, group: &GroupId, token: &CreationToken) -> Result<Option<NewInstance>> {
        Err(Error::invalid(format!(
            "{group}: GCP names instances when it creates them and issues no creation tokens ({:?})",
            token.0
        )))
    }

    async fn delete_instance(&self, group: &GroupId, instance: &ProviderId) -> Result<Deletion> {
        let mig = MigPath::parse(group)?;
        let id = gce(instance)?;
        if !mig.holds_zone_of(id) {
            return Err(Error::invalid(format!("{instance} is not in the project and zone of {group}")));
        }
        let Some(found) = self.find_instance(id).await? else {
            // Not created yet, or gone: the MIG still creates an instance it lists (a request for one that is not
            // created yet is taken back, and the target size lowered, only by `deleteInstances`).
            return match self.member(&mig, id).await? {
                membership::Member::Listed(_) => self.delete_from_mig(&mig, id, instance).await,
                // The MIG's list may lag the `createInstances` that asked for it: it may still be created, so it
                // is not gone yet; asked again (the caller retries a transient error).
                membership::Member::Unlisted => Err(Error::transient(format!(
                    "{instance}: {group} does not list it, but counts a creation its list does not show yet; deleted \
                     once the list shows it or the count settles"
                ))),
                membership::Member::Absent => Ok(Deletion::AlreadyGone),
            };
        };
        let owner = created_by(&found).and_then(|c| names::mig_of_created_by(id, &c));
        if owner.as_ref().map(|m| &m.name) != Some(&mig.name) {
            return Err(Error::invalid(format!("{instance} is not an instance of {group}")));
        }
        self.delete_from_mig(&mig, id, instance).await
    }

    async fn instance_state(&self, instance: &ProviderId) -> Result<InstanceState> {
        let id = gce(instance)?;
        let Some(found) = self.find_instance(id).await? else { return self.state_of_unknown(id).await };
        self.forget_creation(id);
        match state_of(found.status.as_ref().and_then(|s| s.name())) {
            InstanceState::Stopping => self.stopping_or_terminating(id, &found).await,
            state => Ok(state),
        }
    }

    async fn group_image(&self, group: &GroupId) -> Result<String> {
        let mig_path = MigPath::parse(group)?;
        let mig = self.get_mig(&mig_path).await?;
        let (project, template) = Self::template_of(&mig_path, &mig)?;
        template_image(&self.get_template(&project, &template).await?)
    }

    async fn set_group_image(&self, group: &GroupId, image: &str) -> Result<ImageUpdate> {
        self.set_image(group, image).await
    }

    async fn list_groups(&self, cluster: &ClusterTag) -> Result<Vec<GroupInfo>> {
        // The templates of the cluster: name -> role.
        let mut roles: HashMap<String, GroupRole> = HashMap::new();
        let mut page = None::<String>;
        loop {
            let mut request = self.templates.list().set_project(&self.project);
            if let Some(token) = page.take() {
                request = request.set_page_token(token);
            }
            let answer = request.send().await.map_err(|e| errors::from_gax("instanceTemplates.list", e))?;
            for template in answer.items {
                let Some(properties) = &template.properties else { continue };
                if properties.labels.get(&cluster.key) != Some(&cluster.value) {
                    continue;
                }
                let role = match properties.labels.get(ROLE_LABEL).map(String::as_str) {
                    Some("control-plane" | "controlplane") => GroupRole::ControlPlane,
                    _ => GroupRole::Worker,
                };
                if let Some(name) = template.name {
                    roles.insert(name, role);
                }
            }
            match answer.next_page_token {
                Some(token) if !token.is_empty() => page = Some(token),
                _ => break,
            }
        }
        let mut groups: BTreeMap<String, GroupInfo> = BTreeMap::new();
        let mut page = None::<String>;
        loop {
            let mut request = self.migs.aggregated_list().set_project(&self.project);
            if let Some(token) = page.take() {
                request = request.set_page_token(token);
            }
            let answer =
                request.send().await.map_err(|e| errors::from_gax("instanceGroupManagers.aggregatedList", e))?;
            for scoped in answer.items.into_values() {
                for mig in scoped.instance_group_managers {
                    let (Some(name), Some(zone)) = (mig.name.as_deref(), mig.zone.as_deref()) else { continue };
                    let path = MigPath {
                        project: self.project.clone(),
                        zone: last_segment(zone).to_owned(),
                        name: name.to_owned(),
                    };
                    let template = mig.instance_template.as_deref().map(last_segment).unwrap_or_default();
                    let Some(role) = roles.get(template) else { continue };
                    let id = path.group_id();
                    groups.insert(
                        id.0.clone(),
                        GroupInfo {
                            autoscaler_group_name: path.autoscaler_name(),
                            id,
                            name: name.to_owned(),
                            role: *role,
                            min: 0,
                            max: MIG_MAX_SIZE,
                        },
                    );
                }
            }
            match answer.next_page_token {
                Some(token) if !token.is_empty() => page = Some(token),
                _ => break,
            }
        }
        Ok(groups.into_values().collect())
    }

    async fn group_instances(&self, group: &GroupId) -> Result<GroupMembers> {
        self.group_members(&MigPath::parse(group)?).await
    }

    fn autoscaler_group_name(&self, group: &GroupId) -> Result<String> {
        Ok(MigPath::parse(group)?.autoscaler_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_statuses_map_to_instance_states() {
        assert_eq!(state_of(Some("PROVISIONING")), InstanceState::Creating);
        assert_eq!(state_of(Some("STAGING")), InstanceState::Creating);
        assert_eq!(state_of(Some("RUNNING")), InstanceState::Ready);
        assert_eq!(state_of(Some("STOPPING")), InstanceState::Stopping);
        // Compute's TERMINATED is a stopped instance, not a deleted one.
        assert_eq!(state_of(Some("TERMINATED")), InstanceState::Stopped);
        assert_eq!(state_of(Some("SUSPENDED")), InstanceState::Stopped);
        assert_eq!(state_of(Some("SOMETHING_NEW")), InstanceState::Failed);
        assert_eq!(state_of(None), InstanceState::Failed);
    }
}
