//! The Bottlerocket backend against a faithful fake of the Bottlerocket update API.

use crate::support;

use agent::host::bottlerocket::{BottlerocketConfig, BottlerocketHost, LockRetry};
use agent::host::{HostError, HostUpdater};
use std::time::Duration;
use support::bottlerocket::{FakeBottlerocket, Initial, Setup};
use support::wait_for;

/// Quick retries and polls; generous limits, so a slow machine does not fail the tests.
fn host(fake: &FakeBottlerocket) -> BottlerocketHost {
    host_for(fake)
}

fn host_for(fake: &FakeBottlerocket) -> BottlerocketHost {
    let mut config = BottlerocketConfig::new(&fake.socket);
    config.boot_id_path = fake.boot_id_path.clone();
    config.request_timeout = Duration::from_secs(30);
    config.lock_retry =
        LockRetry { first_delay: Duration::from_millis(10), max_delay: Duration::from_millis(50), retries: 5 };
    config.poll_interval = Duration::from_millis(10);
    config.command_timeout = Duration::from_secs(60);
    config.prepare_timeout = Duration::from_secs(60);
    config.refresh_retry_delay = Duration::from_millis(300);
    BottlerocketHost::new(config)
}

/// A host on 1.19.0 whose repository offers a newer version than the target, so that only the
/// version lock makes the host stage the target.
fn offering_two_versions() -> Setup {
    Setup::new("1.19.0", vec!["1.21.0", "1.20.0"])
}

#[tokio::test]
async fn stage_then_activate_and_reboot_moves_the_host_to_the_target() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    let before = host.facts().await.unwrap();
    assert_eq!(before.os_image, "1.19.0");
    assert_eq!(before.staged_image, None);
    assert_eq!(before.components_hash, None);

    host.stage("1.20.0").await.unwrap();
    assert_eq!(fake.state().as_deref(), Some("Staged"));
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
    assert_eq!(fake.version_lock(), "1.20.0");
    assert_eq!(
        fake.writes(),
        [
            "PATCH /settings?tx=update-operator-restore",
            "PATCH /settings?tx=update-operator",
            "POST /tx/commit_and_apply?tx=update-operator",
            "POST /actions/refresh-updates",
            "POST /actions/prepare-update",
        ]
    );
    let staged = host.facts().await.unwrap();
    assert_eq!(staged.staged_image.as_deref(), Some("1.20.0"));
    assert_eq!(staged.boot_id, before.boot_id);

    host.activate_and_reboot("1.20.0").await.unwrap();
    assert_eq!(fake.boots(), 1);
    // The update is over: the administrator's settings are back, the record of them consumed.
    assert_eq!((fake.version_lock().as_str(), fake.ignore_waves()), ("latest", false));
    assert_eq!(fake.pending("update-operator-restore"), Vec::<String>::new());
    let after = host.facts().await.unwrap();
    assert_eq!(after.os_image, "1.20.0");
    assert_ne!(after.boot_id, before.boot_id);
    assert_eq!(after.staged_image, None);
    assert_eq!(fake.count("POST /actions/activate-update"), 1);
    assert_eq!(fake.count("POST /actions/reboot"), 1);
}

#[tokio::test]
async fn staging_again_what_is_staged_does_no_work() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    host.stage("1.20.0").await.unwrap();
    let writes = fake.writes();
    host.stage("1.20.0").await.unwrap();
    assert_eq!(fake.writes(), writes, "a second stage must change nothing");
}

#[tokio::test]
async fn a_held_update_lock_is_retried_until_it_is_released() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    fake.set_locked_answers(3);
    host.stage("1.20.0").await.unwrap();
    assert!(fake.lock_refusals() >= 3);
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
}

#[tokio::test]
async fn an_update_lock_held_forever_gives_a_bounded_retryable_error() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    fake.set_locked_answers(usize::MAX);
    let error = host.stage("1.20.0").await.unwrap_err();
    assert!(matches!(error, HostError::Locked { attempts: 6, .. }), "{error:?}");
    assert!(error.is_retryable());
    assert_eq!(
        error.to_string(),
        "reading the update status: the host's update lock was still held after 6 attempts (another update client is at work on this host)"
    );
    assert_eq!(fake.count("GET /updates/status"), 6, "one attempt and five retries");
    assert_eq!(fake.count("POST /actions/prepare-update"), 0);
}

