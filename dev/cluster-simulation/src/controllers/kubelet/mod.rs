//! The kubelets of every node, as one task with a timer queue (kwok-style): pod lifecycle, node status, node
//! Leases, and the simulated hosts' reboots.
//!
//! # Guarantees
//! - A pod bound to an existing node whose host is up becomes Running and Ready `pod_startup` after it became
//!   startable (bound, or its host came back), through `/status` with the pod's resourceVersion.
//! - A pod being deleted is removed `min(grace period, pod_termination_cap)` after its kubelet first saw it
//!   terminating (as a real kubelet counts the grace period from when it starts to kill the pod, not from the
//!   deletionTimestamp, which has whole seconds only), by a DELETE with grace period 0 and a uid precondition
//!   (§3.7 step 3). While its host is down nothing happens: it is removed after the host is back.
//! - While a host is down (rebooting, or a reboot that never returns) its node is NotReady (reason
//!   `KubeletNotReady`) and its Ready pods are not Ready; its Lease is not renewed. When the host is back the
//!   node is Ready with the host's new `bootID` and `osImage` in `status.nodeInfo`, and its pods are Ready again
//!   after `pod_startup` (with a restart counted).
//! - A run-to-completion pod (`restartPolicy: Never` or `OnFailure`, e.g. a Job's; `Always` pods run until
//!   deleted) runs for `job_pod_run` (or its host's `jobPodSeconds`) once Running, then its containers exit: with
//!   code 0 (phase Succeeded, reason Completed, with the termination message of its host's `jobPodMessage` fault
//!   if that selects it) unless its host's `jobPodFailure` fault selects it; then they exit
//!   with the fault's code and message (phase Failed, reason Error), or, under `OnFailure`, are restarted in place
//!   (restart count up, the failure in `lastState`) and run again. A `Never` pod whose host goes down while it
//!   runs fails (its containers are gone; nothing may restart them); an `OnFailure` one is restarted when the host
//!   is back, as `Always` pods are.
//! - The node status is written when it differs from the host (readiness, boot, image) and, when heartbeats are
//!   on, every `node_heartbeat`; Leases in `kube-node-lease` are renewed every `lease_renew` (both with ±10%
//!   jitter, so that thousands of nodes do not write at once).

mod node_status;
pub mod pod_status;

pub use node_status::{LEASE_DURATION_SECONDS, LEASE_NAMESPACE};

use super::objects::{NodeInfo, PodInfo, PodPhase, RestartPolicy, Str};
use super::queue::WorkQueue;
use super::{Informers, Outcome, Reconciler, SyncError, names};
use crate::apiserver::object::{ObjectKey, now_rfc3339};
use crate::apiserver::selector::label::LabelSelector;
use crate::apiserver::store::{Patch, Store};
use crate::hosts::{HostState, Hosts, Power};
use crate::timing::Timing;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{DeleteParams, PatchParams, PostParams, Preconditions};
use rand::Rng;
use serde_json::json;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One unit of kubelet work.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Work {
    /// A pod's lifecycle.
    Pod(ObjectKey),
    /// A node's status.
    Node(Str),
    /// A node's Lease.
    Lease(Str),
}

