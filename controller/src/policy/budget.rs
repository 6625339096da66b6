//! How many nodes may be updating at once, and what the rollouts' budgets leave for a disruption they do not decide
//! themselves (a NodeOp's: [`budgets`]).

use super::assess::Situation;
use super::{Fleet, NodeView, Rollout};
use jiff::Timestamp;

/// `maxUnavailable` as validated: a count or a percentage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUnavailable {
    /// At least 1.
    Count(u32),
    /// 1 to 100.
    Percent(u32),
}

impl Default for MaxUnavailable {
    fn default() -> Self {
        MaxUnavailable::Count(1)
    }
}

impl MaxUnavailable {
    /// The number of nodes of `total` that may be unavailable at once.
    ///
    /// Percentages round up, as Karpenter's disruption budgets and PDB `maxUnavailable` do, so any
    /// percentage of a non-empty pool allows at least one node: 10% of 5 nodes is 1, 10% of 1000 is
    /// 100, 34% of 3 is 2. An empty pool allows none.
    pub fn resolve(self, total: u32) -> u32 {
        match self {
            MaxUnavailable::Count(n) => n,
            MaxUnavailable::Percent(p) => (u64::from(p) * u64::from(total)).div_ceil(100) as u32,
        }
    }
}

/// `maxSurge` as validated: how many instances a rollout's replacements may add beyond the groups' sizes at once,
/// a count or a percentage of the nodes it replaces (rounded up, as [`MaxUnavailable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxSurge {
    Count(u32),
    /// 1 to 100.
    Percent(u32),
}

impl Default for MaxSurge {
    fn default() -> Self {
        MaxSurge::Count(1)
    }
}

impl From<MaxUnavailable> for MaxSurge {
    fn from(amount: MaxUnavailable) -> Self {
        match amount {
            MaxUnavailable::Count(n) => MaxSurge::Count(n),
            MaxUnavailable::Percent(p) => MaxSurge::Percent(p),
        }
    }
}

impl MaxSurge {
    /// The number of instances the replacement of `replaced` nodes may add at once.
    pub fn resolve(self, replaced: u32) -> u32 {
        match self {
            MaxSurge::Count(n) => n,
            MaxSurge::Percent(p) => MaxUnavailable::Percent(p).resolve(replaced),
        }
    }
}

/// How many new nodes may start: the allowance minus the nodes already unavailable.
pub fn free_slots(allowed: u32, unavailable: u32) -> u32 {
    allowed.saturating_sub(unavailable)
}

/// One active rollout's budget: how many of its nodes may be out at once, and how many are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub allowed: u32,
    pub unavailable: u32,
}

/// The rollouts' budgets as a disruption they do not decide (a NodeOp's) must keep to them; built by
/// [`budgets`].
#[derive(Debug, Clone, Default)]
pub struct Budgets {
    /// Each rollout's name and limit (`None`: it has nothing to do, or no spec to act on).
    rollouts: Vec<(String, Option<Limit>)>,
    /// Each node's rollout (`None`: no rollout manages it, so it counts in every budget) and whether it counts
    /// against that budget already.
    nodes: std::collections::HashMap<String, (Option<usize>, bool)>,
    /// The rollouts are not known yet (the reconciler has not planned since the controller started).
    unknown: bool,
    /// Rule 8 of the pipeline (`super::pipeline`): the control-plane nodes busy now, each with why and the NodeOp
    /// mark it carries (a NodeOp's own nodes do not hold its other nodes: it keeps them one at a time itself); a
    /// node a NodeOp starts is added.
    control_plane: Vec<BusyControlPlane>,
    /// Rule 7b of the pipeline: each rollout's `maxUnavailablePerZone` (`None`: no limit beyond its budget), by index.
    per_zone: Vec<Option<u32>>,
    /// Each member's zone (`topology.kubernetes.io/zone`; absent: the zone without a name).
    zones: std::collections::HashMap<String, String>,
    /// The members counted against their rollout's budget, by rollout and zone.
    zone_out: std::collections::HashMap<(usize, String), u32>,
}