#[tokio::test]
async fn a_target_the_repository_does_not_offer_is_a_clear_error() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    let error = host.stage("1.22.0").await.unwrap_err();
    assert_eq!(error.to_string(), "target 1.22.0 is not offered by the update repository; available: 1.21.0, 1.20.0");
    assert!(!error.is_retryable());
    assert_eq!(fake.count("POST /actions/prepare-update"), 0);
    assert_eq!(fake.staged(), None);
}

#[tokio::test]
async fn a_refresh_that_still_used_the_old_version_lock_is_repeated() {
    // The first refresh after the commit still uses the old lock (latest) and chooses 1.21.0.
    let fake = FakeBottlerocket::start(Setup { stale_refreshes_after_commit: 1, ..offering_two_versions() });
    host(&fake).stage("1.20.0").await.unwrap();
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
    assert_eq!(fake.count("POST /actions/refresh-updates"), 2);
}

#[tokio::test]
async fn a_prepare_that_could_not_download_is_a_retryable_error_with_the_hosts_message() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    fake.fail_next_prepares(1);
    let error = host.stage("1.20.0").await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with(
            "staging 1.20.0 (download and write of the image) failed on the host (the update repository may be unreachable; trying again): "
        ),
        "{message}"
    );
    assert!(message.contains("503 Service Unavailable"), "{message}");
    assert!(error.is_retryable(), "a repository that answered 503 may answer next time");
    assert_eq!(fake.state().as_deref(), Some("Available"));

    host.stage("1.20.0").await.unwrap();
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
    assert_eq!(fake.count("POST /actions/prepare-update"), 2);
}

#[tokio::test]
async fn a_refresh_that_could_not_reach_the_repository_is_retryable_not_a_target_not_offered() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    fake.fail_next_refreshes(1);
    let error = host.stage("1.20.0").await.unwrap_err();
    assert!(matches!(error, HostError::RepositoryFailed { .. }), "{error:?}");
    assert!(error.is_retryable());
    assert!(error.to_string().contains("checking for updates failed on the host"), "{error}");
    // As thar-be-updates leaves it: the failed command recorded, the state back to Idle.
    assert_eq!(fake.state().as_deref(), Some("Idle"));

    host.stage("1.20.0").await.unwrap();
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
}

#[tokio::test]
async fn an_updater_that_cannot_work_on_this_host_is_a_permanent_error() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    fake.set_failure_message("Failed to read OS disk partition table: unable to find the disk\n");
    fake.fail_next_prepares(1);
    let error = host.stage("1.20.0").await.unwrap_err();
    assert!(matches!(error, HostError::StepFailed { .. }), "{error:?}");
    assert!(!error.is_retryable());
    assert!(error.to_string().contains("Failed to read OS disk partition table"), "{error}");
}

#[tokio::test]
async fn an_agent_restarted_on_a_staged_host_does_not_stage_again() {
    let fake = FakeBottlerocket::start(Setup { initial: Initial::Staged("1.20.0"), ..offering_two_versions() });
    let host = host(&fake);
    host.stage("1.20.0").await.unwrap();
    assert_eq!(fake.writes(), Vec::<String>::new());
    host.activate_and_reboot("1.20.0").await.unwrap();
    assert_eq!(fake.writes(), ["POST /actions/activate-update", "POST /actions/reboot"]);
    assert_eq!(fake.running(), "1.20.0");
}

#[tokio::test]
async fn an_agent_restarted_on_an_activated_host_only_reboots() {
    let fake = FakeBottlerocket::start(Setup { initial: Initial::Ready("1.20.0"), ..offering_two_versions() });
    let host = host(&fake);
    host.activate_and_reboot("1.20.0").await.unwrap();
    assert_eq!(fake.writes(), ["POST /actions/reboot"]);
    assert_eq!(fake.running(), "1.20.0");
}

#[tokio::test]
async fn an_agent_restarted_while_prepare_runs_waits_for_it_instead_of_preparing_again() {
    let fake = FakeBottlerocket::start(Setup { command_duration: Duration::from_secs(2), ..offering_two_versions() });
    let first = host(&fake);
    let staging = tokio::spawn(async move { first.stage("1.20.0").await });
    wait_for("prepare to start", || fake.count("POST /actions/prepare-update") == 1).await;
    staging.abort();

    // The new agent finds the lock held while the prepare runs, and the target staged after it.
    let mut config = BottlerocketConfig::new(&fake.socket);
    config.boot_id_path = fake.boot_id_path.clone();
    config.lock_retry =
        LockRetry { first_delay: Duration::from_millis(50), max_delay: Duration::from_millis(500), retries: 20 };
    BottlerocketHost::new(config).stage("1.20.0").await.unwrap();
    assert_eq!(fake.count("POST /actions/prepare-update"), 1);
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
}

