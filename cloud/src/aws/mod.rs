//! The AWS provider: EC2 Auto Scaling groups and their launch templates; Auto Scaling through the AWS SDK for
//! Rust (`aws-sdk-autoscaling`), EC2 through a small client of the EC2 Query API (module [`ec2`]: the four EC2
//! actions below, signed with `aws-sigv4`, with the SDK configuration's region, endpoint and credentials).
//!
//! # Calls (each method's requests; the IAM actions are listed in README.md, "Cloud providers", "AWS")
//! | Method | Requests |
//! |---|---|
//! | `list_groups` | `autoscaling:DescribeAutoScalingGroups` (filter `tag:<key>=<value>`, every page) |
//! | `create_instance` | `DescribeAutoScalingGroups`, `autoscaling:SetDesiredCapacity` (+1) |
//! | `created_instance` | `DescribeAutoScalingGroups`, then `ec2:DescribeInstances` of the new instance |
//! | `delete_instance` | `autoscaling:DescribeAutoScalingInstances`, `autoscaling:TerminateInstanceInAutoScalingGroup` (decrement) |
//! | `instance_state`, `instance_image` | `ec2:DescribeInstances` |
//! | `instance_group` | `DescribeAutoScalingInstances` |
//! | `group_instances` | `DescribeAutoScalingGroups` of the group (module `members`) |
//! | `group_image` | `DescribeAutoScalingGroups`, `ec2:DescribeLaunchTemplateVersions` |
//! | `set_group_image` | those two, then `ec2:CreateLaunchTemplateVersion` and `ec2:ModifyLaunchTemplate` when needed |
//!
//! The `autoscaling:` requests go through the SDK's client, the `ec2:` ones through [`ec2::Ec2Client`] (the EC2 Query
//! API, version 2016-11-15); both sign with SigV4 and the same credentials, and map errors by the same rules
//! (module `errors`).
//!
//! # Guarantees
//! - One attempt per request (the SDK's retries are off, the EC2 client makes none; [`crate::Governed`] retries),
//!   each bounded by [`REQUEST_TIMEOUT`]; no call waits for a state.
//! - Group IDs are Auto Scaling group names; a group whose instances come from a launch configuration, or from a
//!   mixed-instances policy whose overrides name their own launch template or image, is refused with
//!   [`Error::Invalid`] (one launch template must decide the image).
//! - Creation tokens carry the instances the group had before it grew (module `token`): they survive restarts.

mod credentials;
pub mod ec2;
mod errors;
mod members;
mod query;
mod signing;
mod token;
mod xml;

use crate::error::{Error, Result};
use crate::provider::{
    CloudProvider, ClusterTag, Creation, CreationToken, Deletion, GroupId, GroupInfo, GroupMembers, GroupRole,
    ImageUpdate, InstanceState, NewInstance,
};
use crate::provider_id::{AwsInstance, Cloud, ProviderId};
use async_trait::async_trait;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, ConfigLoader, Region, SdkConfig};
use aws_sdk_autoscaling::types::{AutoScalingGroup, Filter, LaunchTemplateSpecification};
use aws_smithy_http_client::tls::{Provider as TlsProvider, rustls_provider::CryptoMode};
use ec2::{Ec2Client, TemplateRef};
use errors::map_sdk_error;
use std::time::Duration;

/// The SDK crates, for callers that build an [`SdkConfig`] (tests against moto set up groups with them; EC2
/// resources with [`ec2::Ec2Client`]).
pub mod sdk {
    pub use aws_config;
    pub use aws_sdk_autoscaling;
}

/// How long one request may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The tag whose value names a group's role: `control-plane` (also `controlplane`) or `worker` (the default).
pub const ROLE_TAG: &str = "constellation-role";

/// Pages of `DescribeAutoScalingGroups` read at most by `list_groups` (100 groups each).
const MAX_PAGES: usize = 50;

/// The AWS provider.
#[derive(Clone, Debug)]
pub struct AwsProvider {
    autoscaling: aws_sdk_autoscaling::Client,
    ec2: Ec2Client,
}

