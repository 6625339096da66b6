//! What the agent does about its node: a pure function of what it observes (the controller's
//! intent and cordon, its own last report, the host's facts, the host work under way) to the
//! report to publish and the host work to start or stop.
//!
//! # Guarantees
//! - The agent acts only on the steps `stage`, `reboot`, `kubeadm-upgrade` and `fetch`, and only on an
//!   intent it has not finished: a report with the intent's token and state `done` or `error` ends it.
//! - A reboot is started only on a node the controller cordoned: `spec.unschedulable` set *and*
//!   the controller's `cordoned-by` annotation present. Otherwise the reboot intent is answered
//!   with `error` and the reason, and a reboot still being prepared is cancelled.
//! - Work is cancelled as soon as the intent it serves is gone: a stage when the intent is no
//!   longer `stage` with its token (released, timed out, a new target), a reboot not yet asked of
//!   the host when the intent changes or the node is uncordoned. A reboot asked for is never
//!   cancelled; it is over when the boot ID changes or the intent moves on.
//! - What staging changed on the host is released (undone) once no intent wants its target any
//!   more and the host was not rebooted into it.
//! - Kubernetes components fetched ahead (`fetch`) are kept while the intent is `fetch`, `drain` or
//!   `kubeadm-upgrade` for their version, and discarded (deleted from the host) once it is anything
//!   else, and after the kubeadm upgrade they served succeeded: they take disk space, and the
//!   kubeadm step checks each one's hash again before use anyway. A new fetch replaces any earlier
//!   fetched set (the host backend's job), so at most one set is ever kept.
//! - Restart-safe without memory: a stage in progress (`busy`, nothing running) is redone (staging
//!   is idempotent); a reboot is judged by the boot ID, so a reboot that happened is never repeated
//!   and one that did not is asked for again.
//! - `state-message` carries the error with `state=error`; with any other state it says what the
//!   agent is working around now (a transient host error it retries, host facts it cannot read),
//!   and is absent when nothing is wrong. The state is `idle` rather than absent when there is such
//!   a problem, so that a host whose facts cannot be read is visible.
//! - The report differs from the current one only where something changed, so a node with nothing
//!   to do costs no write.

use shared::protocol::{AgentReport, AgentState, BootId, ComponentsHash, Intent, KubeadmIntent, Step, Token};

/// What the host says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub os_image: String,
    pub boot_id: BootId,
    pub staged_image: Option<String>,
    pub components_hash: Option<ComponentsHash>,
}

/// The host's facts as the agent last tried to read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostView<'a> {
    /// Read successfully.
    Known(&'a Facts),
    /// The last read failed; `permanent` when trying again will not help by itself.
    Unreadable { problem: &'a str, permanent: bool },
}

/// The controller's side of the Node as the agent reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller<'a> {
    /// The controller's annotations, readable.
    Readable {
        /// The intent; `None` when the controller asks nothing (or released the node).
        intent: Option<&'a Intent>,
        /// Whether the node is cordoned by the controller: `spec.unschedulable` and `cordoned-by`.
        cordon: Cordon,
    },
    /// The controller's annotations are malformed: the agent starts, stops and undoes nothing.
    Malformed,
}

/// Who cordoned the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cordon {
    /// `spec.unschedulable` is true.
    pub unschedulable: bool,
    /// The controller's `cordoned-by` annotation is present.
    pub by_controller: bool,
}

/// Work for the host, carried out outside this function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Stage the intent's target.
    Stage { token: Token, target: String },
    /// Activate the staged target and reboot into it.
    Reboot { token: Token, target: String },
    /// Upgrade the host's Kubernetes components to version `target` with kubeadm.
    KubeadmUpgrade { token: Token, target: String, kubeadm: KubeadmIntent },
    /// Fetch and verify the components of Kubernetes version `target` ahead, installing nothing.
    Fetch { token: Token, target: String, kubeadm: KubeadmIntent },
    /// Undo what staging changed for `target` (see [`crate::host::HostUpdater::release`]).
    Release { target: String },
    /// Delete the components fetched for version `target` (see [`crate::host::HostUpdater::discard_fetched`]).
    Discard { target: String },
}

