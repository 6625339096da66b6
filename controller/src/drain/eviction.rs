//! One eviction request, and what its answer means for the drain, read as `kubectl drain` reads it
//! (`kubectl/pkg/drain/drain.go`, `evictPods`).
//!
//! | Answer | Meaning |
//! |---|---|
//! | 201 | accepted: the pod is being deleted; wait until it is gone |
//! | 404 | the pod is gone: done |
//! | 429 | a PodDisruptionBudget does not allow it now (or is not yet processed): retry |
//! | 403 with cause `NamespaceTerminating` | the namespace is being deleted, which deletes the pod; retry until the pod is terminating, then wait (kubectl neither deletes the pod nor gives up) |
//! | 500 "more than one PodDisruptionBudget" | the Eviction API never evicts such a pod: the drain fails, naming the budgets |
//! | other 5xx, 409, 401, no answer | transient: retry |
//! | any other answer | the drain fails with it, as kubectl's does |

use super::filters::{budgets_selecting, several_budgets};
use crate::metrics::{EvictionLabels, Metrics};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::core::Status;

/// What the Eviction API answers for a pod that several PodDisruptionBudgets select.
const SEVERAL_BUDGETS: &str = "This pod has more than one PodDisruptionBudget";
/// The cause of a 403 for a create in a namespace being deleted.
const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";

/// What one eviction request achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted: the pod is being deleted.
    Accepted,
    /// The pod no longer exists.
    Gone,
    /// Not now; try again later. The message says why, for status and logs.
    Retry(String),
    /// The drain cannot finish; the message says why.
    Failed(String),
}

/// How an error answer is to be treated.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Judgement {
    Gone,
    Retry(String),
    SeveralBudgets(String),
    Failed(String),
}

/// Reads an eviction's error answer the way `kubectl drain` does, except that answers a server
/// under strain gives (5xx, 409, 401, no answer) are retried rather than fatal.
fn judge(pod: &str, error: &kube::Error) -> Judgement {
    let kube::Error::Api(status) = error else {
        return Judgement::Retry(format!("the eviction request for pod {pod} failed: {error}"));
    };
    let refused = |status: &Status| format!("eviction of pod {pod} refused with {}: {}", status.code, describe(status));
    match status.code {
        404 => Judgement::Gone,
        429 => Judgement::Retry(refused(status)),
        403 if has_cause(status, NAMESPACE_TERMINATING) => {
            Judgement::Retry(format!("{}; the namespace controller deletes the pod", refused(status)))
        }
        500 if status.message.starts_with(SEVERAL_BUDGETS) => Judgement::SeveralBudgets(status.message.clone()),
        401 | 409 | 500..=599 => Judgement::Retry(refused(status)),
        _ => Judgement::Failed(refused(status)),
    }
}

fn has_cause(status: &Status, reason: &str) -> bool {
    status.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.reason == reason))
}

/// The message with its causes, as one line.
fn describe(status: &Status) -> String {
    let causes: Vec<&str> = status
        .details
        .as_ref()
        .map(|d| d.causes.iter().map(|c| c.message.as_str()).filter(|m| !m.is_empty()).collect())
        .unwrap_or_default();
    if causes.is_empty() { status.message.clone() } else { format!("{} ({})", status.message, causes.join("; ")) }
}

/// The policy/v1 `Eviction` of `pod`, with `grace_period_seconds` as its `deleteOptions.gracePeriodSeconds`
/// when given (`kubectl drain --grace-period`; None leaves the pod its own grace period).
///
/// Built here rather than through kube-rs's `EvictParams`, whose body names the field `delete_options`,
/// which the API server ignores as unknown: a grace period passed that way never applies.
pub fn eviction_body(pod: &Pod, grace_period_seconds: Option<i64>) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            ..Default::default()
        },
        delete_options: grace_period_seconds
            .map(|seconds| DeleteOptions { grace_period_seconds: Some(seconds), ..Default::default() }),
    }
}

