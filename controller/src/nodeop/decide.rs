//! What a NodeOp does next: a pure function of its spec, its recorded node statuses and what the cluster shows.
//!
//! # A node's life under a NodeOp
//! 1. **Waiting** (`Pending`): selected, not started. It starts when a slot is free (`concurrency`, 0 = no limit),
//!    no node failed under `stopOnFailure`, control-plane nodes first and one at a time (also with the rollouts':
//!    none starts while another control-plane node is in a rollout step, cordoned, NotReady or under another
//!    NodeOp), the node is Ready, not marked by another NodeOp, and in no rollout step that stages or disrupts it,
//!    and every rollout with work to do whose budget the node counts in has a free slot (its `maxUnavailable`:
//!    the rollout counts the NodeOp's node as unavailable until the NodeOp releases it).
//! 2. **Started** (`Running`): one conditional Node patch writes the NodeOp's mark (`keys::NODE_OPERATION`) and,
//!    with `cordon`, cordons the node with the controller's ownership record (`cordoned-by`), as a rollout does.
//! 3. **Drained** (with `drainOptions.enabled`): the shared drain code evicts its pods; `timeoutSeconds` (default
//!    600) after the drain started the node is released and counts as failed, as a rollout's drain timeout.
//! 4. **Job**: one Job per (NodeOp, node), named deterministically, so a restarted controller finds it.
//! 5. **Rebooted** (with `rebootOnSuccess`, after the Job succeeded): `intent=reboot` for the image the agent
//!    reports, with the boot ID before; done when the agent reports `done` for it (it checks the new boot ID) and
//!    the node is Ready with a kubelet boot ID other than the one before. A node without an agent fails (not
//!    rebooted).
//! 6. **Finished** (`Completed` or `Failed`): recorded in the status first, then the mark (and the NodeOp's
//!    reboot intent) removed and the node uncordoned if the controller cordoned it (a failed node stays cordoned
//!    and marked only with `uncordonOnFailure: false`, until the NodeOp is deleted). The NodeOp's own phase says
//!    `Completed` or `Failed` only once every finished node is released: until then it stays `Running`.
//!
//! # Guarantees
//! - A node whose Job exists never gets a second one, and a finished node (recorded, or whose Job finished) is
//!   never started again.
//! - Every write the decision asks for is safe to repeat or to refuse: Node patches are conditional on the
//!   resourceVersion the decision saw, the Job's name is fixed, and the status patch is conditional too.

use crate::policy::DrainProgress;
use crate::policy::budget::LazyBudgets;
use crate::reason::Reason;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use shared::crd::nodeop::{NodeOpNodeStatus, NodeOpPhase, NodeOpSpec, RebootStatus};
use shared::protocol::{AgentReport, AgentState, BootId, ControllerAnnotations, Intent, Step};
use std::collections::{BTreeMap, BTreeSet};

/// How long a drain may take when `timeoutSeconds` is not set (the rollout's default drain timeout).
pub const DEFAULT_DRAIN_TIMEOUT: SignedDuration = crate::policy::settings::DEFAULT_DRAIN_TIMEOUT;
/// How long a node may take from the reboot request until it is Ready after a new boot (the rollout's default).
pub const REBOOT_TIMEOUT: SignedDuration = crate::policy::settings::DEFAULT_REBOOT_TIMEOUT;

/// The reason of the Event of a node's start (its notice marks the decisions that start a node).
pub const STARTED: Reason = Reason::OperationStarted;

/// A node's Job as the cluster shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Active,
    Succeeded,
    Failed {
        message: String,
    },
    /// A Job of that name exists that this NodeOp does not own.
    Foreign,
}

