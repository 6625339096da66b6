//! The Job controller: runs a batch/v1 Job's pods to `completions`, retries failed ones up to `backoffLimit`,
//! and reports the Job's status and conditions as upstream's (1.31+) does.
//!
//! # Guarantees
//! - A Job's pods are the pods it controls. They are made from its template with `generateName: <job>-`, a
//!   controller reference (`blockOwnerDeletion: true`) and the finalizer `batch.kubernetes.io/job-tracking`; at
//!   most `parallelism` are active, and no more than the completions still missing (one at a time after a
//!   success when `completions` is unset).
//! - Every finished pod is counted exactly once, across restarts of the controller, with upstream's protocol:
//!   its uid goes into `status.uncountedTerminatedPods`, then its tracking finalizer is removed, then it moves
//!   into `succeeded` or `failed`. A pod that is deleted before it succeeded counts as failed (upstream's
//!   `podReplacementPolicy: TerminatedOrFailed`); pods the controller deletes because the Job is suspended or has
//!   too many lose the finalizer first and are not counted.
//! - A failed pod is replaced after `job_backoff`, doubling per failure up to 6 minutes (upstream: 10 s and 6
//!   minutes), counted from when the controller saw the failure (a restarted controller replaces at once).
//! - More failures than `backoffLimit` (with `restartPolicy: OnFailure`, container restarts of active pods count
//!   too), or running longer than `activeDeadlineSeconds` since `startTime`, sets `FailureTarget` (reason
//!   `BackoffLimitExceeded` or `DeadlineExceeded`) and deletes the active pods; once none is left terminating the
//!   Job gets `Failed`. Reaching `completions` sets `SuccessCriteriaMet` (reason `CompletionsReached`), then
//!   `Complete` with `completionTime`. Pods still active when the Job finishes count as failed (as upstream's).
//! - `suspend: true` deletes the active pods and sets `Suspended` (reason `JobSuspended`); resuming sets it False
//!   (`JobResumed`) and restarts `startTime`, so the deadline counts from the resume.
//! - `status.active`, `ready`, `terminating`, `startTime` are kept current; a finished Job with
//!   `ttlSecondsAfterFinished` is deleted (foreground, as upstream's TTL controller) that long after it finished.
//! - Not implemented: Indexed Jobs, `podFailurePolicy`, `successPolicy`, `backoffLimitPerIndex`, `managedBy`
//!   (the API server refuses them), adopting orphaned pods that match a selector, Events.
//! - A pod that keeps the tracking finalizer after its Job is gone from the store (deleted, or orphaned by a
//!   delete without a propagation policy) is released, as upstream's orphan queue does.

use super::objects::{PodInfo, PodPhase, Str, Typed};
use super::queue::WorkQueue;
use super::workload::{self, PodPlacement};
use super::{Informers, Outcome, READ_YOUR_WRITES, Reconciler, SyncError, names, rv_of};
use crate::apiserver::object::ObjectKey;
use crate::apiserver::store::{DeleteOutcome, Patch, Store};
use crate::timing::Timing;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, PatchParams, PostParams, Preconditions, PropagationPolicy};
use serde_json::json;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The finalizer that keeps a Job's pod until the controller counted it.
pub const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// Upstream's longest delay before a failed pod is replaced.
const MAX_BACKOFF: Duration = Duration::from_secs(360);

