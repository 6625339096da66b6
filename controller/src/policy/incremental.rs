//! Incremental planning: the decisions of [`plan_with`](super::plan_with), kept up to date from node changes.
//!
//! A [`Planner`] holds every node's view and assessment, and indexes of the assessments: each rollout's counts,
//! its nodes with an action or a deadline, the nodes its status lists, its eligible nodes in the order they start,
//! its unavailable nodes, and what every rollout's budget shares. A node's change touches its own entries only, so a
//! plan costs the nodes that changed, the nodes with an action that writes or a deadline that came due, the
//! nodes it starts and what it lists: not the cluster. Like [`plan`](super::plan) it reads no clock and no client.
//!
//! # Replacements
//! What a replacement reads beyond the node itself is in the replacement records (donors, heirs, their
//! PendingNodes, the surge they hold), found from the PendingNodes and from the few nodes that say something of a
//! replacement (`intent=replace`, the `heir` or `donor` annotations), which the planner keeps apart: the records
//! cost the replacements in progress, not the cluster, and are found again on every plan. Only the nodes the
//! records name (donors and heirs) read them or another node, so those are assessed on every plan too, with the
//! ones they named at the last plan; every other group node is assessed only when it changes, like a node updated
//! in place.
//!
//! # Guarantees
//! - [`Planner::plan`] returns what [`plan_with`](super::plan_with) returns for the same nodes in name order, the
//!   same rollouts, fleet, own node and time (the property test in `incremental_tests` checks it after every event
//!   of random rollouts, in place and by replacement, with PendingNodes joining, failing and leaving).
//! - In place and by replacement, a plan assesses the nodes that changed, those with an action that writes or a
//!   deadline that came due, and the donors and heirs of the replacements in progress (now or at the last plan).
//!   A node the cloud tells or stops telling (`unresolved`) is assessed again; PendingNodes and the
//!   cluster-autoscaler's state are read by the donors and heirs alone.
//! - A new context (other rollouts, another own node) or a change of the scaling groups (their image, their role)
//!   assesses every node again on the next plan: each group node reads its group.
//! - Besides the assessments, a plan reads a rollout's eligible nodes in start order until it can start no more;
//!   when `maxSurge` is taken as it starts, only those updated in place (a plan that takes the last surge slot
//!   itself reads past the rest).
//! - While a NodeVersion asks for a Kubernetes upgrade, it plans with [`plan_with`](super::plan_with) over every
//!   node: that flow reads every member of the rollout (versions, hashes, its own budget). It indexes again once
//!   no NodeVersion asks for one. So it does while a NodeVersion rolls back (`status.rollback`): the rollback's
//!   reverse order is read from the full list ([`super::rollback`]).

use super::assess::{Assessment, Situation};
use super::pipeline::{self, Pool};
use super::replacement::{self, Records};
use super::{ClusterPlan, Counts, Fleet, NodeView, Plan, Rollout, SpecState, pools};
use jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The nodes, the context they are planned in, and the indexes of their assessments.
#[derive(Debug, Default)]
pub struct Planner {
    rollouts: Vec<Rollout>,
    fleet: Fleet,
    own_node: Option<String>,
    nodes: BTreeMap<String, Entry>,
    /// Nodes changed since they were last assessed.
    dirty: BTreeSet<String>,
    /// The indexes describe every node's assessment. False until the first plan after a new context, and while
    /// the full plan decides.
    indexed: bool,
    /// One per rollout, then one for the nodes no rollout manages.
    tallies: Vec<Tally>,
    /// Every indexed assessment's wake-up time: the node is assessed again when it comes due.
    wakes: BTreeSet<(Timestamp, String)>,
    /// Nodes whose action writes: assessed again on every plan (the write changes them, or it failed and the
    /// action is decided again at the new time). An action that does not write (keep draining, report a
    /// problem) reads no time but its deadline, in `wakes`.
    writing: BTreeSet<String>,
    /// Nodes no rollout manages that hold a slot of every budget.
    unowned_unavailable: u32,
    /// Control-plane nodes that keep every other one from starting.
    control_plane_busy: u32,
    /// Nodes the replacement records are found from ([`replacement::records_something`]): with the fleet's
    /// PendingNodes, they give the [`Records`] every plan, without reading the other nodes.
    involved: BTreeSet<String>,
    /// The nodes the records named at the last plan ([`Records::named`]): their assessments read the records and
    /// the nodes they name, so they are assessed again on every plan, with those the records name now.
    related: BTreeSet<String>,
    /// How many nodes the last plan assessed.
    assessed: usize,
    /// The nodes whose taint of outdated nodes differs from what their assessment wants ([`super::taint`]).
    retaint: BTreeMap<String, bool>,
}

