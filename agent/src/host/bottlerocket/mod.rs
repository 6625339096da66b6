//! The Bottlerocket backend: updates the host through the Bottlerocket API on its Unix socket.
//!
//! Images are Bottlerocket versions as `GET /os` reports `version_id` (e.g. `1.20.0`); the update
//! repository configured on the host must offer the target.
//!
//! `stage(target)` pins the target (`settings.updates.version-lock`), refreshes the list of
//! updates, checks that the repository offers the target and prepares it, until the status is
//! `Staged` with the target in the staging partition. `activate_and_reboot(target)` activates the
//! staged target (`Ready`), restores the version lock and update waves as they were before the
//! pin, and asks for the reboot. `release(target)`, when the controller gave the target up before
//! the reboot, undoes an activation of the target and restores the settings the same way. What
//! the pin replaced is recorded on the host ([`pin`]), so a restarted agent restores it too.
//!
//! # Guarantees
//! - Each method reads the update status first and decides from it, step by step
//!   (`next_stage_step`, `next_activate_step`): an agent restarted in the middle repeats no
//!   work that the host already did, and an action refused in the current state (409, 404) makes
//!   it read the status again and decide anew.
//! - A held update lock (423) is retried with exponential backoff, a bounded number of times.
//! - After every update action the agent waits (bounded) until the host recorded the action's
//!   result in `most_recent_command`, and reports a failed one with the host's stderr.
//! - At most `MAX_STEPS` (10) actions per call: a host whose state never settles gives an error, not
//!   a loop.

mod api;
mod pin;

use super::{
    HostError, HostFacts, HostUpdater, KubernetesFetch, KubernetesUpgrade, check_reported_image, read_boot_id,
};
use api::{Api, CommandOutcome, CommandStatus, UpdateCommand, UpdateState, UpdateStatus};
use std::path::PathBuf;
use std::time::Duration;

/// At most this many steps (status read plus action) per call. A stage from scratch needs four
/// (pin, refresh, prepare, check); over another activated version, with two late refreshes, seven.
const MAX_STEPS: usize = 10;

/// Refreshes per stage when the version lock was just changed and a refresh did not yet choose
/// the target (see [`BottlerocketConfig::refresh_retry_delay`]).
const MAX_REFRESHES: usize = 3;

/// Backoff while the host's update lock is held (HTTP 423).
#[derive(Debug, Clone, Copy)]
pub struct LockRetry {
    /// Delay before the first retry; doubled for each further one, with jitter.
    pub first_delay: Duration,
    /// Longest delay between two attempts.
    pub max_delay: Duration,
    /// Retries after the first attempt.
    pub retries: usize,
}

/// How to reach and drive the Bottlerocket API.
#[derive(Debug, Clone)]
pub struct BottlerocketConfig {
    /// The API's Unix socket (mounted from the host).
    pub socket_path: PathBuf,
    /// The kernel's boot ID file.
    pub boot_id_path: PathBuf,
    /// Limit for one HTTP request.
    pub request_timeout: Duration,
    /// Backoff while the update lock is held.
    pub lock_retry: LockRetry,
    /// How often the update status is read while an update command runs.
    pub poll_interval: Duration,
    /// Limit for refresh-updates, activate-update and deactivate-update to finish.
    pub command_timeout: Duration,
    /// Limit for prepare-update (download, verification and write of the image) to finish.
    pub prepare_timeout: Duration,
    /// Wait before refreshing again when the refresh after a change of the version lock did not
    /// choose the target: the host renders the updater's configuration in the background after the
    /// commit, so the first refresh may still have used the old lock.
    pub refresh_retry_delay: Duration,
}

impl BottlerocketConfig {
    /// Where Bottlerocket serves its API.
    pub const DEFAULT_SOCKET: &str = "/run/api.sock";

