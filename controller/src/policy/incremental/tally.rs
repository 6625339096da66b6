//! What one rollout's plan reads of its members' assessments, kept up to date one member at a time ([`Tally`]),
//! and the members as the [`pipeline`]'s selection reads them from it ([`Indexed`]).
//!
//! A member counts with the assessment of the flow that plans its rollout: the image flow's, or the Kubernetes
//! upgrade's while one is under way ([`super::kubernetes`]). The two differ in what they let start: the Kubernetes
//! flow never starts a heir through the budget (it starts heirs itself, outside it), and its control-plane members
//! keep the workers waiting until they are up to date.

use super::super::assess::{Assessment, Situation};
use super::super::kubernetes::{self, Facts};
use super::super::pipeline::{self, Pool};
use super::super::{Counts, NodeView};
use super::Entry;
use jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// What one rollout's plan (or the plan of the nodes no rollout manages) reads of its members' assessments.
#[derive(Debug, Default, Clone)]
pub(super) struct Tally {
    /// Its members' counts, as [`summarize`](super::super::image::summarize) counts them.
    pub counts: Counts,
    /// Outdated members made ready to start by their own write.
    pub preparing: u32,
    /// Members blocked by a drain.
    pub drain_timeouts: u32,
    /// Members replaced when they start ([`Assessment::replace`]): what `maxSurge` resolves against.
    pub replaced: u32,
    /// Members with an action.
    pub acting: BTreeSet<String>,
    pub wakes: BTreeSet<(Timestamp, String)>,
    /// Members the plan lists: in flight, failed, blocked, or held back for a reason of their own.
    pub listed: BTreeSet<String>,
    /// Eligible outdated members the flow may start, in the order they start ([`pipeline::order`]).
    pub candidates: BTreeSet<pipeline::Order>,
    /// Of those, the ones updated in place.
    pub in_place_candidates: BTreeSet<pipeline::Order>,
    /// Of those, the ones replaced.
    pub replaced_candidates: BTreeSet<pipeline::Order>,
    /// Members staged ahead and eligible to be drained that the flow may start, in the order they start.
    pub staged_candidates: BTreeSet<pipeline::Order>,
    /// Members staged ahead and eligible to be drained, whichever flow may start them: what the gates count
    /// ([`pipeline::waiting`]).
    pub staged_waiting: u32,
    /// Members in the stage step (staging or staged).
    pub staging: u32,
    /// Of those, the ones staged (waiting for their turn).
    pub staged: u32,
    /// Workers in the stage step that may yield their slot to the control plane ([`pipeline::yields`]), in start
    /// order, each with whether it is staged (the incremental planner never plans a rollback).
    pub staging_workers: BTreeSet<(pipeline::Order, bool)>,
    /// Members still staging and Ready ([`pipeline::staging_barrier`]) that the flow may start, in start order.
    pub staging_unstaged: BTreeSet<pipeline::Order>,
    /// Members in flight ([`Situation::InFlight`]).
    pub in_flight: u32,
    /// Members counted against the budget.
    pub unavailable: BTreeSet<String>,
    /// Control-plane members the workers wait for.
    pub control_plane_pending: BTreeSet<String>,
    /// Nodes the rollout selects that an older one manages.
    pub overlap: BTreeSet<String>,
    /// Of the nodes no rollout manages: those that opt in, which no selector selects.
    pub not_selected: BTreeSet<String>,
    /// The Kubernetes flow's heirs, by name ([`kubernetes::heir`]).
    pub heirs: BTreeSet<String>,
    /// How many members make each of the Kubernetes flow's [`Facts`] true.
    pub facts: FactCounts,
}

/// How many members make each of [`Facts`] true.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FactCounts {
    control_plane_unavailable: u32,
    in_flight: u32,
    control_plane_in_flight: u32,
    control_plane_may_move: u32,
}

impl FactCounts {
    fn note(&mut self, facts: Facts, on: bool) {
        let pairs = [
            (&mut self.control_plane_unavailable, facts.control_plane_unavailable),
            (&mut self.in_flight, facts.in_flight),
            (&mut self.control_plane_in_flight, facts.control_plane_in_flight),
            (&mut self.control_plane_may_move, facts.control_plane_may_move),
        ];
        for (counter, holds) in pairs {
            if holds {
                count(counter, on);
            }
        }
    }

    pub(super) fn facts(&self) -> Facts {
        Facts {
            control_plane_unavailable: self.control_plane_unavailable > 0,
            in_flight: self.in_flight > 0,
            control_plane_in_flight: self.control_plane_in_flight > 0,
            control_plane_may_move: self.control_plane_may_move > 0,
        }
    }
}

