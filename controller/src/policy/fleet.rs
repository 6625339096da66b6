//! What the policy knows of the cloud and of replacements, as plain data: the scaling groups, the PendingNodes,
//! each group node's facts ([`Fleet`], [`GroupMember`]), and the names and inheritance rules a replacement
//! derives from its donor. The flow that reads them is [`super::replacement`].

use jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// Label and taint prefixes that belong to Kubernetes and are never copied from a donor to its heir.
const KUBERNETES_LABEL_SUFFIXES: [&str; 2] = ["kubernetes.io", "k8s.io"];
/// Taints whose key starts with this are set by Kubernetes (NotReady, unschedulable, pressure), not by an
/// administrator.
const KUBERNETES_TAINT_PREFIX: &str = "node.kubernetes.io/";
/// The `NoSchedule` taint (value: the donor's name) a heir carries from the moment its Node is seen until it
/// inherits its donor's labels and taints: no pod that does not tolerate a dedicated node's taint lands on it
/// before it carries that taint.
pub const SHIELD_TAINT: &str = "update.edgeless.systems/inheriting";

/// The shield taint for a heir of `donor`.
pub fn shield(donor: &str) -> TaintView {
    TaintView { key: SHIELD_TAINT.to_owned(), value: Some(donor.to_owned()), effect: "NoSchedule".to_owned() }
}
/// Prefix of the PendingNode of a donor's heir.
const JOIN_PREFIX: &str = "heir-of-";
/// Prefix of the PendingNode that deletes a donor's instance.
const LEAVE_PREFIX: &str = "leaving-";
/// Longest object name (a DNS-1123 subdomain).
pub(super) const MAX_NAME: usize = 253;

/// What the policy knows of the cloud: the scaling groups and the PendingNodes, as plain data.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    pub groups: Vec<GroupView>,
    pub pending: Vec<PendingView>,
    /// Nodes with a cloud instance whose group and image the cloud has not told yet: none of them starts (it
    /// might have to be replaced rather than updated in place).
    pub unresolved: BTreeSet<String>,
    /// Why no instance may be created now: the cluster-autoscaler of an AutoscalingStrategy is not confirmed
    /// down yet (it would scale the groups against the replacement). `None`: instances may be created.
    pub autoscaler_running: Option<String>,
    /// Whether a control-plane donor's etcd member can be removed before its Node is deleted.
    pub etcd: EtcdAccess,
    /// Donors whose instance request's answer was lost, of which the group lists no instance yet, until when a
    /// create sent for it may still make one (no new instance is requested for them before: `Replacer`).
    pub requests_in_flight: BTreeMap<String, Timestamp>,
}

/// What the replacement of a control-plane node may do with its etcd member.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EtcdAccess {
    /// Stacked etcd with a client: the donor's member is removed (once its heir's is a healthy voter), then its
    /// Node deleted.
    Client,
    /// The control-plane nodes run no etcd member (external etcd): nothing to remove.
    External,
    /// Neither configured: a drained control-plane donor is never deleted (its member would stay, and with it
    /// the quorum's size); it is held as [`Reason::EtcdUnavailable`] until the controller is given etcd access.
    #[default]
    Unconfigured,
}

/// A ScalingGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    /// The cloud's ID of the group (`spec.groupId`).
    pub group_id: String,
    /// Its nodes are control-plane nodes (`spec.role: ControlPlane`).
    pub control_plane: bool,
    /// The image new instances get (`status.imageReference`), when known.
    pub image: Option<String>,
}

/// Whether a PendingNode's instance is joining or leaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    Join,
    Leave,
}

/// A PendingNode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingView {
    pub name: String,
    /// The name of the Node the instance has or will have.
    pub node_name: String,
    pub group_id: String,
    pub goal: Goal,
    /// The donor the instance replaces or was, from the `donor` annotation; `None` for PendingNodes no
    /// replacement created.
    pub donor: Option<String>,
    /// `status.reachedGoal`.
    pub reached_goal: bool,
    /// The message of its `JoinFailed` condition when that is True: the instance did not join and was deleted.
    pub join_failed: Option<String>,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
}

/// A taint as the replacement copies it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TaintView {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// The donor a heir replaces, as the heir's annotations record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DonorRef {
    pub name: String,
    pub provider_id: String,
    pub group_id: String,
}

/// What the policy knows of a node a scaling group covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupMember {
    /// The cloud's ID of its group.
    pub group_id: String,
    /// `spec.providerID`.
    pub provider_id: String,
    /// The image the cloud created it from, when the cloud told.
    pub image: Option<String>,
    /// Since when its NodeReady condition is True (its last transition), when Ready.
    pub ready_since: Option<Timestamp>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<TaintView>,
    /// The `heir` annotation (on a donor being drained).
    pub heir: Option<String>,
    /// The `donor` annotations (on a heir).
    pub donor: Option<DonorRef>,
}

/// Whether a joining PendingNode created at `created` is of the replacement attempt whose `intent=replace` began at
/// `since`, and not left by an earlier one: `creationTimestamp` keeps whole seconds, so a record created in the
/// second the intent was written is this attempt's.
pub fn of_attempt(created: Timestamp, since: Timestamp) -> bool {
    shared::protocol::truncate_to_seconds(since) <= created
}

/// The name of the PendingNode of `donor`'s heir: the same for every attempt, so a crash never creates a second.
pub fn join_name(donor: &str) -> String {
    derived_name(JOIN_PREFIX, donor)
}

/// The name of the PendingNode that deletes `donor`'s instance.
pub fn leave_name(donor: &str) -> String {
    derived_name(LEAVE_PREFIX, donor)
}

/// `prefix` + `donor`, or, when that is too long for an object name, a prefix of it with a hash of the name.
fn derived_name(prefix: &str, donor: &str) -> String {
    let name = format!("{prefix}{donor}");
    if name.len() <= MAX_NAME {
        return name;
    }
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let hash = donor.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let suffix = format!("-{hash:016x}");
    // Node names are ASCII, so any byte index is a character boundary.
    let keep = MAX_NAME - suffix.len();
    format!("{}{suffix}", name[..keep].trim_end_matches(['-', '.']))
}

/// The labels of `donor` its heir gets: every one that Kubernetes does not own.
pub fn inherited_labels(donor: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    donor
        .iter()
        .filter(|(key, _)| {
            let prefix = key.split_once('/').map_or("", |(p, _)| p);
            !KUBERNETES_LABEL_SUFFIXES.iter().any(|s| prefix == *s || prefix.ends_with(&format!(".{s}")))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The taints of `donor` an administrator added: not Kubernetes' own, nor the controller's (the shield, and the taint
/// of outdated nodes: the heir runs the target).
pub fn inherited_taints(donor: &[TaintView]) -> Vec<TaintView> {
    let ours = |key: &str| key == SHIELD_TAINT || key == super::taint::OUTDATED_TAINT;
    donor.iter().filter(|t| !t.key.starts_with(KUBERNETES_TAINT_PREFIX) && !ours(&t.key)).cloned().collect()
}