    /// The defaults for the API at `socket_path`.
    pub fn new(socket_path: impl Into<PathBuf>) -> Self {
        BottlerocketConfig {
            socket_path: socket_path.into(),
            boot_id_path: super::default_boot_id_path(),
            // The API answers from local files; only a wedged API server takes this long.
            request_timeout: Duration::from_secs(30),
            // 1 + 2 + 4 + 8 + 10 * 4 s: about a minute (up to twice that with jitter), long enough
            // for another client's refresh or activate, short enough to report a stuck lock soon.
            lock_retry: LockRetry {
                first_delay: Duration::from_secs(1),
                max_delay: Duration::from_secs(10),
                retries: 8,
            },
            poll_interval: Duration::from_secs(1),
            command_timeout: Duration::from_secs(5 * 60),
            // Bottlerocket images are a few hundred MiB; slow mirrors take minutes.
            prepare_timeout: Duration::from_secs(30 * 60),
            // Rendering one settings file takes well under a second.
            refresh_retry_delay: Duration::from_secs(2),
        }
    }
}

impl Default for BottlerocketConfig {
    fn default() -> Self {
        BottlerocketConfig::new(Self::DEFAULT_SOCKET)
    }
}

/// A Bottlerocket host, driven through its API. Holds no state of its own: what the version-lock
/// pin replaced is recorded on the host ([`pin`]).
#[derive(Debug, Clone)]
pub struct BottlerocketHost {
    api: Api,
    config: BottlerocketConfig,
}

impl BottlerocketHost {
    pub fn new(config: BottlerocketConfig) -> Self {
        BottlerocketHost { api: Api::new(config.clone()), config }
    }

    /// Runs an update command to its end. `Ok(true)` when it ran and succeeded, `Ok(false)` when
    /// the host refused it in its current state.
    async fn command(&self, command: UpdateCommand, step: &str) -> Result<bool, HostError> {
        let timeout = match command {
            UpdateCommand::Prepare => self.config.prepare_timeout,
            UpdateCommand::Refresh | UpdateCommand::Activate | UpdateCommand::Deactivate => self.config.command_timeout,
        };
        match self.api.run_command(command, timeout).await? {
            CommandOutcome::Finished(result) if result.cmd_status == CommandStatus::Success => Ok(true),
            CommandOutcome::Finished(result) => {
                let (step, message) = (step.to_owned(), result.failure_message());
                match command {
                    // updog fetches from the update repository in both: a failure there may pass.
                    UpdateCommand::Refresh | UpdateCommand::Prepare if !updater_misconfigured(&result) => {
                        Err(HostError::RepositoryFailed { step, message })
                    }
                    _ => Err(HostError::StepFailed { step, message }),
                }
            }
            CommandOutcome::Refused { status, message } => {
                tracing::info!(action = command.action_name(), %status, message, "refused in the current update state; reading the status again");
                tokio::time::sleep(self.config.poll_interval).await;
                Ok(false)
            }
        }
    }
}

impl BottlerocketHost {
    /// Undoes the activation of another version, so that the host boots what it runs (or can
    /// prepare the target).
    async fn deactivate(&self) -> Result<bool, HostError> {
        self.command(UpdateCommand::Deactivate, "undoing the activation of another staged version").await
    }
}

impl HostUpdater for BottlerocketHost {
    async fn facts(&self) -> Result<HostFacts, HostError> {
        let os_image = self.api.os().await?.version_id;
        check_reported_image(&os_image).map_err(|reason| HostError::BadAnswer {
            service: "the Bottlerocket API".to_owned(),
            operation: "reading the OS version (GET /os)".to_owned(),
            reason: format!("version_id {os_image:?}: {reason}"),
        })?;
        let boot_id = read_boot_id(&self.config.boot_id_path).await?;
        let status = self.api.status().await?;
        Ok(HostFacts {
            os_image,
            boot_id,
            staged_image: status.as_ref().and_then(staged_version).map(str::to_owned),
            components_hash: None,
        })
    }

