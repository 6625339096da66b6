//! What a MIG says about an instance that Compute does not know (yet): managed instance groups create instances
//! asynchronously, so `instances.get` answers 404 between `createInstances` and the instance's creation, and for as
//! long as the MIG fails to create it (it retries; quota and stock-out errors are reported per managed instance in
//! `lastAttempt.errors`, never on the `createInstances` operation).
//!
//! Published definition (compute v1 `ManagedInstance`, as generated into `google-cloud-compute-v1` 3.4
//! `model::ManagedInstance`): `name` "always exists even if the instance has not yet been created"; `instanceStatus`
//! and `id` are "empty when the instance does not exist"; `currentAction` `CREATING`: "If the group fails to create
//! this instance, it will try again until it is successful". Constellation's node operator
//! (`operators/constellation-node-operator/internal/cloud/gcp/client/pendingnode.go`, `GetNodeState`) reads any 404
//! as terminated, the defect this module avoids.

use super::{GcpProvider, errors, state_of};
use crate::error::{Error, Result};
use crate::provider::{GroupInstance, GroupMembers, InstanceState};
use crate::provider_id::{GceInstance, ProviderId};
use google_cloud_compute_v1::model::{self, managed_instance};
use std::time::{Duration, Instant};

use super::names::MigPath;

/// How long an instance this process asked a MIG to create counts as being created while neither Compute nor the
/// MIG lists it yet (the MIG's list may lag the `createInstances` request).
pub(super) const CREATE_GRACE: Duration = Duration::from_secs(120);

/// A MIG's view of one of its instances.
#[derive(Debug)]
pub(super) enum Member {
    /// The MIG does not list it, nor counts an instance its list does not show.
    Absent,
    /// The MIG does not list it, but its target size counts more instances than its list shows (less those being
    /// deleted): a `createInstances` it accepted that its list does not show yet (the list may lag the request;
    /// the MIG's target size counts an accepted creation at once). It may be this instance: not known to be gone.
    Unlisted,
    /// The MIG lists it, with its managed-instance record.
    Listed(Box<model::ManagedInstance>),
}

impl GcpProvider {
    /// Remembers that `instance` was asked of `mig` now.
    pub(super) fn remember_creation(&self, instance: &GceInstance, mig: &MigPath) {
        let mut created = self.created.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        created.retain(|_, (_, at)| now.duration_since(*at) < CREATE_GRACE);
        created.insert(instance.clone(), (mig.clone(), now));
    }

    /// Forgets a creation once the instance exists or is being deleted: from then on a 404 means it is gone.
    pub(super) fn forget_creation(&self, instance: &GceInstance) {
        self.created.lock().unwrap_or_else(|e| e.into_inner()).remove(instance);
    }

    /// The MIG that was asked to create `instance`: the one this process asked (remembered for [`CREATE_GRACE`]),
    /// else the MIG its name says (`MIG-xxxxx`, as `create_instance` names instances), so that a restarted
    /// controller still finds it. `None` when neither applies.
    pub(super) fn creator_of(&self, instance: &GceInstance) -> (Option<MigPath>, bool) {
        let created = self.created.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((mig, at)) = created.get(instance) {
            return (Some(mig.clone()), at.elapsed() < CREATE_GRACE);
        }
        let guessed = instance.name.rsplit_once('-').filter(|(base, suffix)| {
            suffix.len() == 5
                && suffix.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && !base.is_empty()
        });
        let mig = guessed.map(|(base, _)| MigPath {
            project: instance.project.clone(),
            zone: instance.zone.clone(),
            name: base.to_owned(),
        });
        (mig, false)
    }