impl AwsProvider {
    /// The configuration loader of the provider's clients: latest behavior version, `region`, the hyper 1 client
    /// with rustls on ring, no SDK retries, [`REQUEST_TIMEOUT`] (the EC2 client takes the region, endpoint and
    /// credentials from it and has the same timeouts and TLS of its own). Credentials come from the default chain
    /// (environment, web identity token (IRSA), EKS Pod Identity / container credentials, instance profile); the
    /// endpoint is AWS's unless `AWS_ENDPOINT_URL` is set (for tests against moto only).
    pub fn config_loader(region: &str) -> ConfigLoader {
        let http =
            aws_smithy_http_client::Builder::new().tls_provider(TlsProvider::Rustls(CryptoMode::Ring)).build_https();
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(10))
            .operation_attempt_timeout(REQUEST_TIMEOUT)
            .operation_timeout(REQUEST_TIMEOUT)
            .build();
        aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region.to_owned()))
            .http_client(http)
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts)
    }

    /// The provider for `region` with the default credential chain (see [`AwsProvider::config_loader`]).
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty region.
    pub async fn from_env(region: &str) -> Result<AwsProvider> {
        if region.trim().is_empty() {
            return Err(Error::invalid("the AWS region is empty"));
        }
        Ok(AwsProvider::new(&AwsProvider::config_loader(region).load().await))
    }

    /// The provider with the clients of `config`.
    pub fn new(config: &SdkConfig) -> AwsProvider {
        AwsProvider { autoscaling: aws_sdk_autoscaling::Client::new(config), ec2: Ec2Client::new(config) }
    }

    /// The group, or `NotFound`.
    async fn describe_group(&self, group: &GroupId) -> Result<AutoScalingGroup> {
        let name = group_name(group)?;
        let answer = self
            .autoscaling
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(name)
            .send()
            .await
            .map_err(|e| map_sdk_error("DescribeAutoScalingGroups", e))?;
        answer
            .auto_scaling_groups()
            .iter()
            .find(|g| g.auto_scaling_group_name() == Some(name))
            .cloned()
            .ok_or_else(|| Error::not_found(format!("Auto Scaling group {name}")))
    }

    /// The EC2 instance, or `None` when EC2 does not know it.
    async fn describe_instance(&self, instance_id: &str) -> Result<Option<ec2::Instance>> {
        match self.ec2.describe_instances(&[instance_id]).await {
            Ok(instances) => Ok(instances.into_iter().find(|i| i.instance_id == instance_id)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The Auto Scaling group and lifecycle state of an instance, or `None` when it is in no group.
    async fn describe_group_instance(&self, instance_id: &str) -> Result<Option<(String, String)>> {
        let answer = self
            .autoscaling
            .describe_auto_scaling_instances()
            .instance_ids(instance_id)
            .send()
            .await
            .map_err(|e| map_sdk_error("DescribeAutoScalingInstances", e))?;
        Ok(answer.auto_scaling_instances().iter().find(|i| i.instance_id() == Some(instance_id)).map(|i| {
            (
                i.auto_scaling_group_name().unwrap_or_default().to_owned(),
                i.lifecycle_state().unwrap_or_default().to_owned(),
            )
        }))
    }

    /// The given versions (`$Default`, `$Latest`, numbers) of a template, with their images.
    async fn template_versions(&self, template: &Template, versions: &[&str]) -> Result<Vec<TemplateVersion>> {
        let answer = self.ec2.describe_launch_template_versions(template.reference(), versions).await?;
        Ok(answer
            .into_iter()
            .map(|v| TemplateVersion { number: v.number, default: v.default, image: v.image_id.unwrap_or_default() })
            .collect())
    }
}

/// A group's launch template and the version it launches.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Template {
    id: Option<String>,
    name: String,
    version: TemplateVersionRef,
}

impl Template {
    /// How requests name the template: by ID when the group does.
    fn reference(&self) -> TemplateRef<'_> {
        match &self.id {
            Some(id) => TemplateRef::Id(id),
            None => TemplateRef::Name(&self.name),
        }
    }
}

/// The version of a template a group uses.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TemplateVersionRef {
    Default,
    Latest,
    Number(i64),
}

#[derive(Debug, Clone)]
struct TemplateVersion {
    number: i64,
    default: bool,
    image: String,
}

