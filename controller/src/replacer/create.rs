//! Creating a donor's new instance: asked of the cloud once per donor, its request marked on the donor first, and
//! an unrecorded request (a mark with no PendingNode: the controller stopped between the two) resolved from the
//! group's member list before anything is asked again (see `crate::groups::unrecorded`).

use super::*;

impl Replacer {
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
}

/// An instance request this process made (or resolved from an unrecorded one), as [`Replacer`] remembers it until
/// its donor is gone.
#[derive(Debug, Clone)]
pub(super) struct Own {
    /// The donor's scaling group.
    pub(super) group: String,
    /// The donor's [`keys::INSTANCE_REQUESTED`] mark of the request (as [`requested`] reads it).
    pub(super) marked: Timestamp,
    /// The provider ID of its instance, once known.
    pub(super) instance: Option<String>,
    /// Whether the cloud answered the request (an instance, or a creation token); until then the group may list
    /// its instance as no one's.
    pub(super) answered: bool,
}

/// An unrecorded request found in flight (see [`Fleet::requests_in_flight`]).
#[derive(Debug, Clone)]
pub(super) struct InFlight {
    /// The donor.
    pub(super) donor: String,
    /// Its [`keys::INSTANCE_REQUESTED`] mark.
    pub(super) marked: Timestamp,
    /// Until when a create sent for it may still make an instance.
    pub(super) until: Timestamp,
}

/// A creation being asked of the cloud, remembered in `own` from before the donor's mark is written until the
/// cloud answers ([`Asking::answered`]); dropped first (the call failed with an unknown outcome, the term ended,
/// the task was cancelled), the request is forgotten, and the mark left on the donor is an unrecorded request.
pub(super) struct Asking<'a> {
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
pub(super) fn requested(node: &SlimNode) -> Option<Timestamp> {
    let annotations = node.metadata.annotations.as_ref()?;
    let at: Timestamp = annotations.get(keys::INSTANCE_REQUESTED)?.parse().ok()?;
    let intent = shared::protocol::ControllerAnnotations::read(annotations).ok()?.intent?;
    (intent.step == shared::protocol::Step::Replace && at >= intent.since && !annotations.contains_key(keys::HEIR))
        .then_some(at)
}

/// Whether a failed creation certainly created nothing (the cloud refused it), so that it may be asked again.
pub(super) fn nothing_created(error: &cloud::Error) -> bool {
    !matches!(error, cloud::Error::Transient { .. } | cloud::Error::Permanent { .. })
}