#[tokio::test]
async fn staging_a_target_over_another_activated_version_deactivates_it_first() {
    let fake = FakeBottlerocket::start(Setup { initial: Initial::Ready("1.21.0"), ..offering_two_versions() });
    let host = host(&fake);
    host.stage("1.20.0").await.unwrap();
    assert_eq!(fake.writes()[0], "POST /actions/deactivate-update");
    assert_eq!(fake.state().as_deref(), Some("Staged"));
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
    host.activate_and_reboot("1.20.0").await.unwrap();
    assert_eq!(fake.running(), "1.20.0");
}

#[tokio::test]
async fn activating_a_target_that_is_not_staged_is_refused_without_a_reboot() {
    let fake = FakeBottlerocket::start(Setup { initial: Initial::Staged("1.21.0"), ..offering_two_versions() });
    let host = host(&fake);
    let error = host.activate_and_reboot("1.20.0").await.unwrap_err();
    assert_eq!(error.to_string(), "cannot activate 1.20.0: 1.21.0 is staged instead; stage the target first");
    assert_eq!(fake.writes(), Vec::<String>::new());
    assert_eq!(fake.boots(), 0);
}

#[tokio::test]
async fn a_target_that_is_no_bottlerocket_version_is_refused_before_touching_the_host() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    let error = host.stage("v1.20.0").await.unwrap_err();
    assert!(matches!(error, HostError::InvalidTarget { .. }), "{error:?}");
    assert_eq!(fake.requests(), Vec::<String>::new());
}

#[tokio::test]
async fn a_missing_api_socket_is_a_retryable_error_naming_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let host = BottlerocketHost::new(BottlerocketConfig::new(dir.path().join("api.sock")));
    let error = host.facts().await.unwrap_err();
    assert!(error.is_retryable());
    let message = error.to_string();
    assert!(
        message.starts_with("cannot reach the Bottlerocket API for reading the OS version (GET /os): cannot connect"),
        "{message}"
    );
}

#[tokio::test]
async fn releasing_a_staged_target_restores_the_version_lock_and_update_waves() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    let host = host(&fake);
    host.stage("1.20.0").await.unwrap();
    assert_eq!((fake.version_lock().as_str(), fake.ignore_waves()), ("1.20.0", true));
    let staged_writes = fake.writes().len();

    host.release("1.20.0").await.unwrap();
    assert_eq!((fake.version_lock().as_str(), fake.ignore_waves()), ("latest", false));
    assert_eq!(fake.writes()[staged_writes..], ["POST /tx/commit_and_apply?tx=update-operator-restore"]);
    // The staged image stays, not activated: nothing boots it.
    assert_eq!((fake.state().as_deref(), fake.staged().as_deref()), (Some("Staged"), Some("1.20.0")));
    assert_eq!(fake.boots(), 0);
    // Released already: a second release changes nothing.
    let writes = fake.writes();
    host.release("1.20.0").await.unwrap();
    assert_eq!(fake.writes(), writes);
}

#[tokio::test]
async fn the_settings_an_administrator_had_are_restored_as_they_were() {
    let fake =
        FakeBottlerocket::start(Setup { version_lock: Some("v1.19.0"), ignore_waves: true, ..offering_two_versions() });
    let host = host(&fake);
    host.stage("1.20.0").await.unwrap();
    // Staging another target before the release keeps what the first pin replaced.
    host.stage("1.21.0").await.unwrap();
    assert_eq!(fake.version_lock(), "1.21.0");
    host.release("1.20.0").await.unwrap();
    assert_eq!(fake.version_lock(), "1.21.0", "the pin of another target is not ours to undo");
    host.release("1.21.0").await.unwrap();
    assert_eq!((fake.version_lock().as_str(), fake.ignore_waves()), ("v1.19.0", true));
}