/// The launch template that decides the image of `group`'s new instances.
fn template_of(id: &GroupId, group: &AutoScalingGroup) -> Result<Template> {
    let spec: &LaunchTemplateSpecification = if let Some(spec) = group.launch_template() {
        spec
    } else if let Some(policy) = group.mixed_instances_policy() {
        let template = policy.launch_template().ok_or_else(|| {
            Error::invalid(format!("group {id} has a mixed-instances policy without a launch template"))
        })?;
        if template.overrides().iter().any(|o| o.launch_template_specification().is_some() || o.image_id().is_some()) {
            return Err(Error::invalid(format!(
                "group {id} has a mixed-instances policy whose overrides name their own launch template or image; \
                 node replacement needs one launch template to decide the image"
            )));
        }
        template.launch_template_specification().ok_or_else(|| {
            Error::invalid(format!("group {id} has a mixed-instances policy without a launch template"))
        })?
    } else if group.launch_configuration_name().is_some() {
        return Err(Error::invalid(format!(
            "group {id} uses a launch configuration; only launch templates are supported"
        )));
    } else {
        return Err(Error::invalid(format!("group {id} has no launch template")));
    };
    let version = match spec.version().unwrap_or("$Default") {
        v if v.eq_ignore_ascii_case("$Default") => TemplateVersionRef::Default,
        v if v.eq_ignore_ascii_case("$Latest") => TemplateVersionRef::Latest,
        v => TemplateVersionRef::Number(
            v.parse().map_err(|_| Error::invalid(format!("group {id} uses launch template version {v:?}")))?,
        ),
    };
    let (template_id, name) = (spec.launch_template_id(), spec.launch_template_name());
    if template_id.is_none() && name.is_none() {
        return Err(Error::invalid(format!("group {id} names its launch template neither by ID nor by name")));
    }
    Ok(Template { id: template_id.map(str::to_owned), name: name.unwrap_or_default().to_owned(), version })
}

/// The Auto Scaling group name of a group ID: a name (1 to 255 characters without control characters or `/`; IDs
/// of other clouds are refused), or the group's ARN (`arn:...:autoScalingGroup:UUID:autoScalingGroupName/NAME`).
fn group_name(group: &GroupId) -> Result<&str> {
    let id = group.as_str();
    let name = match id.strip_prefix("arn:") {
        Some(arn) => arn.split_once(":autoScalingGroupName/").map_or(id, |(_, name)| name),
        None => id,
    };
    if name.is_empty() || name.len() > 255 || name.contains('/') || name.chars().any(char::is_control) {
        return Err(Error::invalid(format!("{name:?} is not an Auto Scaling group name")));
    }
    Ok(name)
}

/// The instance of an AWS provider ID.
fn aws_instance(id: &ProviderId) -> Result<&AwsInstance> {
    match id {
        ProviderId::Aws(instance) => Ok(instance),
        other => Err(Error::invalid(format!("{other} is not an AWS provider ID"))),
    }
}

/// `aws:///ZONE/ID`, checked like a Node's provider ID.
fn provider_id(zone: &str, instance_id: &str) -> Result<ProviderId> {
    format!("aws:///{zone}/{instance_id}")
        .parse()
        .map_err(|e| Error::permanent(format!("AWS named instance {instance_id} in zone {zone:?}: {e}")))
}

/// An AMI ID: `ami-` and 8 or 17 lowercase hexadecimal digits.
fn check_image(image: &str) -> Result<()> {
    let digits = image.strip_prefix("ami-").unwrap_or_default();
    if matches!(digits.len(), 8 | 17) && digits.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(Error::invalid(format!("{image:?} is not an AMI ID (ami- and 8 or 17 hex digits)")))
    }
}

fn role_of(group: &AutoScalingGroup) -> GroupRole {
    let role = group.tags().iter().find(|t| t.key() == Some(ROLE_TAG)).and_then(|t| t.value()).unwrap_or_default();
    if matches!(role.to_ascii_lowercase().as_str(), "control-plane" | "controlplane" | "control_plane") {
        GroupRole::ControlPlane
    } else {
        GroupRole::Worker
    }
}

/// A DNS-1123 label for the ScalingGroup object of a group: lowercase, other characters `-`, at most 63.
fn object_name(group: &str) -> String {
    let mapped: String =
        group.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).take(63).collect();
    let trimmed = mapped.trim_matches('-');
    if trimmed.is_empty() { "group".to_owned() } else { trimmed.to_owned() }
}

/// The state of an EC2 instance state name.
fn state_of(name: &str) -> Option<InstanceState> {
    Some(match name {
        "pending" => InstanceState::Creating,
        "running" => InstanceState::Ready,
        "stopping" => InstanceState::Stopping,
        "stopped" => InstanceState::Stopped,
        "shutting-down" => InstanceState::Terminating,
        "terminated" => InstanceState::Terminated,
        _ => return None,
    })
}

fn lifecycle_is_terminating(state: &str) -> bool {
    state.starts_with("Terminating")
}

