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

pub use super::fleet::{
    DonorRef, EtcdAccess, Fleet, Goal, GroupMember, GroupView, PendingView, SHIELD_TAINT, TaintView, inherited_labels,
    inherited_taints, join_name, leave_name, of_attempt, shield,
};

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
    /// Until when a create sent for the node's unrecorded instance request may still make an instance (see
    /// [`Fleet::requests_in_flight`]).
    pub request_in_flight: Option<Timestamp>,
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
            request_in_flight: fleet.requests_in_flight.get(&node.name).copied(),
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
                || matches!(
                    intent.step,
                    Step::Stage | Step::Fetch | Step::Drain | Step::Reboot | Step::KubeadmUpgrade
                ) =>
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
        let mut creating = in_flight().act(
            node,
            ActionKind::CreateInstance { group_id: member.group_id.clone(), pending: join_name(&node.name), deadline },
            Reason::InstanceRequested,
            format!("creating a new instance of {} with {target} to replace the node", member.group_id),
        );
        // The step is still asked for (it adopts the instance once listed), and the status says why nothing joins.
        if let Some(until) = context.request_in_flight.filter(|until| now < *until) {
            creating.waiting = Some(format!(
                "the instance requested for the node (its answer lost, none listed yet): a create sent for it may still make one until {until} ({})",
                Reason::InstanceRequestInFlight
            ));
        }
        return creating;
    };
    if let Some(why) = &join.join_failed {
        let message = format!("the new instance {} did not become a Ready node: {why}", join.node_name);
        if join.created.is_some_and(|created| !of_attempt(created, intent.since)) {
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
#[path = "replacement_tests.rs"]
mod tests;
