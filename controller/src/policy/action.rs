//! What the plan does to a node: a [`NodeAction`], its [`ActionKind`] named after the step it writes, and why
//! (its [`Reason`]). The executor applies them ([`crate::executor`]).

use super::Reason;
use super::replacement::{DonorRef, TaintView};
use jiff::Timestamp;
use shared::protocol::{BootId, KubeadmIntent, Step};

/// One thing to do to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAction {
    pub node: String,
    pub kind: ActionKind,
    pub reason: Reason,
    pub message: String,
}

impl NodeAction {
    /// Whether the action starts a node (it takes a free slot of the budget or of `maxStaging`): an image stage
    /// or a Kubernetes fetch ahead of the node's turn, a staged (or fetched) node's drain, a replacement, or the
    /// first step of a node's Kubernetes upgrade. The executor writes these only after every other
    /// write of the plan.
    pub fn starts_node(&self) -> bool {
        matches!(self.kind, ActionKind::Stage { .. } | ActionKind::Fetch { .. } | ActionKind::Replace { .. })
            || self.reason == Reason::KubernetesUpgradeStarted
            || (matches!(self.kind, ActionKind::Drain { .. }) && self.reason == Reason::DrainStarted)
    }
}

/// The kinds of node actions. Each one that writes is a single merge patch of the Node; those that
/// write an intent are named after its [`Step`] (see [`ActionKind::step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionKind {
    /// Write `intent=stage` for `target` with a fresh token. Reason: [`Reason::StageRequested`].
    Stage { target: String },
    /// Write `intent=fetch` for Kubernetes version `target` with a fresh token and the components ConfigMap of
    /// `kubeadm` (no role): the agent fetches and verifies them ahead of the node's turn. Reason:
    /// [`Reason::FetchRequested`].
    Fetch { target: String, kubeadm: KubeadmIntent },
    /// Cordon (recording `cordoned-by` unless someone else had cordoned it), write
    /// `intent=drain`, then start draining. Reason: [`Reason::DrainStarted`].
    Drain { target: String },
    /// Make sure a drain task runs for the node in the drain step (no write). Reason:
    /// [`Reason::Draining`].
    KeepDraining,
    /// Write `intent=reboot` with the boot ID the node has now. Reason:
    /// [`Reason::RebootRequested`].
    Reboot { target: String, boot_id_before: BootId },
    /// Write `intent=kubeadm-upgrade` for Kubernetes version `target` with the components and role of
    /// `kubeadm`; the cordon is left as it is. Reason: [`Reason::KubernetesUpgradeRequested`].
    KubeadmUpgrade { target: String, kubeadm: KubeadmIntent },
    /// Write `intent=done` and uncordon if the controller cordoned it. Reason:
    /// [`Reason::Verified`].
    Done { target: String },
    /// Write `intent=failed` with the message, uncordon if the controller cordoned it.
    Fail { target: String },
    /// Write `intent=blocked` with the message, uncordon if the controller cordoned it, stop the
    /// drain.
    Block { target: String },
    /// Remove the intent, uncordon if the controller cordoned it, stop the drain.
    Release,
    /// Uncordon a node the controller cordoned but no longer works on. Reason:
    /// [`Reason::LeftoverCordon`].
    Uncordon,
    /// Touch nothing; report the problem (a Warning Event, once per distinct message).
    Report,
    /// Write `intent=replace` for `target` with a fresh token. Reason: [`Reason::ReplacementStarted`].
    Replace { target: String },
    /// Create one instance in the group and a joining PendingNode `pending` for it, linked to the node (the
    /// donor), with `deadline`; no Node write. Reason: [`Reason::InstanceRequested`].
    CreateInstance { group_id: String, pending: String, deadline: Timestamp },
    /// On a heir that joined (the action's node): add the `NoSchedule` taint
    /// [`super::replacement::SHIELD_TAINT`] with the donor's name, so that nothing is scheduled on it before it
    /// inherits. Reason: [`Reason::HeirShielded`].
    Shield { donor: String },
    /// On the heir (the action's node): write the `donor` annotations, the labels and the taints, and remove the
    /// shield taint, in one patch. Reason: [`Reason::HeirPaired`].
    Inherit { donor: DonorRef, labels: std::collections::BTreeMap<String, String>, taints: Vec<TaintView> },
    /// On the donor: write the `heir` annotation and a fresh `intent=replace` (its time starts the drain
    /// timeout), cordon, then start draining. Reason: [`Reason::DrainStarted`].
    DrainDonor { target: String, heir: String },
    /// On a drained donor: delete its joining PendingNode `join_pending`, remove its etcd member if
    /// `remove_etcd_member` (only once the member of `heir` is a healthy voter), delete the Node. Reason:
    /// [`Reason::DonorRetired`].
    Retire { remove_etcd_member: bool, heir: String, join_pending: Option<String> },
    /// On the heir, once the donor's Node is gone: create the leaving PendingNode `pending` for the donor's
    /// instance with `deadline`, then remove the heir's `donor` annotations. Reason: [`Reason::InstanceReleased`].
    ReleaseInstance { pending: String, donor: DonorRef, deadline: Timestamp },
    /// On a donor no NodeVersion moves any more whose heir is not a Ready node yet: switch its joining
    /// PendingNode `join_pending` to `Leave` (with `deadline`) and delete that instance, then release the donor
    /// as [`ActionKind::Release`] does. Reason: the wind-down's ([`Reason::NoNodeVersion`], [`Reason::NotSelected`]).
    AbandonReplacement { join_pending: Option<String>, deadline: Timestamp },
    /// Label the node for the `phase` checkpoint and record the annotations it waits for (`waits`), keeping its
    /// intent and cordon ([`crate::checkpoint`]). Reason: [`Reason::CheckpointRequested`].
    Checkpoint { phase: crate::checkpoint::Phase, waits: Vec<String> },
}