#[async_trait]
impl CloudProvider for AwsProvider {
    fn cloud(&self) -> Cloud {
        Cloud::Aws
    }

    async fn instance_image(&self, instance: &ProviderId) -> Result<String> {
        let id = &aws_instance(instance)?.instance_id;
        let found = self.describe_instance(id).await?.ok_or_else(|| Error::not_found(format!("EC2 instance {id}")))?;
        found.image_id.ok_or_else(|| Error::permanent(format!("EC2 instance {id} has no image")))
    }

    async fn instance_group(&self, instance: &ProviderId) -> Result<GroupId> {
        let id = &aws_instance(instance)?.instance_id;
        match self.describe_group_instance(id).await? {
            Some((group, _)) if !group.is_empty() => Ok(GroupId(group)),
            _ => Err(Error::not_found(format!("EC2 instance {id} in an Auto Scaling group"))),
        }
    }

    async fn create_instance(&self, group: &GroupId) -> Result<Creation> {
        let found = self.describe_group(group).await?;
        // The image must come from one launch template (see set_group_image).
        template_of(group, &found)?;
        let desired = found.desired_capacity().unwrap_or_default();
        let max = found.max_size().unwrap_or_default();
        if desired >= max {
            return Err(Error::invalid(format!("group {group} is at its maximum size {max}")));
        }
        let token = token::issue(group, found.instances().iter().filter_map(|i| i.instance_id()))?;
        self.autoscaling
            .set_desired_capacity()
            .auto_scaling_group_name(group_name(group)?)
            .desired_capacity(desired + 1)
            .honor_cooldown(false)
            .send()
            .await
            .map_err(|e| map_sdk_error("SetDesiredCapacity", e))?;
        Ok(Creation::Pending(token))
    }

    async fn created_instance(&self, group: &GroupId, token: &CreationToken) -> Result<Option<NewInstance>> {
        let before = token::read(group, token)?;
        let found = self.describe_group(group).await?;
        let mut new: Vec<(&str, &str)> = found
            .instances()
            .iter()
            .filter_map(|i| Some((i.instance_id()?, i.availability_zone()?)))
            .filter(|(id, _)| !before.contains(id))
            .collect();
        new.sort_unstable();
        let Some((instance_id, zone)) = new.first().copied() else { return Ok(None) };
        let Some(instance) = self.describe_instance(instance_id).await? else { return Ok(None) };
        let node_name = instance.private_dns_name.unwrap_or_default().to_ascii_lowercase();
        if node_name.is_empty() {
            return Ok(None);
        }
        Ok(Some(NewInstance { provider_id: provider_id(zone, instance_id)?, node_name }))
    }

    async fn delete_instance(&self, group: &GroupId, instance: &ProviderId) -> Result<Deletion> {
        let id = &aws_instance(instance)?.instance_id;
        let name = group_name(group)?;
        let Some((owner, lifecycle)) = self.describe_group_instance(id).await? else {
            return Ok(Deletion::AlreadyGone);
        };
        if owner != name {
            return Err(Error::invalid(format!("EC2 instance {id} belongs to group {owner}, not {name}")));
        }
        if lifecycle == "Terminated" {
            return Ok(Deletion::AlreadyGone);
        }
        if lifecycle_is_terminating(&lifecycle) {
            return Ok(Deletion::Started);
        }
        let answer = self
            .autoscaling
            .terminate_instance_in_auto_scaling_group()
            .instance_id(id)
            .should_decrement_desired_capacity(true)
            .send()
            .await
            .map_err(|e| map_sdk_error("TerminateInstanceInAutoScalingGroup", e));
        match answer {
            Ok(_) => Ok(Deletion::Started),
            // Left the group between the two requests.
            Err(Error::NotFound { .. }) => Ok(Deletion::AlreadyGone),
            Err(error) => Err(error),
        }
    }

    async fn instance_state(&self, instance: &ProviderId) -> Result<InstanceState> {
        let id = &aws_instance(instance)?.instance_id;
        let Some(found) = self.describe_instance(id).await? else { return Ok(InstanceState::Terminated) };
        let state = found.state.as_deref().unwrap_or_default();
        state_of(state).ok_or_else(|| Error::permanent(format!("EC2 instance {id} is in the unknown state {state:?}")))
    }

