//! The ARM resources of Virtual Machine Scale Sets as the Compute REST API shapes them (the fields the provider
//! reads or writes), the image references it accepts, and the state of a VM from its instance view.

use crate::error::{Error, Result};
use crate::provider::InstanceState;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The one Compute `api-version` every request names (`Microsoft.Compute` 2024-07-01: `etag` and `If-Match` on
/// scale sets, `communityGalleryImageId` and `sharedGalleryImageId` in image references).
pub const API_VERSION: &str = "2024-07-01";

/// A scale set (`Microsoft.Compute/virtualMachineScaleSets`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSet {
    /// Its ARM resource ID.
    #[serde(default)]
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// Its region.
    #[serde(default)]
    pub location: String,
    /// Its tags (`constellation-uid`, `constellation-role`, ...).
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Its SKU; `capacity` is the number of VMs.
    #[serde(default)]
    pub sku: Sku,
    /// Changes with every change of the resource (for `If-Match`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Its properties.
    #[serde(default)]
    pub properties: ScaleSetProperties,
}

/// A scale set's SKU.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sku {
    /// The VM size, e.g. `Standard_D4s_v3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Standard`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The number of VMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
}

/// A scale set's properties.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSetProperties {
    /// `Creating`, `Updating`, `Succeeded`, `Failed`, `Deleting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<String>,
    /// `Uniform` or `Flexible`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration_mode: Option<String>,
    /// The model new VMs are created from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_profile: Option<VmProfile>,
    /// Whether Azure creates extra VMs on a scale-out and deletes the surplus (`overprovision`; Azure's default
    /// for uniform scale sets is on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overprovision: Option<bool>,
    /// How model changes reach existing VMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_policy: Option<UpgradePolicy>,
}

/// A scale set's `upgradePolicy` (Microsoft.Compute 2024-07-01 `UpgradePolicy`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UpgradePolicy {
    /// `Manual` (the default), `Automatic` or `Rolling`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// A scale set's VM model.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmProfile {
    /// The OS disk's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_profile: Option<StorageProfile>,
    /// The computer name prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_profile: Option<OsProfile>,
}

/// The image part of a model or VM.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageProfile {
    /// The image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_reference: Option<ImageReference>,
}

/// The OS profile of a model or VM.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OsProfile {
    /// The model's prefix of computer names (uniform scale sets name VMs `PREFIX` + six base-36 digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_name_prefix: Option<String>,
    /// A VM's host name: the name its Node registers with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_name: Option<String>,
}

/// An image reference: exactly one of a gallery or managed image `id`, a `sharedGalleryImageId`, a
/// `communityGalleryImageId`, or a marketplace `publisher`/`offer`/`sku`/`version`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageReference {
    /// A compute gallery image (version) or managed image ARM ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `/SharedGalleries/...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_gallery_image_id: Option<String>,
    /// `/CommunityGalleries/...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub community_gallery_image_id: Option<String>,
    /// Marketplace publisher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher: Option<String>,
    /// Marketplace offer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer: Option<String>,
    /// Marketplace SKU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// Marketplace version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Read only: the version a `latest` resolved to.
    #[serde(default, skip_serializing)]
    pub exact_version: Option<String>,
}

