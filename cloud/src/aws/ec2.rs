//! The EC2 operations of the AWS provider over the EC2 Query API (version 2016-11-15; the transport, signing and
//! errors in the private module `query`): the provider's four, `DescribeInstances` by instance ID,
//! `DescribeLaunchTemplateVersions`, `CreateLaunchTemplateVersion`, `ModifyLaunchTemplate`, and
//! `CreateLaunchTemplate`, which only tests' fixtures make (the provider never creates a template).
//!
//! Parameter names are the EC2 model's query names (`InstanceId.N`, `LaunchTemplateVersion.N`,
//! `SetDefaultVersion`, `LaunchTemplateData.ImageId`); answers are read by the model's XML names
//! (`reservationSet/item/instancesSet/item/instanceId`, `launchTemplateVersionSet/item/versionNumber`, …), as the
//! EC2 API reference documents each action. Only the fields the provider uses are read; a field it cannot do
//! without that is missing or malformed is an [`Error::Permanent`] naming the action and the field.

use super::query::{Params, QueryClient};
use super::xml::Element;
use crate::error::{Error, Result};
use aws_config::SdkConfig;

/// The EC2 API version of every request.
pub const API_VERSION: &str = "2016-11-15";

/// A client of the EC2 operations, with the region, endpoint and credentials of an [`SdkConfig`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Ec2Client {
    query: QueryClient,
}

/// How a request names a launch template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateRef<'a> {
    /// By ID (`lt-…`).
    Id(&'a str),
    /// By name.
    Name(&'a str),
}

impl TemplateRef<'_> {
    fn add_to(self, params: Params) -> Params {
        match self {
            TemplateRef::Id(id) => params.set("LaunchTemplateId", id),
            TemplateRef::Name(name) => params.set("LaunchTemplateName", name),
        }
    }
}

/// What `DescribeInstances` says of an instance (the fields the provider reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// `instanceId`.
    pub instance_id: String,
    /// `imageId`, the AMI.
    pub image_id: Option<String>,
    /// `instanceState/name`: `pending`, `running`, `stopping`, `stopped`, `shutting-down`, `terminated`.
    pub state: Option<String>,
    /// `privateDnsName` (empty until the instance has an address).
    pub private_dns_name: Option<String>,
}

/// A version of a launch template (the fields the provider reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateVersion {
    /// `versionNumber`.
    pub number: i64,
    /// `defaultVersion`: whether it is the template's default version.
    pub default: bool,
    /// `launchTemplateData/imageId`, the AMI of its instances.
    pub image_id: Option<String>,
}

