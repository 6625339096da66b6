//! A provider wrapped in a client-side rate limit and bounded retries of what may be retried.
//!
//! # Guarantees
//! - Every request waits for the rate limiter ([`CallPolicy::rate_per_second`], bursts of
//!   [`CallPolicy::burst`]), retries included.
//! - A failed call is retried only when its error [`crate::Error::is_retryable`], and a call that is not
//!   idempotent ([`Operation::is_idempotent`]: creating an instance) only when the cloud refused it
//!   ([`crate::Error::was_refused`]), so that a request that may have been carried out is never sent twice.
//! - Waits follow an exponential backoff with jitter ([`backon`]), at least as long as a `Retry-After` the API
//!   gave; a call makes at most [`CallPolicy::max_attempts`] requests and waits at most
//!   [`CallPolicy::max_wait`] in all between them. When the next wait would pass that budget, the last error is
//!   returned at once (the caller requeues).
//! - Every request is reported to the [`CallObserver`], with its outcome.
//! - Where the provider has batch calls ([`CloudProvider::batch_limit`]), creations and deletions of one group
//!   that wait for the rate limit together are sent as one request ([`batch`]); each caller keeps its own budget,
//!   retries and result.

mod batch;

#[cfg(test)]
mod batch_tests;

use crate::error::{Outcome, Result, Retry};
use crate::metrics::{CallObserver, NoObserver};
use crate::provider::{
    BatchLimit, CloudProvider, ClusterTag, Creation, CreationToken, Deletion, GroupId, GroupInfo, GroupMembers,
    ImageUpdate, InstanceState, NewInstance, Operation,
};
use crate::provider_id::{Cloud, ProviderId};
use async_trait::async_trait;
use backon::{BackoffBuilder, ExponentialBuilder};
use batch::{Batched, Batcher, Creates, Deletes, Reply};
use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How calls are limited and retried.
#[derive(Debug, Clone, PartialEq)]
pub struct CallPolicy {
    /// Requests per second, sustained.
    pub rate_per_second: NonZeroU32,
    /// Requests that may go at once after a quiet period.
    pub burst: NonZeroU32,
    /// The first backoff.
    pub min_backoff: Duration,
    /// The longest single backoff.
    pub max_backoff: Duration,
    /// Requests per call, the first included (1: no retries).
    pub max_attempts: u32,
    /// The most a call waits in all between its requests (backoffs and `Retry-After`s; rate-limit waits counted
    /// only for a call that is not idempotent, a create, which is not sent rather than sent later).
    pub max_wait: Duration,
}

impl Default for CallPolicy {
    /// 10 requests per second in bursts of 20 (below the default API rate limits of AWS EC2 and Auto Scaling,
    /// Azure Resource Manager and GCE, which leaves room for other clients of the same account); up to 5
    /// requests per call, backoff from 500 ms doubling to 20 s, at most 60 s of waiting per call.
    fn default() -> Self {
        CallPolicy {
            rate_per_second: NonZeroU32::new(10).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(20).unwrap_or(NonZeroU32::MIN),
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(20),
            max_attempts: 5,
            max_wait: Duration::from_secs(60),
        }
    }
}

impl CallPolicy {
    /// How long after a call started one of its requests may still be carried out by the cloud, when each request
    /// is given up after `request_timeout` (the clients' per-request timeout: 30 s for AWS, Azure and the
    /// simulated cloud): every wait between the requests ([`CallPolicy::max_wait`]) and every request's own time
    /// ([`CallPolicy::max_attempts`] of them). A request the caller gave up (a timeout, a dropped future, a process
    /// killed) may still land until then; after that, nothing sent for the call can make anything. For a call that
    /// is not idempotent (a create), the client's rate-limit waits are within `max_wait` too: such a request is
    /// sent within it or not at all.
    pub fn longest_call(&self, request_timeout: Duration) -> Duration {
        self.max_wait.saturating_add(request_timeout.saturating_mul(self.max_attempts))
    }
}

/// governor's clock on tokio's time, so that paused-time tests drive the limiter too.
#[derive(Debug, Clone)]
struct TokioClock {
    start: Instant,
}