    async fn stage(&self, target: &str) -> Result<(), HostError> {
        check_target(target)?;
        let running = self.api.os().await?.version_id;
        let mut progress = StageProgress::default();
        for _ in 0..MAX_STEPS {
            let status = self.api.status().await?;
            let step = next_stage_step(&running, status.as_ref(), target, &progress);
            tracing::debug!(target, ?step, "staging");
            match step {
                StageStep::Done => return Ok(()),
                StageStep::Pin => {
                    progress.pin_changed = pin::pin(&self.api, target).await?;
                    progress.pinned = true;
                }
                StageStep::Refresh => {
                    if progress.refreshes > 0 {
                        tokio::time::sleep(self.config.refresh_retry_delay).await;
                    }
                    if self.command(UpdateCommand::Refresh, "checking for updates").await? {
                        progress.refreshes += 1;
                    }
                }
                StageStep::Prepare => {
                    let step = format!("staging {target} (download and write of the image)");
                    progress.prepared |= self.command(UpdateCommand::Prepare, &step).await?;
                }
                StageStep::Deactivate => progress.deactivated |= self.deactivate().await?,
                StageStep::Fail(error) => return Err(error),
            }
        }
        Err(unsettled(format!("staging {target}")))
    }

    async fn activate_and_reboot(&self, target: &str) -> Result<(), HostError> {
        check_target(target)?;
        let running = self.api.os().await?.version_id;
        let mut progress = ActivateProgress::default();
        for _ in 0..MAX_STEPS {
            let status = self.api.status().await?;
            let step = next_activate_step(&running, status.as_ref(), target, &progress);
            tracing::debug!(target, ?step, "activating");
            match step {
                ActivateStep::Reboot => {
                    // The step ends here: the activated target boots whatever the version lock
                    // says, so the administrator's update settings are back before the reboot.
                    pin::restore(&self.api, target).await?;
                    self.api.reboot().await?;
                    tracing::info!(target, "reboot under way");
                    return Ok(());
                }
                ActivateStep::Activate => {
                    let step = format!("activating {target} for the next boot");
                    progress.activated |= self.command(UpdateCommand::Activate, &step).await?;
                }
                ActivateStep::Deactivate => progress.deactivated |= self.deactivate().await?,
                ActivateStep::Fail(error) => return Err(error),
            }
        }
        Err(unsettled(format!("activating {target}")))
    }

    async fn upgrade_kubernetes(&self, upgrade: &KubernetesUpgrade) -> Result<(), HostError> {
        // Nothing is downloaded, installed or run: Bottlerocket's root filesystem is read-only and verified.
        Err(HostError::Unsupported {
            operation: format!("upgrading Kubernetes to {} with kubeadm", upgrade.version),
            reason: "on Bottlerocket the Kubernetes version comes with the OS image variant (aws-k8s-1.34, ...); \
                     update the image to a variant of the target version instead"
                .to_owned(),
        })
    }

    async fn fetch_kubernetes(&self, fetch: &KubernetesFetch) -> Result<(), HostError> {
        // Nothing to fetch ahead either: there will be no kubeadm upgrade to use it.
        Err(HostError::Unsupported {
            operation: format!("fetching the Kubernetes {} components ahead of a kubeadm upgrade", fetch.version),
            reason: "on Bottlerocket the Kubernetes version comes with the OS image variant (aws-k8s-1.34, ...); \
                     update the image to a variant of the target version instead"
                .to_owned(),
        })
    }

    async fn discard_fetched(&self) -> Result<(), HostError> {
        // Nothing is ever fetched.
        Ok(())
    }

    async fn release(&self, target: &str) -> Result<(), HostError> {
        if check_target(target).is_err() {
            // Never pinned nor staged: nothing to undo.
            return Ok(());
        }
        // IMPORTANT: restore the settings before anything that needs the update lock: a cancelled
        // prepare may hold it for minutes, and the settings do not need it.
        pin::restore(&self.api, target).await?;
        let mut deactivated = false;
        for _ in 0..MAX_STEPS {
            let status = self.api.status().await?;
            let activated = status.as_ref().is_some_and(|status| {
                status.update_state == UpdateState::Ready && staged_version(status) == Some(target)
            });
            if !activated {
                return Ok(());
            }
            if deactivated {
                return Err(HostError::UnexpectedState {
                    operation: format!("releasing {target}"),
                    detail: "deactivate-update succeeded, but the target is still activated".to_owned(),
                });
            }
            deactivated = self.deactivate().await?;
        }
        Err(unsettled(format!("releasing {target}")))
    }
}