/// Starts the kubelets: subscribes to the caches and hosts now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    hosts: &Hosts,
    timing: &Timing,
    kubelet_version: &str,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<Work> = WorkQueue::new();
    {
        let queue = queue.clone();
        informers.pods.subscribe(move |change| {
            let bound = [&change.old, &change.new].into_iter().flatten().any(|p| p.node_name.is_some());
            if bound {
                queue.add(Work::Pod(change.object().meta.key.clone()));
            }
        });
    }
    {
        let (queue, hosts, pods) = (queue.clone(), hosts.clone(), informers.pods.clone());
        informers.nodes.subscribe(move |change| {
            let node = change.object();
            let name = node.meta.name.clone();
            match (&change.old, &change.new) {
                (None, Some(_)) => {
                    queue.add(Work::Node(name.clone()));
                    queue.add(Work::Lease(name.clone()));
                    for pod in pods.on_node(&name) {
                        queue.add(Work::Pod(pod.meta.key.clone()));
                    }
                }
                (Some(_), Some(new)) => {
                    if hosts.state(&name).is_none_or(|host| !reports(new, &host)) {
                        queue.add(Work::Node(name));
                    }
                }
                _ => queue.add(Work::Node(name)),
            }
        });
    }
    {
        let (queue, pods) = (queue.clone(), informers.pods.clone());
        hosts.subscribe(move |node| {
            queue.add(Work::Node(Arc::from(node)));
            queue.add(Work::Lease(Arc::from(node)));
            for pod in pods.on_node(node) {
                queue.add(Work::Pod(pod.meta.key.clone()));
            }
        });
    }
    let kubelet = Kubelet {
        store: store.with_identity("dev/kubelet"),
        informers: informers.clone(),
        hosts: hosts.clone(),
        timing: timing.clone(),
        kubelet_version: kubelet_version.to_owned(),
        startable_since: HashMap::new(),
        terminating_since: HashMap::new(),
        running_since: HashMap::new(),
        node_index: HashMap::new(),
        pod_ips: HashMap::new(),
        last_status: HashMap::new(),
    };
    super::worker(kubelet, queue, store.controller_gate(names::KUBELET), informers, shutdown)
}

/// True when the node's status shows what its host is: readiness, and (while up) boot and image.
fn reports(node: &NodeInfo, host: &HostState) -> bool {
    let up = host.kubelet_ready();
    node.ready == Some(up)
        && (!up
            || (node.boot_id.as_deref() == Some(host.facts.boot_id.as_str())
                && node.os_image.as_deref() == Some(host.facts.os_image.as_str())
                && host.kubelet_version.as_deref().is_none_or(|v| node.kubelet_version.as_deref() == Some(v))))
}

/// How long a pod being deleted takes to go once its kubelet starts killing it: its grace period, at most `cap`.
fn termination_time(pod: &PodInfo, cap: Duration) -> Duration {
    let grace = u64::try_from(pod.meta.deletion_grace_seconds.unwrap_or(0)).unwrap_or(0);
    Duration::from_secs(grace).min(cap)
}

/// `interval` ±10%.
fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(rand::rng().random_range(0.9..1.1))
}

struct Kubelet {
    store: Store,
    informers: Informers,
    hosts: Hosts,
    timing: Timing,
    kubelet_version: String,
    /// When each not-yet-Ready pod became startable.
    startable_since: HashMap<ObjectKey, Instant>,
    /// When this kubelet first saw each pod being deleted (on a running host).
    terminating_since: HashMap<ObjectKey, Instant>,
    /// When the containers of each running run-to-completion pod (last) started.
    running_since: HashMap<ObjectKey, Instant>,
    /// Each node's number, for its addresses.
    node_index: HashMap<Str, u32>,
    /// The last pod address handed out per node.
    pod_ips: HashMap<Str, u32>,
    /// When each node's status was last written.
    last_status: HashMap<Str, Instant>,
}

impl Kubelet {
    fn index_of(&mut self, node: &Str) -> u32 {
        let next = self.node_index.len() as u32;
        *self.node_index.entry(node.clone()).or_insert(next)
    }

    /// 172.16.0.0/12, one address per node.
    fn host_ip(&mut self, node: &Str) -> String {
        let n = self.index_of(node) + 1;
        format!("172.{}.{}.{}", 16 + (n >> 16) % 16, (n >> 8) & 0xff, n & 0xff)
    }

    /// 10.0.0.0/8, a /24 per node.
    fn pod_ip(&mut self, node: &Str) -> String {
        let n = self.index_of(node);
        let last = self.pod_ips.entry(node.clone()).or_insert(1);
        *last = if *last >= 254 { 2 } else { *last + 1 };
        format!("10.{}.{}.{}", (n >> 8) & 0xff, n & 0xff, *last)
    }

