//! The replacement's steps that call the cloud or etcd — create an instance, retire a donor (its etcd member, its
//! Node), release or abandon an instance — run as background tasks, as drains do: the reconciler never waits on a
//! throttled cloud (the governed client may wait a minute and more) or an unreachable etcd while it holds the
//! disruption gate, so every other decision goes on and its liveness does not depend on them. The executor starts
//! a step's task when the plan asks for it and reads its outcome when the plan asks for it again.
//!
//! # Guarantees
//! - At most one task per node at a time: a step asked for again while its task runs is not started again, nor is
//!   another step of that node started beside it (the plan asks again once it finished).
//! - A task is fenced by the leadership term that started it (every write in it goes through the term) and is
//!   cancelled when that term ends; a step of an ended term is started again in the next.
//! - A finished step's outcome is kept until nothing asks for it any more; a step that succeeded is not started
//!   again for [`SETTLE`] while the plan still asks for it (the plan decides on watched objects, which show the
//!   step's writes a moment later).
//! - A failed step starts again only after a pause that doubles from [`FIRST_RETRY`] to [`LAST_RETRY`]; the
//!   reconciler is woken when the pause ends, when a task ends, and when a step that succeeded stops settling while
//!   the plan still asks for it (a step may succeed without finishing: a creation the cloud has not named yet, one
//!   that waits for another donor's; with nothing else to wake the plan, it was never asked again).

use crate::leadership::Term;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The pause after a step's first failure.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest pause between two attempts of a failing step.
pub const LAST_RETRY: Duration = Duration::from_secs(60);
/// How long a step that succeeded is not started again while the plan still asks for it: the plan decides on
/// watched objects, which show the step's writes a moment later.
pub const SETTLE: Duration = Duration::from_secs(10);

/// Why a step failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    /// The failure is etcd's: a control-plane donor's member could not be removed (`EtcdUnavailable`).
    pub etcd: bool,
}

/// What the executor does about a step the plan asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll {
    /// Nothing runs or is known for it (or its pause after a failure ended): start its task.
    Start,
    /// Its task runs.
    Running,
    /// Its task succeeded; said once (then [`Poll::Settling`]).
    Done,
    /// Its task succeeded and was read: not started again for [`SETTLE`], until the plan sees what it did.
    Settling,
    /// Its last attempt failed; it starts again at `retry_at`.
    Failed { failure: Failure, retry_at: Instant },
}

#[derive(Debug)]
enum State {
    Running { term: u64 },
    Done { at: Instant, read: bool },
    Failed { failure: Failure, retry_at: Instant },
}

#[derive(Debug)]
struct Entry {
    /// The step, as [`CloudSteps::poll`] was given it.
    step: String,
    state: State,
    /// Failures in a row, for the pause.
    failures: u32,
}

/// The replacement steps in the background, by node.
#[derive(Debug)]
pub struct CloudSteps {
    /// Woken when a task ends or a failed step may start again.
    reconcile: Arc<Notify>,
    entries: Arc<Mutex<HashMap<String, Entry>>>,
}

impl CloudSteps {
    pub fn new(reconcile: Arc<Notify>) -> Self {
        CloudSteps { reconcile, entries: Arc::default() }
    }

    /// Where `step` of `node` stands, within `term`. `step` names the step with everything it acts on (another
    /// step of the node, or the same with other arguments, is another step).
    pub fn poll(&self, node: &str, step: &str, term: &Term) -> Poll {
        let mut entries = self.entries.lock();
        let Some(entry) = entries.get_mut(node) else { return Poll::Start };
        match &entry.state {
            // A task of an ended term was cancelled with it.
            State::Running { term: number } if *number != term.number() => Poll::Start,
            State::Running { .. } => Poll::Running,
            _ if entry.step != step => Poll::Start,
            State::Done { read: false, at } => {
                entry.state = State::Done { at: *at, read: true };
                Poll::Done
            }
            State::Done { at, .. } if Instant::now() < *at + SETTLE => Poll::Settling,
            State::Done { .. } => {
                entries.remove(node);
                Poll::Start
            }
            State::Failed { retry_at, .. } if Instant::now() >= *retry_at => Poll::Start,
            State::Failed { failure, retry_at } => Poll::Failed { failure: failure.clone(), retry_at: *retry_at },
        }
    }

