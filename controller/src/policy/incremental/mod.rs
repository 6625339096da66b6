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
//! - While a NodeVersion asks for a Kubernetes upgrade, its members are assessed by both flows: the image flow's
//!   assessment is what every other rollout's budget and the taints read, the Kubernetes flow's what its own plan
//!   reads ([`kubernetes`]). What that flow reads of every member (whether the upgrade is over, whether the API
//!   server is proven upgraded, the kubelets for the status) is kept from the members' views as they change; when
//!   the flow that plans a rollout changes, or the target it plans with, every member of that rollout is assessed
//!   again on the next plan.
//! - While a NodeVersion rolls back (`status.rollback`), it plans with [`plan_with`](super::plan_with) over every
//!   node: the rollback's reverse order is read from the full list ([`super::rollback`]). It indexes again once
//!   none rolls back.

mod kubernetes;
mod tally;

use super::assess::Assessment;
use super::kubernetes::{Facts, Progress};
use super::pipeline;
use super::replacement::{self, Records};
use super::{ClusterPlan, Fleet, NodeView, Plan, Rollout, SpecState, pools};
use jiff::Timestamp;
use kubernetes::{Mode, Views};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tally::{Indexed, Tally, count, member, set};

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
    /// One per rollout: what its Kubernetes upgrade reads of its members' views.
    views: Vec<Views>,
    /// One per rollout: the flow the indexed assessments were made for.
    modes: Vec<Mode>,
}

#[derive(Debug)]
struct Entry {
    view: NodeView,
    owner: pools::Owner,
    /// None until the node is assessed under the current context.
    assessment: Option<Assessment>,
    /// The Kubernetes flow's assessment, while it plans the node's rollout.
    flow: Option<Assessment>,
}

impl Entry {
    /// The assessment the node's rollout plans with.
    fn planned(&self) -> Option<&Assessment> {
        self.flow.as_ref().or(self.assessment.as_ref())
    }
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
            self.views = self.rollouts.iter().map(|_| Views::default()).collect();
            let names: Vec<String> = self.nodes.keys().cloned().collect();
            for name in names {
                self.note(&name, true);
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
        self.note(&name, false);
        let owner = pools::owner(&view, &self.rollouts);
        set(&mut self.involved, name.clone(), replacement::records_something(&view));
        let entry = Entry { view, owner, assessment: None, flow: None };
        if let Some(old) = self.nodes.insert(name.clone(), entry)
            && old.owner != owner
        {
            self.forget_kubelet(&name, old.owner);
        }
        self.note(&name, true);
        self.dirty.insert(name);
    }

    /// Removes a node; a name not known is ignored.
    pub fn remove(&mut self, name: &str) {
        self.mark(name, false);
        self.note(name, false);
        if let Some(old) = self.nodes.remove(name) {
            self.forget_kubelet(name, old.owner);
        }
        self.involved.remove(name);
        self.dirty.remove(name);
    }

    /// Adds (`on`) or removes what the node's view says of its rollout's Kubernetes upgrade.
    fn note(&mut self, name: &str, on: bool) {
        let Some(entry) = self.nodes.get(name) else { return };
        let pools::Owner::Rollout(i) = entry.owner else { return };
        if let (Some(rollout), Some(views)) = (self.rollouts.get(i), self.views.get_mut(i)) {
            views.note(&entry.view, rollout, on);
        }
    }

    /// The node is no member of the rollout that `owner` names any more.
    fn forget_kubelet(&mut self, name: &str, owner: pools::Owner) {
        if let pools::Owner::Rollout(i) = owner
            && let Some(views) = self.views.get_mut(i)
        {
            views.gone(name);
        }
    }

