//! Coalescing of creations and deletions into batch requests (paused tokio time drives the rate limiter).

use super::*;
use crate::error::Error;
use crate::metrics::CallCounts;
use crate::provider_id::SimulatedInstance;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// A provider with batch calls: records every request (operation, instances, time), answers whole requests from a
/// script (Ok when empty), and fails the instance at `fail_item` of each batch with a quota.
#[derive(Default)]
struct Batching {
    calls: Mutex<Vec<(Operation, usize, Instant)>>,
    script: Mutex<VecDeque<Result<(), Error>>>,
    fail_item: Mutex<Option<usize>>,
    made: AtomicU32,
}

impl Batching {
    fn record(&self, operation: Operation, count: usize) -> Result<()> {
        self.calls.lock().unwrap().push((operation, count, Instant::now()));
        self.script.lock().unwrap().pop_front().unwrap_or(Ok(()))
    }

    fn calls(&self) -> Vec<(Operation, usize)> {
        self.calls.lock().unwrap().iter().map(|(op, n, _)| (*op, *n)).collect()
    }

    fn instance(&self) -> Creation {
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let name = format!("n{n}");
        let provider_id = ProviderId::Simulated(SimulatedInstance { group: "g".into(), name: name.clone() });
        Creation::Created(NewInstance { provider_id, node_name: name })
    }

    fn item(&self, index: usize) -> Option<Error> {
        (*self.fail_item.lock().unwrap() == Some(index)).then(|| Error::QuotaExceeded { message: "cores".into() })
    }
}

fn id(name: &str) -> ProviderId {
    ProviderId::Simulated(SimulatedInstance { group: "g".into(), name: name.into() })
}

#[async_trait]
impl CloudProvider for Batching {
    fn cloud(&self) -> Cloud {
        Cloud::Simulated
    }
    async fn instance_image(&self, _: &ProviderId) -> Result<String> {
        Ok("img".into())
    }
    async fn instance_group(&self, _: &ProviderId) -> Result<GroupId> {
        Ok(GroupId::from("g"))
    }
    async fn create_instance(&self, _: &GroupId) -> Result<Creation> {
        self.record(Operation::CreateInstance, 1).map(|()| self.instance())
    }
    async fn created_instance(&self, _: &GroupId, _: &CreationToken) -> Result<Option<NewInstance>> {
        Ok(None)
    }
    async fn delete_instance(&self, _: &GroupId, _: &ProviderId) -> Result<Deletion> {
        self.record(Operation::DeleteInstance, 1).map(|()| Deletion::Started)
    }
    async fn instance_state(&self, _: &ProviderId) -> Result<InstanceState> {
        self.record(Operation::InstanceState, 1).map(|()| InstanceState::Ready)
    }
    async fn group_image(&self, _: &GroupId) -> Result<String> {
        Ok("img".into())
    }
    async fn set_group_image(&self, _: &GroupId, _: &str) -> Result<ImageUpdate> {
        Ok(ImageUpdate::Applied)
    }
    async fn list_groups(&self, _: &ClusterTag) -> Result<Vec<GroupInfo>> {
        Ok(Vec::new())
    }
    fn batch_limit(&self) -> BatchLimit {
        BatchLimit { create: 4, delete: 4 }
    }
    async fn create_instances(&self, _: &GroupId, count: usize) -> Result<Vec<Result<Creation>>> {
        self.record(Operation::CreateInstances, count)?;
        Ok((0..count).map(|i| self.item(i).map_or_else(|| Ok(self.instance()), Err)).collect())
    }
    async fn delete_instances(&self, _: &GroupId, instances: &[ProviderId]) -> Result<Vec<Result<Deletion>>> {
        self.record(Operation::DeleteInstances, instances.len())?;
        Ok((0..instances.len()).map(|i| self.item(i).map_or(Ok(Deletion::Started), Err)).collect())
    }
    fn autoscaler_group_name(&self, group: &GroupId) -> Result<String> {
        Ok(group.to_string())
    }
}

/// One request a second, no burst; a call may wait 60 s.
fn slow() -> CallPolicy {
    CallPolicy {
        rate_per_second: NonZeroU32::new(1).unwrap(),
        burst: NonZeroU32::new(1).unwrap(),
        min_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(100),
        max_attempts: 5,
        max_wait: Duration::from_secs(60),
    }
}

