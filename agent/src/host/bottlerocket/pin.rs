//! The version-lock pin: `settings.updates.version-lock` set to the target (and update waves
//! ignored) while the agent stages and activates it, and the administrator's values restored when
//! the step ends, whichever way it ends.
//!
//! What the pin replaced is kept on the host, not in the agent's memory: in a settings transaction
//! of its own ([`RESTORE_TRANSACTION`]) that holds the replaced values and is left pending until
//! the restore commits it. So an agent restarted (or a new agent version) restores what the first
//! pin replaced, and the restore is one atomic commit of exactly those values.
//!
//! # Assumptions (bottlerocket-core-kit, checked at a10182f9)
//! - `sources/api/apiserver/src/server/mod.rs`: `PATCH /settings?tx=NAME` writes pending settings of
//!   transaction NAME; `GET /tx?tx=NAME` answers them (an empty `Settings` when none are pending);
//!   `POST /tx/commit_and_apply?tx=NAME` makes them live and answers 422 when nothing is pending
//!   (`CommitWithNoPending`). Other clients use the `default` transaction unless they name one.
//! - `sources/api/datastore/src/filesystem.rs`: pending transactions are files of the datastore
//!   under `/var/lib/bottlerocket` (they survive agent restarts and reboots);
//!   `sources/api/migration/README.md`: pending data is migrated with the live data across OS
//!   updates.
//! - `sources/api/thar-be-updates/src/status.rs`: refresh reads the version lock from the updater's
//!   configuration, rendered from the settings in the background after a commit (see
//!   [`super::BottlerocketConfig::refresh_retry_delay`]).

use super::api::{Api, SERVICE, expect_json};
use crate::host::HostError;
use ::http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

/// The settings transaction the pin goes through, so that it never commits changes someone else
/// left pending in the default transaction.
const TRANSACTION: &str = "update-operator";

/// The transaction that holds what the pin replaced, pending until the restore commits it.
pub(super) const RESTORE_TRANSACTION: &str = "update-operator-restore";

/// Bottlerocket's default `settings.updates.version-lock`: the newest version offered.
const DEFAULT_VERSION_LOCK: &str = "latest";

/// `settings.updates` (only what the agent sets).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
struct UpdatesSettings {
    #[serde(rename = "version-lock", skip_serializing_if = "Option::is_none")]
    version_lock: Option<String>,
    #[serde(rename = "ignore-waves", skip_serializing_if = "Option::is_none")]
    ignore_waves: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
struct Settings {
    #[serde(default)]
    updates: UpdatesSettings,
}

/// Pins the version the host updates to (`settings.updates.version-lock`) to `target` and turns
/// off update waves (the controller paces the rollout itself; waves would only hold back a node it
/// already chose). What the first pin replaced is recorded on the host first; a later pin (another
/// target) keeps that record. `true` when the settings changed.
pub(super) async fn pin(api: &Api, target: &str) -> Result<bool, HostError> {
    let current = live_settings(api).await?;
    if current.version_lock.as_deref() == Some(target) && current.ignore_waves == Some(true) {
        return Ok(false);
    }
    if restore_record(api).await?.is_none() {
        // Unset values go back to Bottlerocket's defaults.
        let replaced = UpdatesSettings {
            version_lock: Some(current.version_lock.unwrap_or_else(|| DEFAULT_VERSION_LOCK.to_owned())),
            ignore_waves: Some(current.ignore_waves.unwrap_or(false)),
        };
        patch(api, RESTORE_TRANSACTION, &replaced, "recording the update settings the pin replaces").await?;
    }
    let pinned = UpdatesSettings { version_lock: Some(target.to_owned()), ignore_waves: Some(true) };
    patch(api, TRANSACTION, &pinned, "pinning updates.version-lock").await?;
    commit(api, TRANSACTION, "pinning updates.version-lock").await?;
    tracing::info!(version_lock = target, "pinned the host's update version");
    Ok(true)
}

/// Restores the settings the pin replaced, if the version lock is still the pin of `target`
/// (another target's pin, or an administrator's own change since, is not undone). `true` when the
/// settings were restored.
pub(super) async fn restore(api: &Api, target: &str) -> Result<bool, HostError> {
    let Some(replaced) = restore_record(api).await? else { return Ok(false) };
    if live_settings(api).await?.version_lock.as_deref() != Some(target) {
        return Ok(false);
    }
    commit(api, RESTORE_TRANSACTION, "restoring updates.version-lock").await?;
    tracing::info!(version_lock = ?replaced.version_lock, ignore_waves = ?replaced.ignore_waves, "restored the host's update settings");
    Ok(true)
}

async fn live_settings(api: &Api) -> Result<UpdatesSettings, HostError> {
    let operation = "reading the update settings (GET /settings)";
    let path = "/settings?keys=settings.updates.version-lock,settings.updates.ignore-waves";
    let answer = api.request(operation, Method::GET, path, None).await?;
    Ok(expect_json::<Settings>(operation, &answer)?.updates)
}

/// What the first pin replaced, if a pin is recorded.
async fn restore_record(api: &Api) -> Result<Option<UpdatesSettings>, HostError> {
    let operation = "reading the recorded update settings (GET /tx)";
    let path = format!("/tx?tx={RESTORE_TRANSACTION}");
    let answer = api.request(operation, Method::GET, &path, None).await?;
    let pending = expect_json::<Settings>(operation, &answer)?.updates;
    Ok((pending != UpdatesSettings::default()).then_some(pending))
}

/// Writes `settings` into `transaction` (pending).
async fn patch(api: &Api, transaction: &str, settings: &UpdatesSettings, what: &str) -> Result<(), HostError> {
    let operation = format!("{what} (PATCH /settings)");
    let body = serde_json::json!({"updates": settings});
    let path = format!("/settings?tx={transaction}");
    let answer = api.request(&operation, Method::PATCH, &path, Some(body.to_string().into_bytes())).await?;
    if !answer.status.is_success() {
        return Err(answer.refusal(SERVICE, &operation));
    }
    Ok(())
}

/// Makes `transaction` live.
async fn commit(api: &Api, transaction: &str, what: &str) -> Result<(), HostError> {
    let operation = format!("committing {what} (POST /tx/commit_and_apply)");
    let path = format!("/tx/commit_and_apply?tx={transaction}");
    let answer = api.request(&operation, Method::POST, &path, None).await?;
    // 422: nothing pending, the values were already live.
    if !answer.status.is_success() && answer.status != StatusCode::UNPROCESSABLE_ENTITY {
        return Err(answer.refusal(SERVICE, &operation));
    }
    Ok(())
}
