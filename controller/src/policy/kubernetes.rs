//! The Kubernetes upgrade of a rollout: kubeadm on every node it manages, control plane first, before its image.
//!
//! While a NodeVersion asks for a Kubernetes version (`kubernetesClusterVersion` with
//! `kubernetesComponentsReference`, validated by the reconciler into a [`KubernetesSpec`]) and not every node of
//! the rollout runs it, this module plans the rollout instead of the image flow: **Kubernetes first, then the
//! image** (the image flow takes over in the round after the last node is verified).
//!
//! # Order
//! 1. A refused upgrade ([`KubernetesSpec::Refused`]: a bad ConfigMap, a version the skew policy forbids) is a
//!    hold (`KubernetesUpgradeRefused`, a condition and an Event); no node is started.
//! 2. **Fetched ahead.** Every node's components are fetched and verified first (`intent=fetch`, the agent
//!    downloads every component of the ConfigMap and checks its SHA-256, installing nothing), ahead of its turn
//!    and outside `maxUnavailable`: the node keeps serving. At most `maxStaging` nodes fetch or wait fetched at
//!    once (the pipeline's staging ahead, as for images), in start order; a target change or a release discards
//!    what was fetched, and a node that comes to run the version by other means before its turn (replaced, upgraded
//!    by hand) is released without one.
//! 3. While the API server reports an older version than the target, only the **first control-plane node** (by
//!    name) takes its turn: cordoned and drained like every node (kubeadm's procedure drains a node before its
//!    kubelet is upgraded), then `intent=kubeadm-upgrade` with role `apply`, and it is verified only once
//!    `/version` reports the target. No other node takes its turn meanwhile (the next ones fetch ahead). It takes
//!    it through the same gates as every start: not while another control-plane node is busy in any flow (in
//!    flight, NotReady, cordoned, worked on by a NodeOp), and not while `maxUnavailable` is taken.
//! 4. Then the other control-plane nodes, one at a time, and then the workers under `maxUnavailable`: each, once
//!    fetched, is cordoned and drained (`intent=drain` with the version as target), then `intent=kubeadm-upgrade`
//!    with role `node` (kubeadm upgrades the node with the components fetched, checked again before use, the
//!    kubelet is replaced and restarted), then verified and uncordoned.
//!
//! A node is verified (`intent=done`) once its kubelet reports the target version, its agent reports the
//! components hash of the ConfigMap, and it is Ready. The kubeadm step may take `stageTimeout + rebootTimeout`;
//! the failure budget, the maintenance window, `paused` and the drain timeout apply as for images.
//!
//! # The cluster-autoscaler
//! No node starts its Kubernetes upgrade while a cluster-autoscaler is not confirmed down
//! ([`super::Fleet::autoscaler_running`], `WaitingForAutoscaler`): a node it adds meanwhile would join with the
//! old components. The status says the upgrade is active from the first plan on, which is what pauses it.
//!
//! # Heirs
//! A node that joined to replace another (a heir, not yet paired with its donor) and does not run the target is
//! upgraded like any other node but outside the budget, once the API server reports the target (`kubeadm upgrade
//! node` needs an upgraded control plane): its donor holds the `maxUnavailable` and `maxSurge` slots of the
//! replacement, the heir is extra capacity, and its donor waits for it ([`super::replacement`]). Neither the
//! gates nor the control-plane order hold it back: it is part of a replacement in flight.

use super::assess::{self, Assessment, Situation};
use super::{ActionKind, DrainProgress, Hold, InFlight, NodeView, Plan, Reason, Rollout, ValidSpec, pipeline};
use jiff::Timestamp;
use shared::protocol::{AgentReport, AgentState, ControllerAnnotations, Intent, KubeadmIntent, KubeadmRole, Step};
use shared::version::KubeVersion;
use std::sync::Arc;

