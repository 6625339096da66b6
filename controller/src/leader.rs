//! Leader election on a `coordination.k8s.io/v1` Lease, the way client-go does it (GET the lease,
//! take it over with a PUT carrying its resourceVersion once it has not changed for a lease
//! duration, renew it with PUTs, let go of it on shutdown), granting [`Term`]s of [`Leadership`]
//! that fence every action of the controller.
//!
//! # Guarantees
//! Let replica A lead, and let B be any other replica.
//! - **A's term ends before B can act.** Each of A's rounds starts at a local monotonic instant
//!   `s` (before its GET); when the round's renewal is answered with success, A's term is valid
//!   until `s + renew_deadline`, and no later. B takes over only with a PUT conditional on the
//!   resourceVersion of the last record it read, and only after that record stayed unchanged for
//!   the lease's `leaseDurationSeconds` on B's monotonic clock, counted from when B's GET returned
//!   it. That PUT succeeds only if the record is A's last successful write (any later write changes
//!   the resourceVersion), which the server stored after A's round started and before B read it.
//!   So B acts no earlier than `lease_duration - renew_deadline` after A's term ended, measured by
//!   two monotonic clocks that run at the same rate (wall clocks and their skew play no part).
//! - **Nothing of A starts after its term.** Every write and eviction goes through
//!   [`Term::fence`]: checked immediately before it starts, and cancelled (its HTTP request
//!   dropped) when the term ends. The reconcile in flight and every drain task end with the term.
//! - **Rounds are bounded.** Each round (GET and PUT) has `round_timeout` (half the renew
//!   deadline) and runs on a client without automatic retries and with connect, read and write
//!   timeouts, so a hung or retried request can neither stretch a term nor hold up the next round.
//! - **Of two candidates racing for a free lease, exactly one wins**: the loser's PUT fails with
//!   409.
//!
//! # What is not guaranteed
//! A request that A started before its deadline and that reaches the API server more than
//! `lease_duration - renew_deadline` later (a network or server stalled that long) can be handled
//! after B took over. Node writes additionally carry the resourceVersion they were decided on, so
//! such a write fails if B changed the node meanwhile; evictions have no such precondition. Two
//! processes started with the same identity both believe they hold the lease.

use crate::leadership::{Leadership, Term};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use shared::health::Heartbeat;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Timing of the election; the defaults are client-go's.
#[derive(Debug, Clone)]
pub struct LeaseTiming {
    /// How long a lease that nobody renews stays held (written to the Lease in whole seconds).
    pub lease_duration: Duration,
    /// How long the leader's term lasts after the start of its last successful renewal.
    pub renew_deadline: Duration,
    /// Pause between rounds.
    pub retry_period: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseTiming {
    /// The longest a round may take: half the renew deadline, so that a round that times out leaves
    /// time for another before the term ends.
    pub fn round_timeout(&self) -> Duration {
        self.renew_deadline / 2
    }

    /// How long the elector may go without a heartbeat before it counts as stuck: three times its
    /// longest legitimate pause between beats (a round that times out, then the retry period).
    pub fn stuck_after(&self) -> Duration {
        (self.round_timeout() + self.retry_period) * 3
    }

    /// The lease duration as the Lease records it (whole seconds, at least one).
    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// Checks what the guarantees rest on: `0 < renew_deadline < lease duration` (as recorded),
    /// and a retry period.
    pub fn validate(&self) -> Result<(), String> {
        let recorded = Duration::from_secs(self.lease_seconds() as u64);
        if self.renew_deadline.is_zero() || self.renew_deadline >= recorded {
            return Err(format!(
                "the renew deadline ({:?}) must be positive and shorter than the lease duration as the Lease records it ({recorded:?})",
                self.renew_deadline
            ));
        }
        if self.retry_period.is_zero() {
            return Err("the retry period must be positive".into());
        }
        Ok(())
    }
}

/// A candidate for the lease `namespace/name`.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: LeaseTiming,
}

/// The record last seen and when this process saw it change.
struct Observed {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    resource_version: Option<String>,
    at: Instant,
}

/// How a round ended.
#[derive(Debug)]
enum Round {
    /// This replica holds the lease (acquired or renewed).
    Holds,
    /// Another replica holds it, or won the race for it.
    Other,
}