impl Clock for TokioClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::from(self.start.elapsed())
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<Nanos>>;

/// `inner` with the rate limit and retries of a [`CallPolicy`]; implements [`CloudProvider`] itself.
pub struct Governed<P> {
    shared: Arc<Shared<P>>,
}

/// What the calls of a [`Governed`] share with its batch dispatchers (tasks of their own).
struct Shared<P> {
    inner: P,
    policy: CallPolicy,
    limiter: Limiter,
    clock: TokioClock,
    observer: Arc<dyn CallObserver>,
    creates: Batcher<(), Creation>,
    deletes: Batcher<ProviderId, Deletion>,
}

impl<P: CloudProvider + 'static> Governed<P> {
    /// Wraps `inner`; requests are reported to `observer` (use [`NoObserver`] for none).
    pub fn new(inner: P, policy: CallPolicy, observer: Arc<dyn CallObserver>) -> Self {
        let clock = TokioClock { start: Instant::now() };
        let quota = Quota::per_second(policy.rate_per_second).allow_burst(policy.burst);
        let limiter = RateLimiter::direct_with_clock(quota, clock.clone());
        let (creates, deletes) = (Batcher::default(), Batcher::default());
        Governed { shared: Arc::new(Shared { inner, policy, limiter, clock, observer, creates, deletes }) }
    }

    /// Wraps `inner` with the default policy and no observer.
    pub fn with_defaults(inner: P) -> Self {
        Governed::new(inner, CallPolicy::default(), Arc::new(NoObserver))
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.shared.inner
    }

    /// Waits until the limiter lets one request go, and returns how long it waited. With a `budget`, gives up
    /// instead (`Err`, nothing sent) as soon as the limiter's next opening is further away than the budget left.
    async fn permit(&self, operation: Operation, budget: Option<Duration>) -> std::result::Result<Duration, ()> {
        let started = Instant::now();
        let outcome = loop {
            let Err(not_until) = self.shared.limiter.check() else { break Ok(()) };
            let wait = not_until.wait_time_from(self.shared.clock.now());
            if budget.is_some_and(|budget| started.elapsed() + wait > budget) {
                break Err(());
            }
            tokio::time::sleep(wait).await;
        };
        let waited = started.elapsed();
        if !waited.is_zero() {
            self.shared.observer.rate_limited(self.shared.inner.cloud(), operation, waited);
        }
        outcome.map(|()| waited)
    }

    /// Runs `request` under the policy (see the module docs).
    async fn call<T, F, Fut>(&self, operation: Operation, mut request: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let cloud = self.shared.inner.cloud();
        let mut retries = Retries::new(&self.shared.policy);
        loop {
            // A request that must not be repeated (a create) is sent within `max_wait` of the call's start, limiter
            // waits included, or not at all: [`CallPolicy::longest_call`] bounds, from the call's start, when what
            // it sent may still land, and the caller's record of the request (written just before) relies on it.
            let budget = retries.budget(operation);
            match self.permit(operation, budget).await {
                Ok(limited) if budget.is_some() => retries.waited += limited,
                Ok(_) => {}
                Err(()) => return Err(self.not_sent(operation)),
            }
            retries.attempts += 1;
            let started = Instant::now();
            let result = request().await;
            self.shared.observer.request(cloud, operation, Outcome::of(&result), started.elapsed());
            match result {
                Ok(value) => return Ok(value),
                Err(error) => retries.pause(cloud, operation, error).await?,
            }
        }
    }

    /// [`Governed::call`] for a call of kind `B` of `group`, whose requests are queued with the group's others of
    /// that kind and sent in batches ([`batch`]): the same budget, retries and answer as a single call.
    async fn batched<B: Batched<P>>(&self, group: &GroupId, item: B::Item) -> Result<B::Out> {
        let mut retries = Retries::new(&self.shared.policy);
        loop {
            // As in `call`: a create is sent within `max_wait` of the call's start, queue included, or not at all.
            let deadline = retries.budget(B::SINGLE).map(|budget| Instant::now() + budget);
            let (result, queued) = match batch::enqueue::<P, B>(&self.shared, group, item.clone(), deadline).await {
                Reply::Sent { result, queued } => (result, queued),
                Reply::NotSent => return Err(self.not_sent(B::SINGLE)),
            };
            if deadline.is_some() {
                retries.waited += queued;
            }
            retries.attempts += 1;
            match result {
                Ok(value) => return Ok(value),
                Err(error) => retries.pause(self.shared.inner.cloud(), B::SINGLE, error).await?,
            }
        }
    }

    /// The refusal of a create the rate limit would have sent past its budget.
    fn not_sent(&self, operation: Operation) -> crate::Error {
        crate::Error::Throttled {
            message: format!(
                "not sent: the client's rate limit ({} requests/s) would delay it past the {:?} a {operation} may \
                 wait in all",
                self.shared.policy.rate_per_second, self.shared.policy.max_wait
            ),
            retry_after: None,
        }
    }
}