/// A node as the NodeOp sees it.
#[derive(Debug, Clone)]
pub struct NodeFacts {
    pub name: String,
    pub control_plane: bool,
    /// The NodeOp's selector selects it.
    pub selected: bool,
    pub ready: bool,
    pub unschedulable: bool,
    pub kubelet_boot_id: Option<String>,
    /// The value of `keys::NODE_OPERATION`.
    pub mark: Option<String>,
    /// The controller annotations; `None` when unreadable.
    pub controller: Option<ControllerAnnotations>,
    /// The agent's report; `None` when absent or unreadable (no agent to reboot the node).
    pub agent: Option<AgentReport>,
    pub drain: DrainProgress,
    pub job: Option<JobState>,
    /// The node's preflight check, when its Job exists.
    pub preflight: Option<Preflight>,
    /// Its zone (`topology.kubernetes.io/zone`): workers start zone by zone, as the rollouts' do.
    pub zone: Option<String>,
    /// Why it must not be disrupted (`crate::do_not_disrupt`: the Node's annotation, or a pod found on it), if so.
    pub do_not_disrupt: Option<String>,
}

/// A preflight check as the cluster shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preflight {
    /// Not finished (or finished and its pod not seen yet).
    Running,
    /// Succeeded without a termination message: the node may start.
    Proceed,
    /// Succeeded with a termination message: the node is skipped for this reason.
    Skip { message: String },
    /// Failed (its deadline, its backoff limit), or its verdict cannot be read.
    Failed { message: String },
    /// A Job of that name exists that this NodeOp does not own.
    Foreign,
}

/// One NodeOp's inputs besides its nodes.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The mark this NodeOp writes on its nodes (`<namespace>/<name>@<uid>`).
    pub key: &'a str,
    pub spec: &'a NodeOpSpec,
    /// `status.nodeStatuses` as last recorded.
    pub recorded: &'a BTreeMap<String, NodeOpNodeStatus>,
    /// The NodeOp is being deleted: nothing new starts.
    pub deleting: bool,
    pub now: Timestamp,
}

/// A write for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write the mark, and cordon (recording that the controller did) if `cordon` and the node is schedulable.
    Start { cordon: bool },
    /// Keep a drain task running for the node.
    Drain,
    /// Create the node's Job.
    CreateJob,
    /// Create the node's preflight check (its Job).
    CreatePreflight,
    /// Write `intent=reboot` for `target` (cordoning the node first if it is schedulable).
    Reboot { target: String, boot_id_before: BootId },
    /// Remove the mark and the NodeOp's reboot intent; uncordon if the controller cordoned it.
    Release,
    /// Remove the NodeOp's reboot intent, keep the mark and the cordon (a failed node kept for inspection).
    ClearIntent,
}

/// An Event about a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// PascalCase.
    pub reason: Reason,
    pub warning: bool,
    pub message: String,
}

/// What to do about one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDecision {
    pub node: String,
    pub action: Option<Action>,
    /// The status to record for the node (its `lastUpdated` is set by the writer when something else changed).
    pub status: NodeOpNodeStatus,
    pub notice: Option<Notice>,
}

/// The decision of one round for one NodeOp.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    pub nodes: Vec<NodeDecision>,
    pub phase: NodeOpPhase,
    /// Why no further node starts: (reason, message).
    pub hold: Option<(Reason, String)>,
    /// Plan again at this time even if nothing changes (a timeout).
    pub wake_at: Option<Timestamp>,
    /// Counts for the conditions: nodes targeted, finished, failed, in progress.
    pub total: usize,
    pub completed: usize,
    pub failed: usize,
    pub running: usize,
    /// Finished nodes this NodeOp still has to release (uncordon and unmark); the NodeOp is not finished until then.
    pub releasing: usize,
}

/// The NodeOp's options, with Kairos's defaults (and this controller's for `uncordonOnFailure`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Options {
    pub(super) cordon: bool,
    pub(super) drain: bool,
    pub(super) drain_timeout: SignedDuration,
    pub(super) reboot: bool,
    pub(super) uncordon_on_failure: bool,
    pub(super) stop_on_failure: bool,
    pub(super) concurrency: Option<usize>,
    /// A preflight check runs on each node before it starts.
    pub(super) preflight: bool,
}

