//! A fake Bottlerocket API on a Unix socket: a small but faithful model of the update state machine
//! of the Bottlerocket apiserver and `thar-be-updates`.
//!
//! Checked against bottlerocket-os/bottlerocket-core-kit at a10182f9 (October 2024):
//! `sources/api/apiserver/src/server/mod.rs` (routes; `GET /updates/status` takes the update lock
//! shared and answers 423 when it cannot; `POST /tx/commit_and_apply` answers 422 with nothing
//! pending; `PATCH /settings` and the actions answer 204), `sources/api/apiserver/src/server/error.rs`
//! (status codes and messages), `sources/api/apiserver/src/server/controller.rs`
//! (`dispatch_update_command`: thar-be-updates' exit status to 423, 409 or 404),
//! `sources/api/thar-be-updates/src/main.rs` (the state machine, the exclusive lock held by the
//! forked command until it ends, the status written whether the command succeeded or not) and
//! `sources/api/thar-be-updates/src/status.rs` (the status document field by field, the choice of
//! the update from the version lock). `agent/tests/it/bottlerocket_fake.rs` holds the fake to them.
//!
//! Modelled as the real one behaves:
//! - states Idle, Available, Staged, Ready; refresh is allowed in every state (Idle/Available move
//!   to Available when the version-locked update is offered, else Idle); prepare needs Available or
//!   Staged (409 otherwise, 404 without a chosen update); activate needs Staged and deactivate
//!   Ready (409 otherwise, 404 without a staged image); the lock is checked first (423);
//! - actions answer 204 at once and run in the background for `command_duration`, holding the
//!   update lock: meanwhile `GET /updates/status` and every action answer 423; at the end the
//!   command's result is written to `most_recent_command`;
//! - `GET /updates/status` answers 404 until the first command after boot;
//! - the version lock (`settings.updates.version-lock`, default `latest`) decides the chosen update;
//!   settings change through `PATCH /settings?tx=` and `POST /tx/commit_and_apply?tx=` (422 when
//!   the transaction holds nothing); refresh reads the version lock from the updater's
//!   configuration, which the host renders in the background after a commit: with
//!   `stale_refreshes_after_commit` the next refreshes after a commit still use the old lock, as
//!   when they win the race against the rendering.
//!
//! `GET /settings` answers the version lock and `ignore-waves`; `GET /tx?tx=` answers a
//! transaction's pending settings (`{}` when none), `DELETE /tx?tx=` discards them. The agent
//! changes and restores the settings through its own transactions, which the settings API serves
//! while an update command holds the update lock (the lock guards only `/updates` and `/actions`).
//!
//! Injected faults: a number of 423 answers before the lock "lets go" (`set_locked_answers`), and
//! refreshes and prepares that fail as updog fails when the repository answers 503
//! (`fail_next_refreshes`, `fail_next_prepares`; another message with `set_failure_message`).
//!
//! Stricter than the real API, to catch agent bugs: `POST /actions/reboot` is refused (409) unless
//! the state is Ready (the real one reboots in any state). A reboot boots the staging partition,
//! writes a new boot ID and forgets the update status, as the real `/run` does.

use super::server::{Call, Handler, Reply, serve_unix};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

const ARCH: &str = "x86_64";
const VARIANT: &str = "aws-k8s-1.33";

