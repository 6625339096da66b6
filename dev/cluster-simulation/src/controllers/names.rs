//! The gate names of the controllers (for `Faults::pause_controller`).

/// PDB status.
pub const DISRUPTION: &str = "disruption";
/// Deployments.
pub const DEPLOYMENT: &str = "deployment";
/// ReplicaSets.
pub const REPLICASET: &str = "replicaset";
/// StatefulSets.
pub const STATEFULSET: &str = "statefulset";
/// DaemonSets.
pub const DAEMONSET: &str = "daemonset";
/// Jobs.
pub const JOB: &str = "job";
/// The scheduler.
pub const SCHEDULER: &str = "scheduler";
/// Every kubelet (pods, node status, leases).
pub const KUBELET: &str = "kubelet";
/// The garbage collector.
pub const GARBAGE_COLLECTOR: &str = "garbage-collector";
/// The pod garbage collector (pods of nodes that are gone).
pub const POD_GARBAGE_COLLECTOR: &str = "pod-garbage-collector";
/// The ClusterRole aggregation controller.
pub const CLUSTERROLE_AGGREGATION: &str = "clusterrole-aggregation";
/// Every name, in start order.
pub const ALL: [&str; 11] = [
    DISRUPTION,
    DEPLOYMENT,
    REPLICASET,
    STATEFULSET,
    DAEMONSET,
    JOB,
    SCHEDULER,
    KUBELET,
    GARBAGE_COLLECTOR,
    POD_GARBAGE_COLLECTOR,
    CLUSTERROLE_AGGREGATION,
];
