//! Node replacement: a node of a cloud scaling group (the donor) is replaced by a new instance of its group (the
//! heir) instead of being updated in place.
//!
//! # Flow per donor
//! Each step is decided from the cluster as it is (annotations, PendingNodes, Nodes), so that a controller that
//! restarts at any point resumes where it was:
//! 1. `Replace`: the donor gets `intent=replace` (it holds a `maxUnavailable` slot and a `maxSurge` slot from here
//!    on), once its group's template image is the target.
//! 2. `CreateInstance`: once the cluster-autoscaler is confirmed down, one instance is created in the group and
//!    recorded as a joining PendingNode whose name is derived from the donor's ([`join_name`]), so that a second
//!    one is never created for it.
//! 3. The heir joins and turns Ready (the PendingNode reaches its goal) and passes the soak time. While the
//!    rollout upgrades Kubernetes and the API server reports the target already, a heir that joined with other
//!    Kubernetes components is upgraded first (by [`super::kubernetes`], outside the budget: the donor holds the
//!    slots) and soaks again once verified.
//! 4. `Inherit` (a write of the heir): the `donor` annotations, the donor's labels (all but `kubernetes.io` /
//!    `k8s.io` ones) and the taints an administrator added (not `node.kubernetes.io/*`).
//! 5. `DrainDonor` (a write of the donor): the `heir` annotation, a fresh `intent=replace` whose time starts the
//!    drain timeout, the cordon; then the existing drain.
//! 6. `Retire`: the joining PendingNode is deleted, a control-plane donor's etcd member removed, the donor's Node
//!    deleted.
//! 7. `ReleaseInstance` (decided on the heir once the donor's Node is gone): the donor's instance is deleted
//!    through a leaving PendingNode ([`leave_name`]) and the heir's `donor` annotations removed.
//!
//! # Named end states
//! - The heir never turns Ready (its PendingNode's join failed: the PendingNode controller deleted it at its
//!   deadline): the donor is marked `failed` ([`Reason::HeirNotReady`]), which spends the failure budget.
//! - The donor's drain times out or cannot finish: the donor is marked `blocked` and uncordoned
//!   ([`Reason::DrainTimedOut`], [`Reason::DrainFailed`]); the heir stays and keeps its surge slot.
//! - An instance that cannot be deleted stays a leaving PendingNode, retried and reported by its controller;
//!   it keeps its surge slot.
//!
//! # Invariants (besides the policy's)
//! - At most `maxSurge` replacements of a rollout hold an instance at once: one from `intent=replace` until its
//!   leaving PendingNode is gone; records whose donor is gone count for every rollout.
//! - A donor is cordoned only after its heir was Ready (and soaked), and deleted only once drained.
//! - A control-plane replacement never runs beside a worker replacement, and control-plane ones one at a time.
//! - A replacement in flight finishes for the target it started with, even if the target changes.

use super::assess::{self, Assessment, Situation};
use super::kubernetes::{KubernetesSpec, KubernetesTarget};
use super::{ActionKind, DrainProgress, NodeView, Policy, Reason};
use jiff::Timestamp;
use shared::protocol::{ControllerAnnotations, Intent, Step};
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
const MAX_NAME: usize = 253;

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

/// The taints of `donor` an administrator added.
pub fn inherited_taints(donor: &[TaintView]) -> Vec<TaintView> {
    donor.iter().filter(|t| !t.key.starts_with(KUBERNETES_TAINT_PREFIX) && t.key != SHIELD_TAINT).cloned().collect()
}

/// A rollout's replacements, for its status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub donors: Vec<String>,
    /// Of the donors, those whose drain started (their heir is paired with them).
    pub retiring: Vec<String>,
    pub heirs: Vec<String>,
    pub pending: Vec<String>,
    pub obsolete: Vec<String>,
}

/// The replacements in progress, found from the nodes and PendingNodes, by donor.
#[derive(Debug, Default)]
pub(super) struct Records<'a> {
    /// Donors of replacements holding (or about to hold) an instance, with whether each is a control-plane one.
    active: BTreeMap<String, bool>,
    /// Of those, the donors whose Node is gone.
    donorless: BTreeSet<String>,
    /// The joining PendingNode of each donor.
    join: BTreeMap<&'a str, &'a PendingView>,
    /// Nodes that joined or join as heirs (named by a replacement's PendingNode, or carrying a donor annotation).
    heirs: BTreeSet<&'a str>,
    /// PendingNodes no replacement created, joining: each holds an instance too.
    foreign_joins: u32,
    /// PendingNodes of replacements whose instance is joining or leaving.
    pending: u32,
    /// Every PendingNode of a replacement: (name, donor).
    pending_names: Vec<(&'a str, &'a str)>,
    /// Heirs by donor.
    heir_of: BTreeMap<&'a str, &'a str>,
    /// Donors whose drain started (`intent=replace` and the `heir` annotation).
    retiring: BTreeSet<&'a str>,
}