#[derive(Debug)]
struct Entry {
    view: NodeView,
    owner: pools::Owner,
    /// None until the node is assessed under the current context.
    assessment: Option<Assessment>,
}

/// What one rollout's plan (or the plan of the nodes no rollout manages) reads of its members' assessments.
#[derive(Debug, Default, Clone)]
struct Tally {
    /// Its members' counts, as [`summarize`](super::image::summarize) counts them.
    counts: Counts,
    /// Outdated members made ready to start by their own write.
    preparing: u32,
    /// Members blocked by a drain.
    drain_timeouts: u32,
    /// Members replaced when they start ([`Assessment::replace`]): what `maxSurge` resolves against.
    replaced: u32,
    /// Members with an action.
    acting: BTreeSet<String>,
    wakes: BTreeSet<(Timestamp, String)>,
    /// Members the plan lists: in flight, failed, blocked, or held back for a reason of their own.
    listed: BTreeSet<String>,
    /// Eligible outdated members, in the order they start ([`pipeline::order`]).
    candidates: BTreeSet<pipeline::Order>,
    /// Of those, the ones updated in place.
    in_place_candidates: BTreeSet<pipeline::Order>,
    /// Of those, the ones replaced.
    replaced_candidates: BTreeSet<pipeline::Order>,
    /// Members staged ahead and eligible to be drained, in the order they start.
    staged_candidates: BTreeSet<pipeline::Order>,
    /// Members in the stage step (staging or staged).
    staging: u32,
    /// Of those, the ones staged (waiting for their turn).
    staged: u32,
    /// Members still staging and Ready ([`pipeline::staging_barrier`]), in start order.
    staging_unstaged: BTreeSet<pipeline::Order>,
    /// Members in flight ([`Situation::InFlight`]).
    in_flight: u32,
    /// Members counted against the budget.
    unavailable: BTreeSet<String>,
    /// Control-plane members the workers wait for.
    control_plane_pending: BTreeSet<String>,
    /// Nodes the rollout selects that an older one manages.
    overlap: BTreeSet<String>,
    /// Of the nodes no rollout manages: those that opt in, which no selector selects.
    not_selected: BTreeSet<String>,
}

impl Planner {
    pub fn new() -> Self {
        Planner::default()
    }

    /// Sets what the nodes are planned under: the rollouts (oldest first, as [`plan`](super::plan) takes them),
    /// the cloud's fleet and the controller's own node. The nodes' [`NodeView::selected_by`] index into
    /// `rollouts`: when the selectors change, every node must be given again with [`Planner::upsert`].
    pub fn set_context(&mut self, rollouts: Vec<Rollout>, fleet: Fleet, own_node: Option<String>) {
        let same = own_node == self.own_node && same_rollouts(&rollouts, &self.rollouts);
        // A scaling group's image or role is read by each of its members: rare, and every node is assessed again.
        let same_groups = fleet.groups == self.fleet.groups;
        let unresolved: Vec<String> = self.fleet.unresolved.symmetric_difference(&fleet.unresolved).cloned().collect();
        // The PendingNodes and the autoscaler are read through the records, by the nodes they name: those are
        // assessed on every plan (see `related`).
        self.rollouts = rollouts;
        self.fleet = fleet;
        self.own_node = own_node;
        if !same {
            self.unindex();
            for entry in self.nodes.values_mut() {
                entry.owner = pools::owner(&entry.view, &self.rollouts);
            }
        } else if !same_groups {
            self.unindex();
        } else {
            for name in unresolved {
                self.forget(&name);
            }
        }
    }