impl Options {
    fn of(spec: &NodeOpSpec) -> Options {
        let drain = spec.drain_options.as_ref();
        let timeout = drain.and_then(|d| d.timeout_seconds).filter(|s| *s > 0);
        Options {
            cordon: spec.cordon.unwrap_or(false),
            drain: drain.and_then(|d| d.enabled).unwrap_or(false),
            drain_timeout: timeout.map_or(DEFAULT_DRAIN_TIMEOUT, |s| SignedDuration::from_secs(i64::from(s))),
            reboot: spec.reboot_on_success.unwrap_or(false),
            uncordon_on_failure: spec.uncordon_on_failure.unwrap_or(true),
            stop_on_failure: spec.stop_on_failure.unwrap_or(false),
            concurrency: usize::try_from(spec.concurrency).ok().filter(|c| *c > 0),
            preflight: spec.preflight.is_some(),
        }
    }

    /// A node finished in `phase` is kept cordoned and marked for inspection (failed, with `uncordonOnFailure:
    /// false`), not released.
    fn kept(&self, phase: NodeOpPhase) -> bool {
        phase == NodeOpPhase::Failed && !self.uncordon_on_failure
    }

    /// The node is cordoned for the operation: asked for, or implied by the drain.
    pub(super) fn cordons(&self) -> bool {
        self.cordon || self.drain
    }
}

/// Where a node is in its turn under the NodeOp, derived from the facts and the record (what the node itself is
/// doing is the protocol's `Step`).
enum Turn {
    /// Not targeted, or finished and released: nothing to do.
    Idle,
    /// Selected and not started.
    Waiting,
    /// Started (marked), in the middle of its operation.
    InProgress,
    /// Finished as recorded, but still marked: the release is due.
    Finished,
}

/// Decides one round for one NodeOp. `nodes` are every node of the cluster; `budgets` are the rollouts' (each
/// start takes its slots, so the next NodeOp of the round decides on what is left).
pub fn decide(inputs: Inputs<'_>, nodes: &[NodeFacts], budgets: &mut LazyBudgets<'_>) -> Decision {
    let options = Options::of(inputs.spec);
    let mut decision = Decision::default();
    let mut waiting: Vec<&NodeFacts> = Vec::new();
    for node in nodes {
        let recorded = inputs.recorded.get(&node.name);
        let ours = node.mark.as_deref() == Some(inputs.key);
        let finished = recorded.is_some_and(|r| r.phase.finished());
        let turn = match (ours, finished) {
            (true, true) => Turn::Finished,
            (true, false) => Turn::InProgress,
            (false, true) => Turn::Idle,
            (false, false) if node.job.as_ref().is_some_and(|j| *j != JobState::Foreign) => Turn::InProgress,
            (false, false) if node.selected => Turn::Waiting,
            (false, false) => Turn::Idle,
        };
        let node_decision = match turn {
            Turn::Idle => {
                if let Some(recorded) = recorded {
                    count(&mut decision, recorded.phase);
                }
                continue;
            }
            Turn::Waiting => {
                waiting.push(node);
                continue;
            }
            Turn::Finished => finished_node(node, recorded, &options),
            Turn::InProgress => in_progress(node, recorded, ours, &options, inputs.now, &mut decision),
        };
        // Finished and still marked: released by this round or the next (recorded first), unless kept for inspection.
        let phase = node_decision.status.phase;
        if ours && phase.finished() && !options.kept(phase) {
            decision.releasing += 1;
        }
        count(&mut decision, node_decision.status.phase);
        decision.nodes.push(node_decision);
    }
    let control_planes: BTreeSet<&str> = nodes.iter().filter(|n| n.control_plane).map(|n| n.name.as_str()).collect();
    super::start::start_waiting(&mut decision, waiting, &control_planes, &inputs, &options, budgets);
    decision.phase = if decision.total == 0 {
        NodeOpPhase::Pending
    } else if decision.running > 0 || decision.releasing > 0 {
        // Not finished while a node is still cordoned or marked: `Completed` means every node is released.
        NodeOpPhase::Running
    } else if decision.failed > 0 && (options.stop_on_failure || decision.completed + decision.failed == decision.total)
    {
        NodeOpPhase::Failed
    } else if decision.completed == decision.total {
        NodeOpPhase::Completed
    } else {
        NodeOpPhase::Running
    };
    decision
}

