//! The one vocabulary of why the controller does (or does not do) something: every flow's reasons — rollouts,
//! replacements, Kubernetes upgrades, NodeOps and scaling groups — are one typed [`Reason`].

use std::fmt;

/// Why the controller does (or does not do) something. The same value is the Event reason, the
/// condition reason, a metric label and a log field; `Display` is PascalCase, at most 128 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    // A node's steps, named after what the controller does.
    StageRequested,
    DrainStarted,
    Draining,
    RebootRequested,
    CheckpointRequested,
    CheckpointTimedOut,
    KubernetesUpgradeStarted,
    /// A node's Kubernetes components fetched and verified ahead of its turn (`intent=fetch`).
    FetchRequested,
    KubernetesUpgradeRequested,
    Verified,
    // A replacement's steps.
    ReplacementStarted,
    InstanceRequested,
    /// An instance request whose answer was lost resolved from the group's member list: its instance adopted.
    InstanceAdopted,
    /// An instance request whose answer was lost resolved from the group's member list: none was made, asked again.
    InstanceRequestedAgain,
    /// An instance request whose answer was lost, of which the group's member list shows no instance yet, while a
    /// request sent for it may still make one (the cloud client's retries): not asked again before that bound.
    InstanceRequestInFlight,
    HeirShielded,
    HeirPaired,
    DonorRetired,
    InstanceReleased,
    // A node's failures.
    StageFailed,
    StageTimedOut,
    RebootFailed,
    RebootTimedOut,
    DrainTimedOut,
    DrainFailed,
    KubernetesUpgradeFailed,
    KubernetesUpgradeTimedOut,
    UncordonedWhileDraining,
    MalformedAnnotations,
    UnsupportedStep,
    HeirNotReady,
    /// A drained control-plane donor is not deleted: its etcd member cannot be removed (no etcd access, etcd
    /// unreachable, or the heir's member not yet a healthy voter).
    EtcdUnavailable,
    // Clean-ups.
    TargetChanged,
    /// A node staged ahead released so that a node it waits for (a worker for a control-plane node; during a rollback,
    /// a control-plane node for a worker) can stage in its slot of `maxStaging`.
    StagingSlotYielded,
    NotSelected,
    NoNodeVersion,
    LeftoverCordon,
    UnreadableIntent,
    Recovered,
    // Why an outdated node does not start: its own reason.
    NoAgentReport,
    NodeNotReady,
    CordonedByOther,
    DoNotDisrupt,
    WaitingForWorkloads,
    SettleTimedOut,
    SelectorOverlap,
    GroupImagePending,
    ImageUnknown,
    NodeOperation,
    // Why no new node of a rollout starts.
    Paused,
    OutsideMaintenanceWindow,
    MaintenanceExclusion,
    WaveSoaking,
    CannotFinishInWindow,
    FailureBudgetExhausted,
    RollbackStarted,
    RollbackFailed,
    RolledBack,
    HealthCheckFailing,
    HealthCheckTimedOut,
    StoppedOnDrainTimeout,
    InvalidSpec,
    KubernetesUpgradeRefused,
    WaitingForApiServer,
    WaitingForControlPlane,
    WaitingForAutoscaler,
    UnavailableNodes,
    ZoneUnavailable,
    SurgeExhausted,
    // A NodeOp's steps, failures and holds (the steps it shares with rollouts use their reasons: `DrainStarted`,
    // `RebootRequested`, `DrainFailed`, `DrainTimedOut`, `RebootFailed`, `RebootTimedOut`,
    // `UncordonedWhileDraining`, `WaitingForControlPlane`, `InvalidSpec`, `NodesFailed`, `NoFailures`).
    OperationStarted,
    OperationSucceeded,
    OperationFailed,
    PreflightStarted,
    PreflightSkipped,
    PreflightFailed,
    JobCreated,
    JobNameTaken,
    NoAgent,
    RebootRefused,
    AllNodesAtOnce,
    Deleting,
    StoppedOnFailure,
    WaitingForRolloutBudget,
    Running,
    Idle,
    Completed,
    NotHeld,
    // Scaling groups, their instances (PendingNodes) and the cluster-autoscaler.
    GroupImageSet,
    GroupImageLookupFailed,
    GroupImageUpdateFailed,
    Joined,
    JoinFailed,
    Left,
    LeaveDeadlineExceeded,
    InstanceDeleteFailed,
    AutoscalerPaused,
    AutoscalerRestored,
    // The preflight: one Warning Event per blocker found before a rollout starts.
    PreflightBlocker,
    // Rollout summary.
    RollingOut,
    Complete,
    NodesHeldBack,
    AllNodesUpToDate,
    NodesOutdated,
    NodesFailed,
    NoFailures,
    NodesBlocked,
    NoBlockedNodes,
    NoOverlap,
    // The API server: a status write it answered without some of the fields written (a CRD older than the
    // controller prunes the fields its schema lacks).
    StatusFieldsDropped,
}

impl Reason {
    /// Whether an Event with this reason is a Warning.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            Reason::StageFailed
                | Reason::CheckpointTimedOut
                | Reason::StageTimedOut
                | Reason::RebootFailed
                | Reason::RebootTimedOut
                | Reason::DrainTimedOut
                | Reason::DrainFailed
                | Reason::KubernetesUpgradeFailed
                | Reason::KubernetesUpgradeTimedOut
                | Reason::KubernetesUpgradeRefused
                | Reason::UncordonedWhileDraining
                | Reason::MalformedAnnotations
                | Reason::UnsupportedStep
                | Reason::HeirNotReady
                | Reason::EtcdUnavailable
                | Reason::ImageUnknown
                | Reason::UnreadableIntent
                | Reason::NoAgentReport
                | Reason::NodeNotReady
                | Reason::CordonedByOther
                | Reason::SelectorOverlap
                | Reason::FailureBudgetExhausted
                | Reason::RollbackStarted
                | Reason::RollbackFailed
                | Reason::HealthCheckTimedOut
                | Reason::StoppedOnDrainTimeout
                | Reason::InvalidSpec
                | Reason::OperationFailed
                | Reason::PreflightFailed
                | Reason::JobNameTaken
                | Reason::NoAgent
                | Reason::RebootRefused
                | Reason::AllNodesAtOnce
                | Reason::JoinFailed
                | Reason::LeaveDeadlineExceeded
                | Reason::InstanceDeleteFailed
                | Reason::GroupImageLookupFailed
                | Reason::GroupImageUpdateFailed
                | Reason::PreflightBlocker
                | Reason::SettleTimedOut
                | Reason::StatusFieldsDropped
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The variant names are the PascalCase reasons.
        fmt::Debug::fmt(self, f)
    }
}