impl Ec2Client {
    /// The client for `config`'s region, endpoint (`endpoint_url()`, else AWS's) and credentials provider.
    pub fn new(config: &SdkConfig) -> Ec2Client {
        Ec2Client { query: QueryClient::new(config, "ec2") }
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &str {
        self.query.endpoint()
    }

    /// `DescribeInstances` of the given instance IDs: the instances EC2 knows (an unknown ID is an
    /// `InvalidInstanceID.NotFound` error, [`Error::NotFound`]).
    ///
    /// # Errors
    /// The request's, as `query` maps them; [`Error::Permanent`] for an answer without the fields.
    pub async fn describe_instances(&self, instance_ids: &[&str]) -> Result<Vec<Instance>> {
        let answer = self.query.call("DescribeInstances", &describe_instances_params(instance_ids)).await?;
        instances_of(&answer)
    }

    /// `DescribeLaunchTemplateVersions` of `versions` (`$Default`, `$Latest`, numbers) of `template`.
    ///
    /// # Errors
    /// The request's; [`Error::Permanent`] for an answer whose versions have no number.
    pub async fn describe_launch_template_versions(
        &self,
        template: TemplateRef<'_>,
        versions: &[&str],
    ) -> Result<Vec<TemplateVersion>> {
        let params = describe_launch_template_versions_params(template, versions);
        let answer = self.query.call("DescribeLaunchTemplateVersions", &params).await?;
        template_versions_of(&answer)
    }

    /// `CreateLaunchTemplateVersion`: a version of `template` copied from `source_version` with the AMI `image_id`;
    /// returns its number.
    ///
    /// # Errors
    /// The request's; [`Error::Permanent`] for an answer that names no version number.
    pub async fn create_launch_template_version(
        &self,
        template: TemplateRef<'_>,
        source_version: &str,
        image_id: &str,
        description: &str,
    ) -> Result<i64> {
        let params = create_launch_template_version_params(template, source_version, image_id, description);
        let answer = self.query.call("CreateLaunchTemplateVersion", &params).await?;
        created_version_of(&answer)
    }

    /// `ModifyLaunchTemplate`: makes `version` the default version of `template`.
    ///
    /// # Errors
    /// The request's.
    pub async fn modify_launch_template(&self, template: TemplateRef<'_>, default_version: &str) -> Result<()> {
        self.query.call("ModifyLaunchTemplate", &modify_launch_template_params(template, default_version)).await?;
        Ok(())
    }

    /// `CreateLaunchTemplate` named `name` whose instances run `image_id` on `instance_type`; returns its ID. For
    /// tests' fixtures: the provider never creates templates (and its IAM policy does not allow it).
    ///
    /// # Errors
    /// The request's; [`Error::Permanent`] for an answer that names no template ID.
    pub async fn create_launch_template(&self, name: &str, image_id: &str, instance_type: &str) -> Result<String> {
        let params = create_launch_template_params(name, image_id, instance_type);
        let answer = self.query.call("CreateLaunchTemplate", &params).await?;
        answer
            .path(&["launchTemplate"])
            .and_then(|t| t.text_of("launchTemplateId"))
            .map(str::to_owned)
            .ok_or_else(|| missing("CreateLaunchTemplate", "launchTemplate/launchTemplateId"))
    }
}

fn missing(call: &str, field: &str) -> Error {
    Error::permanent(format!("{call}: the answer has no {field}"))
}

fn describe_instances_params(instance_ids: &[&str]) -> Params {
    Params::new("DescribeInstances", API_VERSION).list("InstanceId", instance_ids.iter().copied())
}

fn describe_launch_template_versions_params(template: TemplateRef<'_>, versions: &[&str]) -> Params {
    template
        .add_to(Params::new("DescribeLaunchTemplateVersions", API_VERSION))
        .list("LaunchTemplateVersion", versions.iter().copied())
}

fn create_launch_template_version_params(
    template: TemplateRef<'_>,
    source_version: &str,
    image_id: &str,
    description: &str,
) -> Params {
    // No ClientToken: the SDK sent a new random one with each call, which de-duplicates nothing across the calls
    // `Governed` repeats; set_group_image is idempotent by reading `$Latest` first.
    template
        .add_to(Params::new("CreateLaunchTemplateVersion", API_VERSION))
        .set("SourceVersion", source_version)
        .set("VersionDescription", description)
        .set("LaunchTemplateData.ImageId", image_id)
}

fn modify_launch_template_params(template: TemplateRef<'_>, default_version: &str) -> Params {
    template.add_to(Params::new("ModifyLaunchTemplate", API_VERSION)).set("SetDefaultVersion", default_version)
}

fn create_launch_template_params(name: &str, image_id: &str, instance_type: &str) -> Params {
    Params::new("CreateLaunchTemplate", API_VERSION)
        .set("LaunchTemplateName", name)
        .set("LaunchTemplateData.ImageId", image_id)
        .set("LaunchTemplateData.InstanceType", instance_type)
}

/// The instances of a `DescribeInstancesResponse` (every reservation's); items without an `instanceId` are
/// refused.
fn instances_of(answer: &Element) -> Result<Vec<Instance>> {
    let mut instances = Vec::new();
    for reservation in answer.items("reservationSet") {
        for item in reservation.items("instancesSet") {
            let id = item.text_of("instanceId").ok_or_else(|| missing("DescribeInstances", "instanceId"))?;
            instances.push(Instance {
                instance_id: id.to_owned(),
                image_id: item.text_of("imageId").map(str::to_owned),
                state: item.child("instanceState").and_then(|s| s.text_of("name")).map(str::to_owned),
                private_dns_name: item.text_of("privateDnsName").map(str::to_owned),
            });
        }
    }
    Ok(instances)
}

/// A `versionNumber`, required.
fn version_number(call: &str, element: &Element) -> Result<i64> {
    let text = element.text_of("versionNumber").ok_or_else(|| missing(call, "versionNumber"))?;
    text.parse().map_err(|_| Error::permanent(format!("{call}: the versionNumber {text:?} is not a number")))
}

/// The versions of a `DescribeLaunchTemplateVersionsResponse`.
fn template_versions_of(answer: &Element) -> Result<Vec<TemplateVersion>> {
    answer
        .items("launchTemplateVersionSet")
        .map(|item| {
            Ok::<_, Error>(TemplateVersion {
                number: version_number("DescribeLaunchTemplateVersions", item)?,
                default: item.text_of("defaultVersion").is_some_and(|d| d.eq_ignore_ascii_case("true")),
                image_id: item.child("launchTemplateData").and_then(|d| d.text_of("imageId")).map(str::to_owned),
            })
        })
        .collect()
}

/// The number of the version a `CreateLaunchTemplateVersionResponse` names.
fn created_version_of(answer: &Element) -> Result<i64> {
    let version = answer
        .child("launchTemplateVersion")
        .ok_or_else(|| missing("CreateLaunchTemplateVersion", "launchTemplateVersion"))?;
    version_number("CreateLaunchTemplateVersion", version)
}

#[cfg(test)]
mod tests;