/// A NodeVersion's Kubernetes upgrade, as the reconciler validated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubernetesSpec {
    /// Refused before any node is touched; the message names the field or rule at fault.
    Refused(String),
    /// Valid: upgrade the nodes.
    Upgrade(KubernetesTarget),
}

/// A valid Kubernetes upgrade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubernetesTarget {
    pub version: KubeVersion,
    /// The components ConfigMap's name.
    pub components: String,
    /// The components hash (`sha256:<hex>`) a node reports once it runs exactly these components.
    pub hash: String,
    /// What the API server's `/version` reports now.
    pub api_server: KubeVersion,
}

/// How many nodes' kubelets a rollout's [`Progress`] lists (the first by name): the status shows no more.
pub const LISTED: usize = 500;

/// A node's name, kubelet version and components hash, as the status lists them.
pub type Kubelet = (String, Option<String>, Option<String>);

/// A rollout's Kubernetes upgrade, for the status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// The upgrade is under way: some node does not run the version yet (a refused upgrade is not under way).
    pub active: bool,
    /// The first [`LISTED`] nodes by name, each with its kubelet version and components hash. Shared: the
    /// incremental planner builds the list again only when a node's kubelet changes.
    pub nodes: Arc<Vec<Kubelet>>,
}

impl Progress {
    pub(super) fn of(active: bool, members: &[(&NodeView, &Assessment)]) -> Progress {
        let mut nodes: Vec<Kubelet> = members.iter().map(|(n, _)| kubelet(n)).collect();
        nodes.sort();
        nodes.truncate(LISTED);
        Progress { active, nodes: Arc::new(nodes) }
    }
}

/// What the status lists of the node's kubelet.
pub(super) fn kubelet(n: &NodeView) -> Kubelet {
    let hash = n.agent.as_ref().ok().and_then(|a| a.components_hash.as_ref()).map(|h| h.to_string());
    (n.name.clone(), n.kubelet_version.clone(), hash)
}

#[allow(clippy::too_many_arguments)]
/// The plan of `rollout` while its Kubernetes upgrade is under way; `None` once every node runs the target (the
/// image flow plans then).
pub(super) fn plan_rollout(
    rollout: &Rollout,
    kubernetes: &KubernetesSpec,
    spec: &ValidSpec,
    members: &[(&NodeView, &Assessment)],
    shared: &mut pipeline::Shared,
    autoscaler_running: Option<&str>,
    own_node: Option<&str>,
    now: Timestamp,
) -> Option<Plan> {
    let target = match kubernetes {
        KubernetesSpec::Refused(message) => {
            // Nodes in the middle of an image step finish; nothing new starts.
            let mut plan = Plan::default();
            for (_, a) in members.iter().filter(|(_, a)| a.in_flight()) {
                plan.actions.extend(a.action.clone());
                plan.wake(a.wake_at);
            }
            super::image::summarize(&mut plan, members);
            plan.hold = Some(refused(message));
            return Some(plan);
        }
        KubernetesSpec::Upgrade(target) => target,
    };
    let target = &effective(target, members.iter().any(|(n, _)| verified_control_plane(n, target)));
    if finished(members, target, spec, now) {
        return None;
    }
    let assessments: Vec<Assessment> =
        members.iter().map(|(node, image)| assess_member(node, image, target, spec, now)).collect();
    let members_k: Vec<(&NodeView, &Assessment)> = members.iter().map(|(n, _)| *n).zip(assessments.iter()).collect();
    let mut plan = Plan::default();
    for a in &assessments {
        plan.actions.extend(a.action.clone());
        plan.wake(a.wake_at);
    }
    super::image::summarize(&mut plan, &members_k);
    let facts = members_k.iter().fold(Facts::default(), |f, (n, a)| f.or(Facts::member(n, a)));
    let pool = |narrowing: &Narrowing| pipeline::Members {
        members: &members_k,
        own_node,
        candidate: if narrowing.control_plane_only { |n, a| n.control_plane && !a.surge } else { |_, a| !a.surge },
        ahead: |_, a| !a.surge,
        limit: narrowing.limit,
        barrier: |_, a| barrier(a),
        rollback: None,
    };
    let gates = pipeline::waiting(&members_k);
    turns(&mut plan, (rollout, target, spec), &members_k, gates, &facts, pool, (shared, autoscaler_running), now);
    Some(plan)
}

