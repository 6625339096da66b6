//! Coalescing: concurrent creations (or deletions) of one group that wait for the client's rate limit are sent
//! together, as one batch request, when the provider has a batch call ([`crate::CloudProvider::batch_limit`]).
//!
//! # Guarantees
//! - Each group has one queue per kind and at most one dispatcher task for it. The dispatcher waits for the rate
//!   limiter, then takes every caller queued by then (up to the provider's limit) and sends them as one request
//!   (the single call for one caller, so that at low load nothing changes), in a task of its own, and goes back
//!   to the limiter for the callers that came meanwhile. Under load batches grow by themselves; a caller never
//!   waits for anything but the limiter.
//! - A caller with a deadline (a create's wait budget) is sent by then or not at all: it is answered
//!   [`Reply::NotSent`] as soon as the limiter's next opening is past it, as the single calls are.
//! - A caller that is dropped while queued is taken out of the queue: nothing is sent for it. One dropped after
//!   its batch was taken may still be carried out (as a single request cut while in flight may).
//! - Each caller gets its own result: a failure of one instance of a batch is that instance's, a failure of the
//!   whole request every caller's; a batch answer that lost a caller's result is a `Transient` error for it (the
//!   request may have been carried out).

use super::Shared;
use crate::error::{Error, Outcome, Result};
use crate::provider::{BatchLimit, CloudProvider, Creation, Deletion, GroupId, Operation};
use crate::provider_id::ProviderId;
use governor::clock::Clock;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A boxed future borrowing from its arguments.
pub(super) type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<Vec<Result<T>>>> + Send + 'a>>;

/// One kind of call that can be sent in batches.
pub(super) trait Batched<P: CloudProvider + 'static>: Send + Sync + 'static {
    /// What each caller asks for (nothing for a create, the instance for a delete).
    type Item: Clone + Send + Sync + 'static;
    /// What each caller gets.
    type Out: Send + 'static;
    /// The single call (a batch of one).
    const SINGLE: Operation;
    /// The batch call.
    const BATCH: Operation;
    /// The provider's limit for this kind.
    fn limit(limit: BatchLimit) -> usize;
    /// The queues of this kind.
    fn batcher(shared: &Shared<P>) -> &Batcher<Self::Item, Self::Out>;
    /// One request for `items`: the single call for one, else the batch call.
    fn send<'a>(provider: &'a P, group: &'a GroupId, items: &'a [Self::Item]) -> Answer<'a, Self::Out>;
}

/// Creations: [`CloudProvider::create_instances`].
pub(super) struct Creates;

impl<P: CloudProvider + 'static> Batched<P> for Creates {
    type Item = ();
    type Out = Creation;
    const SINGLE: Operation = Operation::CreateInstance;
    const BATCH: Operation = Operation::CreateInstances;
    fn limit(limit: BatchLimit) -> usize {
        limit.create
    }
    fn batcher(shared: &Shared<P>) -> &Batcher<(), Creation> {
        &shared.creates
    }
    fn send<'a>(provider: &'a P, group: &'a GroupId, items: &'a [()]) -> Answer<'a, Creation> {
        Box::pin(async move {
            match items.len() {
                1 => provider.create_instance(group).await.map(|c| vec![Ok(c)]),
                n => provider.create_instances(group, n).await,
            }
        })
    }
}

/// Deletions: [`CloudProvider::delete_instances`].
pub(super) struct Deletes;

impl<P: CloudProvider + 'static> Batched<P> for Deletes {
    type Item = ProviderId;
    type Out = Deletion;
    const SINGLE: Operation = Operation::DeleteInstance;
    const BATCH: Operation = Operation::DeleteInstances;
    fn limit(limit: BatchLimit) -> usize {
        limit.delete
    }
    fn batcher(shared: &Shared<P>) -> &Batcher<ProviderId, Deletion> {
        &shared.deletes
    }
    fn send<'a>(provider: &'a P, group: &'a GroupId, items: &'a [ProviderId]) -> Answer<'a, Deletion> {
        Box::pin(async move {
            match items {
                [one] => provider.delete_instance(group, one).await.map(|d| vec![Ok(d)]),
                many => provider.delete_instances(group, many).await,
            }
        })
    }
}

