//! Which pods a drain evicts, skips or waits for: `kubectl drain`'s filters, as pure functions.
//!
//! The filters run in kubectl's order and the first one that does not say "evict" decides:
//! pods already terminating are waited for; DaemonSet pods and mirror pods are skipped (the
//! DaemonSet would recreate them and mirror pods are the kubelet's); finished pods are evicted
//! (deleted) without further checks; pods with emptyDir volumes need `deleteEmptyDirData`, and
//! pods no controller manages need `force`, or they block the drain.

use k8s_openapi::api::core::v1::Pod;
use shared::crd::DrainOptions;

/// The annotation the kubelet puts on mirror pods of static pods.
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What a drain does with one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodVerdict {
    /// Evict it through the Eviction API.
    Evict,
    /// Leave it on the node; the reason is for logs.
    Skip(&'static str),
    /// It is already going away; wait until it is gone.
    Wait,
    /// The drain cannot evict it under the drain options; the message says why and what to set.
    Block(String),
}

/// Classifies one pod of the node being drained.
pub fn classify(pod: &Pod, options: &DrainOptions) -> PodVerdict {
    let meta = &pod.metadata;
    let name = format!("{}/{}", meta.namespace.as_deref().unwrap_or(""), meta.name.as_deref().unwrap_or(""));
    if meta.deletion_timestamp.is_some() {
        return PodVerdict::Wait;
    }
    let controller = meta.owner_references.iter().flatten().find(|r| r.controller == Some(true));
    let finished = matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    if controller.is_some_and(|c| c.kind == "DaemonSet" && c.api_version.starts_with("apps/")) && !finished {
        return PodVerdict::Skip("managed by a DaemonSet");
    }
    if meta.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION)) {
        return PodVerdict::Skip("mirror pod of a static pod");
    }
    if finished {
        return PodVerdict::Evict;
    }
    let uses_empty_dir =
        pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).is_some_and(|v| v.iter().any(|v| v.empty_dir.is_some()));
    if uses_empty_dir && !options.delete_empty_dir_data {
        return PodVerdict::Block(format!(
            "pod {name} uses an emptyDir volume whose data a drain deletes; set spec.rollout.drain.deleteEmptyDirData to allow it"
        ));
    }
    if controller.is_none() && !options.force {
        return PodVerdict::Block(format!(
            "pod {name} is not managed by a controller and would not be recreated; set spec.rollout.drain.force to allow it"
        ));
    }
    PodVerdict::Evict
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "ns",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running"}
        });
        merge(&mut base, extra);
        serde_json::from_value(base).unwrap()
    }

    fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
        match (base, patch) {
            (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        b.remove(&k);
                    } else {
                        merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                    }
                }
            }
            (b, p) => *b = p,
        }
    }

    fn default() -> DrainOptions {
        DrainOptions::default()
    }

    #[test]
    fn replicated_pods_are_evicted() {
        assert_eq!(classify(&pod(json!({})), &default()), PodVerdict::Evict);
    }

    #[test]
    fn daemonset_and_mirror_pods_are_skipped() {
        let ds = pod(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}]}}),
        );
        assert_eq!(classify(&ds, &default()), PodVerdict::Skip("managed by a DaemonSet"));
        let mirror =
            pod(json!({"metadata": {"ownerReferences": null, "annotations": {"kubernetes.io/config.mirror": "x"}}}));
        assert_eq!(classify(&mirror, &default()), PodVerdict::Skip("mirror pod of a static pod"));
    }

    #[test]
    fn terminating_pods_are_waited_for() {
        let p = pod(json!({"metadata": {"deletionTimestamp": "2026-11-21T10:00:00Z"}}));
        assert_eq!(classify(&p, &default()), PodVerdict::Wait);
    }

    #[test]
    fn empty_dir_and_unreplicated_pods_block_unless_allowed() {
        let empty_dir = pod(json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}));
        assert!(matches!(classify(&empty_dir, &default()), PodVerdict::Block(m) if m.contains("deleteEmptyDirData")));
        let allowed = DrainOptions { delete_empty_dir_data: true, force: false };
        assert_eq!(classify(&empty_dir, &allowed), PodVerdict::Evict);
        let bare = pod(json!({"metadata": {"ownerReferences": null}}));
        assert!(
            matches!(classify(&bare, &default()), PodVerdict::Block(m) if m.contains("ns/p") && m.contains("force"))
        );
        assert_eq!(classify(&bare, &DrainOptions { force: true, ..default() }), PodVerdict::Evict);
    }

    #[test]
    fn finished_pods_are_evicted_whatever_they_use() {
        let done = pod(
            json!({"metadata": {"ownerReferences": null}, "spec": {"volumes": [{"name": "v", "emptyDir": {}}]}, "status": {"phase": "Succeeded"}}),
        );
        assert_eq!(classify(&done, &default()), PodVerdict::Evict);
        // A finished DaemonSet pod is not skipped either (kubectl deletes it).
        let ds_done = pod(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}]}, "status": {"phase": "Failed"}}),
        );
        assert_eq!(classify(&ds_done, &default()), PodVerdict::Evict);
    }
}
