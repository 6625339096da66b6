//! The spec each NodeVersion acts on: validated once per generation, with the last valid spec to fall back on
//! while a generation is invalid (this process's, or the one recorded in `status.lastValidSpec` by an earlier one).

use crate::policy::{Rollout, SpecState, ValidSpec};
use jiff::Timestamp;
use kube::ResourceExt;
use shared::crd::NodeVersion;
use std::collections::HashMap;
use std::sync::Arc;

/// Each NodeVersion's spec, validated once per generation, with the last valid spec to fall back
/// on while a generation is invalid.
#[derive(Debug, Default)]
pub struct Specs {
    /// By NodeVersion UID.
    entries: HashMap<String, SpecEntry>,
}

#[derive(Debug)]
struct SpecEntry {
    generation: i64,
    state: SpecState,
    /// The valid generation this controller wrote to `status.lastValidSpec`.
    recorded: Option<i64>,
}

impl Specs {
    /// The rollout of `version`, validating its spec if this generation is new.
    pub fn rollout(&mut self, version: &NodeVersion, now: Timestamp) -> Rollout {
        let uid = version.uid().unwrap_or_default();
        let generation = version.metadata.generation.unwrap_or_default();
        let name = version.name_any();
        let previous = self.entries.remove(&uid);
        let entry = match previous {
            Some(entry) if entry.generation == generation => entry,
            previous => {
                let state = match ValidSpec::from_spec(&version.spec, generation, now) {
                    Ok(spec) => SpecState::Valid(Arc::new(spec)),
                    Err(errors) => {
                        tracing::warn!(nodeversion = %name, generation, errors = errors.join("; "), "invalid spec");
                        let in_memory = previous.as_ref().and_then(|e| e.state.acting().cloned());
                        let published = version.status.as_ref().and_then(|s| s.last_valid_spec.as_ref()).and_then(|l| {
                            ValidSpec::from_last_valid(l, now)
                                .map_err(|error| {
                                    tracing::warn!(nodeversion = %name, error, "status.lastValidSpec is not valid; ignored")
                                })
                                .ok()
                                .map(Arc::new)
                        });
                        let last_valid = [in_memory, published].into_iter().flatten().max_by_key(|s| s.generation);
                        SpecState::Invalid { errors, last_valid }
                    }
                };
                SpecEntry { generation, state, recorded: previous.and_then(|e| e.recorded) }
            }
        };
        let rollout = Rollout::new(name, entry.state.clone(), version.status.as_ref());
        self.entries.insert(uid, entry);
        rollout
    }

    pub fn recorded(&self, uid: &str) -> Option<i64> {
        self.entries.get(uid).and_then(|e| e.recorded)
    }

    pub fn set_recorded(&mut self, uid: &str, generation: i64) {
        if let Some(entry) = self.entries.get_mut(uid) {
            entry.recorded = Some(generation);
        }
    }

    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.entries.retain(|uid, _| keep(uid));
    }
}