    /// Whether `mig` lists `instance` (every page of `listManagedInstances`), and when it does not, whether the
    /// MIG counts a creation its list does not show yet (`instanceGroupManagers.get`, only then). An unknown MIG
    /// lists nothing.
    pub(super) async fn member(&self, mig: &MigPath, instance: &GceInstance) -> Result<Member> {
        let listed = match self.managed_instances(mig).await {
            Ok(listed) => listed,
            Err(Error::NotFound { .. }) => return Ok(Member::Absent),
            Err(error) => return Err(error),
        };
        let shown = listed
            .iter()
            .filter(|m| !matches!(m.current_action, Some(managed_instance::CurrentAction::Deleting)))
            .count();
        if let Some(found) = listed.into_iter().find(|m| m.name.as_deref() == Some(instance.name.as_str())) {
            return Ok(Member::Listed(Box::new(found)));
        }
        let target = match self.get_mig(mig).await {
            Ok(found) => found.target_size.unwrap_or(0),
            Err(Error::NotFound { .. }) => return Ok(Member::Absent),
            Err(error) => return Err(error),
        };
        Ok(if i64::from(target) > shown as i64 { Member::Unlisted } else { Member::Absent })
    }

    /// The state of an instance `instances.get` does not know: `Creating` while its MIG lists it as being created
    /// (or this process asked for it less than [`CREATE_GRACE`] ago, or the MIG counts a creation its list does not
    /// show yet: [`Member::Unlisted`]), the error of the MIG's last failed attempt
    /// (`QuotaExceeded` for quota and stock-outs: the MIG retries, the caller's deadline decides), else
    /// `Terminated`.
    pub(super) async fn state_of_unknown(&self, instance: &GceInstance) -> Result<InstanceState> {
        let (mig, recent) = self.creator_of(instance);
        let Some(mig) = mig else { return Ok(InstanceState::Terminated) };
        match self.member(&mig, instance).await? {
            Member::Absent if recent => Ok(InstanceState::Creating),
            // A creation the MIG accepted and does not list yet may be this one (a restarted controller does not
            // remember asking): not gone until the list can tell.
            Member::Unlisted => Ok(InstanceState::Creating),
            Member::Absent => Ok(InstanceState::Terminated),
            Member::Listed(managed) => {
                if let Some(error) = last_attempt_error(&mig, instance, &managed) {
                    return Err(error);
                }
                Ok(match (&managed.current_action, managed.instance_status.as_ref().and_then(|s| s.name())) {
                    (Some(managed_instance::CurrentAction::Deleting), _) => InstanceState::Terminating,
                    // Listed with a status: Compute's `instances.get` lags the MIG; its status says.
                    (_, Some(status)) => state_of(Some(status)),
                    _ => InstanceState::Creating,
                })
            }
        }
    }
}

impl GcpProvider {
    /// The MIG's members in one list (`listManagedInstances`, every page), for `group_instances`. Each managed
    /// instance is listed under its `name` (which "always exists even if the instance has not yet been created")
    /// with the state `instance_state` gives it: with an `instanceStatus`, that status mapped as `instances.get`'s
    /// (`STOPPING` is Terminating when the MIG's `currentAction` is `DELETING`, else Stopping); without one
    /// (`CREATING`, not created yet) Creating, or Terminating while `DELETING`. One whose creation failed (`lastAttempt.errors`, no instance) is not listed but
    /// counted in `unlisted`, so that the caller asks `instance_state`, which surfaces the error as it does
    /// (`QuotaExceeded`, `Transient`); so are the creations this process asked of the MIG in the last
    /// [`CREATE_GRACE`] that the list does not show yet (its list may lag `createInstances`). An unknown MIG is
    /// `NotFound`. The list names an instance template, not an image: `image` is `None`.
    pub(super) async fn group_members(&self, mig: &MigPath) -> Result<GroupMembers> {
        let listed = self.managed_instances(mig).await?;
        let mut instances = Vec::new();
        let mut unlisted = 0u64;
        let mut seen = std::collections::HashSet::new();
        for managed in listed {
            let name = managed
                .name
                .clone()
                .filter(|n| !n.is_empty())
                .or_else(|| managed.instance.as_deref().map(|url| super::last_segment(url).to_owned()));
            let Some(name) = name else {
                unlisted += 1;
                continue;
            };
            seen.insert(name.clone());
            let instance = GceInstance { project: mig.project.clone(), zone: mig.zone.clone(), name };
            let Some(state) = member_state(mig, &instance, &managed) else {
                unlisted += 1;
                continue;
            };
            instances.push(GroupInstance {
                node_name: instance.name.clone(),
                provider_id: ProviderId::Gce(instance),
                state,
                image: None,
            });
        }
        unlisted += self.recent_creations_not_in(mig, &seen);
        Ok(GroupMembers { instances, unlisted: u32::try_from(unlisted).unwrap_or(u32::MAX) })
    }

