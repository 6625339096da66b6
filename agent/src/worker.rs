//! The agent's loop: watch the own Node, read the host's facts when they may have changed, decide
//! ([`crate::decide`]), write the report, and run host work in the background
//! ([`crate::operation`]).
//!
//! # Guarantees
//! - Watches only its own Node and writes only its own Node's agent annotations, with minimal
//!   merge patches; nothing is written when nothing changed. A failed write is retried with
//!   backoff ([`crate::retry::WRITE`]); a write that finds the Node gone waits for the watch.
//! - One host operation at a time. Work the decision no longer wants is cancelled before anything
//!   else is written or started; new work starts only after the report that announces it was
//!   written.
//! - Malformed controller annotations make the agent start, stop and undo nothing on the host (it
//!   logs them); its own malformed annotations are rewritten, since it owns them.
//! - Nothing waits for an event that may not come: every pause has a deadline (a facts read, a
//!   write retry) or ends with a watch event or the end of host work.
//! - The loop never waits on the host: the host's facts are read in the background (a read may
//!   wait minutes for a Bottlerocket update lock, longer than [`STUCK_AFTER`]), and decisions that
//!   need fresh facts wait for them without holding up the heartbeat, the watch or host work's
//!   progress.

use crate::decide::{self, Controller, Cordon, Facts, Observation, Outcome, Phase, Running, Work};
use crate::facts::{self, POLL_WHILE_REBOOTING};
use crate::host::{HostError, HostFacts, HostUpdater};
use crate::metrics::{HostOpLabels, Metrics};
use crate::nodes::{KubeNodes, NodeApi, WriteError};
use crate::operation::{Operation, Progress};
use crate::own_node::OwnNode;
use crate::releases::{KubeReleases, Releases};
use crate::retry;
use backon::ExponentialBackoff;
use futures::StreamExt;
use kube::Client;
use kube::runtime::watcher;
use shared::health::Health;
use shared::protocol::patch::NodePatch;
use shared::protocol::{AgentReport, ControllerAnnotations, Token};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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

/// Runs the agent of `node_name` until `shutdown`.
pub async fn run<H: HostUpdater>(
    client: Client,
    node_name: String,
    host: Arc<H>,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let releases = Arc::new(KubeReleases::new(client.clone()));
    let nodes = KubeNodes::new(client, &node_name);
    run_with(nodes, releases, node_name, host, metrics, health, shutdown).await
}

/// [`run`] on any [`NodeApi`].
pub(crate) async fn run_with<N: NodeApi, H: HostUpdater>(
    nodes: N,
    releases: Arc<dyn Releases>,
    node_name: String,
    host: Arc<H>,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let mut events = nodes.watch();
    tracing::info!(node = %node_name, "watching own node");
    let (progress_tx, mut progress_rx) = mpsc::unbounded_channel();
    let (facts_tx, mut facts_rx) = mpsc::unbounded_channel();
    let mut agent = Agent::new(nodes, releases, node_name, host, metrics, progress_tx, facts_tx);
    let heartbeat = health.heartbeat("agent", STUCK_AFTER);
    let mut tick = tokio::time::interval(HEARTBEAT_TICK);
    let outcome = loop {
        heartbeat.beat();
        let wake = agent.next_wake();
        tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            event = events.next() => match event {
                None => break Err(Error::WatchEnded(agent.node_name.clone())),
                Some(Err(error)) => {
                    tracing::warn!(%error, "watch of own node failed; retrying");
                    continue;
                }
                Some(Ok(event)) => agent.observe(event),
            },
            Some(progress) = progress_rx.recv() => agent.progress(progress),
            Some(read) = facts_rx.recv() => agent.facts_read(read),
            () = tokio::time::sleep_until(wake.unwrap_or_else(Instant::now)), if wake.is_some() => {}
            _ = tick.tick() => continue,
        }
        // A step may wait on the host (reading its facts) or the API server: shutdown ends it.
        tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            () = agent.step() => {}
        }
        if agent.ready() {
            health.set_ready(true);
        }
    };
    agent.stop_running("the agent is stopping").await;
    agent.stop_reading();
    outcome
}