    /// Adds a node, or replaces the node of the same name.
    pub fn upsert(&mut self, view: NodeView) {
        let name = view.name.clone();
        self.mark(&name, false);
        let owner = pools::owner(&view, &self.rollouts);
        set(&mut self.involved, name.clone(), replacement::records_something(&view));
        let entry = Entry { view, owner, assessment: None };
        self.nodes.insert(name.clone(), entry);
        self.dirty.insert(name);
    }

    /// Removes a node; a name not known is ignored.
    pub fn remove(&mut self, name: &str) {
        self.mark(name, false);
        self.nodes.remove(name);
        self.involved.remove(name);
        self.dirty.remove(name);
    }

    /// Takes the node's assessment out of the indexes, to be assessed again on the next plan.
    fn forget(&mut self, name: &str) {
        self.mark(name, false);
        if let Some(entry) = self.nodes.get_mut(name) {
            entry.assessment = None;
            self.dirty.insert(name.to_owned());
        }
    }

    /// The node of that name, as last given.
    pub fn node(&self, name: &str) -> Option<&NodeView> {
        self.nodes.get(name).map(|e| &e.view)
    }

    /// Every node, by name.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeView> {
        self.nodes.values().map(|e| &e.view)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether the next [`Planner::plan`] is incremental: no NodeVersion asks for a Kubernetes upgrade, and none
    /// is rolling back (its reverse order is read from the full list: `super::rollback`).
    pub fn incremental(&self) -> bool {
        self.rollouts.iter().all(|r| r.kubernetes.is_none() && r.rollback.is_none())
    }

    /// How many nodes the last [`Planner::plan`] assessed (all of them when it used the full plan).
    pub fn assessed(&self) -> usize {
        self.assessed
    }

    /// What to do next, at `now`: what [`plan_with`](super::plan_with) decides for the nodes in name order.
    pub fn plan(&mut self, now: Timestamp) -> ClusterPlan {
        self.assessed = 0;
        if !self.incremental() {
            self.assessed = self.nodes.len();
            self.unindex();
            let nodes: Vec<NodeView> = self.nodes.values().map(|e| e.view.clone()).collect();
            return super::plan_with(&nodes, &self.rollouts, &self.fleet, self.own_node.as_deref(), now);
        }
        if self.indexed {
            self.refresh(now);
        } else {
            self.index(now);
        }
        self.compose(now)
    }

    /// Forgets every assessment and index.
    fn unindex(&mut self) {
        if !self.indexed {
            return;
        }
        self.indexed = false;
        self.tallies.clear();
        self.wakes.clear();
        self.writing.clear();
        self.unowned_unavailable = 0;
        self.control_plane_busy = 0;
        self.related.clear();
        self.retaint.clear();
        for entry in self.nodes.values_mut() {
            entry.assessment = None;
        }
    }

    /// Assesses every node and builds the indexes.
    fn index(&mut self, now: Timestamp) {
        self.tallies = vec![Tally::default(); self.rollouts.len() + 1];
        self.indexed = true;
        self.dirty.clear();
        let names: BTreeSet<String> = self.nodes.keys().cloned().collect();
        self.assess(names, now);
    }

    /// Assesses again the nodes that changed, those with an action that writes (their next step, or the same one
    /// again), those whose deadline came due, and those the replacement records name now or named at the last
    /// plan; no other assessment can differ at `now`.
    fn refresh(&mut self, now: Timestamp) {
        let mut redo = std::mem::take(&mut self.dirty);
        redo.extend(self.writing.iter().cloned());
        redo.extend(self.wakes.iter().take_while(|(at, _)| *at <= now).map(|(_, name)| name.clone()));
        redo.extend(std::mem::take(&mut self.related));
        self.assess(redo, now);
    }