    /// The creations this process asked of `mig` less than [`CREATE_GRACE`] ago whose names the list did not show.
    fn recent_creations_not_in(&self, mig: &MigPath, seen: &std::collections::HashSet<String>) -> u64 {
        let created = self.created.lock().unwrap_or_else(|e| e.into_inner());
        let missing = created.iter().filter(|(instance, (asked, at))| {
            asked.name == mig.name
                && asked.zone == mig.zone
                && asked.project == mig.project
                && at.elapsed() < CREATE_GRACE
                && !seen.contains(&instance.name)
        });
        missing.count() as u64
    }
}

/// The state of a MIG's member as `instance_state` gives it, or `None` when the MIG failed to create it so far
/// (`instance_state` answers the MIG's error). With a status, by its status (`STOPPING` while the MIG deletes it is
/// Terminating, as `stopping_or_terminating` says); without one (`instances.get` 404), as `state_of_unknown`: the
/// MIG's error first, then `DELETING` Terminating, else Creating.
fn member_state(mig: &MigPath, instance: &GceInstance, managed: &model::ManagedInstance) -> Option<InstanceState> {
    let deleting = matches!(managed.current_action, Some(managed_instance::CurrentAction::Deleting));
    match managed.instance_status.as_ref().and_then(|s| s.name()) {
        Some(status) => Some(match state_of(Some(status)) {
            InstanceState::Stopping if deleting => InstanceState::Terminating,
            state => state,
        }),
        None if last_attempt_error(mig, instance, managed).is_some() => None,
        None if deleting => Some(InstanceState::Terminating),
        None => Some(InstanceState::Creating),
    }
}

/// The error of the MIG's last failed attempt to create `instance`, if any.
fn last_attempt_error(mig: &MigPath, instance: &GceInstance, managed: &model::ManagedInstance) -> Option<Error> {
    let errors = managed.last_attempt.as_ref()?.errors.as_ref()?;
    let first = errors.errors.first()?;
    let code = first.code.clone().unwrap_or_default();
    let message = format!(
        "the managed instance group {} could not create {} yet (it retries): {code}: {}",
        mig.name,
        instance.name,
        first.message.as_deref().unwrap_or("")
    );
    Some(errors::from_creation_error(&code, message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn managed_instances_map_to_the_states_instance_state_gives_and_failed_creations_to_none() {
        let mig = MigPath { project: "p".into(), zone: "z".into(), name: "workers".into() };
        let instance = GceInstance { project: "p".into(), zone: "z".into(), name: "workers-abcde".into() };
        let state = |managed: serde_json::Value| {
            let managed: model::ManagedInstance = serde_json::from_value(managed).unwrap();
            member_state(&mig, &instance, &managed)
        };
        use InstanceState::*;
        assert_eq!(
            state(json!({"name": "workers-abcde", "instanceStatus": "RUNNING", "currentAction": "NONE"})),
            Some(Ready)
        );
        assert_eq!(state(json!({"instanceStatus": "RUNNING", "currentAction": "DELETING"})), Some(Ready));
        assert_eq!(state(json!({"instanceStatus": "STOPPING", "currentAction": "DELETING"})), Some(Terminating));
        assert_eq!(state(json!({"instanceStatus": "STOPPING", "currentAction": "NONE"})), Some(Stopping));
        assert_eq!(state(json!({"instanceStatus": "TERMINATED"})), Some(Stopped));
        assert_eq!(state(json!({"instanceStatus": "PROVISIONING", "currentAction": "CREATING"})), Some(Creating));
        assert_eq!(state(json!({"currentAction": "CREATING"})), Some(Creating));
        assert_eq!(state(json!({"currentAction": "DELETING"})), Some(Terminating));
        let failed = json!({"currentAction": "CREATING",
            "lastAttempt": {"errors": {"errors": [{"code": "QUOTA_EXCEEDED", "message": "Quota 'CPUS' exceeded."}]}}});
        assert_eq!(state(failed), None);
    }
}
