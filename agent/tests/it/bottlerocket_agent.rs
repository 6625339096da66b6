//! The whole agent (its loop, the real Bottlerocket backend with its default timings) against the
//! fake Bottlerocket API and a fake Kubernetes API, in paused time: update commands that hold the
//! host's update lock for minutes, as a real `prepare-update` does while it downloads an image.
//! The agent must stay live (its heartbeat never older than the liveness limit) all along and
//! carry the node through stage and reboot, also when it is restarted in the middle of a prepare.

use crate::support;

use agent::host::bottlerocket::{BottlerocketConfig, BottlerocketHost};
use shared::health::Health;
use shared::protocol::keys;
use std::sync::Arc;
use std::time::Duration;
use support::bottlerocket::{FakeBottlerocket, Setup};
use support::kube::FakeKube;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const NODE: &str = "bottlerocket-0";
/// Every update command (refresh, prepare, activate) holds the lock this long: longer than the
/// agent's liveness limit (60 s) and than its lock backoff (55 to 110 s).
const COMMAND: Duration = Duration::from_secs(4 * 60);
const BOOT_0: &str = "00000000-0000-4000-8000-000000000000";

struct Agent {
    health: Health,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), agent::Error>>,
}

/// Starts an agent process: the defaults of the binary but for the fake's socket and boot ID.
fn start_agent(fake: &FakeBottlerocket, kube: &FakeKube) -> Agent {
    let mut config = BottlerocketConfig::new(&fake.socket);
    config.boot_id_path = fake.boot_id_path.clone();
    let health = Health::default();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(agent::run(
        kube.client(),
        NODE.into(),
        Arc::new(BottlerocketHost::new(config)),
        agent::Metrics::default(),
        health.clone(),
        shutdown.clone(),
    ));
    Agent { health, shutdown, task }
}

/// Waits (virtual time, one second at a time) until `done`, asserting at every second that the
/// agent is live, as a kubelet's liveness probe would.
async fn live_until(agent: &Agent, what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = tokio::time::Instant::now();
    while !done() {
        if let Err(stuck) = agent.health.live() {
            panic!("the agent is not live while waiting for {what}: {stuck}");
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");

        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn reported(kube: &FakeKube, state: &str, token: &str) -> bool {
    let annotations = kube.annotations();
    annotations.get(keys::STATE).map(String::as_str) == Some(state)
        && annotations.get(keys::STATE_TOKEN).map(String::as_str) == Some(token)
}

fn intent(kube: &FakeKube, step: &str, token: &str, boot_id_before: Option<&str>) {
    kube.annotate(&[
        (keys::INTENT, Some(step)),
        (keys::INTENT_TARGET, Some("1.20.0")),
        (keys::INTENT_TOKEN, Some(token)),
        (keys::INTENT_SINCE, Some("2026-11-21T10:00:00.000Z")),
        (keys::BOOT_ID_BEFORE, boot_id_before),
        (keys::CORDONED_BY, boot_id_before.map(|_| keys::CORDONED_BY_VALUE)),
    ]);
}

fn cordon(kube: &FakeKube) {
    kube.update(|node| node["spec"]["unschedulable"] = serde_json::json!(true));
}

#[tokio::test(start_paused = true)]
async fn prepares_that_hold_the_update_lock_longer_than_the_liveness_limit_neither_stall_nor_restart_the_agent() {
    let fake =
        FakeBottlerocket::start(Setup { command_duration: COMMAND, ..Setup::new("1.19.0", vec!["1.21.0", "1.20.0"]) });
    let kube = FakeKube::new(NODE, BOOT_0);
    let first = start_agent(&fake, &kube);
    live_until(&first, "the first report", Duration::from_secs(60), || kube.annotations().contains_key(keys::OS_IMAGE))
        .await;

    // Stage: a refresh and a prepare of four minutes each; the five-minute re-check of the host
    // falls into the prepare, and finds the update lock held.
    intent(&kube, "stage", "s1", None);
    live_until(&first, "the prepare to start", Duration::from_secs(30 * 60), || {
        fake.count("POST /actions/prepare-update") == 1
    })
    .await;
    live_until(&first, "the stage to be done", Duration::from_secs(30 * 60), || reported(&kube, "done", "s1")).await;
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
    assert!(fake.lock_refusals() > 0, "the agent met the held lock");

    // Reboot: an activation of four minutes, then the reboot into the target.
    cordon(&kube);
    intent(&kube, "reboot", "r1", Some(BOOT_0));
    live_until(&first, "the reboot to be done", Duration::from_secs(30 * 60), || reported(&kube, "done", "r1")).await;
    assert_eq!((fake.running().as_str(), fake.boots()), ("1.20.0", 1));
    first.shutdown.cancel();
    first.task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_agent_restarted_while_a_prepare_holds_the_lock_stays_live_and_completes_the_stage() {
    let fake =
        FakeBottlerocket::start(Setup { command_duration: COMMAND, ..Setup::new("1.19.0", vec!["1.21.0", "1.20.0"]) });
    let kube = FakeKube::new(NODE, BOOT_0);
    let first = start_agent(&fake, &kube);
    intent(&kube, "stage", "s1", None);
    live_until(&first, "the prepare to start", Duration::from_secs(30 * 60), || {
        fake.count("POST /actions/prepare-update") == 1
    })
    .await;
    // Killed in the middle of the prepare: the host's prepare goes on, holding the lock.
    first.task.abort();
    let _ = first.task.await;
    assert!(fake.command_running());

    let second = start_agent(&fake, &kube);
    live_until(&second, "the stage to be done", Duration::from_secs(30 * 60), || reported(&kube, "done", "s1")).await;
    assert_eq!(fake.count("POST /actions/prepare-update"), 1, "the prepare under way is waited for, not repeated");
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
    second.shutdown.cancel();
    second.task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_repository_that_fails_refresh_and_prepare_for_a_while_is_retried_until_the_stage_is_done() {
    let fake =
        FakeBottlerocket::start(Setup { command_duration: COMMAND, ..Setup::new("1.19.0", vec!["1.21.0", "1.20.0"]) });
    // updog cannot reach the repository: one refresh and two prepares fail (503), as the real
    // status records them.
    fake.fail_next_refreshes(1);
    fake.fail_next_prepares(2);
    let kube = FakeKube::new(NODE, BOOT_0);
    let agent = start_agent(&fake, &kube);
    intent(&kube, "stage", "s1", None);
    live_until(&agent, "the stage to be done", Duration::from_secs(60 * 60), || {
        assert!(
            !reported(&kube, "error", "s1"),
            "a transient repository failure failed the node: {:?}",
            kube.annotations()
        );
        reported(&kube, "done", "s1")
    })
    .await;
    assert_eq!(fake.count("POST /actions/prepare-update"), 3);
    assert_eq!(fake.staged().as_deref(), Some("1.20.0"));
    agent.shutdown.cancel();
    agent.task.await.unwrap().unwrap();
}
