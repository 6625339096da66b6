//! The cloud-provider trait: the calls node replacement makes to a cloud's scaling groups.

use crate::error::Result;
use crate::provider_id::{Cloud, ProviderId};
use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;

/// A scaling group as its cloud names it: an AWS Auto Scaling group name, an Azure VM Scale Set resource ID
/// (`/subscriptions/.../virtualMachineScaleSets/NAME`), a GCP managed instance group path
/// (`projects/P/zones/Z/instanceGroupManagers/NAME`), a simulated group's name. Opaque to callers; the
/// `spec.groupId` of a ScalingGroup.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub String);

impl GroupId {
    /// The ID as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for GroupId {
    fn from(id: &str) -> Self {
        GroupId(id.to_owned())
    }
}

/// The state of an instance as its cloud reports it (the `cspState` of a PendingNode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum InstanceState {
    /// Being provisioned or booting (AWS `pending`, Azure `Creating`, GCE `PROVISIONING`/`STAGING`).
    Creating,
    /// Running; its node may or may not have joined the cluster yet.
    Ready,
    /// Being stopped.
    Stopping,
    /// Stopped; it exists but does not run.
    Stopped,
    /// Being deleted.
    Terminating,
    /// Deleted, or never existed: an instance the cloud does not know is `Terminated`.
    Terminated,
    /// The cloud failed to create or run it; it does not become Ready by itself.
    Failed,
}

impl InstanceState {
    /// The PascalCase name (as the PendingNode CRD writes `cspState`).
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Creating => "Creating",
            InstanceState::Ready => "Ready",
            InstanceState::Stopping => "Stopping",
            InstanceState::Stopped => "Stopped",
            InstanceState::Terminating => "Terminating",
            InstanceState::Terminated => "Terminated",
            InstanceState::Failed => "Failed",
        }
    }
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An instance a group created: its provider ID and the name its Node will have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInstance {
    /// As the Node's `spec.providerID` will carry it.
    pub provider_id: ProviderId,
    /// The name of the Node the instance registers as (a DNS-1123 subdomain).
    pub node_name: String,
}

/// One instance of a group as [`CloudProvider::group_instances`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInstance {
    /// As its Node's `spec.providerID` carries it.
    pub provider_id: ProviderId,
    /// The name its Node has or will have, as far as the list tells it (AWS: the instance ID, the name
    /// Constellation gives AWS nodes; the PendingNode controller corrects it from the Node with the provider ID).
    pub node_name: String,
    /// Its state.
    pub state: InstanceState,
    /// The image it was created from, when the list tells it (the simulated cloud, Azure's VM list; AWS and GCP
    /// list a launch template version or instance template instead: `None`).
    pub image: Option<String>,
}

/// A group's members as one list request shows them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupMembers {
    /// Every instance the group lists, in every state.
    pub instances: Vec<GroupInstance>,
    /// Creations the group accepted but does not list yet (AWS: desired capacity above the instances launching
    /// or in service; Azure: capacity above the VMs listed; GCP: instances whose creation failed so far), and
    /// members whose state the list cannot tell (left out: ask their [`CloudProvider::instance_state`]). 0 proves
    /// that every instance the group will create is listed.
    pub unlisted: u32,
}

/// A handle on a creation whose instance the cloud has not named yet (see [`CloudProvider::create_instance`]).
/// The string is opaque, at most 1024 bytes, and may be persisted (an annotation) to resume after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CreationToken(pub String);

/// What [`CloudProvider::create_instance`] started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Creation {
    /// The instance exists and is named (it may still be [`InstanceState::Creating`]).
    Created(NewInstance),
    /// The group accepted one more instance but has not named it yet; ask
    /// [`CloudProvider::created_instance`] with the token.
    Pending(CreationToken),
}

/// What [`CloudProvider::delete_instance`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    /// The deletion was started (the instance is [`InstanceState::Terminating`] or already gone).
    Started,
    /// The instance was terminated already, or never existed: nothing was done.
    AlreadyGone,
}

/// What [`CloudProvider::set_group_image`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageUpdate {
    /// New instances of the group get the image from now on.
    Applied,
    /// The change was accepted but is not in effect yet; call again (it is idempotent) until `Applied`.
    InProgress,
}

