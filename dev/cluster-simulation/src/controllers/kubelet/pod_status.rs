//! The pod statuses a kubelet writes: started (Running and Ready), stopped by a host going down, and the ends of
//! run-to-completion pods (Succeeded, Failed, or a failed container restarted in place).

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, HostIP, Pod, PodCondition, PodIP,
    PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Sets a pod condition; its transition time moves only when its status does.
fn set_condition(conditions: &mut Vec<PodCondition>, type_: &str, ok: bool, reason: Option<&str>, now: &Time) {
    let status = if ok { "True" } else { "False" }.to_owned();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = Some(now.clone());
            }
            existing.status = status;
            existing.reason = reason.map(str::to_owned);
        }
        None => conditions.push(PodCondition {
            type_: type_.to_owned(),
            status,
            reason: reason.map(str::to_owned),
            last_transition_time: Some(now.clone()),
            ..PodCondition::default()
        }),
    }
}

/// A short stable hex digest for simulated image and container IDs.
fn digest(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Where a started pod runs.
pub struct Addresses<'a> {
    /// The node's InternalIP.
    pub host_ip: &'a str,
    /// The pod's IP (kept when the pod already has one).
    pub pod_ip: &'a str,
    /// The host's boot, part of the container IDs.
    pub boot_id: &'a str,
}

/// The status of `pod` once its containers run: phase Running, every condition True, a status per container
/// (restart count up by one for containers that ran before, as after a reboot).
pub fn started(pod: &Pod, addresses: &Addresses<'_>, now: &Time) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    status.phase = Some("Running".to_owned());
    let mut conditions = status.conditions.take().unwrap_or_default();
    for type_ in ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        set_condition(&mut conditions, type_, true, None, now);
    }
    status.conditions = Some(conditions);
    status.host_ip = Some(addresses.host_ip.to_owned());
    status.host_ips = Some(vec![HostIP { ip: addresses.host_ip.to_owned() }]);
    let pod_ip = status.pod_ip.clone().unwrap_or_else(|| addresses.pod_ip.to_owned());
    status.pod_ip = Some(pod_ip.clone());
    status.pod_ips = Some(vec![PodIP { ip: pod_ip }]);
    status.start_time.get_or_insert_with(|| now.clone());
    let previous = status.container_statuses.take().unwrap_or_default();
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    status.container_statuses = Some(
        containers
            .iter()
            .map(|container| {
                let before = previous.iter().find(|s| s.name == container.name);
                let image = container.image.clone().unwrap_or_default();
                ContainerStatus {
                    name: container.name.clone(),
                    image_id: format!("{image}@sha256:{}", digest(&image).repeat(4)),
                    image,
                    container_id: Some(format!(
                        "containerd://{}",
                        digest(&format!(
                            "{}/{}/{}",
                            addresses.boot_id,
                            pod.metadata.name.as_deref().unwrap_or(""),
                            container.name
                        ))
                        .repeat(4)
                    )),
                    ready: true,
                    started: Some(true),
                    restart_count: before.map_or(0, |b| {
                        b.restart_count + i32::from(b.state.as_ref().is_some_and(|s| s.terminated.is_some()))
                    }),
                    last_state: before.and_then(|b| b.state.clone().filter(|s| s.terminated.is_some())),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning { started_at: Some(now.clone()) }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }
            })
            .collect(),
    );
    status
}

/// The status of `pod` while its host is down: not Ready, its containers terminated.
pub fn stopped(pod: &Pod, now: &Time) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_condition(&mut conditions, "ContainersReady", false, Some("ContainersNotReady"), now);
    set_condition(&mut conditions, "Ready", false, Some("ContainersNotReady"), now);
    set_condition(&mut conditions, "PodReadyToStartContainers", false, None, now);
    status.conditions = Some(conditions);
    if let Some(statuses) = status.container_statuses.as_mut() {
        for container in statuses {
            container.ready = false;
            container.started = Some(false);
            let started_at =
                container.state.as_ref().and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.clone());
            container.state = Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 255,
                    reason: Some("Unknown".to_owned()),
                    message: Some("the host went down".to_owned()),
                    started_at,
                    finished_at: Some(now.clone()),
                    container_id: container.container_id.clone(),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            });
        }
    }
    status
}

/// How a run-to-completion pod's containers exited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// The exit code (0 for success).
    pub code: i32,
    /// The termination message (a success may write one too: a preflight check that skips its node).
    pub message: Option<String>,
}

impl Exit {
    /// Exit code 0.
    pub fn success() -> Exit {
        Exit { code: 0, message: None }
    }

    fn reason(&self) -> &'static str {
        if self.code == 0 { "Completed" } else { "Error" }
    }
}

/// Every container of `pod` terminated with `exit` (keeping its start time and ID), as the kubelet reports them.
fn terminate_containers(status: &mut PodStatus, exit: &Exit, now: &Time) {
    for container in status.container_statuses.iter_mut().flatten() {
        let started_at = container.state.as_ref().and_then(|s| s.running.as_ref()).and_then(|r| r.started_at.clone());
        container.ready = false;
        container.started = Some(false);
        container.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: exit.code,
                reason: Some(exit.reason().to_owned()),
                message: exit.message.clone(),
                started_at,
                finished_at: Some(now.clone()),
                container_id: container.container_id.clone(),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        });
    }
}