/// The hold of a refused upgrade.
pub(super) fn refused(message: &str) -> Hold {
    Hold::new(Reason::KubernetesUpgradeRefused, message.to_owned())
}

/// One member's Kubernetes progress (`image`: its assessment by the image flow), a heir's extra capacity kept.
pub(super) fn assess_member(
    node: &NodeView,
    image: &Assessment,
    target: &KubernetesTarget,
    spec: &ValidSpec,
    now: Timestamp,
) -> Assessment {
    Assessment { surge: image.surge, ..assess(node, image, target, spec, now) }
}

/// Which control-plane members keep the workers waiting: every one not up to date (rule 9 of the pipeline, this
/// flow's way).
pub(super) fn barrier(a: &Assessment) -> bool {
    a.situation != Situation::UpToDate
}

/// What the flow's narrowing reads of its members, once their progress is known: the same for a list (the full
/// plan) and for counts kept per member (the incremental planner).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Facts {
    /// A control-plane member counts against the budget: busy for every rollout.
    pub control_plane_unavailable: bool,
    /// A member is in flight (or blocked holding its slot).
    pub in_flight: bool,
    /// A control-plane member is.
    pub control_plane_in_flight: bool,
    /// A control-plane member could run `kubeadm upgrade apply` now: eligible, or fetching with nothing held.
    pub control_plane_may_move: bool,
}

impl Facts {
    /// One member's part.
    pub(super) fn member(n: &NodeView, a: &Assessment) -> Facts {
        let may_move = !a.surge
            && matches!(
                a.situation,
                Situation::Outdated { eligible: true, .. } | Situation::Staging { held: None, .. }
            );
        Facts {
            control_plane_unavailable: n.control_plane && a.unavailable(n),
            in_flight: a.in_flight(),
            control_plane_in_flight: n.control_plane && a.in_flight(),
            control_plane_may_move: n.control_plane && may_move,
        }
    }

    pub(super) fn or(self, other: Facts) -> Facts {
        Facts {
            control_plane_unavailable: self.control_plane_unavailable || other.control_plane_unavailable,
            in_flight: self.in_flight || other.in_flight,
            control_plane_in_flight: self.control_plane_in_flight || other.control_plane_in_flight,
            control_plane_may_move: self.control_plane_may_move || other.control_plane_may_move,
        }
    }
}

/// How the flow narrows which members take their turn: while the API server is older than the target, only
/// control-plane members (`control_plane_only`), one (`limit`), and none while anything is in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Narrowing {
    pub control_plane_only: bool,
    pub limit: usize,
    /// Why nothing may take its turn, when the narrowing is the reason.
    pub hold: Option<Hold>,
}

fn narrowing(target: &KubernetesTarget, facts: &Facts) -> Narrowing {
    if target.api_server >= target.version {
        return Narrowing { control_plane_only: false, limit: usize::MAX, hold: None };
    }
    let api_server = &target.api_server;
    let waiting = |message: String| Some(Hold::new(Reason::WaitingForApiServer, message));
    let mut narrowing = Narrowing { control_plane_only: true, limit: 1, hold: None };
    if facts.in_flight {
        narrowing.limit = 0;
        if !facts.control_plane_in_flight {
            narrowing.hold =
                waiting(format!("the API server reports {api_server}; the control plane is upgraded first"));
        }
    } else if !facts.control_plane_may_move {
        narrowing.limit = 0;
        narrowing.hold = waiting(format!(
            "the API server reports {api_server}: no control-plane node of this NodeVersion can run kubeadm upgrade \
             apply now"
        ));
    }
    narrowing
}