#[async_trait]
impl<P: CloudProvider + 'static> CloudProvider for Governed<P> {
    fn cloud(&self) -> Cloud {
        self.shared.inner.cloud()
    }

    async fn instance_image(&self, instance: &ProviderId) -> Result<String> {
        self.call(Operation::InstanceImage, || self.shared.inner.instance_image(instance)).await
    }

    async fn instance_group(&self, instance: &ProviderId) -> Result<GroupId> {
        self.call(Operation::InstanceGroup, || self.shared.inner.instance_group(instance)).await
    }

    async fn create_instance(&self, group: &GroupId) -> Result<Creation> {
        if self.shared.inner.batch_limit().create > 1 {
            return self.batched::<Creates>(group, ()).await;
        }
        self.call(Operation::CreateInstance, || self.shared.inner.create_instance(group)).await
    }

    async fn created_instance(&self, group: &GroupId, token: &CreationToken) -> Result<Option<NewInstance>> {
        self.call(Operation::CreatedInstance, || self.shared.inner.created_instance(group, token)).await
    }

    async fn delete_instance(&self, group: &GroupId, instance: &ProviderId) -> Result<Deletion> {
        if self.shared.inner.batch_limit().delete > 1 {
            return self.batched::<Deletes>(group, instance.clone()).await;
        }
        self.call(Operation::DeleteInstance, || self.shared.inner.delete_instance(group, instance)).await
    }

    async fn instance_state(&self, instance: &ProviderId) -> Result<InstanceState> {
        self.call(Operation::InstanceState, || self.shared.inner.instance_state(instance)).await
    }

    async fn group_image(&self, group: &GroupId) -> Result<String> {
        self.call(Operation::GroupImage, || self.shared.inner.group_image(group)).await
    }

    async fn set_group_image(&self, group: &GroupId, image: &str) -> Result<ImageUpdate> {
        self.call(Operation::SetGroupImage, || self.shared.inner.set_group_image(group, image)).await
    }

    async fn list_groups(&self, cluster: &ClusterTag) -> Result<Vec<GroupInfo>> {
        self.call(Operation::ListGroups, || self.shared.inner.list_groups(cluster)).await
    }

    async fn group_instances(&self, group: &GroupId) -> Result<GroupMembers> {
        self.call(Operation::GroupInstances, || self.shared.inner.group_instances(group)).await
    }

    fn batch_limit(&self) -> BatchLimit {
        self.shared.inner.batch_limit()
    }

    async fn create_instances(&self, group: &GroupId, count: usize) -> Result<Vec<Result<Creation>>> {
        self.call(Operation::CreateInstances, || self.shared.inner.create_instances(group, count)).await
    }

    async fn delete_instances(&self, group: &GroupId, instances: &[ProviderId]) -> Result<Vec<Result<Deletion>>> {
        self.call(Operation::DeleteInstances, || self.shared.inner.delete_instances(group, instances)).await
    }

    fn autoscaler_group_name(&self, group: &GroupId) -> Result<String> {
        self.shared.inner.autoscaler_group_name(group)
    }
}

/// The retries of one call (single or batched) under its [`CallPolicy`]: its backoff, the requests it made and the
/// time it waited, limiter and queue waits of a request that must not be repeated included.
struct Retries<'a> {
    policy: &'a CallPolicy,
    backoff: backon::ExponentialBackoff,
    attempts: u32,
    waited: Duration,
}