pub(super) fn count(decision: &mut Decision, phase: NodeOpPhase) {
    decision.total += 1;
    match phase {
        NodeOpPhase::Completed => decision.completed += 1,
        NodeOpPhase::Failed => decision.failed += 1,
        NodeOpPhase::Running | NodeOpPhase::Preflight => decision.running += 1,
        NodeOpPhase::Pending => {}
    }
}

/// A node recorded as finished that still carries the mark: release it (or, failed and kept for inspection, only
/// clear the NodeOp's reboot intent).
fn finished_node(node: &NodeFacts, recorded: Option<&NodeOpNodeStatus>, options: &Options) -> NodeDecision {
    let status = recorded.cloned().unwrap_or_default();
    let action = if !options.kept(status.phase) {
        Some(Action::Release)
    } else if our_reboot_intent(node).is_some() {
        Some(Action::ClearIntent)
    } else {
        None
    };
    NodeDecision { node: node.name.clone(), action, status, notice: None }
}

/// The node's `intent=reboot`, which on a node the NodeOp marked is the NodeOp's.
fn our_reboot_intent(node: &NodeFacts) -> Option<&Intent> {
    node.controller.as_ref()?.intent.as_ref().filter(|i| i.step == Step::Reboot)
}

fn cordoned_by_us(node: &NodeFacts) -> bool {
    node.controller.as_ref().is_some_and(|c| c.cordoned_by_us)
}

/// A started node and what its decision is made of.
struct Started<'a> {
    node: &'a NodeFacts,
    previous: NodeOpNodeStatus,
    ours: bool,
    options: &'a Options,
}

impl Started<'_> {
    fn decided(&self, action: Option<Action>, status: NodeOpNodeStatus, notice: Option<Notice>) -> NodeDecision {
        NodeDecision { node: self.node.name.clone(), action, status, notice }
    }

    /// The node's status while it is in progress, saying `message`.
    fn running(&self, message: &str) -> NodeOpNodeStatus {
        NodeOpNodeStatus {
            phase: NodeOpPhase::Running,
            job_name: self.previous.job_name.clone(),
            message: message.to_owned(),
            reboot_status: if self.options.reboot { RebootStatus::Pending } else { RebootStatus::NotRequested },
            last_updated: self.previous.last_updated.clone(),
            drain_started_at: self.previous.drain_started_at.clone(),
        }
    }

    fn finished(&self, phase: NodeOpPhase, message: String, reboot_status: RebootStatus) -> NodeOpNodeStatus {
        NodeOpNodeStatus { phase, message, reboot_status, ..self.running("") }
    }

    /// The reboot status of a node whose operation failed before its reboot.
    fn cancelled(&self) -> RebootStatus {
        if self.options.reboot { RebootStatus::Cancelled } else { RebootStatus::NotRequested }
    }

    /// The node failed: recorded, then released (or kept cordoned and marked without `uncordonOnFailure`).
    fn fail(&self, message: String, reason: Reason, reboot: RebootStatus) -> NodeDecision {
        let status = self.finished(NodeOpPhase::Failed, message.clone(), reboot);
        let action = if self.options.uncordon_on_failure {
            Some(Action::Release)
        } else if our_reboot_intent(self.node).is_some() {
            Some(Action::ClearIntent)
        } else {
            None
        };
        let message = format!("{}: {message}", self.node.name);
        self.decided(action.filter(|_| self.ours), status, Some(Notice { reason, warning: true, message }))
    }

    /// The node succeeded: recorded, then released.
    fn succeed(&self, message: &str, reboot: RebootStatus) -> NodeDecision {
        let status = self.finished(NodeOpPhase::Completed, message.to_owned(), reboot);
        let message = format!("{}: {message}", self.node.name);
        self.decided(
            Some(Action::Release),
            status,
            Some(Notice { reason: Reason::OperationSucceeded, warning: false, message }),
        )
    }
}