/// A control-plane node that keeps every other control-plane start waiting (rule 8 of the pipeline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusyControlPlane {
    /// The node; `None` for a control-plane replacement whose donor's Node is gone (its old instance is deleted).
    pub node: Option<String>,
    /// Why it is busy.
    pub why: String,
    /// The NodeOp mark it carries (`keys::NODE_OPERATION`).
    pub mark: Option<String>,
}

impl Budgets {
    pub fn new(rollouts: Vec<(String, Option<Limit>)>, nodes: Vec<(String, Option<usize>, bool)>) -> Budgets {
        let nodes = nodes.into_iter().map(|(name, rollout, counted)| (name, (rollout, counted))).collect();
        Budgets { rollouts, nodes, unknown: false, ..Budgets::default() }
    }

    /// These budgets with each rollout's share per zone (rule 7b of the pipeline: `per_zone`, by rollout index) and
    /// each member's zone, counted over the members already out as the pipeline counts them (nodes no rollout
    /// manages count in every budget, not in a zone's share).
    pub fn with_zones(
        mut self,
        per_zone: Vec<Option<u32>>,
        zones: std::collections::HashMap<String, String>,
    ) -> Budgets {
        self.zone_out.clear();
        for (node, (rollout, counted)) in &self.nodes {
            if let (Some(i), true) = (rollout, counted) {
                *self.zone_out.entry((*i, zones.get(node).cloned().unwrap_or_default())).or_default() += 1;
            }
        }
        self.per_zone = per_zone;
        self.zones = zones;
        self
    }

    /// The rollout `node` is a member of and its zone, when that rollout limits a zone's share.
    fn zone_share(&self, node: &str) -> Option<(usize, String, u32)> {
        let (Some(rollout), _) = self.nodes.get(node)? else { return None };
        let limit = self.per_zone.get(*rollout).copied().flatten()?;
        Some((*rollout, self.zones.get(node).cloned().unwrap_or_default(), limit))
    }

    /// These budgets with the control-plane nodes busy now (rule 8 of the pipeline).
    pub fn with_control_plane(mut self, busy: Vec<BusyControlPlane>) -> Budgets {
        self.control_plane = busy;
        self
    }

    /// Why no control-plane node other than the NodeOp `mark`'s own may start now (rule 8 of the pipeline: one
    /// control-plane node at a time across every rollout, flow and NodeOp), if that is so.
    pub fn control_plane_busy(&self, mark: &str) -> Option<String> {
        let busy = self.control_plane.iter().find(|b| b.mark.as_deref() != Some(mark))?;
        Some(match &busy.node {
            Some(node) => format!(
                "waiting: control-plane nodes go one at a time, and control-plane node {node} is busy: {}",
                busy.why
            ),
            None => format!("waiting: control-plane nodes go one at a time, and {}", busy.why),
        })
    }

    /// Records that the NodeOp `mark` started the control-plane node `node`.
    pub fn take_control_plane(&mut self, node: &str, mark: &str) {
        self.control_plane.push(BusyControlPlane {
            node: Some(node.to_owned()),
            why: format!("the NodeOp {mark} works on it"),
            mark: Some(mark.to_owned()),
        });
    }

    /// Budgets of rollouts not known yet: nothing may be disrupted.
    pub fn unknown() -> Budgets {
        Budgets { unknown: true, ..Budgets::default() }
    }

    /// The budgets a disruption of `node` takes a slot of, with their index; none when it counts already.
    fn affected(&self, node: &str) -> Vec<usize> {
        match self.nodes.get(node) {
            Some((_, true)) => Vec::new(),
            Some((Some(rollout), false)) => vec![*rollout],
            // A node no rollout manages (or one not seen yet) counts in every budget.
            Some((None, false)) | None => (0..self.rollouts.len()).collect(),
        }
    }

