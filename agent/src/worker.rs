//! The agent's loop: watch the own Node, decide ([`crate::decide`]), write the report, and carry
//! out host work in the background.
//!
//! # Guarantees
//! - Watches only its own Node (a `metadata.name` field selector) and writes only its own Node's
//!   agent annotations, with minimal merge patches; nothing is written when nothing changed.
//! - Host facts are read at start, when a new intent arrives, after host work, and while waiting
//!   for a reboot; never on a timer otherwise, and never written unless they changed.
//! - One host operation at a time. Malformed controller annotations make the agent do nothing on
//!   the host (it logs them); its own malformed annotations are rewritten, since it owns them.

use crate::decide::{self, Facts, Work};
use crate::host::{HostError, HostUpdater};
use crate::metrics::{HostOpLabels, Metrics};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use shared::health::Health;
use shared::protocol::patch::NodePatch;
use shared::protocol::{AgentReport, ControllerAnnotations, Token};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Field manager of the agent's writes.
pub const FIELD_MANAGER: &str = "update-operator-agent";
/// How often the host is asked whether it rebooted, once the reboot was requested (the simulation
/// keeps the agent alive across its reboots; on a real host the reboot ends the process).
const REBOOT_POLL: Duration = Duration::from_secs(1);
/// Pause before retrying when the host's facts cannot be read.
const FACTS_RETRY: Duration = Duration::from_secs(5);
/// Pause before retrying a failed write of the report.
const WRITE_RETRY: Duration = Duration::from_secs(2);
/// The loop's longest wait without a heartbeat: an idle agent wakes this often just to beat.
const HEARTBEAT_TICK: Duration = Duration::from_secs(10);
/// No heartbeat for this long (six ticks) means the loop is stuck in a call: `/healthz` fails.
const STUCK_AFTER: Duration = Duration::from_secs(60);

/// Errors that stop the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The watch of the agent's Node ended for good.
    #[error("the watch of node {0} ended")]
    WatchEnded(String),
}

/// Host work that ended.
struct Finished {
    work: Work,
    result: Result<(), HostError>,
}

struct Agent<H> {
    node_name: String,
    nodes: Api<Node>,
    host: Arc<H>,
    metrics: Metrics,
    /// The newest Node seen: from the watch, or our own write until the watch delivers it.
    node: Option<Node>,
    /// Our last write until the watch shows it: its resourceVersion and what it wrote. Events
    /// before it are older than what we know (the watch delivers in order) and are ignored.
    unconfirmed: Option<(String, AgentReport)>,
    facts: Option<Facts>,
    /// The intent token the facts were read for.
    facts_token: Option<Token>,
    running: Option<Work>,
    /// The host said the reboot is under way; poll until the boot ID changes.
    awaiting_reboot: bool,
    last_problem: Option<String>,
}

/// Runs the agent of `node_name` until `shutdown`.
pub async fn run<H: HostUpdater>(
    client: Client,
    node_name: String,
    host: Arc<H>,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let nodes: Api<Node> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let events = watcher(nodes.clone(), config).default_backoff().applied_objects();
    let mut events = std::pin::pin!(events);
    tracing::info!(node = %node_name, "watching own node");
    let (done_tx, mut done_rx) = mpsc::channel::<Finished>(4);
    let mut agent = Agent {
        node_name,
        nodes,
        host,
        metrics,
        node: None,
        unconfirmed: None,
        facts: None,
        facts_token: None,
        running: None,
        awaiting_reboot: false,
        last_problem: None,
    };
    let mut retry_at: Option<tokio::time::Instant> = None;
    let heartbeat = health.heartbeat("agent", STUCK_AFTER);
    let mut tick = tokio::time::interval(HEARTBEAT_TICK);
    loop {
        heartbeat.beat();
        let poll = if agent.awaiting_reboot { Some(tokio::time::Instant::now() + REBOOT_POLL) } else { None };
        let wake = match (poll, retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            event = events.next() => match event {
                None => return Err(Error::WatchEnded(agent.node_name)),
                Some(Err(error)) => {
                    tracing::warn!(%error, "watch of own node failed; retrying");
                    continue;
                }
                Some(Ok(node)) => {
                    agent.metrics.node_events.inc();
                    agent.observe(node);
                    if agent.awaiting_reboot {
                        // The kubelet reports the node back (Ready, new boot ID): ask the host now
                        // rather than at the next poll.
                        agent.facts = None;
                    }
                }
            },
            Some(finished) = done_rx.recv() => agent.finish(finished).await,
            _ = tick.tick() => continue,
            () = sleep_until(wake) => {
                retry_at = None;
                if agent.awaiting_reboot {
                    agent.facts = None;
                }
            }
        }
        match agent.step(&done_tx).await {
            Ok(()) => {
                if agent.node.is_some() && agent.facts.is_some() {
                    health.set_ready(true);
                }
            }
            Err(pause) => retry_at = Some(tokio::time::Instant::now() + pause),
        }
    }
}

impl<H: HostUpdater> Agent<H> {
    fn observe(&mut self, node: Node) {
        if let Some((written_rv, written)) = &self.unconfirmed {
            // IMPORTANT: an event between our read and our write (a kubelet status update, say)
            // lacks our report; taking it for the newest state would write the report again.
            let ours = node.resource_version().as_ref() == Some(written_rv)
                || node.metadata.annotations.as_ref().is_some_and(|a| AgentReport::parse(a).as_ref() == Ok(written));
            if !ours {
                return;
            }
            self.unconfirmed = None;
        }
        self.node = Some(node);
    }