impl<'a> Records<'a> {
    pub(super) fn find(nodes: &'a [NodeView], fleet: &'a Fleet) -> Records<'a> {
        let names: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        Records::of(nodes, |name| names.contains(name), fleet)
    }

    /// The records of `nodes` and the fleet's PendingNodes; `exists` says whether a Node of that name exists.
    /// Only nodes that [`records_something`] contribute, so `nodes` may be those alone.
    pub(super) fn of(
        nodes: impl IntoIterator<Item = &'a NodeView>,
        exists: impl Fn(&str) -> bool,
        fleet: &'a Fleet,
    ) -> Records<'a> {
        let mut records = Records::default();
        let group_cp = |group_id: &str| fleet.groups.iter().any(|g| g.group_id == group_id && g.control_plane);
        let add = |records: &mut Records<'a>, donor: &str, control_plane: bool| {
            *records.active.entry(donor.to_owned()).or_default() |= control_plane;
            if !exists(donor) {
                records.donorless.insert(donor.to_owned());
            }
        };
        for node in nodes {
            let replacing = intent(node).is_some_and(|i| i.step == Step::Replace);
            let member = node.group.as_ref();
            if replacing || member.is_some_and(|m| m.heir.is_some()) {
                add(&mut records, &node.name, node.control_plane);
            }
            if replacing && member.is_some_and(|m| m.heir.is_some()) {
                records.retiring.insert(node.name.as_str());
            }
            if let Some(donor) = member.and_then(|m| m.donor.as_ref()) {
                records.heirs.insert(node.name.as_str());
                records.heir_of.insert(donor.name.as_str(), node.name.as_str());
                add(&mut records, &donor.name, node.control_plane || group_cp(&donor.group_id));
            }
        }
        for pending in &fleet.pending {
            match &pending.donor {
                Some(donor) => {
                    // A joined instance waits for the controller, not for the cloud: it frees nothing by itself.
                    records.pending += u32::from(!(pending.goal == Goal::Join && pending.reached_goal));
                    add(&mut records, donor, group_cp(&pending.group_id));
                    if pending.goal == Goal::Join || pending.join_failed.is_some() {
                        records.join.insert(donor.as_str(), pending);
                    }
                    if pending.goal == Goal::Join {
                        records.heirs.insert(pending.node_name.as_str());
                        records.heir_of.entry(donor.as_str()).or_insert(pending.node_name.as_str());
                    }
                    records.pending_names.push((pending.name.as_str(), donor.as_str()));
                }
                None if pending.goal == Goal::Join => records.foreign_joins += 1,
                None => {}
            }
        }
        records
    }

    /// The names the records say something of: donors (those with a PendingNode of their replacement among
    /// them) and heirs. Only these nodes' assessments read the records or another node (see [`assess`] and
    /// [`wind_down`]): a node of no replacement reads neither.
    pub(super) fn named(&self) -> impl Iterator<Item = &str> {
        self.active.keys().map(String::as_str).chain(self.heirs.iter().copied())
    }

    /// Whether `node` is a heir (joining or joined for a replacement).
    pub(super) fn is_heir(&self, node: &str) -> bool {
        self.heirs.contains(node)
    }

    /// Whether a control-plane replacement is in progress anywhere.
    pub(super) fn control_plane_active(&self) -> bool {
        self.active.values().any(|cp| *cp)
    }

    /// Whether a worker replacement is in progress anywhere.
    pub(super) fn worker_active(&self) -> bool {
        self.active.values().any(|cp| !*cp)
    }

    /// Whether an instance of a replacement is joining or being deleted, or a donor is gone with its instance
    /// not yet released: replacements that free their surge slot on their own.
    pub(super) fn moving(&self) -> bool {
        !self.donorless.is_empty() || self.pending > 0
    }

    /// The replacements of a rollout of `members`, for its status.
    pub(super) fn listing(&self, members: &[(&NodeView, &Assessment)]) -> Listing {
        let ours = |donor: &str| members.iter().any(|(n, _)| n.name == donor) || self.donorless.contains(donor);
        let mut listing = Listing {
            donors: members
                .iter()
                .filter(|(n, _)| self.active.contains_key(&n.name))
                .map(|(n, _)| n.name.clone())
                .collect(),
            heirs: self.heir_of.iter().filter(|(d, _)| ours(d)).map(|(_, h)| (*h).to_owned()).collect(),
            pending: self.pending_names.iter().filter(|(_, d)| ours(d)).map(|(p, _)| (*p).to_owned()).collect(),
            obsolete: self.donorless.iter().cloned().collect(),
            retiring: members
                .iter()
                .filter(|(n, _)| self.retiring.contains(n.name.as_str()))
                .map(|(n, _)| n.name.clone())
                .collect(),
        };
        listing.heirs.sort();
        listing.heirs.dedup();
        listing.pending.sort();
        listing
    }

    /// [`Records::listing`] of the rollout whose members `member` tells, from the records alone; the same as
    /// `listing` when the members are in name order.
    pub(super) fn listing_of(&self, member: impl Fn(&str) -> bool) -> Listing {
        let ours = |donor: &str| member(donor) || self.donorless.contains(donor);
        Listing {
            donors: self.active.keys().filter(|d| member(d)).cloned().collect(),
            heirs: {
                let heirs: BTreeSet<&str> = self.heir_of.iter().filter(|(d, _)| ours(d)).map(|(_, h)| *h).collect();
                heirs.into_iter().map(str::to_owned).collect()
            },
            pending: {
                let mut pending: Vec<String> =
                    self.pending_names.iter().filter(|(_, d)| ours(d)).map(|(p, _)| (*p).to_owned()).collect();
                pending.sort();
                pending
            },
            obsolete: self.donorless.iter().cloned().collect(),
            retiring: self.retiring.iter().filter(|d| member(d)).map(|d| (*d).to_owned()).collect(),
        }
    }

    /// [`Records::surge_used`] of the rollout whose members `member` tells, from the records alone.
    pub(super) fn surge_used_of(&self, member: impl Fn(&str) -> bool) -> u32 {
        let own = self.active.keys().filter(|d| member(d)).count();
        (own + self.donorless.len()) as u32 + self.foreign_joins
    }

    /// The instances a rollout's replacements hold: those of its members' donors and every one whose donor
    /// is gone (it was some rollout's), and joining instances no replacement created.
    pub(super) fn surge_used(&self, members: &[(&NodeView, &Assessment)]) -> u32 {
        let own = members.iter().filter(|(n, _)| self.active.contains_key(&n.name)).count();
        (own + self.donorless.len()) as u32 + self.foreign_joins
    }
}

/// Whether the node says something of a replacement that [`Records`] records: `intent=replace`, or the `heir`
/// or `donor` annotations.
pub(super) fn records_something(node: &NodeView) -> bool {
    intent(node).is_some_and(|i| i.step == Step::Replace)
        || node.group.as_ref().is_some_and(|m| m.heir.is_some() || m.donor.is_some())
}

/// The nodes by name, as [`assess`] looks up the ones a replacement names (a heir, a donor).
pub(super) trait Lookup {
    fn node(&self, name: &str) -> Option<&NodeView>;
}

/// The nodes as a list.
pub(super) struct Listed<'a>(pub &'a [NodeView]);

impl Lookup for Listed<'_> {
    fn node(&self, name: &str) -> Option<&NodeView> {
        self.0.iter().find(|n| n.name == name)
    }
}

/// What [`assess`] needs beside the node: its group, its own facts, the replacements, every node.
pub(super) struct Context<'a> {
    pub group: &'a GroupView,
    /// No instance may be created yet (see [`Fleet::autoscaler_running`]).
    pub autoscaler_running: bool,
    pub member: &'a GroupMember,
    pub records: &'a Records<'a>,
    pub nodes: &'a dyn Lookup,
    /// The Kubernetes upgrade of the node's rollout, when it asks for one.
    pub kubernetes: Option<&'a KubernetesTarget>,
    /// What may be done with a control-plane donor's etcd member.
    pub etcd: EtcdAccess,
}

impl<'a> Context<'a> {
    /// The context of `node`, when a known scaling group covers it.
    pub(super) fn of(
        node: &'a NodeView,
        fleet: &'a Fleet,
        records: &'a Records<'a>,
        nodes: &'a dyn Lookup,
    ) -> Option<Context<'a>> {
        let member = node.group.as_ref()?;
        let group = fleet.groups.iter().find(|g| g.group_id == member.group_id)?;
        Some(Context {
            group,
            member,
            records,
            nodes,
            autoscaler_running: fleet.autoscaler_running.is_some(),
            kubernetes: None,
            etcd: fleet.etcd,
        })
    }

    /// This context for a rollout with the Kubernetes upgrade `kubernetes` (a refused one asks nothing of heirs).
    pub(super) fn with_kubernetes(self, kubernetes: Option<&'a KubernetesSpec>) -> Context<'a> {
        let kubernetes = match kubernetes {
            Some(KubernetesSpec::Upgrade(target)) => Some(target),
            Some(KubernetesSpec::Refused(_)) | None => None,
        };
        Context { kubernetes, ..self }
    }
}