    /// Whether `node` may be disrupted now without any rollout's budget going over; if not, which budget is full.
    pub fn room(&self, node: &str) -> Result<(), String> {
        if self.unknown {
            return Err("the rollouts' budgets are not known yet (the controller has not planned them)".into());
        }
        for i in self.affected(node) {
            let (name, limit) = &self.rollouts[i];
            if let Some(Limit { allowed, unavailable }) = limit
                && unavailable >= allowed
            {
                return Err(format!(
                    "the rollout of NodeVersion {name} allows {allowed} node(s) out at once (maxUnavailable) and \
                     {unavailable} are out"
                ));
            }
        }
        if let Some((rollout, zone, limit)) = self.zone_share(node)
            && !self.affected(node).is_empty()
            && self.rollouts[rollout].1.is_some()
        {
            let out = self.zone_out.get(&(rollout, zone.clone())).copied().unwrap_or(0);
            if out >= limit {
                let name = &self.rollouts[rollout].0;
                let zone = if zone.is_empty() { "(no zone)".to_owned() } else { zone };
                return Err(format!(
                    "the rollout of NodeVersion {name} allows {limit} node(s) of zone {zone} out at once \
                     (maxUnavailablePerZone) and {out} are out"
                ));
            }
        }
        Ok(())
    }

    /// Counts `node` as disrupted in every budget it takes a slot of.
    pub fn take(&mut self, node: &str) {
        for i in self.affected(node) {
            if let Some(limit) = &mut self.rollouts[i].1 {
                limit.unavailable += 1;
            }
        }
        let rollout = self.nodes.get(node).and_then(|(rollout, _)| *rollout);
        if !self.affected(node).is_empty()
            && let Some((rollout, zone, _)) = self.zone_share(node)
        {
            *self.zone_out.entry((rollout, zone)).or_default() += 1;
        }
        self.nodes.insert(node.to_owned(), (rollout, true));
    }
}

/// [`Budgets`] computed only when first asked for: they read every node, and most rounds start nothing.
pub struct LazyBudgets<'a> {
    make: Option<Box<dyn Fn() -> Budgets + Send + 'a>>,
    value: Option<Budgets>,
}

impl<'a> LazyBudgets<'a> {
    /// Budgets `make` computes on first use.
    pub fn new(make: impl Fn() -> Budgets + Send + 'a) -> Self {
        LazyBudgets { make: Some(Box::new(make)), value: None }
    }

    /// Budgets known already.
    pub fn ready(budgets: Budgets) -> Self {
        LazyBudgets { make: None, value: Some(budgets) }
    }

    /// The budgets, computed now if not yet.
    pub fn get(&mut self) -> &mut Budgets {
        let make = &self.make;
        self.value.get_or_insert_with(|| make.as_ref().map(|make| make()).unwrap_or_else(Budgets::unknown))
    }

    /// What the budgets are now (`None`: not computed yet), to go back to with [`LazyBudgets::restore`] when the
    /// starts decided since are not made.
    pub fn saved(&self) -> Option<Budgets> {
        self.value.clone()
    }

    /// Back to budgets [`LazyBudgets::saved`] (computed again on first use if they were not computed then).
    pub fn restore(&mut self, saved: Option<Budgets>) {
        self.value = saved;
    }

    /// Whether they were computed.
    pub fn computed(&self) -> bool {
        self.value.is_some()
    }
}