impl<'a> Retries<'a> {
    fn new(policy: &'a CallPolicy) -> Self {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(policy.min_backoff)
            .with_max_delay(policy.max_backoff)
            .with_jitter()
            .without_max_times()
            .build();
        Retries { policy, backoff, attempts: 0, waited: Duration::ZERO }
    }

    /// For a request that must not be repeated (a create): the time left of `max_wait` to send it in.
    fn budget(&self, operation: Operation) -> Option<Duration> {
        (!operation.is_idempotent()).then(|| self.policy.max_wait.saturating_sub(self.waited))
    }

    /// After a failed request: waits before the next one, or gives `error` back when the call ends with it.
    async fn pause(&mut self, cloud: Cloud, operation: Operation, error: crate::Error) -> Result<()> {
        // IMPORTANT: a create that failed in a way that may have created the instance is never repeated, or a
        // replacement would get two instances.
        let may_repeat = operation.is_idempotent() || error.was_refused();
        let wait = match error.retry() {
            Retry::After(after) => self.backoff.next().map(|b| b.max(after)),
            Retry::Backoff => self.backoff.next(),
            Retry::Later | Retry::Never => None,
        };
        let Some(wait) = wait.filter(|_| may_repeat && self.attempts < self.policy.max_attempts) else {
            return Err(error);
        };
        if self.waited + wait > self.policy.max_wait {
            return Err(error);
        }
        tracing::debug!(%cloud, %operation, attempt = self.attempts, wait_ms = wait.as_millis() as u64, %error,
                        "cloud call failed; retrying");
        tokio::time::sleep(wait).await;
        self.waited += wait;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::metrics::CallCounts;
    use crate::provider_id::SimulatedInstance;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// Answers each call with the next scripted result (Ok when the script is empty) and records call times.
    #[derive(Default)]
    pub(super) struct Scripted {
        script: Mutex<VecDeque<Result<(), Error>>>,
        calls: Mutex<Vec<Instant>>,
    }

    impl Scripted {
        fn new(script: Vec<Result<(), Error>>) -> Self {
            Scripted { script: Mutex::new(script.into()), calls: Mutex::default() }
        }

        fn next(&self) -> Result<()> {
            self.calls.lock().unwrap().push(Instant::now());
            self.script.lock().unwrap().pop_front().unwrap_or(Ok(()))
        }

        pub(super) fn calls(&self) -> Vec<Instant> {
            self.calls.lock().unwrap().clone()
        }
    }

    fn instance() -> ProviderId {
        ProviderId::Simulated(SimulatedInstance { group: "g".into(), name: "n".into() })
    }

    #[async_trait]
    impl CloudProvider for Scripted {
        fn cloud(&self) -> Cloud {
            Cloud::Simulated
        }
        async fn instance_image(&self, _: &ProviderId) -> Result<String> {
            self.next().map(|()| "img".to_owned())
        }
        async fn instance_group(&self, _: &ProviderId) -> Result<GroupId> {
            self.next().map(|()| GroupId::from("g"))
        }
        async fn create_instance(&self, _: &GroupId) -> Result<Creation> {
            self.next().map(|()| Creation::Created(NewInstance { provider_id: instance(), node_name: "n".into() }))
        }
        async fn created_instance(&self, _: &GroupId, _: &CreationToken) -> Result<Option<NewInstance>> {
            self.next().map(|()| None)
        }
        async fn delete_instance(&self, _: &GroupId, _: &ProviderId) -> Result<Deletion> {
            self.next().map(|()| Deletion::Started)
        }
        async fn instance_state(&self, _: &ProviderId) -> Result<InstanceState> {
            self.next().map(|()| InstanceState::Ready)
        }
        async fn group_image(&self, _: &GroupId) -> Result<String> {
            self.next().map(|()| "img".to_owned())
        }
        async fn set_group_image(&self, _: &GroupId, _: &str) -> Result<ImageUpdate> {
            self.next().map(|()| ImageUpdate::Applied)
        }
        async fn list_groups(&self, _: &ClusterTag) -> Result<Vec<GroupInfo>> {
            self.next().map(|()| Vec::new())
        }
        fn autoscaler_group_name(&self, group: &GroupId) -> Result<String> {
            Ok(group.to_string())
        }
    }

    fn policy() -> CallPolicy {
        CallPolicy {
            rate_per_second: NonZeroU32::new(1000).unwrap(),
            burst: NonZeroU32::new(1000).unwrap(),
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(8),
            max_attempts: 5,
            max_wait: Duration::from_secs(60),
        }
    }

    pub(super) fn governed(script: Vec<Result<(), Error>>, policy: CallPolicy) -> (Governed<Scripted>, CallCounts) {
        let counts = CallCounts::default();
        (Governed::new(Scripted::new(script), policy, Arc::new(counts.clone())), counts)
    }

    fn throttled(after: Option<u64>) -> Error {
        Error::Throttled { message: "Rate exceeded".into(), retry_after: after.map(Duration::from_secs) }
    }

    #[test]
    fn the_longest_call_counts_every_wait_and_every_request() {
        // The default policy with 30 s requests: 60 s of waits and 5 requests.
        let longest = CallPolicy::default().longest_call(Duration::from_secs(30));
        assert_eq!(longest, Duration::from_secs(60 + 5 * 30));
        let one = CallPolicy { max_attempts: 1, max_wait: Duration::ZERO, ..CallPolicy::default() };
        assert_eq!(one.longest_call(Duration::from_secs(30)), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_of_idempotent_calls_are_retried_with_growing_backoff() {
        let (provider, counts) =
            governed(vec![Err(Error::transient("503")), Err(Error::transient("503")), Ok(())], policy());
        assert_eq!(provider.instance_state(&instance()).await.unwrap(), InstanceState::Ready);
        let calls = provider.inner().calls();
        assert_eq!(calls.len(), 3);
        let (first, second) = (calls[1] - calls[0], calls[2] - calls[1]);
        // Jittered exponential backoff: at least the delay of its step, below twice the next step's.
        assert!(first >= Duration::from_secs(1) && first < Duration::from_secs(4), "{first:?}");
        assert!(second >= Duration::from_secs(2) && second < Duration::from_secs(8), "{second:?}");
        assert_eq!(counts.get(Operation::InstanceState, Outcome::Transient), 2);
        assert_eq!(counts.get(Operation::InstanceState, Outcome::Ok), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_is_waited_for_even_when_the_backoff_is_shorter() {
        let (provider, _) = governed(vec![Err(throttled(Some(7))), Ok(())], policy());
        provider.group_image(&GroupId::from("g")).await.unwrap();
        let calls = provider.inner().calls();
        assert!(calls[1] - calls[0] >= Duration::from_secs(7), "{:?}", calls[1] - calls[0]);
    }

    #[tokio::test(start_paused = true)]
    async fn errors_that_a_retry_cannot_fix_come_back_at_once() {
        for error in [
            Error::not_found("i-1"),
            Error::QuotaExceeded { message: "cores".into() },
            Error::PermissionDenied { message: "denied".into() },
            Error::invalid("bad"),
            Error::permanent("boom"),
        ] {
            let outcome = error.outcome();
            let (provider, counts) = governed(vec![Err(error)], policy());
            let started = Instant::now();
            let result = provider.delete_instance(&GroupId::from("g"), &instance()).await;
            assert_eq!(result.unwrap_err().outcome(), outcome);
            assert_eq!((provider.inner().calls().len(), counts.total()), (1, 1), "{outcome}");
            assert_eq!(started.elapsed(), Duration::ZERO);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_is_repeated_after_throttling_but_never_after_a_failure_that_may_have_created_it() {
        let (provider, _) = governed(vec![Err(throttled(None)), Ok(())], policy());
        assert!(matches!(provider.create_instance(&GroupId::from("g")).await, Ok(Creation::Created(_))));
        assert_eq!(provider.inner().calls().len(), 2);

        let (provider, _) = governed(vec![Err(Error::transient("connection reset")), Ok(())], policy());
        assert!(matches!(provider.create_instance(&GroupId::from("g")).await, Err(Error::Transient { .. })));
        assert_eq!(provider.inner().calls().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_stop_after_the_attempt_limit() {
        let script = (0..10).map(|_| Err(Error::transient("500"))).collect();
        let (provider, counts) = governed(script, CallPolicy { max_attempts: 3, ..policy() });
        assert!(provider.instance_image(&instance()).await.is_err());
        assert_eq!(counts.of(Operation::InstanceImage), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_beyond_the_wait_budget_returns_the_error_at_once() {
        let (provider, _) = governed(vec![Err(throttled(Some(120))), Ok(())], policy());
        let started = Instant::now();
        let error = provider.list_groups(&ClusterTag { key: "k".into(), value: "v".into() }).await.unwrap_err();
        assert_eq!(error.retry(), Retry::After(Duration::from_secs(120)));
        assert_eq!((provider.inner().calls().len(), started.elapsed()), (1, Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_limit_spaces_requests_after_the_burst() {
        let policy =
            CallPolicy { rate_per_second: NonZeroU32::new(2).unwrap(), burst: NonZeroU32::new(3).unwrap(), ..policy() };
        let (provider, _) = governed(Vec::new(), policy);
        let started = Instant::now();
        for _ in 0..7 {
            provider.instance_state(&instance()).await.unwrap();
        }
        let offsets: Vec<Duration> = provider.inner().calls().iter().map(|t| *t - started).collect();
        // Three at once, then one every 500 ms.
        assert!(offsets[..3].iter().all(|o| *o < Duration::from_millis(10)), "{offsets:?}");
        for pair in offsets[2..].windows(2) {
            let gap = pair[1] - pair[0];
            assert!(gap >= Duration::from_millis(490) && gap <= Duration::from_millis(510), "{offsets:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_wait_for_the_rate_limit_too() {
        let policy = CallPolicy {
            rate_per_second: NonZeroU32::new(1).unwrap(),
            burst: NonZeroU32::new(1).unwrap(),
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(10),
            ..policy()
        };
        let (provider, _) = governed(vec![Err(Error::transient("500"))], policy);
        provider.instance_group(&instance()).await.unwrap();
        let calls = provider.inner().calls();
        assert!(calls[1] - calls[0] >= Duration::from_millis(990), "{:?}", calls[1] - calls[0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_create_is_sent_within_the_wait_budget_counting_the_rate_limit_or_not_at_all() {
        // One request a second; a call may wait 1.5 s in all.
        let policy = CallPolicy {
            rate_per_second: NonZeroU32::new(1).unwrap(),
            burst: NonZeroU32::new(1).unwrap(),
            max_wait: Duration::from_millis(1500),
            ..policy()
        };
        let (provider, _) = governed(Vec::new(), policy);
        let started = Instant::now();
        provider.instance_state(&instance()).await.unwrap();
        // The next opening is 1 s away, within the budget: the create waits for it and is sent.
        assert!(matches!(provider.create_instance(&GroupId::from("g")).await, Ok(Creation::Created(_))));
        assert!(started.elapsed() >= Duration::from_millis(990), "{:?}", started.elapsed());
        // Three more requests queue 3 s of the limit ahead of the next create: past its budget, so it is not sent
        // (a refusal: nothing was made) rather than sent later than the caller's record of it says.
        let (id, group) = (instance(), GroupId::from("g"));
        let (one, two, three, created) = tokio::join!(
            provider.instance_state(&id),
            provider.instance_state(&id),
            provider.instance_state(&id),
            provider.create_instance(&group),
        );
        assert!(one.is_ok() && two.is_ok() && three.is_ok());
        match created {
            Err(error @ Error::Throttled { .. }) => {
                assert!(error.was_refused());
                assert!(error.to_string().contains("not sent"), "{error}");
            }
            other => panic!("expected the create not to be sent, got {other:?}"),
        }
        assert_eq!(provider.inner().calls().len(), 5, "two calls, then three, and no second create");
        // An idempotent call waits as long as the limit asks.
        provider.instance_state(&instance()).await.unwrap();
        assert_eq!(provider.inner().calls().len(), 6);
    }
}