impl ImageReference {
    /// The reference an image string names: an ARM ID (`/subscriptions/...`: gallery image version or managed
    /// image), `/CommunityGalleries/...`, `/SharedGalleries/...`, or a marketplace URN
    /// `PUBLISHER:OFFER:SKU:VERSION`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty or malformed image.
    pub fn parse(image: &str) -> Result<ImageReference> {
        let bad = |why: &str| Error::invalid(format!("image {image:?} {why}"));
        if image.is_empty() || image.len() > 1024 || image.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("is empty, too long or has white space"));
        }
        let lower = image.to_ascii_lowercase();
        let parts = |n: usize| image.split('/').skip(1).count() == n && image.split('/').skip(1).all(|p| !p.is_empty());
        if lower.starts_with("/subscriptions/") {
            if !parts(8) && !parts(10) && !parts(12) {
                return Err(bad("is not a gallery image version or managed image ID"));
            }
            Ok(ImageReference { id: Some(image.to_owned()), ..ImageReference::default() })
        } else if lower.starts_with("/communitygalleries/") {
            if !parts(6) {
                return Err(bad("is not /CommunityGalleries/GALLERY/Images/IMAGE/Versions/VERSION"));
            }
            Ok(ImageReference { community_gallery_image_id: Some(image.to_owned()), ..ImageReference::default() })
        } else if lower.starts_with("/sharedgalleries/") {
            if !parts(6) {
                return Err(bad("is not /SharedGalleries/GALLERY/Images/IMAGE/Versions/VERSION"));
            }
            Ok(ImageReference { shared_gallery_image_id: Some(image.to_owned()), ..ImageReference::default() })
        } else {
            let urn: Vec<&str> = image.split(':').collect();
            match urn.as_slice() {
                [publisher, offer, sku, version] if urn.iter().all(|p| !p.is_empty() && !p.contains('/')) => {
                    Ok(ImageReference {
                        publisher: Some((*publisher).to_owned()),
                        offer: Some((*offer).to_owned()),
                        sku: Some((*sku).to_owned()),
                        version: Some((*version).to_owned()),
                        ..ImageReference::default()
                    })
                }
                _ => Err(bad(
                    "is neither an image ID (/subscriptions/..., /CommunityGalleries/..., /SharedGalleries/...) \
                     nor a marketplace URN PUBLISHER:OFFER:SKU:VERSION",
                )),
            }
        }
    }

    /// The image string of the reference (the inverse of [`ImageReference::parse`]); `None` for a reference
    /// without an image.
    pub fn image(&self) -> Option<String> {
        let urn = || match (&self.publisher, &self.offer, &self.sku, &self.version) {
            (Some(p), Some(o), Some(s), Some(v)) => Some(format!("{p}:{o}:{s}:{v}")),
            _ => None,
        };
        self.id
            .clone()
            .or_else(|| self.community_gallery_image_id.clone())
            .or_else(|| self.shared_gallery_image_id.clone())
            .or_else(urn)
    }

    /// Whether two references name the same image (IDs are case-insensitive in ARM).
    pub fn same_image(&self, other: &ImageReference) -> bool {
        match (self.image(), other.image()) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(&b),
            _ => false,
        }
    }
}

/// A VM of a scale set (`.../virtualMachineScaleSets/SS/virtualMachines/N`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleSetVm {
    /// Its ARM ID.
    #[serde(default)]
    pub id: String,
    /// Its name (`SS_N`).
    #[serde(default)]
    pub name: String,
    /// Its instance ID in the scale set (a number).
    #[serde(default)]
    pub instance_id: String,
    /// Its properties.
    #[serde(default)]
    pub properties: VmProperties,
}

/// A VM's properties.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmProperties {
    /// `Creating`, `Updating`, `Succeeded`, `Failed`, `Deleting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<String>,
    /// Its host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_profile: Option<OsProfile>,
    /// Its image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_profile: Option<StorageProfile>,
    /// Its instance view, in lists asked with `$expand=instanceView` (`VirtualMachineScaleSetVMProperties`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_view: Option<InstanceView>,
}

/// A VM's instance view (`.../virtualMachines/N/instanceView`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    /// `ProvisioningState/...` and `PowerState/...` statuses.
    #[serde(default)]
    pub statuses: Vec<InstanceViewStatus>,
}

/// One status of an instance view.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceViewStatus {
    /// E.g. `ProvisioningState/succeeded`, `PowerState/running`.
    #[serde(default)]
    pub code: String,
}

impl InstanceView {
    fn status(&self, kind: &str) -> Option<String> {
        self.statuses.iter().find_map(|s| {
            let (k, v) = s.code.split_once('/')?;
            k.eq_ignore_ascii_case(kind).then(|| v.to_ascii_lowercase())
        })
    }