/// Whether a failed refresh or prepare failed for a reason another attempt cannot change: the
/// updater's configuration, the host's partitions or trusted root. The messages are updog's (its
/// `Error` display strings in bottlerocket-core-kit `sources/updater/updog/src/error.rs`), which
/// `thar-be-updates` records as the command's stderr. Everything else (the repository unreachable,
/// an HTTP error answer, a transfer cut short, metadata that failed to load) is worth retrying.
fn updater_misconfigured(result: &api::CommandResult) -> bool {
    const PERMANENT: &[&str] = &[
        "Bad version string",
        "Failed to parse config file",
        "Failed to read config file",
        "Unable to parse proxy setting",
        "as a URL",
        "Failed to open trusted root metadata file",
        "Could not find inactive partition set",
        "Failed to read OS disk partition table",
        "Invalid target name",
    ];
    let stderr = result.stderr.as_deref().unwrap_or_default();
    PERMANENT.iter().any(|marker| stderr.contains(marker))
}

fn unsettled(operation: String) -> HostError {
    HostError::UnexpectedState {
        operation,
        detail: format!(
            "the host's update state did not settle after {MAX_STEPS} steps (is another update client at work?)"
        ),
    }
}

/// Bottlerocket targets are versions as `GET /os` reports them; anything else could never match
/// the reported `os-image` after the reboot.
fn check_target(target: &str) -> Result<(), HostError> {
    let invalid = |reason: &str| HostError::InvalidTarget { target: target.to_owned(), reason: reason.to_owned() };
    if target.starts_with('v') && target[1..].starts_with(|c: char| c.is_ascii_digit()) {
        return Err(invalid(
            "Bottlerocket reports its version without the leading v; use the version alone, e.g. 1.20.0",
        ));
    }
    let well_formed = target.len() <= 64
        && target.starts_with(|c: char| c.is_ascii_digit())
        && target.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    if !well_formed {
        return Err(invalid("a Bottlerocket image is a version such as 1.20.0 (as GET /os reports version_id)"));
    }
    Ok(())
}

fn state_of(status: Option<&UpdateStatus>) -> UpdateState {
    status.map_or(UpdateState::Idle, |status| status.update_state)
}

/// The version in the staging partition while it is staged or activated.
fn staged_version(status: &UpdateStatus) -> Option<&str> {
    match status.update_state {
        UpdateState::Staged | UpdateState::Ready => {
            status.staging_partition.as_ref().map(|partition| partition.image.version.as_str())
        }
        UpdateState::Idle | UpdateState::Available => None,
    }
}

/// What `stage` has done in this call.
#[derive(Debug, Default)]
struct StageProgress {
    pinned: bool,
    /// The pin changed the version lock in this call.
    pin_changed: bool,
    refreshes: usize,
    prepared: bool,
    deactivated: bool,
}

/// The next thing `stage` does.
#[derive(Debug)]
enum StageStep {
    /// The target is staged (or already running with nothing else activated).
    Done,
    /// Pin the target with the version lock.
    Pin,
    /// Refresh the list of updates, so that the pinned target is chosen (again, if the version
    /// lock was just changed and the last refresh did not choose the target yet).
    Refresh,
    /// Download and write the chosen target.
    Prepare,
    /// Another version is activated for the next boot; undo that first (prepare is not allowed in
    /// `Ready`).
    Deactivate,
    Fail(HostError),
}