impl Elector {
    /// `client` should have `default_retry` off and connect, read and write timeouts (see
    /// [`crate::run`]); rounds are bounded by [`LeaseTiming::round_timeout`] either way.
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, timing: LeaseTiming) -> Self {
        Elector { api: Api::namespaced(client, namespace), name: name.into(), identity: identity.into(), timing }
    }

    /// Campaigns until `stop`, beginning, extending and ending terms of `leadership`, and beating
    /// `heartbeat` every round. On `stop` it ends the term first and then releases the lease, so
    /// another replica can take over at once.
    pub async fn run(self, leadership: Leadership, heartbeat: Heartbeat, stop: CancellationToken) {
        let mut observed: Option<Observed> = None;
        let mut term: Option<Term> = None;
        loop {
            heartbeat.beat();
            let started = Instant::now();
            let round = tokio::time::timeout(self.timing.round_timeout(), self.try_acquire_or_renew(&mut observed));
            let outcome = tokio::select! {
                () = stop.cancelled() => break,
                outcome = round => outcome,
            };
            match outcome {
                Ok(Ok(Round::Holds)) => {
                    let until = started + self.timing.renew_deadline;
                    if term.is_none() || !leadership.extend(until) {
                        tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                        term = Some(leadership.begin(until));
                    }
                }
                Ok(Ok(Round::Other)) => {
                    if term.take().is_some() {
                        tracing::warn!(lease = %self.name, "another replica holds the lease; stepping down");
                        leadership.end();
                    }
                }
                Ok(Err(error)) => tracing::warn!(lease = %self.name, %error, "lease request failed"),
                Err(_) => tracing::warn!(
                    lease = %self.name,
                    timeout = ?self.timing.round_timeout(),
                    "lease round timed out"
                ),
            }
            if term.as_ref().is_some_and(|t| !t.is_valid()) {
                tracing::warn!(lease = %self.name, "could not renew the lease within the renew deadline; stepping down");
                term = None;
                leadership.end();
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
        if term.is_some() {
            // IMPORTANT: end the term before releasing, so nothing of it can start once another
            // replica may hold the lease.
            leadership.end();
            match tokio::time::timeout(self.timing.round_timeout(), self.release()).await {
                Ok(Ok(())) => tracing::info!(lease = %self.name, "released the lease"),
                Ok(Err(error)) => tracing::warn!(lease = %self.name, %error, "could not release the lease"),
                Err(_) => tracing::warn!(lease = %self.name, "releasing the lease timed out"),
            }
        }
    }

    /// One round: GET the lease, then create, renew or take it over when that is allowed.
    async fn try_acquire_or_renew(&self, observed: &mut Option<Observed>) -> Result<Round, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.timing.lease_seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Round::Holds),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Other),
                Err(e) => Err(e),
            };
        };
        let resource_version = lease.metadata.resource_version.clone();
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let changed = observed.as_ref().is_none_or(|o| {
            o.holder != holder || o.renew_time != spec.renew_time || o.resource_version != resource_version
        });
        if changed {
            *observed = Some(Observed {
                holder: holder.clone(),
                renew_time: spec.renew_time.clone(),
                resource_version,
                at: Instant::now(),
            });
        }
        let ours = holder.as_deref() == Some(self.identity.as_str());
        let held_for =
            spec.lease_duration_seconds.map_or(self.timing.lease_duration, |s| Duration::from_secs(s.max(1) as u64));
        let expired = holder.is_none() || observed.as_ref().is_some_and(|o| o.at.elapsed() >= held_for);
        if !ours && !expired {
            return Ok(Round::Other);
        }
        if !ours {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(self.timing.lease_seconds());
        // The PUT carries the resourceVersion we read: if anyone wrote in between, it fails with 409.
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(Round::Holds),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Other),
            Err(e) => Err(e),
        }
    }

    /// Lets go of the lease so another replica can take over at once.
    async fn release(&self) -> Result<(), kube::Error> {
        let mut lease = self.api.get(&self.name).await?;
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        spec.acquire_time = None;
        spec.lease_duration_seconds = Some(1);
        self.api.replace(&self.name, &PostParams::default(), &lease).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Method, Request, Response, StatusCode};
    use http_body_util::BodyExt;
    use serde_json::{Value, json};
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use tokio::sync::watch;

    const NAMESPACE: &str = "ops";
    const NAME: &str = "lease";

    /// What a replica's Lease requests run into.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Fault {
        Delay(Duration),
        Error500,
        Hang,
    }

    /// A successful Lease write, as the fake API server stored it.
    #[derive(Debug, Clone)]
    struct Write {
        at: Instant,
        by: String,
        holder: Option<String>,
        /// Whether the writer's leadership had a current term while the write was handled.
        writer_leading: bool,
    }

    /// One Lease behind an in-memory API: GET, POST and PUT with resourceVersion checks, and
    /// per-replica faults.
    #[derive(Default)]
    struct FakeLeases {
        lease: Option<Value>,
        resource_version: u64,
        faults: HashMap<String, Fault>,
        writes: Vec<Write>,
    }

    type Shared = Arc<Mutex<FakeLeases>>;

    fn status(code: StatusCode, reason: &str) -> Response<kube::client::Body> {
        let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": reason, "reason": reason, "code": code.as_u16()});
        let mut response = Response::new(kube::client::Body::from(body.to_string().into_bytes()));
        *response.status_mut() = code;
        response
    }

    fn object(value: &Value) -> Response<kube::client::Body> {
        Response::new(kube::client::Body::from(value.to_string().into_bytes()))
    }

    async fn handle(
        fake: Shared,
        identity: String,
        leadership: Leadership,
        request: Request<kube::client::Body>,
    ) -> Response<kube::client::Body> {
        let fault = fake.lock().unwrap().faults.get(&identity).copied();
        match fault {
            Some(Fault::Delay(d)) => tokio::time::sleep(d).await,
            Some(Fault::Error500) => return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
            Some(Fault::Hang) => std::future::pending::<()>().await,
            None => {}
        }
        let method = request.method().clone();
        let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let mut fake = fake.lock().unwrap();
        match method {
            Method::GET => match &fake.lease {
                Some(lease) => object(lease),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            Method::POST | Method::PUT => {
                let mut lease: Value = serde_json::from_slice(&body).unwrap();
                let current = fake.lease.as_ref().map(|l| l["metadata"]["resourceVersion"].clone());
                let conflict = match (&current, method == Method::POST) {
                    (Some(_), true) => true,
                    (None, false) => return status(StatusCode::NOT_FOUND, "NotFound"),
                    (Some(rv), false) => lease["metadata"]["resourceVersion"] != *rv,
                    (None, true) => false,
                };
                if conflict {
                    return status(StatusCode::CONFLICT, "Conflict");
                }
                fake.resource_version += 1;
                lease["metadata"]["resourceVersion"] = json!(fake.resource_version.to_string());
                let holder = lease["spec"]["holderIdentity"].as_str().map(str::to_owned);
                let writer_leading = leadership.current().is_some();
                fake.writes.push(Write { at: Instant::now(), by: identity, holder, writer_leading });
                fake.lease = Some(lease.clone());
                object(&lease)
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }

    /// A replica: its elector running against `fake`, and its leadership.
    struct Replica {
        leadership: Leadership,
        health: shared::health::Health,
        stop: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    fn replica(fake: &Shared, identity: &str, timing: LeaseTiming) -> Replica {
        let leadership = Leadership::new();
        let service = {
            let (fake, identity, leadership) = (fake.clone(), identity.to_owned(), leadership.clone());
            tower::service_fn(move |request| {
                let (fake, identity, leadership) = (fake.clone(), identity.clone(), leadership.clone());
                async move { Ok::<_, std::convert::Infallible>(handle(fake, identity, leadership, request).await) }
            })
        };
        let client = Client::new(service, NAMESPACE);
        let stop = CancellationToken::new();
        let health = shared::health::Health::default();
        let elector = Elector::new(client, NAMESPACE, NAME, identity, timing.clone());
        let heartbeat = health.heartbeat("elector", timing.stuck_after());
        let task = tokio::spawn(elector.run(leadership.clone(), heartbeat, stop.clone()));
        Replica { leadership, health, stop, task }
    }

    /// When `leadership` first has a term, from now on.
    async fn term_begins(leadership: &Leadership) -> (Instant, Term) {
        let mut terms: watch::Receiver<Option<Term>> = leadership.subscribe();
        let term = terms.wait_for(|t| t.as_ref().is_some_and(Term::is_valid)).await.unwrap().clone().unwrap();
        (Instant::now(), term)
    }

    /// When `term` ends.
    async fn term_ends(term: &Term) -> Instant {
        term.ended().await;
        Instant::now()
    }

    fn last_write_by(fake: &Shared, identity: &str, before: Instant) -> Instant {
        let fake = fake.lock().unwrap();
        fake.writes.iter().filter(|w| w.by == identity && w.at <= before).map(|w| w.at).max().unwrap()
    }

    fn set_fault(fake: &Shared, identity: &str, fault: Option<Fault>) {
        let mut fake = fake.lock().unwrap();
        match fault {
            Some(fault) => fake.faults.insert(identity.to_owned(), fault),
            None => fake.faults.remove(identity),
        };
    }

    /// A leads; its renewals run into `fault`: its term ends exactly a renew deadline after the
    /// start of its last successful round, and B's term begins no earlier than the margin after.
    async fn takeover_with(fault: Fault) {
        let timing = LeaseTiming::default();
        let fake = Shared::default();
        let a = replica(&fake, "a", timing.clone());
        let (a_began, a_term) = term_begins(&a.leadership).await;
        let b = replica(&fake, "b", timing.clone());
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(b.leadership.current().is_none());
        assert_eq!(a.leadership.current().map(|t| t.number()), Some(1), "one term while renewals succeed");
        set_fault(&fake, "a", Some(fault));
        let faulted_at = Instant::now();

        let a_ended = term_ends(&a_term).await;
        let (b_began, _) = term_begins(&b.leadership).await;
        // Bounded rounds: an elector whose requests hang or fail is not stuck.
        assert_eq!(a.health.live(), Ok(()), "{fault:?}");
        let last_renewal = last_write_by(&fake, "a", faulted_at);
        assert!(a_began <= last_renewal);
        // Without request latency, a round starts when its write is handled.
        assert_eq!(a_ended - last_renewal, timing.renew_deadline, "{fault:?}: A's term ended at the wrong time");
        let margin = timing.lease_duration - timing.renew_deadline;
        assert!(b_began >= a_ended + margin, "{fault:?}: B began {:?} after A's term ended", b_began - a_ended);
        assert!(a.leadership.current().is_none());

        // Once A can reach the lease again, it sees B's lease and does not lead.
        set_fault(&fake, "a", None);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(a.leadership.current().is_none());
        assert_eq!(b.leadership.current().map(|t| t.number()), Some(1));
        let fake = fake.lock().unwrap();
        assert!(fake.writes.iter().all(|w| w.holder.as_deref() == Some(w.by.as_str())), "{:?}", fake.writes);
        drop(fake);
        for r in [a, b] {
            r.task.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_renewals_hang_is_fenced_before_another_takes_over() {
        takeover_with(Fault::Hang).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_renewals_are_slower_than_the_lease_is_fenced_before_another_takes_over() {
        takeover_with(Fault::Delay(Duration::from_secs(40))).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_renewals_fail_is_fenced_before_another_takes_over() {
        takeover_with(Fault::Error500).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_within_the_renew_deadline_does_not_interrupt_the_term() {
        let timing = LeaseTiming::default();
        let fake = Shared::default();
        let a = replica(&fake, "a", timing.clone());
        let (_, term) = term_begins(&a.leadership).await;
        set_fault(&fake, "a", Some(Fault::Error500));
        tokio::time::sleep(timing.renew_deadline / 2).await;
        set_fault(&fake, "a", None);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(term.is_valid());
        assert_eq!(a.leadership.current().map(|t| t.number()), Some(1));
        a.task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_ends_the_term_before_releasing_and_the_standby_takes_over_at_once() {
        let timing = LeaseTiming::default();
        let fake = Shared::default();
        let a = replica(&fake, "a", timing.clone());
        let (_, term) = term_begins(&a.leadership).await;
        let b = replica(&fake, "b", timing.clone());
        tokio::time::sleep(Duration::from_secs(5)).await;
        let stopped_at = Instant::now();
        a.stop.cancel();
        a.task.await.unwrap();
        assert!(!term.is_valid());
        let release = fake.lock().unwrap().writes.last().cloned().unwrap();
        assert_eq!((release.by.as_str(), release.holder.as_deref()), ("a", None));
        assert!(!release.writer_leading, "the lease was released while the term was still current");
        let (b_began, _) = term_begins(&b.leadership).await;
        assert!(b_began - stopped_at <= timing.retry_period + Duration::from_millis(1));
        b.task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn of_two_candidates_for_a_free_lease_one_leads() {
        let fake = Shared::default();
        let a = replica(&fake, "a", LeaseTiming::default());
        let b = replica(&fake, "b", LeaseTiming::default());
        tokio::time::sleep(Duration::from_secs(60)).await;
        let leading = [&a, &b].iter().filter(|r| r.leadership.current().is_some()).count();
        assert_eq!(leading, 1);
        a.task.abort();
        b.task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn an_elector_that_stops_running_rounds_fails_liveness() {
        let timing = LeaseTiming::default();
        let a = replica(&Shared::default(), "a", timing.clone());
        term_begins(&a.leadership).await;
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(a.health.live(), Ok(()));
        // A task that no longer runs (here: aborted) no longer beats.
        a.task.abort();
        tokio::time::sleep(timing.stuck_after() + Duration::from_secs(1)).await;
        assert!(a.health.live().is_err_and(|e| e.starts_with("elector: no heartbeat")));
    }

    #[test]
    fn timing_that_would_void_the_guarantee_is_refused() {
        assert_eq!(LeaseTiming::default().validate(), Ok(()));
        let equal = LeaseTiming { renew_deadline: Duration::from_secs(15), ..LeaseTiming::default() };
        assert!(equal.validate().is_err());
        // 15.5 s is recorded as 15 s, which the renew deadline must stay below.
        let fractional = LeaseTiming {
            lease_duration: Duration::from_millis(15_500),
            renew_deadline: Duration::from_millis(15_200),
            ..LeaseTiming::default()
        };
        assert!(fractional.validate().is_err());
        assert!(LeaseTiming { retry_period: Duration::ZERO, ..LeaseTiming::default() }.validate().is_err());
    }
}