impl Work {
    /// The intent the work serves; `None` for a release or a discard, which serve none.
    pub fn token(&self) -> Option<&Token> {
        match self {
            Work::Stage { token, .. }
            | Work::Reboot { token, .. }
            | Work::KubeadmUpgrade { token, .. }
            | Work::Fetch { token, .. } => Some(token),
            Work::Release { .. } | Work::Discard { .. } => None,
        }
    }

    /// The operation's name, for logs and metrics.
    pub fn operation(&self) -> &'static str {
        match self {
            Work::Stage { .. } => "stage",
            Work::Reboot { .. } => "reboot",
            Work::KubeadmUpgrade { .. } => "kubeadm-upgrade",
            Work::Fetch { .. } => "fetch",
            Work::Release { .. } => "release",
            Work::Discard { .. } => "discard",
        }
    }
}

/// Host work under way in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    pub work: Work,
    pub phase: Phase,
}

/// How far running work got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The host operation runs; `transient` is the last error it is retrying after, if any.
    Working { transient: Option<String> },
    /// The host said the reboot is under way; the agent waits for the new boot.
    RebootRequested,
}

/// How host work for an intent ended in this process (kept until the report shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub token: Token,
    /// `Err` holds the message for `state-message`.
    pub result: Result<(), String>,
}

/// Everything the decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    pub controller: Controller<'a>,
    /// The agent's report on the Node now.
    pub current: &'a AgentReport,
    pub host: HostView<'a>,
    pub running: Option<&'a Running>,
    /// How the last stage or reboot of this process ended.
    pub outcome: Option<&'a Outcome>,
    /// The target this process staged (or activated) and has neither rebooted into nor released.
    pub prepared: Option<&'a str>,
    /// The Kubernetes version whose components this process fetched ahead (or used in a kubeadm
    /// upgrade) and has not discarded.
    pub fetched: Option<&'a str>,
}

/// The report to publish and the work to start or stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub report: AgentReport,
    /// Work to start once nothing runs.
    pub start: Option<Work>,
    /// The running work is over or no longer wanted: stop it (a running operation is cancelled).
    pub stop_running: bool,
}

/// Decides.
pub fn decide(o: &Observation<'_>) -> Decision {
    let mut report = o.current.clone();
    if let HostView::Known(facts) = o.host {
        report.boot_id = Some(facts.boot_id.clone());
        report.os_image = Some(facts.os_image.clone());
        report.components_hash = facts.components_hash.clone().or_else(|| o.current.components_hash.clone());
    }
    let Controller::Readable { intent, cordon } = o.controller else {
        return Decision { report, start: None, stop_running: false };
    };
    let stop_running = o.running.is_some_and(|running| !still_wanted(running, intent, cordon, o.host));
    let mut decision = Decision { report, start: None, stop_running };
    let running = o.running.filter(|_| !stop_running);
    let acting = intent.filter(|i| i.step.agent_acts());
    if let Some(intent) = acting {
        act(&mut decision, o, intent, cordon, running);
    }
    let report = &mut decision.report;
    if report.state == Some(AgentState::Busy) && report.token.as_ref() != acting.map(|i| &i.token) {
        // Busy with an intent that is gone (released, or moved on while staging): nothing is
        // under way any more.
        report.state = Some(AgentState::Idle);
        report.token = None;
    }
    if let Some(target) = o.fetched
        && !keeps_fetched(intent, o, target)
    {
        // Before new work too: a new fetch then starts from an empty cache, so the disk holds one set.
        decision.start = Some(Work::Discard { target: target.to_owned() });
    }
    if let Some(target) = o.prepared
        && !wants(intent, target)
    {
        // IMPORTANT: undo before any new work starts, so that a new stage pins from the settings
        // the administrator had, and no reboot can boot what was given up.
        decision.start = Some(Work::Release { target: target.to_owned() });
    }
    settle_message(&mut decision.report, o, running);
    decision
}