/// Starts the controller: subscribes to the caches now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    timing: &Timing,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<Work> = WorkQueue::new();
    {
        let (queue, pods) = (queue.clone(), informers.pods.clone());
        informers.jobs.subscribe(move |change| {
            let meta = &change.object().meta;
            queue.add(Work::Job(meta.key.clone()));
            if change.is_delete() {
                for pod in pods.owned_by(&meta.uid) {
                    queue.add(Work::Orphan(pod.meta.key.clone()));
                }
            }
        });
    }
    {
        let (queue, jobs) = (queue.clone(), informers.jobs.clone());
        informers.pods.subscribe(move |change| {
            if let Some(new) = &change.new
                && new.meta.has_finalizer(TRACKING_FINALIZER)
                && new.meta.controller().is_none_or(|o| &*o.kind != "Job")
            {
                // Orphaned (its Job was deleted with the orphan policy): nothing will count it.
                queue.add(Work::Orphan(new.meta.key.clone()));
            }
            for version in [&change.old, &change.new].into_iter().flatten() {
                let meta = &version.meta;
                let Some(owner) = meta.controller().filter(|o| &*o.kind == "Job") else { continue };
                let key = crate::apiserver::object::object_key(meta.namespace.as_deref(), &owner.name);
                let owned = jobs.get(&key).is_some_and(|job| job.meta.uid == owner.uid);
                if owned {
                    queue.add(Work::Job(key));
                } else if meta.has_finalizer(TRACKING_FINALIZER) {
                    queue.add(Work::Orphan(meta.key.clone()));
                }
            }
        });
    }
    let controller = JobController {
        store: store.with_identity("dev/job-controller"),
        informers: informers.clone(),
        backoff: timing.job_backoff,
        failures: HashMap::new(),
    };
    super::worker(controller, queue, store.controller_gate(names::JOB), informers, shutdown)
}

/// The controller's work.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Work {
    /// Sync a Job.
    Job(ObjectKey),
    /// A pod with the tracking finalizer whose Job may be gone, or that no Job controls any more: release it
    /// (upstream's orphan queue).
    Orphan(ObjectKey),
}

struct JobController {
    store: Store,
    informers: Informers,
    backoff: Duration,
    /// Per Job uid: the failures seen and when the last one was seen.
    failures: HashMap<Str, (i32, Instant)>,
}

fn condition_true(status: &JobStatus, type_: &str) -> bool {
    status.conditions.iter().flatten().any(|c| c.type_ == type_ && c.status == "True")
}

/// Sets a condition; its transition time moves only when its status does.
fn set_condition(status: &mut JobStatus, type_: &str, ok: bool, reason: &str, message: &str, now: &Time) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let value = if ok { "True" } else { "False" }.to_owned();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != value {
                existing.last_transition_time = Some(now.clone());
            }
            existing.status = value;
            existing.reason = Some(reason.to_owned());
            existing.message = Some(message.to_owned());
            existing.last_probe_time = Some(now.clone());
        }
        None => conditions.push(JobCondition {
            type_: type_.to_owned(),
            status: value,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_probe_time: Some(now.clone()),
            last_transition_time: Some(now.clone()),
        }),
    }
}

/// A pod that ran and will not run again, and whether it counts as a success: Succeeded, Failed, or deleted
/// before it succeeded (upstream `isPodFailed` under `TerminatedOrFailed`).
fn finished(pod: &PodInfo) -> Option<bool> {
    match pod.phase {
        PodPhase::Succeeded => Some(true),
        PodPhase::Failed => Some(false),
        _ if pod.meta.is_deleting() => Some(false),
        _ => None,
    }
}

fn now_time() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()))
}

impl JobController {
    fn pods_of(&self, job: &Typed<Job>) -> Vec<Arc<PodInfo>> {
        self.informers
            .pods
            .owned_by(&job.meta.uid)
            .into_iter()
            .filter(|p| p.meta.is_controlled_by(&job.meta.uid))
            .collect()
    }

