//! The one Job per (NodeOp, node): its fixed name, its spec, and its state as the decision reads it.

use super::decide::{JobState, Preflight};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;
use shared::crd::nodeop::{DEFAULT_BACKOFF_LIMIT, DEFAULT_IMAGE, DEFAULT_PREFLIGHT_DEADLINE_SECONDS, NodeOp};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Label of every Job a NodeOp runs (and the selector of the controller's Job watch).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "update-operator-nodeop";
/// Labels naming the NodeOp and the node of a Job (as the Kairos operator labels them).
pub const NODEOP_LABEL: &str = "operator.kairos.io/nodeop";
pub const NODE_LABEL: &str = "operator.kairos.io/node";
/// Label of a preflight check's Job and pod (and the selector of the controller's watch of their pods).
pub const PREFLIGHT_LABEL: &str = "operator.kairos.io/preflight";
/// The container of a preflight check, whose termination message is its verdict.
pub const PREFLIGHT_CONTAINER: &str = "preflight";
/// Longest object name that is also a valid label value (a Job's name goes into its pods' `job-name` label).
const MAX_NAME: usize = 63;

/// The name of the Job of NodeOp `nodeop` on `node`: `<nodeop>-<node>`, or, when longer than 63 characters, its
/// first 50 characters and a hash of the whole, so that it is the same for every controller that computes it.
pub fn job_name(nodeop: &str, node: &str) -> String {
    let name = format!("{nodeop}-{node}");
    if name.len() <= MAX_NAME {
        return name;
    }
    // FNV-1a: stable across processes and versions, unlike std's hasher.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let mut prefix: String = name.chars().take(MAX_NAME - 13).collect();
    while prefix.ends_with(['-', '.']) {
        prefix.pop();
    }
    format!("{prefix}-{:012x}", hash >> 16)
}

/// The controller reference from a Job (or a NodeOp) to its owner: deleting the owner deletes it.
pub fn owner_reference(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// The Job of `op` on `node`: its pod pinned to the node (`nodeName`, every taint tolerated), privileged, the
/// host's root filesystem at `hostMountPath`, the NodeOp's image, command, pull secrets and `backoffLimit`,
/// never restarted in place, owned by the NodeOp. `None` when the NodeOp has no uid (never stored).
pub fn build(op: &NodeOp, node: &str) -> Option<Job> {
    let spec = &op.spec;
    let container = json!({
        "name": "nodeop",
        "image": image(spec.image.as_deref()),
        "command": spec.command,
        "securityContext": {"privileged": true},
        "volumeMounts": [{"name": "host-root", "mountPath": spec.host_mount_path}],
    });
    let name = job_name(op.metadata.name.as_deref()?, node);
    pinned_job(op, node, name, BTreeMap::new(), json!({"restartPolicy": "Never"}), container)
}

/// The preflight check of `op` on `node` (`None` without `spec.preflight` or a uid): a Job named by
/// [`preflight_name`] and labelled [`PREFLIGHT_LABEL`], its pod pinned to the node as the operation's, but not
/// privileged and with the host's root filesystem mounted read-only at `hostMountPath` (also in `HOST_DIR`),
/// the preflight's command and image (default the NodeOp's), restarted in place on failure within
/// `activeDeadlineSeconds` (default 120) and `backoffLimit`. Its container's termination message is the verdict.
pub fn build_preflight(op: &NodeOp, node: &str) -> Option<Job> {
    let spec = &op.spec;
    let preflight = spec.preflight.as_ref()?;
    let container = json!({
        "name": PREFLIGHT_CONTAINER,
        "image": image(preflight.image.as_deref().filter(|i| !i.is_empty()).or(spec.image.as_deref())),
        "command": preflight.command,
        "terminationMessagePolicy": "File",
        "env": [{"name": "HOST_DIR", "value": spec.host_mount_path}],
        "volumeMounts": [{"name": "host-root", "mountPath": spec.host_mount_path, "readOnly": true}],
    });
    let deadline = preflight.active_deadline_seconds.unwrap_or(DEFAULT_PREFLIGHT_DEADLINE_SECONDS);
    let labels = BTreeMap::from([(PREFLIGHT_LABEL, "true".to_owned())]);
    let pod = json!({"restartPolicy": "OnFailure", "activeDeadlineSeconds": deadline});
    pinned_job(op, node, preflight_name(op.metadata.name.as_deref()?, node), labels, pod, container)
}

/// The name of the preflight Job of NodeOp `nodeop` on `node` (as [`job_name`], of `<nodeop>-preflight`).
pub fn preflight_name(nodeop: &str, node: &str) -> String {
    job_name(&format!("{nodeop}-preflight"), node)
}

fn image(image: Option<&str>) -> &str {
    image.filter(|i| !i.is_empty()).unwrap_or(DEFAULT_IMAGE)
}

/// A Job of `op` named `name` whose one pod runs `container` on `node` (every taint tolerated, the host's root
/// filesystem as the `host-root` volume), with `pod` merged into the pod spec and `labels` beside the NodeOp's.
fn pinned_job(
    op: &NodeOp,
    node: &str,
    name: String,
    labels: BTreeMap<&str, String>,
    pod: serde_json::Value,
    container: serde_json::Value,
) -> Option<Job> {
    let nodeop = op.metadata.name.as_deref()?;
    let uid = op.metadata.uid.as_deref()?;
    let spec = &op.spec;
    let owner = owner_reference("operator.kairos.io/v1alpha1", "NodeOp", nodeop, uid);
    let mut job_labels = json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE, NODEOP_LABEL: label_value(nodeop),
                                NODE_LABEL: label_value(node)});
    let mut pod_labels = json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE});
    for (key, value) in labels {
        job_labels[key] = json!(value);
        pod_labels[key] = json!(value);
    }
    let mut pod_spec = json!({
        "nodeName": node,
        "tolerations": [{"operator": "Exists"}],
        "imagePullSecrets": spec.image_pull_secrets,
        "containers": [container],
        "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
    });
    for (key, value) in pod.as_object().into_iter().flatten() {
        pod_spec[key] = value.clone();
    }
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": op.metadata.namespace,
            "labels": job_labels,
            "ownerReferences": [owner],
        },
        "spec": {
            "backoffLimit": spec.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT),
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    });
    serde_json::from_value(job).ok()
}