/// The role of a group's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum GroupRole {
    /// Control-plane nodes (with an etcd member each, on kubeadm clusters).
    ControlPlane,
    /// Worker nodes.
    Worker,
}

/// The tag (AWS, GCP label, Azure tag) that marks a cluster's groups.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClusterTag {
    /// The key, e.g. `constellation-uid`.
    pub key: String,
    /// The cluster's value.
    pub value: String,
}

/// A group of the cluster as [`CloudProvider::list_groups`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    /// Its ID (a ScalingGroup's `groupId`).
    pub id: GroupId,
    /// A short name for the ScalingGroup object (a DNS-1123 label).
    pub name: String,
    /// The role of its nodes, from its role tag.
    pub role: GroupRole,
    /// The name the cluster-autoscaler knows it by.
    pub autoscaler_group_name: String,
    /// The group's minimum size at the cloud.
    pub min: u32,
    /// The group's maximum size at the cloud.
    pub max: u32,
}

/// The operations of a cloud's scaling groups that node replacement needs.
///
/// # Contract (every implementation, checked by [`crate::conformance`] where that feature is on)
/// - **One request per call.** Each method makes at most one attempt at one API request (or a fixed, small
///   number of requests that together are one logical read), and never polls or waits for a state: callers poll
///   [`CloudProvider::instance_state`] and [`CloudProvider::created_instance`] with their own backoff. Retries,
///   backoff and rate limits are added by [`crate::Governed`], not inside providers.
/// - **Typed errors.** Failures are [`crate::Error`] variants that say whether a retry may help; a provider ID of
///   another cloud is [`crate::Error::Invalid`].
/// - **Idempotence.** Every method except `create_instance` may be repeated after any failure with the same
///   effect as one successful call. `create_instance` must only be repeated after an error that
///   [`crate::Error::was_refused`].
/// - **Cancel safety.** Dropping a call's future leaves the provider usable; the request may or may not have
///   reached the cloud.
#[async_trait]
pub trait CloudProvider: Send + Sync {
    /// The cloud whose provider IDs this provider takes.
    fn cloud(&self) -> Cloud;