    /// Takes the node's assessment out of the indexes, to be assessed again on the next plan.
    fn forget(&mut self, name: &str) {
        self.mark(name, false);
        if let Some(entry) = self.nodes.get_mut(name) {
            entry.assessment = None;
            entry.flow = None;
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

    /// Whether the next [`Planner::plan`] is incremental: no NodeVersion is rolling back (its reverse order is read
    /// from the full list: `super::rollback`).
    pub fn incremental(&self) -> bool {
        self.rollouts.iter().all(|r| r.rollback.is_none())
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
        let modes: Vec<Mode> = self.rollouts.iter().zip(&self.views).map(|(r, v)| v.mode(r, now)).collect();
        if self.indexed && modes != self.modes {
            // Another flow, or another target, plans a rollout: its members are assessed again.
            let changed: BTreeSet<usize> = (0..modes.len()).filter(|i| modes.get(*i) != self.modes.get(*i)).collect();
            let members: Vec<String> = (self.nodes.iter())
                .filter(|(_, e)| matches!(e.owner, pools::Owner::Rollout(i) if changed.contains(&i)))
                .map(|(name, _)| name.clone())
                .collect();
            for name in members {
                self.forget(&name);
            }
        }
        self.modes = modes;
        for views in &mut self.views {
            views.refresh();
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
            entry.flow = None;
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
            let assessments: Vec<(String, Assessment, Option<Assessment>)> = names
                .into_iter()
                .filter_map(|name| {
                    let e = self.nodes.get(&name)?;
                    let a = super::assess_node(&e.view, e.owner, &self.rollouts, &self.fleet, &records, &lookup, now);
                    let flow = self.flow_assessment(e, &a, now);
                    Some((name, a, flow))
                })
                .collect();
            (assessments, related)
        };
        self.related = related;
        for (name, assessment, flow) in assessments {
            self.mark(&name, false);
            let Some(entry) = self.nodes.get_mut(&name) else { continue };
            entry.assessment = Some(assessment);
            entry.flow = flow;
            self.assessed += 1;
            self.mark(&name, true);
        }
    }

    /// The Kubernetes flow's assessment of a member (`image`: the image flow's), while it plans its rollout.
    fn flow_assessment(&self, entry: &Entry, image: &Assessment, now: Timestamp) -> Option<Assessment> {
        let pools::Owner::Rollout(i) = entry.owner else { return None };
        let Some(Mode::Upgrade(target)) = self.modes.get(i) else { return None };
        let spec = self.rollouts.get(i)?.spec.acting()?;
        Some(super::kubernetes::assess_member(&entry.view, image, target, spec, now))
    }

    /// Adds (`on`) or removes the node's assessment to or from the indexes.
    fn mark(&mut self, name: &str, on: bool) {
        if !self.indexed {
            return;
        }
        let Some(entry) = self.nodes.get(name) else { return };
        let Some(a) = &entry.assessment else { return };
        let (node, owner, flow) = (&entry.view, entry.owner, entry.flow.as_ref());
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
        // Both assessments read the time only through their deadlines. Only the planned one's write is made: the
        // image flow's, when the Kubernetes flow plans, differs with the time only in what no plan reads (the
        // Kubernetes flow takes over an image assessment whose write it makes).
        let planned = flow.unwrap_or(a);
        for wake in [a.wake_at, flow.and_then(|f| f.wake_at)].into_iter().flatten() {
            set(&mut self.wakes, (wake, name.to_owned()), on);
        }
        if planned.action.as_ref().is_some_and(|x| x.kind.writes()) {
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
        // The rollout's plan reads the assessment of the flow that plans it.
        if planned.action.is_some() {
            set(&mut tally.acting, name.to_owned(), on);
        }
        if let Some(at) = planned.wake_at {
            set(&mut tally.wakes, (at, name.to_owned()), on);
        }
        if !matches!(owner, pools::Owner::Rollout(_)) {
            if super::opted_in_unselected(node, owner) {
                set(&mut tally.not_selected, name.to_owned(), on);
            }
            return;
        }
        tally.note(node, planned, flow.is_some(), own_node, on);
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
            let member = |name: &str| self.nodes.get(name).is_some_and(|e| e.owner == pools::Owner::Rollout(index));
            let mode = self.modes.get(index).unwrap_or(&Mode::Image);
            let mut plan = match mode {
                Mode::Image => self.image_plan(index, rollout, tally, &records, &mut shared, now),
                Mode::Refused => self.refused_plan(rollout, tally),
                Mode::Upgrade(target) => self.upgrade_plan(rollout, target, tally, &mut shared, now),
            };
            plan.replacements = records.listing_of(member);
            if rollout.kubernetes.is_some() {
                let active = matches!(mode, Mode::Upgrade(_));
                let nodes = self.views.get(index).map(Views::listed).unwrap_or_default();
                plan.kubernetes = Some(Progress { active, nodes });
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

    /// The members' own progress as the plan lists it: their actions, the earliest wake-up, the counts and the
    /// lists of the status.
    fn progress(&self, tally: &Tally) -> Plan {
        let mut plan = self.own_progress(tally);
        self.summarize(&mut plan, tally);
        plan
    }

    /// The counts and the lists of the status, from the members `tally` lists.
    fn summarize(&self, plan: &mut Plan, tally: &Tally) {
        let listed: Vec<(&NodeView, &Assessment)> =
            tally.listed.iter().filter_map(|name| member(&self.nodes, name)).collect();
        super::image::summarize(plan, &listed);
        plan.counts = tally.counts;
        plan.preparing = tally.preparing > 0;
        plan.staged = tally.staged;
    }

    /// The image flow's plan of rollout `index` (see [`super::image`]).
    fn image_plan(
        &self,
        index: usize,
        rollout: &Rollout,
        tally: &Tally,
        records: &Records<'_>,
        shared: &mut pipeline::Shared,
        now: Timestamp,
    ) -> Plan {
        let mut plan = self.progress(tally);
        let member = |name: &str| self.nodes.get(name).is_some_and(|e| e.owner == pools::Owner::Rollout(index));
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
        let waiting = (tally.drain_timeouts as usize, tally.staged_waiting);
        if let Some(spec) = super::image::open_image_gates(rollout, &mut plan, &overlap, waiting, now) {
            let allowed = spec.policy.max_surge.resolve(tally.replaced);
            let mut surge = pipeline::Surge {
                free: allowed.saturating_sub(records.surge_used_of(member)),
                allowed,
                control_plane_active: records.control_plane_active(),
                worker_active: records.worker_active(),
                moving: records.moving(),
            };
            let pool = Indexed::all(tally, &self.nodes, self.own_node.as_deref());
            let flow = pipeline::Flow::Image { target: spec.target.clone() };
            let bounds = pipeline::Bounds::of(rollout, spec, &plan, now);
            let selected = pipeline::select(&pool, spec, &flow, (shared, &mut surge), &bounds);
            pipeline::start(&mut plan, &flow, selected, now);
        }
        plan
    }

    /// A refused Kubernetes upgrade's plan: the members in flight finish their step, nothing starts.
    fn refused_plan(&self, rollout: &Rollout, tally: &Tally) -> Plan {
        let mut plan = Plan::default();
        let in_flight = |name: &String| member(&self.nodes, name).filter(|(_, a)| a.in_flight());
        for (_, a) in tally.acting.iter().filter_map(in_flight) {
            plan.actions.extend(a.action.clone());
        }
        plan.wake(tally.wakes.iter().find(|(_, name)| in_flight(name).is_some()).map(|(at, _)| *at));
        self.summarize(&mut plan, tally);
        if let Some(super::kubernetes::KubernetesSpec::Refused(message)) = &rollout.kubernetes {
            plan.hold = Some(super::kubernetes::refused(message));
        }
        plan
    }

    /// The Kubernetes upgrade's plan (see [`super::kubernetes`]) to `target`.
    fn upgrade_plan(
        &self,
        rollout: &Rollout,
        target: &super::kubernetes::KubernetesTarget,
        tally: &Tally,
        shared: &mut pipeline::Shared,
        now: Timestamp,
    ) -> Plan {
        let mut plan = self.progress(tally);
        let Some(spec) = rollout.spec.acting() else { return plan };
        let heirs: Vec<(&NodeView, &Assessment)> =
            tally.heirs.iter().filter_map(|name| member(&self.nodes, name)).collect();
        let facts: Facts = tally.facts.facts();
        let pool = |narrowing: &super::kubernetes::Narrowing| Indexed {
            control_plane_only: narrowing.control_plane_only,
            limit: narrowing.limit,
            ..Indexed::all(tally, &self.nodes, self.own_node.as_deref())
        };
        let gates = (tally.drain_timeouts as usize, tally.staged_waiting);
        let autoscaler = self.fleet.autoscaler_running.as_deref();
        super::kubernetes::turns(
            &mut plan,
            (rollout, target, spec),
            &heirs,
            gates,
            &facts,
            pool,
            (shared, autoscaler),
            now,
        );
        plan
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
            a.name == b.name && a.kubernetes == b.kubernetes && a.rollback == b.rollback && same_spec(&a.spec, &b.spec)
        })
}