fn intent(node: &NodeView) -> Option<&Intent> {
    node.controller.as_ref().ok().and_then(|c| c.intent.as_ref())
}

/// The image a group node runs: its agent's report, or else the image the cloud created it from.
fn runs<'a>(node: &'a NodeView, member: &'a GroupMember) -> Option<&'a str> {
    assess::image(node.agent.as_ref().ok()).or(member.image.as_deref())
}

/// One node of a scaling group under a rollout to `target`: a donor's progress, a heir's hand-over, or whether
/// an idle node may start.
pub(super) fn assess(
    node: &NodeView,
    context: &Context<'_>,
    target: &str,
    policy: &Policy,
    now: Timestamp,
) -> Assessment {
    let controller = match &node.controller {
        Ok(c) => c,
        // Unreadable keys: the in-place rules decide (leave it, or remove an unreadable intent of ours).
        Err(_) => return assess::assess(node, assess::Owner::Rollout { target }, policy, now),
    };
    let assessment = match controller.intent.as_ref() {
        Some(intent) if intent.step == Step::Replace => donor(node, intent, context, policy, now),
        // An in-place step in flight finishes in place, a mark of this target stays.
        Some(intent)
            if intent.target == target
                || matches!(intent.step, Step::Stage | Step::Drain | Step::Reboot | Step::KubeadmUpgrade) =>
        {
            assess::assess(node, assess::Owner::Rollout { target }, policy, now)
        }
        _ => idle(node, controller, context, target),
    };
    let mut assessment = release_donor_instance(assessment, node, context, policy, now);
    assessment.surge = context.records.is_heir(&node.name) && context.member.donor.is_none();
    assessment.replace = true;
    assessment
}

/// On a heir whose donor's Node is gone and which has nothing else to do: the donor's instance is released.
fn release_donor_instance(
    assessment: Assessment,
    node: &NodeView,
    context: &Context<'_>,
    policy: &Policy,
    now: Timestamp,
) -> Assessment {
    match &context.member.donor {
        Some(donor) if assessment.action.is_none() && context.nodes.node(&donor.name).is_none() => assessment.act(
            node,
            ActionKind::ReleaseInstance {
                pending: leave_name(&donor.name),
                donor: donor.clone(),
                deadline: assess::deadline(now, policy.leave_timeout),
            },
            Reason::InstanceReleased,
            format!("the replaced node {} is gone; deleting its instance {}", donor.name, donor.provider_id),
        ),
        _ => assessment,
    }
}

/// A node of a scaling group that no NodeVersion moves any more (`reason`: it was deleted, or its selector
/// changed), when a replacement concerns it; `None` when none does (the in-place wind-down applies).
///
/// - A donor whose swap is under way (its heir is a Ready node, or its drain started) finishes it: the heir
///   takes over, the donor is drained (or blocked and uncordoned at the drain timeout) and deleted.
/// - Any other donor's replacement is abandoned: its joining instance is deleted (its PendingNode switches to
///   `Leave`) and the donor released, never left cordoned.
/// - A heir whose donor's Node is gone gets the donor's instance released.
pub(super) fn wind_down(
    node: &NodeView,
    context: &Context<'_>,
    reason: Reason,
    policy: &Policy,
    now: Timestamp,
) -> Option<Assessment> {
    let controller = node.controller.as_ref().ok()?;
    match controller.intent.as_ref() {
        Some(intent) if intent.step == Step::Replace => {
            let join = context.records.join.get(node.name.as_str()).filter(|j| j.goal == Goal::Join);
            // A Ready heir may run pods already: it is never deleted, the swap finishes.
            let heir_ready = join.is_some_and(|j| context.nodes.node(&j.node_name).is_some_and(|n| n.ready));
            if context.member.heir.is_some() || heir_ready {
                return Some(assess(node, context, &intent.target, policy, now));
            }
            let why = if reason == Reason::NotSelected {
                "no NodeVersion's selector selects it any more"
            } else {
                "there is no NodeVersion"
            };
            let message = match join {
                Some(j) => format!(
                    "releasing the node: {why}; deleting the new instance {} (PendingNode {}) that was to replace it",
                    j.node_name, j.name
                ),
                None => format!("releasing the node: {why}; no new instance was recorded for it"),
            };
            let kind = ActionKind::AbandonReplacement {
                join_pending: join.map(|j| j.name.clone()),
                deadline: assess::deadline(now, policy.leave_timeout),
            };
            Some(Assessment::outdated_for_now().act(node, kind, reason, message))
        }
        _ if context.member.donor.is_some() => {
            let base = assess::assess(node, assess::Owner::Nobody { reason }, policy, now);
            Some(release_donor_instance(base, node, context, policy, now))
        }
        _ => None,
    }
}

/// A node whose group the cloud has not told yet: up to date if its agent says so, else held until it is known
/// whether it is replaced or updated in place.
pub(super) fn unresolved(node: &NodeView, target: &str) -> Assessment {
    if assess::image(node.agent.as_ref().ok()) == Some(target) {
        return Assessment::new(Situation::UpToDate);
    }
    let hold = super::Hold::new(
        Reason::ImageUnknown,
        "the cloud did not tell the node's scaling group and image yet (it is asked again shortly)",
    );
    Assessment::new(Situation::Outdated { eligible: false, held: Some(hold) })
}

/// A group node without a replacement of its own: up to date, or outdated and whether it may start.
fn idle(node: &NodeView, controller: &ControllerAnnotations, context: &Context<'_>, target: &str) -> Assessment {
    let base = if runs(node, context.member) == Some(target) {
        Assessment::new(Situation::UpToDate)
    } else {
        let held = if runs(node, context.member).is_none() {
            Some(super::Hold::new(
                Reason::ImageUnknown,
                "neither its agent nor the cloud reported the node's image yet",
            ))
        } else if context.group.image.as_deref() != Some(target) {
            let now = context.group.image.as_deref().unwrap_or("not known yet");
            Some(super::Hold::new(
                Reason::GroupImagePending,
                format!("the image of its scaling group {} is {now}, not {target} yet", context.group.group_id),
            ))
        } else if !node.ready {
            Some(super::Hold::new(Reason::NodeNotReady, "the node is NotReady"))
        } else if node.unschedulable && !controller.cordoned_by_us {
            Some(super::Hold::new(
                Reason::CordonedByOther,
                "someone else cordoned the node; it is replaced once it is uncordoned",
            ))
        } else {
            None
        };
        Assessment::new(Situation::Outdated { eligible: held.is_none(), held })
    };
    assess::leftover_cordon(base, node, controller)
}