impl Tally {
    /// Adds (`on`) or removes a member of the rollout, assessed `a` by the flow that plans it: the Kubernetes
    /// upgrade's (`kubernetes`) or the image flow's.
    pub(super) fn note(&mut self, node: &NodeView, a: &Assessment, kubernetes: bool, own_node: Option<&str>, on: bool) {
        let name = &node.name;
        if a.replace {
            count(&mut self.replaced, on);
        }
        // The Kubernetes flow starts no heir through the budget (it starts them itself: `kubernetes::heir`).
        let may_start = !(kubernetes && a.surge);
        if kubernetes {
            self.facts.note(Facts::member(node, a), on);
            if kubernetes::heir(a) {
                set(&mut self.heirs, name.clone(), on);
            }
        }
        let counts = &mut self.counts;
        count(&mut counts.total, on);
        let listed = match &a.situation {
            Situation::UpToDate => {
                count(&mut counts.up_to_date, on);
                false
            }
            Situation::Outdated { held, eligible } => {
                count(&mut counts.outdated, on);
                if !eligible && held.is_none() && a.action.as_ref().is_some_and(|x| x.kind.writes()) {
                    count(&mut self.preparing, on);
                }
                if *eligible && may_start {
                    set(&mut self.candidates, pipeline::order(node, own_node), on);
                    if a.replace {
                        set(&mut self.replaced_candidates, pipeline::order(node, own_node), on);
                    } else {
                        set(&mut self.in_place_candidates, pipeline::order(node, own_node), on);
                    }
                }
                if held.is_some() {
                    count(&mut counts.held_back, on);
                }
                held.is_some()
            }
            Situation::Staging { eligible, staged, .. } => {
                count(&mut counts.in_progress, on);
                count(&mut self.staging, on);
                if *staged {
                    count(&mut self.staged, on);
                }
                if pipeline::yields(node, a, false) {
                    set(&mut self.staging_workers, (pipeline::order(node, own_node), *staged), on);
                }
                if pipeline::staging_barrier(node, a) && may_start {
                    set(&mut self.staging_unstaged, pipeline::order(node, own_node), on);
                }
                if *eligible {
                    count(&mut self.staged_waiting, on);
                    if may_start {
                        set(&mut self.staged_candidates, pipeline::order(node, own_node), on);
                    }
                }
                true
            }
            Situation::InFlight { .. } => {
                count(&mut counts.in_progress, on);
                count(&mut self.in_flight, on);
                true
            }
            Situation::Failed { .. } => {
                count(&mut counts.failed, on);
                true
            }
            Situation::Blocked { by_drain, .. } => {
                count(&mut counts.blocked, on);
                if *by_drain {
                    count(&mut self.drain_timeouts, on);
                }
                true
            }
        };
        if listed {
            set(&mut self.listed, name.clone(), on);
        }
        if a.unavailable(node) {
            set(&mut self.unavailable, name.clone(), on);
        }
        let pending = if kubernetes {
            node.control_plane && kubernetes::barrier(a)
        } else {
            pipeline::control_plane_pending(node, a)
        };
        if pending {
            set(&mut self.control_plane_pending, name.clone(), on);
        }
    }
}

/// A rollout's members as the indexes keep them, narrowed as the flow asks: only control-plane members take their
/// turn (`control_plane_only`), at most `limit` staged ones (see [`kubernetes::Narrowing`]).
pub(super) struct Indexed<'a> {
    pub tally: &'a Tally,
    pub nodes: &'a BTreeMap<String, Entry>,
    pub own_node: Option<&'a str>,
    pub control_plane_only: bool,
    pub limit: usize,
}

impl<'a> Indexed<'a> {
    /// The image flow's view: every candidate may take its turn.
    pub(super) fn all(tally: &'a Tally, nodes: &'a BTreeMap<String, Entry>, own_node: Option<&'a str>) -> Self {
        Indexed { tally, nodes, own_node, control_plane_only: false, limit: usize::MAX }
    }

    /// Whether a member in this order may take its turn (the control plane comes first in the order: a filter
    /// that stops at the first worker reads no more than it keeps).
    fn takes_turn(&self, order: &pipeline::Order) -> bool {
        !self.control_plane_only || !order.0
    }

    fn view(&self, name: &str) -> Option<&'a NodeView> {
        let nodes = self.nodes;
        Some(&nodes.get(name)?.view)
    }
}

impl<'a> Pool<'a> for Indexed<'a> {
    fn candidates(&self) -> Box<dyn Iterator<Item = (&'a NodeView, bool)> + '_> {
        let nodes = self.nodes;
        Box::new(self.tally.candidates.iter().filter_map(move |order| {
            let (node, a) = member(nodes, &order.4)?;
            // Members updated in place are staged ahead whatever the narrowing; a replacement is a turn.
            (!a.replace || self.takes_turn(order)).then_some((node, a.replace))
        }))
    }

    fn in_place_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        Box::new(self.tally.in_place_candidates.iter().filter_map(move |order| self.view(&order.4)))
    }

    fn replaced_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        let turns = self.tally.replaced_candidates.iter().take_while(move |order| self.takes_turn(order));
        Box::new(turns.filter_map(move |order| self.view(&order.4)))
    }

    fn any_replaced_candidate(&self) -> bool {
        self.tally.replaced_candidates.first().is_some_and(|order| self.takes_turn(order))
    }

    fn staged_candidates(&self) -> Box<dyn Iterator<Item = &'a NodeView> + '_> {
        let turns = self.tally.staged_candidates.iter().take_while(move |order| self.takes_turn(order));
        Box::new(turns.take(self.limit).filter_map(move |order| self.view(&order.4)))
    }

    fn staging_count(&self) -> u32 {
        self.tally.staging
    }

    fn staging_followers(&self) -> Vec<(&'a NodeView, bool)> {
        self.tally.staging_workers.iter().filter_map(|(order, staged)| Some((self.view(&order.4)?, *staged))).collect()
    }

    fn first_staging(&self) -> Option<pipeline::Order> {
        self.tally.staging_unstaged.first().filter(|order| self.takes_turn(order)).cloned()
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

/// A member and the assessment its rollout's plan reads: the Kubernetes flow's while it plans, else the image
/// flow's.
pub(super) fn member<'a>(nodes: &'a BTreeMap<String, Entry>, name: &str) -> Option<(&'a NodeView, &'a Assessment)> {
    let entry = nodes.get(name)?;
    Some((&entry.view, entry.planned()?))
}

pub(super) fn set<T: Ord>(set: &mut BTreeSet<T>, key: T, on: bool) {
    if on {
        set.insert(key);
    } else {
        set.remove(&key);
    }
}

pub(super) fn count(counter: &mut u32, on: bool) {
    if on {
        *counter += 1;
    } else {
        *counter = counter.saturating_sub(1);
    }
}
