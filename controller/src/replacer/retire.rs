//! Ending a replacement: a donor abandoned (its new instance released), a donor retired once its heir joined (its
//! etcd member removed first for a control-plane node, then its Node deleted), and its old instance released
//! (recorded as a leaving PendingNode, then deleted).

use super::*;

impl Replacer {
    /// Switches `donor`'s joining PendingNode `join_pending` to `Leave` (with `deadline`) and deletes its instance;
    /// an instance this controller created but could not record yet is recorded as leaving first. The donor is
    /// released by the caller.
    pub async fn abandon(
        &self,
        term: &Term,
        donor: &str,
        join_pending: Option<&str>,
        deadline: Timestamp,
    ) -> Result<(), String> {
        let name = join_pending.map_or_else(|| join_name(donor), str::to_owned);
        let recorded = self.pending.state().iter().find(|p| p.name_any() == name).map(|p| p.spec.clone());
        // Whether the stored record may still say Join: the store's, or one recorded while the store did not show
        // it yet (this create is then refused as a conflict, and the record is switched below).
        let mut may_join = true;
        let spec = match recorded {
            Some(spec) => {
                may_join = spec.goal == PendingNodeGoal::Join;
                spec
            }
            None => {
                let Some((group_id, instance)) = self.created.lock().get(&name).cloned() else { return Ok(()) };
                let spec = PendingNodeSpec {
                    provider_id: instance.provider_id.to_string(),
                    group_id,
                    node_name: instance.node_name.clone(),
                    goal: PendingNodeGoal::Leave,
                    deadline: Some(Time(deadline)),
                };
                self.record(term, &name, donor, spec.clone()).await?;
                spec
            }
        };
        if may_join {
            let patch = serde_json::json!({"spec": {"goal": "Leave", "deadline": Time(deadline)}});
            let params = kube::api::PatchParams::default();
            match within(term, self.pending_api.patch(&name, &params, &kube::api::Patch::Merge(patch))).await? {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
                Err(error) => return Err(format!("cannot switch PendingNode {name} to Leave: {error}")),
            }
        }
        // Recorded as leaving first: if this deletion fails, the PendingNode controller retries it.
        let id = spec.provider_id.parse::<ProviderId>().map_err(|e| format!("{}: {e}", spec.provider_id))?;
        fence(term, self.provider.delete_instance(&GroupId::from(spec.group_id.as_str()), &id)).await?;
        self.created.lock().remove(&name);
        Ok(())
    }

    /// Deletes `donor`'s joining PendingNode, removes its etcd member when asked (once the member of its heir
    /// `heir`, found by name and, when its Node is in `heir_node`, by its addresses, is a healthy voter), and deletes
    /// its Node. The Node is never deleted while its member may remain.
    pub async fn retire(
        &self,
        term: &Term,
        donor: &SlimNode,
        (heir, heir_node): (&str, Option<&SlimNode>),
        remove_etcd_member: bool,
        join_pending: Option<&str>,
    ) -> Result<(), RetireError> {
        if remove_etcd_member {
            let Members::Client(etcd) = &self.etcd else {
                return Err(RetireError::Etcd(format!(
                    "the etcd member of {} cannot be removed: no etcd client is configured",
                    donor.name()
                )));
            };
            let (donor_addresses, heir_addresses) = (donor.addresses(), heir_node.map(SlimNode::addresses));
            let donor_ref = NodeRef { name: donor.name(), addresses: &donor_addresses };
            let heir_ref = NodeRef { name: heir, addresses: heir_addresses.as_deref().unwrap_or_default() };
            match within(term, etcd.remove_node_member(donor_ref, Some(heir_ref))).await.map_err(RetireError::Other)? {
                Ok(Removal::Removed { id, name }) => {
                    tracing::info!(node = donor.name(), id, member = %name, "removed the etcd member")
                }
                Ok(Removal::AlreadyGone) => {}
                Err(error) => {
                    return Err(RetireError::Etcd(format!(
                        "cannot remove the etcd member of {}: {error}",
                        donor.name()
                    )));
                }
            }
        }
        if let Some(pending) = join_pending {
            let params = DeleteParams::default();
            let deleted = within(term, self.pending_api.delete(pending, &params)).await.map_err(RetireError::Other)?;
            gone_is_fine(deleted).map_err(RetireError::Other)?;
        }
        // Only the Node the decision was about: a Node of that name created since is not deleted.
        let params = DeleteParams {
            preconditions: donor.uid().map(|uid| kube::api::Preconditions { uid: Some(uid), resource_version: None }),
            ..DeleteParams::default()
        };
        gone_is_fine(within(term, self.nodes_api.delete(donor.name(), &params)).await.map_err(RetireError::Other)?)
            .map_err(RetireError::Other)
    }

    /// Records the leaving PendingNode `pending` for `donor`'s instance, then deletes the instance (the
    /// PendingNode controller removes the record once it is terminated, and deletes it again past `deadline`).
    pub async fn release_instance(
        &self,
        term: &Term,
        pending: &str,
        donor: &DonorRef,
        deadline: Timestamp,
    ) -> Result<(), String> {
        if !self.pending.state().iter().any(|p| p.name_any() == pending) {
            let spec = PendingNodeSpec {
                provider_id: donor.provider_id.clone(),
                group_id: donor.group_id.clone(),
                node_name: donor.name.clone(),
                goal: PendingNodeGoal::Leave,
                deadline: Some(Time(deadline)),
            };
            self.record(term, pending, &donor.name, spec).await?;
        }
        // Recorded first: if this deletion fails (or the controller stops here), the PendingNode controller
        // deletes the instance again past the deadline.
        let id = donor.provider_id.parse::<ProviderId>().map_err(|e| format!("{}: {e}", donor.provider_id))?;
        fence(term, self.provider.delete_instance(&GroupId::from(donor.group_id.as_str()), &id)).await?;
        Ok(())
    }
}
