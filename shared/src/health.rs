//! Readiness and liveness of a process's loops: what the loops report and what the `/readyz` and
//! `/healthz` probes tell.
//!
//! # Guarantees
//! - A process is live while every loop that registered a [`Heartbeat`] beat within that
//!   heartbeat's `stuck_after`; a loop that registered nothing counts as live.
//! - Each loop documents its longest legitimate pause between beats and registers a multiple of
//!   it as `stuck_after`, so a loop is reported only when it is blocked (in a call that does not
//!   return, or a wait that should have ended) far longer than it ever legitimately waits.
//! - Time is tokio's clock, so tests run with paused time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// What a process reports to its probes; cloned into every loop that reports.
#[derive(Clone, Debug)]
pub struct Health {
    ready: Arc<AtomicBool>,
    loops: Arc<Mutex<Vec<Heartbeat>>>,
    /// The instant heartbeats count from.
    epoch: Instant,
}

impl Default for Health {
    fn default() -> Self {
        Health { ready: Arc::default(), loops: Arc::default(), epoch: Instant::now() }
    }
}

impl Health {
    /// Whether the process is ready to do its job (caches synced, own node seen...).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Registers a loop, beating now; the process is not live once `stuck_after` passes without
    /// a beat.
    pub fn heartbeat(&self, name: &'static str, stuck_after: Duration) -> Heartbeat {
        let heartbeat = Heartbeat {
            state: Arc::new(BeatState { name, stuck_after, epoch: self.epoch, last_ms: AtomicU64::new(0) }),
        };
        heartbeat.beat();
        self.loops.lock().unwrap_or_else(PoisonError::into_inner).push(heartbeat.clone());
        heartbeat
    }

    /// Ok while every registered loop beat in time; otherwise which loops are stuck, and for how
    /// long.
    pub fn live(&self) -> Result<(), String> {
        let loops = self.loops.lock().unwrap_or_else(PoisonError::into_inner);
        let stuck: Vec<String> = loops
            .iter()
            .filter_map(|beat| {
                let silent = beat.silent_for();
                (silent > beat.state.stuck_after).then(|| {
                    format!(
                        "{}: no heartbeat for {}s (stuck after {}s)",
                        beat.state.name,
                        silent.as_secs(),
                        beat.state.stuck_after.as_secs()
                    )
                })
            })
            .collect();
        if stuck.is_empty() { Ok(()) } else { Err(stuck.join("; ")) }
    }
}

/// One loop's heartbeat.
#[derive(Clone, Debug)]
pub struct Heartbeat {
    state: Arc<BeatState>,
}

#[derive(Debug)]
struct BeatState {
    name: &'static str,
    stuck_after: Duration,
    epoch: Instant,
    /// Milliseconds from `epoch` to the last beat.
    last_ms: AtomicU64,
}

impl Heartbeat {
    /// The loop is alive now.
    pub fn beat(&self) {
        let ms = u64::try_from(self.state.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.state.last_ms.fetch_max(ms, Ordering::AcqRel);
    }

    fn silent_for(&self) -> Duration {
        let last = self.state.epoch + Duration::from_millis(self.state.last_ms.load(Ordering::Acquire));
        Instant::now().saturating_duration_since(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_loop_that_stops_beating_makes_the_process_not_live() {
        let health = Health::default();
        assert_eq!(health.live(), Ok(()), "nothing registered");
        let reconciler = health.heartbeat("reconciler", Duration::from_secs(60));
        let elector = health.heartbeat("elector", Duration::from_secs(20));
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_secs(10)).await;
            reconciler.beat();
            elector.beat();
        }
        assert_eq!(health.live(), Ok(()));
        tokio::time::sleep(Duration::from_secs(20)).await;
        reconciler.beat();
        assert_eq!(health.live(), Ok(()), "silent for exactly stuck_after is still live");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(health.live(), Err("elector: no heartbeat for 21s (stuck after 20s)".into()));
        elector.beat();
        assert_eq!(health.live(), Ok(()), "a loop that beats again is live again");
    }

    #[test]
    fn readiness_is_a_switch() {
        let health = Health::default();
        assert!(!health.is_ready());
        health.clone().set_ready(true);
        assert!(health.is_ready());
    }
}