    /// The replacement records, from the nodes that record something and the fleet's PendingNodes.
    fn records(&self) -> Records<'_> {
        let nodes = &self.nodes;
        let involved = self.involved.iter().filter_map(|name| nodes.get(name).map(|e| &e.view));
        Records::of(involved, |name| nodes.contains_key(name), &self.fleet)
    }

    /// Assesses the nodes of `names` and those the records name, and indexes the assessments.
    fn assess(&mut self, mut names: BTreeSet<String>, now: Timestamp) {
        let (assessments, related) = {
            let records = self.records();
            let related: BTreeSet<String> =
                records.named().filter(|name| self.nodes.contains_key(*name)).map(str::to_owned).collect();
            names.extend(related.iter().cloned());
            let lookup = ByName(&self.nodes);
            let assessments: Vec<(String, Assessment)> = names
                .into_iter()
                .filter_map(|name| {
                    let e = self.nodes.get(&name)?;
                    let a = super::assess_node(&e.view, e.owner, &self.rollouts, &self.fleet, &records, &lookup, now);
                    Some((name, a))
                })
                .collect();
            (assessments, related)
        };
        self.related = related;
        for (name, assessment) in assessments {
            self.mark(&name, false);
            let Some(entry) = self.nodes.get_mut(&name) else { continue };
            entry.assessment = Some(assessment);
            self.assessed += 1;
            self.mark(&name, true);
        }
    }

    /// Adds (`on`) or removes the node's assessment to or from the indexes.
    fn mark(&mut self, name: &str, on: bool) {
        if !self.indexed {
            return;
        }
        let Some(entry) = self.nodes.get(name) else { return };
        let Some(a) = &entry.assessment else { return };
        let (node, owner) = (&entry.view, entry.owner);
        match super::taint::change(node, owner, a, &self.rollouts) {
            Some(change) if on => {
                self.retaint.insert(change.node, change.on);
            }
            _ => {
                self.retaint.remove(name);
            }
        }
        let slot = match owner {
            pools::Owner::Rollout(i) => i,
            pools::Owner::Nobody { .. } | pools::Owner::Unknown => self.rollouts.len(),
        };
        if let Some(at) = a.wake_at {
            set(&mut self.wakes, (at, name.to_owned()), on);
        }
        if a.action.as_ref().is_some_and(|x| x.kind.writes()) {
            set(&mut self.writing, name.to_owned(), on);
        }
        let busy = super::busy(node, owner, a);
        if busy && !matches!(owner, pools::Owner::Rollout(_)) {
            count(&mut self.unowned_unavailable, on);
        }
        if super::control_plane_busy(node, owner, a) {
            count(&mut self.control_plane_busy, on);
        }
        for &i in &node.selected_by {
            let older = matches!(owner, pools::Owner::Rollout(o) if o != i);
            if let (true, true, Some(tally)) = (older, i < self.rollouts.len(), self.tallies.get_mut(i)) {
                set(&mut tally.overlap, name.to_owned(), on);
            }
        }
        let own_node = self.own_node.as_deref();
        let Some(tally) = self.tallies.get_mut(slot) else { return };
        if a.action.is_some() {
            set(&mut tally.acting, name.to_owned(), on);
        }
        if let Some(at) = a.wake_at {
            set(&mut tally.wakes, (at, name.to_owned()), on);
        }
        if !matches!(owner, pools::Owner::Rollout(_)) {
            if super::opted_in_unselected(node, owner) {
                set(&mut tally.not_selected, name.to_owned(), on);
            }
            return;
        }
        if a.replace {
            count(&mut tally.replaced, on);
        }
        let counts = &mut tally.counts;
        count(&mut counts.total, on);
        let listed = match &a.situation {
            Situation::UpToDate => {
                count(&mut counts.up_to_date, on);
                false
            }
            Situation::Outdated { held, eligible } => {
                count(&mut counts.outdated, on);
                if !eligible && held.is_none() && a.action.as_ref().is_some_and(|x| x.kind.writes()) {
                    count(&mut tally.preparing, on);
                }
                if *eligible {
                    set(&mut tally.candidates, pipeline::order(node, own_node), on);
                    if a.replace {
                        set(&mut tally.replaced_candidates, pipeline::order(node, own_node), on);
                    } else {
                        set(&mut tally.in_place_candidates, pipeline::order(node, own_node), on);
                    }
                }
                if held.is_some() {
                    count(&mut counts.held_back, on);
                }
                held.is_some()
            }
            Situation::Staging { eligible, staged, .. } => {
                count(&mut counts.in_progress, on);
                count(&mut tally.staging, on);
                if *staged {
                    count(&mut tally.staged, on);
                }
                if pipeline::staging_barrier(node, a) {
                    set(&mut tally.staging_unstaged, pipeline::order(node, own_node), on);
                }
                if *eligible {
                    set(&mut tally.staged_candidates, pipeline::order(node, own_node), on);
                }
                true
            }
            Situation::InFlight { .. } => {
                count(&mut counts.in_progress, on);
                count(&mut tally.in_flight, on);
                true
            }
            Situation::Failed { .. } => {
                count(&mut counts.failed, on);
                true
            }
            Situation::Blocked { by_drain, .. } => {
                count(&mut counts.blocked, on);
                if *by_drain {
                    count(&mut tally.drain_timeouts, on);
                }
                true
            }
        };
        if listed {
            set(&mut tally.listed, name.to_owned(), on);
        }
        if a.unavailable(node) {
            set(&mut tally.unavailable, name.to_owned(), on);
        }
        if pipeline::control_plane_pending(node, a) {
            set(&mut tally.control_plane_pending, name.to_owned(), on);
        }
    }

    /// The plan from the indexes: what [`plan_with`](super::plan_with) composes from every assessment.
    fn compose(&self, now: Timestamp) -> ClusterPlan {
        let records = self.records();
        let mut shared = pipeline::Shared {
            control_plane_busy: self.control_plane_busy > 0 || records.control_plane_active(),
            unowned_unavailable: self.unowned_unavailable,
        };
        let mut cluster = ClusterPlan::default();
        for (index, (rollout, tally)) in self.rollouts.iter().zip(&self.tallies).enumerate() {
            let mut plan = self.own_progress(tally);
            let listed: Vec<(&NodeView, &Assessment)> =
                tally.listed.iter().filter_map(|name| member(&self.nodes, name)).collect();
            super::image::summarize(&mut plan, &listed);
            plan.counts = tally.counts;
            plan.preparing = tally.preparing > 0;
            plan.staged = tally.staged;
            let member = |name: &str| self.nodes.get(name).is_some_and(|e| e.owner == pools::Owner::Rollout(index));
            plan.replacements = records.listing_of(member);
            let overlap: Vec<(&NodeView, &str)> = tally
                .overlap
                .iter()
                .filter_map(|name| {
                    let entry = self.nodes.get(name)?;
                    match entry.owner {
                        pools::Owner::Rollout(older) if older != index => {
                            Some((&entry.view, self.rollouts.get(older)?.name.as_str()))
                        }
                        _ => None,
                    }
                })
                .collect();
            let drain_timeouts = tally.drain_timeouts as usize;
            let waiting = (drain_timeouts, tally.staged_candidates.len() as u32);
            if let Some(spec) = super::image::open_image_gates(rollout, &mut plan, &overlap, waiting, now) {
                let allowed = spec.policy.max_surge.resolve(tally.replaced);
                let mut surge = pipeline::Surge {
                    free: allowed.saturating_sub(records.surge_used_of(member)),
                    allowed,
                    control_plane_active: records.control_plane_active(),
                    worker_active: records.worker_active(),
                    moving: records.moving(),
                };
                let pool = Indexed { tally, nodes: &self.nodes, own_node: self.own_node.as_deref() };
                let flow = pipeline::Flow::Image { target: spec.target.clone() };
                let bounds = pipeline::Bounds::of(rollout, spec, &plan, now);
                let selected = pipeline::select(&pool, spec, &flow, (&mut shared, &mut surge), &bounds);
                pipeline::start(&mut plan, &flow, selected, now);
            }
            cluster.rollouts.push(plan);
        }
        if let Some(tally) = self.tallies.get(self.rollouts.len()) {
            let mut unowned = self.own_progress(tally);
            unowned.held = tally
                .not_selected
                .iter()
                .filter_map(|name| self.nodes.get(name))
                .map(|e| super::not_selected(&e.view))
                .collect();
            cluster.unowned = unowned;
        }
        cluster.taints =
            self.retaint.iter().map(|(node, on)| super::taint::Retaint { node: node.clone(), on: *on }).collect();
        cluster
    }

    /// A plan with the actions and the earliest wake-up of the members of `tally`.
    fn own_progress(&self, tally: &Tally) -> Plan {
        let mut plan = Plan::default();
        for name in &tally.acting {
            if let Some((_, a)) = member(&self.nodes, name) {
                plan.actions.extend(a.action.clone());
            }
        }
        plan.wake(tally.wakes.first().map(|(at, _)| *at));
        plan
    }
}

