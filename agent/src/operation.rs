//! Host work in the background: one operation of [`HostUpdater`] run as a task, retried after
//! transient errors, reporting its progress to the agent's loop, and cancellable.
//!
//! # Guarantees
//! - An error that [`crate::host::HostError::is_retryable`] says may pass is retried with backoff:
//!   stage and reboot until they succeed, fail for good or are cancelled (the controller's step
//!   timeout is the bound: the agent cancels the work when the controller gives the step up), and
//!   so is a fetch; a release or a discard a bounded number of times ([`retry::RELEASE`]).
//! - Each retry is announced ([`Progress::Retrying`]) with the error, so the agent can say what it
//!   works around; the end is announced once ([`Progress::Finished`]), unless cancelled.
//! - [`Operation::cancel`] returns only once the task is gone: nothing of the operation runs after
//!   it (what the host's own updater runs in the background aside, see [`HostUpdater`]).

use crate::decide::Work;
use crate::host::{HostError, HostUpdater, KubernetesFetch, KubernetesUpgrade};
use crate::kubeadm::Role;
use crate::metrics::{HostOpLabels, Metrics};
use crate::releases::Releases;
use crate::retry;
use backon::Retryable;
use shared::protocol::{KubeadmIntent, KubeadmRole};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

/// What a running operation tells the agent. `serial` names the operation.
#[derive(Debug)]
pub enum Progress {
    /// It failed with a transient error and tries again after a pause.
    Retrying { serial: u64, error: String },
    /// It ended.
    Finished { serial: u64, result: Result<(), HostError> },
}

/// A host operation under way.
#[derive(Debug)]
pub struct Operation {
    serial: u64,
    task: JoinHandle<()>,
}

impl Operation {
    /// Starts `work` on `host` (reading components from `releases`); progress goes to `progress`.
    pub fn start<H: HostUpdater>(
        host: Arc<H>,
        releases: Arc<dyn Releases>,
        work: Work,
        serial: u64,
        progress: UnboundedSender<Progress>,
        metrics: Metrics,
    ) -> Self {
        let operation = work.operation();
        let policy = match work {
            Work::Stage { .. } | Work::Reboot { .. } | Work::KubeadmUpgrade { .. } | Work::Fetch { .. } => {
                retry::HOST_WORK
            }
            Work::Release { .. } | Work::Discard { .. } => retry::RELEASE,
        };
        let task = tokio::spawn(async move {
            let attempt = || async {
                match &work {
                    Work::Stage { target, .. } => host.stage(target).await,
                    Work::Reboot { target, .. } => host.activate_and_reboot(target).await,
                    Work::KubeadmUpgrade { target, kubeadm, .. } => {
                        upgrade_kubernetes(&*host, &*releases, target, kubeadm).await
                    }
                    Work::Fetch { target, kubeadm, .. } => fetch_kubernetes(&*host, &*releases, target, kubeadm).await,
                    Work::Release { target } => host.release(target).await,
                    Work::Discard { .. } => host.discard_fetched().await,
                }
            };
            let result = attempt
                .retry(policy.builder())
                .sleep(tokio::time::sleep)
                .when(HostError::is_retryable)
                .notify(|error, delay| {
                    tracing::warn!(operation, %error, retry_in = ?delay, "host work failed with a transient error; trying again");
                    metrics.host_retries.get_or_create(&HostOpLabels { operation, result: "retry" }).inc();
                    // The receiver lives as long as the agent loop; if it is gone, the agent is stopping.
                    let _ = progress.send(Progress::Retrying { serial, error: error.to_string() });
                })
                .await;
            let label = if result.is_ok() { "ok" } else { "error" };
            metrics.host_operations.get_or_create(&HostOpLabels { operation, result: label }).inc();
            let _ = progress.send(Progress::Finished { serial, result });
        });
        Operation { serial, task }
    }

    /// Whether `serial` names this operation.
    pub fn is(&self, serial: u64) -> bool {
        self.serial == serial
    }

    /// Stops the operation; returns once nothing of it runs any more.
    pub async fn cancel(self) {
        self.task.abort();
        // A cancelled task ends with a "cancelled" join error; a finished one has nothing to say.
        let _ = self.task.await;
    }
}

/// Reads and validates the components of `kubeadm`, then upgrades the host to version `target`.
async fn upgrade_kubernetes<H: HostUpdater>(
    host: &H,
    releases: &dyn Releases,
    target: &str,
    kubeadm: &KubeadmIntent,
) -> Result<(), HostError> {
    let (version, release) = read_release(releases, target, kubeadm).await?;
    // Every node but the first control-plane node runs the same `kubeadm upgrade node`.
    let role = match kubeadm.role {
        Some(KubeadmRole::Apply) => Role::FirstControlPlane,
        Some(KubeadmRole::Node) => Role::Worker,
        None => {
            return Err(HostError::StepFailed {
                step: format!("upgrading Kubernetes to {version}"),
                message: "the intent names no kubeadm role".to_owned(),
            });
        }
    };
    host.upgrade_kubernetes(&KubernetesUpgrade { version, role, components: release.components }).await
}

/// Reads and validates the components of `kubeadm`, then fetches them ahead of the upgrade to version `target`.
async fn fetch_kubernetes<H: HostUpdater>(
    host: &H,
    releases: &dyn Releases,
    target: &str,
    kubeadm: &KubeadmIntent,
) -> Result<(), HostError> {
    let (version, release) = read_release(releases, target, kubeadm).await?;
    host.fetch_kubernetes(&KubernetesFetch { version, components: release.components }).await
}

/// The version `target` and the validated components ConfigMap `kubeadm` names for it.
async fn read_release(
    releases: &dyn Releases,
    target: &str,
    kubeadm: &KubeadmIntent,
) -> Result<(shared::version::KubeVersion, shared::components::Release), HostError> {
    let version = target.parse().map_err(|error: shared::version::VersionError| HostError::InvalidTarget {
        target: target.to_owned(),
        reason: error.to_string(),
    })?;
    let release = releases.release(&kubeadm.components, &version).await?;
    Ok((version, release))
}
