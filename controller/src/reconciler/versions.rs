//! The NodeVersion objects as the reconciler keeps them: the finalizer added before any node is touched, the
//! deletions finished once their nodes are released, each valid generation recorded as `status.lastValidSpec`
//! before anything is done under it, and the status written (conditional, computed from the last one written).

use super::*;

impl Reconciler {
    /// Adds the [`release::FINALIZER`] to every NodeVersion that lacks it, within `term`. False when
    /// one could not be added (the caller plans again later).
    pub(super) async fn add_finalizers(&mut self, term: &Term, versions: &[Arc<NodeVersion>]) -> bool {
        let mut added_all = true;
        for version in versions {
            let uid = version.uid().unwrap_or_default();
            let Some(patch) = release::add(version.metadata.finalizers.as_deref()) else {
                self.finalizers_added.remove(&uid);
                continue;
            };
            // Added, and the cache has not caught up yet.
            if self.finalizers_added.contains(&uid) {
                continue;
            }
            let name = version.name_any();
            match term.fence(self.versions_api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))).await {
                Ok(Ok(_)) => {
                    tracing::debug!(nodeversion = %name, "finalizer added");
                    self.finalizers_added.insert(uid);
                }
                Ok(Err(error)) => {
                    tracing::warn!(nodeversion = %name, %error, "could not add the finalizer; touching none of its nodes");
                    added_all = false;
                }
                Err(_) => added_all = false,
            }
        }
        added_all
    }

    /// For each NodeVersion being deleted: removes the [`release::FINALIZER`] once no node its
    /// (acting) selector selects is still held by the controller; until then says which nodes it
    /// waits for, once per change. A node whose taint of outdated nodes the plan takes off (`untainting`: no rollout
    /// wants it there) is held too, until it is off (`crate::policy::taint`).
    pub(super) async fn finish_deletions(
        &mut self,
        term: &Term,
        deleting: &[Arc<NodeVersion>],
        views: &[&NodeView],
        untainting: &std::collections::HashSet<&str>,
        now: Timestamp,
    ) {
        self.releasing.retain(|uid, _| deleting.iter().any(|v| v.uid().as_deref() == Some(uid)));
        for version in deleting {
            let finalizers = version.metadata.finalizers.as_deref();
            if !finalizers.is_some_and(|f| f.iter().any(|f| f == release::FINALIZER)) {
                continue;
            }
            let rollout = self.specs.rollout(version, now);
            let selector = rollout.spec.acting().map(|s| &s.policy.selector);
            let waiting: Vec<String> = views
                .iter()
                .filter(|v| {
                    let node = self.nodes.get(&ObjectRef::new(&v.name));
                    selector.is_some_and(|s| s.matches(node.as_ref().and_then(|n| n.metadata.labels.as_ref())))
                })
                .filter_map(|v| {
                    let tainted = v.outdated_taint && untainting.contains(v.name.as_str());
                    let why = release::unreleased(v).or_else(|| tainted.then(|| release::TAINTED.to_owned()));
                    why.map(|why| format!("{}: {why}", v.name))
                })
                .collect();
            let name = version.name_any();
            let uid = version.uid().unwrap_or_default();
            if !waiting.is_empty() {
                let message = format!("deleted; releasing its nodes first: {}", waiting.join("; "));
                if self.releasing.get(&uid) != Some(&message) {
                    tracing::info!(nodeversion = %name, nodes = waiting.len(), detail = message, "NodeVersion deleted; releasing nodes");
                    self.releasing.insert(uid, message);
                }
                continue;
            }
            let Some(patch) = release::remove(finalizers) else { continue };
            match term.fence(self.versions_api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))).await {
                Ok(Ok(_)) => tracing::info!(nodeversion = %name, "every node released; finalizer removed"),
                Ok(Err(error)) => tracing::warn!(nodeversion = %name, %error, "could not remove the finalizer"),
                Err(fenced) => tracing::debug!(nodeversion = %name, %fenced, "finalizer not removed"),
            }
        }
    }

    /// IMPORTANT: records each newly valid generation in `status.lastValidSpec` before anything
    /// is done under it, so that a controller that starts after it (and finds a later generation
    /// invalid) finishes the nodes in flight under this spec instead of falling back to defaults.
    /// False when a record could not be written (the caller plans again later).
    pub(super) async fn record_valid_specs(
        &mut self,
        term: &Term,
        versions: &[Arc<NodeVersion>],
        rollouts: &[Rollout],
    ) -> bool {
        let mut recorded_all = true;
        for (version, rollout) in versions.iter().zip(rollouts) {
            let SpecState::Valid(spec) = &rollout.spec else { continue };
            let published = version.status.as_ref().and_then(|s| s.last_valid_spec.as_ref()).map(|l| l.generation);
            let uid = version.uid().unwrap_or_default();
            if published == Some(spec.generation) || self.specs.recorded(&uid) == Some(spec.generation) {
                continue;
            }
            let mut status = version.status.clone().unwrap_or_default();
            status.last_valid_spec = Some(spec.record());
            if self.write_status(term, version, &status).await {
                self.specs.set_recorded(&uid, spec.generation);
            } else {
                recorded_all = false;
            }
        }
        recorded_all
    }

    pub(super) async fn publish_status(
        &self,
        term: &Term,
        version: &NodeVersion,
        rollout: &Rollout,
        plan: &Plan,
        now: Timestamp,
    ) {
        let previous = version.status.as_ref();
        let mut status = status::compute(plan, rollout, version.metadata.generation, previous, now);
        self.preflight.annotate(version, &mut status);
        if previous != Some(&status)
            && !self.dropped.repeats(&version.name_any(), version.resource_version().as_deref(), &status)
        {
            self.write_status(term, version, &status).await;
        }
    }

    /// Replaces the whole status (a JSON patch `add` of `/status`: no stale field survives, as it
    /// could in a merge patch of nested objects), within `term`. False when it was not written.
    pub(super) async fn write_status(&self, term: &Term, version: &NodeVersion, status: &NodeVersionStatus) -> bool {
        let value = match serde_json::to_value(status) {
            Ok(value) => value,
            Err(error) => {
                tracing::error!(%error, "cannot serialize the NodeVersion status");
                return false;
            }
        };
        let name = version.name_any();
        let patch: json_patch::Patch =
            json_patch::Patch(vec![json_patch::PatchOperation::Add(json_patch::AddOperation {
                path: json_patch::jsonptr::PointerBuf::from_tokens(["status"]),
                value,
            })]);
        let (params, patch) = (PatchParams::default(), Patch::<()>::Json(patch));
        match term.fence(self.versions_api.patch_status(&name, &params, &patch)).await {
            Ok(Ok(written)) => {
                if let Some(fields) = self.dropped.record(&name, status, &written) {
                    let fields = fields.join(", ");
                    tracing::warn!(nodeversion = %name, %fields, "the API server dropped status fields the controller wrote: \
                        is the NodeVersion CRD older than the controller?");
                    self.events.publish(
                        written.object_ref(&()),
                        None,
                        crate::reason::Reason::StatusFieldsDropped,
                        format!(
                            "The API server dropped or changed the status fields {fields} written by the controller: \
                             the NodeVersion CRD is probably older than the controller (apply the CRDs of this release). \
                             The status is not written again until it or the NodeVersion changes."
                        ),
                        "WriteStatus",
                    );
                }
                self.status_writes.record(&name, version.resource_version(), written);
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(nodeversion = %name, %error, "could not write the NodeVersion status");
                false
            }
            Err(fenced) => {
                tracing::debug!(nodeversion = %name, %fenced, "NodeVersion status not written");
                false
            }
        }
    }
}