/// The nodes by name, as a replacement's assessment looks up the nodes it names.
struct ByName<'a>(&'a BTreeMap<String, Entry>);

impl replacement::Lookup for ByName<'_> {
    fn node(&self, name: &str) -> Option<&NodeView> {
        self.0.get(name).map(|e| &e.view)
    }
}

/// A rollout's members as the indexes keep them.
struct Indexed<'a> {
    tally: &'a Tally,
    nodes: &'a BTreeMap<String, Entry>,
    own_node: Option<&'a str>,
}

impl<'a> Pool<'a> for Indexed<'a> {
    fn candidates(&self) -> Box<dyn Iterator<Item = (&'a NodeView, bool)> + '_> {
        let nodes = self.nodes;
        Box::new(self.tally.candidates.iter().filter_map(move |(_, _, _, _, name)| {
            let (node, a) = member(nodes, name)?;
            Some((node, a.replace))
        }))
    }

    fn in_place_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        let nodes = self.nodes;
        Box::new(
            self.tally.in_place_candidates.iter().filter_map(move |(_, _, _, _, name)| Some(&nodes.get(name)?.view)),
        )
    }

    fn replaced_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        let nodes = self.nodes;
        Box::new(
            self.tally.replaced_candidates.iter().filter_map(move |(_, _, _, _, name)| Some(&nodes.get(name)?.view)),
        )
    }

    fn any_replaced_candidate(&self) -> bool {
        !self.tally.replaced_candidates.is_empty()
    }

    fn staged_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        let nodes = self.nodes;
        Box::new(self.tally.staged_candidates.iter().filter_map(move |(_, _, _, _, name)| Some(&nodes.get(name)?.view)))
    }

    fn staging_count(&self) -> u32 {
        self.tally.staging
    }

    fn first_staging(&self) -> Option<pipeline::Order> {
        self.tally.staging_unstaged.first().cloned()
    }

    fn own_node(&self) -> Option<&str> {
        self.own_node
    }

    fn size(&self) -> u32 {
        self.tally.counts.total
    }

    fn unavailable_count(&self) -> u32 {
        self.tally.unavailable.len() as u32
    }

    fn unavailable(&self) -> Vec<(&'a NodeView, &'a Assessment)> {
        self.tally.unavailable.iter().filter_map(|name| member(self.nodes, name)).collect()
    }

    fn any_in_flight(&self) -> bool {
        self.tally.in_flight > 0
    }

    fn control_plane_pending(&self) -> Vec<(&'a NodeView, &'a Assessment)> {
        self.tally.control_plane_pending.iter().filter_map(|name| member(self.nodes, name)).collect()
    }
}