/// Host work under way: what the decision sees, and the task while the operation runs.
struct Underway {
    running: Running,
    /// `None` once the operation ended (a reboot asked for, waiting for the new boot).
    operation: Option<Operation>,
}

struct Agent<N, H> {
    nodes: N,
    releases: Arc<dyn Releases>,
    node_name: String,
    host: Arc<H>,
    metrics: Metrics,
    progress: UnboundedSender<Progress>,
    /// Where the background facts reads send their results.
    facts_results: UnboundedSender<Result<HostFacts, HostError>>,
    /// The facts read under way.
    facts_read: Option<JoinHandle<()>>,
    view: OwnNode,
    facts: facts::Tracker,
    underway: Option<Underway>,
    /// Names host operations, so that progress of a cancelled one is recognised.
    serial: u64,
    outcome: Option<Outcome>,
    /// The target staged by this process and neither rebooted into nor released.
    prepared: Option<String>,
    /// The Kubernetes version whose components this process fetched (or upgraded to, possibly from fetched
    /// files) and has not discarded.
    fetched: Option<String>,
    /// After a failed write: when to try again, and the delays after further failures.
    write_retry: Option<(Instant, ExponentialBackoff)>,
    last_problem: Option<String>,
}

impl<N: NodeApi, H: HostUpdater> Agent<N, H> {
    fn new(
        nodes: N,
        releases: Arc<dyn Releases>,
        node_name: String,
        host: Arc<H>,
        metrics: Metrics,
        progress: UnboundedSender<Progress>,
        facts_results: UnboundedSender<Result<HostFacts, HostError>>,
    ) -> Self {
        Agent {
            nodes,
            releases,
            node_name,
            host,
            metrics,
            progress,
            facts_results,
            facts_read: None,
            view: OwnNode::default(),
            facts: facts::Tracker::default(),
            underway: None,
            serial: 0,
            outcome: None,
            prepared: None,
            fetched: None,
            write_retry: None,
            last_problem: None,
        }
    }

    fn ready(&self) -> bool {
        self.view.node().is_some() && self.facts.ever_read()
    }