    /// Runs `work` for `step` of `node` in the background within `term` (after [`Poll::Start`]).
    pub fn start<F>(&self, node: &str, step: &str, term: &Term, work: F)
    where
        F: Future<Output = Result<(), Failure>> + Send + 'static,
    {
        let failures = {
            let mut entries = self.entries.lock();
            let failures = entries.get(node).filter(|e| e.step == step).map_or(0, |e| e.failures);
            let state = State::Running { term: term.number() };
            entries.insert(node.to_owned(), Entry { step: step.to_owned(), state, failures });
            failures
        };
        let (entries, reconcile, term) = (self.entries.clone(), self.reconcile.clone(), term.clone());
        let (node, step) = (node.to_owned(), step.to_owned());
        tokio::spawn(async move {
            let outcome = tokio::select! {
                outcome = work => outcome,
                () = term.ended() => return,
            };
            let retry_at = match &outcome {
                Ok(()) => None,
                Err(_) => Some(Instant::now() + pause(failures)),
            };
            {
                let mut entries = entries.lock();
                // Only the entry of this task: a newer term may have started the step again meanwhile.
                let Some(entry) = entries.get_mut(&node).filter(|e| {
                    e.step == step && matches!(e.state, State::Running { term: number } if number == term.number())
                }) else {
                    return;
                };
                match outcome {
                    Ok(()) => {
                        entry.state = State::Done { at: Instant::now(), read: false };
                        entry.failures = 0;
                    }
                    Err(failure) => {
                        entry.failures = failures.saturating_add(1);
                        entry.state = State::Failed { failure, retry_at: retry_at.unwrap_or_else(Instant::now) };
                    }
                }
            }
            reconcile.notify_one();
            match retry_at {
                Some(at) => {
                    tokio::time::sleep_until(at).await;
                    reconcile.notify_one();
                }
                None => {
                    tokio::time::sleep(SETTLE).await;
                    // Still kept: the plan asked for it since (it is forgotten once the plan no longer asks).
                    let settled = entries
                        .lock()
                        .get(&node)
                        .is_some_and(|e| e.step == step && matches!(e.state, State::Done { .. }));
                    if settled {
                        reconcile.notify_one();
                    }
                }
            }
        });
    }

