//! Asynchronous creation in the GCP emulator: `createInstances` records the instances in the MIG and returns; the
//! MIG creates each one [`super::GcpTiming::create`] later, retrying an attempt that fails and reporting the
//! failure on the managed instance (`lastAttempt.errors`), as Compute's managed instance groups do.
//!
//! The published definition (compute v1, `ManagedInstance`, as generated into `google-cloud-compute-v1` 3.4
//! `model::ManagedInstance`): `name` "always exists even if the instance has not yet been created"; `id` and
//! `instanceStatus` are "empty when the instance does not exist"; `currentAction` `CREATING`: "If the group fails
//! to create this instance, it will try again until it is successful"; `lastAttempt.errors.errors[]` with `code`
//! and `message`: "the last attempt to create or delete the instance".

use super::{COMPUTE_URL, Creating, GcpEmulator, Mig};
use serde_json::{Value, json};

impl GcpEmulator {
    /// Every attempt of MIG `mig` to create an instance fails with `code` (e.g. `QUOTA_EXCEEDED`,
    /// `ZONE_RESOURCE_POOL_EXHAUSTED`) and `message` until [`GcpEmulator::clear_faults`]; the MIG keeps retrying.
    pub fn fail_creations(&self, mig: &str, code: &str, message: &str) {
        self.inner.state.lock().faults.creation_errors.insert(mig.to_owned(), (code.to_owned(), message.to_owned()));
    }

    /// The names of a MIG's instances that it was asked to create and that do not exist yet.
    pub fn creating_names(&self, zone: &str, mig: &str) -> Vec<String> {
        let state = self.inner.state.lock();
        state.creating.iter().filter(|((z, _), c)| z == zone && c.mig == mig).map(|((_, n), _)| n.clone()).collect()
    }

    /// Records the instances `names` of `mig` as being created and schedules the MIG's first attempt.
    pub(super) fn start_creations(&self, state: &mut super::State, mig: &Mig, names: &[String]) {
        let unlisted_until = state.list_lag.map(|lag| tokio::time::Instant::now() + lag);
        for name in names {
            if let Some(until) = unlisted_until {
                state.unlisted_until.insert((mig.zone.clone(), name.clone()), until);
            }
            state
                .creating
                .insert((mig.zone.clone(), name.clone()), Creating { mig: mig.name.clone(), last_error: None });
            let (zone, name) = (mig.zone.clone(), name.clone());
            self.after(self.timing().create, move |emulator| emulator.attempt_creation(&zone, &name));
        }
    }

    /// One attempt of the MIG to create an instance: it fails (and is tried again later) while the MIG's creations
    /// fail, else the instance exists, `PROVISIONING`. An instance deleted meanwhile is not created.
    fn attempt_creation(&self, zone: &str, name: &str) {
        let key = (zone.to_owned(), name.to_owned());
        let created = {
            let mut state = self.inner.state.lock();
            let Some(creating) = state.creating.get(&key) else { return };
            let mig_name = creating.mig.clone();
            if let Some(error) = state.faults.creation_errors.get(&mig_name).cloned() {
                if let Some(creating) = state.creating.get_mut(&key) {
                    creating.last_error = Some(error);
                }
                false
            } else {
                let Some(mig) = state.migs.get(&(zone.to_owned(), mig_name)).cloned() else {
                    state.creating.remove(&key);
                    return;
                };
                match self.new_instance(&mut state, &mig, "PROVISIONING") {
                    Ok(instance) => {
                        state.creating.remove(&key);
                        state.instances.insert(key.clone(), instance);
                        true
                    }
                    Err(message) => {
                        if let Some(creating) = state.creating.get_mut(&key) {
                            creating.last_error = Some(("INTERNAL_ERROR".into(), message));
                        }
                        false
                    }
                }
            }
        };
        let timing = self.timing();
        let (zone, name) = (zone.to_owned(), name.to_owned());
        if created {
            self.after(timing.provision, move |emulator| emulator.provisioned(&zone, &name));
        } else {
            self.after(timing.create, move |emulator| emulator.attempt_creation(&zone, &name));
        }
    }

    /// The `ManagedInstance` of an instance being created: no `id`, no `instanceStatus`.
    pub(super) fn creating_json(&self, zone: &str, name: &str, template: &str, creating: &Creating) -> Value {
        let project = &self.inner.project;
        let mut managed = json!({
            "instance": format!("{COMPUTE_URL}projects/{project}/zones/{zone}/instances/{name}"),
            "name": name,
            "currentAction": "CREATING",
            "version": {"instanceTemplate": format!("{COMPUTE_URL}projects/{project}/global/instanceTemplates/{template}")},
        });
        if let Some((code, message)) = &creating.last_error {
            managed["lastAttempt"] = json!({"errors": {"errors": [{"code": code, "message": message}]}});
        }
        managed
    }
}
