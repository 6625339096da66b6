//! The simulated cloud's batch calls: several instances created or deleted in ONE API call (counted once, faulted
//! once as a whole, as a real cloud's batch call is one request against its rate limit: GCP
//! `instanceGroupManagers.createInstances` / `deleteInstances`, Azure `virtualMachineScaleSets/delete`), with a
//! result per instance: the group's create failure (a quota), its size limit, an instance's own failure or delete
//! failure apply to each instance alone, and the others go on.

use super::{SimulatedCloud, Target, invalid, not_found};
use cloud::Operation;
use cloud::simulated::wire::{self, ErrorBody, MAX_BATCH};

/// Refuses a batch of no instance or more than [`MAX_BATCH`].
fn check_size(count: usize) -> Result<(), ErrorBody> {
    if (1..=MAX_BATCH).contains(&count) {
        Ok(())
    } else {
        Err(invalid(format!("a batch carries 1 to {MAX_BATCH} instances, not {count}")))
    }
}

impl SimulatedCloud {
    /// Adds `count` instances to a group in one call; each instance's result in order.
    pub async fn create_instances(&self, group: &str, count: usize) -> Result<wire::CreateBatchAnswer, ErrorBody> {
        self.inner.state.lock().asked += count.min(MAX_BATCH) as u64;
        self.begin(Operation::CreateInstances, Target::Group(group)).await?;
        check_size(count)?;
        let made: Vec<_> = {
            let mut state = self.inner.state.lock();
            if !state.groups.contains_key(group) {
                return Err(not_found(format!("group {group}")));
            }
            (0..count).map(|_| self.create_locked(&mut state, group)).collect()
        };
        for made in made.iter().flatten() {
            self.after(made.provision, &made.name, 0, SimulatedCloud::provisioned);
        }
        self.answer_creates_late(group).await?;
        let state = self.inner.state.lock();
        let results = made
            .into_iter()
            .map(|made| match made {
                Ok(made) => {
                    let answer = SimulatedCloud::create_answer(&state, made);
                    wire::CreateResult { instance: answer.instance, token: answer.token, error: None }
                }
                Err(error) => wire::CreateResult { error: Some(error), ..wire::CreateResult::default() },
            })
            .collect();
        Ok(wire::CreateBatchAnswer { results })
    }

    /// Starts deleting instances of a group in one call; each instance's result in order (an unknown or terminated
    /// instance is `alreadyGone`, one of another group its own `Invalid`).
    pub async fn delete_instances(&self, group: &str, names: &[String]) -> Result<wire::DeleteBatchAnswer, ErrorBody> {
        self.begin(Operation::DeleteInstances, Target::Group(group)).await?;
        check_size(names.len())?;
        let deleted: Vec<_> = {
            let mut state = self.inner.state.lock();
            if !state.groups.contains_key(group) {
                return Err(not_found(format!("group {group}")));
            }
            names.iter().map(|name| self.delete_locked(&mut state, group, name, true)).collect()
        };
        let results = names
            .iter()
            .zip(deleted)
            .map(|(name, deleted)| match deleted {
                Ok(deleted) => {
                    let answer = self.deleted(name, deleted);
                    wire::DeleteResult { already_gone: Some(answer.already_gone), error: None }
                }
                Err(error) => wire::DeleteResult { already_gone: None, error: Some(error) },
            })
            .collect();
        Ok(wire::DeleteBatchAnswer { results })
    }
}