    /// The image the instance was created from (AWS AMI ID, Azure gallery or marketplace image ID, GCE source
    /// image of the boot disk).
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] when the cloud does not know the instance.
    async fn instance_image(&self, instance: &ProviderId) -> Result<String>;

    /// The scaling group the instance belongs to.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] when the cloud does not know the instance or it belongs to no group.
    async fn instance_group(&self, instance: &ProviderId) -> Result<GroupId>;

    /// Adds one instance to `group`, from the group's current image ([`CloudProvider::group_image`]). Returns
    /// [`Creation::Created`] when the cloud names the instance in its answer (GCP `createInstances` with a
    /// chosen name), else [`Creation::Pending`] with a token (AWS `SetDesiredCapacity`, Azure capacity updates).
    ///
    /// Not idempotent: every successful call adds an instance.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] for an unknown group; [`crate::Error::QuotaExceeded`] when a quota refuses the
    /// instance; [`crate::Error::Invalid`] when the group is at its maximum size.
    async fn create_instance(&self, group: &GroupId) -> Result<Creation>;

    /// The instance a pending creation produced, once the cloud names it; `None` while it does not yet.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a token this provider did not issue for `group`.
    async fn created_instance(&self, group: &GroupId, token: &CreationToken) -> Result<Option<NewInstance>>;

    /// Starts deleting the instance from `group`, lowering the group's size by one (no replacement is started).
    /// Returns once the cloud accepted the deletion; the instance then goes through
    /// [`InstanceState::Terminating`] to [`InstanceState::Terminated`].
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] when the instance belongs to another group. An instance that is gone is no error:
    /// [`Deletion::AlreadyGone`].
    async fn delete_instance(&self, group: &GroupId, instance: &ProviderId) -> Result<Deletion>;

    /// The instance's state. An instance the cloud does not know is [`InstanceState::Terminated`], never an error.
    async fn instance_state(&self, instance: &ProviderId) -> Result<InstanceState>;

    /// The image new instances of `group` are created from (its launch template, scale set model or instance
    /// template).
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] for an unknown group.
    async fn group_image(&self, group: &GroupId) -> Result<String>;

    /// Makes new instances of `group` use `image`. Existing instances are not changed. Idempotent: setting the
    /// image the group has is [`ImageUpdate::Applied`] without a change.
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] for an unknown group; [`crate::Error::Invalid`] for an empty or malformed
    /// image.
    async fn set_group_image(&self, group: &GroupId, image: &str) -> Result<ImageUpdate>;

    /// The groups tagged with `cluster`, in a stable order. Groups of other clusters are never listed.
    async fn list_groups(&self, cluster: &ClusterTag) -> Result<Vec<GroupInfo>>;

    /// The members of `group` and their states, in one list request (AWS `DescribeAutoScalingGroups`, Azure the
    /// scale set's VM list, GCP `listManagedInstances`): an instance request whose answer was lost is resolved
    /// from it (the unknown instance adopted, or none made and a new one requested).
    ///
    /// # Errors
    /// [`crate::Error::NotFound`] for an unknown group; [`crate::Error::Invalid`] from a provider that cannot list
    /// a group's members (the default: the caller then waits for the instance's Node instead).
    async fn group_instances(&self, group: &GroupId) -> Result<GroupMembers> {
        Err(crate::Error::Invalid {
            message: format!("{group}: listing a group's instances is not supported by the {} provider", self.cloud()),
        })
    }

    /// How many instances one [`CloudProvider::create_instances`] and one [`CloudProvider::delete_instances`] call
    /// may carry: more than 1 only where the cloud has a batch call that is one request ([`crate::Governed`] then
    /// sends concurrent creations or deletions of a group that wait for its rate limit together). The default, 1:
    /// no batch call (the batch methods' defaults make one request per instance).
    fn batch_limit(&self) -> BatchLimit {
        BatchLimit::default()
    }

    /// Adds `count` instances to `group` in one request, as `count` [`CloudProvider::create_instance`] calls
    /// would: one result per instance, in order (one instance's failure is that instance's: a quota refusing some
    /// of them, say). Only a failure of the whole request is the outer error (nothing was created when it
    /// [`crate::Error::was_refused`]). Not idempotent.
    ///
    /// The default makes one [`CloudProvider::create_instance`] request per instance, one after the other (a
    /// provider without a batch call: [`BatchLimit::create`] 1).
    ///
    /// # Errors
    /// As [`CloudProvider::create_instance`], for the whole request or per instance.
    async fn create_instances(&self, group: &GroupId, count: usize) -> Result<Vec<Result<Creation>>> {
        let mut results = Vec::with_capacity(count);
        for _ in 0..count {
            results.push(self.create_instance(group).await);
        }
        Ok(results)
    }

    /// Starts deleting `instances` of `group` in one request, as one [`CloudProvider::delete_instance`] call per
    /// instance would: one result per instance, in order. Only a failure of the whole request is the outer error.
    /// Idempotent.
    ///
    /// The default makes one [`CloudProvider::delete_instance`] request per instance.
    ///
    /// # Errors
    /// As [`CloudProvider::delete_instance`], for the whole request or per instance.
    async fn delete_instances(&self, group: &GroupId, instances: &[ProviderId]) -> Result<Vec<Result<Deletion>>> {
        let mut results = Vec::with_capacity(instances.len());
        for instance in instances {
            results.push(self.delete_instance(group, instance).await);
        }
        Ok(results)
    }

    /// The name the cluster-autoscaler knows `group` by (its `--nodes=min:max:NAME` argument). No request: it
    /// is derived from the ID.
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] when `group` is not an ID of this cloud.
    fn autoscaler_group_name(&self, group: &GroupId) -> Result<String>;
}