impl ActionKind {
    /// Whether the action writes anything (the Node, a PendingNode, the cloud).
    pub fn writes(&self) -> bool {
        !matches!(self, ActionKind::KeepDraining | ActionKind::Report)
    }

    /// The step of the intent the action writes.
    pub fn step(&self) -> Option<Step> {
        match self {
            ActionKind::Stage { .. } => Some(Step::Stage),
            ActionKind::Fetch { .. } => Some(Step::Fetch),
            ActionKind::Drain { .. } => Some(Step::Drain),
            ActionKind::Reboot { .. } => Some(Step::Reboot),
            ActionKind::KubeadmUpgrade { .. } => Some(Step::KubeadmUpgrade),
            ActionKind::Done { .. } => Some(Step::Done),
            ActionKind::Fail { .. } => Some(Step::Failed),
            ActionKind::Block { .. } => Some(Step::Blocked),
            ActionKind::Replace { .. } | ActionKind::DrainDonor { .. } => Some(Step::Replace),
            ActionKind::KeepDraining
            | ActionKind::Release
            | ActionKind::Uncordon
            | ActionKind::Report
            | ActionKind::CreateInstance { .. }
            | ActionKind::Shield { .. }
            | ActionKind::Inherit { .. }
            | ActionKind::Retire { .. }
            | ActionKind::ReleaseInstance { .. }
            | ActionKind::AbandonReplacement { .. }
            | ActionKind::Checkpoint { .. } => None,
        }
    }

    /// Whether the action lifts the controller's cordon (if it holds one).
    pub fn uncordons(&self) -> bool {
        match self {
            ActionKind::Done { .. }
            | ActionKind::Fail { .. }
            | ActionKind::Block { .. }
            | ActionKind::Release
            | ActionKind::AbandonReplacement { .. }
            | ActionKind::Uncordon => true,
            ActionKind::Stage { .. }
            | ActionKind::Fetch { .. }
            | ActionKind::Drain { .. }
            | ActionKind::KeepDraining
            | ActionKind::Reboot { .. }
            | ActionKind::Report
            | ActionKind::KubeadmUpgrade { .. }
            | ActionKind::Replace { .. }
            | ActionKind::CreateInstance { .. }
            | ActionKind::Shield { .. }
            | ActionKind::Inherit { .. }
            | ActionKind::DrainDonor { .. }
            | ActionKind::Retire { .. }
            | ActionKind::ReleaseInstance { .. }
            | ActionKind::Checkpoint { .. } => false,
        }
    }

    /// The action's name, as the `action` of its Events.
    pub fn name(&self) -> &'static str {
        match self {
            ActionKind::Stage { .. } => "Stage",
            ActionKind::Fetch { .. } => "Fetch",
            ActionKind::Drain { .. } => "Drain",
            ActionKind::KeepDraining => "KeepDraining",
            ActionKind::Reboot { .. } => "Reboot",
            ActionKind::KubeadmUpgrade { .. } => "KubeadmUpgrade",
            ActionKind::Done { .. } => "Done",
            ActionKind::Fail { .. } => "Fail",
            ActionKind::Block { .. } => "Block",
            ActionKind::Release => "Release",
            ActionKind::Uncordon => "Uncordon",
            ActionKind::Report => "Report",
            ActionKind::Replace { .. } => "Replace",
            ActionKind::CreateInstance { .. } => "CreateInstance",
            ActionKind::Shield { .. } => "Shield",
            ActionKind::Inherit { .. } => "Inherit",
            ActionKind::DrainDonor { .. } => "DrainDonor",
            ActionKind::Retire { .. } => "Retire",
            ActionKind::ReleaseInstance { .. } => "ReleaseInstance",
            ActionKind::AbandonReplacement { .. } => "AbandonReplacement",
            ActionKind::Checkpoint { .. } => "Checkpoint",
        }
    }
}
