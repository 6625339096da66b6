//! The cloud side of node replacement: what the policy reads (scaling groups, PendingNodes, each node's group and
//! image as the cloud tells them) and the replacement's steps that are not a Node write (create an instance,
//! retire a donor, release its instance).
//!
//! # Guarantees
//! - The group and image of an instance are asked of the cloud once (both are fixed for an instance); a node whose
//!   answer failed is named in [`Fleet::unresolved`], so it is not updated in place by mistake.
//! - One instance per donor: the joining PendingNode has a name derived from the donor's; an instance created but
//!   not yet recorded is remembered, so the next attempt records it instead of creating another.
//! - Every write (cloud or API) starts only within the caller's leadership term.
//!
//! Creating a donor's new instance is [`create`]'s; retiring a donor and releasing its old instance [`retire`]'s.

mod create;
mod retire;

use crate::etcd::{Members, NodeRef, Removal};
use crate::events::{Events, node_reference};
use crate::groups::pending_node::JOIN_FAILED;
use crate::leadership::Term;
use crate::nodes::SlimNode;
use crate::policy::EtcdAccess;
use crate::policy::replacement::{Goal, GroupView, PendingView, join_name};
use crate::policy::{DonorRef, Fleet, GroupMember, Reason, TaintView};
use cloud::{CloudProvider, Creation, CreationToken, GroupId, NewInstance, ProviderId};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use shared::crd::{NodeRole, PendingNode, PendingNodeGoal, PendingNodeSpec};
use shared::protocol::keys;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::groups::instances::{Instance, Instances};
use crate::groups::unrecorded::{self, Named, Resolution};
use create::{InFlight, Own};

/// One instance requested for a donor, as [`Replacer::create_instance`] records it.
#[derive(Debug, Clone, Copy)]
pub struct InstanceRequest<'a> {
    /// The node the instance replaces.
    pub donor: &'a SlimNode,
    /// The donor's scaling group, where the instance is created.
    pub group_id: &'a str,
    /// The name of the joining PendingNode that records it.
    pub pending: &'a str,
    /// The join deadline.
    pub deadline: Timestamp,
}

/// Why a donor was not retired.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetireError {
    /// Its etcd member could not be removed (no client, etcd unreachable or refusing, the heir's member not yet a
    /// healthy voter): the Node stays ([`crate::policy::Reason::EtcdUnavailable`]).
    #[error("{0}")]
    Etcd(String),
    /// The API server, or leadership ended.
    #[error("{0}")]
    Other(String),
}

/// The replacement's cloud and PendingNode plumbing.
pub struct Replacer {
    provider: Arc<dyn CloudProvider>,
    pending_api: Api<PendingNode>,
    nodes_api: Api<Node>,
    groups: Store<shared::crd::ScalingGroup>,
    pending: Store<PendingNode>,
    strategies: Store<shared::crd::AutoscalingStrategy>,
    /// Where control-plane donors' etcd members are, and how they are removed.
    etcd: Members,
    /// What the cloud said about each instance.
    instances: Instances,
    /// Nodes whose group the cloud has not told (yet, or the last time asked).
    unresolved: Mutex<BTreeSet<String>>,
    /// Instances created but not yet recorded as a PendingNode, with their group, by PendingNode name.
    created: Mutex<HashMap<String, (String, NewInstance)>>,
    /// Creations the cloud has not named yet, by PendingNode name.
    unnamed: Mutex<HashMap<String, CreationToken>>,
    /// Nodes adopted for an unrecorded instance request (never adopted twice).
    claimed: Mutex<BTreeSet<String>>,
    /// The instance requests this process made or resolved, by joining PendingNode name: a donor's mark that one of
    /// them wrote is not an unrecorded request (see [`Own`]).
    own: Mutex<HashMap<String, Own>>,
    /// The provider IDs the cluster names: every Node's, and the donors' an heir names (a retired donor's instance
    /// until it is released). An instance of a group's list that none of these nor a PendingNode names is unknown.
    named: Mutex<Vec<(String, Option<Timestamp>)>>,
    /// Where the resolution of an unrecorded request is told (set once the controller publishes Events).
    events: std::sync::OnceLock<Events>,
    /// How long after its mark a create sent for a request may still make an instance (see
    /// [`crate::groups::CloudOptions::create_in_flight`]).
    create_in_flight: std::time::Duration,
    /// The unrecorded requests found in flight (see [`Fleet::requests_in_flight`]), by joining PendingNode name:
    /// told once per mark, forgotten once resolved.
    in_flight: Mutex<HashMap<String, InFlight>>,
    /// The autoscaler's pause request (`None`: none read, as in `plan`, where only the strategies' status counts).
    pause: Option<tokio::sync::watch::Receiver<Option<crate::groups::autoscaler::Pause>>>,
}

