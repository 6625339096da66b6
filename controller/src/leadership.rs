//! Leadership as a fencing token: the [`Term`] every write and eviction of the controller is checked
//! against immediately before it starts, and whose end cancels the work of that term at once.
//!
//! # Guarantees
//! - A term is valid from when the elector begins it until the earliest of: the elector ends it, or
//!   its deadline passes (measured on this process's monotonic clock). No action passed to
//!   [`Term::fence`] starts after that, and one still running then is cancelled (its future
//!   dropped, which aborts its HTTP request).
//! - A deadline only moves later, and only while the term is valid: once a term has lapsed it never
//!   becomes valid again; the elector begins a new one, and work of the old term never resumes.
//! - At most one term is current; beginning one ends the previous one.
//!
//! # Assumptions
//! The elector sets each deadline so that it passes before any other replica can take over the
//! lease (see [`crate::leader`] for how); what this module guarantees is only as good as that.

use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// An action refused or cancelled because the term it belongs to is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this replica's leadership ended; the action was not taken")]
pub struct Fenced;

/// One uninterrupted period of leadership.
#[derive(Debug, Clone)]
pub struct Term {
    inner: Arc<TermState>,
}

#[derive(Debug)]
struct TermState {
    number: u64,
    valid_until: Mutex<Instant>,
    ended: CancellationToken,
}

impl Term {
    fn new(number: u64, valid_until: Instant) -> Term {
        Term {
            inner: Arc::new(TermState {
                number,
                valid_until: Mutex::new(valid_until),
                ended: CancellationToken::new(),
            }),
        }
    }

    /// The term's number in this process (1 for the first).
    pub fn number(&self) -> u64 {
        self.inner.number
    }

    /// The current deadline.
    pub fn valid_until(&self) -> Instant {
        *self.deadline()
    }