fn governed(policy: CallPolicy) -> (Arc<Governed<Batching>>, CallCounts) {
    let counts = CallCounts::default();
    (Arc::new(Governed::new(Batching::default(), policy, Arc::new(counts.clone()))), counts)
}

/// `n` creates of group `g` at once, each in its own task.
fn creates(provider: &Arc<Governed<Batching>>, n: usize) -> Vec<tokio::task::JoinHandle<Result<Creation>>> {
    (0..n)
        .map(|_| {
            let provider = provider.clone();
            tokio::spawn(async move { provider.create_instance(&GroupId::from("g")).await })
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn at_low_load_a_create_goes_at_once_as_a_single_request() {
    let (provider, counts) = governed(slow());
    let started = Instant::now();
    assert!(matches!(provider.create_instance(&GroupId::from("g")).await, Ok(Creation::Created(_))));
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(provider.inner().calls(), vec![(Operation::CreateInstance, 1)]);
    assert_eq!(counts.get(Operation::CreateInstance, Outcome::Ok), 1);
}

#[tokio::test(start_paused = true)]
async fn creates_of_a_group_that_wait_for_the_rate_limit_are_sent_as_one_batch_each_with_its_own_result() {
    let (provider, counts) = governed(slow());
    // The one request of this second is taken: the creates below wait for the next opening together.
    provider.instance_state(&id("x")).await.unwrap();
    *provider.inner().fail_item.lock().unwrap() = Some(1);
    let tasks = creates(&provider, 3);
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(provider.inner().calls(), vec![(Operation::InstanceState, 1), (Operation::CreateInstances, 3)]);
    // Each caller has its own result: two instances, and the quota refusal of the second one alone.
    let created: Vec<String> = results
        .iter()
        .filter_map(|r| match r {
            Ok(Creation::Created(instance)) => Some(instance.node_name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created.len(), 2, "{results:?}");
    assert_ne!(created[0], created[1]);
    assert_eq!(results.iter().filter(|r| matches!(r, Err(Error::QuotaExceeded { .. }))).count(), 1);
    assert_eq!((counts.of(Operation::CreateInstances), counts.of(Operation::CreateInstance)), (1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_batch_carries_at_most_the_providers_limit_and_the_rest_goes_at_the_next_opening() {
    let (provider, _) = governed(slow());
    provider.instance_state(&id("x")).await.unwrap();
    let started = Instant::now();
    for task in creates(&provider, 6) {
        assert!(task.await.unwrap().is_ok());
    }
    assert_eq!(
        provider.inner().calls()[1..],
        [(Operation::CreateInstances, 4), (Operation::CreateInstances, 2)],
        "the limit is 4"
    );
    let times: Vec<Duration> = provider.inner().calls.lock().unwrap().iter().map(|(_, _, t)| *t - started).collect();
    assert!(times[1] >= Duration::from_millis(990) && times[2] >= times[1] + Duration::from_millis(990), "{times:?}");
}

#[tokio::test(start_paused = true)]
async fn creates_of_other_groups_are_not_batched_together() {
    let (provider, _) = governed(slow());
    provider.instance_state(&id("x")).await.unwrap();
    let (a, b) = (GroupId::from("a"), GroupId::from("b"));
    let (one, two, three) =
        tokio::join!(provider.create_instance(&a), provider.create_instance(&b), provider.create_instance(&a));
    assert!(one.is_ok() && two.is_ok() && three.is_ok());
    let mut calls = provider.inner().calls()[1..].to_vec();
    calls.sort();
    assert_eq!(calls, vec![(Operation::CreateInstance, 1), (Operation::CreateInstances, 2)]);
}

#[tokio::test(start_paused = true)]
async fn a_queued_create_is_sent_within_its_wait_budget_or_not_at_all() {
    // The limiter's next opening is 1 s away: past a budget of 0.5 s, the creates are not sent at all (a refusal:
    // nothing made), and at once.
    let (provider, _) = governed(CallPolicy { max_wait: Duration::from_millis(500), ..slow() });
    provider.instance_state(&id("x")).await.unwrap();
    let started = Instant::now();
    for task in creates(&provider, 2) {
        match task.await.unwrap() {
            Err(error @ Error::Throttled { .. }) => {
                assert!(error.was_refused());
                assert!(error.to_string().contains("not sent"), "{error}");
            }
            other => panic!("expected the create not to be sent, got {other:?}"),
        }
    }
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(provider.inner().calls(), vec![(Operation::InstanceState, 1)], "no create was sent");
    // Within a budget of 1.5 s, they wait for the opening and go together.
    let (provider, _) = governed(CallPolicy { max_wait: Duration::from_millis(1500), ..slow() });
    provider.instance_state(&id("x")).await.unwrap();
    for task in creates(&provider, 2) {
        assert!(task.await.unwrap().is_ok());
    }
    assert_eq!(provider.inner().calls()[1..], [(Operation::CreateInstances, 2)]);
}

#[tokio::test(start_paused = true)]
async fn a_create_dropped_while_queued_is_not_sent() {
    let (provider, _) = governed(slow());
    provider.instance_state(&id("x")).await.unwrap();
    let kept = creates(&provider, 1);
    // A second create of the group, given up (its term ended, say) before the limiter opens.
    let dropped = tokio::time::timeout(Duration::from_millis(300), provider.create_instance(&GroupId::from("g"))).await;
    assert!(dropped.is_err());
    for task in kept {
        assert!(task.await.unwrap().is_ok());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(provider.inner().calls()[1..], [(Operation::CreateInstance, 1)], "only the create still wanted");
}

#[tokio::test(start_paused = true)]
async fn a_whole_batch_that_may_have_created_is_not_repeated_but_a_throttled_one_is() {
    let (provider, _) = governed(slow());
    provider.instance_state(&id("x")).await.unwrap();
    provider
        .inner()
        .script
        .lock()
        .unwrap()
        .extend([Err(Error::Throttled { message: "slow down".into(), retry_after: None })]);
    for task in creates(&provider, 2) {
        assert!(task.await.unwrap().is_ok(), "a refusal is asked again");
    }
    assert_eq!(provider.inner().calls()[1..], [(Operation::CreateInstances, 2), (Operation::CreateInstances, 2)]);

    let (provider, _) = governed(slow());
    provider.instance_state(&id("x")).await.unwrap();
    provider.inner().script.lock().unwrap().extend([Err(Error::transient("connection reset"))]);
    for task in creates(&provider, 2) {
        assert!(matches!(task.await.unwrap(), Err(Error::Transient { .. })), "never asked twice");
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(provider.inner().calls()[1..], [(Operation::CreateInstances, 2)]);
}

#[tokio::test(start_paused = true)]
async fn deletes_of_a_group_are_batched_and_retried_after_a_failure_of_the_whole_request() {
    let (provider, counts) = governed(slow());
    provider.instance_state(&id("x")).await.unwrap();
    provider.inner().script.lock().unwrap().extend([Err(Error::transient("503"))]);
    let group = GroupId::from("g");
    let (a, b, c) = (id("a"), id("b"), id("c"));
    let (one, two, three) = tokio::join!(
        provider.delete_instance(&group, &a),
        provider.delete_instance(&group, &b),
        provider.delete_instance(&group, &c)
    );
    assert_eq!((one.unwrap(), two.unwrap(), three.unwrap()), (Deletion::Started, Deletion::Started, Deletion::Started));
    assert_eq!(provider.inner().calls()[1..], [(Operation::DeleteInstances, 3), (Operation::DeleteInstances, 3)]);
    assert_eq!(counts.get(Operation::DeleteInstances, Outcome::Transient), 1);
    assert_eq!(counts.get(Operation::DeleteInstances, Outcome::Ok), 1);
}

#[tokio::test(start_paused = true)]
async fn without_batch_calls_every_create_is_its_own_request() {
    // The provider of `tests` has no batch calls (the default limit of 1).
    let (provider, _) = super::tests::governed(Vec::new(), slow());
    provider.instance_state(&id("x")).await.unwrap();
    let group = GroupId::from("g");
    let (one, two) = tokio::join!(provider.create_instance(&group), provider.create_instance(&group));
    assert!(one.is_ok() && two.is_ok());
    assert_eq!(provider.inner().calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_lone_create_takes_one_request_of_the_limit_not_two() {
    // Two requests at once, then one a second: a create and a state read both go at once.
    let (provider, _) = governed(CallPolicy { burst: NonZeroU32::new(2).unwrap(), ..slow() });
    let started = Instant::now();
    provider.create_instance(&GroupId::from("g")).await.unwrap();
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    provider.instance_state(&id("x")).await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO, "the dispatcher took a second permit for no one");
}
