//! The I/O seam between the agent and its host: what the host runs, staging, activating and
//! rebooting into a new OS image, and fetching ahead and upgrading its Kubernetes components with
//! kubeadm.
//!
//! The agent's decision logic is generic over [`HostUpdater`]; the binary picks one backend:
//! - [`bottlerocket::BottlerocketHost`]: the Bottlerocket update API on `/run/api.sock`;
//! - [`command::CommandHost`]: configured commands, for other distributions;
//! - [`simulated::SimulatedHost`]: the simulated hosts of the dev cluster.
//!
//! # Guarantees (of every backend)
//! - Every method is idempotent and safe to call again after the agent restarted in the middle
//!   of it: it looks at the host first and does only what is left.
//! - Nothing from the cluster (targets, node names) is ever interpreted by a shell or spliced into
//!   a command line.
//! - Every wait is bounded; errors say what failed in words fit for a node's `state-message`.
//! - [`HostUpdater::activate_and_reboot`] returns once the reboot is under way and never exits the
//!   process: on a real host the reboot ends it; in the simulation the agent lives on and learns of
//!   the new boot from [`HostUpdater::facts`].

pub mod bottlerocket;
pub mod command;
mod error;
mod http;
pub mod simulated;
mod text;

pub use error::{ConfigError, EX_TEMPFAIL, HostError};

use crate::kubeadm::Role;
use shared::components::VerifiedComponent;
use shared::protocol::{BootId, ComponentsHash};
use shared::version::KubeVersion;
use std::future::Future;
use std::path::{Path, PathBuf};
use tokio::io::AsyncReadExt;

/// Where Linux publishes the boot ID, a random UUID drawn at every boot.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// Facts of the host the agent runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// The OS image the host runs now (compared with the NodeVersion's `spec.image`).
    pub os_image: String,
    /// Changes on every boot.
    pub boot_id: BootId,
    /// The image staged and ready to activate (or already activated for the next boot), if any.
    pub staged_image: Option<String>,
    /// The hash over the host's Kubernetes components; `None` where the backend cannot tell.
    pub components_hash: Option<ComponentsHash>,
}

/// An upgrade of the host's Kubernetes components (intent `kubeadm-upgrade`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesUpgrade {
    /// The version kubeadm upgrades to.
    pub version: KubeVersion,
    /// Which kubeadm command the host runs.
    pub role: Role,
    /// What to install, validated by the components ConfigMap's rules (every one with its SHA-256).
    pub components: Vec<VerifiedComponent>,
}

/// A fetch of Kubernetes components ahead of the host's upgrade (intent `fetch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesFetch {
    /// The version the components are for.
    pub version: KubeVersion,
    /// What to fetch, validated by the components ConfigMap's rules (every one with its SHA-256).
    pub components: Vec<VerifiedComponent>,
}

