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

    /// Creates one instance in `group_id` for `donor` and records it as the joining PendingNode `pending` (with
    /// `deadline`), unless that exists; an instance created before but not recorded is recorded instead.
    ///
    /// Crash safety: [`keys::INSTANCE_REQUESTED`] is written on the donor before the cloud is asked. A donor that
    /// carries it (newer than its intent) without a PendingNode had its request made by a controller that stopped
    /// (or lost the answer) before recording it: the group's node that registered since, which no PendingNode
    /// names and no replacement claims, is adopted instead of creating another instance; until the join deadline
    /// passes without one, nothing is created for the donor, nor for another donor of the group (so that the node
    /// adopted is the one requested). Past that deadline the instance is taken as never created or never joined
    /// and a new one is requested (with a warning: an instance that exists but never joined is not known to us).
    pub async fn create_instance(
        &self,
        term: &Term,
        request: InstanceRequest<'_>,
        nodes: &HashMap<String, SlimNode>,
        now: Timestamp,
    ) -> Result<(), String> {
        let InstanceRequest { donor, group_id, pending, deadline } = request;
        if self.pending.state().iter().any(|p| p.name_any() == pending) {
            self.created.lock().remove(pending);
            return Ok(());
        }
        let group = GroupId::from(group_id);
        let remembered = self.created.lock().get(pending).map(|(_, instance)| instance.clone());
        let instance = match remembered {
            Some(instance) => instance,
            None => {
                let token = self.unnamed.lock().get(pending).cloned();
                let creation = match token {
                    Some(token) => match fence(term, self.provider.created_instance(&group, &token)).await? {
                        Some(instance) => Creation::Created(instance),
                        None => return Ok(()),
                    },
                    None => {
                        if let Some(requested) = requested(donor)
                            && !self.adopt(term, request, nodes, requested, now).await?
                        {
                            return Ok(());
                        }
                        // Another donor's request whose outcome no one knows (a controller stopped before recording
                        // it) is resolved first, so that what is adopted for it is its instance. A request this
                        // process made (its answer coming, or recorded but not yet in the store) is not one of
                        // them: waiting for it only delays this donor (and, with nothing else to wake the plan,
                        // stalled the last donors of a group).
                        if let Some(other) = nodes.values().find(|n| {
                            let join = join_name(n.name());
                            n.name() != donor.name()
                                && requested(n)
                                    .is_some_and(|at| self.own.lock().get(&join).is_none_or(|o| o.marked != at))
                                && self.group_of(n).as_deref() == Some(group_id)
                                && !self.created.lock().contains_key(&join)
                                && !self.unnamed.lock().contains_key(&join)
                                && !self.pending.state().iter().any(|p| p.name_any() == join)
                        }) {
                            tracing::debug!(
                                node = donor.name(),
                                other = other.name(),
                                "an unrecorded instance request of the group is resolved first"
                            );
                            return Ok(());
                        }
                        let asking = Asking::new(&self.own, pending, group_id, now);
                        self.mark_requested(term, donor, Some(now)).await?;
                        match within(term, self.provider.create_instance(&group)).await? {
                            Ok(creation) => {
                                let instance = match &creation {
                                    Creation::Created(instance) => Some(instance.provider_id.to_string()),
                                    Creation::Pending(_) => None,
                                };
                                asking.answered(instance);
                                creation
                            }
                            Err(error) => {
                                if nothing_created(&error) {
                                    // Nothing to adopt: the next attempt may ask again at once.
                                    self.mark_requested(term, donor, None).await?;
                                }
                                // Dropping `asking` forgets the request: an answer lost is an unrecorded request.
                                return Err(error.to_string());
                            }
                        }
                    }
                };
                match creation {
                    Creation::Created(instance) => {
                        if let Some(own) = self.own.lock().get_mut(pending) {
                            own.instance = Some(instance.provider_id.to_string());
                        }
                        self.unnamed.lock().remove(pending);
                        self.created.lock().insert(pending.to_owned(), (group_id.to_owned(), instance.clone()));
                        instance
                    }
                    Creation::Pending(token) => {
                        self.unnamed.lock().insert(pending.to_owned(), token);
                        return Ok(());
                    }
                }
            }
        };
        let spec = PendingNodeSpec {
            provider_id: instance.provider_id.to_string(),
            group_id: group_id.to_owned(),
            node_name: instance.node_name.clone(),
            goal: PendingNodeGoal::Join,
            deadline: Some(Time(deadline)),
        };
        // `created` keeps the instance until the store shows the record (see `learn`): this step may be run again
        // before (the record's watch event late, the step's outcome forgotten), and must record the same instance
        // then. Resolving the request anew found the instance named by this very record and took the request as
        // having made none: a second instance (issue 28).
        self.record(term, pending, donor.name(), spec).await
    }

    /// The unrecorded request of `donor`'s instance at `requested`: records the group's node that registered
    /// since as its joining PendingNode; else reads the group's member list once (see [`unrecorded`]): adopts the
    /// instance no one names, or answers `true` (request again now) when the list proves none was made. Only while
    /// neither can be told (creations accepted but not listed yet, a provider that cannot list) does it wait for a
    /// node, until the join timeout.
    async fn adopt(
        &self,
        term: &Term,
        request: InstanceRequest<'_>,
        nodes: &HashMap<String, SlimNode>,
        requested: Timestamp,
        now: Timestamp,
    ) -> Result<bool, String> {
        let InstanceRequest { donor, group_id, pending, deadline } = request;
        let join_timeout = deadline.duration_since(now);
        let in_flight = jiff::SignedDuration::try_from(self.create_in_flight).unwrap_or(jiff::SignedDuration::MAX);
        // creationTimestamp has whole seconds: a node created in the second of the request may be its.
        let second = jiff::TimestampRound::new().smallest(jiff::Unit::Second).mode(jiff::RoundMode::Trunc);
        let since = requested.round(second).unwrap_or(requested);
        let recorded: BTreeSet<String> =
            self.pending.state().iter().flat_map(|p| [p.spec.node_name.clone(), p.spec.provider_id.clone()]).collect();
        // The instance requested runs the group's image (the request is made only once that is the target): a
        // node of another image (an outdated node registered in the same second, say) is not it.
        let image = self.groups.state().iter().find(|g| g.spec.group_id == group_id).and_then(|g| group_view(g).image);
        let mut candidates: Vec<&SlimNode> = nodes
            .values()
            .filter(|n| {
                let annotations = n.annotations();
                let cloud = n.spec.provider_id.as_ref().and_then(|id| self.instances.get(id).flatten());
                n.name() != donor.name()
                    && cloud.as_ref().is_some_and(|(group, _)| group == group_id)
                    && cloud.as_ref().is_some_and(|(_, runs)| image.as_ref() == Some(runs))
                    && n.metadata.creation_timestamp.as_ref().is_some_and(|t| t.0 >= since)
                    && !recorded.contains(n.name())
                    && !n.spec.provider_id.as_ref().is_some_and(|id| recorded.contains(id))
                    && !annotations.contains_key(keys::DONOR)
                    && !annotations.contains_key(keys::INTENT)
                    && !self.claimed.lock().contains(n.name())
            })
            .collect();
        candidates.sort_by_key(|n| (n.metadata.creation_timestamp.as_ref().map(|t| t.0), n.name().to_owned()));
        if let Some(heir) = candidates.first() {
            let Some(provider_id) = heir.spec.provider_id.clone() else { return Ok(false) };
            let Ok(parsed) = provider_id.parse::<ProviderId>() else { return Ok(false) };
            self.claimed.lock().insert(heir.name().to_owned());
            self.in_flight.lock().remove(pending);
            self.resolved(pending, group_id, requested, &provider_id);
            // Recorded again from `created` if this step runs again before the store shows the record.
            let adopted = NewInstance { provider_id: parsed, node_name: heir.name().to_owned() };
            self.created.lock().insert(pending.to_owned(), (group_id.to_owned(), adopted));
            tracing::info!(
                node = donor.name(),
                heir = heir.name(),
                "adopting the node that registered after the unrecorded request"
            );
            let spec = PendingNodeSpec {
                provider_id,
                group_id: group_id.to_owned(),
                node_name: heir.name().to_owned(),
                goal: PendingNodeGoal::Join,
                deadline: Some(Time(deadline)),
            };
            return self.record(term, pending, donor.name(), spec).await.map(|()| false);
        }
        match self.resolve_from_list(term, request, since, requested).await? {
            Some(again) => return Ok(again),
            // Never before a create sent for the request can no longer land, even with a join timeout shorter.
            None if now < requested.checked_add(join_timeout.max(in_flight)).unwrap_or(Timestamp::MAX) => {
                tracing::info!(node = donor.name(), %requested, "an instance was requested but not recorded; waiting for its node to register");
                return Ok(false);
            }
            None => {}
        }
        tracing::warn!(
            node = donor.name(),
            group = group_id,
            %requested,
            "the instance requested for the node was not recorded and no node of the group registered within the join timeout; requesting a new one (check the group for an instance that never joined)"
        );
        self.mark_requested(term, donor, None).await.map(|()| false)
    }

    /// [`Replacer::adopt`] from the group's member list (one call): `Some(false)` when an instance was adopted or
    /// a create sent for the request (marked `requested`) may still land, `Some(true)` when none was made (request
    /// again), `None` when the list cannot tell.
    async fn resolve_from_list(
        &self,
        term: &Term,
        request: InstanceRequest<'_>,
        since: Timestamp,
        requested: Timestamp,
    ) -> Result<Option<bool>, String> {
        let InstanceRequest { donor, group_id, pending, deadline } = request;
        // A creation of this process that the cloud has not named yet, or whose answer has not come, may be an
        // unknown instance of the list.
        if !self.unnamed.lock().is_empty() || self.own.lock().values().any(|o| o.group == group_id && !o.answered) {
            return Ok(None);
        }
        // The instance requested runs the group's image: one listed with another is not it (see `adopt`).
        let Some(image) =
            self.groups.state().iter().find(|g| g.spec.group_id == group_id).and_then(|g| group_view(g).image)
        else {
            return Ok(None);
        };
        // The list proves that no create landed only if it was read once none can land any more: the time is
        // taken before the list is asked for.
        let listed_at = Timestamp::now();
        let in_flight_until = requested.checked_add(self.create_in_flight).unwrap_or(Timestamp::MAX);
        let members = match within(term, self.provider.group_instances(&GroupId::from(group_id))).await? {
            Ok(members) => members,
            Err(cloud::Error::Invalid { message }) => {
                tracing::debug!(group = group_id, %message, "the group's members cannot be listed");
                return Ok(None);
            }
            Err(error) => return Err(format!("cannot list the instances of group {group_id}: {error}")),
        };
        let mut named: HashMap<ProviderId, Named> = HashMap::new();
        for (id, created) in self.named.lock().iter() {
            if let Ok(id) = id.parse::<ProviderId>() {
                named.insert(id, Named::Node(*created));
            }
        }
        let recorded = self.pending.state().iter().map(|p| p.spec.provider_id.clone()).collect::<Vec<_>>();
        let mut creating = self.created.lock().values().map(|(_, i)| i.provider_id.to_string()).collect::<Vec<_>>();
        // Recorded by this process, perhaps not in the store yet.
        creating.extend(self.own.lock().values().filter_map(|o| o.instance.clone()));
        for id in recorded.iter().chain(&creating) {
            if let Ok(id) = id.parse::<ProviderId>() {
                named.insert(id, Named::Recorded);
            }
        }
        let claimed = self.claimed.lock().clone();
        let unrecorded = unrecorded::Request { since, in_flight_until };
        let resolution = unrecorded::resolve(members, &named, unrecorded, listed_at, &claimed, &image);
        if matches!(resolution, Resolution::Adopt { .. } | Resolution::NoneMade) {
            self.in_flight.lock().remove(pending);
        }
        match resolution {
            Resolution::Adopt { instance, others } => {
                if !others.is_empty() {
                    let others: Vec<&str> = others.iter().map(|i| i.node_name.as_str()).collect();
                    tracing::warn!(
                        group = group_id,
                        ?others,
                        "more instances of the group than requests unknown to the cluster; left alone"
                    );
                }
                self.claimed.lock().insert(instance.node_name.clone());
                self.resolved(pending, group_id, requested, &instance.provider_id.to_string());
                // Recorded again from `created` if this step runs again before the store shows the record.
                let adopted =
                    NewInstance { provider_id: instance.provider_id.clone(), node_name: instance.node_name.clone() };
                self.created.lock().insert(pending.to_owned(), (group_id.to_owned(), adopted));
                let message = format!(
                    "the instance requested at {since} for {} was not recorded: adopted {} ({}, {}) from the member list of group {group_id}",
                    donor.name(),
                    instance.node_name,
                    instance.provider_id,
                    instance.state
                );
                tracing::info!(node = donor.name(), heir = %instance.node_name, "{message}");
                let spec = PendingNodeSpec {
                    provider_id: instance.provider_id.to_string(),
                    group_id: group_id.to_owned(),
                    node_name: instance.node_name,
                    goal: PendingNodeGoal::Join,
                    deadline: Some(Time(deadline)),
                };
                self.record(term, pending, donor.name(), spec).await?;
                self.tell(donor, Reason::InstanceAdopted, message);
                Ok(Some(false))
            }
            Resolution::NoneMade => {
                let message = format!(
                    "the instance requested at {since} for {} was not recorded and group {group_id} lists no instance it may have made: requesting a new one",
                    donor.name()
                );
                tracing::info!(node = donor.name(), "{message}");
                self.tell(donor, Reason::InstanceRequestedAgain, message);
                Ok(Some(true))
            }
            Resolution::InFlight { until } => {
                let message = format!(
                    "the instance requested at {since} for {} was not recorded and group {group_id} lists no instance it made yet; a create sent for it may still make one until {until}: no new instance is requested before",
                    donor.name()
                );
                let waiting = InFlight { donor: donor.name().to_owned(), marked: requested, until };
                let told =
                    self.in_flight.lock().insert(pending.to_owned(), waiting).is_some_and(|w| w.marked == requested);
                if told {
                    tracing::debug!(node = donor.name(), %until, "{message}");
                } else {
                    tracing::info!(node = donor.name(), %until, "{message}");
                    self.tell(donor, Reason::InstanceRequestInFlight, message);
                }
                Ok(Some(false))
            }
            Resolution::Unlisted(n) => {
                tracing::info!(
                    node = donor.name(),
                    group = group_id,
                    unlisted = n,
                    "the group accepted creations it does not list yet"
                );
                Ok(None)
            }
        }
    }

    /// Remembers that the request marked `marked` on the donor of `pending` is resolved: `instance` is recorded for
    /// it by this process (the store may show the record a moment later).
    fn resolved(&self, pending: &str, group_id: &str, marked: Timestamp, instance: &str) {
        let own = Own { group: group_id.to_owned(), marked, instance: Some(instance.to_owned()), answered: true };
        self.own.lock().insert(pending.to_owned(), own);
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

    /// Switches `donor`'s joining PendingNode `join_pending` to `Leave` (with `deadline`) and deletes its instance;
    /// an instance this controller created but could not record yet is recorded as leaving first. The donor is
    /// released by the caller.
    pub async fn abandon(
        &self,
        term: &Term,
        donor: &str,
        join_pending: Option<&str>,
        deadline: Timestamp,
    ) -> Result<(), String> {
        let name = join_pending.map_or_else(|| join_name(donor), str::to_owned);
        let recorded = self.pending.state().iter().find(|p| p.name_any() == name).map(|p| p.spec.clone());
        // Whether the stored record may still say Join: the store's, or one recorded while the store did not show
        // it yet (this create is then refused as a conflict, and the record is switched below).
        let mut may_join = true;
        let spec = match recorded {
            Some(spec) => {
                may_join = spec.goal == PendingNodeGoal::Join;
                spec
            }
            None => {
                let Some((group_id, instance)) = self.created.lock().get(&name).cloned() else { return Ok(()) };
                let spec = PendingNodeSpec {
                    provider_id: instance.provider_id.to_string(),
                    group_id,
                    node_name: instance.node_name.clone(),
                    goal: PendingNodeGoal::Leave,
                    deadline: Some(Time(deadline)),
                };
                self.record(term, &name, donor, spec.clone()).await?;
                spec
            }
        };
        if may_join {
            let patch = serde_json::json!({"spec": {"goal": "Leave", "deadline": Time(deadline)}});
            let params = kube::api::PatchParams::default();
            match within(term, self.pending_api.patch(&name, &params, &kube::api::Patch::Merge(patch))).await? {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
                Err(error) => return Err(format!("cannot switch PendingNode {name} to Leave: {error}")),
            }
        }
        // Recorded as leaving first: if this deletion fails, the PendingNode controller retries it.
        let id = spec.provider_id.parse::<ProviderId>().map_err(|e| format!("{}: {e}", spec.provider_id))?;
        fence(term, self.provider.delete_instance(&GroupId::from(spec.group_id.as_str()), &id)).await?;
        self.created.lock().remove(&name);
        Ok(())
    }

    /// Deletes `donor`'s joining PendingNode, removes its etcd member when asked (once the member of its heir
    /// `heir`, found by name and, when its Node is in `heir_node`, by its addresses, is a healthy voter), and deletes
    /// its Node. The Node is never deleted while its member may remain.
    pub async fn retire(
        &self,
        term: &Term,
        donor: &SlimNode,
        (heir, heir_node): (&str, Option<&SlimNode>),
        remove_etcd_member: bool,
        join_pending: Option<&str>,
    ) -> Result<(), RetireError> {
        if remove_etcd_member {
            let Members::Client(etcd) = &self.etcd else {
                return Err(RetireError::Etcd(format!(
                    "the etcd member of {} cannot be removed: no etcd client is configured",
                    donor.name()
                )));
            };
            let (donor_addresses, heir_addresses) = (donor.addresses(), heir_node.map(SlimNode::addresses));
            let donor_ref = NodeRef { name: donor.name(), addresses: &donor_addresses };
            let heir_ref = NodeRef { name: heir, addresses: heir_addresses.as_deref().unwrap_or_default() };
            match within(term, etcd.remove_node_member(donor_ref, Some(heir_ref))).await.map_err(RetireError::Other)? {
                Ok(Removal::Removed { id, name }) => {
                    tracing::info!(node = donor.name(), id, member = %name, "removed the etcd member")
                }
                Ok(Removal::AlreadyGone) => {}
                Err(error) => {
                    return Err(RetireError::Etcd(format!(
                        "cannot remove the etcd member of {}: {error}",
                        donor.name()
                    )));
                }
            }
        }
        if let Some(pending) = join_pending {
            let params = DeleteParams::default();
            let deleted = within(term, self.pending_api.delete(pending, &params)).await.map_err(RetireError::Other)?;
            gone_is_fine(deleted).map_err(RetireError::Other)?;
        }
        // Only the Node the decision was about: a Node of that name created since is not deleted.
        let params = DeleteParams {
            preconditions: donor.uid().map(|uid| kube::api::Preconditions { uid: Some(uid), resource_version: None }),
            ..DeleteParams::default()
        };
        gone_is_fine(within(term, self.nodes_api.delete(donor.name(), &params)).await.map_err(RetireError::Other)?)
            .map_err(RetireError::Other)
    }

    /// Records the leaving PendingNode `pending` for `donor`'s instance, then deletes the instance (the
    /// PendingNode controller removes the record once it is terminated, and deletes it again past `deadline`).
    pub async fn release_instance(
        &self,
        term: &Term,
        pending: &str,
        donor: &DonorRef,
        deadline: Timestamp,
    ) -> Result<(), String> {
        if !self.pending.state().iter().any(|p| p.name_any() == pending) {
            let spec = PendingNodeSpec {
                provider_id: donor.provider_id.clone(),
                group_id: donor.group_id.clone(),
                node_name: donor.name.clone(),
                goal: PendingNodeGoal::Leave,
                deadline: Some(Time(deadline)),
            };
            self.record(term, pending, &donor.name, spec).await?;
        }
        // Recorded first: if this deletion fails (or the controller stops here), the PendingNode controller
        // deletes the instance again past the deadline.
        let id = donor.provider_id.parse::<ProviderId>().map_err(|e| format!("{}: {e}", donor.provider_id))?;
        fence(term, self.provider.delete_instance(&GroupId::from(donor.group_id.as_str()), &id)).await?;
        Ok(())
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

/// An instance request this process made (or resolved from an unrecorded one), as [`Replacer`] remembers it until
/// its donor is gone.
#[derive(Debug, Clone)]
struct Own {
    /// The donor's scaling group.
    group: String,
    /// The donor's [`keys::INSTANCE_REQUESTED`] mark of the request (as [`requested`] reads it).
    marked: Timestamp,
    /// The provider ID of its instance, once known.
    instance: Option<String>,
    /// Whether the cloud answered the request (an instance, or a creation token); until then the group may list
    /// its instance as no one's.
    answered: bool,
}

/// An unrecorded request found in flight (see [`Fleet::requests_in_flight`]).
#[derive(Debug, Clone)]
struct InFlight {
    /// The donor.
    donor: String,
    /// Its [`keys::INSTANCE_REQUESTED`] mark.
    marked: Timestamp,
    /// Until when a create sent for it may still make an instance.
    until: Timestamp,
}

/// A creation being asked of the cloud, remembered in `own` from before the donor's mark is written until the
/// cloud answers ([`Asking::answered`]); dropped first (the call failed with an unknown outcome, the term ended,
/// the task was cancelled), the request is forgotten, and the mark left on the donor is an unrecorded request.
struct Asking<'a> {
    own: &'a Mutex<HashMap<String, Own>>,
    pending: &'a str,
    answered: bool,
}

impl<'a> Asking<'a> {
    fn new(own: &'a Mutex<HashMap<String, Own>>, pending: &'a str, group: &str, now: Timestamp) -> Asking<'a> {
        // The mark as written (milliseconds) and read back.
        let marked = shared::protocol::truncate_to_millis(now);
        own.lock().insert(pending.to_owned(), Own { group: group.to_owned(), marked, instance: None, answered: false });
        Asking { own, pending, answered: false }
    }

    /// The cloud answered, naming `instance` or not yet (a creation token).
    fn answered(mut self, instance: Option<String>) {
        if let Some(own) = self.own.lock().get_mut(self.pending) {
            own.answered = true;
            own.instance = instance;
        }
        self.answered = true;
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.own.lock().remove(self.pending);
        }
    }
}

/// When `node`'s instance request ([`keys::INSTANCE_REQUESTED`]) was made, if it is one of its current
/// replacement (newer than its `intent=replace`, before its heir was chosen).
fn requested(node: &SlimNode) -> Option<Timestamp> {
    let annotations = node.metadata.annotations.as_ref()?;
    let at: Timestamp = annotations.get(keys::INSTANCE_REQUESTED)?.parse().ok()?;
    let intent = shared::protocol::ControllerAnnotations::read(annotations).ok()?.intent?;
    (intent.step == shared::protocol::Step::Replace && at >= intent.since && !annotations.contains_key(keys::HEIR))
        .then_some(at)
}

/// Whether a failed creation certainly created nothing (the cloud refused it), so that it may be asked again.
fn nothing_created(error: &cloud::Error) -> bool {
    !matches!(error, cloud::Error::Transient { .. } | cloud::Error::Permanent { .. })
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
