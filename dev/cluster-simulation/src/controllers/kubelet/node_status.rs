//! The node status a kubelet reports (strategic merge patches of `/status`) and its node Lease.

use crate::hosts::HostState;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use serde_json::{Value, json};

/// Namespace of the node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// `leaseDurationSeconds` of node Leases (upstream's default).
pub const LEASE_DURATION_SECONDS: i32 = 40;

/// What the kubelet knows of its node besides the host.
pub struct NodeIdentity<'a> {
    /// The node's name.
    pub name: &'a str,
    /// The node's InternalIP.
    pub internal_ip: &'a str,
    /// `kubeletVersion` (and `kubeProxyVersion`) unless the host's simulated kubeadm installed another.
    pub kubelet_version: &'a str,
}

fn stable_hex(text: &str) -> String {
    let mut out = String::new();
    for seed in [0xcbf2_9ce4_8422_2325_u64, 0x84222325cbf29ce4] {
        let mut hash = seed;
        for byte in text.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        out.push_str(&format!("{hash:016x}"));
    }
    out
}

fn ready_condition(up: bool, now: &str, transition: bool) -> Value {
    let (status, reason, message) = if up {
        ("True", "KubeletReady", "kubelet is posting ready status")
    } else {
        (
            "False",
            "KubeletNotReady",
            "container runtime is down: the host is rebooting or down, or the kubelet restarts",
        )
    };
    let mut condition = json!({"type": "Ready", "status": status, "reason": reason, "message": message,
                               "lastHeartbeatTime": now});
    if transition {
        condition["lastTransitionTime"] = json!(now);
    }
    condition
}

/// The full status: conditions, addresses, capacity and `nodeInfo` from the host. `first` adds the transition
/// times of the pressure conditions; `transition` the Ready condition's.
pub fn full_status(node: &NodeIdentity<'_>, host: &HostState, now: &str, first: bool, transition: bool) -> Value {
    let up = host.kubelet_ready();
    let pressure = |type_: &str, reason: &str, message: &str| {
        let mut condition = json!({"type": type_, "status": "False", "reason": reason, "message": message,
                                   "lastHeartbeatTime": now});
        if first {
            condition["lastTransitionTime"] = json!(now);
        }
        condition
    };
    let capacity = json!({"cpu": "32", "memory": "131886080Ki", "pods": "110", "ephemeral-storage": "209702892Ki",
                          "hugepages-2Mi": "0"});
    let machine = stable_hex(node.name);
    json!({"status": {
        "conditions": [
            pressure("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            pressure("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            pressure("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ready_condition(up, now, transition),
        ],
        "addresses": [{"type": "InternalIP", "address": node.internal_ip}, {"type": "Hostname", "address": node.name}],
        "capacity": capacity,
        "allocatable": capacity,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": machine,
            "systemUUID": format!("{}-{}-{}-{}-{}", &machine[0..8], &machine[8..12], &machine[12..16],
                                  &machine[16..20], &machine[20..32]),
            "bootID": host.facts.boot_id,
            "kernelVersion": "6.6.0-dev",
            "osImage": host.facts.os_image,
            "containerRuntimeVersion": "containerd://1.7.27",
            "kubeletVersion": host.kubelet_version.as_deref().unwrap_or(node.kubelet_version),
            "kubeProxyVersion": host.kubelet_version.as_deref().unwrap_or(node.kubelet_version),
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }})
}

/// A heartbeat: the Ready condition's `lastHeartbeatTime`.
pub fn heartbeat(up: bool, now: &str) -> Value {
    json!({"status": {"conditions": [ready_condition(up, now, false)]}})
}

/// A new node Lease held by the node, owned by the Node.
pub fn lease(node: &str, node_uid: &str, now: MicroTime) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node.to_owned()),
            namespace: Some(LEASE_NAMESPACE.to_owned()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".to_owned(),
                kind: "Node".to_owned(),
                name: node.to_owned(),
                uid: node_uid.to_owned(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.to_owned()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(now),
            ..LeaseSpec::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hosts::{HostFacts, HostFaults, Power};

    #[test]
    fn the_node_reports_its_host() {
        let host = HostState {
            name: "n1".into(),
            facts: HostFacts { os_image: "v2".into(), boot_id: "b2".into(), staged_image: None, components_hash: None },
            power: Power::Rebooting,
            boots: 2,
            faults: HostFaults::default(),
            kubelet_version: None,
            kubelet_restarting: false,
        };
        let identity = NodeIdentity { name: "n1", internal_ip: "172.16.0.1", kubelet_version: "v1.33.0" };
        let status = full_status(&identity, &host, "2026-01-01T00:00:00Z", true, true);
        assert_eq!(status["status"]["nodeInfo"]["bootID"], "b2");
        assert_eq!(status["status"]["nodeInfo"]["osImage"], "v2");
        let ready = &status["status"]["conditions"][3];
        assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("KubeletNotReady")));
        assert_eq!(ready["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert!(heartbeat(true, "t")["status"]["conditions"][0].get("lastTransitionTime").is_none());
    }

    #[test]
    fn a_restarting_kubelet_is_not_ready_and_then_reports_the_version_kubeadm_installed() {
        let mut host = HostState {
            name: "n1".into(),
            facts: HostFacts { os_image: "v2".into(), boot_id: "b2".into(), staged_image: None, components_hash: None },
            power: Power::Up,
            boots: 2,
            faults: HostFaults::default(),
            kubelet_version: None,
            kubelet_restarting: false,
        };
        let identity = NodeIdentity { name: "n1", internal_ip: "172.16.0.1", kubelet_version: "v1.33.0" };
        let status = |host: &HostState| full_status(&identity, host, "2026-01-01T00:00:00Z", false, true);
        assert_eq!(status(&host)["status"]["nodeInfo"]["kubeletVersion"], "v1.33.0");
        assert_eq!(status(&host)["status"]["conditions"][3]["status"], "True");
        host.kubelet_restarting = true;
        assert_eq!(status(&host)["status"]["conditions"][3]["status"], "False");
        host.kubelet_restarting = false;
        host.kubelet_version = Some("v1.34.1".into());
        assert_eq!(status(&host)["status"]["nodeInfo"]["kubeletVersion"], "v1.34.1");
        assert_eq!(status(&host)["status"]["conditions"][3]["status"], "True");
    }
}