/// `value` if it is a valid label value, else its first 63 characters trimmed to end alphanumeric.
fn label_value(value: &str) -> String {
    let mut v: String = value.chars().take(MAX_NAME).collect();
    while v.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.pop();
    }
    v
}

/// What `job` says of the node's operation, for the NodeOp of uid `owner`.
pub fn state(job: &Job, owner: &str) -> JobState {
    let owned = job.metadata.owner_references.iter().flatten().any(|r| r.uid == owner && r.controller == Some(true));
    if !owned {
        return JobState::Foreign;
    }
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    let holds = |type_: &str| conditions.into_iter().flatten().find(|c| c.type_ == type_ && c.status == "True");
    if holds("Complete").is_some() {
        return JobState::Succeeded;
    }
    if let Some(failed) = holds("Failed") {
        let reason = failed.reason.clone().unwrap_or_default();
        let message = failed.message.clone().unwrap_or_default();
        return JobState::Failed { message: format!("{reason}: {message}").trim_end_matches(": ").to_owned() };
    }
    JobState::Active
}

/// How long the pod of a preflight check whose Job completed may stay unseen before its verdict counts as lost.
const VERDICT_GRACE: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// What the preflight check `job` says for the NodeOp of uid `owner`, its verdict read from its succeeded pod
/// among `pods`: no termination message (or only whitespace) proceeds, a message skips the node.
pub fn preflight_state(job: &Job, owner: &str, pods: &[Arc<Pod>], now: jiff::Timestamp) -> Preflight {
    match state(job, owner) {
        JobState::Foreign => Preflight::Foreign,
        JobState::Active => Preflight::Running,
        JobState::Failed { message } => Preflight::Failed { message },
        JobState::Succeeded => {
            let uid = job.metadata.uid.as_deref().unwrap_or_default();
            let verdict = pods
                .iter()
                .filter(|pod| pod.metadata.owner_references.iter().flatten().any(|r| r.uid == uid))
                .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
                .find_map(|pod| {
                    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
                    let container = statuses.iter().find(|c| c.name == PREFLIGHT_CONTAINER)?;
                    let terminated = container.state.as_ref()?.terminated.as_ref()?;
                    Some(terminated.message.clone().unwrap_or_default())
                });
            match verdict {
                Some(message) if message.trim().is_empty() => Preflight::Proceed,
                Some(message) => Preflight::Skip { message: message.trim().to_owned() },
                None => {
                    let completed = job.status.as_ref().and_then(|s| s.completion_time.as_ref()).map(|t| t.0);
                    match completed.and_then(|t| t.checked_add(VERDICT_GRACE).ok()) {
                        Some(lost) if now >= lost => Preflight::Failed {
                            message: "the check's Job completed but its pod is gone: its verdict cannot be read".into(),
                        },
                        _ => Preflight::Running,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(spec: serde_json::Value) -> NodeOp {
        serde_json::from_value(json!({
            "apiVersion": "operator.kairos.io/v1alpha1", "kind": "NodeOp",
            "metadata": {"name": "op", "namespace": "ns", "uid": "u1"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn job_names_are_fixed_per_nodeop_and_node_and_fit_a_label() {
        assert_eq!(job_name("op", "worker-1"), "op-worker-1");
        let long = job_name(&"x".repeat(40), &"node-".repeat(10));
        assert_eq!(long.len(), 63);
        assert_eq!(long, job_name(&"x".repeat(40), &"node-".repeat(10)));
        assert_ne!(long, job_name(&"x".repeat(40), &"node-".repeat(11)));
    }

    #[test]
    fn the_job_is_pinned_privileged_with_the_host_root_and_owned_by_the_nodeop() {
        let job = build(
            &op(json!({"command": ["sh", "-c", "true"], "hostMountPath": "/rootfs", "backoffLimit": 2,
                       "imagePullSecrets": [{"name": "regcred"}]})),
            "worker-1",
        )
        .unwrap();
        let value = serde_json::to_value(&job).unwrap();
        let pod = &value["spec"]["template"]["spec"];
        assert_eq!(value["metadata"]["name"], "op-worker-1");
        assert_eq!(value["spec"]["backoffLimit"], 2);
        assert_eq!(pod["nodeName"], "worker-1");
        assert_eq!(pod["restartPolicy"], "Never");
        assert_eq!(pod["imagePullSecrets"][0]["name"], "regcred");
        assert_eq!(pod["containers"][0]["image"], DEFAULT_IMAGE);
        assert_eq!(pod["containers"][0]["securityContext"]["privileged"], true);
        assert_eq!(pod["containers"][0]["volumeMounts"][0]["mountPath"], "/rootfs");
        assert_eq!(pod["volumes"][0]["hostPath"]["path"], "/");
        assert_eq!(value["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(state(&job, "u1"), JobState::Active);
        assert_eq!(state(&job, "someone-else"), JobState::Foreign);
        let defaults = serde_json::to_value(build(&op(json!({"command": ["true"]})), "n").unwrap()).unwrap();
        assert_eq!(defaults["spec"]["backoffLimit"], 6);
        assert_eq!(defaults["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"], "/host");
    }

    #[test]
    fn a_finished_job_says_how_it_finished() {
        let mut job = build(&op(json!({"command": ["true"]})), "n").unwrap();
        let condition = |type_: &str, reason: &str| {
            serde_json::from_value(json!({"type": type_, "status": "True", "reason": reason, "message": "m"})).unwrap()
        };
        job.status = Some(k8s_openapi::api::batch::v1::JobStatus {
            conditions: Some(vec![condition("Failed", "BackoffLimitExceeded")]),
            ..Default::default()
        });
        assert_eq!(state(&job, "u1"), JobState::Failed { message: "BackoffLimitExceeded: m".into() });
        job.status = Some(k8s_openapi::api::batch::v1::JobStatus {
            conditions: Some(vec![condition("Complete", "CompletionsReached")]),
            ..Default::default()
        });
        assert_eq!(state(&job, "u1"), JobState::Succeeded);
    }

    #[test]
    fn the_preflight_check_is_a_read_only_job_on_the_node_and_its_pods_message_is_the_verdict() {
        let nodeop = op(json!({"command": ["true"], "image": "op:1", "imagePullSecrets": [{"name": "regcred"}],
                               "preflight": {"command": ["sh", "-c", "check"]}}));
        let mut job = build_preflight(&nodeop, "worker-1").unwrap();
        let value = serde_json::to_value(&job).unwrap();
        let pod = &value["spec"]["template"]["spec"];
        assert_eq!(value["metadata"]["name"], "op-preflight-worker-1");
        assert_eq!(value["metadata"]["labels"][PREFLIGHT_LABEL], "true");
        assert_eq!(value["spec"]["template"]["metadata"]["labels"][PREFLIGHT_LABEL], "true");
        assert_eq!(pod["nodeName"], "worker-1");
        assert_eq!(pod["restartPolicy"], "OnFailure");
        assert_eq!(pod["activeDeadlineSeconds"], 120);
        assert_eq!(pod["imagePullSecrets"][0]["name"], "regcred");
        let container = &pod["containers"][0];
        assert_eq!(container["name"], PREFLIGHT_CONTAINER);
        assert_eq!(container["image"], "op:1", "the NodeOp's image by default");
        assert_eq!(container["command"], json!(["sh", "-c", "check"]));
        assert_eq!(container["securityContext"], serde_json::Value::Null, "not privileged");
        assert_eq!(container["volumeMounts"][0], json!({"name": "host-root", "mountPath": "/host", "readOnly": true}));
        assert_eq!(container["env"][0], json!({"name": "HOST_DIR", "value": "/host"}));
        assert!(build_preflight(&op(json!({"command": ["true"]})), "n").is_none(), "no preflight, no check");
        let own = op(
            json!({"command": ["true"], "preflight": {"command": ["c"], "image": "check:2", "activeDeadlineSeconds": 30}}),
        );
        let value = serde_json::to_value(build_preflight(&own, "n").unwrap()).unwrap();
        assert_eq!(value["spec"]["template"]["spec"]["activeDeadlineSeconds"], 30);
        assert_eq!(value["spec"]["template"]["spec"]["containers"][0]["image"], "check:2");

        // The verdict.
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        job.metadata.uid = Some("job-uid".into());
        assert_eq!(preflight_state(&job, "u1", &[], now), Preflight::Running);
        assert_eq!(preflight_state(&job, "other", &[], now), Preflight::Foreign);
        let completed = |job: &mut Job, at: jiff::Timestamp| {
            job.status = Some(
                serde_json::from_value(json!({
                    "conditions": [{"type": "Complete", "status": "True"}],
                    "completionTime": at.to_string(),
                }))
                .unwrap(),
            );
        };
        completed(&mut job, now);
        let pod =
            |message: Option<&str>| {
                let terminated = match message {
                    Some(m) => json!({"exitCode": 0, "message": m}),
                    None => json!({"exitCode": 0}),
                };
                Arc::new(serde_json::from_value::<Pod>(json!({
                "metadata": {"name": "p", "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                                                "uid": "job-uid", "controller": true}]},
                "status": {"phase": "Succeeded", "containerStatuses": [{"name": PREFLIGHT_CONTAINER, "image": "i",
                    "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": terminated}}]}
            })).unwrap())
            };
        assert_eq!(preflight_state(&job, "u1", &[pod(None)], now), Preflight::Proceed);
        assert_eq!(preflight_state(&job, "u1", &[pod(Some("\n"))], now), Preflight::Proceed);
        assert_eq!(
            preflight_state(&job, "u1", &[pod(Some("already on v2\n"))], now),
            Preflight::Skip { message: "already on v2".into() }
        );
        // Completed, its pod not seen: awaited for a while, then a failure.
        assert_eq!(preflight_state(&job, "u1", &[], now), Preflight::Running);
        let later = now.checked_add(jiff::SignedDuration::from_secs(31)).unwrap();
        assert!(matches!(preflight_state(&job, "u1", &[], later), Preflight::Failed { .. }));
    }
}