/// A started node: its next step, or its outcome.
fn in_progress(
    node: &NodeFacts,
    recorded: Option<&NodeOpNodeStatus>,
    ours: bool,
    options: &Options,
    now: Timestamp,
    decision: &mut Decision,
) -> NodeDecision {
    let started = Started { node, previous: recorded.cloned().unwrap_or_default(), ours, options };
    if !ours {
        // Its Job exists but the mark does not: the mark was removed by someone else. A finished Job is the
        // node's outcome (the controller records before it releases); a running one gets its mark back.
        return match &node.job {
            Some(JobState::Succeeded) => {
                let status = started.finished(
                    NodeOpPhase::Completed,
                    "the Job completed".into(),
                    started.previous.reboot_status,
                );
                started.decided(None, status, None)
            }
            Some(JobState::Failed { message }) => {
                let status = started.finished(NodeOpPhase::Failed, message.clone(), started.cancelled());
                started.decided(None, status, None)
            }
            _ => started.decided(
                Some(Action::Start { cordon: options.cordons() }),
                started.running("the Job exists; marking the node again"),
                None,
            ),
        };
    }
    match &node.job {
        Some(JobState::Foreign) => started.fail(
            "a Job of the name this NodeOp gives the node's Job exists and is not this NodeOp's".into(),
            Reason::JobNameTaken,
            started.cancelled(),
        ),
        Some(JobState::Active) => started.decided(None, started.running("the Job is running"), None),
        Some(JobState::Failed { message }) => {
            started.fail(format!("the Job failed: {message}"), Reason::OperationFailed, started.cancelled())
        }
        Some(JobState::Succeeded) if !options.reboot => {
            started.succeed("the Job completed", RebootStatus::NotRequested)
        }
        Some(JobState::Succeeded) => reboot(&started, now, decision),
        None => before_job(&started, now, decision),
    }
}

/// A marked node without a Job yet: cordoned, drained, then the Job.
fn before_job(started: &Started<'_>, now: Timestamp, decision: &mut Decision) -> NodeDecision {
    let (node, options) = (started.node, started.options);
    let uncordoned = || {
        started.fail(
            "the node was uncordoned while it was drained".into(),
            Reason::UncordonedWhileDraining,
            started.cancelled(),
        )
    };
    if options.cordons() && !node.unschedulable {
        if node.drain == DrainProgress::Uncordoned {
            return uncordoned();
        }
        // The cordon is not visible yet, or someone lifted it before the drain began: cordon (again).
        return started.decided(Some(Action::Start { cordon: true }), started.running("cordoning"), None);
    }
    if !options.drain {
        return started.decided(Some(Action::CreateJob), started.running("creating the Job"), None);
    }
    let since = started.previous.drain_started_at.as_ref().map_or(now, |t| t.0);
    let deadline = since.checked_add(options.drain_timeout).unwrap_or(Timestamp::MAX);
    match &node.drain {
        DrainProgress::Drained => {
            started.decided(Some(Action::CreateJob), started.running("drained; creating the Job"), None)
        }
        DrainProgress::Failed { message } => {
            started.fail(format!("the drain failed: {message}"), Reason::DrainFailed, started.cancelled())
        }
        DrainProgress::Uncordoned => uncordoned(),
        DrainProgress::Running { waiting_on } if now >= deadline => {
            let waiting = waiting_on.as_deref().map(|w| format!(" (waiting on {w})")).unwrap_or_default();
            let message = format!(
                "the drain did not finish within {}s{waiting}; the node was released without running the operation",
                options.drain_timeout.as_secs()
            );
            started.fail(message, Reason::DrainTimedOut, started.cancelled())
        }
        DrainProgress::Running { .. } | DrainProgress::NotRunning => {
            decision.wake_at = Some(decision.wake_at.map_or(deadline, |w| w.min(deadline)));
            let status = NodeOpNodeStatus { drain_started_at: Some(Time(since)), ..started.running("draining") };
            let notice = started.previous.drain_started_at.is_none().then(|| Notice {
                reason: Reason::DrainStarted,
                warning: false,
                message: format!("draining {}", node.name),
            });
            started.decided(Some(Action::Drain), status, notice)
        }
    }
}