/// A donor with `intent=replace`: the next step of its replacement.
fn donor(node: &NodeView, intent: &Intent, context: &Context<'_>, policy: &Policy, now: Timestamp) -> Assessment {
    let target = intent.target.clone();
    let in_flight = || Assessment::new(Situation::InFlight { step: Step::Replace, since: intent.since });
    let member = context.member;
    if let Some(heir) = &member.heir {
        return draining(node, heir, intent, context, policy, now);
    }
    let Some(join) = context.records.join.get(node.name.as_str()) else {
        if context.group.image.as_deref() != Some(target.as_str()) || context.autoscaler_running {
            // The group's image changes back or has not been set yet (no instance of the wrong image), or the
            // cluster-autoscaler is not down yet.
            let mut waiting = in_flight();
            waiting.waiting = Some(if context.autoscaler_running {
                "the cluster-autoscaler to be confirmed down".to_owned()
            } else {
                format!("the image of scaling group {} to be {target}", member.group_id)
            });
            return waiting;
        }
        let deadline = assess::deadline(now, policy.join_timeout);
        return in_flight().act(
            node,
            ActionKind::CreateInstance { group_id: member.group_id.clone(), pending: join_name(&node.name), deadline },
            Reason::InstanceRequested,
            format!("creating a new instance of {} with {target} to replace the node", member.group_id),
        );
    };
    if let Some(why) = &join.join_failed {
        let message = format!("the new instance {} did not become a Ready node: {why}", join.node_name);
        if join.created.is_some_and(|created| created < intent.since) {
            // Left by an earlier attempt: its instance is being deleted; the name is free once it is gone.
            return in_flight();
        }
        return assess::fail(node, target, Reason::HeirNotReady, message);
    }
    // The heir's Node registered (NotReady, so nothing is scheduled on it yet): tainted at once, so that no pod
    // lands on it between its Ready and its inheriting the donor's labels and taints (after its soak).
    if let Some(heir) = context.nodes.node(&join.node_name)
        && let Some(shield) = shield_heir(heir, node, in_flight())
    {
        return shield;
    }
    if !join.reached_goal {
        let mut waiting = in_flight();
        waiting.waiting = Some(format!("the new instance {} to join (PendingNode {})", join.node_name, join.name));
        return waiting;
    }
    let Some(heir) = context.nodes.node(&join.node_name) else {
        // Joined, then its Node went away: wait for it to register again (or for someone to remove the PendingNode).
        return in_flight();
    };
    let heir_member = heir.group.as_ref();
    let ready_since = heir_member.and_then(|m| m.ready_since);
    let Some(ready_since) = ready_since.filter(|_| heir.ready) else { return in_flight() };
    let upgrading = self::intent(heir).is_some_and(|i| matches!(i.step, Step::Drain | Step::KubeadmUpgrade));
    if let Some(kubernetes) = context.kubernetes
        && kubernetes.api_server >= kubernetes.version
        && (upgrading || !super::kubernetes::runs(heir, kubernetes))
    {
        // Its Kubernetes upgrade is started (outside the budget) by the Kubernetes flow.
        let mut waiting = in_flight();
        waiting.waiting = Some(format!(
            "the new node {} to be upgraded from Kubernetes {} to {}",
            heir.name,
            heir.kubelet_version.as_deref().unwrap_or("(unknown)"),
            kubernetes.version
        ));
        return waiting;
    }
    let soaked = assess::deadline(ready_since, policy.soak_time);
    if now < soaked {
        let mut waiting = in_flight().wake(soaked);
        waiting.waiting = Some(format!("the new node {} to soak until {soaked}", heir.name));
        return waiting;
    }
    let labels = inherited_labels(&member.labels);
    let taints = inherited_taints(&member.taints);
    let reference = DonorRef {
        name: node.name.clone(),
        provider_id: member.provider_id.clone(),
        group_id: member.group_id.clone(),
    };
    let inherited = heir_member.is_some_and(|h| {
        h.donor.as_ref() == Some(&reference)
            && labels.iter().all(|(k, v)| h.labels.get(k) == Some(v))
            && taints.iter().all(|t| h.taints.contains(t))
            && !h.taints.iter().any(|t| t.key == SHIELD_TAINT)
    });
    if !inherited {
        let message = format!(
            "{} is Ready with {target}: pairing it with {} and copying {} label(s) and {} taint(s)",
            heir.name,
            node.name,
            labels.len(),
            taints.len()
        );
        return Assessment {
            action: Some(super::NodeAction {
                node: heir.name.clone(),
                kind: ActionKind::Inherit { donor: reference, labels, taints },
                reason: Reason::HeirPaired,
                message,
            }),
            ..in_flight()
        };
    }
    in_flight().act(
        node,
        ActionKind::DrainDonor { target: target.clone(), heir: heir.name.clone() },
        Reason::DrainStarted,
        format!("{} replaces the node; cordoning and draining", heir.name),
    )
}

/// The shield of `heir` (see [`SHIELD_TAINT`]) as `donor`'s next step, when the heir neither carries it nor is
/// paired with the donor already.
fn shield_heir(heir: &NodeView, donor: &NodeView, in_flight: Assessment) -> Option<Assessment> {
    let member = heir.group.as_ref();
    let paired = member.and_then(|h| h.donor.as_ref()).is_some_and(|d| d.name == donor.name);
    let shielded = member.is_some_and(|h| h.taints.iter().any(|t| t.key == SHIELD_TAINT));
    if paired || shielded {
        return None;
    }
    let message = format!("{} joined to replace the node: tainting it NoSchedule until it inherits", heir.name);
    Some(Assessment {
        action: Some(super::NodeAction {
            node: heir.name.clone(),
            kind: ActionKind::Shield { donor: donor.name.clone() },
            reason: Reason::HeirShielded,
            message,
        }),
        ..in_flight
    })
}