/// Decides the next step of staging `target` on a host that runs `running` and reports `status`.
fn next_stage_step(running: &str, status: Option<&UpdateStatus>, target: &str, progress: &StageProgress) -> StageStep {
    let state = state_of(status);
    let staged = status.and_then(staged_version);
    let step = format!("staging {target}");
    if staged == Some(target) {
        return StageStep::Done;
    }
    if state == UpdateState::Ready {
        if progress.deactivated {
            return StageStep::Fail(HostError::UnexpectedState {
                operation: step,
                detail: "deactivate-update succeeded, but the host still has another version activated".to_owned(),
            });
        }
        return StageStep::Deactivate;
    }
    if running == target {
        // Nothing to stage: the host already boots the target.
        return StageStep::Done;
    }
    if !progress.pinned {
        return StageStep::Pin;
    }
    if progress.refreshes == 0 {
        return StageStep::Refresh;
    }
    let chosen = status.and_then(|status| status.chosen_update.as_ref()).map(|image| image.version.as_str());
    if chosen != Some(target) {
        if progress.pin_changed && progress.refreshes < MAX_REFRESHES {
            return StageStep::Refresh;
        }
        let available = status.map(|status| status.available_updates.clone()).unwrap_or_default();
        return StageStep::Fail(HostError::TargetNotOffered { target: target.to_owned(), available });
    }
    if progress.prepared {
        return StageStep::Fail(HostError::UnexpectedState {
            operation: step,
            detail: format!(
                "prepare-update succeeded, but the update state is {state:?} with {} staged",
                staged.unwrap_or("nothing")
            ),
        });
    }
    match state {
        UpdateState::Available | UpdateState::Staged => StageStep::Prepare,
        UpdateState::Idle | UpdateState::Ready => StageStep::Fail(HostError::UnexpectedState {
            operation: step,
            detail: format!("refresh-updates chose {target}, but the update state is {state:?}"),
        }),
    }
}

/// What `activate_and_reboot` has done in this call.
#[derive(Debug, Default)]
struct ActivateProgress {
    activated: bool,
    deactivated: bool,
}

/// The next thing `activate_and_reboot` does.
#[derive(Debug)]
enum ActivateStep {
    /// The target boots next: reboot.
    Reboot,
    /// Mark the staged target for the next boot.
    Activate,
    /// Another version is activated, but the host already runs the target: undo the activation.
    Deactivate,
    Fail(HostError),
}

/// Decides the next step of activating `target` and rebooting, on a host that runs `running` and
/// reports `status`.
fn next_activate_step(
    running: &str,
    status: Option<&UpdateStatus>,
    target: &str,
    progress: &ActivateProgress,
) -> ActivateStep {
    let state = state_of(status);
    let staged = status.and_then(staged_version);
    let operation = format!("activating {target}");
    match (staged == Some(target), state) {
        (true, UpdateState::Ready) => return ActivateStep::Reboot,
        (true, _) if progress.activated => {
            return ActivateStep::Fail(HostError::UnexpectedState {
                operation,
                detail: format!("activate-update succeeded, but the update state is {state:?}"),
            });
        }
        (true, _) => return ActivateStep::Activate,
        (false, _) => {}
    }
    if running == target {
        // The host already runs the target; the reboot is still asked for.
        return match (state, progress.deactivated) {
            (UpdateState::Ready, false) => ActivateStep::Deactivate,
            (UpdateState::Ready, true) => ActivateStep::Fail(HostError::UnexpectedState {
                operation,
                detail: "deactivate-update succeeded, but another version is still activated".to_owned(),
            }),
            (UpdateState::Idle | UpdateState::Available | UpdateState::Staged, _) => ActivateStep::Reboot,
        };
    }
    ActivateStep::Fail(HostError::NotStaged { target: target.to_owned(), staged: staged.map(str::to_owned) })
}

#[cfg(test)]
mod tests {
    use super::api::{PartitionImage, UpdateImage};
    use super::*;

    #[tokio::test]
    async fn a_kubeadm_upgrade_is_refused_with_the_reason_and_without_touching_the_api() {
        // The socket does not exist: any call to the API would fail with "cannot reach".
        let host = BottlerocketHost::new(BottlerocketConfig::new("/nonexistent/api.sock"));
        let upgrade = KubernetesUpgrade {
            version: "v1.34.1".parse().unwrap(),
            role: crate::kubeadm::Role::Worker,
            components: Vec::new(),
        };
        let error = host.upgrade_kubernetes(&upgrade).await.unwrap_err();
        assert!(matches!(error, HostError::Unsupported { .. }), "{error}");
        assert!(!error.is_retryable());
        let message = error.to_string();
        assert!(message.contains("upgrading Kubernetes to v1.34.1 with kubeadm is not supported"), "{message}");
        assert!(message.contains("comes with the OS image variant"), "{message}");
        let fetch = KubernetesFetch { version: "v1.34.1".parse().unwrap(), components: Vec::new() };
        let error = host.fetch_kubernetes(&fetch).await.unwrap_err();
        assert!(matches!(error, HostError::Unsupported { .. }) && !error.is_retryable(), "{error}");
        let message = error.to_string();
        assert!(message.contains("fetching the Kubernetes v1.34.1 components ahead"), "{message}");
        host.discard_fetched().await.unwrap();
    }

