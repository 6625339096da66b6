//! Deleting several VMs of a scale set in one request ([`crate::CloudProvider::delete_instances`]):
//! `VirtualMachineScaleSets_DeleteInstances` (`POST .../virtualMachineScaleSets/SS/delete` with several
//! `instanceIds`: Microsoft.Compute 2024-07-01, `virtualMachineScaleSet.json` in Azure/azure-rest-api-specs, body
//! `VirtualMachineScaleSetVMInstanceRequiredIDs`, an array without a stated maximum), after one list of the scale
//! set's VMs (`VirtualMachineScaleSetVMs_List`, every `nextLink`) in place of the single deletion's `GET` of each
//! VM: one `Deleting` is `Started` without a request; one the list does not show is asked about with its own `GET`
//! (ARM's lists are eventually consistent: a VM just created may not be listed yet), and is `AlreadyGone` when that
//! answers 404 (left out of the request, which ARM refuses for an unknown instance ID).

use super::model::ScaleSetVm;
use super::{AzureProvider, ScaleSetRef, azure_vm};
use crate::error::{Error, Result};
use crate::provider::{Deletion, GroupId};
use crate::provider_id::ProviderId;
use azure_core::http::Method;
use std::collections::HashMap;

/// The most VMs one deletion request of this provider carries.
pub const DELETE_BATCH: usize = 100;

impl AzureProvider {
    /// See the module docs: one list and at most one deletion request for every VM of `instances`.
    pub(super) async fn delete_vms(&self, group: &GroupId, instances: &[ProviderId]) -> Result<Vec<Result<Deletion>>> {
        if !(1..=DELETE_BATCH).contains(&instances.len()) {
            return Err(Error::invalid(format!(
                "{group}: a deletion carries 1 to {DELETE_BATCH} VMs, not {}",
                instances.len()
            )));
        }
        let target = ScaleSetRef::parse(group)?;
        // Each ID checked alone: another cloud's, or another scale set's VM, is that instance's error.
        let mut results: Vec<Result<Option<&str>>> = instances
            .iter()
            .map(|instance| {
                let vm = azure_vm(instance)?;
                if target.same(vm) {
                    Ok(Some(vm.instance_id.as_str()))
                } else {
                    Err(Error::invalid(format!("{instance} is not a VM of scale set {}", target.name)))
                }
            })
            .collect();
        if results.iter().all(|r| r.is_err()) {
            return Ok(results.into_iter().map(|r| r.map(|_| Deletion::Started)).collect());
        }
        let listed = self.vms(&target).await?;
        let deleting: HashMap<&str, bool> = listed
            .iter()
            .map(|vm| {
                let state = vm.properties.provisioning_state.as_deref();
                (vm.instance_id.as_str(), state.is_some_and(|s| s.eq_ignore_ascii_case("Deleting")))
            })
            .collect();
        let mut gone = vec![false; results.len()];
        let mut ids: Vec<&str> = Vec::new();
        for ((result, gone), instance) in results.iter_mut().zip(gone.iter_mut()).zip(instances) {
            let Ok(Some(id)) = result else { continue };
            let deleting = match deleting.get(id) {
                Some(deleting) => Some(*deleting),
                // Not listed: gone, or created so recently that the list does not show it yet (ARM's lists are
                // eventually consistent): its own `GET` tells, as a single deletion's does.
                None => match self.arm.get::<ScaleSetVm>(&Self::vm_path(azure_vm(instance)?), "a VM").await {
                    Ok(vm) => Some(
                        vm.properties.provisioning_state.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("Deleting")),
                    ),
                    Err(Error::NotFound { .. }) => None,
                    Err(error) => return Err(error),
                },
            };
            match deleting {
                None => *gone = true,
                Some(true) => *result = Ok(None),
                Some(false) if ids.contains(id) => *result = Ok(None),
                Some(false) => ids.push(id),
            }
        }
        if !ids.is_empty() {
            let body = serde_json::json!({ "instanceIds": ids });
            let url = self.arm.url(&format!("{}/delete", target.path()))?;
            match self.arm.send(Method::Post, url, Some(&body), None).await {
                Ok(_) => {}
                // The scale set is gone, and its VMs with it.
                Err(Error::NotFound { .. }) => gone.iter_mut().zip(&results).for_each(|(g, r)| *g |= r.is_ok()),
                Err(error) => return Err(error),
            }
        }
        Ok(results
            .into_iter()
            .zip(gone)
            .map(|(result, gone)| result.map(|_| if gone { Deletion::AlreadyGone } else { Deletion::Started }))
            .collect())
    }
}