/// A node whose Job succeeded, with `rebootOnSuccess`: the reboot through its agent, verified.
fn reboot(started: &Started<'_>, now: Timestamp, decision: &mut Decision) -> NodeDecision {
    let node = started.node;
    let Some(intent) = our_reboot_intent(node) else {
        let agent = node.agent.as_ref().and_then(|a| Some((a.os_image.clone()?, a.boot_id.clone()?)));
        let Some((target, boot_id_before)) = agent else {
            let message = "the node has no update-operator agent (no os-image and boot-id report): not rebooted";
            return started.fail(message.into(), Reason::NoAgent, RebootStatus::NoAgent);
        };
        if node.unschedulable && !cordoned_by_us(node) {
            let message = "the node is cordoned by someone else; the agent reboots only nodes the controller cordoned";
            return started.fail(message.into(), Reason::RebootRefused, RebootStatus::Cancelled);
        }
        let notice = Notice {
            reason: Reason::RebootRequested,
            warning: false,
            message: format!("the Job on {} succeeded; rebooting it through its agent", node.name),
        };
        let action = Action::Reboot { target, boot_id_before };
        return started.decided(Some(action), started.running("rebooting"), Some(notice));
    };
    let deadline = intent.since.checked_add(REBOOT_TIMEOUT).unwrap_or(Timestamp::MAX);
    let report = node.agent.as_ref().and_then(|a| a.finished(&intent.token).map(|s| (s, a.message.clone())));
    let new_boot = intent
        .boot_id_before
        .as_ref()
        .is_some_and(|before| node.kubelet_boot_id.as_deref().is_some_and(|now| now != before.as_str()));
    // The agent reports the boot it runs: a boot ID other than the one before means the host rebooted, even when
    // it says `error` because the host came back on another image than it ran (the operation installed one,
    // as a Kairos upgrade does; the agent verifies the image a rollout asks for, a NodeOp asks for none).
    let agent_rebooted = node
        .agent
        .as_ref()
        .and_then(|a| a.boot_id.as_ref())
        .zip(intent.boot_id_before.as_ref())
        .is_some_and(|(now, before)| now != before);
    match report {
        Some((AgentState::Done, _)) if node.ready && new_boot => {
            started.succeed("the Job completed and the node rebooted (new boot ID, Ready)", RebootStatus::Completed)
        }
        Some((AgentState::Error, _)) if agent_rebooted && node.ready && new_boot => {
            let image = node.agent.as_ref().and_then(|a| a.os_image.as_deref()).unwrap_or("an unknown image");
            let message = format!(
                "the Job completed and the node rebooted (new boot ID, Ready) into {image}, another image than before"
            );
            started.succeed(&message, RebootStatus::Completed)
        }
        Some((AgentState::Error, message)) if !agent_rebooted => {
            let message = format!("the reboot failed: {}", message.unwrap_or_default());
            started.fail(message, Reason::RebootFailed, RebootStatus::Cancelled)
        }
        _ if now >= deadline => started.fail(
            format!(
                "the node was not Ready after a new boot within {}s of the reboot request",
                REBOOT_TIMEOUT.as_secs()
            ),
            Reason::RebootTimedOut,
            RebootStatus::Cancelled,
        ),
        _ => {
            decision.wake_at = Some(decision.wake_at.map_or(deadline, |w| w.min(deadline)));
            started.decided(None, started.running("rebooting"), None)
        }
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
