//! The Bottlerocket API calls the backend needs, with the API's answers and its update lock
//! handled: wire types, retries while the lock is held (HTTP 423), and waiting for an update
//! command to finish.
//!
//! # Assumptions (from the Bottlerocket apiserver and `thar-be-updates`)
//! - An update action answers 204 as soon as its command started; the command then runs in the
//!   background holding the update lock, while which `GET /updates/status` answers 423. When it
//!   finishes it writes `most_recent_command` (type, status, timestamp, stderr).
//! - `GET /updates/status` answers 404 until the first update command after boot (the status file
//!   lives in `/run`).
//! - The settings (the version-lock pin) are in [`super::pin`].

use super::BottlerocketConfig;
use crate::host::http::{self as transport, Answer, Endpoint, TransportError};
use crate::host::{HostError, text};
use ::http::{Method, StatusCode};
use backon::{ExponentialBuilder, Retryable};
use serde::Deserialize;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// Names the service in error messages.
pub(super) const SERVICE: &str = "the Bottlerocket API";

/// `GET /os` (only what the agent uses).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct OsInfo {
    pub version_id: String,
}

/// The update state machine of `thar-be-updates`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(super) enum UpdateState {
    /// No update chosen.
    Idle,
    /// The version-locked update is offered and chosen.
    Available,
    /// An image is written to the inactive partition set.
    Staged,
    /// The staged image is marked for the next boot.
    Ready,
}

/// An update image; only its version matters here.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct UpdateImage {
    pub version: String,
}

/// What a partition set holds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct PartitionImage {
    pub image: UpdateImage,
    pub next_to_boot: bool,
}

/// The update commands, as `most_recent_command.cmd_type` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum UpdateCommand {
    Refresh,
    Prepare,
    Activate,
    Deactivate,
}

impl UpdateCommand {
    fn action_path(self) -> &'static str {
        match self {
            UpdateCommand::Refresh => "/actions/refresh-updates",
            UpdateCommand::Prepare => "/actions/prepare-update",
            UpdateCommand::Activate => "/actions/activate-update",
            UpdateCommand::Deactivate => "/actions/deactivate-update",
        }
    }

    pub fn action_name(self) -> &'static str {
        self.action_path().trim_start_matches("/actions/")
    }
}

/// How an update command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(super) enum CommandStatus {
    Success,
    Failed,
    Unknown,
}

/// `most_recent_command`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct CommandResult {
    pub cmd_type: UpdateCommand,
    pub cmd_status: CommandStatus,
    pub timestamp: String,
    #[serde(default)]
    pub exit_status: Option<i32>,
    #[serde(default)]
    pub stderr: Option<String>,
}

impl CommandResult {
    /// Why the command failed, from its stderr (the last lines) or its exit status.
    pub fn failure_message(&self) -> String {
        const MAX_LINES: usize = 5;
        const MAX_CHARS: usize = 600;
        let tail = text::tail(self.stderr.as_deref().unwrap_or_default(), MAX_LINES, MAX_CHARS);
        if !tail.is_empty() {
            return tail;
        }
        match self.exit_status {
            Some(code) => format!("it ended with status {:?} (exit status {code}) and no message", self.cmd_status),
            None => format!("it ended with status {:?} and no message", self.cmd_status),
        }
    }
}

/// `GET /updates/status`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct UpdateStatus {
    pub update_state: UpdateState,
    #[serde(default)]
    pub available_updates: Vec<String>,
    pub chosen_update: Option<UpdateImage>,
    #[serde(default)]
    pub staging_partition: Option<PartitionImage>,
    #[serde(default)]
    pub most_recent_command: Option<CommandResult>,
}

/// What an update action came to.
#[derive(Debug)]
pub(super) enum CommandOutcome {
    /// The command ran and finished with this result.
    Finished(CommandResult),
    /// The action was not allowed in the current update state (409), or there was nothing to
    /// act on (404): the caller re-reads the status and decides again.
    Refused { status: StatusCode, message: String },
}

/// One attempt's failure: the update lock was held (try again) or anything else (give up).
enum Attempt {
    Locked,
    Failed(HostError),
}