/// The report after `act` settled the intent: a live problem in the message for every state but
/// `error`, whose message is its error.
fn settle_message(report: &mut AgentReport, o: &Observation<'_>, running: Option<&Running>) {
    if report.state == Some(AgentState::Error) {
        return;
    }
    let transient = running.and_then(|running| match &running.phase {
        Phase::Working { transient } if running.work.token().is_some() => transient.clone(),
        Phase::Working { .. } | Phase::RebootRequested => None,
    });
    let rebooting = running.is_some_and(|running| running.phase == Phase::RebootRequested);
    let unreadable = match o.host {
        // While the host reboots, its facts cannot be read; that is no problem.
        HostView::Unreadable { problem, .. } if !rebooting => Some(facts_problem(problem)),
        HostView::Unreadable { .. } | HostView::Known(_) => None,
    };
    report.message = transient.or(unreadable);
    if report.message.is_some() && report.state.is_none() {
        report.state = Some(AgentState::Idle);
    }
}

fn facts_problem(problem: &str) -> String {
    format!("cannot read the host's facts: {problem}")
}

/// Whether `intent` still needs `target` staged (it may still reboot into it).
fn wants(intent: Option<&Intent>, target: &str) -> bool {
    intent.is_some_and(|i| i.target == target && matches!(i.step, Step::Stage | Step::Drain | Step::Reboot))
}

/// Whether the components fetched for version `target` may still be installed: the intent is the fetch, the
/// drain or the kubeadm upgrade of that version, and that upgrade has not succeeded yet.
fn keeps_fetched(intent: Option<&Intent>, o: &Observation<'_>, target: &str) -> bool {
    let Some(intent) = intent.filter(|i| i.target == target) else { return false };
    match intent.step {
        Step::Fetch | Step::Drain => true,
        Step::KubeadmUpgrade => {
            let succeeded = o.current.finished(&intent.token) == Some(AgentState::Done)
                || o.outcome.is_some_and(|outcome| outcome.token == intent.token && outcome.result.is_ok());
            !succeeded
        }
        Step::Stage | Step::Reboot | Step::Replace | Step::Done | Step::Failed | Step::Blocked => false,
    }
}

/// Whether running work still serves the intent (see the module docs).
fn still_wanted(running: &Running, intent: Option<&Intent>, cordon: Cordon, host: HostView<'_>) -> bool {
    let serves = |step: Step, token: &Token| intent.is_some_and(|i| i.step == step && i.token == *token);
    match (&running.work, &running.phase) {
        (Work::Stage { token, .. }, _) => serves(Step::Stage, token),
        (Work::KubeadmUpgrade { token, .. }, _) => serves(Step::KubeadmUpgrade, token),
        (Work::Fetch { token, .. }, _) => serves(Step::Fetch, token),
        (Work::Reboot { token, .. }, Phase::Working { .. }) => serves(Step::Reboot, token) && cordoned(cordon).is_ok(),
        (Work::Reboot { token, .. }, Phase::RebootRequested) => {
            let before = intent.and_then(|i| i.boot_id_before.as_ref());
            let booted = matches!(host, HostView::Known(facts) if before.is_some_and(|b| *b != facts.boot_id));
            serves(Step::Reboot, token) && !booted
        }
        // Both are short and bounded (see `crate::operation`): never cancelled, so they end what they began.
        (Work::Release { .. } | Work::Discard { .. }, _) => true,
    }
}

/// `Ok` when the controller cordoned the node; otherwise why a reboot must not start.
fn cordoned(cordon: Cordon) -> Result<(), &'static str> {
    match (cordon.unschedulable, cordon.by_controller) {
        (true, true) => Ok(()),
        (false, _) => Err("the node is schedulable (spec.unschedulable is not set), so pods may run on it"),
        (true, false) => {
            Err("the node is cordoned, but not by the update-operator controller (no cordoned-by annotation)")
        }
    }
}