/// After the members' own progress is in `plan` (their actions, wake-ups and summary): the heirs started (`heirs`
/// may hold any members: only heirs are started), the gates, and the turns and fetches over the members as `pool`
/// gives them under the flow's [`Narrowing`]. Shared by the full plan and the incremental planner.
#[allow(clippy::too_many_arguments)]
pub(super) fn turns<'a, P: pipeline::Pool<'a>>(
    plan: &mut Plan,
    (rollout, target, spec): (&Rollout, &KubernetesTarget, &ValidSpec),
    heirs: &[(&NodeView, &Assessment)],
    gates: (usize, u32),
    facts: &Facts,
    pool: impl FnOnce(&Narrowing) -> P,
    (shared, autoscaler_running): (&mut pipeline::Shared, Option<&str>),
    now: Timestamp,
) {
    start_heirs(plan, heirs, target, now);
    let flow = flow(target);
    if pipeline::open(rollout, plan, Some(&flow), gates, autoscaler_running, now).is_none() {
        return;
    }
    let bounds = pipeline::Bounds::of(rollout, spec, plan, now);
    // A control-plane member busy in this flow's own view is busy for every rollout.
    shared.control_plane_busy |= facts.control_plane_unavailable;
    let narrowing = narrowing(target, facts);
    let pool = pool(&narrowing);
    let mut surge = pipeline::Surge { free: u32::MAX, ..pipeline::Surge::default() };
    let mut selected = pipeline::select(&pool, spec, &flow, (shared, &mut surge), &bounds);
    if narrowing.hold.is_some() {
        selected.hold = narrowing.hold;
    }
    pipeline::start(plan, &flow, selected, now);
}

/// Whether the upgrade is over for every member, so that the image flow plans: each runs the version and none is in
/// a step of this flow (a verified node soaking still is, and a kubeadm step of any version). Not merely "nothing
/// to do this round": while the image flow's steps run, this flow would otherwise plan in its place, start no
/// image step, and lift with a separate `LeftoverCordon` write the cordon that the image flow's verification lifts.
fn finished(members: &[(&NodeView, &Assessment)], target: &KubernetesTarget, spec: &ValidSpec, now: Timestamp) -> bool {
    members.iter().all(|(node, _)| match closing(node, target, spec) {
        Closing::Open => false,
        Closing::Soaking(until) => until <= now,
        Closing::Finished => true,
    })
}

/// Where a member stands in [`finished`]: read from its view alone, so that the incremental planner keeps it per
/// member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Closing {
    /// Not on the target, or in a step of this flow (a kubeadm step of any version).
    Open,
    /// Verified on the target and soaking until then.
    Soaking(Timestamp),
    /// On the target, and no step of this flow.
    Finished,
}

pub(super) fn closing(node: &NodeView, target: &KubernetesTarget, spec: &ValidSpec) -> Closing {
    if !runs(node, target) {
        return Closing::Open;
    }
    let version = target.version.to_string();
    let intent = node.controller.as_ref().ok().and_then(|c| c.intent.as_ref());
    match intent {
        None => Closing::Finished,
        Some(i) => match i.step {
            Step::KubeadmUpgrade => Closing::Open,
            Step::Done if i.target == version => Closing::Soaking(assess::deadline(i.since, spec.policy.soak_time)),
            Step::Done => Closing::Finished,
            Step::Stage | Step::Fetch | Step::Drain | Step::Reboot | Step::Replace | Step::Failed | Step::Blocked => {
                if i.target == version {
                    Closing::Open
                } else {
                    Closing::Finished
                }
            }
        },
    }
}

/// `target` with the API server's version never behind what the control-plane nodes prove (`proven`: a member
/// is [`verified_control_plane`]): `/version` through the Service may answer from an API server not upgraded yet
/// while the control plane is half done, but a control-plane node verified on the target was upgraded only after
/// `kubeadm upgrade apply` succeeded (no control-plane node is upgraded with `node` before). Without this, the next
/// control-plane node would take the `apply` branch again.
pub(super) fn effective(target: &KubernetesTarget, proven: bool) -> KubernetesTarget {
    let mut target = target.clone();
    if target.api_server < target.version && proven {
        target.api_server = target.version.clone();
    }
    target
}