    /// The instance's state: deleting and failed provisioning first, then the power state (running is
    /// `Ready` once provisioning succeeded; `starting` and provisioning without a power state are `Creating`).
    pub fn state(&self) -> InstanceState {
        let provisioning = self.status("ProvisioningState");
        let power = self.status("PowerState");
        match (provisioning.as_deref(), power.as_deref()) {
            (Some("deleting"), _) => InstanceState::Terminating,
            (Some(p), _) if p.starts_with("failed") => InstanceState::Failed,
            (_, Some("stopping" | "deallocating")) => InstanceState::Stopping,
            (_, Some("stopped" | "deallocated")) => InstanceState::Stopped,
            (Some("succeeded" | "updating"), Some("running")) => InstanceState::Ready,
            _ => InstanceState::Creating,
        }
    }
}

/// A page of a list (`value`, `nextLink`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page<T> {
    /// The items.
    #[serde(default = "Vec::new")]
    pub value: Vec<T>,
    /// The next page's URL, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_link: Option<String>,
}

/// An operation status resource (the `Azure-AsyncOperation` URL's answer).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationStatus {
    /// `InProgress`, `Succeeded`, `Failed`, `Canceled`.
    #[serde(default)]
    pub status: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// The ARM error body `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ErrorResponse {
    /// The error.
    pub error: ErrorDetail,
}

/// An ARM error.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ErrorDetail {
    /// E.g. `ResourceNotFound`, `OperationNotAllowed`, `AuthorizationFailed`.
    #[serde(default)]
    pub code: String,
    /// The message.
    #[serde(default)]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_strings_round_trip_through_references() {
        let cases = [
            (
                "/subscriptions/s/resourceGroups/CONSTELLATION-IMAGES/providers/Microsoft.Compute/galleries/C/images/i/versions/2.1.0",
                "id",
            ),
            ("/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/images/my-image", "id"),
            ("/CommunityGalleries/cg-1234/Images/constellation/Versions/2.1.0", "community"),
            ("/SharedGalleries/abc-def/Images/constellation/Versions/latest", "shared"),
            ("Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest", "marketplace"),
        ];
        for (image, kind) in cases {
            let reference = ImageReference::parse(image).unwrap_or_else(|e| panic!("{image}: {e}"));
            let set = match kind {
                "id" => reference.id.is_some(),
                "community" => reference.community_gallery_image_id.is_some(),
                "shared" => reference.shared_gallery_image_id.is_some(),
                _ => reference.publisher.is_some(),
            };
            assert!(set, "{image} as {kind}: {reference:?}");
            assert_eq!(reference.image().as_deref(), Some(image));
        }
    }

    #[test]
    fn malformed_images_are_invalid() {
        for image in ["", " ", "ami-0123", "a:b:c", "a:b::d", "/subscriptions/s", "/CommunityGalleries/x", "a b:c:d:e"]
        {
            assert!(matches!(ImageReference::parse(image), Err(Error::Invalid { .. })), "{image:?}");
        }
    }

    #[test]
    fn instance_views_map_to_states() {
        let view = |codes: &[&str]| InstanceView {
            statuses: codes.iter().map(|c| InstanceViewStatus { code: (*c).to_owned() }).collect(),
        };
        let cases = [
            (view(&["ProvisioningState/creating"]), InstanceState::Creating),
            (view(&["ProvisioningState/succeeded", "PowerState/starting"]), InstanceState::Creating),
            (view(&["ProvisioningState/succeeded", "PowerState/running"]), InstanceState::Ready),
            (view(&["ProvisioningState/updating", "PowerState/running"]), InstanceState::Ready),
            (view(&["ProvisioningState/succeeded", "PowerState/deallocating"]), InstanceState::Stopping),
            (view(&["ProvisioningState/succeeded", "PowerState/stopped"]), InstanceState::Stopped),
            (view(&["ProvisioningState/deleting", "PowerState/running"]), InstanceState::Terminating),
            (view(&["ProvisioningState/failed/InternalOperationError"]), InstanceState::Failed),
            (view(&[]), InstanceState::Creating),
        ];
        for (view, state) in cases {
            assert_eq!(view.state(), state, "{view:?}");
        }
    }
}