    fn deadline(&self) -> MutexGuard<'_, Instant> {
        self.inner.valid_until.lock()
    }

    /// Ok while the term is valid; call it immediately before starting an action.
    pub fn check(&self) -> Result<(), Fenced> {
        let deadline = self.deadline();
        if self.inner.ended.is_cancelled() {
            return Err(Fenced);
        }
        if Instant::now() >= *deadline {
            // Under the lock, so that a concurrent extension cannot revive the term.
            self.inner.ended.cancel();
            return Err(Fenced);
        }
        Ok(())
    }

    /// Whether the term is still valid.
    pub fn is_valid(&self) -> bool {
        self.check().is_ok()
    }

    /// Returns once the term is over (at once if it is).
    pub async fn ended(&self) {
        loop {
            let deadline = match self.check() {
                Ok(()) => self.valid_until(),
                Err(Fenced) => return,
            };
            tokio::select! {
                () = self.inner.ended.cancelled() => return,
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Starts `action` if the term is valid, and cancels it if the term ends first.
    pub async fn fence<F: Future>(&self, action: F) -> Result<F::Output, Fenced> {
        self.check()?;
        tokio::select! {
            biased;
            () = self.ended() => Err(Fenced),
            output = action => Ok(output),
        }
    }

    /// Moves the deadline to `until` if that is later and the term is still valid.
    fn extend(&self, until: Instant) -> bool {
        let mut deadline = self.deadline();
        if self.inner.ended.is_cancelled() || Instant::now() >= *deadline {
            self.inner.ended.cancel();
            return false;
        }
        *deadline = (*deadline).max(until);
        true
    }

    fn end(&self) {
        let _deadline = self.deadline();
        self.inner.ended.cancel();
    }
}

/// This replica's leadership: the current term, if any. The elector begins, extends and ends
/// terms; everything that acts takes the current term and is fenced by it.
#[derive(Debug, Clone)]
pub struct Leadership {
    current: Arc<watch::Sender<Option<Term>>>,
    terms: Arc<AtomicU64>,
}

impl Default for Leadership {
    fn default() -> Self {
        Leadership { current: Arc::new(watch::channel(None).0), terms: Arc::default() }
    }
}

impl Leadership {
    /// No term yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current term, if it is valid.
    pub fn current(&self) -> Option<Term> {
        self.current.borrow().clone().filter(Term::is_valid)
    }

    /// Notified whenever a term begins or is ended by the elector (a term that lapses at its
    /// deadline is noticed by [`Term::ended`], not here).
    pub fn subscribe(&self) -> watch::Receiver<Option<Term>> {
        self.current.subscribe()
    }

    /// Waits on `terms` (from [`Leadership::subscribe`]) for a valid term; `None` once `shutdown` is cancelled or
    /// the leadership is gone.
    pub async fn next_term(terms: &mut watch::Receiver<Option<Term>>, shutdown: &CancellationToken) -> Option<Term> {
        loop {
            if let Some(term) = terms.borrow_and_update().clone().filter(Term::is_valid) {
                return Some(term);
            }
            tokio::select! {
                () = shutdown.cancelled() => return None,
                changed = terms.changed() => changed.ok()?,
            }
        }
    }

    /// Begins a new term valid until `until`, ending the current one.
    pub fn begin(&self, until: Instant) -> Term {
        let term = Term::new(self.terms.fetch_add(1, Ordering::Relaxed) + 1, until);
        let previous = self.current.send_replace(Some(term.clone()));
        if let Some(previous) = previous {
            previous.end();
        }
        term
    }

    /// Extends the current term to `until`; false if there is none or it has lapsed (then begin a
    /// new one).
    pub fn extend(&self, until: Instant) -> bool {
        self.current.borrow().as_ref().is_some_and(|term| term.extend(until))
    }

    /// Ends the current term now.
    pub fn end(&self) {
        if let Some(term) = self.current.send_replace(None) {
            term.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn after(secs: u64) -> Instant {
        Instant::now() + Duration::from_secs(secs)
    }

    #[tokio::test(start_paused = true)]
    async fn a_term_lapses_at_its_deadline_unless_extended_in_time() {
        let leadership = Leadership::new();
        assert!(leadership.current().is_none());
        let term = leadership.begin(after(10));
        assert_eq!(term.check(), Ok(()));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(leadership.extend(after(10)), "a valid term is extended");
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert_eq!(term.check(), Ok(()), "the extension counts");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(term.check(), Err(Fenced), "valid until the deadline, not at it");
        assert!(leadership.current().is_none());
        assert!(!leadership.extend(after(10)), "a lapsed term is never revived");
        assert_eq!(term.check(), Err(Fenced));
        let next = leadership.begin(after(10));
        assert_eq!(next.number(), 2);
        assert_eq!(term.check(), Err(Fenced));
    }

    #[tokio::test(start_paused = true)]
    async fn an_extension_never_moves_the_deadline_earlier() {
        let leadership = Leadership::new();
        let term = leadership.begin(after(10));
        assert!(leadership.extend(after(3)));
        assert_eq!(term.valid_until(), Instant::now() + Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn fenced_actions_are_refused_after_the_term_and_cancelled_when_it_ends() {
        let leadership = Leadership::new();
        let term = leadership.begin(after(2));
        // An action that outlives the term is cancelled at the deadline.
        let started = Instant::now();
        let slow = term.fence(tokio::time::sleep(Duration::from_secs(60))).await;
        assert_eq!(slow, Err(Fenced));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        // Nothing starts afterwards.
        let mut ran = false;
        assert_eq!(term.fence(async { ran = true }).await, Err(Fenced));
        assert!(!ran);

        // Ending the term cancels what runs under it at once.
        let term = leadership.begin(after(60));
        let running = tokio::spawn({
            let term = term.clone();
            async move { term.fence(std::future::pending::<()>()).await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        leadership.end();
        assert_eq!(running.await.unwrap(), Err(Fenced));
        assert!(leadership.current().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn beginning_a_term_ends_the_previous_one() {
        let leadership = Leadership::new();
        let first = leadership.begin(after(60));
        let second = leadership.begin(after(60));
        assert_eq!(first.check(), Err(Fenced));
        assert_eq!(second.check(), Ok(()));
        tokio::time::timeout(Duration::from_secs(1), first.ended()).await.unwrap();
        assert_eq!(leadership.current().map(|t| t.number()), Some(2));
    }
}