    /// Decides and acts once; `Err(pause)` asks to be called again after the pause.
    async fn step(&mut self, done: &mpsc::Sender<Finished>) -> Result<(), Duration> {
        let Some(node) = &self.node else { return Ok(()) };
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let intent = match ControllerAnnotations::parse(&annotations) {
            Ok(c) => c.intent,
            Err(error) => {
                self.problem(format!("the controller's annotations are malformed; doing nothing on the host: {error}"));
                None
            }
        };
        let current = AgentReport::parse(&annotations).unwrap_or_else(|error| {
            self.problem(format!("the agent's own annotations are malformed and will be rewritten: {error}"));
            AgentReport::default()
        });
        let token = intent.as_ref().map(|i| i.token.clone());
        if self.facts.is_none() || self.facts_token != token {
            match self.host.facts().await {
                Ok(f) => {
                    self.facts = Some(Facts {
                        os_image: f.os_image,
                        boot_id: f.boot_id,
                        staged_image: f.staged_image,
                        components_hash: f.components_hash,
                    });
                    self.facts_token = token;
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot read the host's facts; retrying");
                    return Err(FACTS_RETRY);
                }
            }
        }
        let Some(facts) = &self.facts else { return Ok(()) };
        if let Some(before) = intent.as_ref().and_then(|i| i.boot_id_before.as_ref())
            && self.awaiting_reboot
            && facts.boot_id != *before
        {
            // The reboot happened: nothing runs any more, and the decision reports it.
            self.awaiting_reboot = false;
            self.running = None;
        }
        if self.awaiting_reboot && self.running.as_ref().map(Work::token) != intent.as_ref().map(|i| &i.token) {
            // The controller moved on (it gave up on the reboot, say): stop waiting for it.
            self.awaiting_reboot = false;
            self.running = None;
        }
        let running = self.running.as_ref().map(Work::token);
        let decision = decide::decide(intent.as_ref(), &current, facts, running);
        self.write(&decision.report).await?;
        match decision.work {
            // One host operation at a time: new work waits until the running one has ended (its
            // end runs this step again).
            Some(_) if self.running.is_some() => {}
            Some(work) => self.start(work, done.clone()),
            None => {}
        }
        Ok(())
    }

    fn problem(&mut self, message: String) {
        if self.last_problem.as_ref() != Some(&message) {
            tracing::warn!(node = %self.node_name, "{message}");
            self.last_problem = Some(message);
        }
    }

    async fn write(&mut self, report: &AgentReport) -> Result<(), Duration> {
        let Some(node) = &self.node else { return Ok(()) };
        let patch = NodePatch::annotations(node.metadata.annotations.as_ref(), report.render());
        if patch.is_empty() {
            return Ok(());
        }
        let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
        match self.nodes.patch(&self.node_name, &params, &Patch::Merge(patch.to_json())).await {
            Ok(written) => {
                self.metrics.writes.inc();
                tracing::info!(
                    node = %self.node_name,
                    state = ?report.state.map(|s| s.as_str()),
                    token = ?report.token.as_ref().map(Token::as_str),
                    "report written"
                );
                self.unconfirmed = written.resource_version().map(|rv| (rv, report.clone()));
                self.node = Some(written);
                Ok(())
            }
            Err(error) => {
                tracing::warn!(%error, "cannot write the report; retrying");
                Err(WRITE_RETRY)
            }
        }
    }

    fn start(&mut self, work: Work, done: mpsc::Sender<Finished>) {
        self.running = Some(work.clone());
        let host = self.host.clone();
        let metrics = self.metrics.clone();
        tracing::info!(work = ?work, "host work started");
        tokio::spawn(async move {
            let (op, result) = match &work {
                Work::Stage { target, .. } => ("stage", host.stage(target).await),
                Work::Reboot { target, .. } => ("reboot", host.activate_and_reboot(target).await),
            };
            let result_label = if result.is_ok() { "ok" } else { "error" };
            metrics.host_operations.get_or_create(&HostOpLabels { operation: op, result: result_label }).inc();
            // The receiver lives as long as the agent loop; if it is gone, the agent is stopping.
            let _ = done.send(Finished { work, result }).await;
        });
    }

    async fn finish(&mut self, finished: Finished) {
        self.facts = None;
        match (&finished.work, finished.result) {
            (Work::Reboot { .. }, Ok(())) => {
                tracing::info!("reboot under way; waiting for the new boot");
                self.awaiting_reboot = true;
            }
            (work, result) => {
                self.running = None;
                self.awaiting_reboot = false;
                let outcome = result.map_err(|e| {
                    tracing::warn!(error = %e, work = ?work, "host work failed");
                    e.to_string()
                });
                if let Some(node) = &self.node {
                    let current = AgentReport::parse(node.metadata.annotations.as_ref().unwrap_or(&Default::default()))
                        .unwrap_or_default();
                    // Work for an intent the report has moved past is not reported.
                    if current.token.as_ref() == Some(work.token()) {
                        let report = decide::finished(&current, work.token(), outcome);
                        // A failed write is retried by the next step: the decision sees the token
                        // still busy with nothing running, and redoes the (idempotent) work.
                        let _ = self.write(&report).await;
                    }
                }
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