    fn sync_pod(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let Some(pod) = self.informers.pods.get(key) else {
            self.startable_since.remove(key);
            self.terminating_since.remove(key);
            self.running_since.remove(key);
            return Ok(Outcome::Done);
        };
        let Some(node) = pod.node_name.clone() else { return Ok(Outcome::Done) };
        if self.informers.nodes.get(&node).is_none() {
            return Ok(Outcome::Done);
        }
        let host = self.hosts.ensure(&node);
        if host.power != Power::Up {
            self.startable_since.remove(key);
            self.running_since.remove(key);
            if pod.restart_policy == RestartPolicy::Never && pod.phase == PodPhase::Running {
                let lost = pod_status::Exit { code: 255, message: Some("the host went down".to_owned()) };
                self.write_pod_status(&pod, |pod, now| {
                    let mut status = pod_status::finished(pod, &lost, now);
                    for container in status.container_statuses.iter_mut().flatten() {
                        if let Some(terminated) = container.state.as_mut().and_then(|s| s.terminated.as_mut()) {
                            terminated.reason = Some("Unknown".to_owned());
                        }
                    }
                    status
                })?;
            } else if pod.ready && !pod.phase.is_terminal() {
                self.write_pod_status(&pod, pod_status::stopped)?;
            }
            return Ok(Outcome::Done);
        }
        if pod.meta.is_deleting() {
            self.startable_since.remove(key);
            let since = *self.terminating_since.entry(key.clone()).or_insert_with(Instant::now);
            let due = since + termination_time(&pod, self.timing.pod_termination_cap);
            let now = Instant::now();
            if due > now {
                return Ok(Outcome::RequeueAfter(due - now));
            }
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions { uid: Some(pod.meta.uid.to_string()), resource_version: None }),
                ..DeleteParams::default()
            };
            return match self.store.api::<Pod>().delete(pod.meta.namespace.as_deref(), &pod.meta.name, &params) {
                Ok(_) => Ok(Outcome::Done),
                // Gone already, or replaced by a pod of the same name.
                Err(error) if error.code == 404 || error.code == 409 => Ok(Outcome::Done),
                Err(error) => Err(error.into()),
            };
        }
        if pod.phase.is_terminal() {
            self.startable_since.remove(key);
            self.running_since.remove(key);
            return Ok(Outcome::Done);
        }
        if pod.ready {
            self.startable_since.remove(key);
            if pod.restart_policy == RestartPolicy::Always {
                return Ok(Outcome::Done);
            }
            return self.run_to_completion(key, &pod, &host);
        }
        let since = *self.startable_since.entry(key.clone()).or_insert_with(Instant::now);
        let due = since + self.timing.pod_startup;
        let now = Instant::now();
        if due > now {
            return Ok(Outcome::RequeueAfter(due - now));
        }
        let host_ip = self.host_ip(&node);
        let pod_ip = self.pod_ip(&node);
        let boot_id = host.facts.boot_id.clone();
        self.write_pod_status(&pod, |pod, now| {
            let addresses = pod_status::Addresses { host_ip: &host_ip, pod_ip: &pod_ip, boot_id: &boot_id };
            pod_status::started(pod, &addresses, now)
        })?;
        self.startable_since.remove(key);
        Ok(Outcome::Done)
    }

    /// Ends the run of a run-to-completion pod once it is due (see the module docs).
    fn run_to_completion(&mut self, key: &ObjectKey, pod: &PodInfo, host: &HostState) -> Result<Outcome, SyncError> {
        let run = host.faults.job_pod_seconds.unwrap_or(self.timing.job_pod_run);
        let since = *self.running_since.entry(key.clone()).or_insert_with(Instant::now);
        let now = Instant::now();
        if since + run > now {
            return Ok(Outcome::RequeueAfter(since + run - now));
        }
        let selects = |selector: Option<&str>| {
            selector.is_none_or(|selector| {
                LabelSelector::parse(selector).is_ok_and(|selector| selector.matches(|k| pod.meta.label(k)))
            })
        };
        let failure = host.faults.job_pod_failure.as_ref().filter(|f| selects(f.label_selector.as_deref()));
        let Some(failure) = failure else {
            let message = host.faults.job_pod_message.as_ref().filter(|m| selects(m.label_selector.as_deref()));
            let exit = pod_status::Exit { code: 0, message: message.map(|m| m.message.clone()) };
            self.write_pod_status(pod, |pod, now| pod_status::finished(pod, &exit, now))?;
            self.running_since.remove(key);
            return Ok(Outcome::Done);
        };
        let exit = pod_status::Exit {
            code: failure.exit_code,
            message: Some(failure.message.clone()).filter(|m| !m.is_empty()),
        };
        if pod.restart_policy == RestartPolicy::OnFailure {
            self.write_pod_status(pod, |pod, now| pod_status::restarted(pod, &exit, now))?;
            self.running_since.insert(key.clone(), Instant::now());
            return Ok(Outcome::RequeueAfter(run));
        }
        self.write_pod_status(pod, |pod, now| pod_status::finished(pod, &exit, now))?;
        self.running_since.remove(key);
        Ok(Outcome::Done)
    }

    /// Reads the pod, replaces its status with `status(pod, now)` and writes it with the pod's resourceVersion.
    fn write_pod_status(
        &self,
        info: &PodInfo,
        status: impl FnOnce(&Pod, &Time) -> k8s_openapi::api::core::v1::PodStatus,
    ) -> Result<(), SyncError> {
        let pods = self.store.api::<Pod>();
        let namespace = info.meta.namespace.as_deref();
        let Some(mut pod) = pods.get_opt(namespace, &info.meta.name)? else { return Ok(()) };
        if pod.metadata.uid.as_deref() != Some(&*info.meta.uid) {
            return Ok(());
        }
        let now = Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()));
        pod.status = Some(status(&pod, &now));
        match pods.update_status(namespace, &pod, &PostParams::default()) {
            Ok(_) => Ok(()),
            Err(error) if error.code == 404 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    fn sync_node(&mut self, name: &Str) -> Result<Outcome, SyncError> {
        let Some(node) = self.informers.nodes.get(name) else {
            self.last_status.remove(name);
            return Ok(Outcome::Done);
        };
        let host = self.hosts.ensure(name);
        let up = host.kubelet_ready();
        let now = Instant::now();
        let heartbeat_due = self
            .timing
            .node_heartbeat
            .filter(|_| up)
            .map(|interval| self.last_status.get(name).map_or(now, |last| *last + interval));
        let patch = if !reports(&node, &host) {
            let internal_ip = self.host_ip(name);
            let identity =
                node_status::NodeIdentity { name, internal_ip: &internal_ip, kubelet_version: &self.kubelet_version };
            let first = node.ready.is_none();
            Some(node_status::full_status(&identity, &host, &now_rfc3339(), first, node.ready != Some(up)))
        } else if heartbeat_due.is_some_and(|due| due <= now) {
            Some(node_status::heartbeat(up, &now_rfc3339()))
        } else {
            None
        };
        let wrote = patch.is_some();
        if let Some(patch) = patch {
            match self.store.api::<Node>().patch_status(None, name, &Patch::Strategic(patch), &PatchParams::default()) {
                Ok(_) => {}
                Err(error) if error.code == 404 => return Ok(Outcome::Done),
                Err(error) => return Err(error.into()),
            }
            self.last_status.insert(name.clone(), now);
        }
        Ok(match (self.timing.node_heartbeat.filter(|_| up), heartbeat_due) {
            (Some(interval), _) if wrote => Outcome::RequeueAfter(jittered(interval)),
            (Some(_), Some(due)) => Outcome::RequeueAfter(due.saturating_duration_since(now)),
            _ => Outcome::Done,
        })
    }

    fn sync_lease(&mut self, name: &Str) -> Result<Outcome, SyncError> {
        let Some(interval) = self.timing.lease_renew else { return Ok(Outcome::Done) };
        let Some(node) = self.informers.nodes.get(name) else { return Ok(Outcome::Done) };
        let host = self.hosts.ensure(name);
        if host.power != Power::Up {
            // A kubelet whose host is down renews nothing; the host coming back wakes this again.
            return Ok(Outcome::Done);
        }
        let now = MicroTime(Timestamp::now());
        let leases = self.store.api::<Lease>();
        let renew = Patch::Merge(json!({"spec": {"holderIdentity": &**name, "renewTime": now,
                                                  "leaseDurationSeconds": LEASE_DURATION_SECONDS}}));
        match leases.patch(Some(LEASE_NAMESPACE), name, &renew, &PatchParams::default()) {
            Ok(_) => {}
            Err(error) if error.code == 404 => {
                let lease = node_status::lease(name, &node.meta.uid, now);
                match leases.create(Some(LEASE_NAMESPACE), &lease, &PostParams::default()) {
                    Ok(_) => {}
                    Err(error) if error.code == 409 => return Ok(Outcome::RequeueAfter(Duration::ZERO)),
                    Err(error) => return Err(error.into()),
                }
            }
            Err(error) => return Err(error.into()),
        }
        Ok(Outcome::RequeueAfter(jittered(interval)))
    }
}