/// A donor being drained (its `heir` annotation is written): the drain, then its retirement.
fn draining(
    node: &NodeView,
    heir: &str,
    intent: &Intent,
    context: &Context<'_>,
    policy: &Policy,
    now: Timestamp,
) -> Assessment {
    let in_flight = Assessment::new(Situation::InFlight { step: Step::Replace, since: intent.since });
    match &node.drain {
        DrainProgress::Drained if node.control_plane && context.etcd == EtcdAccess::Unconfigured => {
            let message = format!(
                "drained and replaced by {heir}, but not deleted: its etcd member cannot be removed without etcd \
                 access (--etcd-endpoints, or --external-etcd when the control plane runs no etcd member)"
            );
            Assessment { waiting: Some(message.clone()), ..in_flight }.act(
                node,
                ActionKind::Report,
                Reason::EtcdUnavailable,
                message,
            )
        }
        DrainProgress::Drained => {
            let join_pending = context.records.join.get(node.name.as_str()).map(|p| p.name.clone());
            let remove_etcd_member = node.control_plane && context.etcd == EtcdAccess::Client;
            let etcd = if remove_etcd_member { ", removing its etcd member" } else { "" };
            in_flight.act(
                node,
                ActionKind::Retire { remove_etcd_member, heir: heir.to_owned(), join_pending },
                Reason::DonorRetired,
                format!("drained and replaced by {heir}{etcd}; deleting the Node"),
            )
        }
        DrainProgress::Failed { .. }
        | DrainProgress::Uncordoned
        | DrainProgress::Running { .. }
        | DrainProgress::NotRunning => {
            assess::unfinished_drain(node, intent, policy, now, Step::Replace, &format!("before {heir} takes over"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::budget::MaxUnavailable;
    use crate::policy::tests::{TARGET, node, rollout_with, t, with_intent};
    use crate::policy::{Plan, plan_with};
    use jiff::SignedDuration;

    fn member(group: &str) -> GroupMember {
        GroupMember {
            group_id: group.into(),
            provider_id: "sim://x".into(),
            image: Some("v1".into()),
            ready_since: Some(t(-600)),
            ..Default::default()
        }
    }

    /// `heir` after its Shield: tainted NoSchedule until it inherits.
    fn shielded(mut heir: NodeView, donor: &str) -> NodeView {
        if let Some(m) = &mut heir.group {
            m.taints.push(shield(donor));
        }
        heir
    }

    fn in_group(name: &str, group: &str) -> NodeView {
        NodeView { group: Some(GroupMember { provider_id: format!("sim://{name}"), ..member(group) }), ..node(name) }
    }

    fn fleet(groups: &[(&str, bool, &str)]) -> Fleet {
        let groups = groups
            .iter()
            .map(|(id, cp, image)| GroupView {
                group_id: (*id).into(),
                control_plane: *cp,
                image: Some((*image).into()),
            })
            .collect();
        Fleet { groups, ..Fleet::default() }
    }

    fn policy(surge: u32, max: u32) -> Policy {
        Policy {
            max_surge: crate::policy::budget::MaxSurge::Count(surge),
            max_unavailable: MaxUnavailable::Count(max),
            ..Policy::default()
        }
    }

    fn run(nodes: &[NodeView], fleet: &Fleet, policy: Policy, now: Timestamp) -> Plan {
        plan_with(nodes, &[rollout_with(policy)], fleet, None, now).rollouts.remove(0)
    }

    fn kinds(plan: &Plan) -> Vec<(String, &'static str)> {
        plan.actions.iter().map(|a| (a.node.clone(), a.kind.name())).collect()
    }

    fn replacing(n: NodeView) -> NodeView {
        with_intent(n, Step::Replace, TARGET, "t1", t(0))
    }

    fn join(donor: &str, heir: &str) -> PendingView {
        PendingView {
            name: join_name(donor),
            node_name: heir.into(),
            group_id: "a".into(),
            goal: Goal::Join,
            donor: Some(donor.into()),
            reached_goal: false,
            join_failed: None,
            created: Some(t(1)),
        }
    }

    #[test]
    fn group_nodes_are_replaced_and_the_others_updated_in_place_under_one_budget() {
        let nodes = [in_group("a1", "a"), in_group("a2", "a"), in_group("a3", "a"), node("w1")];
        let p = run(&nodes, &fleet(&[("a", false, TARGET)]), policy(2, 3), t(0));
        // maxUnavailable 3 would allow three, maxSurge 2 allows two replacements; the in-place node takes the
        // third slot.
        assert_eq!(kinds(&p), vec![("a1".into(), "Replace"), ("a2".into(), "Replace"), ("w1".into(), "Stage")]);
        assert_eq!(p.in_flight.iter().filter(|f| f.step == Step::Replace).count(), 2);
        // maxUnavailable holds over both kinds.
        let p = run(&nodes, &fleet(&[("a", false, TARGET)]), policy(5, 1), t(0));
        assert_eq!(kinds(&p), vec![("a1".into(), "Replace")]);
    }

    #[test]
    fn a_percentage_of_surge_counts_the_nodes_to_be_replaced_rounding_up() {
        let nodes: Vec<NodeView> = (0..5).map(|i| in_group(&format!("a{i}"), "a")).collect();
        let policy = Policy { max_surge: crate::policy::budget::MaxSurge::Percent(30), ..policy(1, 5) };
        let p = run(&nodes, &fleet(&[("a", false, TARGET)]), policy, t(0));
        assert_eq!(p.actions.len(), 2, "30% of 5 is 2: {:?}", kinds(&p));
    }

    #[test]
    fn no_replacement_starts_before_the_group_has_the_target_image() {
        let nodes = [in_group("a1", "a")];
        let p = run(&nodes, &fleet(&[("a", false, "v1")]), policy(1, 1), t(0));
        assert!(p.actions.is_empty());
        assert_eq!(p.held[0].hold.reason, Reason::GroupImagePending);
        // A node whose image no one reported is held, not replaced blindly.
        let unknown = NodeView { group: Some(GroupMember { image: None, ..member("a") }), ..node("a1") };
        let unknown = NodeView { agent: Ok(Default::default()), ..unknown };
        let p = run(&[unknown], &fleet(&[("a", false, TARGET)]), policy(1, 1), t(0));
        assert_eq!(p.held[0].hold.reason, Reason::ImageUnknown);
        // A node of a group the fleet does not know is updated in place.
        let p = run(&[in_group("x1", "x")], &fleet(&[("a", false, TARGET)]), policy(1, 1), t(0));
        assert_eq!(kinds(&p), vec![("x1".into(), "Stage")]);
    }

    #[test]
    fn each_step_of_a_replacement_follows_from_the_cluster() {
        let f = fleet(&[("a", false, TARGET)]);
        let mut donor = replacing(in_group("a1", "a"));
        if let Some(m) = &mut donor.group {
            m.labels = [("pool".into(), "a".into()), ("node.kubernetes.io/instance-type".into(), "big".into())].into();
            m.taints = vec![
                TaintView { key: "dedicated".into(), value: None, effect: "NoSchedule".into() },
                TaintView { key: "node.kubernetes.io/unschedulable".into(), value: None, effect: "NoSchedule".into() },
            ];
        }
        // No instance yet: one is created, named after the donor.
        let p = run(&[donor.clone()], &f, policy(1, 1), t(5));
        assert_eq!(
            p.actions[0].kind,
            ActionKind::CreateInstance { group_id: "a".into(), pending: "heir-of-a1".into(), deadline: t(5 + 1800) }
        );
        // Not while the cluster-autoscaler runs.
        let running = Fleet { autoscaler_running: Some("not confirmed down".into()), ..f.clone() };
        let p = run(&[donor.clone()], &running, policy(1, 1), t(5));
        assert!(p.actions.is_empty() && p.counts.in_progress == 1, "{:?}", kinds(&p));
        // Joining: nothing to do, the donor keeps its slot.
        let mut f = f.clone();
        f.pending.push(join("a1", "a1-new"));
        let p = run(&[donor.clone()], &f, policy(1, 1), t(6));
        assert!(p.actions.is_empty());
        assert_eq!(p.counts.in_progress, 1);
        // The status names the donor, its heir and its PendingNode, and what the donor waits for.
        assert_eq!(
            p.in_flight[0].waiting_on.as_deref(),
            Some("the new instance a1-new to join (PendingNode heir-of-a1)")
        );
        assert_eq!(p.replacements.donors, ["a1"]);
        assert_eq!(p.replacements.heirs, ["a1-new"]);
        assert_eq!(p.replacements.pending, ["heir-of-a1"]);
        assert!(p.replacements.obsolete.is_empty() && p.replacements.retiring.is_empty());
        // Joined and Ready, soaked: the heir gets the donor's own labels and an administrator's taints.
        f.pending[0].reached_goal = true;
        let heir = NodeView {
            group: Some(GroupMember { image: Some(TARGET.into()), ready_since: Some(t(10)), ..member("a") }),
            agent: Ok(Default::default()),
            ..node("a1-new")
        };
        // Seen: tainted NoSchedule first (before it is Ready and soaked), so that no pod lands on it before it
        // carries the donor's taints.
        let p = run(&[donor.clone(), heir.clone()], &f, policy(1, 1), t(20));
        assert_eq!(kinds(&p), vec![("a1-new".into(), "Shield")]);
        assert_eq!(p.actions[0].kind, ActionKind::Shield { donor: "a1".into() });
        assert_eq!(p.actions[0].reason, Reason::HeirShielded);
        let heir = shielded(heir, "a1");
        let soaking = Policy { soak_time: SignedDuration::from_secs(60), ..policy(1, 1) };
        let p = run(&[donor.clone(), heir.clone()], &f, soaking.clone(), t(20));
        assert!(p.actions.is_empty() && p.wake_at == Some(t(70)), "{:?}", kinds(&p));
        let p = run(&[donor.clone(), heir.clone()], &f, soaking, t(70));
        let ActionKind::Inherit { donor: reference, labels, taints } = &p.actions[0].kind else {
            panic!("{:?}", p.actions)
        };
        assert_eq!(p.actions[0].node, "a1-new");
        assert_eq!(reference.name, "a1");
        assert_eq!(labels.keys().collect::<Vec<_>>(), ["pool"]);
        assert_eq!(taints.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(), ["dedicated"]);
        // Inherited, the shield still there: inherited again (the same patch removes it).
        let mut heir = heir;
        if let Some(m) = &mut heir.group {
            m.donor = Some(reference.clone());
            m.labels.extend(labels.clone());
            m.taints.extend(taints.clone());
        }
        let p = run(&[donor.clone(), heir.clone()], &f, policy(1, 1), t(80));
        assert_eq!(kinds(&p), vec![("a1-new".into(), "Inherit")]);
        // Inherited, the shield gone: never shielded again; the donor is cordoned and drained.
        if let Some(m) = &mut heir.group {
            m.taints.retain(|t| t.key != SHIELD_TAINT);
        }
        let p = run(&[donor.clone(), heir.clone()], &f, policy(1, 1), t(80));
        assert_eq!(p.actions[0].kind, ActionKind::DrainDonor { target: TARGET.into(), heir: "a1-new".into() });
        // Draining, then drained: retired (a worker: no etcd member).
        let mut draining = with_intent(donor.clone(), Step::Replace, TARGET, "t2", t(80));
        draining.unschedulable = true;
        if let Some(m) = &mut draining.group {
            m.heir = Some("a1-new".into());
        }
        let p = run(&[draining.clone(), heir.clone()], &f, policy(1, 1), t(90));
        assert_eq!(kinds(&p), vec![("a1".into(), "KeepDraining")]);
        assert_eq!(p.replacements.retiring, ["a1"], "its drain started");
        draining.drain = DrainProgress::Drained;
        let p = run(&[draining.clone(), heir.clone()], &f, policy(1, 1), t(95));
        assert_eq!(
            p.actions[0].kind,
            ActionKind::Retire {
                remove_etcd_member: false,
                heir: "a1-new".into(),
                join_pending: Some("heir-of-a1".into())
            }
        );
        // A control-plane donor: deleted only once its etcd member can be removed. Without etcd access it stays,
        // drained and in flight (its slot held), with the reason named; never deleted with its member left.
        let cp = NodeView { control_plane: true, ..draining.clone() };
        assert_eq!(f.etcd, EtcdAccess::Unconfigured, "the default");
        let p = run(&[cp.clone(), heir.clone()], &f, policy(1, 1), t(95));
        assert_eq!(kinds(&p), vec![("a1".into(), "Report")]);
        assert_eq!(p.actions[0].reason, Reason::EtcdUnavailable);
        assert!(
            p.in_flight.iter().any(|i| i.node == "a1" && i.waiting_on.as_deref().is_some_and(|w| w.contains("etcd")))
        );
        let with_client = Fleet { etcd: EtcdAccess::Client, ..f.clone() };
        let p = run(&[cp.clone(), heir.clone()], &with_client, policy(1, 1), t(95));
        assert!(
            matches!(p.actions[0].kind, ActionKind::Retire { remove_etcd_member: true, ref heir, .. } if heir == "a1-new")
        );
        let external = Fleet { etcd: EtcdAccess::External, ..f.clone() };
        let p = run(&[cp, heir.clone()], &external, policy(1, 1), t(95));
        assert!(matches!(p.actions[0].kind, ActionKind::Retire { remove_etcd_member: false, .. }));
        // The donor's Node is gone: its instance is released from the heir's record.
        f.pending.clear();
        let p = run(&[heir.clone()], &f, policy(1, 1), t(100));
        assert_eq!(
            p.actions[0].kind,
            ActionKind::ReleaseInstance {
                pending: "leaving-a1".into(),
                donor: reference.clone(),
                deadline: t(100 + 300)
            }
        );
        assert_eq!(p.counts.up_to_date, 1);
        assert_eq!(p.replacements.obsolete, ["a1"]);
        assert_eq!(p.replacements.heirs, ["a1-new"]);
    }

    #[test]
    fn a_heir_on_an_older_kubernetes_is_upgraded_outside_the_budget_before_it_takes_its_donors_place() {
        use crate::policy::kubernetes::{KubernetesSpec, KubernetesTarget};
        use crate::policy::{Rollout, plan_with};
        use shared::protocol::{AgentState, ComponentsHash, KubeadmIntent, KubeadmRole};
        const VERSION: &str = "v1.34.1";
        const HASH: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
        let upgraded = |mut n: NodeView| {
            n.kubelet_version = Some(VERSION.into());
            if let Ok(a) = &mut n.agent {
                a.components_hash = Some(ComponentsHash::parse("k", HASH).unwrap());
            }
            n
        };
        let run = |nodes: &[NodeView], f: &Fleet, api_server: &str, now: Timestamp| {
            let kubernetes = KubernetesSpec::Upgrade(KubernetesTarget {
                version: VERSION.parse().unwrap(),
                components: "k8s-components-sha256-11".into(),
                hash: HASH.into(),
                api_server: api_server.parse().unwrap(),
            });
            let rollout = Rollout { kubernetes: Some(kubernetes), ..rollout_with(policy(1, 1)) };
            plan_with(nodes, &[rollout], f, None, now).rollouts.remove(0)
        };
        let mut f = fleet(&[("a", false, TARGET)]);
        f.pending.push(PendingView { reached_goal: true, ..join("a1", "a1-new") });
        // The donor runs the version (upgraded in place first); its heir joined with the group's old one.
        let donor = upgraded(replacing(in_group("a1", "a")));
        let heir = NodeView {
            group: Some(GroupMember { image: Some(TARGET.into()), ready_since: Some(t(10)), ..member("a") }),
            ..node("a1-new")
        };
        let heir = shielded(heir, "a1");
        let p = run(&[donor.clone(), heir.clone()], &f, VERSION, t(20));
        // The donor holds the only slot; the heir is drained for its upgrade all the same, and not paired.
        assert_eq!(kinds(&p), vec![("a1-new".into(), "Drain")]);
        assert_eq!(p.actions[0].kind, ActionKind::Drain { target: VERSION.into() });
        let donor_waits = p.in_flight.iter().find(|f| f.node == "a1").and_then(|f| f.waiting_on.clone());
        assert_eq!(
            donor_waits.as_deref(),
            Some("the new node a1-new to be upgraded from Kubernetes v1.33.0 to v1.34.1")
        );
        // Drained: kubeadm upgrade node, still not paired.
        let draining = with_intent(heir.clone(), Step::Drain, VERSION, "h1", t(20));
        let drained = NodeView { drain: DrainProgress::Drained, ..draining };
        let p = run(&[donor.clone(), drained], &f, VERSION, t(25));
        let kubeadm = KubeadmIntent { components: "k8s-components-sha256-11".into(), role: KubeadmRole::Node };
        assert_eq!(kinds(&p), vec![("a1-new".into(), "KubeadmUpgrade")]);
        assert!(matches!(&p.actions[0].kind, ActionKind::KubeadmUpgrade { kubeadm: k, .. } if *k == kubeadm));
        // Upgraded and verified: it takes its donor's place.
        let mut verified = upgraded(with_intent(heir.clone(), Step::KubeadmUpgrade, VERSION, "h2", t(25)));
        if let Ok(c) = &mut verified.controller
            && let Some(i) = &mut c.intent
        {
            i.kubeadm = Some(kubeadm);
        }
        let verified = crate::policy::tests::with_report(verified, AgentState::Done, "h2");
        let p = run(&[donor.clone(), verified], &f, VERSION, t(30));
        assert_eq!(kinds(&p), vec![("a1-new".into(), "Done")]);
        let done = upgraded(with_intent(heir.clone(), Step::Done, VERSION, "h3", t(30)));
        let done = NodeView { unschedulable: false, ..done };
        let p = run(&[donor.clone(), done], &f, VERSION, t(40));
        assert_eq!(kinds(&p), vec![("a1-new".into(), "Inherit")]);
        // While the API server is older than the version (the control plane is not upgraded yet), the heir
        // cannot run `kubeadm upgrade node`: it takes its place as it is and is upgraded later with the others.
        let donor_old = replacing(in_group("a1", "a"));
        let p = run(&[donor_old, heir], &f, "v1.33.5", t(20));
        assert_eq!(kinds(&p), vec![("a1-new".into(), "Inherit")]);
    }

    #[test]
    fn a_heir_that_never_joined_fails_its_donor_and_a_stuck_drain_blocks_it() {
        let mut f = fleet(&[("a", false, TARGET)]);
        let mut failed = join("a1", "a1-new");
        failed.goal = Goal::Leave;
        failed.join_failed = Some("DeadlineExceeded: not Ready by 12:00".into());
        f.pending.push(failed);
        let donor = replacing(in_group("a1", "a"));
        let p = run(&[donor], &f, policy(1, 1), t(10));
        assert_eq!(p.actions[0].kind, ActionKind::Fail { target: TARGET.into() });
        assert_eq!(p.actions[0].reason, Reason::HeirNotReady);
        assert_eq!(p.counts.failed, 1);
        // A failed join left by an earlier attempt only makes a new attempt wait for its instance to go.
        let later = with_intent(in_group("a1", "a"), Step::Replace, TARGET, "t3", t(20));
        let p = run(&[later], &f, policy(1, 1), t(30));
        assert!(p.actions.is_empty() && p.counts.in_progress == 1, "{:?}", kinds(&p));

        let mut draining = with_intent(in_group("a1", "a"), Step::Replace, TARGET, "t2", t(0));
        draining.unschedulable = true;
        if let Ok(c) = &mut draining.controller {
            c.cordoned_by_us = true;
        }
        if let Some(m) = &mut draining.group {
            m.heir = Some("a1-new".into());
        }
        draining.drain = DrainProgress::Running { waiting_on: Some("pod x (PDB y)".into()) };
        let p = run(&[draining], &fleet(&[("a", false, TARGET)]), policy(1, 1), t(601));
        assert_eq!(p.actions[0].kind, ActionKind::Block { target: TARGET.into() });
        assert_eq!(p.actions[0].reason, Reason::DrainTimedOut);
        assert!(p.actions[0].message.contains("pod x"), "{}", p.actions[0].message);
    }

    #[test]
    fn a_control_plane_and_a_worker_are_never_replaced_at_once() {
        let f = fleet(&[("cp", true, TARGET), ("a", false, TARGET)]);
        let cp = NodeView { control_plane: true, ..in_group("cp1", "cp") };
        // A worker replacement in flight (from an earlier target order): the control-plane node waits.
        let worker = replacing(in_group("a1", "a"));
        let p = run(&[cp.clone(), worker], &f, policy(3, 3), t(0));
        assert!(!p.actions.iter().any(|a| a.node == "cp1"), "{:?}", kinds(&p));
        // A control-plane donor gone while its instance is deleted: workers (of both kinds) wait.
        let mut f = f.clone();
        f.pending.push(PendingView { goal: Goal::Leave, group_id: "cp".into(), ..join("cp0", "cp0") });
        let p = run(&[in_group("a1", "a"), node("w1")], &f, policy(3, 3), t(0));
        assert!(p.actions.is_empty(), "{:?}", kinds(&p));
        assert_eq!(p.hold.map(|h| h.reason), Some(Reason::WaitingForControlPlane));
    }

    /// A new leader's first rounds, before the cloud told the group of a donor whose replacement is under way: the
    /// donor keeps its slot and waits, named; no `UnsupportedStep` warning for a step this controller drives.
    #[test]
    fn a_donor_whose_group_is_not_known_yet_waits_in_flight_without_a_warning() {
        let mut f = fleet(&[("a", false, TARGET)]);
        let donor = NodeView { group: None, ..replacing(in_group("a1", "a")) };
        f.unresolved.insert("a1".into());
        let p = run(&[donor.clone(), node("w1")], &f, policy(1, 1), t(5));
        assert!(p.actions.iter().all(|a| a.reason != Reason::UnsupportedStep), "{:?}", p.actions);
        assert!(p.actions.iter().all(|a| !a.starts_node()), "its slot is held: {:?}", p.actions);
        let waiting = p.in_flight.iter().find(|i| i.node == "a1").and_then(|i| i.waiting_on.clone());
        assert!(waiting.is_some_and(|w| w.contains("scaling group")));
        assert_eq!(p.counts.in_progress, 1);
    }

    #[test]
    fn joining_heirs_are_extra_capacity_and_surge_is_held_until_the_old_instance_is_gone() {
        let mut f = fleet(&[("a", false, TARGET)]);
        f.pending.push(join("a1", "a1-new"));
        let heir = NodeView {
            ready: false,
            agent: Ok(Default::default()),
            group: Some(GroupMember { image: Some(TARGET.into()), ready_since: None, ..member("a") }),
            ..node("a1-new")
        };
        let nodes = [replacing(in_group("a1", "a")), shielded(heir, "a1"), in_group("a2", "a"), node("w1")];
        // The NotReady heir does not take a maxUnavailable slot; the surge of 1 is taken, so a2 waits and the
        // in-place node takes the free slot.
        let p = run(&nodes, &f, policy(1, 2), t(0));
        assert_eq!(kinds(&p), vec![("w1".into(), "Stage")]);
        // A leaving instance whose donor is gone still holds the surge slot, for every rollout.
        let mut f = fleet(&[("a", false, TARGET)]);
        f.pending.push(PendingView { goal: Goal::Leave, ..join("a0", "a0") });
        let p = run(&[in_group("a2", "a")], &f, policy(1, 2), t(0));
        assert!(p.actions.is_empty() && p.hold.is_none(), "{:?} {:?}", kinds(&p), p.hold);
        // A blocked donor whose heir stays takes it for good: that is said.
        let mut blocked = with_intent(in_group("a0", "a"), Step::Blocked, TARGET, "t1", t(0));
        if let Some(m) = &mut blocked.group {
            m.heir = Some("a0-new".into());
        }
        // (Its joined PendingNode stays until the donor is retired: it frees nothing by itself.)
        let mut f = fleet(&[("a", false, TARGET)]);
        f.pending.push(PendingView { reached_goal: true, ..join("a0", "a0-new") });
        let p = run(&[blocked, in_group("a2", "a")], &f, policy(1, 2), t(0));
        assert!(p.actions.is_empty());
        assert_eq!(p.hold.map(|h| h.reason), Some(Reason::SurgeExhausted));
    }

    #[test]
    fn without_a_node_version_a_swap_under_way_finishes_and_any_other_replacement_is_abandoned() {
        let f = fleet(&[("a", false, TARGET)]);
        let unowned = |nodes: &[NodeView], f: &Fleet| plan_with(nodes, &[], f, None, t(50)).unowned;
        // No instance recorded yet: the donor is released, nothing is created.
        let p = unowned(&[replacing(in_group("a1", "a"))], &f);
        assert_eq!(
            p.actions.iter().map(|a| (a.node.as_str(), &a.kind)).collect::<Vec<_>>(),
            [("a1", &ActionKind::AbandonReplacement { join_pending: None, deadline: t(50 + 300) })]
        );
        assert_eq!(p.actions[0].reason, Reason::NoNodeVersion);
        // Joining: its instance is deleted and the donor released.
        let mut joining = f.clone();
        joining.pending.push(join("a1", "a1-new"));
        let heir = shielded(NodeView { ready: false, ..in_group("a1-new", "a") }, "a1");
        let p = unowned(&[replacing(in_group("a1", "a")), heir.clone()], &joining);
        assert_eq!(
            p.actions[0].kind,
            ActionKind::AbandonReplacement { join_pending: Some("heir-of-a1".into()), deadline: t(50 + 300) }
        );
        assert!(ActionKind::AbandonReplacement { join_pending: None, deadline: t(0) }.uncordons());
        // The heir is a Ready node: the swap goes on (it is paired with the donor).
        joining.pending[0].reached_goal = true;
        let ready = NodeView { ready: true, ..heir };
        let p = unowned(&[replacing(in_group("a1", "a")), ready.clone()], &joining);
        assert_eq!(kinds(&p), vec![("a1-new".into(), "Inherit")]);
        // A donor being drained goes on to its retirement.
        let mut draining = with_intent(in_group("a1", "a"), Step::Replace, TARGET, "t2", t(40));
        draining.unschedulable = true;
        draining.drain = DrainProgress::Drained;
        if let Some(m) = &mut draining.group {
            m.heir = Some("a1-new".into());
        }
        let p = unowned(&[draining, ready.clone()], &joining);
        assert_eq!(kinds(&p), vec![("a1".into(), "Retire")]);
        // The donor is gone: the heir releases its instance.
        let mut heir = ready;
        if let Some(m) = &mut heir.group {
            m.donor = Some(DonorRef { name: "a1".into(), provider_id: "sim://a1".into(), group_id: "a".into() });
        }
        let p = unowned(&[heir.clone()], &f);
        assert_eq!(kinds(&p), vec![("a1-new".into(), "ReleaseInstance")]);
        // Nothing of a replacement: the in-place wind-down (no action for an idle node).
        assert!(unowned(&[in_group("a2", "a")], &f).actions.is_empty());
    }

    #[test]
    fn a_node_whose_group_is_not_known_yet_waits() {
        let mut f = fleet(&[("a", false, TARGET)]);
        f.unresolved.insert("x1".into());
        let p = run(&[node("x1"), node("w1")], &f, policy(1, 2), t(0));
        assert_eq!(kinds(&p), vec![("w1".into(), "Stage")]);
        assert_eq!(p.held[0].hold.reason, Reason::ImageUnknown);
    }

    #[test]
    fn kubernetes_labels_and_taints_stay_behind() {
        let labels: BTreeMap<String, String> = [
            ("pool", "a"),
            ("kubernetes.io/hostname", "x"),
            ("node-role.kubernetes.io/worker", ""),
            ("topology.k8s.io/zone", "z"),
            ("example.com/team", "t"),
            ("notkubernetes.io/x", "kept"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let kept: Vec<String> = inherited_labels(&labels).into_keys().collect();
        assert_eq!(kept, ["example.com/team", "notkubernetes.io/x", "pool"]);
    }

    #[test]
    fn derived_names_are_stable_and_fit_an_object_name() {
        assert_eq!(join_name("a1"), "heir-of-a1");
        assert_eq!(leave_name("a1"), "leaving-a1");
        let long = "n".repeat(253);
        let name = join_name(&long);
        assert!(name.len() <= MAX_NAME, "{}", name.len());
        assert_eq!(name, join_name(&long));
        assert_ne!(name, join_name(&format!("{}m", "n".repeat(252))));
    }
}