/// What the rollouts' budgets leave for a disruption they do not decide themselves (a NodeOp's): for each rollout
/// that has work to do (a member not up to date, or a Kubernetes upgrade not finished), its `maxUnavailable` over
/// its members and how many count against it now, counted as [`plan`](super::plan) counts them; and for each node,
/// the budgets its disruption would take a slot of (its rollout's; every active rollout's for a node no rollout
/// manages, as [`plan`](super::plan) counts those in every budget). A rollout with nothing to do starts nothing, so
/// it constrains nothing. `fleet` is the cloud's view the plan was made with: a joining heir is extra capacity, not
/// an unavailable node, and a donor's replacement is assessed as [`plan_with`](super::plan_with) assesses it.
///
/// IMPORTANT: a node counts as it is now, not as the plan leaves it. The plan counts a node whose own action frees
/// its slot (a verified reboot that uncordons it) as free, because the executor writes that action before any
/// start; a NodeOp deciding before the reconciler wrote it would take a slot still held, and the cluster would
/// have one node more out than allowed until the write (seen: three nodes out under `maxUnavailable` 2).
pub fn budgets(nodes: &[NodeView], rollouts: &[Rollout], fleet: &Fleet, now: Timestamp) -> Budgets {
    let owners = super::pools::owners(nodes, rollouts);
    let records = super::replacement::Records::find(nodes, fleet);
    let assessments = super::assess_all(nodes, &owners, rollouts, fleet, &records, now);
    let mut members = vec![0u32; rollouts.len()];
    let mut unavailable = vec![0u32; rollouts.len()];
    let mut active = vec![false; rollouts.len()];
    let mut unowned_unavailable = 0;
    let mut counted = Vec::with_capacity(nodes.len());
    let mut control_plane = Vec::new();
    for ((node, owner), a) in nodes.iter().zip(&owners).zip(&assessments) {
        let releasing = releasing(node, a);
        let busy = super::control_plane_busy(node, *owner, a);
        if busy || (node.control_plane && releasing) {
            let why = if busy {
                super::why_busy(node, a)
            } else {
                "a rollout finishes its step (not written yet)".to_owned()
            };
            control_plane.push(BusyControlPlane { node: Some(node.name.clone()), why, mark: node.operation.clone() });
        }
        match owner {
            super::pools::Owner::Rollout(i) => {
                members[*i] += 1;
                let out = a.unavailable(node) || releasing;
                unavailable[*i] += u32::from(out);
                active[*i] |= a.situation != Situation::UpToDate;
                if let Some(super::kubernetes::KubernetesSpec::Upgrade(target)) = &rollouts[*i].kubernetes {
                    let hash = node.agent.as_ref().ok().and_then(|r| r.components_hash.as_ref()).map(|h| h.to_string());
                    active[*i] |= hash.as_deref() != Some(target.hash.as_str());
                }
                counted.push((node.name.clone(), Some(*i), out));
            }
            super::pools::Owner::Nobody { .. } | super::pools::Owner::Unknown => {
                let out = super::busy(node, *owner, a) || releasing;
                unowned_unavailable += u32::from(out);
                counted.push((node.name.clone(), None, out));
            }
        }
    }
    let limits = rollouts.iter().enumerate().map(|(i, rollout)| {
        let limit = rollout.spec.acting().filter(|_| active[i]).map(|spec| Limit {
            allowed: spec.policy.max_unavailable.resolve(members[i]),
            unavailable: unavailable[i] + unowned_unavailable,
        });
        (rollout.name.clone(), limit)
    });
    if records.control_plane_active() {
        let why = "a control-plane node's replacement is in progress (its new instance joining or its old one being \
                   deleted)";
        control_plane.push(BusyControlPlane { node: None, why: why.to_owned(), mark: None });
    }
    let per_zone = rollouts.iter().map(|r| r.spec.acting().and_then(|s| s.policy.max_unavailable_per_zone)).collect();
    let zones = nodes.iter().filter_map(|n| Some((n.name.clone(), n.zone.clone()?))).collect();
    Budgets::new(limits.collect(), counted).with_control_plane(control_plane).with_zones(per_zone, zones)
}

/// Whether the node is out now and its own action this round is what frees it (a verification that uncordons it,
/// a finished reboot): free once the executor wrote the action, not before.
fn releasing(node: &NodeView, a: &super::assess::Assessment) -> bool {
    let disrupting = node.controller.as_ref().ok().and_then(|c| c.intent.as_ref()).is_some_and(|i| i.step.disrupts());
    a.action.is_some() && !a.surge && (node.unschedulable || !node.ready || disrupting)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up_and_counts_are_taken_as_they_are() {
        let cases = [
            (MaxUnavailable::Count(1), 13, 1),
            (MaxUnavailable::Count(10), 3, 10),
            (MaxUnavailable::Percent(10), 5, 1),
            (MaxUnavailable::Percent(10), 1000, 100),
            (MaxUnavailable::Percent(34), 3, 2),
            (MaxUnavailable::Percent(100), 7, 7),
            (MaxUnavailable::Percent(1), 1, 1),
            (MaxUnavailable::Percent(50), 0, 0),
        ];
        for (max, total, want) in cases {
            assert_eq!(max.resolve(total), want, "{max:?} of {total}");
        }
    }

    #[test]
    fn slots_never_go_negative() {
        assert_eq!(free_slots(3, 1), 2);
        assert_eq!(free_slots(3, 3), 0);
        assert_eq!(free_slots(1, 4), 0);
    }
}
