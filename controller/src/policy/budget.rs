//! How many nodes may be updating at once.

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

/// How many new nodes may start: the allowance minus the nodes already unavailable.
pub fn free_slots(allowed: u32, unavailable: u32) -> u32 {
    allowed.saturating_sub(unavailable)
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
