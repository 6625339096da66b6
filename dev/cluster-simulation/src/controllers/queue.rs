//! A work queue of keys, as upstream controllers use: deduplicated, with delayed adds.
//!
//! # Guarantees
//! - A key waiting in the queue is there once, however often it is added; a key added while it is being worked
//!   on is handed out again afterwards.
//! - `add_after` keeps the earliest due time of a key; a later `add` hands it out at once.
//! - `next` waits without polling: on a notification or on the earliest due time.

use parking_lot::Mutex;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

struct Timer<K> {
    due: Instant,
    key: K,
}

impl<K> PartialEq for Timer<K> {
    fn eq(&self, other: &Self) -> bool {
        self.due == other.due
    }
}

impl<K> Eq for Timer<K> {}

impl<K> PartialOrd for Timer<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Timer<K> {
    // Reversed: the heap hands out the earliest due time first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.due.cmp(&self.due)
    }
}

struct State<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    due: HashMap<K, Instant>,
    timers: BinaryHeap<Timer<K>>,
}

/// A cloneable handle on one queue; every clone adds to and takes from the same keys.
pub struct WorkQueue<K> {
    state: Arc<Mutex<State<K>>>,
    notify: Arc<Notify>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue { state: self.state.clone(), notify: self.notify.clone() }
    }
}

impl<K: Clone + Eq + Hash> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            state: Arc::new(Mutex::new(State {
                ready: VecDeque::new(),
                queued: HashSet::new(),
                due: HashMap::new(),
                timers: BinaryHeap::new(),
            })),
            notify: Arc::new(Notify::new()),
        }
    }
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `key` now.
    pub fn add(&self, key: K) {
        let mut state = self.state.lock();
        if state.queued.insert(key.clone()) {
            state.ready.push_back(key);
            drop(state);
            self.notify.notify_one();
        }
    }

    /// Queues `key` once `delay` has passed (at once for a zero delay).
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let due = Instant::now() + delay;
        let mut state = self.state.lock();
        if state.queued.contains(&key) || state.due.get(&key).is_some_and(|d| *d <= due) {
            return;
        }
        state.due.insert(key.clone(), due);
        let earliest = state.timers.peek().is_none_or(|t| due < t.due);
        state.timers.push(Timer { due, key });
        drop(state);
        if earliest {
            self.notify.notify_one();
        }
    }

    /// Keys waiting now (not counting delayed ones).
    pub fn len(&self) -> usize {
        self.state.lock().ready.len()
    }

    /// True when no key waits now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next key: at once when one is waiting, else when one is added or falls due.
    pub async fn next(&self) -> K {
        loop {
            let notified = self.notify.notified();
            let wake_at = {
                let mut state = self.state.lock();
                let now = Instant::now();
                while state.timers.peek().is_some_and(|t| t.due <= now) {
                    let Some(timer) = state.timers.pop() else { break };
                    // A timer superseded by an earlier one, or by an immediate add, is stale.
                    if state.due.get(&timer.key) == Some(&timer.due) {
                        state.due.remove(&timer.key);
                        if state.queued.insert(timer.key.clone()) {
                            state.ready.push_back(timer.key);
                        }
                    }
                }
                if let Some(key) = state.ready.pop_front() {
                    state.queued.remove(&key);
                    state.due.remove(&key);
                    return key;
                }
                state.timers.peek().map(|t| t.due)
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_added_twice_is_handed_out_once() {
        let queue = WorkQueue::new();
        queue.add("a");
        queue.add("b");
        queue.add("a");
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.next().await, "a");
        assert_eq!(queue.next().await, "b");
        queue.add("a");
        assert_eq!(queue.next().await, "a");
        assert!(queue.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_keys_fall_due_in_order_and_the_earliest_delay_wins() {
        let queue = WorkQueue::new();
        queue.add_after("late", Duration::from_secs(20));
        queue.add_after("soon", Duration::from_secs(10));
        queue.add_after("soon", Duration::from_secs(30));
        let start = Instant::now();
        assert_eq!(queue.next().await, "soon");
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert_eq!(queue.next().await, "late");
        assert_eq!(start.elapsed(), Duration::from_secs(20));
    }

    #[tokio::test(start_paused = true)]
    async fn an_immediate_add_overtakes_a_delayed_one_without_a_second_hand_out() {
        let queue = WorkQueue::new();
        queue.add_after("k", Duration::from_secs(60));
        queue.add("k");
        assert_eq!(queue.next().await, "k");
        let waited = tokio::time::timeout(Duration::from_secs(120), queue.next()).await;
        assert!(waited.is_err(), "the delayed entry was superseded");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_consumer_wakes_for_a_new_earlier_timer() {
        let queue = WorkQueue::new();
        queue.add_after("late", Duration::from_secs(100));
        let consumer = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.next().await })
        };
        tokio::task::yield_now().await;
        queue.add_after("early", Duration::from_secs(1));
        assert_eq!(consumer.await.unwrap(), "early");
    }
}