#[tokio::test]
async fn releasing_a_target_the_agent_did_not_pin_changes_no_setting() {
    let fake = FakeBottlerocket::start(Setup { version_lock: Some("1.20.0"), ..offering_two_versions() });
    let host = host(&fake);
    host.release("1.20.0").await.unwrap();
    assert_eq!(fake.writes(), Vec::<String>::new());
    assert_eq!(fake.version_lock(), "1.20.0");
    let requests = fake.requests().len();
    host.release("v1.20.0").await.unwrap();
    assert_eq!(fake.requests().len(), requests, "a target stage refuses was never staged");
}

#[tokio::test]
async fn releasing_an_activated_target_undoes_the_activation_without_a_reboot() {
    let fake = FakeBottlerocket::start(Setup { initial: Initial::Ready("1.20.0"), ..offering_two_versions() });
    let host = host(&fake);
    host.release("1.20.0").await.unwrap();
    assert_eq!(fake.writes(), ["POST /actions/deactivate-update"]);
    assert_eq!(fake.state().as_deref(), Some("Staged"));
    assert_eq!((fake.boots(), fake.running().as_str()), (0, "1.19.0"));
    // Another target's activation is not ours to undo.
    let other = FakeBottlerocket::start(Setup { initial: Initial::Ready("1.21.0"), ..offering_two_versions() });
    host_for(&other).release("1.20.0").await.unwrap();
    assert_eq!(other.state().as_deref(), Some("Ready"));
}

#[tokio::test]
async fn a_stage_cancelled_during_prepare_has_its_pin_restored_while_the_host_still_prepares() {
    let fake =
        FakeBottlerocket::start(Setup { command_duration: Duration::from_secs(3600), ..offering_two_versions() });
    let first = host(&fake);
    let staging = tokio::spawn({
        let host = first.clone();
        async move { host.stage("1.20.0").await }
    });
    // The refresh ends at once; the prepare runs until told to end.
    wait_for("prepare to start", || {
        let started = fake.count("POST /actions/prepare-update") == 1;
        if !started {
            fake.finish_commands_now();
        }
        started
    })
    .await;
    staging.abort();
    assert!(staging.await.unwrap_err().is_cancelled());

    // The settings do not wait for the update lock, which the prepare still holds.
    let error = first.release("1.20.0").await.unwrap_err();
    assert!(matches!(error, HostError::Locked { .. }) && error.is_retryable(), "{error:?}");
    assert_eq!((fake.version_lock().as_str(), fake.ignore_waves()), ("latest", false));
    assert!(fake.command_running());

    // Once the prepare ended, the release completes: staged, not activated.
    fake.finish_commands_now();
    wait_for("the prepare to end", || !fake.command_running()).await;
    first.release("1.20.0").await.unwrap();
    assert_eq!((fake.state().as_deref(), fake.staged().as_deref()), (Some("Staged"), Some("1.20.0")));
    assert_eq!(fake.count("POST /actions/deactivate-update"), 0);
    assert_eq!(fake.boots(), 0);
}

#[tokio::test]
async fn what_the_pin_replaced_is_kept_on_the_host_and_restored_by_a_restarted_agent() {
    let fake =
        FakeBottlerocket::start(Setup { version_lock: Some("v1.19.0"), ignore_waves: true, ..offering_two_versions() });
    host(&fake).stage("1.20.0").await.unwrap();
    assert_eq!(fake.pending("update-operator-restore"), ["ignore-waves=true", "version-lock=\"v1.19.0\""]);
    // Another process (the agent restarted) stages again, then gives the target up.
    let restarted = host(&fake);
    restarted.stage("1.20.0").await.unwrap();
    assert_eq!(fake.pending("update-operator-restore"), ["ignore-waves=true", "version-lock=\"v1.19.0\""]);
    restarted.release("1.20.0").await.unwrap();
    assert_eq!((fake.version_lock().as_str(), fake.ignore_waves()), ("v1.19.0", true));
    assert_eq!(fake.pending("update-operator-restore"), Vec::<String>::new());
}

#[tokio::test]
async fn a_restarted_agent_that_reboots_into_the_target_restores_the_settings_first() {
    let fake = FakeBottlerocket::start(offering_two_versions());
    host(&fake).stage("1.20.0").await.unwrap();
    assert_eq!(fake.version_lock(), "1.20.0");
    host(&fake).activate_and_reboot("1.20.0").await.unwrap();
    assert_eq!((fake.running().as_str(), fake.boots()), ("1.20.0", 1));
    assert_eq!((fake.version_lock().as_str(), fake.ignore_waves()), ("latest", false));
}
