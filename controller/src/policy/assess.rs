//! One node's own progress: what its intent, its agent's report and the time say should happen to
//! it next, before any budget or gate is applied.

use super::{ActionKind, DrainProgress, NodeAction, NodeView, Policy, Reason};
use jiff::{SignedDuration, Timestamp};
use shared::protocol::{AgentReport, AgentState, BootId, ControllerAnnotations, Intent, Step};

/// Where a selected node stands after its action (if any) is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Situation {
    UpToDate,
    /// Not on the target; `eligible` when it may be started now.
    Outdated {
        eligible: bool,
    },
    /// Being updated (or soaking after its update); keeps its slot.
    InFlight {
        step: &'static str,
        since: Timestamp,
    },
    Failed {
        message: String,
    },
    /// Blocked by a drain problem (`by_drain`), or untouchable (malformed annotations, a step this
    /// controller does not drive).
    Blocked {
        message: String,
        by_drain: bool,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Assessment {
    pub situation: Situation,
    pub action: Option<NodeAction>,
    pub wake_at: Option<Timestamp>,
}

impl Assessment {
    fn new(situation: Situation) -> Self {
        Assessment { situation, action: None, wake_at: None }
    }

    fn act(mut self, node: &NodeView, kind: ActionKind, reason: Reason, message: String) -> Self {
        self.action = Some(NodeAction { node: node.name.clone(), kind, reason, message });
        self
    }

    fn wake(mut self, at: Timestamp) -> Self {
        self.wake_at = Some(at);
        self
    }

    /// Whether the node counts as unavailable for the budget once the action is applied (in-flight
    /// nodes count anyway).
    pub fn unavailable(&self, node: &NodeView) -> bool {
        let uncordoned = self.action.as_ref().is_some_and(|a| uncordons(&a.kind)) && cordoned_by_us(node);
        !node.ready || (node.unschedulable && !uncordoned)
    }
}

fn uncordons(kind: &ActionKind) -> bool {
    matches!(
        kind,
        ActionKind::Complete { .. }
            | ActionKind::Fail { .. }
            | ActionKind::Block { .. }
            | ActionKind::Release
            | ActionKind::Uncordon
    )
}

fn cordoned_by_us(node: &NodeView) -> bool {
    node.controller.as_ref().is_ok_and(|c| c.cordoned_by_us)
}

fn deadline(since: Timestamp, timeout: SignedDuration) -> Timestamp {
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

pub(super) fn assess(node: &NodeView, target: Option<&str>, policy: &Policy, now: Timestamp) -> Assessment {
    let controller = match &node.controller {
        Ok(c) => c,
        Err(error) if node.selected => {
            let message = format!("malformed annotations, node left untouched: {error}");
            return Assessment::new(Situation::Blocked { message: message.clone(), by_drain: false }).act(
                node,
                ActionKind::ReportProblem,
                Reason::MalformedAnnotations,
                message,
            );
        }
        // Not ours to manage, and we cannot tell whether we ever touched it: leave it alone.
        Err(_) => return Assessment::new(Situation::Outdated { eligible: false }),
    };
    let agent = node.agent.as_ref().ok();
    let intent = controller.intent.as_ref();

    let (Some(target), true) = (target, node.selected) else {
        let reason = if node.selected { Reason::NoNodeVersion } else { Reason::NotSelected };
        return wind_down(node, controller, agent, reason, policy, now);
    };
    let Some(intent) = intent else {
        return idle(node, controller, agent, target);
    };
    let current = intent.target == target;
    match intent.step {
        Step::Stage | Step::Drain if !current => Assessment::new(Situation::Outdated { eligible: false }).act(
            node,
            ActionKind::Release,
            Reason::TargetChanged,
            format!("the target changed from {} to {target}; releasing the node", intent.target),
        ),
        Step::Stage => stage(node, intent, agent, policy, now),
        Step::Drain => drain(node, intent, agent, policy, now),
        Step::Reboot => reboot(node, intent, agent, Some(target), policy, now),
        Step::Done if current && image(agent) == Some(target) => {
            let soak_end = deadline(intent.since, policy.soak_time);
            let base = if now < soak_end {
                Assessment::new(Situation::InFlight { step: "soak", since: intent.since }).wake(soak_end)
            } else {
                Assessment::new(Situation::UpToDate)
            };
            leftover_cordon(base, node, controller)
        }
        Step::Failed | Step::Blocked if current && image(agent) != Some(target) => {
            let message = intent.message.clone().unwrap_or_else(|| format!("marked {} without a message", intent.step));
            let situation = if intent.step == Step::Failed {
                Situation::Failed { message }
            } else {
                Situation::Blocked { message, by_drain: true }
            };
            leftover_cordon(Assessment::new(situation), node, controller)
        }
        Step::Done | Step::Failed | Step::Blocked => idle(node, controller, agent, target),
        Step::KubeadmUpgrade | Step::Replace => {
            let message = format!("intent {} is not driven by this controller; node left untouched", intent.step);
            Assessment::new(Situation::Blocked { message: message.clone(), by_drain: false }).act(
                node,
                ActionKind::ReportProblem,
                Reason::UnsupportedStep,
                message,
            )
        }
    }
}

fn image(agent: Option<&AgentReport>) -> Option<&str> {
    agent.and_then(|a| a.os_image.as_deref())
}

/// A node with no intent for the current target: up to date, or outdated and maybe eligible.
fn idle(node: &NodeView, controller: &ControllerAnnotations, agent: Option<&AgentReport>, target: &str) -> Assessment {
    let base = match (&node.agent, image(agent)) {
        (_, Some(image)) if image == target => Assessment::new(Situation::UpToDate),
        (Err(error), _) => {
            let message = format!("malformed agent annotations, node left untouched: {error}");
            return Assessment::new(Situation::Blocked { message: message.clone(), by_drain: false }).act(
                node,
                ActionKind::ReportProblem,
                Reason::MalformedAnnotations,
                message,
            );
        }
        (Ok(report), _) => {
            let agent_ready = report.os_image.is_some() && report.boot_id.is_some();
            let eligible = agent_ready && node.ready && !node.unschedulable;
            Assessment::new(Situation::Outdated { eligible })
        }
    };
    leftover_cordon(base, node, controller)
}

/// Uncordons a node the controller cordoned but is not working on (left over by a crash between
/// two writes, or by a human editing annotations).
fn leftover_cordon(base: Assessment, node: &NodeView, controller: &ControllerAnnotations) -> Assessment {
    if controller.cordoned_by_us && base.action.is_none() {
        let mut base = base;
        if let Situation::Outdated { eligible } = &mut base.situation {
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

/// A node that is not selected any more, or without a NodeVersion: finish a reboot (it cannot be
/// stopped), release anything else, uncordon what we cordoned.
fn wind_down(
    node: &NodeView,
    controller: &ControllerAnnotations,
    agent: Option<&AgentReport>,
    reason: Reason,
    policy: &Policy,
    now: Timestamp,
) -> Assessment {
    let base = Assessment::new(Situation::Outdated { eligible: false });
    match controller.intent.as_ref() {
        Some(intent) if intent.step == Step::Reboot => reboot(node, intent, agent, None, policy, now),
        Some(intent) if matches!(intent.step, Step::Stage | Step::Drain) => {
            let why = if reason == Reason::NotSelected {
                "the node selector no longer selects it"
            } else {
                "there is no NodeVersion"
            };
            base.act(node, ActionKind::Release, reason, format!("releasing the node: {why}"))
        }
        _ => leftover_cordon(base, node, controller),
    }
}

fn stage(node: &NodeView, intent: &Intent, agent: Option<&AgentReport>, policy: &Policy, now: Timestamp) -> Assessment {
    let target = intent.target.clone();
    match agent.and_then(|a| a.finished(&intent.token)) {
        Some(AgentState::Done) => Assessment::new(Situation::InFlight { step: "drain", since: now }).act(
            node,
            ActionKind::Cordon { target: target.clone() },
            Reason::Staged,
            format!("{target} is staged; cordoning and draining"),
        ),
        Some(_) => {
            let message = format!("the agent could not stage {target}: {}", agent_message(agent));
            fail(node, target, Reason::StageFailed, message)
        }
        None => {
            let until = deadline(intent.since, policy.stage_timeout);
            if now >= until {
                let message = format!(
                    "the agent did not stage {target} within {}{}",
                    human(policy.stage_timeout),
                    agent_problem(node)
                );
                return fail(node, target, Reason::StageTimedOut, message);
            }
            Assessment::new(Situation::InFlight { step: "stage", since: intent.since }).wake(until)
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
            match boot_id {
                Some(boot_id_before) => Assessment::new(Situation::InFlight { step: "reboot", since: now }).act(
                    node,
                    ActionKind::Reboot { target: target.clone(), boot_id_before },
                    Reason::Drained,
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
        DrainProgress::Running { .. } | DrainProgress::NotRunning => {
            let until = deadline(intent.since, policy.drain_timeout);
            if now >= until {
                let waiting = match &node.drain {
                    DrainProgress::Running { waiting_on: Some(w) } => format!(": {w}"),
                    _ => String::new(),
                };
                let message = format!("the drain did not finish within {}{waiting}", human(policy.drain_timeout));
                return block(node, target, Reason::DrainTimedOut, message);
            }
            Assessment::new(Situation::InFlight { step: "drain", since: intent.since })
                .act(
                    node,
                    ActionKind::EnsureDrain,
                    Reason::Draining,
                    format!("draining before the reboot into {target}"),
                )
                .wake(until)
        }
    }
}

/// A reboot verifies against the intent's own target; `current` is the NodeVersion's target (None
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
        let situation = match current {
            Some(t) if t == target && policy.soak_time.is_positive() => {
                Situation::InFlight { step: "soak", since: now }
            }
            Some(t) if t == target => Situation::UpToDate,
            _ => Situation::Outdated { eligible: false },
        };
        let soaking = matches!(situation, Situation::InFlight { .. });
        let from = before.map_or("?", BootId::as_str);
        let to = agent_boot.map_or("?", BootId::as_str);
        let done = Assessment::new(situation).act(
            node,
            ActionKind::Complete { target: target.clone() },
            Reason::Verified,
            format!("runs {target} after a reboot (boot ID {from} -> {to}); uncordoning"),
        );
        return if soaking { done.wake(deadline(now, policy.soak_time)) } else { done };
    }
    // A failure counts against the rollout of the intent's own target; for a newer target the node
    // is simply outdated (and, being broken, not eligible).
    let fail_here = |reason: Reason, message: String| {
        let failed = fail(node, target.clone(), reason, message);
        if current == Some(target.as_str()) {
            failed
        } else {
            Assessment { situation: Situation::Outdated { eligible: false }, ..failed }
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
    Assessment::new(Situation::InFlight { step: "reboot", since: intent.since }).wake(until)
}

fn fail(node: &NodeView, target: String, reason: Reason, message: String) -> Assessment {
    Assessment::new(Situation::Failed { message: format!("{reason}: {message}") }).act(
        node,
        ActionKind::Fail { target },
        reason,
        message,
    )
}

fn block(node: &NodeView, target: String, reason: Reason, message: String) -> Assessment {
    Assessment::new(Situation::Blocked { message: format!("{reason}: {message}"), by_drain: true }).act(
        node,
        ActionKind::Block { target },
        reason,
        message,
    )
}

fn agent_message(agent: Option<&AgentReport>) -> String {
    agent.and_then(|a| a.message.clone()).unwrap_or_else(|| "the agent gave no reason".into())
}

fn agent_problem(node: &NodeView) -> String {
    match &node.agent {
        Err(e) => format!(" (the agent's annotations are malformed: {e})"),
        Ok(_) => String::new(),
    }
}