/// Asks the API server to evict `pod` through `client` (which must not retry on its own), with
/// `grace_period_seconds` (see [`eviction_body`]), and names the budgets if it refuses because
/// several select the pod.
pub async fn evict(client: &kube::Client, pod: &Pod, grace_period_seconds: Option<i64>, metrics: &Metrics) -> Outcome {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let full_name = format!("{namespace}/{name}");
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let count = |result: &'static str| metrics.evictions.get_or_create(&EvictionLabels { result }).inc();
    let body = eviction_body(pod, grace_period_seconds);
    let answer: Result<Status, kube::Error> =
        api.create_subresource("eviction", name, &PostParams::default(), &body).await;
    let error = match answer {
        Ok(_) => {
            count("accepted");
            return Outcome::Accepted;
        }
        Err(error) => error,
    };
    match judge(&full_name, &error) {
        Judgement::Gone => Outcome::Gone,
        Judgement::Retry(why) => {
            let refused = matches!(&error, kube::Error::Api(s) if s.code == 429);
            count(if refused { "refused" } else { "error" });
            Outcome::Retry(why)
        }
        Judgement::Failed(why) => {
            count("error");
            Outcome::Failed(why)
        }
        Judgement::SeveralBudgets(answer) => {
            count("error");
            let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), namespace);
            match budgets.list(&ListParams::default()).await {
                Ok(list) => Outcome::Failed(several_budgets(&full_name, &budgets_selecting(&list.items, pod))),
                Err(list_error) => Outcome::Failed(format!(
                    "eviction of pod {full_name} refused with 500: {answer} (listing its namespace's PodDisruptionBudgets to name them failed: {list_error})"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(value: serde_json::Value) -> kube::Error {
        kube::Error::Api(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn answers_are_read_as_kubectl_reads_them() {
        let too_many = answer(json!({"code": 429, "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]}}));
        assert_eq!(
            judge("ns/p", &too_many),
            Judgement::Retry(
                "eviction of pod ns/p refused with 429: Cannot evict pod as it would violate the pod's disruption budget. (The disruption budget web needs 2 healthy pods and has 2 currently)".into()
            )
        );
        assert_eq!(judge("ns/p", &answer(json!({"code": 404, "reason": "NotFound"}))), Judgement::Gone);
        let terminating = answer(json!({"code": 403, "reason": "Forbidden",
            "message": "pods \"p\" is forbidden: unable to create new content in namespace ns because it is being terminated",
            "details": {"causes": [{"reason": "NamespaceTerminating", "message": "namespace ns is being terminated", "field": "metadata.namespace"}]}}));
        assert!(matches!(judge("ns/p", &terminating), Judgement::Retry(m) if m.contains("being terminated")));
        let several = answer(json!({"code": 500, "status": "Failure",
            "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."}));
        assert!(matches!(judge("ns/p", &several), Judgement::SeveralBudgets(_)));
        for transient in [500, 503, 504, 409, 401] {
            let error = answer(json!({"code": transient, "message": "injected"}));
            assert!(matches!(judge("ns/p", &error), Judgement::Retry(_)), "{transient}");
        }
        let forbidden = answer(json!({"code": 403, "reason": "Forbidden",
            "message": "pods \"p\" is forbidden: User \"x\" cannot create resource \"pods/eviction\""}));
        assert!(matches!(judge("ns/p", &forbidden), Judgement::Failed(m) if m.contains("refused with 403")));
        assert!(matches!(judge("ns/p", &answer(json!({"code": 422}))), Judgement::Failed(_)));
    }

    #[test]
    fn the_grace_period_goes_into_policy_v1_delete_options() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}})).unwrap();
        let with = serde_json::to_value(eviction_body(&pod, Some(1))).unwrap();
        assert_eq!(
            with,
            json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "ns"},
                   "deleteOptions": {"gracePeriodSeconds": 1}})
        );
        let without = serde_json::to_value(eviction_body(&pod, None)).unwrap();
        assert_eq!(without.get("deleteOptions"), None, "the pod's own grace period");
    }
}