    fn status(state: UpdateState, chosen: Option<&str>, staged: Option<&str>) -> UpdateStatus {
        UpdateStatus {
            update_state: state,
            available_updates: vec!["1.21.0".into(), "1.20.0".into()],
            chosen_update: chosen.map(|version| UpdateImage { version: version.into() }),
            staging_partition: staged.map(|version| PartitionImage {
                image: UpdateImage { version: version.into() },
                next_to_boot: state == UpdateState::Ready,
            }),
            most_recent_command: None,
        }
    }

    fn progress(pinned: bool, refreshed: bool, prepared: bool) -> StageProgress {
        StageProgress { pinned, pin_changed: false, refreshes: usize::from(refreshed), prepared, deactivated: false }
    }

    #[test]
    fn staging_from_scratch_pins_refreshes_and_prepares() {
        let fresh = progress(false, false, false);
        assert!(matches!(next_stage_step("1.19.0", None, "1.20.0", &fresh), StageStep::Pin));
        let pinned = progress(true, false, false);
        assert!(matches!(next_stage_step("1.19.0", None, "1.20.0", &pinned), StageStep::Refresh));
        let available = status(UpdateState::Available, Some("1.20.0"), None);
        let refreshed = progress(true, true, false);
        assert!(matches!(next_stage_step("1.19.0", Some(&available), "1.20.0", &refreshed), StageStep::Prepare));
        let staged = status(UpdateState::Staged, Some("1.20.0"), Some("1.20.0"));
        assert!(matches!(
            next_stage_step("1.19.0", Some(&staged), "1.20.0", &progress(true, true, true)),
            StageStep::Done
        ));
    }

    #[test]
    fn staging_what_is_staged_or_activated_is_done_at_once() {
        let fresh = progress(false, false, false);
        for state in [UpdateState::Staged, UpdateState::Ready] {
            let host = status(state, Some("1.20.0"), Some("1.20.0"));
            assert!(matches!(next_stage_step("1.19.0", Some(&host), "1.20.0", &fresh), StageStep::Done));
        }
    }

    #[test]
    fn staging_over_another_staged_version_prepares_the_target() {
        let other = status(UpdateState::Staged, Some("1.20.0"), Some("1.21.0"));
        let refreshed = progress(true, true, false);
        assert!(matches!(next_stage_step("1.19.0", Some(&other), "1.20.0", &refreshed), StageStep::Prepare));
    }

    #[test]
    fn staging_over_another_activated_version_deactivates_it_first() {
        let other = status(UpdateState::Ready, Some("1.21.0"), Some("1.21.0"));
        let fresh = progress(false, false, false);
        assert!(matches!(next_stage_step("1.19.0", Some(&other), "1.20.0", &fresh), StageStep::Deactivate));
        let after = StageProgress { deactivated: true, ..progress(false, false, false) };
        assert!(matches!(next_stage_step("1.19.0", Some(&other), "1.20.0", &after), StageStep::Fail(_)));
    }

    #[test]
    fn a_target_the_refresh_did_not_choose_is_not_offered() {
        let idle = status(UpdateState::Idle, None, None);
        let step = next_stage_step("1.19.0", Some(&idle), "1.22.0", &progress(true, true, false));
        let StageStep::Fail(error) = step else { panic!("{step:?}") };
        assert_eq!(
            error.to_string(),
            "target 1.22.0 is not offered by the update repository; available: 1.21.0, 1.20.0"
        );
    }