/// Where the fake host starts.
pub enum Initial {
    /// Just booted: no update status yet.
    Fresh,
    /// `version` is staged (not activated).
    Staged(&'static str),
    /// `version` is staged and activated for the next boot.
    Ready(&'static str),
}

pub struct Setup {
    pub running: &'static str,
    pub offered: Vec<&'static str>,
    pub initial: Initial,
    pub command_duration: Duration,
    /// How many refreshes after a commit still use the old version lock.
    pub stale_refreshes_after_commit: usize,
    /// `settings.updates.version-lock` at start (default: `latest`, or the staged version).
    pub version_lock: Option<&'static str>,
    /// `settings.updates.ignore-waves` at start.
    pub ignore_waves: bool,
}

impl Setup {
    pub fn new(running: &'static str, offered: Vec<&'static str>) -> Self {
        Setup {
            running,
            offered,
            initial: Initial::Fresh,
            command_duration: Duration::from_millis(50),
            stale_refreshes_after_commit: 0,
            version_lock: None,
            ignore_waves: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpdateState {
    Idle,
    Available,
    Staged,
    Ready,
}

struct RecentCommand {
    cmd_type: &'static str,
    success: bool,
    stderr: String,
    timestamp: String,
}

struct Status {
    state: UpdateState,
    chosen: Option<String>,
    /// The staging partition's version and whether it boots next.
    staging: Option<(String, bool)>,
    recent: Option<RecentCommand>,
}

struct Host {
    running: String,
    offered: Vec<String>,
    status: Option<Status>,
    command_running: bool,
    command_duration: Duration,
    locked_answers: usize,
    prepare_failures: usize,
    refresh_failures: usize,
    /// The stderr of an injected failure (updog's message).
    failure_message: Option<String>,
    version_lock: String,
    /// The version lock in the updater's rendered configuration, which refresh uses.
    rendered_version_lock: String,
    stale_refreshes_after_commit: usize,
    /// Refreshes left before the committed version lock is rendered.
    stale_refreshes_left: usize,
    ignore_waves: bool,
    pending: HashMap<String, serde_json::Map<String, Value>>,
    requests: Vec<String>,
    lock_refusals: usize,
    boots: u32,
    boot_id_path: PathBuf,
}

pub struct FakeBottlerocket {
    pub socket: PathBuf,
    pub boot_id_path: PathBuf,
    host: Arc<Mutex<Host>>,
    finish_now: Arc<Notify>,
    server: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for FakeBottlerocket {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn boot_id(boots: u32) -> String {
    format!("00000000-0000-4000-8000-{boots:012}")
}

impl FakeBottlerocket {
    pub fn start(setup: Setup) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let boot_id_path = dir.path().join("boot_id");
        std::fs::write(&boot_id_path, format!("{}\n", boot_id(0))).unwrap();
        let (status, version_lock) = match setup.initial {
            Initial::Fresh => (None, "latest".to_owned()),
            Initial::Staged(version) | Initial::Ready(version) => {
                let ready = matches!(setup.initial, Initial::Ready(_));
                let status = Status {
                    state: if ready { UpdateState::Ready } else { UpdateState::Staged },
                    chosen: Some(version.to_owned()),
                    staging: Some((version.to_owned(), ready)),
                    recent: Some(RecentCommand {
                        cmd_type: if ready { "activate" } else { "prepare" },
                        success: true,
                        stderr: String::new(),
                        timestamp: jiff::Timestamp::now().to_string(),
                    }),
                };
                (Some(status), version.to_owned())
            }
        };
        let version_lock = setup.version_lock.map_or(version_lock, str::to_owned);
        let host = Arc::new(Mutex::new(Host {
            running: setup.running.to_owned(),
            offered: setup.offered.into_iter().map(str::to_owned).collect(),
            status,
            command_running: false,
            command_duration: setup.command_duration,
            locked_answers: 0,
            prepare_failures: 0,
            refresh_failures: 0,
            failure_message: None,
            rendered_version_lock: version_lock.clone(),
            version_lock,
            stale_refreshes_after_commit: setup.stale_refreshes_after_commit,
            stale_refreshes_left: 0,
            ignore_waves: setup.ignore_waves,
            pending: HashMap::new(),
            requests: Vec::new(),
            lock_refusals: 0,
            boots: 0,
            boot_id_path: boot_id_path.clone(),
        }));
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let finish_now = Arc::new(Notify::new());
        let server = serve_unix(listener, Arc::new(Api { host: host.clone(), finish_now: finish_now.clone() }));
        FakeBottlerocket { socket, boot_id_path, host, finish_now, server, _dir: dir }
    }

    fn host(&self) -> MutexGuard<'_, Host> {
        self.host.lock().unwrap()
    }

    /// Every request so far, as `METHOD path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.host().requests.clone()
    }

    /// How many requests started with `prefix` (e.g. `"POST /actions/prepare-update"`).
    pub fn count(&self, prefix: &str) -> usize {
        self.host().requests.iter().filter(|request| request.starts_with(prefix)).count()
    }

    /// Requests that change something (everything but GETs).
    pub fn writes(&self) -> Vec<String> {
        self.host().requests.iter().filter(|request| !request.starts_with("GET ")).cloned().collect()
    }

    /// How many requests were answered 423.
    pub fn lock_refusals(&self) -> usize {
        self.host().lock_refusals
    }

    /// The next `n` update requests find the update lock held.
    pub fn set_locked_answers(&self, n: usize) {
        self.host().locked_answers = n;
    }

    /// The next `n` prepares fail as updog fails when the repository answers 503.
    pub fn fail_next_prepares(&self, n: usize) {
        self.host().prepare_failures = n;
    }

    /// The next `n` refreshes fail as updog fails when the repository answers 503.
    pub fn fail_next_refreshes(&self, n: usize) {
        self.host().refresh_failures = n;
    }

    /// Injected failures write `stderr` instead of the repository's 503.
    pub fn set_failure_message(&self, stderr: &str) {
        self.host().failure_message = Some(stderr.to_owned());
    }

    pub fn state(&self) -> Option<String> {
        self.host().status.as_ref().map(|status| format!("{:?}", status.state))
    }

    pub fn running(&self) -> String {
        self.host().running.clone()
    }

    pub fn staged(&self) -> Option<String> {
        self.host().status.as_ref().and_then(|status| status.staging.as_ref()).map(|(version, _)| version.clone())
    }

    pub fn version_lock(&self) -> String {
        self.host().version_lock.clone()
    }

    pub fn ignore_waves(&self) -> bool {
        self.host().ignore_waves
    }

    /// The settings pending in transaction `tx`, as `key=value` (JSON values), sorted.
    pub fn pending(&self, tx: &str) -> Vec<String> {
        let host = self.host();
        let mut pending: Vec<String> = host
            .pending
            .get(tx)
            .map(|values| values.iter().map(|(key, value)| format!("{key}={value}")).collect())
            .unwrap_or_default();
        pending.sort();
        pending
    }

    /// Ends the update commands running now, as if their duration had passed.
    pub fn finish_commands_now(&self) {
        self.finish_now.notify_waiters();
    }

    /// Whether an update command still runs (holding the update lock).
    pub fn command_running(&self) -> bool {
        self.host().command_running
    }

    pub fn boots(&self) -> u32 {
        self.host().boots
    }
}

struct Api {
    host: Arc<Mutex<Host>>,
    /// Ends running commands before their duration.
    finish_now: Arc<Notify>,
}

fn text(status: StatusCode, body: &str) -> Reply {
    Reply::new(status, body)
}

fn image(version: &str) -> Value {
    json!({"arch": ARCH, "version": version, "variant": VARIANT})
}

impl Host {
    fn status_json(&self, status: &Status) -> Value {
        json!({
            "update_state": format!("{:?}", status.state),
            "available_updates": self.offered,
            "chosen_update": status.chosen.as_deref().map(image),
            "active_partition": {
                "image": image(&self.running),
                "next_to_boot": !status.staging.as_ref().is_some_and(|(_, next)| *next),
            },
            "staging_partition": status.staging.as_ref().map(|(version, next)| json!({"image": image(version), "next_to_boot": next})),
            "most_recent_command": status.recent.as_ref().map(|recent| json!({
                "cmd_type": recent.cmd_type,
                "cmd_status": if recent.success { "Success" } else { "Failed" },
                "timestamp": recent.timestamp,
                "exit_status": if recent.success { 0 } else { 1 },
                "stderr": recent.stderr,
            })),
        })
    }

    /// The update the version lock chooses, as `thar-be-updates` does.
    fn choose(&self) -> Option<String> {
        let lock = self.rendered_version_lock.trim_start_matches('v');
        if lock == "latest" {
            // `get_latest_update`: the offered list is newest first, as in the update manifest; the
            // first newer than the running version. (The manifest's max_version is not modelled.)
            return self.offered.iter().find(|version| numeric(version) > numeric(&self.running)).cloned();
        }
        if lock == self.running {
            return None;
        }
        self.offered.iter().find(|version| *version == lock).cloned()
    }

    fn status_mut(&mut self) -> &mut Status {
        self.status.get_or_insert(Status { state: UpdateState::Idle, chosen: None, staging: None, recent: None })
    }
}

/// Runs `finish` on the host after the command's duration (or when told to finish now), holding
/// the update lock meanwhile.
fn start_command(host: &Arc<Mutex<Host>>, now: &Arc<Notify>, finish: impl FnOnce(&mut Host) + Send + 'static) {
    let duration = {
        let mut guard = host.lock().unwrap();
        guard.command_running = true;
        guard.command_duration
    };
    let (host, now) = (host.clone(), now.clone());
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(duration) => {}
            () = now.notified() => {}
        }
        let mut guard = host.lock().unwrap();
        finish(&mut guard);
        guard.command_running = false;
    });
}

fn record(host: &mut Host, cmd_type: &'static str, success: bool, stderr: &str) {
    host.status_mut().recent = Some(RecentCommand {
        cmd_type,
        success,
        stderr: stderr.to_owned(),
        timestamp: jiff::Timestamp::now().to_string(),
    });
}

/// The numbers of a version `x.y.z[-pre][+build]`, for ordering.
fn numeric(version: &str) -> Vec<u64> {
    let core = version.trim_start_matches('v').split(['-', '+']).next().unwrap_or_default();
    core.split('.').map(|part| part.parse().unwrap_or(0)).collect()
}

/// `latest`, or a semantic version with an optional leading `v`.
fn valid_version_lock(value: &str) -> bool {
    let version = value.trim_start_matches('v');
    let core = version.split(['-', '+']).next().unwrap_or_default();
    value == "latest" || (core.split('.').count() == 3 && core.split('.').all(|part| part.parse::<u64>().is_ok()))
}

impl Handler for Api {
    async fn handle(&self, call: Call) -> Reply {
        let path = call.uri.path().to_owned();
        let query = call.uri.query().unwrap_or_default().to_owned();
        let mut host = self.host.lock().unwrap();
        let line = if query.is_empty() {
            format!("{} {path}", call.method)
        } else {
            format!("{} {path}?{query}", call.method)
        };
        host.requests.push(line);

        let update_endpoint = path == "/updates/status" || path.starts_with("/actions/") && path != "/actions/reboot";
        if update_endpoint && (host.locked_answers > 0 || host.command_running) {
            host.locked_answers = host.locked_answers.saturating_sub(1);
            host.lock_refusals += 1;
            let message = if path == "/updates/status" {
                "Unable to obtain shared lock for reading update status: Resource temporarily unavailable"
            } else {
                "Update lock held"
            };
            return text(StatusCode::LOCKED, message);
        }
        let tx = query.strip_prefix("tx=").unwrap_or("default").to_owned();

        match (call.method.clone(), path.as_str()) {
            (Method::GET, "/os") => Reply::new(
                StatusCode::OK,
                json!({
                    "pretty_name": format!("Bottlerocket OS {} ({VARIANT})", host.running),
                    "variant_id": VARIANT,
                    "version_id": host.running,
                    "build_id": "abcdef12",
                    "arch": ARCH,
                })
                .to_string(),
            ),
            (Method::GET, "/updates/status") => match &host.status {
                None => text(StatusCode::NOT_FOUND, "Update status is uninitialized, refresh-updates to initialize it"),
                Some(status) => Reply::new(StatusCode::OK, host.status_json(status).to_string()),
            },
            (Method::POST, "/actions/refresh-updates") => {
                host.status_mut();
                drop(host);
                start_command(&self.host, &self.finish_now, |host| {
                    if host.refresh_failures > 0 {
                        // thar-be-updates `refresh`: updog failed, the command is recorded as failed
                        // and the state moves Idle/Available to Idle (other states stay); the list
                        // of updates and the chosen update are left as they were.
                        host.refresh_failures -= 1;
                        let stderr = host.failure_message.clone().unwrap_or_else(|| {
                            format!("Manifest load error: Failed to fetch https://updates.bottlerocket.aws/2020-07-07/{VARIANT}/{ARCH}/timestamp.json: 503 Service Unavailable\n")
                        });
                        let status = host.status_mut();
                        if matches!(status.state, UpdateState::Idle | UpdateState::Available) {
                            status.state = UpdateState::Idle;
                        }
                        record(host, "refresh", false, &stderr);
                        return;
                    }
                    let chosen = host.choose();
                    if host.stale_refreshes_left > 0 {
                        host.stale_refreshes_left -= 1;
                        if host.stale_refreshes_left == 0 {
                            host.rendered_version_lock = host.version_lock.clone();
                        }
                    }
                    let status = host.status_mut();
                    if matches!(status.state, UpdateState::Idle | UpdateState::Available) {
                        status.state = if chosen.is_some() { UpdateState::Available } else { UpdateState::Idle };
                    }
                    status.chosen = chosen;
                    record(host, "refresh", true, "");
                });
                text(StatusCode::NO_CONTENT, "")
            }
            (Method::POST, "/actions/prepare-update") => {
                let status = host.status_mut();
                if !matches!(status.state, UpdateState::Available | UpdateState::Staged) {
                    return text(StatusCode::CONFLICT, "Update action not allowed according to update state");
                }
                let Some(chosen) = status.chosen.clone() else {
                    return text(StatusCode::NOT_FOUND, "Previously chosen Update no longer exists");
                };
                drop(host);
                start_command(&self.host, &self.finish_now, move |host| {
                    if host.prepare_failures > 0 {
                        // thar-be-updates `prepare`: the failure is recorded, the state stays.
                        host.prepare_failures -= 1;
                        let stderr = host.failure_message.clone().unwrap_or_else(|| format!(
                            "Starting update to {chosen}\nFailed to fetch target 'bottlerocket-{VARIANT}-{ARCH}-{chosen}-root.ext4.lz4': 503 Service Unavailable\n"
                        ));
                        record(host, "prepare", false, &stderr);
                        return;
                    }
                    let status = host.status_mut();
                    status.staging = Some((chosen, false));
                    status.state = UpdateState::Staged;
                    record(host, "prepare", true, "");
                });
                text(StatusCode::NO_CONTENT, "")
            }
            (Method::POST, "/actions/activate-update") => {
                let status = host.status_mut();
                if status.state != UpdateState::Staged {
                    return text(StatusCode::CONFLICT, "Update action not allowed according to update state");
                }
                if status.staging.is_none() {
                    return text(StatusCode::NOT_FOUND, "No update image applied to staging partition");
                }
                drop(host);
                start_command(&self.host, &self.finish_now, |host| {
                    let status = host.status_mut();
                    if let Some((_, next)) = &mut status.staging {
                        *next = true;
                    }
                    status.state = UpdateState::Ready;
                    record(host, "activate", true, "");
                });
                text(StatusCode::NO_CONTENT, "")
            }
            (Method::POST, "/actions/deactivate-update") => {
                let status = host.status_mut();
                if status.state != UpdateState::Ready {
                    return text(StatusCode::CONFLICT, "Update action not allowed according to update state");
                }
                if status.staging.is_none() {
                    return text(StatusCode::NOT_FOUND, "No update image applied to staging partition");
                }
                drop(host);
                start_command(&self.host, &self.finish_now, |host| {
                    let status = host.status_mut();
                    if let Some((_, next)) = &mut status.staging {
                        *next = false;
                    }
                    status.state = UpdateState::Staged;
                    record(host, "deactivate", true, "");
                });
                text(StatusCode::NO_CONTENT, "")
            }
            (Method::POST, "/actions/reboot") => {
                let ready = host.status.as_ref().and_then(|status| {
                    (status.state == UpdateState::Ready)
                        .then(|| status.staging.as_ref().map(|(version, _)| version.clone()))
                });
                let Some(Some(next)) = ready else {
                    return text(StatusCode::CONFLICT, "fake: refusing to reboot outside the Ready state");
                };
                host.running = next;
                host.status = None;
                host.boots += 1;
                std::fs::write(&host.boot_id_path, format!("{}\n", boot_id(host.boots))).unwrap();
                text(StatusCode::NO_CONTENT, "")
            }
            (Method::GET, "/settings") => {
                let mut updates = serde_json::Map::new();
                if query.contains("settings.updates.version-lock") {
                    updates.insert("version-lock".into(), json!(host.version_lock));
                }
                if query.contains("settings.updates.ignore-waves") {
                    updates.insert("ignore-waves".into(), json!(host.ignore_waves));
                }
                Reply::new(StatusCode::OK, json!({"updates": updates}).to_string())
            }
            (Method::PATCH, "/settings") => {
                let Ok(Value::Object(settings)) = serde_json::from_slice::<Value>(&call.body) else {
                    return text(StatusCode::BAD_REQUEST, "Unable to deserialize input JSON into model");
                };
                for (group, values) in settings {
                    let Value::Object(values) = values else {
                        return text(StatusCode::BAD_REQUEST, "Unable to deserialize input JSON into model");
                    };
                    if group != "updates" {
                        return text(StatusCode::BAD_REQUEST, "fake: only settings.updates is modelled");
                    }
                    for (key, value) in values {
                        let valid = match key.as_str() {
                            "version-lock" => value.as_str().is_some_and(valid_version_lock),
                            "ignore-waves" => value.is_boolean(),
                            _ => false,
                        };
                        if !valid {
                            return text(
                                StatusCode::BAD_REQUEST,
                                &format!("Unable to deserialize input JSON into model: updates.{key}"),
                            );
                        }
                        host.pending.entry(tx.clone()).or_default().insert(key, value);
                    }
                }
                text(StatusCode::NO_CONTENT, "")
            }
            (Method::GET, "/tx") => {
                // An empty Settings (`{}`) when nothing is pending.
                match host.pending.get(&tx).filter(|pending| !pending.is_empty()) {
                    Some(pending) => Reply::new(StatusCode::OK, json!({"updates": pending}).to_string()),
                    None => Reply::new(StatusCode::OK, "{}"),
                }
            }
            (Method::DELETE, "/tx") => {
                let deleted: Vec<String> = host
                    .pending
                    .remove(&tx)
                    .map(|pending| pending.keys().map(|key| format!("settings.updates.{key}")).collect())
                    .unwrap_or_default();
                Reply::new(StatusCode::OK, json!(deleted).to_string())
            }
            (Method::POST, "/tx/commit_and_apply") => {
                let Some(pending) = host.pending.remove(&tx).filter(|pending| !pending.is_empty()) else {
                    return text(StatusCode::UNPROCESSABLE_ENTITY, "Tried to commit with no pending changes");
                };
                let mut changed = Vec::new();
                for (key, value) in pending {
                    match key.as_str() {
                        "version-lock" => host.version_lock = value.as_str().unwrap_or_default().to_owned(),
                        "ignore-waves" => host.ignore_waves = value.as_bool().unwrap_or_default(),
                        _ => {}
                    }
                    changed.push(format!("settings.updates.{key}"));
                }
                host.stale_refreshes_left = host.stale_refreshes_after_commit;
                if host.stale_refreshes_left == 0 {
                    host.rendered_version_lock = host.version_lock.clone();
                }
                Reply::new(StatusCode::OK, json!(changed).to_string())
            }
            _ => text(StatusCode::NOT_FOUND, "not found"),
        }
    }
}