/// A client of one host's Bottlerocket API.
#[derive(Debug, Clone)]
pub(super) struct Api {
    endpoint: Endpoint,
    config: BottlerocketConfig,
}

impl Api {
    pub fn new(config: BottlerocketConfig) -> Self {
        Api { endpoint: Endpoint::Unix(config.socket_path.clone()), config }
    }

    /// One request, without retries.
    pub(super) async fn request(
        &self,
        operation: &str,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, HostError> {
        transport::exchange(&self.endpoint, method, path, body, self.config.request_timeout)
            .await
            .map_err(|error| error.into_host_error(SERVICE, operation))
    }

    /// Runs `attempt` until it does not find the update lock held, with the configured backoff.
    async fn retry_while_locked<T, F, Fut>(&self, operation: &str, attempt: F) -> Result<T, HostError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Attempt>>,
    {
        let policy = self.config.lock_retry;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(policy.first_delay)
            .with_max_delay(policy.max_delay)
            .with_max_times(policy.retries)
            .with_jitter();
        attempt
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(|failure| matches!(failure, Attempt::Locked))
            .notify(|_, delay| tracing::info!(operation, ?delay, "the host's update lock is held; trying again"))
            .await
            .map_err(|failure| match failure {
                Attempt::Locked => HostError::Locked { operation: operation.to_owned(), attempts: policy.retries + 1 },
                Attempt::Failed(error) => error,
            })
    }

    pub async fn os(&self) -> Result<OsInfo, HostError> {
        let operation = "reading the OS version (GET /os)";
        let answer = self.request(operation, Method::GET, "/os", None).await?;
        expect_json(operation, &answer)
    }

    /// One read of the update status: `None` before the first update command after boot.
    async fn status_once(&self) -> Result<Option<UpdateStatus>, Attempt> {
        const OPERATION: &str = "reading the update status (GET /updates/status)";
        let answer = self.request(OPERATION, Method::GET, "/updates/status", None).await.map_err(Attempt::Failed)?;
        match answer.status {
            StatusCode::LOCKED => Err(Attempt::Locked),
            StatusCode::NOT_FOUND => Ok(None),
            _ => expect_json(OPERATION, &answer).map(Some).map_err(Attempt::Failed),
        }
    }

    /// The update status, waiting (bounded) while the update lock is held.
    pub async fn status(&self) -> Result<Option<UpdateStatus>, HostError> {
        self.retry_while_locked("reading the update status", || self.status_once()).await
    }

    /// Starts `command` and waits until the host recorded its result, within `timeout`.
    pub async fn run_command(&self, command: UpdateCommand, timeout: Duration) -> Result<CommandOutcome, HostError> {
        let action = command.action_name();
        let before = self.status().await?.and_then(|status| status.most_recent_command);
        let answer = self
            .retry_while_locked(action, || async {
                let answer =
                    self.request(action, Method::POST, command.action_path(), None).await.map_err(Attempt::Failed)?;
                if answer.status == StatusCode::LOCKED { Err(Attempt::Locked) } else { Ok(answer) }
            })
            .await?;
        match answer.status {
            status if status.is_success() => {}
            status @ (StatusCode::CONFLICT | StatusCode::NOT_FOUND) => {
                return Ok(CommandOutcome::Refused { status, message: answer.message() });
            }
            _ => return Err(answer.refusal(SERVICE, action)),
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.status_once().await {
                Ok(Some(UpdateStatus { most_recent_command: Some(result), .. }))
                    if result.cmd_type == command && Some(&result) != before.as_ref() =>
                {
                    return Ok(CommandOutcome::Finished(result));
                }
                // Still running (locked), or not written yet.
                Ok(_) | Err(Attempt::Locked) => {}
                Err(Attempt::Failed(error)) if error.is_retryable() => {
                    tracing::warn!(%error, action, "reading the update status failed while waiting; trying again");
                }
                Err(Attempt::Failed(error)) => return Err(error),
            }
            if Instant::now() >= deadline {
                return Err(HostError::TimedOut { operation: action.to_owned(), after: timeout });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }

    /// Asks the host to reboot. `Ok` once the reboot is under way.
    pub async fn reboot(&self) -> Result<(), HostError> {
        const ACTION: &str = "reboot";
        let answer = self
            .retry_while_locked(ACTION, || async {
                let result = transport::exchange(
                    &self.endpoint,
                    Method::POST,
                    "/actions/reboot",
                    None,
                    self.config.request_timeout,
                )
                .await;
                match result {
                    // The reboot may take the API server down before it answers.
                    Err(TransportError::ClosedBeforeAnswer) => Ok(None),
                    Err(error) => Err(Attempt::Failed(error.into_host_error(SERVICE, ACTION))),
                    Ok(answer) if answer.status == StatusCode::LOCKED => Err(Attempt::Locked),
                    Ok(answer) => Ok(Some(answer)),
                }
            })
            .await?;
        match answer {
            None => {
                tracing::info!("the API closed the connection on the reboot request: the reboot is under way");
                Ok(())
            }
            Some(answer) if answer.status.is_success() => Ok(()),
            Some(answer) if answer.status == StatusCode::CONFLICT => Err(HostError::UnexpectedState {
                operation: ACTION.to_owned(),
                detail: format!("the host refused to reboot in its update state: {}", answer.message()),
            }),
            Some(answer) => Err(answer.refusal(SERVICE, ACTION)),
        }
    }
}

pub(super) fn expect_json<T: serde::de::DeserializeOwned>(operation: &str, answer: &Answer) -> Result<T, HostError> {
    if !answer.status.is_success() {
        return Err(answer.refusal(SERVICE, operation));
    }
    serde_json::from_slice(&answer.body).map_err(|error| HostError::BadAnswer {
        service: SERVICE.to_owned(),
        operation: operation.to_owned(),
        reason: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_update_status_document_parses() {
        // As thar-be-updates writes it (serde_json::to_writer_pretty of its UpdateStatus).
        let document = r#"{
          "update_state": "Staged",
          "available_updates": ["1.20.1", "1.20.0", "1.19.5"],
          "chosen_update": {"arch": "x86_64", "version": "1.20.0", "variant": "aws-k8s-1.29"},
          "active_partition": {"image": {"arch": "x86_64", "version": "1.19.5", "variant": "aws-k8s-1.29"}, "next_to_boot": true},
          "staging_partition": {"image": {"arch": "x86_64", "version": "1.20.0", "variant": "aws-k8s-1.29"}, "next_to_boot": false},
          "most_recent_command": {"cmd_type": "prepare", "cmd_status": "Success", "timestamp": "2026-11-21T10:02:10.123Z", "exit_status": 0, "stderr": ""}
        }"#;
        let status: UpdateStatus = serde_json::from_str(document).unwrap();
        assert_eq!(status.update_state, UpdateState::Staged);
        assert_eq!(status.staging_partition.unwrap().image.version, "1.20.0");
        let command = status.most_recent_command.unwrap();
        assert_eq!((command.cmd_type, command.cmd_status), (UpdateCommand::Prepare, CommandStatus::Success));
    }

    #[test]
    fn a_fresh_status_without_commands_parses() {
        let document = r#"{"update_state": "Idle", "available_updates": [], "chosen_update": null,
          "active_partition": null, "staging_partition": null, "most_recent_command": null}"#;
        let status: UpdateStatus = serde_json::from_str(document).unwrap();
        assert_eq!(status.update_state, UpdateState::Idle);
        assert!(status.most_recent_command.is_none());
    }

    #[test]
    fn a_failed_command_is_explained_by_the_end_of_its_stderr() {
        let result = |stderr: Option<&str>| CommandResult {
            cmd_type: UpdateCommand::Prepare,
            cmd_status: CommandStatus::Failed,
            timestamp: "t".into(),
            exit_status: Some(1),
            stderr: stderr.map(str::to_owned),
        };
        let many_lines: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        assert_eq!(result(Some(&many_lines)).failure_message(), "line 16 / line 17 / line 18 / line 19 / line 20");
        assert_eq!(result(Some("")).failure_message(), "it ended with status Failed (exit status 1) and no message");
        assert!(result(Some(&"x".repeat(5000))).failure_message().len() <= 600);
    }
}