/// How a queued caller was answered.
pub(super) enum Reply<R> {
    /// Its request was sent after `queued` in the queue; its own result.
    Sent { result: Result<R>, queued: Duration },
    /// The limiter would have sent it past its deadline: nothing was sent.
    NotSent,
}

struct Waiter<I, R> {
    id: u64,
    item: I,
    deadline: Option<Instant>,
    enqueued: Instant,
    reply: oneshot::Sender<Reply<R>>,
}

struct Queue<I, R> {
    waiting: VecDeque<Waiter<I, R>>,
}

impl<I, R> Default for Queue<I, R> {
    fn default() -> Self {
        Queue { waiting: VecDeque::new() }
    }
}

/// The queues of one kind, by group; a group's entry exists while its dispatcher runs.
pub(super) struct Batcher<I, R> {
    queues: Mutex<HashMap<GroupId, Queue<I, R>>>,
    next: AtomicU64,
}

impl<I, R> Default for Batcher<I, R> {
    fn default() -> Self {
        Batcher { queues: Mutex::default(), next: AtomicU64::new(0) }
    }
}

impl<I, R> Batcher<I, R> {
    fn lock(&self) -> MutexGuard<'_, HashMap<GroupId, Queue<I, R>>> {
        // A panic while the lock was held cannot leave a queue half changed: every change is one push or drain.
        self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes `id` out of `group`'s queue if it is still there.
    fn remove(&self, group: &GroupId, id: u64) {
        if let Some(queue) = self.lock().get_mut(group) {
            queue.waiting.retain(|w| w.id != id);
        }
    }

    /// Answers [`Reply::NotSent`] to the waiters of `group` whose deadline is before `opening`; ends the queue (and
    /// its dispatcher: `false`) when no one is left.
    fn expire(&self, group: &GroupId, opening: Instant) -> bool {
        let mut queues = self.lock();
        let Some(queue) = queues.get_mut(group) else { return false };
        let (late, waiting): (VecDeque<_>, VecDeque<_>) =
            queue.waiting.drain(..).partition(|w| w.deadline.is_some_and(|d| d < opening));
        queue.waiting = waiting;
        for waiter in late {
            let _ = waiter.reply.send(Reply::NotSent);
        }
        if queue.waiting.is_empty() {
            queues.remove(group);
            return false;
        }
        true
    }

    /// Takes up to `limit` waiters of `group`, first come first, and whether any are left; ends the queue (and its
    /// dispatcher) when no one is left, so that the next caller starts a new one.
    fn take(&self, group: &GroupId, limit: usize, now: Instant) -> (Vec<Waiter<I, R>>, bool) {
        let mut queues = self.lock();
        let Some(queue) = queues.get_mut(group) else { return (Vec::new(), false) };
        let mut taken = Vec::new();
        while taken.len() < limit.max(1)
            && let Some(waiter) = queue.waiting.pop_front()
        {
            if waiter.deadline.is_some_and(|d| d < now) {
                let _ = waiter.reply.send(Reply::NotSent);
            } else {
                taken.push(waiter);
            }
        }
        if queue.waiting.is_empty() {
            queues.remove(group);
            return (taken, false);
        }
        (taken, true)
    }
}

/// A caller in a queue: taken out of it when dropped before its batch is taken.
struct Queued<'a, I, R> {
    batcher: &'a Batcher<I, R>,
    group: &'a GroupId,
    id: u64,
}

impl<I, R> Drop for Queued<'_, I, R> {
    fn drop(&mut self) {
        self.batcher.remove(self.group, self.id);
    }
}

/// Queues `item` for `group` (not to be sent after `deadline`), starting the group's dispatcher if none runs, and
/// waits for its answer.
pub(super) async fn enqueue<P, B>(
    shared: &Arc<Shared<P>>,
    group: &GroupId,
    item: B::Item,
    deadline: Option<Instant>,
) -> Reply<B::Out>
where
    P: CloudProvider + 'static,
    B: Batched<P>,
{
    let batcher = B::batcher(shared);
    let id = batcher.next.fetch_add(1, Ordering::Relaxed);
    let (reply, answer) = oneshot::channel();
    let enqueued = Instant::now();
    let start = {
        let mut queues = batcher.lock();
        let start = !queues.contains_key(group);
        queues.entry(group.clone()).or_default().waiting.push_back(Waiter { id, item, deadline, enqueued, reply });
        start
    };
    if start {
        tokio::spawn(dispatch::<P, B>(shared.clone(), group.clone()));
    }
    let _queued = Queued { batcher, group, id };
    match answer.await {
        Ok(reply) => reply,
        // The request's task ended without answering (the runtime shutting down): it may have been sent.
        Err(_) => Reply::Sent {
            result: Err(Error::transient(format!("{group}: the answer of the batch request was lost"))),
            queued: enqueued.elapsed(),
        },
    }
}