/// Whether `n` is a control-plane node verified on the target: it runs it and is in no kubeadm step (the node
/// applying runs the target before `/version` confirms the control plane).
pub(super) fn verified_control_plane(n: &NodeView, target: &KubernetesTarget) -> bool {
    n.control_plane && super::kubeadm_intent(n).is_none() && runs(n, target)
}

/// Whether the member is a heir this flow starts outside the budget (see the module docs).
pub(super) fn heir(a: &Assessment) -> bool {
    a.surge && matches!(a.situation, Situation::Outdated { eligible: true, .. })
}

/// Starts the Kubernetes upgrade of every eligible heir (see the module docs), once the API server reports the
/// target.
pub(super) fn start_heirs(
    plan: &mut Plan,
    members: &[(&NodeView, &Assessment)],
    target: &KubernetesTarget,
    now: Timestamp,
) {
    if target.api_server < target.version {
        return;
    }
    let version = target.version.to_string();
    for (node, a) in members {
        if !heir(a) {
            continue;
        }
        plan.counts.outdated -= 1;
        plan.counts.in_progress += 1;
        plan.in_flight.push(InFlight { node: node.name.clone(), step: Step::Drain, since: now, waiting_on: None });
        plan.actions.push(super::NodeAction {
            node: node.name.clone(),
            kind: ActionKind::Drain { target: version.clone() },
            reason: Reason::KubernetesUpgradeStarted,
            message: format!(
                "a new node replacing another joined with Kubernetes {}: cordoning and draining it for the upgrade \
                 to {version} before it takes its place",
                node.kubelet_version.as_deref().unwrap_or("(unknown)")
            ),
        });
    }
}

/// Whether `node` runs the target: its kubelet's version and its agent's components hash.
pub(super) fn runs(node: &NodeView, target: &KubernetesTarget) -> bool {
    let agent = node.agent.as_ref().ok();
    node.kubelet_version.as_deref() == Some(target.version.to_string().as_str())
        && agent.and_then(|a| a.components_hash.as_ref()).map(|h| h.as_str()) == Some(target.hash.as_str())
}

/// One node's Kubernetes progress. `image` is its assessment by the image flow, which decides for nodes in the
/// middle of an image step and for annotations that cannot be read.
fn assess(
    node: &NodeView,
    image: &Assessment,
    target: &KubernetesTarget,
    spec: &ValidSpec,
    now: Timestamp,
) -> Assessment {
    let Ok(controller) = &node.controller else { return image.clone() };
    let version = target.version.to_string();
    let agent = node.agent.as_ref().ok();
    if let Some(intent) = controller.intent.as_ref().filter(|i| i.target == version)
        && let Some(assessment) = ours(node, controller, intent, agent, target, spec, now)
    {
        return assessment;
    }
    if let Some(intent) = controller.intent.as_ref().filter(|i| i.step == Step::KubeadmUpgrade) {
        // A kubeadm upgrade to another version: released once its step finished (kubeadm is not stopped halfway).
        return assess::kubeadm_wind_down(node, intent, agent, Reason::TargetChanged, &spec.policy, now);
    }
    if image.in_flight() {
        // An image step under way finishes first; it keeps its slot.
        return image.clone();
    }
    if runs(node, target) {
        return assess::leftover_cordon(Assessment::new(Situation::UpToDate), node, controller);
    }
    if let Some(action) = &image.action
        && action.kind.writes()
    {
        // The image flow's clean-up (a release, an uncordon) readies the node for the next round.
        return Assessment { situation: Situation::Outdated { eligible: false, held: None }, ..image.clone() };
    }
    idle(node, controller, agent)
}