impl Replacer {
    /// `groups`, `pending` and `strategies` are synced stores of the ScalingGroups, PendingNodes and
    /// AutoscalingStrategies (no instance is created while an autoscaler is not confirmed down); `etcd` removes the members
    /// of control-plane donors: without a client, a drained control-plane donor is not deleted (see
    /// [`EtcdAccess::Unconfigured`]) unless the control plane runs no etcd member.
    pub fn new(
        client: Client,
        provider: Arc<dyn CloudProvider>,
        groups: Store<shared::crd::ScalingGroup>,
        pending: Store<PendingNode>,
        strategies: Store<shared::crd::AutoscalingStrategy>,
        etcd: Members,
        instances: Instances,
    ) -> Replacer {
        Replacer {
            provider,
            pending_api: Api::all(client.clone()),
            nodes_api: Api::all(client),
            groups,
            pending,
            strategies,
            etcd,
            instances,
            unresolved: Mutex::default(),
            created: Mutex::default(),
            unnamed: Mutex::default(),
            claimed: Mutex::default(),
            own: Mutex::default(),
            named: Mutex::default(),
            events: std::sync::OnceLock::new(),
            create_in_flight: crate::groups::default_create_in_flight(),
            in_flight: Mutex::default(),
            pause: None,
        }
    }

    /// This replacer taking an unrecorded request as having made no instance only `create_in_flight` after its
    /// mark (see [`crate::groups::CloudOptions::create_in_flight`]).
    pub fn with_create_in_flight(mut self, create_in_flight: std::time::Duration) -> Self {
        self.create_in_flight = create_in_flight;
        self
    }

    /// Publishes the resolution of unrecorded instance requests as Events on the donor through `events`.
    pub fn set_events(&self, events: Events) {
        let _ = self.events.set(events);
    }

    /// This replacer with the autoscaler's pause request: while none is wanted, an autoscaler that its strategy
    /// would run is taken as running, even if the strategy's status still says it is down (it is about to be
    /// restored).
    pub fn with_pause(mut self, pause: tokio::sync::watch::Receiver<Option<crate::groups::autoscaler::Pause>>) -> Self {
        self.pause = Some(pause);
        self
    }

