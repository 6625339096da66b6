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
//!    and marked only with `uncordonOnFailure: false`, until the NodeOp is deleted).
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
}

/// The NodeOp's options, with Kairos's defaults (and this controller's for `uncordonOnFailure`).
#[derive(Debug, Clone, Copy)]
struct Options {
    cordon: bool,
    drain: bool,
    drain_timeout: SignedDuration,
    reboot: bool,
    uncordon_on_failure: bool,
    stop_on_failure: bool,
    concurrency: Option<usize>,
    /// A preflight check runs on each node before it starts.
    preflight: bool,
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

    /// The node is cordoned for the operation: asked for, or implied by the drain.
    fn cordons(&self) -> bool {
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
        count(&mut decision, node_decision.status.phase);
        decision.nodes.push(node_decision);
    }
    let control_planes: BTreeSet<&str> = nodes.iter().filter(|n| n.control_plane).map(|n| n.name.as_str()).collect();
    let busy = control_plane_busy(nodes, inputs.key);
    start_waiting(&mut decision, waiting, &control_planes, busy, &inputs, &options, budgets);
    decision.phase = if decision.total == 0 {
        NodeOpPhase::Pending
    } else if decision.running > 0 {
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

fn count(decision: &mut Decision, phase: NodeOpPhase) {
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
    let keep = status.phase == NodeOpPhase::Failed && !options.uncordon_on_failure;
    let action = if !keep {
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

/// Why a waiting node may not start now, if it may not.
fn blocked(node: &NodeFacts) -> Option<String> {
    if let Some(other) = &node.mark {
        return Some(format!("the NodeOp {other} works on the node"));
    }
    if node.controller.is_none() {
        return Some("the node's update-operator annotations are malformed".into());
    }
    if let Some(step) = rollout_step(node) {
        return Some(format!("a rollout works on the node (step {step})"));
    }
    if !node.ready {
        return Some("the node is not Ready".into());
    }
    None
}

/// The rollout step that stages or disrupts the node, if it is in one.
fn rollout_step(node: &NodeFacts) -> Option<Step> {
    let intent = node.controller.as_ref()?.intent.as_ref()?;
    matches!(intent.step, Step::Stage | Step::Drain | Step::Reboot | Step::KubeadmUpgrade | Step::Replace)
        .then_some(intent.step)
}

/// Why no control-plane node may start now because of another one, if that is so: a control-plane node other than
/// this NodeOp's is in a rollout step, cordoned, NotReady or under another NodeOp. The rollouts keep one
/// control-plane node in flight or unavailable at a time; a NodeOp keeps to the same rule.
fn control_plane_busy(nodes: &[NodeFacts], key: &str) -> Option<String> {
    nodes.iter().filter(|n| n.control_plane && n.mark.as_deref() != Some(key)).find_map(|n| {
        let why = if let Some(step) = rollout_step(n) {
            format!("a rollout works on it (step {step})")
        } else if let Some(other) = &n.mark {
            format!("the NodeOp {other} works on it")
        } else if n.unschedulable {
            "it is cordoned".to_owned()
        } else if !n.ready {
            "it is not Ready".to_owned()
        } else {
            return None;
        };
        Some(format!("waiting: control-plane nodes go one at a time, and control-plane node {} is busy: {why}", n.name))
    })
}

/// Starts the waiting nodes the gates allow: control plane first and alone, then workers by name, within the
/// concurrency; nothing once a node failed under `stopOnFailure` or while the NodeOp is deleted. With a preflight,
/// a node's start is its check first: its verdict is recorded whatever the gates (a skip completes the node, a
/// failure fails it), a check running or passed holds a concurrency slot, and a passed node starts when the gates
/// allow.
fn start_waiting(
    decision: &mut Decision,
    mut waiting: Vec<&NodeFacts>,
    control_planes: &BTreeSet<&str>,
    control_plane_busy: Option<String>,
    inputs: &Inputs<'_>,
    options: &Options,
    budgets: &mut LazyBudgets<'_>,
) {
    waiting.sort_by(|a, b| b.control_plane.cmp(&a.control_plane).then_with(|| a.name.cmp(&b.name)));
    let pending = |phase: NodeOpPhase, message: String| NodeOpNodeStatus {
        phase,
        message,
        reboot_status: if options.reboot { RebootStatus::Pending } else { RebootStatus::NotRequested },
        ..Default::default()
    };
    // Verdicts first: they are recorded whatever the gates, and a failure counts for `stopOnFailure`.
    let mut undecided = Vec::new();
    for node in waiting {
        let verdict = match node.preflight.as_ref().filter(|_| options.preflight) {
            Some(Preflight::Skip { message }) => {
                let message = format!("Skipped by preflight: {message}");
                Some((NodeOpPhase::Completed, message, Reason::PreflightSkipped, false))
            }
            Some(Preflight::Failed { message }) => {
                Some((NodeOpPhase::Failed, format!("Preflight failed: {message}"), Reason::PreflightFailed, true))
            }
            Some(Preflight::Foreign) => {
                let message = "Preflight failed: a Job of the name this NodeOp gives the node's preflight check \
                               exists and is not this NodeOp's";
                Some((NodeOpPhase::Failed, message.to_owned(), Reason::JobNameTaken, true))
            }
            Some(Preflight::Running | Preflight::Proceed) | None => None,
        };
        let Some((phase, message, reason, warning)) = verdict else {
            undecided.push(node);
            continue;
        };
        let notice = Notice { reason, warning, message: format!("{}: {message}", node.name) };
        let status = NodeOpNodeStatus { reboot_status: RebootStatus::NotRequested, ..pending(phase, message) };
        let decided = NodeDecision { node: node.name.clone(), action: None, status, notice: Some(notice) };
        count(decision, decided.status.phase);
        decision.nodes.push(decided);
    }
    let in_flight = |d: &Decision, control_plane: Option<bool>| {
        d.nodes
            .iter()
            .filter(|n| matches!(n.status.phase, NodeOpPhase::Running | NodeOpPhase::Preflight))
            .filter(|n| control_plane.is_none_or(|cp| control_planes.contains(n.node.as_str()) == cp))
            .count()
    };
    let mut hold: Option<(Reason, String)> = if inputs.deleting {
        Some((Reason::Deleting, "the NodeOp is being deleted".into()))
    } else if decision.failed > 0 && options.stop_on_failure {
        Some((Reason::StoppedOnFailure, "a node failed and stopOnFailure is set: no further node starts".into()))
    } else {
        None
    };
    // A check running (or to be created again: recorded, its Job not seen) or passed holds its slot.
    let checking = |node: &NodeFacts| {
        options.preflight
            && (node.preflight.is_some()
                || inputs.recorded.get(&node.name).is_some_and(|r| r.phase == NodeOpPhase::Preflight))
    };
    let mut running = in_flight(decision, None) + undecided.iter().filter(|n| checking(n)).count();
    let (mut started, mut over_budget) = (false, None);
    // The control-plane barrier (docs/nodeop.md): no worker starts while a selected control-plane node has not
    // finished, waiting or under way (its check, its drain, its Job, its reboot).
    let control_plane_pending = undecided.iter().any(|n| n.control_plane) || in_flight(decision, Some(true)) > 0;
    for node in undecided {
        let checked = checking(node);
        let passed = node.preflight == Some(Preflight::Proceed);
        let gate = if let Some((_, why)) = &hold {
            Err(why.clone())
        } else if checked && !passed {
            // The check runs: its verdict is awaited (its Job created again if it is not seen).
            Ok(())
        } else if let Some(why) = blocked(node) {
            Err(why)
        } else if !checked && options.concurrency.is_some_and(|c| running >= c) {
            Err("waiting for a free slot".into())
        } else if node.control_plane && in_flight(decision, Some(true)) > 0 {
            Err("waiting: control-plane nodes go one at a time".into())
        } else if let Some(why) = control_plane_busy.as_ref().filter(|_| node.control_plane) {
            Err(why.clone())
        } else if !node.control_plane && control_plane_pending {
            hold =
                hold.or(Some((Reason::WaitingForControlPlane, "control-plane nodes go first, one at a time".into())));
            Err("waiting: control-plane nodes go first".into())
        } else if !options.preflight || passed {
            // Only the start disrupts the node: the check is read-only.
            budgets.get().room(&node.name).map_err(|why| {
                let message = format!("waiting: {why}");
                over_budget.get_or_insert(why);
                message
            })
        } else {
            Ok(())
        };
        let (action, status, notice) = match gate {
            Err(why) if passed => {
                (None, pending(NodeOpPhase::Preflight, format!("the preflight check passed; {why}")), None)
            }
            // A check held by the NodeOp's own hold (deleted, stopped) keeps its phase; it has not passed.
            Err(why) if checked => (None, pending(NodeOpPhase::Preflight, why), None),
            Err(why) => (None, pending(NodeOpPhase::Pending, why), None),
            Ok(()) if checked && !passed => {
                let action = (node.preflight.is_none()).then_some(Action::CreatePreflight);
                (action, pending(NodeOpPhase::Preflight, "the preflight check runs".into()), None)
            }
            Ok(()) if options.preflight && !passed => {
                running += 1;
                let notice = Notice {
                    reason: Reason::PreflightStarted,
                    warning: false,
                    message: format!("running the preflight check on {}", node.name),
                };
                let status = pending(NodeOpPhase::Preflight, "the preflight check runs".into());
                (Some(Action::CreatePreflight), status, Some(notice))
            }
            Ok(()) => {
                budgets.get().take(&node.name);
                started = true;
                running += usize::from(!checked);
                let notice = Notice {
                    reason: STARTED,
                    warning: false,
                    message: format!("starting the operation on {}", node.name),
                };
                let status = pending(NodeOpPhase::Running, "started".into());
                (Some(Action::Start { cordon: options.cordons() }), status, Some(notice))
            }
        };
        let decided = NodeDecision { node: node.name.clone(), action, status, notice };
        count(decision, decided.status.phase);
        decision.nodes.push(decided);
    }
    // A full rollout budget holds the NodeOp back only when no node could start: another node may count in
    // another budget.
    decision.hold = hold.or(over_budget.filter(|_| !started).map(|why| (Reason::WaitingForRolloutBudget, why)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::budget::Budgets;
    use shared::crd::nodeop::NodeOpDrainOptions;
    use shared::protocol::Token;

    const KEY: &str = "default/op@u1";

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn boot(id: &str) -> BootId {
        BootId::parse("k", id).unwrap()
    }

    fn node(name: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            control_plane: name.starts_with("cp"),
            selected: true,
            ready: true,
            unschedulable: false,
            kubelet_boot_id: Some("b0".into()),
            mark: None,
            controller: Some(ControllerAnnotations::default()),
            agent: Some(AgentReport { os_image: Some("v1".into()), boot_id: Some(boot("b0")), ..Default::default() }),
            drain: DrainProgress::NotRunning,
            job: None,
            preflight: None,
        }
    }

    /// Marked by the NodeOp and cordoned by the controller.
    fn started(name: &str) -> NodeFacts {
        NodeFacts {
            mark: Some(KEY.into()),
            unschedulable: true,
            controller: Some(ControllerAnnotations { intent: None, cordoned_by_us: true }),
            ..node(name)
        }
    }

    fn spec(json: serde_json::Value) -> NodeOpSpec {
        let mut value = json;
        value["command"] = serde_json::json!(["true"]);
        serde_json::from_value(value).unwrap()
    }

    fn run(
        spec: &NodeOpSpec,
        recorded: &BTreeMap<String, NodeOpNodeStatus>,
        nodes: &[NodeFacts],
        now: i64,
    ) -> Decision {
        decide(
            Inputs { key: KEY, spec, recorded, deleting: false, now: t(now) },
            nodes,
            &mut LazyBudgets::ready(Budgets::default()),
        )
    }

    fn actions(d: &Decision) -> Vec<(String, Action)> {
        d.nodes.iter().filter_map(|n| Some((n.node.clone(), n.action.clone()?))).collect()
    }

    fn of<'a>(d: &'a Decision, node: &str) -> &'a NodeDecision {
        d.nodes.iter().find(|n| n.node == node).unwrap()
    }

    fn start(name: &str) -> (String, Action) {
        (name.into(), Action::Start { cordon: true })
    }

    fn recorded(entries: &[(&str, NodeOpPhase)]) -> BTreeMap<String, NodeOpNodeStatus> {
        entries.iter().map(|(n, p)| (n.to_string(), NodeOpNodeStatus { phase: *p, ..Default::default() })).collect()
    }

    #[test]
    fn at_most_concurrency_nodes_start_in_name_order() {
        let spec = spec(serde_json::json!({"cordon": true, "concurrency": 2}));
        let nodes = [node("w3"), node("w1"), node("w2"), node("w4")];
        let d = run(&spec, &BTreeMap::new(), &nodes, 0);
        assert_eq!(actions(&d), vec![start("w1"), start("w2")]);
        assert_eq!(of(&d, "w3").status.phase, NodeOpPhase::Pending);
        assert_eq!(d.phase, NodeOpPhase::Running);
        // With two in progress, none more.
        let nodes = [started("w1"), started("w2"), node("w3")];
        assert_eq!(actions(&run(&spec, &recorded(&[]), &nodes, 0)).len(), 2, "only the started nodes' next steps");
        assert!(actions(&run(&spec, &recorded(&[]), &nodes, 0)).iter().all(|(n, _)| n != "w3"));
    }

    #[test]
    fn concurrency_zero_starts_every_worker_at_once() {
        let spec = spec(serde_json::json!({"cordon": true}));
        let d = run(&spec, &BTreeMap::new(), &[node("w1"), node("w2"), node("w3")], 0);
        assert_eq!(actions(&d), vec![start("w1"), start("w2"), start("w3")]);
    }

    #[test]
    fn control_plane_nodes_go_first_and_one_at_a_time() {
        let spec = spec(serde_json::json!({"cordon": true}));
        let d = run(&spec, &BTreeMap::new(), &[node("w1"), node("cp2"), node("cp1")], 0);
        assert_eq!(actions(&d), vec![start("cp1")]);
        assert_eq!(d.hold.as_ref().map(|h| h.0), Some(Reason::WaitingForControlPlane));
        let d = run(&spec, &recorded(&[("cp1", NodeOpPhase::Running)]), &[node("w1"), node("cp2"), started("cp1")], 0);
        assert!(actions(&d).iter().all(|(n, _)| n == "cp1"), "{:?}", actions(&d));
        let done = recorded(&[("cp1", NodeOpPhase::Completed), ("cp2", NodeOpPhase::Completed)]);
        let d = run(&spec, &done, &[node("w1"), node("cp2"), node("cp1")], 0);
        assert_eq!(actions(&d), vec![start("w1")]);
    }

    /// The barrier holds until the last control-plane node has finished: not only while one waits, but while its
    /// Job runs and while it reboots after its Job succeeded (the seed's NodeOp at `concurrency: 2` once started a
    /// worker in both).
    #[test]
    fn no_worker_starts_before_the_last_control_plane_node_finished() {
        let spec = spec(serde_json::json!({"cordon": true, "concurrency": 2, "rebootOnSuccess": true}));
        let first_done = [("cp1", NodeOpPhase::Completed), ("cp2", NodeOpPhase::Running)];
        let mut job_running = started("cp2");
        job_running.job = Some(JobState::Active);
        let d = run(&spec, &recorded(&first_done), &[node("cp1"), job_running, node("w1")], 0);
        assert!(actions(&d).iter().all(|(n, _)| n != "w1"), "a worker started beside a Job: {:?}", actions(&d));
        assert_eq!(d.hold.as_ref().map(|h| h.0), Some(Reason::WaitingForControlPlane));
        let mut rebooting = started("cp2");
        rebooting.job = Some(JobState::Succeeded);
        let d = run(&spec, &recorded(&first_done), &[node("cp1"), rebooting, node("w1")], 0);
        assert!(actions(&d).iter().all(|(n, _)| n != "w1"), "a worker started beside a reboot: {:?}", actions(&d));
        let done = recorded(&[("cp1", NodeOpPhase::Completed), ("cp2", NodeOpPhase::Completed)]);
        let d = run(&spec, &done, &[node("cp1"), node("cp2"), node("w1")], 0);
        assert_eq!(actions(&d), vec![start("w1")]);
    }

    #[test]
    fn stop_on_failure_starts_nothing_after_a_failure() {
        let spec = spec(serde_json::json!({"cordon": true, "stopOnFailure": true, "concurrency": 1}));
        let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Failed)]), &[node("w1"), node("w2"), node("w3")], 0);
        assert!(actions(&d).is_empty(), "{:?}", actions(&d));
        assert_eq!(d.hold.as_ref().map(|h| h.0), Some(Reason::StoppedOnFailure));
        assert_eq!(d.phase, NodeOpPhase::Failed);
        // Without it, the next node starts.
        let spec = NodeOpSpec { stop_on_failure: None, ..spec };
        let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Failed)]), &[node("w1"), node("w2"), node("w3")], 0);
        assert_eq!(actions(&d), vec![start("w2")]);
    }

    #[test]
    fn a_failing_job_fails_the_node_and_releases_it_unless_kept_for_inspection() {
        let spec = spec(serde_json::json!({"cordon": true, "stopOnFailure": true, "concurrency": 1}));
        let failing =
            NodeFacts { job: Some(JobState::Failed { message: "BackoffLimitExceeded".into() }), ..started("w1") };
        let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Running)]), &[failing.clone(), node("w2")], 0);
        assert_eq!(actions(&d), vec![("w1".into(), Action::Release)], "released, and w2 not started");
        assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Failed);
        assert_eq!(of(&d, "w1").notice.as_ref().map(|n| (n.reason, n.warning)), Some((Reason::OperationFailed, true)));
        let keep = NodeOpSpec { uncordon_on_failure: Some(false), ..spec };
        let d = run(&keep, &recorded(&[("w1", NodeOpPhase::Running)]), &[failing, node("w2")], 0);
        assert!(actions(&d).is_empty(), "kept cordoned and marked: {:?}", actions(&d));
    }

    #[test]
    fn a_node_whose_job_exists_never_gets_a_second_one() {
        let spec = spec(serde_json::json!({"cordon": true}));
        let running = NodeFacts { job: Some(JobState::Active), ..started("w1") };
        let d = run(&spec, &BTreeMap::new(), &[running], 0);
        assert!(actions(&d).is_empty());
        // The mark is gone (a restart after the release, before the status was seen): the Job's outcome counts.
        let finished = NodeFacts { job: Some(JobState::Succeeded), ..node("w1") };
        let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Running)]), &[finished], 0);
        assert!(actions(&d).is_empty(), "{:?}", actions(&d));
        assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Completed);
        // A finished node is never started again.
        let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Completed)]), &[node("w1")], 0);
        assert!(actions(&d).is_empty());
        assert_eq!(d.phase, NodeOpPhase::Completed);
    }

    #[test]
    fn a_drain_that_takes_longer_than_its_timeout_fails_the_node_and_releases_it() {
        let spec = spec(serde_json::json!({"cordon": true, "drainOptions": {"enabled": true, "timeoutSeconds": 60}}));
        let draining =
            NodeFacts { drain: DrainProgress::Running { waiting_on: Some("pod demo/a".into()) }, ..started("w1") };
        let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Running)]), std::slice::from_ref(&draining), 0);
        assert_eq!(actions(&d), vec![("w1".into(), Action::Drain)]);
        let since = of(&d, "w1").status.drain_started_at.clone().unwrap();
        assert_eq!(d.wake_at, Some(t(60)));
        let record = BTreeMap::from([(
            "w1".to_owned(),
            NodeOpNodeStatus { phase: NodeOpPhase::Running, drain_started_at: Some(since), ..Default::default() },
        )]);
        assert_eq!(
            actions(&run(&spec, &record, std::slice::from_ref(&draining), 59)),
            vec![("w1".into(), Action::Drain)]
        );
        let d = run(&spec, &record, &[draining], 60);
        assert_eq!(actions(&d), vec![("w1".into(), Action::Release)]);
        assert_eq!(of(&d, "w1").notice.as_ref().map(|n| n.reason), Some(Reason::DrainTimedOut));
        assert!(of(&d, "w1").status.message.contains("pod demo/a"), "{}", of(&d, "w1").status.message);
        // Drained: the Job.
        let drained = NodeFacts { drain: DrainProgress::Drained, ..started("w1") };
        assert_eq!(actions(&run(&spec, &recorded(&[]), &[drained], 0)), vec![("w1".into(), Action::CreateJob)]);
    }

    #[test]
    fn the_reboot_goes_through_the_agent_and_is_verified() {
        let spec = spec(serde_json::json!({"cordon": true, "rebootOnSuccess": true}));
        let succeeded = NodeFacts { job: Some(JobState::Succeeded), ..started("w1") };
        let d = run(&spec, &BTreeMap::new(), std::slice::from_ref(&succeeded), 0);
        assert_eq!(
            actions(&d),
            vec![("w1".into(), Action::Reboot { target: "v1".into(), boot_id_before: boot("b0") })]
        );
        let token = Token::parse("k", "tok").unwrap();
        let intent = Intent {
            step: Step::Reboot,
            target: "v1".into(),
            token: token.clone(),
            since: t(0),
            boot_id_before: Some(boot("b0")),
            kubeadm: None,
            message: None,
        };
        let rebooting = NodeFacts {
            controller: Some(ControllerAnnotations { intent: Some(intent), cordoned_by_us: true }),
            ..succeeded.clone()
        };
        let d = run(&spec, &BTreeMap::new(), std::slice::from_ref(&rebooting), 10);
        assert!(actions(&d).is_empty());
        assert_eq!(of(&d, "w1").status.reboot_status, RebootStatus::Pending);
        let done_report = AgentReport {
            state: Some(AgentState::Done),
            token: Some(token),
            os_image: Some("v1".into()),
            boot_id: Some(boot("b1")),
            ..Default::default()
        };
        // The agent says done, but the kubelet still reports the old boot: not yet.
        let reported = NodeFacts { agent: Some(done_report), ..rebooting.clone() };
        assert!(actions(&run(&spec, &BTreeMap::new(), std::slice::from_ref(&reported), 10)).is_empty());
        let booted = NodeFacts { kubelet_boot_id: Some("b1".into()), ..reported };
        let d = run(&spec, &BTreeMap::new(), &[booted], 10);
        assert_eq!(actions(&d), vec![("w1".into(), Action::Release)]);
        assert_eq!(of(&d, "w1").status.reboot_status, RebootStatus::Completed);
        assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Completed);
        // Back on another image (the operation installed it): the agent says error, the reboot happened.
        let other_image = AgentReport {
            state: Some(AgentState::Error),
            token: Some(Token::parse("k", "tok").unwrap()),
            message: Some("the host booted v2 instead of v1 after the reboot".into()),
            os_image: Some("v2".into()),
            boot_id: Some(boot("b1")),
            ..Default::default()
        };
        let upgraded =
            NodeFacts { agent: Some(other_image.clone()), kubelet_boot_id: Some("b1".into()), ..rebooting.clone() };
        let d = run(&spec, &BTreeMap::new(), &[upgraded], 10);
        assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Completed, "{:?}", of(&d, "w1").status);
        assert!(of(&d, "w1").status.message.contains("into v2"));
        // An error without a new boot is a failed reboot.
        let refused = AgentReport { boot_id: Some(boot("b0")), os_image: Some("v1".into()), ..other_image };
        let d = run(&spec, &BTreeMap::new(), &[NodeFacts { agent: Some(refused), ..rebooting.clone() }], 10);
        assert_eq!(of(&d, "w1").notice.as_ref().map(|n| n.reason), Some(Reason::RebootFailed));
        // Never back: timed out.
        let d = run(&spec, &BTreeMap::new(), &[rebooting], REBOOT_TIMEOUT.as_secs());
        assert_eq!(of(&d, "w1").notice.as_ref().map(|n| n.reason), Some(Reason::RebootTimedOut));
        // No agent: reported, not rebooted.
        let no_agent = NodeFacts { agent: None, ..succeeded };
        let d = run(&spec, &BTreeMap::new(), &[no_agent], 0);
        assert_eq!(actions(&d), vec![("w1".into(), Action::Release)]);
        assert_eq!(of(&d, "w1").status.reboot_status, RebootStatus::NoAgent);
        assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Failed);
    }

    #[test]
    fn a_node_a_rollout_or_another_nodeop_works_on_waits() {
        let spec = spec(serde_json::json!({"cordon": true}));
        let intent = |step| Intent {
            step,
            target: "v2".into(),
            token: Token::parse("k", "t").unwrap(),
            since: t(0),
            boot_id_before: None,
            kubeadm: None,
            message: None,
        };
        let staging = NodeFacts {
            controller: Some(ControllerAnnotations { intent: Some(intent(Step::Stage)), cordoned_by_us: false }),
            ..node("w1")
        };
        let other = NodeFacts { mark: Some("default/other@u2".into()), ..node("w2") };
        let verified = NodeFacts {
            controller: Some(ControllerAnnotations { intent: Some(intent(Step::Done)), cordoned_by_us: false }),
            ..node("w3")
        };
        let not_ready = NodeFacts { ready: false, ..node("w4") };
        let d = run(&spec, &BTreeMap::new(), &[staging, other, verified, not_ready], 0);
        assert_eq!(actions(&d), vec![start("w3")]);
        assert!(of(&d, "w1").status.message.contains("rollout"), "{}", of(&d, "w1").status.message);
        assert!(of(&d, "w2").status.message.contains("default/other"));
    }

    #[test]
    fn a_control_plane_node_waits_while_another_is_busy_with_a_rollout() {
        let spec = spec(serde_json::json!({"cordon": true}));
        let intent = |step| Intent {
            step,
            target: "v2".into(),
            token: Token::parse("k", "t").unwrap(),
            since: t(0),
            boot_id_before: None,
            kubeadm: None,
            message: None,
        };
        let rolling = |step| NodeFacts {
            controller: Some(ControllerAnnotations { intent: Some(intent(step)), cordoned_by_us: true }),
            unschedulable: step != Step::Stage,
            ..node("cp1")
        };
        for busy in [rolling(Step::Stage), rolling(Step::Drain), rolling(Step::Reboot)] {
            let d = run(&spec, &BTreeMap::new(), &[busy, node("cp2"), node("w1")], 0);
            assert!(actions(&d).is_empty(), "{:?}", actions(&d));
            assert!(
                of(&d, "cp2").status.message.contains("control-plane node cp1 is busy"),
                "{}",
                of(&d, "cp2").status.message
            );
        }
        let cordoned = NodeFacts { unschedulable: true, ..node("cp1") };
        let d = run(&spec, &BTreeMap::new(), &[cordoned, node("cp2")], 0);
        assert!(actions(&d).is_empty());
        // A control-plane node done with its rollout (uncordoned) does not hold the others.
        let done = NodeFacts { unschedulable: false, ..rolling(Step::Done) };
        let d = run(&spec, &BTreeMap::new(), &[done, node("cp2")], 0);
        assert_eq!(actions(&d), vec![start("cp1")]);
    }

    #[test]
    fn a_nodeop_being_deleted_starts_nothing() {
        let spec = spec(serde_json::json!({}));
        let recorded = BTreeMap::new();
        let inputs = Inputs { key: KEY, spec: &spec, recorded: &recorded, deleting: true, now: t(0) };
        let d = decide(inputs, &[node("w1")], &mut LazyBudgets::ready(Budgets::default()));
        assert!(actions(&d).is_empty());
    }

    #[test]
    fn a_recorded_outcome_is_released_once_more_if_the_mark_is_still_there() {
        let spec = spec(serde_json::json!({"cordon": true}));
        let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Completed)]), &[started("w1")], 0);
        assert_eq!(actions(&d), vec![("w1".into(), Action::Release)]);
        let drain = NodeOpDrainOptions { enabled: Some(true), ..Default::default() };
        let spec = NodeOpSpec { drain_options: Some(drain), cordon: Some(false), ..spec };
        // The drain implies the cordon.
        assert_eq!(actions(&run(&spec, &BTreeMap::new(), &[node("w1")], 0)), vec![start("w1")]);
    }

    fn recorded_running(nodes: &[&str]) -> BTreeMap<String, NodeOpNodeStatus> {
        recorded(&nodes.iter().map(|n| (*n, NodeOpPhase::Running)).collect::<Vec<_>>())
    }

    #[test]
    fn a_node_starts_only_while_every_rollout_budget_it_counts_in_has_a_free_slot() {
        use crate::policy::budget::Limit;
        let spec = spec(serde_json::json!({"cordon": true, "concurrency": 3}));
        let inputs = |recorded| Inputs { key: KEY, spec: &spec, recorded, deleting: false, now: t(0) };
        let nodes = [node("w1"), node("w2"), node("w3"), node("x1")];
        // Rollout "a" (w1, w2, w3) allows 2 out and has 1 out; rollout "b" (x1) has none out of 1.
        let limits = |a_out| {
            vec![
                ("a".to_owned(), Some(Limit { allowed: 2, unavailable: a_out })),
                ("b".to_owned(), Some(Limit { allowed: 1, unavailable: 0 })),
            ]
        };
        let members = || {
            vec![
                ("w1".to_owned(), Some(0), false),
                ("w2".to_owned(), Some(0), false),
                ("w3".to_owned(), Some(0), false),
                ("x1".to_owned(), Some(1), false),
            ]
        };
        let mut budgets = LazyBudgets::ready(Budgets::new(limits(1), members()));
        let recorded = BTreeMap::new();
        let d = decide(inputs(&recorded), &nodes, &mut budgets);
        let budgets = budgets.get();
        // One slot of "a" is left: w1 takes it, w2 and w3 wait and say why; x1 counts in "b" and starts.
        assert_eq!(actions(&d), vec![start("w1"), start("x1")]);
        assert!(of(&d, "w2").status.message.contains("NodeVersion a allows 2 node(s) out at once"), "{d:?}");
        assert_eq!(d.hold, None, "nodes started");
        // The slots taken are gone for the next NodeOp of the round too.
        assert_eq!(
            budgets.room("w3"),
            Err("the rollout of NodeVersion a allows 2 node(s) out at once (maxUnavailable) and 2 are out".into())
        );
        assert!(budgets.room("x1").is_ok(), "x1 counts already");

        // Nothing can start: the NodeOp says it is held by the budget.
        let d = decide(inputs(&recorded), &nodes[..3], &mut LazyBudgets::ready(Budgets::new(limits(2), members())));
        assert!(actions(&d).is_empty());
        assert_eq!(d.hold.map(|h| h.0), Some(Reason::WaitingForRolloutBudget));

        // A node no rollout manages counts in every budget; a rollout with nothing to do (no limit) in none.
        let unowned = vec![("u1".to_owned(), None, false)];
        let full = vec![("a".to_owned(), Some(Limit { allowed: 1, unavailable: 1 }))];
        assert!(Budgets::new(full, unowned.clone()).room("u1").is_err());
        assert!(Budgets::new(vec![("a".to_owned(), None)], unowned).room("u1").is_ok());
        // Before the rollouts are known, nothing starts.
        let d = decide(inputs(&recorded), &[node("w1")], &mut LazyBudgets::ready(Budgets::unknown()));
        assert!(actions(&d).is_empty());
        assert!(of(&d, "w1").status.message.contains("not known yet"));
        // They are computed only when a node would start.
        let one = super::tests::spec(serde_json::json!({"cordon": true, "concurrency": 1}));
        let running = recorded_running(&["w1"]);
        let inputs = Inputs { key: KEY, spec: &one, recorded: &running, deleting: false, now: t(0) };
        let mut lazy = LazyBudgets::new(|| panic!("computed although nothing could start"));
        let d = decide(inputs, &[started("w1"), node("w2")], &mut lazy);
        assert!(actions(&d).iter().all(|(_, a)| !matches!(a, Action::Start { .. })));
        assert!(!lazy.computed());
    }

    fn checked(name: &str, preflight: Preflight) -> NodeFacts {
        NodeFacts { preflight: Some(preflight), ..node(name) }
    }

    #[test]
    fn with_a_preflight_each_node_is_checked_before_it_starts_and_its_verdict_decides() {
        let spec = spec(serde_json::json!({"cordon": true, "concurrency": 2, "preflight": {"command": ["check"]}}));
        let phase = |d: &Decision, n: &str| of(d, n).status.phase;
        // Fresh nodes: the checks start within the concurrency (no mark, no cordon: the check is read-only).
        let d = run(&spec, &BTreeMap::new(), &[node("w1"), node("w2"), node("w3")], 0);
        assert_eq!(actions(&d), vec![("w1".into(), Action::CreatePreflight), ("w2".into(), Action::CreatePreflight)]);
        assert_eq!(phase(&d, "w1"), NodeOpPhase::Preflight);
        assert_eq!(of(&d, "w3").status.message, "waiting for a free slot");
        assert_eq!(d.phase, NodeOpPhase::Running);

        // Verdicts: a skip completes the node untouched, a failure fails it, a pass starts it; the freed slots go
        // to the next node's check.
        let both = recorded(&[("w1", NodeOpPhase::Preflight), ("w2", NodeOpPhase::Preflight)]);
        let nodes = [
            checked("w1", Preflight::Skip { message: "already on v2".into() }),
            checked("w2", Preflight::Proceed),
            node("w3"),
            node("w4"),
        ];
        let d = run(&spec, &both, &nodes, 1);
        assert_eq!(
            (phase(&d, "w1"), of(&d, "w1").status.message.as_str()),
            (NodeOpPhase::Completed, "Skipped by preflight: already on v2")
        );
        assert_eq!(of(&d, "w1").action, None, "a skipped node is never touched");
        assert_eq!(of(&d, "w2").action, Some(Action::Start { cordon: true }));
        assert_eq!(of(&d, "w3").action, Some(Action::CreatePreflight), "w1's slot is free");
        assert_eq!(of(&d, "w4").status.message, "waiting for a free slot");
        let nodes = [checked("w1", Preflight::Failed { message: "DeadlineExceeded".into() }), node("w2")];
        let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Preflight)]), &nodes, 1);
        assert_eq!(
            (phase(&d, "w1"), of(&d, "w1").status.message.as_str()),
            (NodeOpPhase::Failed, "Preflight failed: DeadlineExceeded")
        );
        assert_eq!(of(&d, "w1").notice.as_ref().map(|n| n.reason), Some(Reason::PreflightFailed));

        // A passed node waits for the gates and keeps its slot; a check recorded but not seen is created again.
        let blocked = NodeFacts { ready: false, ..checked("w1", Preflight::Proceed) };
        let d = run(&spec, &both, &[blocked, node("w2"), node("w3")], 2);
        assert_eq!(phase(&d, "w1"), NodeOpPhase::Preflight);
        assert!(of(&d, "w1").status.message.starts_with("the preflight check passed; "), "{:?}", of(&d, "w1"));
        assert_eq!(of(&d, "w2").action, Some(Action::CreatePreflight));
        assert_eq!(of(&d, "w3").status.message, "waiting for a free slot");

        // A failed check stops the NodeOp under stopOnFailure.
        let stop = spec_with_preflight(serde_json::json!({"stopOnFailure": true, "concurrency": 1}));
        let nodes = [checked("w1", Preflight::Failed { message: "exit 3".into() }), node("w2")];
        let d = run(&stop, &recorded(&[("w1", NodeOpPhase::Preflight)]), &nodes, 1);
        assert_eq!(of(&d, "w2").action, None);
        assert_eq!(d.hold.map(|h| h.0), Some(Reason::StoppedOnFailure));
        assert_eq!(d.phase, NodeOpPhase::Failed);
        // A check still running under that hold keeps its phase and is not said to have passed.
        let nodes = [checked("w1", Preflight::Failed { message: "exit 3".into() }), checked("w3", Preflight::Running)];
        let both = recorded(&[("w1", NodeOpPhase::Preflight), ("w3", NodeOpPhase::Preflight)]);
        let w3 = of(&run(&stop, &both, &nodes, 1), "w3").status.clone();
        assert_eq!(
            (w3.phase, w3.message.as_str()),
            (NodeOpPhase::Preflight, "a node failed and stopOnFailure is set: no further node starts")
        );
    }

    fn spec_with_preflight(mut json: serde_json::Value) -> NodeOpSpec {
        json["preflight"] = serde_json::json!({"command": ["check"]});
        spec(json)
    }
}
