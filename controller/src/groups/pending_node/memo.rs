//! The instance states the cloud gave, remembered by PendingNode ([`StateMemo`]), so that a reconcile that changes
//! nothing the state depends on does not ask the cloud again.

use super::decide::NodeFact;
use cloud::InstanceState;
use jiff::Timestamp;
use std::time::Duration;

/// How old a group's list a read may take at most (younger when the PendingNode is polled more often; never one
/// started before its first look, see [`StateMemo::list_since`]).
pub const LIST_REUSE: Duration = Duration::from_secs(1);

/// The instance states the cloud gave, by PendingNode, so that a reconcile that changes nothing the state depends
/// on does not ask again. A reconcile runs on every event of the instance's Node (its agent's and kubelet's
/// writes) and on the controller's own status writes; the state is asked again only when it is older than the
/// poll interval, when the Node's [`NodeFact`] changed since it was read (registered, Ready, gone: moments at
/// which the cloud's state changes too), and after the controller deleted the instance. Errors are not kept.
#[derive(Debug, Default)]
pub struct StateMemo {
    seen: std::collections::HashMap<String, Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    state: InstanceState,
    node: NodeFact,
    at: Timestamp,
    valid_for: Duration,
    /// The first look at the PendingNode (after its instance was created, or deleted by this controller): no list
    /// started before it answers for the instance.
    anchor: tokio::time::Instant,
}

impl StateMemo {
    /// The state read for `key` (a PendingNode's UID), if it is still valid at `now` and was read while the
    /// instance's Node was `node`.
    pub fn fresh(&self, key: &str, node: NodeFact, now: Timestamp) -> Option<InstanceState> {
        let seen = self.seen.get(key)?;
        let age = Duration::try_from(now.duration_since(seen.at)).ok()?;
        (seen.node == node && age < seen.valid_for).then_some(seen.state)
    }

    /// Records what the cloud said for `key` at `at`, while its Node was `node`, to be used for `valid_for`
    /// (the poll interval: the timer that polls next finds it expired); forgets what expired.
    pub fn record(&mut self, key: &str, node: NodeFact, state: InstanceState, at: Timestamp, valid_for: Duration) {
        let anchor = self.seen.get(key).map_or_else(tokio::time::Instant::now, |s| s.anchor);
        // Kept for twice their validity (or LIST_REUSE): [`StateMemo::list_since`] needs the first look's time.
        self.seen.retain(|_, s| {
            !matches!(Duration::try_from(at.duration_since(s.at)), Ok(age) if age >= 2 * s.valid_for.max(LIST_REUSE))
        });
        self.seen.insert(key.to_owned(), Seen { state, node, at, valid_for, anchor });
    }

    /// The earliest start of a group list that may answer for `key` at `now`: `reuse` ago (its poll interval, at
    /// most [`LIST_REUSE`]), but never before the PendingNode's first look (a list from before its instance was
    /// created does not show it). `None` at the first look (nothing recorded for `key`: a new PendingNode, or its
    /// instance just deleted by this controller).
    pub fn list_since(&self, key: &str, now: tokio::time::Instant, reuse: Duration) -> Option<tokio::time::Instant> {
        let seen = self.seen.get(key)?;
        Some(now.checked_sub(reuse.min(LIST_REUSE)).unwrap_or(now).max(seen.anchor))
    }

    /// Records that this controller deleted `key`'s instance at `at`: nothing is remembered of its state, and the
    /// next read takes only a list started after the deletion.
    pub fn deleted(&mut self, key: &str, at: Timestamp) {
        let anchor = tokio::time::Instant::now();
        let seen =
            Seen { state: InstanceState::Terminating, node: NodeFact::Absent, at, valid_for: Duration::ZERO, anchor };
        self.seen.insert(key.to_owned(), seen);
    }

    /// Forgets `key` (its PendingNode is done or gone).
    pub fn forget(&mut self, key: &str) {
        self.seen.remove(key);
    }

    /// How many states are kept.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}