    /// Has the cloud asked (in the background, see [`Instances`]) for the group and image of every node of this
    /// cloud not known yet; forgets instances gone. The nodes not known yet are [`Fleet::unresolved`] until an
    /// answer comes (each answer wakes the reconcile). Returns whether some answer failed (plan again later).
    ///
    /// `nodes` are all the cluster's nodes: what is remembered for a node that is gone is forgotten (see
    /// [`forget_gone`]).
    pub fn learn<'a>(&self, nodes: impl IntoIterator<Item = &'a SlimNode>) -> bool {
        let nodes: Vec<&SlimNode> = nodes.into_iter().collect();
        let unknown = self.instances.refresh(
            nodes.iter().filter_map(|n| Some(Instance { node: n.name(), provider_id: n.spec.provider_id.as_deref()? })),
        );
        *self.unresolved.lock() = unknown.nodes;
        *self.named.lock() = nodes
            .iter()
            .flat_map(|n| {
                let created = n.metadata.creation_timestamp.as_ref().map(|t| t.0);
                let own = n.spec.provider_id.clone().map(|id| (id, created));
                let donor = n.annotations().get(keys::DONOR_PROVIDER_ID).map(|id| (id.clone(), None));
                own.into_iter().chain(donor)
            })
            .collect();
        let names: BTreeSet<&str> = nodes.iter().map(|n| n.name()).collect();
        forget_gone(&names, &mut self.claimed.lock(), &mut self.unnamed.lock(), &mut self.created.lock());
        if !self.own.lock().is_empty() || !self.in_flight.lock().is_empty() {
            let joins: BTreeSet<String> = names.iter().map(|donor| join_name(donor)).collect();
            self.own.lock().retain(|pending, _| joins.contains(pending));
            self.in_flight.lock().retain(|pending, _| joins.contains(pending));
        }
        // A creation is remembered until the store shows its record: a step run again before then records the
        // same instance again instead of resolving its request anew.
        if !self.created.lock().is_empty() {
            let recorded: BTreeSet<String> = self.pending.state().iter().map(|p| p.name_any()).collect();
            self.created.lock().retain(|pending, _| !recorded.contains(pending));
        }
        unknown.failed
    }

    /// The scaling groups, PendingNodes and unresolved nodes, for the policy.
    pub fn fleet(&self) -> Fleet {
        let groups = self.groups.state().iter().map(|g| group_view(g)).collect();
        let pending = self.pending.state().iter().map(|p| pending_view(p)).collect();
        let lifted = self.pause.as_ref().is_some_and(|p| !p.borrow().as_ref().is_some_and(|p| p.wanted));
        let strategies = self.strategies.state();
        let autoscaler_running = strategies
            .iter()
            .find(|s| !crate::groups::autoscaler::confirmed_down(s))
            .map(|s| format!("the cluster-autoscaler of AutoscalingStrategy {} is not confirmed down", s.name_any()))
            .or_else(|| {
                // Down, but no pause is asked for now: it is being restored (the strategy's status follows).
                strategies.iter().find(|s| lifted && s.spec.enabled).map(|s| {
                    format!(
                        "the cluster-autoscaler of AutoscalingStrategy {} is to be restored (no pause is asked for now)",
                        s.name_any()
                    )
                })
            });
        Fleet {
            groups,
            pending,
            unresolved: self.unresolved.lock().clone(),
            autoscaler_running,
            etcd: match self.etcd {
                Members::Client(_) => EtcdAccess::Client,
                Members::External => EtcdAccess::External,
                Members::Unconfigured => EtcdAccess::Unconfigured,
            },
            requests_in_flight: self.in_flight.lock().values().map(|w| (w.donor.clone(), w.until)).collect(),
        }
    }

    /// What the policy needs of `node` when the cloud has it in a group.
    pub fn member(&self, node: &SlimNode) -> Option<GroupMember> {
        let provider_id = node.spec.provider_id.as_deref()?;
        let (group_id, image) = self.instances.get(provider_id).flatten()?;
        Some(member_of(node, group_id, Some(image)))
    }

    /// An Event on `donor` (when the controller publishes Events).
    fn tell(&self, donor: &SlimNode, reason: Reason, message: String) {
        if let Some(events) = self.events.get() {
            let reference = node_reference(donor.name(), donor.uid());
            events.publish(reference, None, reason, message, "Replace");
        }
    }

    /// The nodes of `nodes` in the group `group_id`, as the cloud told them.
    pub fn group_nodes(&self, nodes: &HashMap<String, SlimNode>, group_id: &str) -> HashMap<String, SlimNode> {
        nodes
            .iter()
            .filter(|(_, n)| self.group_of(n).as_deref() == Some(group_id))
            .map(|(name, n)| (name.clone(), n.clone()))
            .collect()
    }

    /// The cloud's group of `node`, when learned.
    fn group_of(&self, node: &SlimNode) -> Option<String> {
        let id = node.spec.provider_id.as_ref()?;
        self.instances.get(id).flatten().map(|(group, _)| group)
    }

    /// Writes (`Some`) or removes (`None`) [`keys::INSTANCE_REQUESTED`] on `donor`.
    async fn mark_requested(&self, term: &Term, donor: &SlimNode, at: Option<Timestamp>) -> Result<(), String> {
        let value = at.map(|t| shared::protocol::truncate_to_millis(t).to_string());
        let patch = serde_json::json!({"metadata": {"annotations": {keys::INSTANCE_REQUESTED: value}}});
        let params = kube::api::PatchParams::default();
        match within(term, self.nodes_api.patch(donor.name(), &params, &kube::api::Patch::Merge(patch))).await? {
            Ok(_) => Ok(()),
            Err(error) => Err(format!("cannot mark the instance request on {}: {error}", donor.name())),
        }
    }

    /// Creates the PendingNode `name` of `donor`'s replacement; one that exists already is fine (same name, same
    /// replacement).
    async fn record(&self, term: &Term, name: &str, donor: &str, spec: PendingNodeSpec) -> Result<(), String> {
        let object = PendingNode {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                annotations: Some(BTreeMap::from([(keys::DONOR.to_owned(), donor.to_owned())])),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        };
        match within(term, self.pending_api.create(&PostParams::default(), &object)).await? {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(error) => Err(format!("cannot create PendingNode {name}: {error}")),
        }
    }
}

/// The policy's view of a ScalingGroup.
pub fn group_view(g: &shared::crd::ScalingGroup) -> GroupView {
    GroupView {
        group_id: g.spec.group_id.clone(),
        control_plane: g.spec.role == Some(NodeRole::ControlPlane),
        image: g.status.as_ref().and_then(|s| s.image_reference.clone()),
    }
}

/// Bounds what the replacer remembers per node by the nodes there are (`names`): a node adopted (`claimed`) is
/// forgotten once it is gone (it cannot be adopted again then), and a creation not yet named (`unnamed`) or not
/// yet recorded (`created`), kept by the joining PendingNode's name, once its donor is gone (only a donor's
/// replacement records it; nothing would ever read it again).
fn forget_gone<T, U>(
    names: &BTreeSet<&str>,
    claimed: &mut BTreeSet<String>,
    unnamed: &mut HashMap<String, T>,
    created: &mut HashMap<String, U>,
) {
    claimed.retain(|node| names.contains(node.as_str()));
    if unnamed.is_empty() && created.is_empty() {
        return;
    }
    let joins: BTreeSet<String> = names.iter().map(|donor| join_name(donor)).collect();
    unnamed.retain(|pending, _| joins.contains(pending));
    created.retain(|pending, _| joins.contains(pending));
}

