//! Leader election on a `coordination.k8s.io/v1` Lease, the way client-go does it: GET the lease,
//! take it over with a PUT carrying its resourceVersion once it has not been renewed for a lease
//! duration, renew it with PUTs, and let go of it on shutdown.
//!
//! # Guarantees
//! - Two candidates never both believe they lead for longer than the clock-free margin
//!   `lease_duration - renew_deadline`: a leader that cannot renew for `renew_deadline` steps
//!   down, while the others wait `lease_duration` (measured on their own clock, from when they
//!   last saw the lease change) before taking over. A PUT against a stale resourceVersion fails
//!   with 409, so of two candidates racing for a free lease exactly one wins.
//! - Expiry is judged from when *this* process saw the record change, never by comparing the
//!   holder's `renewTime` with the local clock, so clock skew between nodes does not matter.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Timing of the election; the defaults are client-go's.
#[derive(Debug, Clone)]
pub struct LeaseTiming {
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
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
    at: Instant,
}

impl Elector {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, timing: LeaseTiming) -> Self {
        Elector { api: Api::namespaced(client, namespace), name: name.into(), identity: identity.into(), timing }
    }

    /// Campaigns until `shutdown`, publishing whether this process leads on `leading`. Releases the
    /// lease on shutdown if it holds it.
    pub async fn run(self, leading: watch::Sender<bool>, shutdown: CancellationToken) {
        let mut observed: Option<Observed> = None;
        let mut last_renewal = Instant::now();
        loop {
            let is_leader = *leading.borrow();
            match self.try_acquire_or_renew(&mut observed).await {
                Ok(true) => {
                    last_renewal = Instant::now();
                    if !is_leader {
                        tracing::info!(lease = %self.name, identity = %self.identity, "became the leader");
                        leading.send_replace(true);
                    }
                }
                Ok(false) => {
                    if is_leader {
                        tracing::warn!(lease = %self.name, "another replica holds the lease; stepping down");
                        leading.send_replace(false);
                    }
                }
                Err(error) => {
                    tracing::warn!(lease = %self.name, %error, "lease request failed");
                    if is_leader && last_renewal.elapsed() >= self.timing.renew_deadline {
                        tracing::warn!(lease = %self.name, "could not renew the lease in time; stepping down");
                        leading.send_replace(false);
                    }
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(self.timing.retry_period) => {}
            }
        }
        if *leading.borrow() {
            leading.send_replace(false);
            if let Err(error) = self.release().await {
                tracing::warn!(lease = %self.name, %error, "could not release the lease");
            } else {
                tracing::info!(lease = %self.name, "released the lease");
            }
        }
    }

    /// One round: true when this process holds the lease afterwards.
    async fn try_acquire_or_renew(&self, observed: &mut Option<Observed>) -> Result<bool, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let duration_secs = self.timing.lease_duration.as_secs().max(1) as i32;
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(duration_secs),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let changed = observed.as_ref().is_none_or(|o| o.holder != holder || o.renew_time != spec.renew_time);
        if changed {
            *observed =
                Some(Observed { holder: holder.clone(), renew_time: spec.renew_time.clone(), at: Instant::now() });
        }
        let ours = holder.as_deref() == Some(self.identity.as_str());
        let held_duration =
            spec.lease_duration_seconds.map_or(self.timing.lease_duration, |s| Duration::from_secs(s.max(1) as u64));
        let expired = holder.is_none() || observed.as_ref().is_some_and(|o| o.at.elapsed() >= held_duration);
        if !ours && !expired {
            return Ok(false);
        }
        if !ours {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(self.identity.clone());
        }
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(duration_secs);
        // The PUT carries the resourceVersion we read: if anyone wrote in between, it fails with 409.
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
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
