//! Which pods a drain evicts, skips or waits for: `kubectl drain`'s filters, as pure functions.
//!
//! The filters run in kubectl's order and the first one that does not say "evict" decides:
//! pods already terminating are waited for; pods of an existing DaemonSet and mirror pods are
//! skipped (the DaemonSet would recreate them and mirror pods are the kubelet's), while a pod
//! whose DaemonSet is gone is an orphan that only `force` evicts; finished pods are evicted
//! (deleted) without further checks; pods with emptyDir volumes need `deleteEmptyDirData`, and
//! pods no controller manages need `force`, or they block the drain. Last, a running pod that
//! several PodDisruptionBudgets select blocks the drain: the Eviction API refuses to evict it
//! (HTTP 500), whatever the budgets allow. A drain that does not ignore DaemonSets
//! ([`classify_with`]) is blocked by the pods of an existing DaemonSet instead of skipping them.

use super::DrainSettings;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use shared::crd::DrainOptions;

/// The annotation the kubelet puts on mirror pods of static pods.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What a drain does with one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodVerdict {
    /// Evict it through the Eviction API.
    Evict,
    /// Leave it on the node; the reason is for logs.
    Skip(&'static str),
    /// It is going away; wait until it is gone. The message says which pod.
    Wait(String),
    /// Not enough is known to decide yet (a lookup is missing or failed); the message says what.
    Undecided(String),
    /// The drain cannot evict it under the drain options; the message says why and what to set.
    Block(String),
}

/// Whether the DaemonSet that controls a pod exists, as the drain looked it up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonSetLookup {
    /// The API server has it.
    Exists,
    /// The API server answered 404: the pod is an orphan nothing recreates.
    Missing,
    /// Not looked up yet, or the lookup failed (the message says how).
    Unknown(String),
}

/// What the drain found out about a pod's surroundings before classifying it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodContext {
    /// The lookup of the DaemonSet controlling the pod; None when no DaemonSet controls it.
    pub daemon_set: Option<DaemonSetLookup>,
    /// The names of the PodDisruptionBudgets that select the pod, when they were listed.
    pub budgets: Option<Vec<String>>,
}

/// The DaemonSet controlling `pod`, as kubectl recognizes it (controller reference to an
/// `apps/v1` `DaemonSet`).
pub fn daemon_set_of(pod: &Pod) -> Option<&OwnerReference> {
    controller_of(pod).filter(|c| c.kind == "DaemonSet" && c.api_version == "apps/v1")
}

fn controller_of(pod: &Pod) -> Option<&OwnerReference> {
    pod.metadata.owner_references.iter().flatten().find(|r| r.controller == Some(true))
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

/// `namespace/name` of a pod, for messages.
pub fn pod_name(pod: &Pod) -> String {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""))
}

/// Classifies one pod of the node being drained.
pub fn classify(pod: &Pod, options: &DrainOptions, context: &PodContext) -> PodVerdict {
    let meta = &pod.metadata;
    let name = pod_name(pod);
    if meta.deletion_timestamp.is_some() {
        return PodVerdict::Wait(format!("pod {name} is terminating"));
    }
    let finished = matches!(phase(pod), Some("Succeeded" | "Failed"));
    if let Some(daemon_set) = daemon_set_of(pod).filter(|_| !finished) {
        let owner = &daemon_set.name;
        match &context.daemon_set {
            Some(DaemonSetLookup::Exists) => return PodVerdict::Skip("managed by a DaemonSet"),
            Some(DaemonSetLookup::Missing) if options.force => {}
            Some(DaemonSetLookup::Missing) => {
                return PodVerdict::Block(format!(
                    "pod {name} belongs to DaemonSet {owner}, which no longer exists, so nothing would recreate it; set spec.rollout.drain.force to evict it"
                ));
            }
            Some(DaemonSetLookup::Unknown(why)) => {
                return PodVerdict::Undecided(format!(
                    "cannot tell whether DaemonSet {owner} of pod {name} exists: {why}"
                ));
            }
            None => return PodVerdict::Undecided(format!("DaemonSet {owner} of pod {name} not looked up yet")),
        }
    }
    if meta.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION)) {
        return PodVerdict::Skip("mirror pod of a static pod");
    }
    if finished {
        return PodVerdict::Evict;
    }
    if let Some(held) = crate::do_not_disrupt::pod_holds(pod) {
        // Scheduled after the look before the start (`crate::do_not_disrupt`): never evicted, waited for.
        return PodVerdict::Wait(format!("{held} and is never evicted; waiting until it is gone"));
    }
    let uses_empty_dir =
        pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).is_some_and(|v| v.iter().any(|v| v.empty_dir.is_some()));
    if uses_empty_dir && !options.delete_empty_dir_data {
        return PodVerdict::Block(format!(
            "pod {name} uses an emptyDir volume whose data a drain deletes; set spec.rollout.drain.deleteEmptyDirData to allow it"
        ));
    }
    if controller_of(pod).is_none() && !options.force {
        return PodVerdict::Block(format!(
            "pod {name} is not managed by a controller and would not be recreated; set spec.rollout.drain.force to allow it"
        ));
    }
    if budgets_matter(pod)
        && let Some(budgets) = context.budgets.as_ref().filter(|b| b.len() > 1)
    {
        return PodVerdict::Block(several_budgets(&name, budgets));
    }
    PodVerdict::Evict
}