/// What the policy needs of `node`, a member of `group_id` created from `image` (when known).
pub fn member_of(node: &SlimNode, group_id: String, image: Option<String>) -> GroupMember {
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let ready_since = node
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .map(|c| c.last_transition_time.as_ref().map_or(Timestamp::UNIX_EPOCH, |t| t.0));
    let donor = match (
        annotations.get(keys::DONOR),
        annotations.get(keys::DONOR_PROVIDER_ID),
        annotations.get(keys::DONOR_GROUP),
    ) {
        (Some(name), Some(provider_id), Some(group_id)) => {
            Some(DonorRef { name: name.clone(), provider_id: provider_id.clone(), group_id: group_id.clone() })
        }
        _ => None,
    };
    GroupMember {
        group_id,
        provider_id: node.spec.provider_id.clone().unwrap_or_default(),
        image,
        ready_since,
        labels: node.metadata.labels.clone().unwrap_or_default(),
        taints: node.spec.taints.iter().map(taint_view).collect(),
        heir: annotations.get(keys::HEIR).cloned(),
        donor,
    }
}

/// The policy's view of a PendingNode.
pub fn pending_view(p: &PendingNode) -> PendingView {
    let status = p.status.as_ref();
    PendingView {
        name: p.name_any(),
        node_name: p.spec.node_name.clone(),
        group_id: p.spec.group_id.clone(),
        goal: match p.spec.goal {
            PendingNodeGoal::Join => Goal::Join,
            PendingNodeGoal::Leave => Goal::Leave,
        },
        donor: p.annotations().get(keys::DONOR).cloned(),
        reached_goal: status.is_some_and(|s| s.reached_goal),
        join_failed: status
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == JOIN_FAILED && c.status == "True"))
            .map(|c| format!("{}: {}", c.reason, c.message)),
        created: p.metadata.creation_timestamp.as_ref().map(|t| t.0),
    }
}

/// A Node's taint as the policy compares it.
pub fn taint_view(t: &Taint) -> TaintView {
    TaintView { key: t.key.clone(), value: t.value.clone(), effect: t.effect.clone() }
}

/// A taint to write.
pub fn taint(t: &TaintView) -> Taint {
    Taint { key: t.key.clone(), value: t.value.clone(), effect: t.effect.clone(), time_added: None }
}

/// Runs `write` within `term`: its error, or that the term ended, as a message.
async fn fence<T, E: std::fmt::Display, F: std::future::Future<Output = Result<T, E>>>(
    term: &Term,
    write: F,
) -> Result<T, String> {
    match within(term, write).await? {
        Ok(value) => Ok(value),
        Err(error) => Err(error.to_string()),
    }
}

/// Runs `write` within `term`; the error says the term ended (nothing was written, or the write was cut).
async fn within<F: std::future::Future>(term: &Term, write: F) -> Result<F::Output, String> {
    term.fence(write).await.map_err(|_| "leadership ended; the write was not made".to_owned())
}

/// A delete's result where "not found" means done.
fn gone_is_fine<T>(result: Result<T, kube::Error>) -> Result<(), String> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 27 item 3k: the replacer's per-node memories are bounded by the nodes there are.
    #[test]
    fn what_is_remembered_for_a_node_is_forgotten_when_it_is_gone() {
        let mut claimed: BTreeSet<String> = ["heir-a", "heir-b"].map(String::from).into();
        let mut unnamed: HashMap<String, u8> = HashMap::from([(join_name("donor-a"), 1), (join_name("donor-b"), 2)]);
        let mut created: HashMap<String, u8> = HashMap::from([(join_name("donor-a"), 1), (join_name("donor-c"), 3)]);
        let names: BTreeSet<&str> = ["heir-a", "donor-a", "other"].into();
        forget_gone(&names, &mut claimed, &mut unnamed, &mut created);
        assert_eq!(claimed, BTreeSet::from(["heir-a".to_owned()]));
        assert_eq!(unnamed, HashMap::from([(join_name("donor-a"), 1)]));
        assert_eq!(created, HashMap::from([(join_name("donor-a"), 1)]));
        forget_gone(&BTreeSet::new(), &mut claimed, &mut unnamed, &mut created);
        assert!(claimed.is_empty() && unnamed.is_empty() && created.is_empty());
    }
}