    async fn group_image(&self, group: &GroupId) -> Result<String> {
        let found = self.describe_group(group).await?;
        let template = template_of(group, &found)?;
        let wanted = match template.version {
            TemplateVersionRef::Default => "$Default".to_owned(),
            TemplateVersionRef::Latest => "$Latest".to_owned(),
            TemplateVersionRef::Number(n) => n.to_string(),
        };
        let versions = self.template_versions(&template, &[&wanted]).await?;
        let version = match template.version {
            TemplateVersionRef::Default => versions.iter().find(|v| v.default),
            TemplateVersionRef::Latest => versions.iter().max_by_key(|v| v.number),
            TemplateVersionRef::Number(n) => versions.iter().find(|v| v.number == n),
        };
        let image = version.map(|v| v.image.clone()).unwrap_or_default();
        if image.is_empty() {
            return Err(Error::permanent(format!(
                "launch template {} version {wanted} of group {group} names no image",
                template.name
            )));
        }
        Ok(image)
    }

    async fn set_group_image(&self, group: &GroupId, image: &str) -> Result<ImageUpdate> {
        check_image(image)?;
        let found = self.describe_group(group).await?;
        let template = template_of(group, &found)?;
        if let TemplateVersionRef::Number(n) = template.version {
            return Err(Error::invalid(format!(
                "group {group} launches version {n} of its launch template; set it to $Default or $Latest so that \
                 new template versions apply"
            )));
        }
        let versions = self.template_versions(&template, &["$Default", "$Latest"]).await?;
        let default = versions.iter().find(|v| v.default);
        let latest = versions.iter().max_by_key(|v| v.number);
        let (Some(default), Some(latest)) = (default, latest) else {
            return Err(Error::permanent(format!("launch template {} has no default version", template.name)));
        };
        // Both $Default and $Latest get the image, whichever the group uses: a retry after a failure between the
        // two writes finishes the change instead of creating another version.
        if default.image == image && latest.image == image {
            return Ok(ImageUpdate::Applied);
        }
        let number = if latest.image == image {
            latest.number
        } else {
            let description = format!("update-operator: image {image}");
            let source = default.number.to_string();
            self.ec2.create_launch_template_version(template.reference(), &source, image, &description).await?
        };
        self.ec2.modify_launch_template(template.reference(), &number.to_string()).await?;
        Ok(ImageUpdate::Applied)
    }

