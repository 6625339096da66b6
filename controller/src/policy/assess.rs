//! One node's own progress: what its intent, its agent's report and the time say should happen to
//! it next, before any gate or budget is applied, and why an outdated node may not start.

use super::{ActionKind, DrainProgress, Hold, NodeAction, NodeView, Policy, Reason};
use crate::checkpoint::Phase;
use jiff::{SignedDuration, Timestamp};
use shared::protocol::{AgentReport, AgentState, BootId, ControllerAnnotations, Intent, Step, UnreadableKeys};

/// Who decides about the node, as far as [`assess`] needs to know.
#[derive(Debug, Clone, Copy)]
pub(super) enum Owner<'a> {
    /// A rollout that moves the node to `target` (under the policy given with it).
    Rollout { target: &'a str },
    /// No NodeVersion selects the node: finish a reboot, release anything else (with `reason`).
    Nobody { reason: Reason },
    /// A NodeVersion without a valid spec might select the node: finish a reboot, touch nothing
    /// else.
    Unknown,
}

/// Where a node stands after its action (if any) is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Situation {
    UpToDate,
    /// Not on the target. `eligible` when it may be started now; otherwise `held` says why, unless
    /// the node's own action this round is what keeps it (a release, an uncordon: it is eligible
    /// next round).
    Outdated {
        eligible: bool,
        held: Option<Hold>,
    },
    /// In the stage step, ahead of its turn: staging (`staged` false), or staged and waiting for a slot of the
    /// budget to be cordoned and drained. Not disrupted: outside `maxUnavailable`, within `maxStaging`.
    /// `eligible` when staged and it may be drained now; otherwise `held` says why, if it is its own reason.
    Staging {
        since: Timestamp,
        staged: bool,
        eligible: bool,
        held: Option<Hold>,
    },
    /// Being updated (or soaking after its update, in `done`); keeps its slot.
    InFlight {
        step: Step,
        since: Timestamp,
    },
    Failed {
        message: String,
    },
    /// Blocked by a drain problem (`by_drain`), or untouchable (malformed annotations, a step this
    /// controller does not drive). `holds_slot` when the node may be in the middle of a step.
    Blocked {
        message: String,
        by_drain: bool,
        holds_slot: bool,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Assessment {
    pub situation: Situation,
    pub action: Option<NodeAction>,
    pub wake_at: Option<Timestamp>,
    /// A new instance joining to replace another node (a heir): extra capacity, never counted as unavailable.
    pub surge: bool,
    /// The node is replaced by a new instance when it starts, not updated in place.
    pub replace: bool,
    /// What an in-flight node waits for, when not its drain (a replacement's new instance, say).
    pub waiting: Option<String>,
}

impl Assessment {
    pub(super) fn new(situation: Situation) -> Self {
        Assessment { situation, action: None, wake_at: None, surge: false, replace: false, waiting: None }
    }

    pub(super) fn outdated_for_now() -> Self {
        Assessment::new(Situation::Outdated { eligible: false, held: None })
    }

    pub(super) fn act(mut self, node: &NodeView, kind: ActionKind, reason: Reason, message: String) -> Self {
        self.action = Some(NodeAction { node: node.name.clone(), kind, reason, message });
        self
    }

    pub(super) fn wake(mut self, at: Timestamp) -> Self {
        self.wake_at = Some(at);
        self
    }

    /// Being updated, or soaking: the node keeps its slot.
    pub fn in_flight(&self) -> bool {
        matches!(self.situation, Situation::InFlight { .. } | Situation::Blocked { holds_slot: true, .. })
    }

    /// Whether the node counts against the budget once the action is applied: in flight, NotReady,
    /// cordoned (unless the action lifts the controller's cordon), or under a NodeOp (which may cordon, drain or
    /// reboot it at any moment).
    pub fn unavailable(&self, node: &NodeView) -> bool {
        let uncordoned = self.action.as_ref().is_some_and(|a| a.kind.uncordons())
            && node.controller.as_ref().is_ok_and(|c| c.cordoned_by_us);
        !self.surge
            && (self.in_flight() || !node.ready || (node.unschedulable && !uncordoned) || node.operation.is_some())
    }
}

pub(super) fn deadline(since: Timestamp, timeout: SignedDuration) -> Timestamp {
    since.checked_add(timeout).unwrap_or(Timestamp::MAX)
}

/// Go-style rendering of a duration for messages (`10m`, `1h30m`, `45s`).
pub(super) fn human(d: SignedDuration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

pub(super) fn image(agent: Option<&AgentReport>) -> Option<&str> {
    agent.and_then(|a| a.os_image.as_deref())
}

pub(super) fn assess(node: &NodeView, owner: Owner<'_>, policy: &Policy, now: Timestamp) -> Assessment {
    let controller = match &node.controller {
        Ok(c) => c,
        Err(unreadable) => return unreadable_keys(node, unreadable, owner),
    };
    let agent = node.agent.as_ref().ok();
    let target = match owner {
        Owner::Rollout { target } => target,
        Owner::Nobody { reason } => return wind_down(node, controller, agent, Some(reason), policy, now),
        Owner::Unknown => return wind_down(node, controller, agent, None, policy, now),
    };
    let Some(intent) = controller.intent.as_ref() else {
        return idle(node, controller, agent, target);
    };
    let current = intent.target == target;
    match intent.step {
        Step::Stage | Step::Drain if !current => Assessment::outdated_for_now().act(
            node,
            ActionKind::Release,
            Reason::TargetChanged,
            format!("the target changed from {} to {target}; releasing the node", intent.target),
        ),
        // Components fetched ahead for a Kubernetes upgrade this rollout no longer asks for (the Kubernetes flow
        // decides its own fetches before the image flow is asked: `super::kubernetes`).
        Step::Fetch => Assessment::outdated_for_now().act(
            node,
            ActionKind::Release,
            Reason::TargetChanged,
            format!("Kubernetes {} is no longer the target; releasing the node", intent.target),
        ),
        Step::Stage => stage(node, controller, intent, agent, policy, now, &format!("stage {target}")),
        Step::Drain => drain(node, intent, agent, policy, now),
        Step::Reboot => reboot(node, intent, agent, Some(target), policy, now),
        Step::Done if current && image(agent) == Some(target) => {
            let soak_end = deadline(intent.since, policy.soak_time);
            let base = if now < soak_end {
                Assessment::new(Situation::InFlight { step: Step::Done, since: intent.since }).wake(soak_end)
            } else {
                Assessment::new(Situation::UpToDate)
            };
            leftover_cordon(base, node, controller)
        }
        Step::Failed | Step::Blocked if current && image(agent) == Some(target) && node.ready => {
            // It got there after all (a late reboot, an administrator's hand): clear the mark, so
            // that the annotations agree with the counts.
            Assessment::new(Situation::UpToDate).act(
                node,
                ActionKind::Release,
                Reason::Recovered,
                format!("runs {target} and is Ready; clearing intent={}", intent.step),
            )
        }
        Step::Failed | Step::Blocked if current => {
            let message = intent.message.clone().unwrap_or_else(|| format!("marked {} without a message", intent.step));
            let situation = if intent.step == Step::Failed {
                Situation::Failed { message }
            } else {
                Situation::Blocked { message, by_drain: true, holds_slot: false }
            };
            leftover_cordon(Assessment::new(situation), node, controller)
        }
        Step::Done | Step::Failed | Step::Blocked => idle(node, controller, agent, target),
        // The rollout no longer asks for a Kubernetes upgrade (`kubernetesClusterVersion` removed mid-upgrade).
        Step::KubeadmUpgrade => kubeadm_wind_down(node, intent, agent, Reason::TargetChanged, policy, now),
        Step::Replace => {
            let message = format!("intent {} is not driven by this controller; node left untouched", intent.step);
            Assessment::new(Situation::Blocked { message: message.clone(), by_drain: false, holds_slot: true }).act(
                node,
                ActionKind::Report,
                Reason::UnsupportedStep,
                message,
            )
        }
    }
}

/// Controller keys the protocol cannot read. An intent of ours with an unreadable target (written
/// by a controller that did not validate `spec.image`) is removed: no agent acts on it, and the node
/// is picked again under a readable target. Anything else is left untouched and reported; if an
/// intent key is there, the node may be mid-step and keeps its slot.
fn unreadable_keys(node: &NodeView, unreadable: &UnreadableKeys, owner: Owner<'_>) -> Assessment {
    if let Some(ours) = unreadable.ours {
        return Assessment::outdated_for_now().act(
            node,
            ActionKind::Release,
            Reason::UnreadableIntent,
            format!(
                "intent={} has a target no agent can read ({}); removing the intent so the node can be picked again",
                ours.step, unreadable.error
            ),
        );
    }
    match owner {
        Owner::Rollout { .. } => {
            let message = format!("malformed annotations, node left untouched: {}", unreadable.error);
            let holds_slot = unreadable.intent_present;
            Assessment::new(Situation::Blocked { message: message.clone(), by_drain: false, holds_slot }).act(
                node,
                ActionKind::Report,
                Reason::MalformedAnnotations,
                message,
            )
        }
        // Not ours to manage, and we cannot tell whether we ever touched it: leave it alone.
        Owner::Nobody { .. } | Owner::Unknown => Assessment::outdated_for_now(),
    }
}

/// A node with no intent for the current target: up to date, or outdated and either eligible or
/// held back for a reason of its own.
fn idle(node: &NodeView, controller: &ControllerAnnotations, agent: Option<&AgentReport>, target: &str) -> Assessment {
    let base = match (&node.agent, image(agent)) {
        (_, Some(image)) if image == target => Assessment::new(Situation::UpToDate),
        (Err(error), _) => {
            let message = format!("malformed agent annotations, node left untouched: {error}");
            return Assessment::new(Situation::Blocked {
                message: message.clone(),
                by_drain: false,
                holds_slot: false,
            })
            .act(node, ActionKind::Report, Reason::MalformedAnnotations, message);
        }
        (Ok(report), _) => {
            let held = if report.os_image.is_none() || report.boot_id.is_none() {
                Some(Hold::new(
                    Reason::NoAgentReport,
                    "its agent never reported the node's image and boot ID: is the agent running on it?",
                ))
            } else {
                own_hold(node, controller)
            };
            Assessment::new(Situation::Outdated { eligible: held.is_none(), held })
        }
    };
    leftover_cordon(base, node, controller)
}

/// Why a node whose agent reports may not start (or take its turn) now, for a reason of its own: NotReady, marked
/// do-not-disrupt (the Node, or a pod found on it: `crate::do_not_disrupt`), waiting for the workloads of its pods
/// to be whole again (`crate::settle`), or cordoned by someone else.
pub(super) fn own_hold(node: &NodeView, controller: &ControllerAnnotations) -> Option<Hold> {
    if !node.ready {
        Some(Hold::new(Reason::NodeNotReady, "the node is NotReady"))
    } else if let Some(message) = &node.do_not_disrupt {
        Some(Hold::new(Reason::DoNotDisrupt, message.clone()))
    } else if let Some(hold) = &node.settle {
        Some(hold.clone())
    } else if node.unschedulable && !controller.cordoned_by_us {
        Some(Hold::new(Reason::CordonedByOther, "someone else cordoned the node; it starts once it is uncordoned"))
    } else {
        None
    }
}

/// Uncordons a node the controller cordoned but is not working on (left over by a crash between
/// two writes, or by a human editing annotations).
pub(super) fn leftover_cordon(base: Assessment, node: &NodeView, controller: &ControllerAnnotations) -> Assessment {
    if controller.cordoned_by_us && base.action.is_none() {
        let mut base = base;
        if let Situation::Outdated { eligible, .. } | Situation::Staging { eligible, .. } = &mut base.situation {
            *eligible = false;
        }
        return base.act(
            node,
            ActionKind::Uncordon,
            Reason::LeftoverCordon,
            "uncordoning: the controller cordoned this node and is done with it".into(),
        );
    }
    base
}

/// A node no rollout moves: finish a reboot (it cannot be stopped), release anything else when no
/// NodeVersion selects it (`reason`), uncordon what we cordoned. With an unknown owner (`reason`
/// None) only the reboot is verified.
fn wind_down(
    node: &NodeView,
    controller: &ControllerAnnotations,
    agent: Option<&AgentReport>,
    reason: Option<Reason>,
    policy: &Policy,
    now: Timestamp,
) -> Assessment {
    let base = Assessment::outdated_for_now();
    let intent = controller.intent.as_ref();
    let Some(intent) = intent else {
        return if reason.is_some() { leftover_cordon(base, node, controller) } else { base };
    };
    match intent.step {
        Step::Reboot => reboot(node, intent, agent, None, policy, now),
        Step::KubeadmUpgrade => {
            kubeadm_wind_down(node, intent, agent, reason.unwrap_or(Reason::TargetChanged), policy, now)
        }
        Step::Stage | Step::Fetch | Step::Drain => match reason {
            None => base,
            Some(reason) => {
                let why = if reason == Reason::NotSelected {
                    "no NodeVersion's selector selects it any more"
                } else {
                    "there is no NodeVersion"
                };
                base.act(node, ActionKind::Release, reason, format!("releasing the node: {why}"))
            }
        },
        // Another owner's step (a replacement: see `replacement::wind_down`), or a mark: the cordon we left goes.
        Step::Replace | Step::Done | Step::Failed | Step::Blocked => match reason {
            None => base,
            Some(_) => leftover_cordon(base, node, controller),
        },
    }
}

/// A node in the stage step (or the fetch step of a Kubernetes upgrade, which is its stage: `what` says which work,
/// "stage <image>" or "fetch the components of Kubernetes <version>"): staging, or staged and waiting for its turn
/// (the [`super::pipeline`] drains it when a slot of the budget is free).
pub(super) fn stage(
    node: &NodeView,
    controller: &ControllerAnnotations,
    intent: &Intent,
    agent: Option<&AgentReport>,
    policy: &Policy,
    now: Timestamp,
    what: &str,
) -> Assessment {
    let target = intent.target.clone();
    match agent.and_then(|a| a.finished(&intent.token)) {
        Some(AgentState::Done) => {
            let held = own_hold(node, controller);
            let staged = Situation::Staging { since: intent.since, staged: true, eligible: held.is_none(), held };
            leftover_cordon(Assessment::new(staged), node, controller)
        }
        Some(_) => {
            let message = format!("the agent could not {what}: {}", agent_message(agent));
            fail(node, target, Reason::StageFailed, message)
        }
        None => {
            let until = deadline(intent.since, policy.stage_timeout);
            if now >= until {
                let message =
                    format!("the agent did not {what} within {}{}", human(policy.stage_timeout), agent_problem(node));
                return fail(node, target, Reason::StageTimedOut, message);
            }
            let staging = Situation::Staging { since: intent.since, staged: false, eligible: false, held: None };
            leftover_cordon(Assessment::new(staging), node, controller).wake(until)
        }
    }
}

fn drain(node: &NodeView, intent: &Intent, agent: Option<&AgentReport>, policy: &Policy, now: Timestamp) -> Assessment {
    let target = intent.target.clone();
    match &node.drain {
        DrainProgress::Drained => {
            let boot_id = node
                .kubelet_boot_id
                .as_deref()
                .and_then(|b| BootId::parse("status.nodeInfo.bootID", b).ok())
                .or_else(|| agent.and_then(|a| a.boot_id.clone()));
            if let Some(waiting) = checkpoint(node, intent, Phase::BeforeReboot, &policy.before_reboot, policy, now) {
                return waiting;
            }
            match boot_id {
                Some(boot_id_before) => Assessment::new(Situation::InFlight { step: Step::Reboot, since: now }).act(
                    node,
                    ActionKind::Reboot { target: target.clone(), boot_id_before },
                    Reason::RebootRequested,
                    format!("drained; rebooting into {target}"),
                ),
                None => fail(
                    node,
                    target,
                    Reason::RebootFailed,
                    "neither the kubelet nor the agent reports a boot ID, so a reboot could not be verified".into(),
                ),
            }
        }
        DrainProgress::Failed { .. }
        | DrainProgress::Uncordoned
        | DrainProgress::Running { .. }
        | DrainProgress::NotRunning => {
            unfinished_drain(node, intent, policy, now, Step::Drain, &format!("before the reboot into {target}"))
        }
    }
}

/// The `phase` checkpoint of a node in `intent`'s step (`crate::checkpoint`), unless it is passed (no annotation
/// to wait for, or each awaited one `"true"`): label the node, wait for the annotations, or block it once
/// `checkpointTimeout` has passed since it was labelled.
fn checkpoint(
    node: &NodeView,
    intent: &Intent,
    phase: Phase,
    waits: &[String],
    policy: &Policy,
    now: Timestamp,
) -> Option<Assessment> {
    if waits.is_empty() {
        return None;
    }
    let in_flight = Situation::InFlight { step: intent.step, since: intent.since };
    let label = phase.label();
    match node.checkpoint.as_ref().filter(|c| c.is(phase, waits)) {
        None => Some(Assessment::new(in_flight).act(
            node,
            ActionKind::Checkpoint { phase, waits: waits.to_vec() },
            Reason::CheckpointRequested,
            format!("labelled {label}=true; waiting for {} to be \"true\"", waits.join(", ")),
        )),
        Some(c) if c.pending.is_empty() => None,
        Some(c) => {
            let until = deadline(c.since, policy.checkpoint_timeout);
            if now >= until {
                let message = format!(
                    "the {} checkpoint did not pass within {}: {}",
                    phase.field(),
                    human(policy.checkpoint_timeout),
                    c.waiting_on()
                );
                return Some(block(node, intent.target.clone(), Reason::CheckpointTimedOut, message));
            }
            let mut waiting = Assessment::new(in_flight).wake(until);
            waiting.waiting = Some(c.waiting_on());
            Some(waiting)
        }
    }
}

/// A drain that has not finished: the node is blocked when the drain cannot finish, was stopped by an
/// uncordon, or timed out (counted from the intent's time); otherwise it keeps draining in `step` until the
/// deadline. `purpose` completes "draining ..." in messages.
pub(super) fn unfinished_drain(
    node: &NodeView,
    intent: &Intent,
    policy: &Policy,
    now: Timestamp,
    step: Step,
    purpose: &str,
) -> Assessment {
    let target = intent.target.clone();
    match &node.drain {
        DrainProgress::Failed { message } => {
            block(node, target, Reason::DrainFailed, format!("the drain cannot finish: {message}"))
        }
        DrainProgress::Uncordoned => block(
            node,
            target,
            Reason::UncordonedWhileDraining,
            "someone made the node schedulable while it was drained; the drain stopped and the node is left alone"
                .into(),
        ),
        DrainProgress::Running { .. } | DrainProgress::NotRunning | DrainProgress::Drained => {
            let until = deadline(intent.since, policy.drain_timeout);
            if now >= until {
                let waiting = match &node.drain {
                    DrainProgress::Running { waiting_on: Some(w) } => format!(": {w}"),
                    _ => String::new(),
                };
                let message = format!("the drain did not finish within {}{waiting}", human(policy.drain_timeout));
                return block(node, target, Reason::DrainTimedOut, message);
            }
            Assessment::new(Situation::InFlight { step, since: intent.since })
                .act(node, ActionKind::KeepDraining, Reason::Draining, format!("draining {purpose}"))
                .wake(until)
        }
    }
}

/// A reboot verifies against the intent's own target; `current` is the rollout's target (None
/// when winding down) and decides where the node stands once verified.
fn reboot(
    node: &NodeView,
    intent: &Intent,
    agent: Option<&AgentReport>,
    current: Option<&str>,
    policy: &Policy,
    now: Timestamp,
) -> Assessment {
    let target = intent.target.clone();
    let before = intent.boot_id_before.as_ref();
    let agent_boot = agent.and_then(|a| a.boot_id.as_ref());
    let new_boot = agent_boot.is_some_and(|b| Some(b) != before)
        && node.kubelet_boot_id.as_deref().is_none_or(|k| Some(k) != before.map(BootId::as_str));
    let finished = agent.and_then(|a| a.finished(&intent.token));
    let on_target = image(agent) == Some(target.as_str());
    if node.ready && finished == Some(AgentState::Done) && on_target && new_boot {
        if current == Some(target.as_str())
            && let Some(waiting) = checkpoint(node, intent, Phase::AfterReboot, &policy.after_reboot, policy, now)
        {
            return waiting;
        }
        let situation = match current {
            Some(t) if t == target && policy.soak_time.is_positive() => {
                Situation::InFlight { step: Step::Done, since: now }
            }
            Some(t) if t == target => Situation::UpToDate,
            _ => Situation::Outdated { eligible: false, held: None },
        };
        let soaking = matches!(situation, Situation::InFlight { .. });
        let from = before.map_or("?", BootId::as_str);
        let to = agent_boot.map_or("?", BootId::as_str);
        let done = Assessment::new(situation).act(
            node,
            ActionKind::Done { target: target.clone() },
            Reason::Verified,
            format!("runs {target} after a reboot (boot ID {from} -> {to}); uncordoning"),
        );
        return if soaking { done.wake(deadline(now, policy.soak_time)) } else { done };
    }
    // A failure counts against the rollout of the intent's own target; for a newer target the node
    // is simply outdated (and, being broken, not eligible for now).
    let fail_here = |reason: Reason, message: String| {
        let failed = fail(node, target.clone(), reason, message);
        if current == Some(target.as_str()) {
            failed
        } else {
            Assessment { situation: Situation::Outdated { eligible: false, held: None }, ..failed }
        }
    };
    if finished == Some(AgentState::Error) {
        return fail_here(
            Reason::RebootFailed,
            format!("the agent could not reboot into {target}: {}", agent_message(agent)),
        );
    }
    let until = deadline(intent.since, policy.reboot_timeout);
    if now >= until {
        let message = format!(
            "the node did not come back within {} (Ready: {}, agent reports image {}, boot ID changed: {}){}",
            human(policy.reboot_timeout),
            node.ready,
            image(agent).unwrap_or("nothing"),
            new_boot,
            agent_problem(node)
        );
        return fail_here(Reason::RebootTimedOut, message);
    }
    Assessment::new(Situation::InFlight { step: Step::Reboot, since: intent.since }).wake(until)
}

/// A node in the kubeadm step that no Kubernetes upgrade asks for any more (the version removed or changed, the
/// NodeVersion deleted or no longer selecting it). kubeadm cannot be stopped halfway, so the node keeps its slot
/// until its agent reports the step finished (either way) or the step's deadline (`stageTimeout +
/// rebootTimeout`) passes; then it is released (intent removed, our cordon lifted) with `reason`. Never left
/// cordoned holding a slot.
pub(super) fn kubeadm_wind_down(
    node: &NodeView,
    intent: &Intent,
    agent: Option<&AgentReport>,
    reason: Reason,
    policy: &Policy,
    now: Timestamp,
) -> Assessment {
    let finished = agent.and_then(|a| a.finished(&intent.token));
    let timeout = kubeadm_timeout(policy);
    let until = deadline(intent.since, timeout);
    let why = match finished {
        Some(state) => format!("its kubeadm step finished ({})", state.as_str()),
        None if now >= until => format!("its kubeadm step did not finish within {}", human(timeout)),
        None => {
            return Assessment::new(Situation::InFlight { step: Step::KubeadmUpgrade, since: intent.since })
                .wake(until);
        }
    };
    Assessment::outdated_for_now().act(
        node,
        ActionKind::Release,
        reason,
        format!("no Kubernetes upgrade to {} is asked for any more and {why}; releasing the node", intent.target),
    )
}

/// How long the kubeadm step may take: `stageTimeout + rebootTimeout` (it installs, then restarts the kubelet).
pub(super) fn kubeadm_timeout(policy: &Policy) -> SignedDuration {
    policy.stage_timeout.checked_add(policy.reboot_timeout).unwrap_or(policy.stage_timeout)
}

pub(super) fn fail(node: &NodeView, target: String, reason: Reason, message: String) -> Assessment {
    Assessment::new(Situation::Failed { message: format!("{reason}: {message}") }).act(
        node,
        ActionKind::Fail { target },
        reason,
        message,
    )
}

pub(super) fn block(node: &NodeView, target: String, reason: Reason, message: String) -> Assessment {
    Assessment::new(Situation::Blocked { message: format!("{reason}: {message}"), by_drain: true, holds_slot: false })
        .act(node, ActionKind::Block { target }, reason, message)
}

pub(super) fn agent_message(agent: Option<&AgentReport>) -> String {
    agent.and_then(|a| a.message.clone()).unwrap_or_else(|| "the agent gave no reason".into())
}

fn agent_problem(node: &NodeView) -> String {
    match &node.agent {
        Err(e) => format!(" (the agent's annotations are malformed: {e})"),
        Ok(_) => String::new(),
    }
}