    /// Removes the tracking finalizer of `pod` (resourceVersion precondition); returns the write's RV.
    fn release(&self, pod: &PodInfo) -> Result<u64, SyncError> {
        if !pod.meta.has_finalizer(TRACKING_FINALIZER) {
            return Ok(0);
        }
        let remaining: Vec<&str> =
            pod.meta.finalizers.iter().map(|f| &**f).filter(|f| *f != TRACKING_FINALIZER).collect();
        let patch =
            Patch::Merge(json!({"metadata": {"resourceVersion": pod.meta.rv.to_string(), "finalizers": remaining}}));
        match self.store.api::<Pod>().patch(
            pod.meta.namespace.as_deref(),
            &pod.meta.name,
            &patch,
            &PatchParams::default(),
        ) {
            Ok(written) => Ok(rv_of(&written.metadata)),
            Err(error) if error.code == 404 => Ok(0),
            Err(error) => Err(error.into()),
        }
    }

    /// Deletes pods the controller no longer wants; they lose their tracking finalizer first, so they are not
    /// counted as failures. Returns the RV of the last write.
    fn remove_pods(&self, pods: &[&Arc<PodInfo>]) -> Result<u64, SyncError> {
        let mut last = 0;
        for pod in pods {
            last = last.max(self.release(pod)?);
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(pod.meta.uid.to_string()), resource_version: None }),
                ..DeleteParams::default()
            };
            match self.store.api::<Pod>().delete(pod.meta.namespace.as_deref(), &pod.meta.name, &params) {
                Ok(DeleteOutcome::Gone(gone) | DeleteOutcome::Pending(gone)) => last = last.max(rv_of(&gone.metadata)),
                Err(error) if error.code == 404 || error.code == 409 => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(last)
    }

    fn create_pods(&self, job: &Typed<Job>, count: usize) -> Result<u64, SyncError> {
        let Some(template) = job.object.spec.as_ref().map(|s| &s.template) else { return Ok(0) };
        let mut last = 0;
        for _ in 0..count {
            let placement = PodPlacement {
                name: None,
                generate_name: Some(format!("{}-", job.meta.name)),
                extra_labels: Default::default(),
                node_name: None,
            };
            let mut pod = workload::pod_from_template(
                template,
                workload::controller_ref("batch/v1", "Job", &job.meta),
                placement,
            );
            pod.metadata.finalizers = Some(vec![TRACKING_FINALIZER.to_owned()]);
            let created =
                self.store.api::<Pod>().create(job.meta.namespace.as_deref(), &pod, &PostParams::default())?;
            last = rv_of(&created.metadata);
        }
        Ok(last)
    }

    /// Writes the Job's status (resourceVersion precondition), waits until the cache shows it and returns the
    /// version written (later writes of the same sync go on from it).
    async fn write(&self, job: &Arc<Typed<Job>>, status: JobStatus) -> Result<Arc<Typed<Job>>, SyncError> {
        super::write_status(&self.store, &self.informers.jobs, job, status).await?;
        let written = self.informers.jobs.get(&job.meta.key).filter(|j| j.meta.uid == job.meta.uid);
        Ok(written.unwrap_or_else(|| job.clone()))
    }

    /// Moves finished pods into the counts with upstream's three steps (see the module docs).
    async fn count_finished(
        &self,
        job: &mut Arc<Typed<Job>>,
        pods: &[Arc<PodInfo>],
    ) -> Result<Option<JobStatus>, SyncError> {
        let mut status = job.object.status.clone().unwrap_or_default();
        let uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();
        let mut succeeded: BTreeSet<String> = uncounted.succeeded.unwrap_or_default().into_iter().collect();
        let mut failed: BTreeSet<String> = uncounted.failed.unwrap_or_default().into_iter().collect();
        let mut added = false;
        for pod in pods.iter().filter(|p| p.meta.has_finalizer(TRACKING_FINALIZER)) {
            let uid = pod.meta.uid.to_string();
            if succeeded.contains(&uid) || failed.contains(&uid) {
                continue;
            }
            match finished(pod) {
                Some(true) => added |= succeeded.insert(uid),
                Some(false) => added |= failed.insert(uid),
                None => {}
            }
        }
        if succeeded.is_empty() && failed.is_empty() {
            return Ok(None);
        }
        // 1. Record them as uncounted, so that a crash after the finalizers are gone loses nothing.
        let uncounted = |succeeded: &BTreeSet<String>, failed: &BTreeSet<String>| UncountedTerminatedPods {
            succeeded: Some(succeeded.iter().cloned().collect()),
            failed: Some(failed.iter().cloned().collect()),
        };
        if added {
            status.uncounted_terminated_pods = Some(uncounted(&succeeded, &failed));
            *job = self.write(job, status.clone()).await?;
        }
        // 2. Release them.
        let mut last = 0;
        for pod in pods.iter().filter(|p| succeeded.contains(&*p.meta.uid) || failed.contains(&*p.meta.uid)) {
            last = last.max(self.release(pod)?);
        }
        if last > 0 {
            self.informers.pods.wait_for_rv(last, READ_YOUR_WRITES).await;
        }
        // 3. Count the released ones (gone, or without the finalizer).
        let still_tracked = |uid: &String| {
            self.informers
                .pods
                .owned_by(&job.meta.uid)
                .iter()
                .any(|p| &*p.meta.uid == uid.as_str() && p.meta.has_finalizer(TRACKING_FINALIZER))
        };
        let released_succeeded: Vec<String> = succeeded.iter().filter(|u| !still_tracked(u)).cloned().collect();
        let released_failed: Vec<String> = failed.iter().filter(|u| !still_tracked(u)).cloned().collect();
        status.succeeded = Some(status.succeeded.unwrap_or(0) + released_succeeded.len() as i32);
        status.failed = Some(status.failed.unwrap_or(0) + released_failed.len() as i32);
        for uid in &released_succeeded {
            succeeded.remove(uid);
        }
        for uid in &released_failed {
            failed.remove(uid);
        }
        status.uncounted_terminated_pods = Some(uncounted(&succeeded, &failed));
        Ok(Some(status))
    }

    /// How long until a replacement may be created, after the failures counted so far.
    fn backoff_left(&mut self, job: &Typed<Job>, failed: i32) -> Duration {
        if failed == 0 {
            return Duration::ZERO;
        }
        let entry = self.failures.entry(job.meta.uid.clone()).or_insert((failed, Instant::now()));
        if entry.0 != failed {
            *entry = (failed, Instant::now());
        }
        let exponent = u32::try_from(failed - 1).unwrap_or(0).min(16);
        let delay = self.backoff.saturating_mul(1 << exponent).min(MAX_BACKOFF);
        (entry.1 + delay).saturating_duration_since(Instant::now())
    }

    async fn sync_job(&mut self, mut job: Arc<Typed<Job>>) -> Result<Outcome, SyncError> {
        let pods = self.pods_of(&job);
        let Some(spec) = job.object.spec.clone() else { return Ok(Outcome::Done) };
        let old_status = job.object.status.clone().unwrap_or_default();
        let finished_already = condition_true(&old_status, "Complete") || condition_true(&old_status, "Failed");
        if finished_already {
            // A finished Job keeps no active pods and no finalizers on its pods.
            let active: Vec<&Arc<PodInfo>> = pods.iter().filter(|p| finished(p).is_none()).collect();
            self.remove_pods(&active)?;
            for pod in pods.iter().filter(|p| finished(p).is_some()) {
                self.release(pod)?;
            }
            self.failures.remove(&job.meta.uid);
            return self.expire(&job, &old_status, spec.ttl_seconds_after_finished);
        }
        let mut status = match self.count_finished(&mut job, &pods).await? {
            Some(status) => status,
            None => old_status.clone(),
        };
        let now = now_time();
        let suspended = spec.suspend == Some(true);
        let active: Vec<&Arc<PodInfo>> = pods.iter().filter(|p| finished(p).is_none()).collect();
        let terminating = pods.iter().filter(|p| p.meta.is_deleting() && !p.phase.is_terminal()).count() as i32;
        let succeeded = status.succeeded.unwrap_or(0);
        let failed = status.failed.unwrap_or(0)
            + status.uncounted_terminated_pods.as_ref().and_then(|u| u.failed.as_ref()).map_or(0, |f| f.len() as i32);
        let succeeded_all = succeeded
            + status
                .uncounted_terminated_pods
                .as_ref()
                .and_then(|u| u.succeeded.as_ref())
                .map_or(0, |s| s.len() as i32);
        let mut outcome = Outcome::Done;
        let mut written = 0;

        // Suspension and resumption.
        let was_suspended = condition_true(&status, "Suspended");
        if suspended {
            written = written.max(self.remove_pods(&active)?);
            if !was_suspended {
                set_condition(&mut status, "Suspended", true, "JobSuspended", "Job suspended", &now);
            }
        } else {
            if was_suspended {
                set_condition(&mut status, "Suspended", false, "JobResumed", "Job resumed", &now);
                status.start_time = Some(now.clone());
            }
            if status.start_time.is_none() {
                status.start_time = Some(now.clone());
            }
        }

        // Success and failure criteria (the interim conditions first, as 1.31+).
        let backoff_limit = spec.backoff_limit.unwrap_or(6);
        // Upstream `pastBackoffLimitOnFailure`: container restarts of active pods count under OnFailure.
        let on_failure = spec.template.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("OnFailure");
        let restarts: i32 = active.iter().map(|p| p.restarts).sum();
        let past_restart_limit =
            on_failure && if backoff_limit == 0 { restarts > 0 } else { restarts >= backoff_limit };
        let deadline_left = spec.active_deadline_seconds.filter(|_| !suspended).and_then(|seconds| {
            let start = status.start_time.as_ref()?.0;
            let end = start.checked_add(jiff::SignedDuration::from_secs(seconds)).ok()?;
            Some(end.duration_since(Timestamp::now()))
        });
        let complete = match spec.completions {
            Some(completions) => succeeded_all >= completions,
            None => succeeded_all > 0 && active.is_empty(),
        };
        if !condition_true(&status, "FailureTarget") && !condition_true(&status, "SuccessCriteriaMet") {
            if failed > backoff_limit || past_restart_limit {
                let message = "Job has reached the specified backoff limit";
                set_condition(&mut status, "FailureTarget", true, "BackoffLimitExceeded", message, &now);
            } else if deadline_left.is_some_and(|left| !left.is_positive()) {
                let message = "Job was active longer than specified deadline";
                set_condition(&mut status, "FailureTarget", true, "DeadlineExceeded", message, &now);
            } else if complete {
                let message = "Reached expected number of succeeded pods";
                set_condition(&mut status, "SuccessCriteriaMet", true, "CompletionsReached", message, &now);
            }
        }
        let failing = condition_true(&status, "FailureTarget");
        let succeeding = condition_true(&status, "SuccessCriteriaMet");
        if failing || succeeding {
            // Upstream: once the Job is finished, every pod that has not succeeded counts as failed. They are
            // recorded as uncounted before their finalizers go, as every finished pod is.
            let uncounted = status.uncounted_terminated_pods.get_or_insert_with(Default::default);
            let failed_uids = uncounted.failed.get_or_insert_with(Vec::new);
            let before = failed_uids.len();
            for pod in &active {
                let uid = pod.meta.uid.to_string();
                if !failed_uids.contains(&uid) {
                    failed_uids.push(uid);
                }
            }
            if failed_uids.len() != before {
                job = self.write(&job, status.clone()).await?;
            }
            written = written.max(self.remove_pods(&active)?);
            let uncounted_left = status
                .uncounted_terminated_pods
                .as_ref()
                .is_some_and(|u| u.succeeded.iter().chain(u.failed.iter()).any(|l| !l.is_empty()));
            if terminating == 0 && active.is_empty() && !uncounted_left {
                let copy = |status: &JobStatus, from: &str| {
                    status.conditions.iter().flatten().find(|c| c.type_ == from).cloned()
                };
                let (final_type, from) =
                    if failing { ("Failed", "FailureTarget") } else { ("Complete", "SuccessCriteriaMet") };
                if let Some(interim) = copy(&status, from) {
                    let reason = interim.reason.unwrap_or_default();
                    let message = interim.message.unwrap_or_default();
                    set_condition(&mut status, final_type, true, &reason, &message, &now);
                }
                if succeeding {
                    status.completion_time = Some(now.clone());
                }
            } else {
                outcome = Outcome::RequeueAfter(Duration::from_millis(200));
            }
        } else if !suspended {
            // Keep `parallelism` pods running, no more than the completions still missing.
            let parallelism = spec.parallelism.unwrap_or(1).max(0) as usize;
            let wanted = match spec.completions {
                Some(completions) => parallelism.min((completions - succeeded_all).max(0) as usize),
                None if succeeded_all > 0 => 0,
                None => parallelism,
            };
            if active.len() > wanted {
                let mut extra: Vec<Arc<PodInfo>> = active.iter().map(|p| (*p).clone()).collect();
                workload::sort_for_deletion(&mut extra);
                let extra: Vec<&Arc<PodInfo>> = extra.iter().take(active.len() - wanted).collect();
                written = written.max(self.remove_pods(&extra)?);
            } else if active.len() < wanted {
                let wait = self.backoff_left(&job, failed);
                if wait.is_zero() {
                    written = written.max(self.create_pods(&job, wanted - active.len())?);
                } else {
                    outcome = outcome.min(Outcome::RequeueAfter(wait));
                }
            }
            if let Some(left) = deadline_left.filter(|l| l.is_positive()) {
                outcome = outcome.min(Outcome::RequeueAfter(left.unsigned_abs()));
            }
        }
        if written > 0 {
            self.informers.pods.wait_for_rv(written, READ_YOUR_WRITES).await;
        }
        let pods = self.pods_of(&job);
        let active: Vec<&Arc<PodInfo>> = pods.iter().filter(|p| finished(p).is_none()).collect();
        status.active = Some(active.len() as i32);
        status.ready = Some(active.iter().filter(|p| p.is_ready()).count() as i32);
        status.terminating =
            Some(pods.iter().filter(|p| p.meta.is_deleting() && !p.phase.is_terminal()).count() as i32);
        status.succeeded.get_or_insert(0);
        status.failed.get_or_insert(0);
        if status.uncounted_terminated_pods.as_ref().is_some_and(|u| {
            u.succeeded.as_ref().is_none_or(Vec::is_empty) && u.failed.as_ref().is_none_or(Vec::is_empty)
        }) || status.uncounted_terminated_pods.is_none()
        {
            status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
        }
        let finished_now = condition_true(&status, "Complete") || condition_true(&status, "Failed");
        self.write(&job, status.clone()).await?;
        if finished_now {
            self.failures.remove(&job.meta.uid);
            return Ok(outcome.min(self.expire(&job, &status, spec.ttl_seconds_after_finished)?));
        }
        Ok(outcome)
    }

    /// Deletes a finished Job whose `ttlSecondsAfterFinished` has passed; otherwise asks to be back then.
    fn expire(&self, job: &Typed<Job>, status: &JobStatus, ttl: Option<i32>) -> Result<Outcome, SyncError> {
        let Some(ttl) = ttl else { return Ok(Outcome::Done) };
        let finished_at = status
            .completion_time
            .clone()
            .or_else(|| {
                status
                    .conditions
                    .iter()
                    .flatten()
                    .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                    .and_then(|c| c.last_transition_time.clone())
            })
            .map(|t| t.0);
        let Some(finished_at) = finished_at else { return Ok(Outcome::Done) };
        let due = finished_at.checked_add(jiff::SignedDuration::from_secs(i64::from(ttl))).unwrap_or(finished_at);
        let left = due.duration_since(Timestamp::now());
        if left.is_positive() {
            return Ok(Outcome::RequeueAfter(left.unsigned_abs()));
        }
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions { uid: Some(job.meta.uid.to_string()), resource_version: None }),
            ..DeleteParams::default()
        };
        match self.store.api::<Job>().delete(job.meta.namespace.as_deref(), &job.meta.name, &params) {
            Ok(_) => Ok(Outcome::Done),
            Err(error) if error.code == 404 || error.code == 409 => Ok(Outcome::Done),
            Err(error) => Err(error.into()),
        }
    }
}