/// A node with an intent whose target is the version; `None` for an intent that says nothing about Kubernetes.
fn ours(
    node: &NodeView,
    controller: &ControllerAnnotations,
    intent: &Intent,
    agent: Option<&AgentReport>,
    target: &KubernetesTarget,
    spec: &ValidSpec,
    now: Timestamp,
) -> Option<Assessment> {
    let version = &intent.target;
    Some(match intent.step {
        // Already on the target by other means (a node replaced or upgraded by hand meanwhile): no turn is needed,
        // and what was fetched is discarded.
        Step::Fetch if runs(node, target) => Assessment::new(Situation::UpToDate).act(
            node,
            ActionKind::Release,
            Reason::Recovered,
            format!(
                "runs Kubernetes {version} already (kubelet and components {}): no turn needed; clearing \
                 intent=fetch, the agent discards what it fetched",
                target.hash
            ),
        ),
        Step::Fetch => {
            let what = format!("fetch the components of Kubernetes {version}");
            assess::stage(node, controller, intent, agent, &spec.policy, now, &what)
        }
        Step::KubeadmUpgrade => kubeadm(node, intent, agent, target, spec, now),
        Step::Drain => drain(node, intent, target, spec, now),
        Step::Done if runs(node, target) => {
            let soak_end = assess::deadline(intent.since, spec.policy.soak_time);
            let base = if now < soak_end {
                Assessment::new(Situation::InFlight { step: Step::Done, since: intent.since }).wake(soak_end)
            } else {
                Assessment::new(Situation::UpToDate)
            };
            assess::leftover_cordon(base, node, controller)
        }
        Step::Failed | Step::Blocked if runs(node, target) && node.ready => Assessment::new(Situation::UpToDate).act(
            node,
            ActionKind::Release,
            Reason::Recovered,
            format!("runs Kubernetes {version} and is Ready; clearing intent={}", intent.step),
        ),
        step @ (Step::Failed | Step::Blocked) => {
            let message = intent.message.clone().unwrap_or_else(|| format!("marked {step} without a message"));
            let situation = if step == Step::Failed {
                Situation::Failed { message }
            } else {
                Situation::Blocked { message, by_drain: true, holds_slot: false }
            };
            assess::leftover_cordon(Assessment::new(situation), node, controller)
        }
        // A step of the image flow to this version's name (none: its targets are images), or a verified mark
        // whose node does not run the version (any more): not this flow's to decide.
        Step::Stage | Step::Reboot | Step::Replace | Step::Done => return None,
    })
}

/// An outdated node without a Kubernetes step: eligible, or held back for a reason of its own.
fn idle(node: &NodeView, controller: &ControllerAnnotations, agent: Option<&AgentReport>) -> Assessment {
    let held = if agent.is_none_or(|a| a.boot_id.is_none()) {
        Some(Hold::new(Reason::NoAgentReport, "its agent never reported on the node: is the agent running on it?"))
    } else {
        assess::own_hold(node, controller)
    };
    Assessment::new(Situation::Outdated { eligible: held.is_none(), held })
}