/// The status of a run-to-completion pod whose containers exited with `exit`: phase Succeeded (exit code 0) or
/// Failed, not Ready (reason `PodCompleted` or `PodFailed`), every container terminated.
pub fn finished(pod: &Pod, exit: &Exit, now: &Time) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let (phase, reason) = if exit.code == 0 { ("Succeeded", "PodCompleted") } else { ("Failed", "PodFailed") };
    status.phase = Some(phase.to_owned());
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_condition(&mut conditions, "PodReadyToStartContainers", false, None, now);
    set_condition(&mut conditions, "Initialized", true, Some(reason), now);
    set_condition(&mut conditions, "Ready", false, Some(reason), now);
    set_condition(&mut conditions, "ContainersReady", false, Some(reason), now);
    status.conditions = Some(conditions);
    terminate_containers(&mut status, exit, now);
    status
}

/// The status of an `OnFailure` pod whose containers failed with `exit` and were started again at once: still
/// Running, each container's restart count up by one and the failure in its `lastState`.
pub fn restarted(pod: &Pod, exit: &Exit, now: &Time) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let mut failed = status.clone();
    terminate_containers(&mut failed, exit, now);
    let last_states: Vec<Option<ContainerState>> =
        failed.container_statuses.iter().flatten().map(|c| c.state.clone()).collect();
    for (container, last) in status.container_statuses.iter_mut().flatten().zip(last_states) {
        container.restart_count += 1;
        container.last_state = last;
        container.state = Some(ContainerState {
            running: Some(ContainerStateRunning { started_at: Some(now.clone()) }),
            ..ContainerState::default()
        });
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn time(text: &str) -> Time {
        Time(text.parse().unwrap())
    }

    #[test]
    fn a_started_pod_is_running_and_ready_and_keeps_foreign_conditions() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app", "image": "pause:3"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "DisruptionTarget", "status": "True"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
        .unwrap();
        let addresses = Addresses { host_ip: "172.16.0.1", pod_ip: "10.0.0.2", boot_id: "b1" };
        let status = started(&pod, &addresses, &time("2026-01-01T00:01:00Z"));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let conditions = status.conditions.unwrap();
        let find = |t: &str| conditions.iter().find(|c| c.type_ == t).unwrap();
        assert_eq!(find("Ready").status, "True");
        assert_eq!(find("DisruptionTarget").status, "True");
        assert_eq!(find("PodScheduled").last_transition_time, Some(time("2026-01-01T00:00:00Z")));
        assert_eq!(status.pod_ip.as_deref(), Some("10.0.0.2"));
        let containers = status.container_statuses.unwrap();
        assert!(containers[0].ready && containers[0].restart_count == 0);
    }

    #[test]
    fn a_pod_restarted_after_a_host_went_down_counts_a_restart() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app", "image": "pause:3"}]}}))
        .unwrap();
        let addresses = Addresses { host_ip: "172.16.0.1", pod_ip: "10.0.0.2", boot_id: "b1" };
        let mut pod = pod;
        pod.status = Some(started(&pod, &addresses, &time("2026-01-01T00:01:00Z")));
        pod.status = Some(stopped(&pod, &time("2026-01-01T00:02:00Z")));
        let ready = pod.status.as_ref().unwrap().conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready");
        assert_eq!(ready.unwrap().status, "False");
        let addresses = Addresses { host_ip: "172.16.0.1", pod_ip: "10.0.0.9", boot_id: "b2" };
        let again = started(&pod, &addresses, &time("2026-01-01T00:03:00Z"));
        let container = &again.container_statuses.unwrap()[0];
        assert_eq!(container.restart_count, 1);
        assert!(container.last_state.as_ref().unwrap().terminated.is_some());
        assert_eq!(again.pod_ip.as_deref(), Some("10.0.0.2"));
    }

    fn running() -> Pod {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "job-x"},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}))
        .unwrap();
        let addresses = Addresses { host_ip: "172.16.0.1", pod_ip: "10.0.0.2", boot_id: "b1" };
        let status = started(&pod, &addresses, &time("2026-01-01T00:01:00Z"));
        Pod { status: Some(status), ..pod }
    }

    #[test]
    fn a_finished_pod_reports_its_containers_as_the_kubelet_does() {
        let pod = running();
        let done = finished(&pod, &Exit::success(), &time("2026-01-01T00:02:00Z"));
        assert_eq!(done.phase.as_deref(), Some("Succeeded"));
        let ready = done.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "Ready").unwrap().clone();
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("False", Some("PodCompleted")));
        let container = &done.container_statuses.unwrap()[0];
        let terminated = container.state.as_ref().unwrap().terminated.clone().unwrap();
        assert_eq!((terminated.exit_code, terminated.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(terminated.started_at, Some(time("2026-01-01T00:01:00Z")));
        assert_eq!(terminated.finished_at, Some(time("2026-01-01T00:02:00Z")));
        assert!(!container.ready);
        let exit = Exit { code: 3, message: Some("disk full".into()) };
        let failed = finished(&pod, &exit, &time("2026-01-01T00:02:00Z"));
        assert_eq!(failed.phase.as_deref(), Some("Failed"));
        let terminated = failed.container_statuses.unwrap()[0].state.clone().unwrap().terminated.unwrap();
        assert_eq!(
            (terminated.exit_code, terminated.reason.as_deref(), terminated.message.as_deref()),
            (3, Some("Error"), Some("disk full"))
        );
    }

    #[test]
    fn an_on_failure_pod_restarts_its_failed_containers_in_place() {
        let pod = running();
        let exit = Exit { code: 1, message: Some("boom".into()) };
        let again = restarted(&pod, &exit, &time("2026-01-01T00:02:00Z"));
        assert_eq!(again.phase.as_deref(), Some("Running"));
        let container = &again.container_statuses.unwrap()[0];
        assert_eq!(container.restart_count, 1);
        assert_eq!(container.last_state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 1);
        assert!(container.state.as_ref().unwrap().running.is_some());
    }
}