fn member<'a>(nodes: &'a BTreeMap<String, Entry>, name: &str) -> Option<(&'a NodeView, &'a Assessment)> {
    let entry = nodes.get(name)?;
    Some((&entry.view, entry.assessment.as_ref()?))
}

fn set<T: Ord>(set: &mut BTreeSet<T>, key: T, on: bool) {
    if on {
        set.insert(key);
    } else {
        set.remove(&key);
    }
}

fn count(counter: &mut u32, on: bool) {
    if on {
        *counter += 1;
    } else {
        *counter = counter.saturating_sub(1);
    }
}

/// Whether two lists of rollouts are the same (the same specs, not equal copies: a spec is validated once per
/// generation and shared).
fn same_rollouts(a: &[Rollout], b: &[Rollout]) -> bool {
    let same_spec = |a: &SpecState, b: &SpecState| match (a, b) {
        (SpecState::Valid(a), SpecState::Valid(b)) => Arc::ptr_eq(a, b),
        (SpecState::Invalid { errors: e, last_valid: l }, SpecState::Invalid { errors: f, last_valid: m }) => {
            e == f
                && match (l, m) {
                    (Some(l), Some(m)) => Arc::ptr_eq(l, m),
                    (None, None) => true,
                    _ => false,
                }
        }
        _ => false,
    };
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.name == b.name
                && a.kubernetes.is_none()
                && b.kubernetes.is_none()
                && a.rollback == b.rollback
                && same_spec(&a.spec, &b.spec)
        })
}
