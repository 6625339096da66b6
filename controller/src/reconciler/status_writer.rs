//! The NodeVersion status writes, in order, the progress ones off the reconcile's path.
//!
//! A rollout changes a count on nearly every event, and the status write that follows each reconcile took about half
//! of the reconciler's time at 1000 nodes (docs/performance.md). A node verified during that write waited for it
//! before its hand-off could be planned. So the status computed after a reconcile's Node writes is sent in the
//! background ([`StatusWriter::send`]), and the next reconcile plans at once.
//!
//! # Guarantees
//! - **In order.** Every status write (a JSON patch replacing the whole status) is sent only after the previous one
//!   returned: [`StatusWriter::write`] and [`StatusWriter::send`] first wait for the one in flight.
//! - **Computed from the last status computed.** A status sent in the background is recorded at once in the
//!   reconciler's overlay of its own writes (`status_writes`), so the next reconcile reads it even before the write
//!   returned, and computes its status from it: no step-duration sample is lost between two writes.
//! - **A failed write is written again.** If the write fails (refused, or the leadership term ended), the overlay goes
//!   back to the status before it, so the next reconcile sees the difference and writes again.

use crate::events::Events;
use crate::leadership::Term;
use crate::own_writes::OwnWrites;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use shared::crd::{NodeVersion, NodeVersionStatus};
use std::sync::Arc;
use tokio::task::JoinHandle;

/// Writes NodeVersion statuses for the reconciler.
pub(super) struct StatusWriter {
    shared: Shared,
    /// The write sent in the background, if one may still run.
    in_flight: tokio::sync::Mutex<Option<JoinHandle<()>>>,
}

/// What a write needs, shared with the write in the background.
#[derive(Clone)]
struct Shared {
    api: Api<NodeVersion>,
    /// The statuses written (or sent) that the watch has not delivered yet.
    writes: Arc<OwnWrites<NodeVersion>>,
    dropped: Arc<super::dropped::Dropped>,
    events: Events,
}

impl StatusWriter {
    pub(super) fn new(
        api: Api<NodeVersion>,
        writes: Arc<OwnWrites<NodeVersion>>,
        dropped: Arc<super::dropped::Dropped>,
        events: Events,
    ) -> Self {
        StatusWriter { shared: Shared { api, writes, dropped, events }, in_flight: Default::default() }
    }

    /// Replaces the status of `version` with `status` within `term`, after the write in flight, and returns once
    /// written. False when it was not written.
    pub(super) async fn write(&self, term: &Term, version: &NodeVersion, status: &NodeVersionStatus) -> bool {
        let mut in_flight = self.in_flight.lock().await;
        if let Some(previous) = in_flight.take() {
            let _ = previous.await;
        }
        self.shared.write(term, version, status).await
    }

    /// Sends the status of `version` in the background, after the write in flight; the overlay shows it at once.
    pub(super) async fn send(&self, term: &Term, version: &NodeVersion, status: NodeVersionStatus) {
        let mut in_flight = self.in_flight.lock().await;
        if let Some(previous) = in_flight.take() {
            let _ = previous.await;
        }
        let name = version.name_any();
        let mut sent = version.clone();
        sent.status = Some(status.clone());
        self.shared.writes.record(&name, version.resource_version(), sent);
        let (shared, term, before) = (self.shared.clone(), term.clone(), version.clone());
        *in_flight = Some(tokio::spawn(async move {
            if !shared.write(&term, &before, &status).await {
                // Back to the status before: the next reconcile computes the same difference and writes it again.
                shared.writes.record(&name, before.resource_version(), before);
            }
        }));
    }
}

impl Shared {
    /// Replaces the whole status (a JSON patch `add` of `/status`: no stale field survives, as it could in a merge
    /// patch of nested objects), within `term`. False when it was not written.
    async fn write(&self, term: &Term, version: &NodeVersion, status: &NodeVersionStatus) -> bool {
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
        match term.fence(self.api.patch_status(&name, &params, &patch)).await {
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
                self.writes.record(&name, version.resource_version(), written);
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
