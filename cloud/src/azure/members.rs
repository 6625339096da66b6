//! A scale set's members in one list ([`crate::CloudProvider::group_instances`]): `VirtualMachineScaleSetVMs_List`
//! (`GET .../virtualMachineScaleSets/SS/virtualMachines?$expand=instanceView`, every `nextLink`), then the scale
//! set's `sku.capacity` (`VirtualMachineScaleSets_Get`): Microsoft.Compute 2024-07-01, `virtualMachineScaleSet.json`
//! in Azure/azure-rest-api-specs (the list's `$expand` "Allowed values are 'instanceView'"; each VM's
//! `properties.instanceView.statuses`, `properties.osProfile.computerName`,
//! `properties.storageProfile.imageReference`).
//!
//! The capacity is read after the list: a creation accepted meanwhile is then counted in `unlisted` rather than
//! missed (a capacity read first and a VM not listed yet would prove a list complete that is not).

use super::model::{InstanceView, InstanceViewStatus, ScaleSet, ScaleSetVm};
use super::{AzureProvider, ScaleSetRef, node_spelling};
use crate::error::Result;
use crate::provider::{GroupInstance, GroupMembers, InstanceState};
use crate::provider_id::{AzureScaleSetVm, ProviderId};

impl AzureProvider {
    /// Every VM of the scale set with its state and image, and the creations its capacity counts but the list
    /// does not show yet.
    pub(super) async fn members(&self, scale_set: &ScaleSetRef) -> Result<GroupMembers> {
        let mut vms = Vec::new();
        let mut next = Some(format!("{}/virtualMachines?$expand=instanceView", scale_set.path()));
        while let Some(url) = next.take() {
            let page: super::model::Page<ScaleSetVm> = self.arm.get(&url, "the scale set's VMs").await?;
            vms.extend(page.value);
            next = page.next_link;
        }
        let found: ScaleSet = self.arm.get(&scale_set.path(), "a scale set").await?;
        Ok(members(scale_set, vms, found.sku.capacity.unwrap_or_default()))
    }
}

/// The state of a listed VM as `instance_state` maps its instance view; a VM listed without one (a list that did
/// not expand it) by its provisioning state alone.
fn state_of(vm: &ScaleSetVm) -> InstanceState {
    match &vm.properties.instance_view {
        Some(view) => view.state(),
        None => InstanceView {
            statuses: vm
                .properties
                .provisioning_state
                .iter()
                .map(|p| InstanceViewStatus { code: format!("ProvisioningState/{p}") })
                .collect(),
        }
        .state(),
    }
}

/// The members of a scale set from its VMs and capacity. A VM without a computer name yet (its Node's name) is not
/// listed but counted in `unlisted`, as `created_instance` does not name it yet either.
fn members(scale_set: &ScaleSetRef, vms: Vec<ScaleSetVm>, capacity: u64) -> GroupMembers {
    let mut instances = Vec::new();
    let mut live = 0u64;
    let mut nameless = 0u64;
    for vm in vms {
        let state = state_of(&vm);
        if !matches!(state, InstanceState::Terminating | InstanceState::Terminated) {
            live += 1;
        }
        let name = vm.properties.os_profile.as_ref().and_then(|o| o.computer_name.as_deref());
        let (Some(name), Ok(_)) = (name, vm.instance_id.parse::<u64>()) else {
            nameless += 1;
            continue;
        };
        let provider_id = ProviderId::Azure(node_spelling(AzureScaleSetVm {
            subscription: scale_set.subscription.clone(),
            resource_group: scale_set.resource_group.clone(),
            scale_set: scale_set.name.clone(),
            instance_id: vm.instance_id.clone(),
        }));
        instances.push(GroupInstance {
            provider_id,
            node_name: name.to_ascii_lowercase(),
            state,
            image: vm
                .properties
                .storage_profile
                .as_ref()
                .and_then(|s| s.image_reference.as_ref())
                .and_then(|r| r.image()),
        });
    }
    let unlisted = capacity.saturating_sub(live) + nameless;
    GroupMembers { instances, unlisted: u32::try_from(unlisted).unwrap_or(u32::MAX) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(id: &str, name: Option<&str>, provisioning: &str, power: Option<&str>, expanded: bool) -> ScaleSetVm {
        let mut statuses = vec![serde_json::json!({"code": format!("ProvisioningState/{provisioning}")})];
        statuses.extend(power.map(|p| serde_json::json!({"code": format!("PowerState/{p}")})));
        let mut value = serde_json::json!({
            "instanceId": id,
            "properties": {
                "provisioningState": provisioning,
                "osProfile": {"computerName": name},
                "storageProfile": {"imageReference": {"communityGalleryImageId": "/CommunityGalleries/g/Images/i/Versions/1"}}
            }
        });
        if expanded {
            value["properties"]["instanceView"] = serde_json::json!({"statuses": statuses});
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn vms_are_listed_with_the_states_of_their_instance_views_and_unlisted_counts_the_capacity_above_them() {
        let scale_set = ScaleSetRef { subscription: "sub".into(), resource_group: "RG-A".into(), name: "ss".into() };
        let vms = vec![
            vm("0", Some("SS000000"), "Succeeded", Some("running"), true),
            vm("1", Some("ss000001"), "Succeeded", Some("deallocated"), true),
            vm("2", Some("ss000002"), "Deleting", Some("running"), true),
            vm("3", Some("ss000003"), "Creating", None, false),
            vm("4", None, "Creating", None, true),
        ];
        let members = members(&scale_set, vms, 5);
        let states: Vec<_> = members.instances.iter().map(|i| (i.node_name.as_str(), i.state)).collect();
        assert_eq!(
            states,
            [
                ("ss000000", InstanceState::Ready),
                ("ss000001", InstanceState::Stopped),
                ("ss000002", InstanceState::Terminating),
                ("ss000003", InstanceState::Creating),
            ]
        );
        assert_eq!(
            members.instances[0].provider_id.to_string(),
            "azure:///subscriptions/sub/resourceGroups/rg-a/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/0"
        );
        assert_eq!(members.instances[0].image.as_deref(), Some("/CommunityGalleries/g/Images/i/Versions/1"));
        // Capacity 5, 4 live VMs (one deleting), one of them without a name: 1 + 1.
        assert_eq!(members.unlisted, 2);
    }
}