    /// Forgets the outcomes of steps `keep` rejects (by node and step: those the plan no longer asks for);
    /// running tasks finish.
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        self.entries
            .lock()
            .retain(|node, entry| matches!(entry.state, State::Running { .. }) || keep(node, &entry.step));
    }

    /// Whether `step` of `node` succeeded and was not read yet; it is read if so.
    pub fn take_done(&self, node: &str, step: &str) -> bool {
        let mut entries = self.entries.lock();
        match entries.get_mut(node) {
            Some(entry) if entry.step == step => match entry.state {
                State::Done { at, read: false } => {
                    entry.state = State::Done { at, read: true };
                    true
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// Whether anything is known of `step` of `node` (running, done or failed).
    pub fn knows(&self, node: &str, step: &str) -> bool {
        self.entries.lock().get(node).is_some_and(|e| e.step == step)
    }

    /// How many tasks run.
    pub fn running(&self) -> usize {
        self.entries.lock().values().filter(|e| matches!(e.state, State::Running { .. })).count()
    }
}

/// The pause after `failures` failures in a row before this one.
fn pause(failures: u32) -> Duration {
    FIRST_RETRY.saturating_mul(1 << failures.min(16)).min(LAST_RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leadership::Leadership;

    fn term() -> Term {
        Leadership::new().begin(Instant::now() + Duration::from_secs(30 * 86_400))
    }

    #[test]
    fn the_pause_doubles_up_to_a_minute() {
        let pauses: Vec<u64> = (0..9).map(|f| pause(f).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(pause(u32::MAX), LAST_RETRY);
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_runs_once_in_the_background_and_its_outcome_is_read_once() {
        let steps = CloudSteps::new(Arc::new(Notify::new()));
        let term = term();
        assert_eq!(steps.poll("a", "create", &term), Poll::Start);
        let (release, wait) = tokio::sync::oneshot::channel::<()>();
        steps.start("a", "create", &term, async move {
            let _ = wait.await;
            Ok(())
        });
        // The caller is not held while the step runs, and the step is not started twice.
        assert_eq!(steps.poll("a", "create", &term), Poll::Running);
        assert_eq!(steps.poll("a", "retire", &term), Poll::Running, "one step per node at a time");
        assert_eq!(steps.running(), 1);
        release.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(steps.poll("a", "create", &term), Poll::Done);
        // Not started again while the plan, deciding on objects that do not show it yet, still asks for it.
        assert_eq!(steps.poll("a", "create", &term), Poll::Settling);
        tokio::time::sleep(SETTLE).await;
        assert_eq!(steps.poll("a", "create", &term), Poll::Start, "the plan still asks for it after a while");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_step_waits_a_growing_pause_and_wakes_the_reconciler_when_it_ends() {
        let reconcile = Arc::new(Notify::new());
        let steps = CloudSteps::new(reconcile.clone());
        let term = term();
        let fail = || async { Err(Failure { message: "throttled".into(), etcd: false }) };
        steps.start("a", "create", &term, fail());
        reconcile.notified().await;
        let Poll::Failed { failure, retry_at } = steps.poll("a", "create", &term) else { panic!("not failed") };
        assert_eq!(failure.message, "throttled");
        assert_eq!(retry_at - Instant::now(), FIRST_RETRY);
        // Woken when the pause ends, and then it may start again.
        reconcile.notified().await;
        assert_eq!(steps.poll("a", "create", &term), Poll::Start);
        steps.start("a", "create", &term, fail());
        reconcile.notified().await;
        let Poll::Failed { retry_at, .. } = steps.poll("a", "create", &term) else { panic!("not failed") };
        assert_eq!(retry_at - Instant::now(), FIRST_RETRY * 2, "the pause doubles");
        // Another step of the node is not paused by this one's failures.
        assert_eq!(steps.poll("a", "retire", &term), Poll::Start);
    }

    /// The stall of the last donors of a group (issue 28 bench): a creation step that succeeded without creating
    /// (it waited for another donor's request) settled, and with no other event nothing planned again.
    #[tokio::test(start_paused = true)]
    async fn a_step_that_succeeded_wakes_the_reconciler_when_it_stops_settling_if_still_asked_for() {
        let reconcile = Arc::new(Notify::new());
        let steps = CloudSteps::new(reconcile.clone());
        let term = term();
        steps.start("a", "create", &term, async { Ok(()) });
        reconcile.notified().await;
        assert_eq!(steps.poll("a", "create", &term), Poll::Done);
        assert_eq!(steps.poll("a", "create", &term), Poll::Settling);
        let started = Instant::now();
        let woken = tokio::time::timeout(SETTLE * 2, reconcile.notified()).await;
        assert!(woken.is_ok(), "not woken when settling ended: nothing would plan again");
        assert_eq!(Instant::now() - started, SETTLE, "woken when settling ends");
        assert_eq!(steps.poll("a", "create", &term), Poll::Start);
        // A step the plan no longer asks for is forgotten, and nothing wakes for it.
        steps.start("b", "create", &term, async { Ok(()) });
        reconcile.notified().await;
        steps.retain(|node, _| node != "b");
        let woken = tokio::time::timeout(SETTLE * 2, reconcile.notified()).await;
        assert!(woken.is_err(), "no wake for a forgotten step");
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_of_steps_no_longer_asked_for_are_forgotten_and_running_ones_kept() {
        let steps = CloudSteps::new(Arc::new(Notify::new()));
        let term = term();
        steps.start("a", "create", &term, async { Ok(()) });
        steps.start("b", "create", &term, std::future::pending());
        tokio::time::sleep(Duration::from_millis(1)).await;
        steps.retain(|_, _| false);
        assert_eq!(steps.poll("a", "create", &term), Poll::Start, "forgotten");
        assert_eq!(steps.poll("b", "create", &term), Poll::Running, "kept while it runs");
    }
}