/// Reads and changes what the host boots. See the module docs for the guarantees every
/// implementation gives.
///
/// # Cancellation
/// The agent drops a `stage` or `activate_and_reboot` future when the controller no longer wants
/// it (the node was released, the target changed, the step timed out). Dropping one stops the
/// agent's part of the work at once (a running command is killed with everything it started) and
/// leaves the host in a state the next call of any method copes with; work the host's own updater
/// runs in the background (a Bottlerocket download) may go on. [`HostUpdater::release`] then undoes
/// what staging changed.
pub trait HostUpdater: Send + Sync + 'static {
    /// The facts of the host now.
    fn facts(&self) -> impl Future<Output = Result<HostFacts, HostError>> + Send;

    /// Stages `target` without disrupting the node, so that [`HostUpdater::activate_and_reboot`]
    /// can boot it. Idempotent: staging what is already staged returns quickly. Returns once
    /// staged (may take minutes). What `Ok` guarantees differs by backend:
    /// - Bottlerocket: the update status shows `target` in the staging partition; the host's
    ///   updater checked the image against its signed repository metadata while writing it.
    /// - command: `apply` exited 0 and, when a `staged` command is configured, `staged` then
    ///   prints `target` (without one, `apply`'s exit status is all the agent knows).
    /// - simulated: the dev cluster's host records `target` as staged.
    fn stage(&self, target: &str) -> impl Future<Output = Result<(), HostError>> + Send;

    /// Makes the staged `target` the next boot's image and reboots. Idempotent. Returns once the
    /// reboot is under way; on a real host the process is then killed by the reboot, so this never
    /// exits the process itself.
    fn activate_and_reboot(&self, target: &str) -> impl Future<Output = Result<(), HostError>> + Send;

    /// Undoes, as far as the backend can, what staging (or an activation not followed by a
    /// reboot) changed for `target`, because the controller gave `target` up before the reboot:
    /// afterwards an unplanned reboot boots what the host runs now, and the host's update
    /// settings are as they were. Idempotent.
    /// - Bottlerocket: undoes an activation of `target` (deactivate-update) and restores
    ///   `settings.updates.version-lock` and `ignore-waves` to the values the pin replaced (recorded
    ///   on the host, so also after an agent restart; `activate_and_reboot` restores them too,
    ///   before the reboot). A staged (not activated) image is left in place; it is never booted.
    /// - command: runs the `unstage` command with `target` as its last argument, if one is
    ///   configured.
    /// - simulated: nothing to undo (a simulated host reboots only when the agent asks, after
    ///   staging the target of that reboot): the default, which does nothing.
    fn release(&self, target: &str) -> impl Future<Output = Result<(), HostError>> + Send {
        let _ = target;
        std::future::ready(Ok(()))
    }

    /// Upgrades the host's Kubernetes components: every component downloaded and verified against its
    /// SHA-256 before anything is installed (a failure there leaves the host unchanged), everything but the
    /// kubelet and kubectl installed, kubeadm run for the role ([`crate::kubeadm::upgrade_commands`]), then
    /// the kubelet and kubectl replaced, the installed components recorded (the record is what
    /// [`HostFacts::components_hash`] reports from then on) and the kubelet restarted. Safe to call again:
    /// kubeadm's upgrade of a node to the version it runs changes nothing.
    /// - command: the installer writes under the configured host root; the commands run as argv vectors
    ///   (in the host's namespaces with `nsenter: true`); a failing command's exit status and the end of its
    ///   output make the error.
    /// - simulated: the dev cluster's host installs the components and simulates kubeadm and the restart.
    /// - Bottlerocket: refused (the Kubernetes version comes with the OS image variant).
    ///
    /// Upgrades with every component that was fetched ahead ([`HostUpdater::fetch_kubernetes`]) taken from the
    /// host's fetch cache instead of downloaded, once its SHA-256 checked again; a cached file whose hash does not
    /// match is deleted and the component downloaded.
    fn upgrade_kubernetes(&self, upgrade: &KubernetesUpgrade) -> impl Future<Output = Result<(), HostError>> + Send;

    /// Fetches every component of `fetch` ahead of the host's Kubernetes upgrade and verifies each against its
    /// SHA-256, installing nothing and disturbing nothing that runs: the later
    /// [`HostUpdater::upgrade_kubernetes`] then installs them without downloading. Replaces any set fetched
    /// before (the host keeps one). Idempotent: what is fetched and still verifies is not downloaded again.
    /// - command: downloads into the fetch cache under the configured host root
    ///   ([`crate::components::DEFAULT_FETCH_CACHE`]), each file named by its hash and written only once the hash
    ///   matched; inline components need no fetch.
    /// - simulated: the dev cluster's host does the same into its own cache.
    /// - Bottlerocket: refused, as the upgrade is.
    fn fetch_kubernetes(&self, fetch: &KubernetesFetch) -> impl Future<Output = Result<(), HostError>> + Send;

    /// Deletes whatever [`HostUpdater::fetch_kubernetes`] left on the host, because no intent wants it any more
    /// (or the upgrade it was for is done). Idempotent; nothing fetched is nothing to do.
    fn discard_fetched(&self) -> impl Future<Output = Result<(), HostError>> + Send;
}

