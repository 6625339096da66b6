//! The one Job per (NodeOp, node): its fixed name, its spec, and its state as the decision reads it.

use super::decide::JobState;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;
use shared::crd::nodeop::{DEFAULT_BACKOFF_LIMIT, DEFAULT_IMAGE, NodeOp};

/// Label of every Job a NodeOp runs (and the selector of the controller's Job watch).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "update-operator-nodeop";
/// Labels naming the NodeOp and the node of a Job (as the Kairos operator labels them).
pub const NODEOP_LABEL: &str = "operator.kairos.io/nodeop";
pub const NODE_LABEL: &str = "operator.kairos.io/node";
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
    let name = op.metadata.name.as_deref()?;
    let uid = op.metadata.uid.as_deref()?;
    let spec = &op.spec;
    let owner = owner_reference("operator.kairos.io/v1alpha1", "NodeOp", name, uid);
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(name, node),
            "namespace": op.metadata.namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, NODEOP_LABEL: label_value(name), NODE_LABEL: label_value(node)},
            "ownerReferences": [owner],
        },
        "spec": {
            "backoffLimit": spec.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT),
            "template": {
                "metadata": {"labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "tolerations": [{"operator": "Exists"}],
                    "imagePullSecrets": spec.image_pull_secrets,
                    "containers": [{
                        "name": "nodeop",
                        "image": spec.image.as_deref().filter(|i| !i.is_empty()).unwrap_or(DEFAULT_IMAGE),
                        "command": spec.command,
                        "securityContext": {"privileged": true},
                        "volumeMounts": [{"name": "host-root", "mountPath": spec.host_mount_path}],
                    }],
                    "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
                },
            },
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
}