/// The dispatcher of `group`'s queue of kind `B` (see the module docs); ends when the queue is empty.
async fn dispatch<P, B>(shared: Arc<Shared<P>>, group: GroupId)
where
    P: CloudProvider + 'static,
    B: Batched<P>,
{
    let cloud = shared.inner.cloud();
    let limit = B::limit(shared.inner.batch_limit()).max(1);
    loop {
        let started = Instant::now();
        while let Err(not_until) = shared.limiter.check() {
            let wait = not_until.wait_time_from(shared.clock.now());
            if !B::batcher(&shared).expire(&group, Instant::now() + wait) {
                return;
            }
            tokio::time::sleep(wait).await;
        }
        let waited = started.elapsed();
        let (batch, more) = B::batcher(&shared).take(&group, limit, Instant::now());
        let operation = if batch.len() == 1 { B::SINGLE } else { B::BATCH };
        if !waited.is_zero() {
            shared.observer.rate_limited(cloud, operation, waited);
        }
        if batch.is_empty() {
            // Everyone left while the limiter was waited for (the queue is gone with them).
            return;
        }
        tokio::spawn(send::<P, B>(shared.clone(), group.clone(), batch, operation));
        if !more {
            // The queue ended with this batch: a caller that comes now starts a new dispatcher, and this one takes
            // no permit for no one.
            return;
        }
    }
}

/// Sends one batch and answers each of its callers.
async fn send<P, B>(shared: Arc<Shared<P>>, group: GroupId, batch: Vec<Waiter<B::Item, B::Out>>, operation: Operation)
where
    P: CloudProvider + 'static,
    B: Batched<P>,
{
    let cloud = shared.inner.cloud();
    let items: Vec<B::Item> = batch.iter().map(|w| w.item.clone()).collect();
    let sent = Instant::now();
    let answer = B::send(&shared.inner, &group, &items).await;
    let outcome = match &answer {
        Ok(_) => Outcome::Ok,
        Err(error) => error.outcome(),
    };
    shared.observer.request(cloud, operation, outcome, sent.elapsed());
    let count = batch.len();
    let mut results = match answer {
        Ok(results) => results.into_iter().map(Some).collect::<Vec<_>>(),
        Err(error) => batch.iter().map(|_| Some(Err(copy(&error)))).collect(),
    };
    let answered = results.len();
    results.resize_with(count, || None);
    for (waiter, result) in batch.into_iter().zip(results) {
        let result = result.unwrap_or_else(|| {
            Err(Error::transient(format!(
                "{group}: the batch request answered {answered} results for {count} instances"
            )))
        });
        let queued = sent.saturating_duration_since(waiter.enqueued);
        let _ = waiter.reply.send(Reply::Sent { result, queued });
    }
}

/// `error` again, for each caller of a batch whose whole request failed (a source becomes part of the message).
fn copy(error: &Error) -> Error {
    let with_source = |message: &str, source: &Option<crate::error::BoxError>| match source {
        Some(source) => format!("{message}: {source}"),
        None => message.to_owned(),
    };
    match error {
        Error::Throttled { message, retry_after } => {
            Error::Throttled { message: message.clone(), retry_after: *retry_after }
        }
        Error::QuotaExceeded { message } => Error::QuotaExceeded { message: message.clone() },
        Error::NotFound { message } => Error::NotFound { message: message.clone() },
        Error::PermissionDenied { message } => Error::PermissionDenied { message: message.clone() },
        Error::Invalid { message } => Error::Invalid { message: message.clone() },
        Error::Transient { message, source } => {
            Error::Transient { message: with_source(message, source), source: None }
        }
        Error::Permanent { message, source } => {
            Error::Permanent { message: with_source(message, source), source: None }
        }
    }
}