/// A node draining before its kubeadm upgrade.
fn drain(node: &NodeView, intent: &Intent, target: &KubernetesTarget, spec: &ValidSpec, now: Timestamp) -> Assessment {
    let version = intent.target.clone();
    // The first control-plane node, while the API server still reports an older version, upgrades the control
    // plane (only it was started then: see `select`).
    let (role, command) = if node.control_plane && target.api_server < target.version {
        (KubeadmRole::Apply, "kubeadm upgrade apply")
    } else {
        (KubeadmRole::Node, "kubeadm upgrade node")
    };
    match &node.drain {
        DrainProgress::Drained => Assessment::new(Situation::InFlight { step: Step::KubeadmUpgrade, since: now }).act(
            node,
            ActionKind::KubeadmUpgrade {
                target: version.clone(),
                kubeadm: KubeadmIntent { components: target.components.clone(), role: Some(role) },
            },
            Reason::KubernetesUpgradeRequested,
            format!("drained; upgrading Kubernetes to {version} with {command}"),
        ),
        DrainProgress::Failed { message } => {
            assess::block(node, version, Reason::DrainFailed, format!("the drain cannot finish: {message}"))
        }
        DrainProgress::Uncordoned => assess::block(
            node,
            version,
            Reason::UncordonedWhileDraining,
            "someone made the node schedulable while it was drained; the drain stopped and the node is left alone"
                .into(),
        ),
        DrainProgress::Running { .. } | DrainProgress::NotRunning => {
            let until = assess::deadline(intent.since, spec.policy.drain_timeout);
            if now >= until {
                let message = format!("the drain did not finish within {}", assess::human(spec.policy.drain_timeout));
                return assess::block(node, version, Reason::DrainTimedOut, message);
            }
            Assessment::new(Situation::InFlight { step: Step::Drain, since: intent.since })
                .act(
                    node,
                    ActionKind::KeepDraining,
                    Reason::Draining,
                    format!("draining before the Kubernetes upgrade to {version}"),
                )
                .wake(until)
        }
    }
}

/// A node in the kubeadm step: verified once it runs the target and is Ready (and, after `kubeadm upgrade apply`,
/// once the API server reports the target); failed on the agent's error or at the deadline.
fn kubeadm(
    node: &NodeView,
    intent: &Intent,
    agent: Option<&AgentReport>,
    target: &KubernetesTarget,
    spec: &ValidSpec,
    now: Timestamp,
) -> Assessment {
    let version = intent.target.clone();
    let applies = intent.kubeadm.as_ref().is_some_and(|k| k.role == Some(KubeadmRole::Apply));
    let finished = agent.and_then(|a| a.finished(&intent.token));
    if finished == Some(AgentState::Error) {
        let message = format!("the agent could not upgrade Kubernetes to {version}: {}", assess::agent_message(agent));
        return assess::fail(node, version, Reason::KubernetesUpgradeFailed, message);
    }
    let api_server_done = !applies || target.api_server >= target.version;
    if finished == Some(AgentState::Done) && runs(node, target) && node.ready && api_server_done {
        let soak = spec.policy.soak_time.is_positive();
        let situation = if soak { Situation::InFlight { step: Step::Done, since: now } } else { Situation::UpToDate };
        let done = Assessment::new(situation).act(
            node,
            ActionKind::Done { target: version.clone() },
            Reason::Verified,
            format!("runs Kubernetes {version} (kubelet and components {}); uncordoning", target.hash),
        );
        return if soak { done.wake(assess::deadline(now, spec.policy.soak_time)) } else { done };
    }
    let timeout = assess::kubeadm_timeout(&spec.policy);
    let until = assess::deadline(intent.since, timeout);
    if now >= until {
        let message = format!(
            "not upgraded to Kubernetes {version} within {} (agent finished: {}, kubelet reports {}, components hash \
             {}, Ready: {}, API server reports {})",
            assess::human(timeout),
            finished.map_or("no", |s| s.as_str()),
            node.kubelet_version.as_deref().unwrap_or("nothing"),
            agent.and_then(|a| a.components_hash.as_ref()).map_or("none", |h| h.as_str()),
            node.ready,
            target.api_server,
        );
        return assess::fail(node, version, Reason::KubernetesUpgradeTimedOut, message);
    }
    Assessment::new(Situation::InFlight { step: Step::KubeadmUpgrade, since: intent.since }).wake(until)
}

/// The flow's part in the [`pipeline`]: the version, and whether the API server is still to be upgraded.
pub(super) fn flow(target: &KubernetesTarget) -> pipeline::Flow {
    pipeline::Flow::Kubernetes {
        version: target.version.to_string(),
        apply: target.api_server < target.version,
        components: target.components.clone(),
    }
}

#[cfg(test)]
#[path = "kubernetes_tests.rs"]
mod tests;
