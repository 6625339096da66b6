//! What the workload controllers share: pods from templates, controller references, template hashes and the
//! order in which surplus pods go.

use super::objects::{Meta, PodInfo, PodPhase};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The alphabet upstream's `rand.SafeEncodeString` maps hash digits to (no vowels, nothing confusable).
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A short, stable hash of a pod template, as the `pod-template-hash` and `controller-revision-hash` labels
/// carry it: FNV-1a (32 bits) over the template's JSON, its decimal digits written in the safe alphabet.
pub fn template_hash(template: &PodTemplateSpec, collision_count: i32) -> String {
    let mut bytes = serde_json::to_vec(template).unwrap_or_default();
    if collision_count > 0 {
        bytes.extend_from_slice(&collision_count.to_le_bytes());
    }
    let mut hash: u32 = 0x811c_9dc5;
    for byte in bytes {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.to_string().bytes().map(|digit| SAFE_ALPHABET[usize::from(digit - b'0')] as char).collect()
}

/// A controller reference (`controller: true`, `blockOwnerDeletion: true`) to the object with `meta`.
pub fn controller_ref(api_version: &str, kind: &str, meta: &Meta) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        name: meta.name.to_string(),
        uid: meta.uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Where a pod made from a template goes and what it is called.
pub struct PodPlacement {
    /// `metadata.name`, or `None` to use `generate_name`.
    pub name: Option<String>,
    /// `metadata.generateName`.
    pub generate_name: Option<String>,
    /// Labels added to the template's.
    pub extra_labels: BTreeMap<String, String>,
    /// `spec.nodeName` (DaemonSet pods come bound).
    pub node_name: Option<String>,
}

/// A pod of `template`, controlled by `owner`.
pub fn pod_from_template(template: &PodTemplateSpec, owner: OwnerReference, placement: PodPlacement) -> Pod {
    let template_meta = template.metadata.clone().unwrap_or_default();
    let mut labels = template_meta.labels.unwrap_or_default();
    labels.extend(placement.extra_labels);
    let mut spec = template.spec.clone().unwrap_or_default();
    if placement.node_name.is_some() {
        spec.node_name = placement.node_name;
    }
    Pod {
        metadata: ObjectMeta {
            name: placement.name,
            generate_name: placement.generate_name,
            labels: Some(labels),
            annotations: template_meta.annotations,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Orders pods so that the ones to delete first come first (upstream `ActivePodsWithRanks`, simplified):
/// unscheduled before scheduled, Pending before Unknown before Running, not Ready before Ready, the most
/// recently Ready before the longer Ready, the newest before the older.
pub fn sort_for_deletion(pods: &mut [Arc<PodInfo>]) {
    let phase_rank = |phase: PodPhase| match phase {
        PodPhase::Pending => 0,
        PodPhase::Unknown => 1,
        PodPhase::Running => 2,
        PodPhase::Succeeded | PodPhase::Failed => 3,
    };
    pods.sort_by_key(|pod| {
        (
            pod.node_name.is_some(),
            phase_rank(pod.phase),
            pod.ready,
            Reverse(pod.ready_since),
            Reverse(pod.meta.created),
            pod.meta.name.clone(),
        )
    });
}

/// True when every key of `template_labels` is on the pod with the same value.
pub fn fully_labeled(pod: &Meta, template_labels: Option<&BTreeMap<String, String>>) -> bool {
    template_labels.into_iter().flatten().all(|(k, v)| pod.label(k) == Some(v.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::objects::Cached;
    use serde_json::json;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": image}]}}))
        .unwrap()
    }

    #[test]
    fn template_hashes_are_stable_and_differ_between_templates() {
        let a = template_hash(&template("a:1"), 0);
        assert_eq!(a, template_hash(&template("a:1"), 0));
        assert_ne!(a, template_hash(&template("a:2"), 0));
        assert_ne!(a, template_hash(&template("a:1"), 1));
        assert!(a.bytes().all(|b| SAFE_ALPHABET.contains(&b)));
    }

    #[test]
    fn pods_from_templates_carry_the_owner_and_placement() {
        let owner_meta = Meta::parse(&json!({"metadata": {"name": "web", "namespace": "d", "uid": "u1"}})).unwrap();
        let owner = controller_ref("apps/v1", "ReplicaSet", &owner_meta);
        let placement = PodPlacement {
            name: None,
            generate_name: Some("web-".into()),
            extra_labels: BTreeMap::from([("pod-template-hash".to_owned(), "h".to_owned())]),
            node_name: Some("n1".into()),
        };
        let pod = pod_from_template(&template("a:1"), owner, placement);
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels["pod-template-hash"], "h");
        assert_eq!(pod.metadata.owner_references.unwrap()[0].controller, Some(true));
        assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("n1"));
    }

    #[test]
    fn unscheduled_and_unready_pods_go_first() {
        let pod = |name: &str, node: Option<&str>, phase: &str, ready: &str| {
            let mut value = json!({"metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {}, "status": {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}});
            if let Some(node) = node {
                value["spec"]["nodeName"] = json!(node);
            }
            Arc::new(PodInfo::parse(&value).unwrap())
        };
        let mut pods = vec![
            pod("running-ready", Some("n"), "Running", "True"),
            pod("running-unready", Some("n"), "Running", "False"),
            pod("pending", Some("n"), "Pending", "False"),
            pod("unscheduled", None, "Pending", "False"),
        ];
        sort_for_deletion(&mut pods);
        let names: Vec<&str> = pods.iter().map(|p| &*p.meta.name).collect();
        assert_eq!(names, vec!["unscheduled", "pending", "running-unready", "running-ready"]);
    }
}