impl JobController {
    /// Releases a pod whose controlling Job is gone from the store (not only from the cache).
    fn release_orphan(&self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let Some(pod) = self.informers.pods.get(key) else { return Ok(Outcome::Done) };
        if !pod.meta.has_finalizer(TRACKING_FINALIZER) {
            return Ok(Outcome::Done);
        }
        let Some(owner) = pod.meta.controller().filter(|o| &*o.kind == "Job") else {
            self.release(&pod)?;
            return Ok(Outcome::Done);
        };
        let live = self.store.api::<Job>().get_opt(pod.meta.namespace.as_deref(), &owner.name)?;
        if live.is_some_and(|job| job.metadata.uid.as_deref() == Some(&*owner.uid)) {
            return Ok(Outcome::Done);
        }
        self.release(&pod)?;
        Ok(Outcome::Done)
    }
}

impl Reconciler for JobController {
    type Key = Work;

    async fn sync(&mut self, work: &Work) -> Result<Outcome, SyncError> {
        let key = match work {
            Work::Job(key) => key,
            Work::Orphan(key) => return self.release_orphan(key),
        };
        let Some(job) = self.informers.jobs.get(key) else { return Ok(Outcome::Done) };
        if job.meta.is_deleting() {
            // Its pods keep no tracking finalizer: the garbage collector (or the orphaning) takes over.
            for pod in self.pods_of(&job) {
                self.release(&pod)?;
            }
            return Ok(Outcome::Done);
        }
        self.sync_job(job).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::objects::Cached;

    fn pod(phase: &str, deleting: bool) -> PodInfo {
        let mut value = json!({"metadata": {"name": "p"}, "status": {"phase": phase}});
        if deleting {
            value["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        PodInfo::parse(&value).unwrap()
    }

    #[test]
    fn deleted_pods_count_as_failed_unless_they_succeeded() {
        assert_eq!(finished(&pod("Succeeded", false)), Some(true));
        assert_eq!(finished(&pod("Succeeded", true)), Some(true));
        assert_eq!(finished(&pod("Failed", false)), Some(false));
        assert_eq!(finished(&pod("Running", true)), Some(false));
        assert_eq!(finished(&pod("Running", false)), None);
        assert_eq!(finished(&pod("Pending", false)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_pod_is_replaced_after_a_doubling_delay() {
        let server = crate::apiserver::ApiServer::start(crate::apiserver::ApiServerConfig::default()).await.unwrap();
        let mut controller = JobController {
            store: server.store(),
            informers: Informers::new(),
            backoff: Duration::from_secs(10),
            failures: HashMap::new(),
        };
        let job = Typed::<Job>::parse(&json!({"metadata": {"name": "j", "uid": "u"}})).unwrap();
        assert_eq!(controller.backoff_left(&job, 0), Duration::ZERO);
        assert_eq!(controller.backoff_left(&job, 1), Duration::from_secs(10));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(controller.backoff_left(&job, 1), Duration::from_secs(6));
        assert_eq!(controller.backoff_left(&job, 3), Duration::from_secs(40));
        assert_eq!(controller.backoff_left(&job, 30), MAX_BACKOFF);
        server.shutdown().await;
    }
}