/// Longest boot ID file read; the kernel's is 37 bytes.
const MAX_BOOT_ID_FILE: u64 = 256;

/// Reads the host's boot ID from `path` (normally [`BOOT_ID_PATH`]).
pub async fn read_boot_id(path: &Path) -> Result<BootId, HostError> {
    let failed = |reason: String| HostError::BootId { path: path.to_owned(), reason };
    let file = tokio::fs::File::open(path).await.map_err(|e| failed(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_BOOT_ID_FILE + 1).read_to_end(&mut bytes).await.map_err(|e| failed(e.to_string()))?;
    if bytes.len() as u64 > MAX_BOOT_ID_FILE {
        return Err(failed(format!("the file is longer than {MAX_BOOT_ID_FILE} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|_| failed("the file is not UTF-8".to_owned()))?;
    BootId::parse("boot ID", text.trim_end_matches('\n')).map_err(|e| failed(e.to_string()))
}

/// The default boot ID path as a `PathBuf`, for the backends' configurations.
fn default_boot_id_path() -> PathBuf {
    PathBuf::from(BOOT_ID_PATH)
}

/// Checks that `image` (reported by a host) fits the protocol's `os-image` annotation.
fn check_reported_image(image: &str) -> Result<(), &'static str> {
    if image.is_empty() {
        return Err("the image is empty");
    }
    if image.len() > shared::protocol::MAX_TARGET_LEN {
        return Err("the image is longer than 1024 bytes");
    }
    if image.chars().any(char::is_control) || image.trim() != image {
        return Err("the image contains control characters or surrounding white space");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn boot_id_from(content: &[u8]) -> Result<BootId, HostError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("boot_id");
        std::fs::write(&path, content).unwrap();
        read_boot_id(&path).await
    }

    #[tokio::test]
    async fn boot_id_is_read_without_its_newline() {
        let id = boot_id_from(b"5e0f8c7d-0f6a-4bd8-9a1b-7d281c1e6e5a\n").await.unwrap();
        assert_eq!(id.as_str(), "5e0f8c7d-0f6a-4bd8-9a1b-7d281c1e6e5a");
    }

    #[tokio::test]
    async fn the_real_boot_id_of_this_machine_is_readable() {
        read_boot_id(Path::new(BOOT_ID_PATH)).await.unwrap();
    }

    #[tokio::test]
    async fn a_missing_boot_id_file_is_a_clear_error() {
        let error = read_boot_id(Path::new("/nonexistent/boot_id")).await.unwrap_err();
        let message = error.to_string();
        assert!(message.contains("cannot read the boot ID from /nonexistent/boot_id"), "{message}");
        assert!(message.contains("No such file"), "{message}");
        assert!(!error.is_retryable());
    }

    #[tokio::test]
    async fn a_malformed_boot_id_is_a_clear_error() {
        for content in [&b""[..], b"not a boot id\n", b"\xff\xfe", &[b'a'; 300]] {
            let message = boot_id_from(content).await.unwrap_err().to_string();
            assert!(message.starts_with("cannot read the boot ID from "), "{message}");
        }
        let message = boot_id_from(b"has spaces\n").await.unwrap_err().to_string();
        assert!(message.contains("A-Z, a-z, 0-9 and -"), "{message}");
    }

    #[test]
    fn reported_images_must_fit_the_annotation() {
        assert!(check_reported_image("1.20.0").is_ok());
        assert!(check_reported_image("projects/p/global/images/img-v2").is_ok());
        for bad in ["", " 1.20.0", "1.20\n0", &"x".repeat(1025)] {
            assert!(check_reported_image(bad).is_err(), "{bad:?}");
        }
    }
}