/// [`classify`] for a drain with `settings`: without `ignore_daemon_sets`, a pod of an existing
/// DaemonSet blocks the drain, as `kubectl drain` without `--ignore-daemonsets` refuses
/// DaemonSet-managed pods (`daemonSetFilter`); finished ones are evicted as before.
pub fn classify_with(pod: &Pod, settings: &DrainSettings, context: &PodContext) -> PodVerdict {
    let verdict = classify(pod, &settings.options, context);
    match (&verdict, daemon_set_of(pod)) {
        (PodVerdict::Skip(_), Some(daemon_set)) if !settings.ignore_daemon_sets => PodVerdict::Block(format!(
            "pod {} is managed by DaemonSet {}; set spec.drainOptions.ignoreDaemonSets to leave DaemonSet pods in place",
            pod_name(pod),
            daemon_set.name
        )),
        _ => verdict,
    }
}

/// Whether the budgets that select `pod` decide its eviction: a running pod the drain may evict
/// (the Eviction API deletes pending, finished and terminating pods without a budget check, and
/// the drain leaves DaemonSet and mirror pods alone).
pub fn budgets_matter(pod: &Pod) -> bool {
    let mirror = pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION));
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase(pod), Some("Pending" | "Succeeded" | "Failed"))
        && daemon_set_of(pod).is_none()
        && !mirror
}

/// Why a pod under several PodDisruptionBudgets cannot be evicted.
pub fn several_budgets(pod: &str, budgets: &[String]) -> String {
    format!(
        "pod {pod} is selected by {} PodDisruptionBudgets ({}), and the Eviction API refuses to evict a pod that more than one selects; remove the overlap",
        budgets.len(),
        budgets.join(", ")
    )
}