    async fn list_groups(&self, cluster: &ClusterTag) -> Result<Vec<GroupInfo>> {
        let filter = Filter::builder().name(format!("tag:{}", cluster.key)).values(&cluster.value).build();
        let mut groups = Vec::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let answer = self
                .autoscaling
                .describe_auto_scaling_groups()
                .filters(filter.clone())
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| map_sdk_error("DescribeAutoScalingGroups", e))?;
            groups.extend(answer.auto_scaling_groups().iter().cloned());
            next = answer.next_token().filter(|t| !t.is_empty()).map(str::to_owned);
            if next.is_none() {
                break;
            }
        }
        if next.is_some() {
            return Err(Error::permanent(format!("more than {MAX_PAGES} pages of Auto Scaling groups")));
        }
        let mut infos: Vec<GroupInfo> = groups
            .iter()
            // Never another cluster's, whatever the filter did.
            .filter(|g| {
                g.tags()
                    .iter()
                    .any(|t| t.key() == Some(cluster.key.as_str()) && t.value() == Some(cluster.value.as_str()))
            })
            .filter_map(|g| {
                let name = g.auto_scaling_group_name()?;
                Some(GroupInfo {
                    id: GroupId(name.to_owned()),
                    name: object_name(name),
                    role: role_of(g),
                    autoscaler_group_name: name.to_owned(),
                    min: u32::try_from(g.min_size().unwrap_or_default()).unwrap_or_default(),
                    max: u32::try_from(g.max_size().unwrap_or_default()).unwrap_or_default(),
                })
            })
            .collect();
        infos.sort_by(|a, b| a.id.cmp(&b.id));
        infos.dedup_by(|a, b| a.id == b.id);
        Ok(infos)
    }

    async fn group_instances(&self, group: &GroupId) -> Result<GroupMembers> {
        members::members(&self.describe_group(group).await?)
    }

    fn autoscaler_group_name(&self, group: &GroupId) -> Result<String> {
        group_name(group).map(str::to_owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_autoscaling::types::{LaunchTemplate, LaunchTemplateOverrides, MixedInstancesPolicy, TagDescription};

    fn spec(version: Option<&str>) -> LaunchTemplateSpecification {
        LaunchTemplateSpecification::builder()
            .launch_template_id("lt-0123")
            .set_version(version.map(Into::into))
            .build()
    }

    #[test]
    fn the_template_and_version_a_group_launches_are_found_or_refused_clearly() {
        let id = GroupId::from("g");
        let group = AutoScalingGroup::builder().launch_template(spec(None)).build();
        assert_eq!(template_of(&id, &group).unwrap().version, TemplateVersionRef::Default);
        let group = AutoScalingGroup::builder().launch_template(spec(Some("$Latest"))).build();
        assert_eq!(template_of(&id, &group).unwrap().version, TemplateVersionRef::Latest);
        let group = AutoScalingGroup::builder().launch_template(spec(Some("7"))).build();
        assert_eq!(template_of(&id, &group).unwrap().version, TemplateVersionRef::Number(7));

        let mixed = |overrides: Vec<LaunchTemplateOverrides>| {
            let template = LaunchTemplate::builder()
                .launch_template_specification(spec(None))
                .set_overrides(Some(overrides))
                .build();
            AutoScalingGroup::builder()
                .mixed_instances_policy(MixedInstancesPolicy::builder().launch_template(template).build())
                .build()
        };
        let types_only = mixed(vec![LaunchTemplateOverrides::builder().instance_type("m5.large").build()]);
        assert_eq!(template_of(&id, &types_only).unwrap().id.as_deref(), Some("lt-0123"));
        let own_template = mixed(vec![
            LaunchTemplateOverrides::builder()
                .instance_type("m6g.large")
                .launch_template_specification(spec(None))
                .build(),
        ]);
        let error = template_of(&id, &own_template).unwrap_err();
        assert!(matches!(error, Error::Invalid { .. }) && error.to_string().contains("mixed-instances"), "{error}");
        let own_image = mixed(vec![LaunchTemplateOverrides::builder().image_id("ami-12345678").build()]);
        assert!(matches!(template_of(&id, &own_image), Err(Error::Invalid { .. })));

        let legacy = AutoScalingGroup::builder().launch_configuration_name("lc").build();
        assert!(template_of(&id, &legacy).unwrap_err().to_string().contains("launch configuration"));
    }

    #[test]
    fn group_names_images_roles_and_object_names_are_checked() {
        assert_eq!(group_name(&GroupId::from("constellation-worker-x7k2")).unwrap(), "constellation-worker-x7k2");
        let arn = "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:0c4f-11:autoScalingGroupName/workers";
        assert_eq!(group_name(&GroupId::from(arn)).unwrap(), "workers");
        for bad in ["", "projects/p/zones/z/instanceGroupManagers/m", "/subscriptions/s/resourceGroups/r"] {
            assert!(group_name(&GroupId::from(bad)).is_err(), "{bad:?}");
        }
        assert!(check_image("ami-0123456789abcdef0").is_ok());
        assert!(check_image("ami-12345678").is_ok());
        for bad in ["", "v2", "ami-", "ami-XYZ12345", "ami-0123456789ABCDEF0"] {
            assert!(check_image(bad).is_err(), "{bad:?}");
        }
        let tagged = |value: &str| {
            AutoScalingGroup::builder().tags(TagDescription::builder().key(ROLE_TAG).value(value).build()).build()
        };
        assert_eq!(role_of(&tagged("control-plane")), GroupRole::ControlPlane);
        assert_eq!(role_of(&tagged("worker")), GroupRole::Worker);
        assert_eq!(role_of(&AutoScalingGroup::builder().build()), GroupRole::Worker);
        assert_eq!(object_name("Constellation_Worker.x"), "constellation-worker-x");
        assert_eq!(object_name("__"), "group");
        assert_eq!(
            provider_id("us-east-1a", "i-0123456789abcdef0").unwrap().to_string(),
            "aws:///us-east-1a/i-0123456789abcdef0"
        );
        assert!(provider_id("", "i-1").is_err());
    }

    #[test]
    fn every_ec2_instance_state_maps_to_one_of_the_trait() {
        // Every value of the EC2 API's `InstanceStateName`.
        let cases = [
            ("pending", InstanceState::Creating),
            ("running", InstanceState::Ready),
            ("stopping", InstanceState::Stopping),
            ("stopped", InstanceState::Stopped),
            ("shutting-down", InstanceState::Terminating),
            ("terminated", InstanceState::Terminated),
        ];
        for (name, state) in cases {
            assert_eq!(state_of(name), Some(state), "{name:?}");
        }
        assert_eq!(state_of("rebooting"), None);
    }
}
