//! The pipeline's per-node rules (`super::pipeline`, after the rollout-wide gates) for one node about to be
//! disrupted, in their one order, for every flow's candidates and for every NodeOp's waiting nodes alike:
//! 1. **the budget**: a free slot (a rollout's `maxUnavailable` less what is out; a NodeOp's `concurrency`);
//! 2. **the zone's share** (`maxUnavailablePerZone`): a node of a full zone is passed over for the next zone's;
//! 3. **one control-plane node at a time**: a control-plane node is passed over while another is busy;
//! 4. **control plane first**: no worker starts while a control-plane node is pending.
//!
//! [`Admission::check`] says which rule holds a node back, [`Admission::take`] counts a node that starts (a slot,
//! its zone's share, and a control-plane node busy from then on). What a caller adds between the two is its own
//! (a replacement's `maxSurge`, a NodeOp's budgets of the rollouts it takes slots of).

use std::collections::BTreeMap;

/// What the rules read while nodes are taken one by one in start order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Admission {
    /// Rule 1: how many more nodes may be disrupted (`None`: no limit of its own).
    pub slots: Option<u32>,
    /// Rule 2: `maxUnavailablePerZone` (`None`: no share per zone) and the nodes out in each zone (the zone
    /// without a name as `""`).
    pub per_zone: Option<u32>,
    pub zones: BTreeMap<String, u32>,
    /// Rule 3: why a control-plane node may not start now, if another keeps it waiting.
    pub control_plane_busy: Option<String>,
    /// Rule 4: why a worker may not start now, if a control-plane node is pending.
    pub control_plane_first: Option<String>,
}

/// Why a node is held back by [`Admission::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Held {
    /// Rule 1: no slot is left; no later node starts either.
    NoSlot,
    /// Rule 2: its zone's share is taken; a node of another zone may start.
    ZoneFull { zone: String, limit: u32 },
    /// Rule 3: another control-plane node is busy; a worker may still start.
    ControlPlaneBusy(String),
    /// Rule 4: the control plane goes first; no later worker starts either.
    ControlPlaneFirst(String),
}

impl Admission {
    /// The first rule, in order, that holds back a node (`control_plane`, in `zone`); `holds_slot`: it holds a
    /// slot already (a NodeOp's node whose preflight check runs), so rule 1 does not apply to it.
    pub fn check(&self, control_plane: bool, zone: Option<&str>, holds_slot: bool) -> Result<(), Held> {
        if !holds_slot && self.slots == Some(0) {
            return Err(Held::NoSlot);
        }
        if let Some(limit) = self.per_zone {
            let zone = zone.unwrap_or_default();
            if self.zones.get(zone).copied().unwrap_or(0) >= limit {
                return Err(Held::ZoneFull { zone: zone.to_owned(), limit });
            }
        }
        if control_plane {
            if let Some(why) = &self.control_plane_busy {
                return Err(Held::ControlPlaneBusy(why.clone()));
            }
        } else if let Some(why) = &self.control_plane_first {
            return Err(Held::ControlPlaneFirst(why.clone()));
        }
        Ok(())
    }

    /// Counts a node that starts: a slot (unless it holds one already), its zone's share, and, for a
    /// control-plane node, `busy` as why the next control-plane node waits.
    pub fn take(&mut self, control_plane: bool, zone: Option<&str>, holds_slot: bool, busy: impl FnOnce() -> String) {
        if !holds_slot && let Some(slots) = &mut self.slots {
            *slots = slots.saturating_sub(1);
        }
        if self.per_zone.is_some() {
            *self.zones.entry(zone.unwrap_or_default().to_owned()).or_default() += 1;
        }
        if control_plane && self.control_plane_busy.is_none() {
            self.control_plane_busy = Some(busy());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(slots: Option<u32>) -> Admission {
        Admission { slots, ..Admission::default() }
    }

    #[test]
    fn the_rules_hold_a_node_back_in_their_order() {
        let mut a = admission(Some(1));
        a.per_zone = Some(1);
        a.zones.insert("zone-a".into(), 1);
        a.control_plane_busy = Some("cp1 is busy".into());
        a.control_plane_first = Some("cp2 is outdated".into());
        // Rule 1 first, then 2, 3 (control plane) or 4 (workers).
        assert_eq!(a.check(false, Some("zone-a"), false), Err(Held::ZoneFull { zone: "zone-a".into(), limit: 1 }));
        assert_eq!(a.check(true, Some("zone-b"), false), Err(Held::ControlPlaneBusy("cp1 is busy".into())));
        assert_eq!(a.check(false, Some("zone-b"), false), Err(Held::ControlPlaneFirst("cp2 is outdated".into())));
        a.slots = Some(0);
        assert_eq!(a.check(false, Some("zone-a"), false), Err(Held::NoSlot));
        // A node holding a slot already is not held by rule 1.
        assert_eq!(a.check(false, Some("zone-a"), true), Err(Held::ZoneFull { zone: "zone-a".into(), limit: 1 }));
    }

    #[test]
    fn a_node_taken_takes_a_slot_its_zones_share_and_the_control_plane() {
        let mut a = admission(Some(2));
        a.per_zone = Some(1);
        assert_eq!(a.check(true, None, false), Ok(()));
        a.take(true, None, false, || "cp1 is being updated".into());
        assert_eq!(a.slots, Some(1));
        assert_eq!(a.check(true, Some("zone-a"), false), Err(Held::ControlPlaneBusy("cp1 is being updated".into())));
        assert_eq!(a.check(false, None, false), Err(Held::ZoneFull { zone: String::new(), limit: 1 }));
        a.take(false, Some("zone-a"), false, String::new);
        assert_eq!(a.check(false, Some("zone-b"), false), Err(Held::NoSlot));
        // Without a limit of its own, only the other rules count.
        let mut unlimited = admission(None);
        for _ in 0..10 {
            assert_eq!(unlimited.check(false, None, false), Ok(()));
            unlimited.take(false, None, false, String::new);
        }
        // A node holding its slot already takes none.
        let mut one = admission(Some(1));
        one.take(false, None, true, String::new);
        assert_eq!(one.slots, Some(1));
    }
}