/// The names of the budgets among `budgets` that select `pod`, as the Eviction API matches them:
/// same namespace, a null selector selects nothing, an empty one every pod, an invalid one none.
pub fn budgets_selecting(budgets: &[PodDisruptionBudget], pod: &Pod) -> Vec<String> {
    let mut names: Vec<String> = budgets
        .iter()
        .filter(|b| b.metadata.namespace == pod.metadata.namespace)
        .filter(|b| {
            let Some(selector) = b.spec.as_ref().and_then(|s| s.selector.as_ref()) else { return false };
            shared::selector::parse(selector).is_ok_and(|s| shared::selector::matches(&s, pod.metadata.labels.as_ref()))
        })
        .filter_map(|b| b.metadata.name.clone())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"},
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

    fn plain(p: &Pod, options: &DrainOptions) -> PodVerdict {
        classify(p, options, &PodContext::default())
    }

    fn daemon_set_pod(extra: serde_json::Value) -> Pod {
        let mut p = pod(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}]}}),
        );
        let mut value = serde_json::to_value(&p).unwrap();
        merge(&mut value, extra);
        p = serde_json::from_value(value).unwrap();
        p
    }

    fn with_daemon_set(lookup: DaemonSetLookup) -> PodContext {
        PodContext { daemon_set: Some(lookup), budgets: None }
    }

    #[test]
    fn a_do_not_disrupt_pod_is_never_evicted_even_with_force_and_waited_for_until_it_finishes() {
        let force = DrainOptions { force: true, ..default() };
        for key in ["update.edgeless.systems/do-not-disrupt", "karpenter.sh/do-not-disrupt"] {
            let marked = pod(json!({"metadata": {"annotations": {key: "true"}}}));
            match plain(&marked, &force) {
                PodVerdict::Wait(message) => {
                    assert!(message.starts_with(&format!("pod ns/p is annotated {key}=true")), "{message}")
                }
                other => panic!("{other:?}"),
            }
            // Finished, it runs no more: evicted as any finished pod.
            let finished = pod(json!({"metadata": {"annotations": {key: "true"}}, "status": {"phase": "Succeeded"}}));
            assert_eq!(plain(&finished, &force), PodVerdict::Evict);
        }
    }

    #[test]
    fn replicated_pods_are_evicted() {
        assert_eq!(plain(&pod(json!({})), &default()), PodVerdict::Evict);
    }

    #[test]
    fn pods_of_an_existing_daemonset_and_mirror_pods_are_skipped() {
        let ds = daemon_set_pod(json!({}));
        assert_eq!(daemon_set_of(&ds).map(|r| r.name.as_str()), Some("d"));
        assert_eq!(
            classify(&ds, &default(), &with_daemon_set(DaemonSetLookup::Exists)),
            PodVerdict::Skip("managed by a DaemonSet")
        );
        let mirror =
            pod(json!({"metadata": {"ownerReferences": null, "annotations": {"kubernetes.io/config.mirror": "x"}}}));
        assert_eq!(plain(&mirror, &default()), PodVerdict::Skip("mirror pod of a static pod"));
    }

    #[test]
    fn without_ignore_daemon_sets_a_daemonset_pod_blocks_as_kubectl_drain_does() {
        let ds = daemon_set_pod(json!({}));
        let exists = with_daemon_set(DaemonSetLookup::Exists);
        let refuse = DrainSettings { ignore_daemon_sets: false, ..DrainSettings::from(default()) };
        assert!(matches!(
            classify_with(&ds, &refuse, &exists),
            PodVerdict::Block(m) if m.contains("pod ns/p") && m.contains("DaemonSet d") && m.contains("ignoreDaemonSets")
        ));
        // Ignoring them (the default) skips them; a finished one is deleted either way, an orphan
        // still needs force, and other pods are not affected.
        assert_eq!(
            classify_with(&ds, &DrainSettings::from(default()), &exists),
            PodVerdict::Skip("managed by a DaemonSet")
        );
        let done = daemon_set_pod(json!({"status": {"phase": "Succeeded"}}));
        assert_eq!(classify_with(&done, &refuse, &PodContext::default()), PodVerdict::Evict);
        let missing = with_daemon_set(DaemonSetLookup::Missing);
        assert!(matches!(classify_with(&ds, &refuse, &missing), PodVerdict::Block(m) if m.contains("force")));
        assert_eq!(classify_with(&pod(json!({})), &refuse, &PodContext::default()), PodVerdict::Evict);
    }

    #[test]
    fn an_orphaned_daemonset_pod_blocks_unless_forced_as_kubectl_does() {
        let ds = daemon_set_pod(json!({}));
        let missing = with_daemon_set(DaemonSetLookup::Missing);
        assert!(
            matches!(classify(&ds, &default(), &missing), PodVerdict::Block(m) if m.contains("DaemonSet d") && m.contains("force"))
        );
        assert_eq!(classify(&ds, &DrainOptions { force: true, ..default() }, &missing), PodVerdict::Evict);
        // Until the DaemonSet is looked up, or while the lookup fails, the drain waits.
        assert!(matches!(plain(&ds, &default()), PodVerdict::Undecided(_)));
        let failed = with_daemon_set(DaemonSetLookup::Unknown("HTTP 500".into()));
        assert!(matches!(classify(&ds, &default(), &failed), PodVerdict::Undecided(m) if m.contains("HTTP 500")));
        // Only apps/v1 DaemonSets count, as in kubectl.
        let other = pod(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "example.com/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}]}}),
        );
        assert_eq!(daemon_set_of(&other), None);
        assert_eq!(plain(&other, &default()), PodVerdict::Evict);
    }

    #[test]
    fn terminating_pods_are_waited_for() {
        let p = pod(json!({"metadata": {"deletionTimestamp": "2026-11-21T10:00:00Z"}}));
        assert!(matches!(plain(&p, &default()), PodVerdict::Wait(m) if m.contains("ns/p is terminating")));
    }

    #[test]
    fn empty_dir_and_unreplicated_pods_block_unless_allowed() {
        let empty_dir = pod(json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}));
        assert!(matches!(plain(&empty_dir, &default()), PodVerdict::Block(m) if m.contains("deleteEmptyDirData")));
        let allowed = DrainOptions { delete_empty_dir_data: true, force: false };
        assert_eq!(plain(&empty_dir, &allowed), PodVerdict::Evict);
        let bare = pod(json!({"metadata": {"ownerReferences": null}}));
        assert!(matches!(plain(&bare, &default()), PodVerdict::Block(m) if m.contains("ns/p") && m.contains("force")));
        assert_eq!(plain(&bare, &DrainOptions { force: true, ..default() }), PodVerdict::Evict);
    }

    #[test]
    fn finished_pods_are_evicted_whatever_they_use() {
        let done = pod(
            json!({"metadata": {"ownerReferences": null}, "spec": {"volumes": [{"name": "v", "emptyDir": {}}]}, "status": {"phase": "Succeeded"}}),
        );
        assert_eq!(plain(&done, &default()), PodVerdict::Evict);
        // A finished DaemonSet pod is not skipped either (kubectl deletes it), and needs no lookup.
        let ds_done = daemon_set_pod(json!({"status": {"phase": "Failed"}}));
        assert_eq!(plain(&ds_done, &default()), PodVerdict::Evict);
    }

    fn budget(name: &str, namespace: &str, selector: serde_json::Value) -> PodDisruptionBudget {
        let mut value = json!({"metadata": {"name": name, "namespace": namespace}, "spec": {"minAvailable": 1}});
        if !selector.is_null() {
            value["spec"]["selector"] = selector;
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn budgets_select_as_the_eviction_api_matches_them() {
        let budgets = vec![
            budget("by-label", "ns", json!({"matchLabels": {"app": "web"}})),
            budget("everything", "ns", json!({})),
            budget("nothing", "ns", serde_json::Value::Null),
            budget("other-app", "ns", json!({"matchLabels": {"app": "db"}})),
            budget("invalid", "ns", json!({"matchExpressions": [{"key": "app", "operator": "Near"}]})),
            budget(
                "expression",
                "ns",
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}),
            ),
            budget("elsewhere", "other", json!({})),
        ];
        assert_eq!(budgets_selecting(&budgets, &pod(json!({}))), vec!["by-label", "everything", "expression"]);
    }

    #[test]
    fn a_running_pod_under_several_budgets_blocks_and_names_them() {
        let two = PodContext { daemon_set: None, budgets: Some(vec!["a".into(), "b".into()]) };
        assert!(matches!(
            classify(&pod(json!({})), &default(), &two),
            PodVerdict::Block(m) if m.contains("ns/p is selected by 2 PodDisruptionBudgets (a, b)")
        ));
        let one = PodContext { daemon_set: None, budgets: Some(vec!["a".into()]) };
        assert_eq!(classify(&pod(json!({})), &default(), &one), PodVerdict::Evict);
        // Pending and finished pods are deleted without a budget check.
        let pending = pod(json!({"status": {"phase": "Pending"}}));
        assert_eq!(classify(&pending, &default(), &two), PodVerdict::Evict);
        let done = pod(json!({"status": {"phase": "Succeeded"}}));
        assert_eq!(classify(&done, &default(), &two), PodVerdict::Evict);
    }
}