#[async_trait]
impl<P: CloudProvider + ?Sized> CloudProvider for Arc<P> {
    fn cloud(&self) -> Cloud {
        (**self).cloud()
    }
    async fn instance_image(&self, instance: &ProviderId) -> Result<String> {
        (**self).instance_image(instance).await
    }
    async fn instance_group(&self, instance: &ProviderId) -> Result<GroupId> {
        (**self).instance_group(instance).await
    }
    async fn create_instance(&self, group: &GroupId) -> Result<Creation> {
        (**self).create_instance(group).await
    }
    async fn created_instance(&self, group: &GroupId, token: &CreationToken) -> Result<Option<NewInstance>> {
        (**self).created_instance(group, token).await
    }
    async fn delete_instance(&self, group: &GroupId, instance: &ProviderId) -> Result<Deletion> {
        (**self).delete_instance(group, instance).await
    }
    async fn instance_state(&self, instance: &ProviderId) -> Result<InstanceState> {
        (**self).instance_state(instance).await
    }
    async fn group_image(&self, group: &GroupId) -> Result<String> {
        (**self).group_image(group).await
    }
    async fn set_group_image(&self, group: &GroupId, image: &str) -> Result<ImageUpdate> {
        (**self).set_group_image(group, image).await
    }
    async fn list_groups(&self, cluster: &ClusterTag) -> Result<Vec<GroupInfo>> {
        (**self).list_groups(cluster).await
    }
    async fn group_instances(&self, group: &GroupId) -> Result<GroupMembers> {
        (**self).group_instances(group).await
    }
    fn batch_limit(&self) -> BatchLimit {
        (**self).batch_limit()
    }
    async fn create_instances(&self, group: &GroupId, count: usize) -> Result<Vec<Result<Creation>>> {
        (**self).create_instances(group, count).await
    }
    async fn delete_instances(&self, group: &GroupId, instances: &[ProviderId]) -> Result<Vec<Result<Deletion>>> {
        (**self).delete_instances(group, instances).await
    }
    fn autoscaler_group_name(&self, group: &GroupId) -> Result<String> {
        (**self).autoscaler_group_name(group)
    }
}

/// How many instances one batch call of a provider carries (see [`CloudProvider::batch_limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimit {
    /// Instances per [`CloudProvider::create_instances`] request.
    pub create: usize,
    /// Instances per [`CloudProvider::delete_instances`] request.
    pub delete: usize,
}

impl Default for BatchLimit {
    /// No batch calls: one instance per request.
    fn default() -> Self {
        BatchLimit { create: 1, delete: 1 }
    }
}

/// The operations of [`CloudProvider`], as metric labels and for per-operation policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operation {
    /// [`CloudProvider::instance_image`].
    InstanceImage,
    /// [`CloudProvider::instance_group`].
    InstanceGroup,
    /// [`CloudProvider::create_instance`].
    CreateInstance,
    /// [`CloudProvider::created_instance`].
    CreatedInstance,
    /// [`CloudProvider::delete_instance`].
    DeleteInstance,
    /// [`CloudProvider::instance_state`].
    InstanceState,
    /// [`CloudProvider::group_image`].
    GroupImage,
    /// [`CloudProvider::set_group_image`].
    SetGroupImage,
    /// [`CloudProvider::list_groups`].
    ListGroups,
    /// [`CloudProvider::group_instances`].
    GroupInstances,
    /// [`CloudProvider::create_instances`]: one batch request.
    CreateInstances,
    /// [`CloudProvider::delete_instances`]: one batch request.
    DeleteInstances,
}

impl Operation {
    /// Every operation that reaches the cloud.
    pub const ALL: [Operation; 12] = [
        Operation::InstanceImage,
        Operation::InstanceGroup,
        Operation::CreateInstance,
        Operation::CreatedInstance,
        Operation::DeleteInstance,
        Operation::InstanceState,
        Operation::GroupImage,
        Operation::SetGroupImage,
        Operation::ListGroups,
        Operation::GroupInstances,
        Operation::CreateInstances,
        Operation::DeleteInstances,
    ];

    /// Whether repeating the call after an unknown outcome is safe (everything but creating instances).
    pub fn is_idempotent(self) -> bool {
        !matches!(self, Operation::CreateInstance | Operation::CreateInstances)
    }

    /// snake_case, as metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::InstanceImage => "instance_image",
            Operation::InstanceGroup => "instance_group",
            Operation::CreateInstance => "create_instance",
            Operation::CreatedInstance => "created_instance",
            Operation::DeleteInstance => "delete_instance",
            Operation::InstanceState => "instance_state",
            Operation::GroupImage => "group_image",
            Operation::SetGroupImage => "set_group_image",
            Operation::ListGroups => "list_groups",
            Operation::GroupInstances => "group_instances",
            Operation::CreateInstances => "create_instances",
            Operation::DeleteInstances => "delete_instances",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