/// Settles `intent` in `decision` and picks the work for it.
fn act(decision: &mut Decision, o: &Observation<'_>, intent: &Intent, cordon: Cordon, running: Option<&Running>) {
    let token = &intent.token;
    if o.current.finished(token).is_some() {
        return;
    }
    let report = &mut decision.report;
    let mut settle = |state: AgentState, message: Option<String>| {
        report.state = Some(state);
        report.token = Some(token.clone());
        report.message = message;
    };
    let running_here = running.filter(|r| r.work.token() == Some(token));
    let outcome = o.outcome.filter(|outcome| outcome.token == *token);
    match intent.step {
        Step::Stage | Step::KubeadmUpgrade | Step::Fetch => {
            if let Some(outcome) = outcome {
                match &outcome.result {
                    Ok(()) => settle(AgentState::Done, None),
                    Err(message) => settle(AgentState::Error, Some(message.clone())),
                }
                return;
            }
            if running_here.is_some() {
                settle(AgentState::Busy, None);
                return;
            }
            let facts = match o.host {
                HostView::Known(facts) => facts,
                HostView::Unreadable { problem, permanent: true } => {
                    return settle(AgentState::Error, Some(facts_problem(problem)));
                }
                HostView::Unreadable { permanent: false, .. } => return settle(AgentState::Busy, None),
            };
            let work = match (intent.step, &intent.kubeadm) {
                (Step::KubeadmUpgrade, Some(KubeadmIntent { role: None, .. })) => {
                    return settle(AgentState::Error, Some("the intent names no kubeadm role".to_owned()));
                }
                (Step::KubeadmUpgrade, Some(kubeadm)) => {
                    // No shortcut from the components hash: it says what is installed, not whether kubeadm
                    // ran and the kubelet restarted; upgrading a node to what it runs changes nothing.
                    Work::KubeadmUpgrade {
                        token: token.clone(),
                        target: intent.target.clone(),
                        kubeadm: kubeadm.clone(),
                    }
                }
                // No shortcut either: only fetching says whether the host holds every file, verified.
                (Step::Fetch, Some(kubeadm)) => {
                    Work::Fetch { token: token.clone(), target: intent.target.clone(), kubeadm: kubeadm.clone() }
                }
                (Step::KubeadmUpgrade | Step::Fetch, None) => {
                    return settle(AgentState::Error, Some("the intent names no components ConfigMap".to_owned()));
                }
                _ if facts.staged_image.as_deref() == Some(intent.target.as_str())
                    || facts.os_image == intent.target =>
                {
                    // Already staged (or running it): nothing to download.
                    return settle(AgentState::Done, None);
                }
                _ => Work::Stage { token: token.clone(), target: intent.target.clone() },
            };
            settle(AgentState::Busy, None);
            decision.start = Some(work);
        }
        Step::Reboot => {
            if let HostView::Known(facts) = o.host
                && intent.boot_id_before.as_ref().is_some_and(|before| *before != facts.boot_id)
            {
                if facts.os_image == intent.target {
                    settle(AgentState::Done, None);
                } else {
                    let message =
                        format!("the host booted {} instead of {} after the reboot", facts.os_image, intent.target);
                    settle(AgentState::Error, Some(message));
                }
                return;
            }
            if let Some(Outcome { result: Err(message), .. }) = outcome {
                return settle(AgentState::Error, Some(message.clone()));
            }
            if let Err(why) = cordoned(cordon) {
                // A reboot asked for already cannot be taken back; it is verified as any other.
                if running_here.is_none_or(|r| r.phase != Phase::RebootRequested) {
                    settle(AgentState::Error, Some(format!("refusing to reboot into {}: {why}", intent.target)));
                }
                return;
            }
            match running_here.map(|r| &r.phase) {
                Some(Phase::Working { transient: Some(_) }) => settle(AgentState::Busy, None),
                Some(_) => {}
                None => match o.host {
                    HostView::Known(_) => {
                        decision.start = Some(Work::Reboot { token: token.clone(), target: intent.target.clone() });
                    }
                    HostView::Unreadable { problem, permanent: true } => {
                        settle(AgentState::Error, Some(facts_problem(problem)));
                    }
                    HostView::Unreadable { permanent: false, .. } => settle(AgentState::Busy, None),
                },
            }
        }
        Step::Drain | Step::Replace | Step::Done | Step::Failed | Step::Blocked => {}
    }
}

#[cfg(test)]
mod tests;