    #[test]
    fn a_refresh_right_after_changing_the_version_lock_is_repeated_a_bounded_number_of_times() {
        let stale = status(UpdateState::Available, Some("1.21.0"), None);
        let mut just_pinned = StageProgress { pinned: true, pin_changed: true, refreshes: 1, ..Default::default() };
        assert!(matches!(next_stage_step("1.19.0", Some(&stale), "1.20.0", &just_pinned), StageStep::Refresh));
        just_pinned.refreshes = MAX_REFRESHES;
        let step = next_stage_step("1.19.0", Some(&stale), "1.20.0", &just_pinned);
        assert!(matches!(step, StageStep::Fail(HostError::TargetNotOffered { .. })), "{step:?}");
        let pinned_before = progress(true, true, false);
        let step = next_stage_step("1.19.0", Some(&stale), "1.20.0", &pinned_before);
        assert!(matches!(step, StageStep::Fail(HostError::TargetNotOffered { .. })), "{step:?}");
    }

    #[test]
    fn a_prepare_that_staged_something_else_is_an_error_not_a_second_prepare() {
        let wrong = status(UpdateState::Staged, Some("1.20.0"), Some("1.21.0"));
        let step = next_stage_step("1.19.0", Some(&wrong), "1.20.0", &progress(true, true, true));
        assert!(matches!(step, StageStep::Fail(HostError::UnexpectedState { .. })), "{step:?}");
    }

    #[test]
    fn staging_the_running_version_does_nothing() {
        let step = next_stage_step("1.20.0", None, "1.20.0", &progress(false, false, false));
        assert!(matches!(step, StageStep::Done), "{step:?}");
    }

    #[test]
    fn activation_activates_a_staged_target_and_reboots_a_ready_one() {
        let none = ActivateProgress::default();
        let staged = status(UpdateState::Staged, Some("1.20.0"), Some("1.20.0"));
        assert!(matches!(next_activate_step("1.19.0", Some(&staged), "1.20.0", &none), ActivateStep::Activate));
        let ready = status(UpdateState::Ready, Some("1.20.0"), Some("1.20.0"));
        assert!(matches!(next_activate_step("1.19.0", Some(&ready), "1.20.0", &none), ActivateStep::Reboot));
        let activated = ActivateProgress { activated: true, deactivated: false };
        assert!(matches!(next_activate_step("1.19.0", Some(&staged), "1.20.0", &activated), ActivateStep::Fail(_)));
    }

    #[test]
    fn activating_what_is_not_staged_names_what_is() {
        let none = ActivateProgress::default();
        let other = status(UpdateState::Staged, Some("1.21.0"), Some("1.21.0"));
        let ActivateStep::Fail(error) = next_activate_step("1.19.0", Some(&other), "1.20.0", &none) else { panic!() };
        assert_eq!(error.to_string(), "cannot activate 1.20.0: 1.21.0 is staged instead; stage the target first");
        let ActivateStep::Fail(error) = next_activate_step("1.19.0", None, "1.20.0", &none) else { panic!() };
        assert_eq!(error.to_string(), "cannot activate 1.20.0: nothing is staged; stage the target first");
    }

    #[test]
    fn activating_the_running_version_reboots_after_undoing_another_activation() {
        let none = ActivateProgress::default();
        assert!(matches!(next_activate_step("1.20.0", None, "1.20.0", &none), ActivateStep::Reboot));
        let other = status(UpdateState::Ready, Some("1.21.0"), Some("1.21.0"));
        assert!(matches!(next_activate_step("1.20.0", Some(&other), "1.20.0", &none), ActivateStep::Deactivate));
    }

    #[test]
    fn targets_must_be_bottlerocket_versions() {
        for good in ["1.20.0", "1.20.0-rc1", "1.20.0+build.5"] {
            check_target(good).unwrap();
        }
        let error = check_target("v1.20.0").unwrap_err().to_string();
        assert!(error.contains("without the leading v"), "{error}");
        for bad in ["", "latest", "1.20.0; reboot", "ami-0123", &"1".repeat(65)] {
            let error = check_target(bad).unwrap_err().to_string();
            assert!(error.contains("a Bottlerocket image is a version"), "{bad:?}: {error}");
        }
    }
}