    /// When to step again if nothing happens. Without a Node there is nothing to do until the
    /// watch shows one.
    fn next_wake(&self) -> Option<Instant> {
        self.view.node()?;
        let write = self.write_retry.as_ref().map(|(at, _)| *at);
        match (self.facts.next_read(), write) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn observe(&mut self, event: watcher::Event<k8s_openapi::api::core::v1::Node>) {
        self.metrics.node_events.inc();
        self.view.apply(event);
    }

    fn progress(&mut self, progress: Progress) {
        let (serial, finished) = match progress {
            Progress::Retrying { serial, error } => {
                if let Some(underway) = self.underway_with(serial) {
                    underway.running.phase = Phase::Working { transient: Some(error) };
                }
                return;
            }
            Progress::Finished { serial, result } => (serial, result),
        };
        let Some(underway) = self.underway_with(serial) else { return };
        match (underway.running.work.clone(), finished) {
            (Work::Reboot { .. }, Ok(())) => {
                tracing::info!("reboot under way; waiting for the new boot");
                underway.running.phase = Phase::RebootRequested;
                underway.operation = None;
                // The host boots the target now: nothing to undo any more.
                self.prepared = None;
            }
            (
                Work::Stage { token, .. }
                | Work::Reboot { token, .. }
                | Work::KubeadmUpgrade { token, .. }
                | Work::Fetch { token, .. },
                result,
            ) => {
                self.underway = None;
                if let Err(error) = &result {
                    tracing::warn!(%error, "host work failed");
                }
                self.outcome = Some(Outcome { token, result: result.map_err(|error| error.to_string()) });
            }
            (Work::Release { target }, result) => {
                self.underway = None;
                match result {
                    Ok(()) => tracing::info!(target, "undid the staging of a target given up"),
                    // A courtesy to the host's settings, not a step: given up, and said so.
                    Err(error) => tracing::warn!(target, %error, "cannot undo the staging of a target given up"),
                }
                if self.prepared.as_deref() == Some(target.as_str()) {
                    self.prepared = None;
                }
            }
            (Work::Discard { target }, result) => {
                self.underway = None;
                match result {
                    Ok(()) => tracing::info!(target, "discarded the Kubernetes components fetched ahead"),
                    // The next fetch replaces what is left: given up, and said so.
                    Err(error) => tracing::warn!(target, %error, "cannot discard the Kubernetes components fetched"),
                }
                if self.fetched.as_deref() == Some(target.as_str()) {
                    self.fetched = None;
                }
            }
        }
        self.facts.mark_stale();
    }

    fn underway_with(&mut self, serial: u64) -> Option<&mut Underway> {
        self.underway.as_mut().filter(|u| u.operation.as_ref().is_some_and(|op| op.is(serial)))
    }

    /// Decides and acts once on the newest view of the Node.
    async fn step(&mut self) {
        let Some(node) = self.view.node() else { return };
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let unschedulable = node.spec.as_ref().and_then(|spec| spec.unschedulable).unwrap_or(false);
        let kubelet_boot_id = node
            .status
            .as_ref()
            .and_then(|status| status.node_info.as_ref())
            .map(|info| info.boot_id.clone())
            .filter(|id| !id.is_empty());
        let controller = match ControllerAnnotations::parse(&annotations) {
            Ok(controller) => Some(controller),
            Err(error) => {
                self.problem(format!("the controller's annotations are malformed; doing nothing on the host: {error}"));
                None
            }
        };
        let current = AgentReport::parse(&annotations).unwrap_or_else(|error| {
            self.problem(format!("the agent's own annotations are malformed and will be rewritten: {error}"));
            AgentReport::default()
        });
        let token = controller.as_ref().and_then(|c| c.intent.as_ref()).map(|intent| &intent.token);
        self.facts.observe(token, kubelet_boot_id.as_deref());
        let now = Instant::now();
        if self.underway.as_ref().is_some_and(|u| u.running.phase == Phase::RebootRequested) {
            self.facts.read_by(now + POLL_WHILE_REBOOTING);
        }
        if self.facts.needs_read(now) {
            self.start_facts_read();
        }
        if self.facts.must_wait() {
            // Decided again when the read ends.
            return;
        }
        let Some(host) = self.facts.view() else { return };
        let decision = decide::decide(&Observation {
            controller: match &controller {
                Some(c) => Controller::Readable {
                    intent: c.intent.as_ref(),
                    cordon: Cordon { unschedulable, by_controller: c.cordoned_by_us },
                },
                None => Controller::Malformed,
            },
            current: &current,
            host,
            running: self.underway.as_ref().map(|u| &u.running),
            outcome: self.outcome.as_ref(),
            prepared: self.prepared.as_deref(),
            fetched: self.fetched.as_deref(),
        });
        if decision.stop_running {
            self.stop_running("the controller no longer wants it").await;
        }
        if !self.write(&annotations, &decision.report).await {
            return;
        }
        if let Some(work) = decision.start
            && self.underway.is_none()
        {
            self.start(work);
        }
    }

    /// Starts reading the host's facts in the background; [`Agent::facts_read`] takes the result.
    fn start_facts_read(&mut self) {
        self.facts.begin_read();
        let (host, results) = (self.host.clone(), self.facts_results.clone());
        self.facts_read = Some(tokio::spawn(async move {
            // The receiver lives as long as the agent loop; if it is gone, the agent is stopping.
            let _ = results.send(host.facts().await);
        }));
    }

    /// Ends a facts read under way (the agent stops).
    fn stop_reading(&mut self) {
        if let Some(read) = self.facts_read.take() {
            read.abort();
        }
    }

    /// Takes in the result of a background facts read.
    fn facts_read(&mut self, result: Result<HostFacts, HostError>) {
        self.facts_read = None;
        let rebooting = self.underway.as_ref().is_some_and(|u| u.running.phase == Phase::RebootRequested);
        match result {
            Ok(f) => {
                let facts = Facts {
                    os_image: f.os_image,
                    boot_id: f.boot_id,
                    staged_image: f.staged_image,
                    components_hash: f.components_hash,
                };
                self.facts.read_ok(facts, Instant::now());
            }
            Err(error) => {
                self.metrics.facts_failures.inc();
                let delay = self.facts.read_failed(error.to_string(), !error.is_retryable(), Instant::now());
                if rebooting {
                    tracing::debug!(%error, "the host's facts cannot be read while it reboots");
                } else {
                    tracing::warn!(%error, retry_in = ?delay, "cannot read the host's facts; trying again");
                }
            }
        }
    }

    fn problem(&mut self, message: String) {
        if self.last_problem.as_ref() != Some(&message) {
            tracing::warn!(node = %self.node_name, "{message}");
            self.last_problem = Some(message);
        }
    }

    /// Writes `report` if it changes anything. `false` when it could not be written (yet).
    async fn write(&mut self, annotations: &BTreeMap<String, String>, report: &AgentReport) -> bool {
        let patch = NodePatch::annotations(Some(annotations), report.render());
        if patch.is_empty() {
            self.write_retry = None;
            return true;
        }
        let now = Instant::now();
        if self.write_retry.as_ref().is_some_and(|(at, _)| now < *at) {
            return false;
        }
        match self.nodes.patch(&patch.to_json()).await {
            Ok(written) => {
                self.metrics.writes.inc();
                tracing::info!(
                    node = %self.node_name,
                    state = ?report.state.map(|s| s.as_str()),
                    token = ?report.token.as_ref().map(Token::as_str),
                    note = ?report.message,
                    "report written"
                );
                self.view.written(written, report.clone());
                self.write_retry = None;
                true
            }
            Err(WriteError::NotFound) => {
                tracing::warn!(node = %self.node_name, "the node is gone; waiting for it to be registered again");
                self.view.gone();
                self.write_retry = None;
                false
            }
            Err(WriteError::Failed(error)) => {
                let (_, delays) = self.write_retry.get_or_insert_with(|| (now, retry::WRITE.delays()));
                let delay = delays.next().unwrap_or(retry::WRITE.longest);
                tracing::warn!(%error, retry_in = ?delay, "cannot write the report; trying again");
                if let Some((at, _)) = &mut self.write_retry {
                    *at = now + delay;
                }
                false
            }
        }
    }

    fn start(&mut self, work: Work) {
        tracing::info!(work = ?work, "host work started");
        if let Work::Stage { target, .. } | Work::Reboot { target, .. } = &work {
            // From here on the host may carry changes for the target that a release undoes.
            self.prepared = Some(target.clone());
        }
        if let Work::Fetch { target, .. } | Work::KubeadmUpgrade { target, .. } = &work {
            // From here on the host may hold fetched files for the version (an upgrade may use those a process
            // before this one fetched): discarded once no intent wants them.
            self.fetched = Some(target.clone());
        }
        self.serial += 1;
        let operation = Operation::start(
            self.host.clone(),
            self.releases.clone(),
            work.clone(),
            self.serial,
            self.progress.clone(),
            self.metrics.clone(),
        );
        let running = Running { work, phase: Phase::Working { transient: None } };
        self.underway = Some(Underway { running, operation: Some(operation) });
    }

    /// Ends the work under way: a running operation is cancelled.
    async fn stop_running(&mut self, why: &str) {
        let Some(underway) = self.underway.take() else { return };
        if let Some(operation) = underway.operation {
            tracing::info!(work = ?underway.running.work, why, "host work cancelled");
            operation.cancel().await;
            let labels = HostOpLabels { operation: underway.running.work.operation(), result: "cancelled" };
            self.metrics.host_operations.get_or_create(&labels).inc();
            self.facts.mark_stale();
        }
    }
}

#[cfg(test)]
mod tests;