impl Reconciler for Kubelet {
    type Key = Work;

    async fn sync(&mut self, key: &Work) -> Result<Outcome, SyncError> {
        let outcome = match key {
            Work::Pod(pod) => self.sync_pod(pod),
            Work::Node(node) => self.sync_node(node),
            Work::Lease(node) => self.sync_lease(node),
        };
        // One task serves every node: let the caches and the API server's watchers keep up in bursts.
        tokio::task::yield_now().await;
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::objects::Cached;

    fn deleting(timestamp: &str, grace: i64) -> PodInfo {
        PodInfo::parse(&json!({"metadata": {"name": "p", "deletionTimestamp": timestamp,
                                             "deletionGracePeriodSeconds": grace}}))
        .unwrap()
    }

    #[test]
    fn a_deleted_pod_goes_after_its_grace_period_or_the_cap_whichever_is_first() {
        let pod = deleting("2026-01-01T00:00:30Z", 30);
        assert_eq!(termination_time(&pod, Duration::from_secs(5)), Duration::from_secs(5));
        assert_eq!(termination_time(&pod, Duration::from_millis(300)), Duration::from_millis(300));
        assert_eq!(termination_time(&pod, Duration::from_secs(60)), Duration::from_secs(30));
        let forced = deleting("2026-01-01T00:00:00Z", 0);
        assert_eq!(termination_time(&forced, Duration::from_secs(5)), Duration::ZERO);
    }

    #[test]
    fn a_node_reports_its_host_only_with_the_same_boot_and_image() {
        let hosts = Hosts::new("v1", &Timing::fast());
        hosts.add("n1", "v1").unwrap();
        let host = hosts.state("n1").unwrap();
        let node = |ready: &str, boot: &str| {
            NodeInfo::parse(&json!({"metadata": {"name": "n1"}, "status": {
                "conditions": [{"type": "Ready", "status": ready}],
                "nodeInfo": {"bootID": boot, "osImage": "v1"}}}))
            .unwrap()
        };
        assert!(reports(&node("True", &host.facts.boot_id), &host));
        assert!(!reports(&node("True", "old"), &host));
        assert!(!reports(&node("False", &host.facts.boot_id), &host));
    }
}
