//! How fast the simulated cluster moves: pod startup and termination, host staging and reboots, kubelet
//! heartbeats, and the disruption controller's lag.

use std::time::Duration;

/// Durations of the simulated cluster. `Timing::default()` is [`Timing::fast`], for tests.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// From a pod bound to a Ready node (or its node coming back from a reboot) to the pod Running and Ready.
    pub pod_startup: Duration,
    /// Upper bound of a pod's termination: a deleted pod is removed after `min(grace period, this)`.
    pub pod_termination_cap: Duration,
    /// How long a host takes to stage an image (per-host overrides in [`crate::hosts::HostFaults`]).
    pub stage: Duration,
    /// How long a host is down in a reboot (per-host overrides in [`crate::hosts::HostFaults`]).
    pub reboot: Duration,
    /// Interval of the kubelets' node status heartbeats (the Ready condition's `lastHeartbeatTime`, through
    /// `/status`); `None` writes node status only when it changes.
    pub node_heartbeat: Option<Duration>,
    /// Interval of the node Lease renewals in `kube-node-lease`; `None` creates no Leases.
    pub lease_renew: Option<Duration>,
    /// How long the disruption controller lets pod and PDB changes gather before it recomputes a PDB.
    pub disruption_lag: Duration,
    /// How long the containers of a run-to-completion pod (`restartPolicy: Never` or `OnFailure`, e.g. a Job's)
    /// run before they exit (per-host overrides in [`crate::hosts::HostFaults`]).
    pub job_pod_run: Duration,
    /// The first delay before the Job controller replaces a failed pod; it doubles with every further failure
    /// (upstream: 10 s, at most 6 minutes).
    pub job_backoff: Duration,
    /// How long a new cloud instance is `Creating` before it runs (per-group overrides in
    /// `cloud_emulators::GroupFaults`); also how long a stopped instance takes to start.
    pub instance_provision: Duration,
    /// From a cloud instance running to its kubelet registering the Node (NotReady at first).
    pub node_join: Duration,
    /// From the Node's registration to it Ready (the host's first boot completes).
    pub node_ready: Duration,
    /// How long a deleted (or stopped) cloud instance is `Terminating` (`Stopping`) before it is gone (stopped).
    pub instance_terminate: Duration,
    /// How long a pod whose node is gone waits before the pod garbage collector fails and deletes it (upstream:
    /// 40 s).
    pub pod_gc_quarantine: Duration,
}

impl Timing {
    /// Everything quick, for tests: pods start in 100 ms, terminate within 500 ms, a stage takes 200 ms and a
    /// reboot 1 s; Job pods run 300 ms and a failed one is replaced after 100 ms (doubling); a cloud instance is
    /// created in 200 ms, registers its node 200 ms later, which is Ready 300 ms after that, and is deleted in
    /// 300 ms; pods of a node that is gone are deleted after 1 s.
    pub fn fast() -> Self {
        Timing {
            pod_startup: Duration::from_millis(100),
            pod_termination_cap: Duration::from_millis(500),
            stage: Duration::from_millis(200),
            reboot: Duration::from_secs(1),
            node_heartbeat: Some(Duration::from_secs(10)),
            lease_renew: Some(Duration::from_secs(10)),
            disruption_lag: Duration::ZERO,
            job_pod_run: Duration::from_millis(300),
            job_backoff: Duration::from_millis(100),
            instance_provision: Duration::from_millis(200),
            node_join: Duration::from_millis(200),
            node_ready: Duration::from_millis(300),
            instance_terminate: Duration::from_millis(300),
            pod_gc_quarantine: Duration::from_secs(1),
        }
    }

    /// Closer to a real cluster, for demos: pods start in 2 s and use their whole grace period (up to 30 s), a
    /// stage takes 20 s and a reboot 45 s; node status every minute and leases every 10 s, as kubelets do; Job
    /// pods run 5 s and failed ones are replaced after upstream's 10 s backoff (doubling); a cloud instance takes
    /// 30 s to be created, its node registers 40 s later (boot and kubelet start) and is Ready 10 s after that
    /// (network plugin), and a deletion takes 30 s; pods of a node that is gone are deleted after upstream's 40 s.
    pub fn realistic() -> Self {
        Timing {
            pod_startup: Duration::from_secs(2),
            pod_termination_cap: Duration::from_secs(30),
            stage: Duration::from_secs(20),
            reboot: Duration::from_secs(45),
            node_heartbeat: Some(Duration::from_secs(60)),
            lease_renew: Some(Duration::from_secs(10)),
            disruption_lag: Duration::ZERO,
            job_pod_run: Duration::from_secs(5),
            job_backoff: Duration::from_secs(10),
            instance_provision: Duration::from_secs(30),
            node_join: Duration::from_secs(40),
            node_ready: Duration::from_secs(10),
            instance_terminate: Duration::from_secs(30),
            pod_gc_quarantine: Duration::from_secs(40),
        }
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing::fast()
    }
}
