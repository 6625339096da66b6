//! batch/v1 Jobs end to end: the Job controller, the simulated kubelets that run Job pods to completion (or fail
//! them through a `/_dev/hosts/NODE/faults` fault), and the garbage collector's cascades.

use crate::cluster_support;

use cluster_support::*;
use dev::cluster::Cluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn job(name: &str, spec: Value) -> Job {
    let mut spec = spec;
    let template = spec.get_mut("template").and_then(Value::as_object_mut).cloned().unwrap_or_default();
    let mut pod_spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    if pod_spec.get("containers").is_none() {
        pod_spec["containers"] = json!([{"name": "main", "image": "busybox:1.36", "command": ["true"]}]);
    }
    if pod_spec.get("restartPolicy").is_none() {
        pod_spec["restartPolicy"] = json!("Never");
    }
    spec["template"] = json!({"metadata": template.get("metadata").cloned().unwrap_or_else(|| json!({})),
                              "spec": pod_spec});
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| (c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

/// Polls `check` until it returns something; panics after [`PATIENCE`].
async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if let Some(found) = check().await {
            return found;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

async fn finished_job(jobs: &Api<Job>, name: &str, type_: &str) -> Job {
    wait_for(&format!("job {name} has condition {type_}"), || async {
        let job = jobs.get(name).await.unwrap();
        condition(&job, type_).is_some().then_some(job)
    })
    .await
}

async fn pods_of(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}"))).await.unwrap().items
}

async fn fault_every_worker(cluster: &Cluster, faults: Value) {
    for worker in cluster.workers() {
        let answer = request(cluster, "PUT", &format!("/_dev/hosts/{worker}/faults"), Some(faults.clone())).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
    }
}

fn terminated(pod: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    pod.status.as_ref()?.container_statuses.as_ref()?.first()?.state.as_ref()?.terminated.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_its_pods_to_completion_and_reports_it_as_upstream_does() {
    let cluster = bare_cluster(3).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let created =
        jobs.create(&PostParams::default(), &job("pi", json!({"completions": 3, "parallelism": 2}))).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let selector = created.spec.as_ref().unwrap().selector.clone().unwrap();
    assert_eq!(selector.match_labels.unwrap()["batch.kubernetes.io/controller-uid"], uid);
    let done = finished_job(&jobs, "pi", "Complete").await;
    let status = done.status.clone().unwrap();
    assert_eq!((status.succeeded, status.failed, status.active), (Some(3), Some(0), Some(0)));
    assert_eq!(status.ready, Some(0));
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    assert_eq!(condition(&done, "SuccessCriteriaMet").unwrap().0, "CompletionsReached");
    assert_eq!(
        condition(&done, "Complete").unwrap(),
        ("CompletionsReached".to_owned(), "Reached expected number of succeeded pods".to_owned())
    );
    let by_field = jobs.list(&ListParams::default().fields("status.successful=3")).await.unwrap();
    assert_eq!(by_field.items.len(), 1, "batch/v1 Jobs are selectable by status.successful");
    let uncounted = status.uncounted_terminated_pods.unwrap();
    assert!(uncounted.succeeded.unwrap_or_default().is_empty() && uncounted.failed.unwrap_or_default().is_empty());
    let ran = pods_of(&pods, "pi").await;
    assert_eq!(ran.len(), 3);
    for pod in &ran {
        assert_eq!(pod.status.as_ref().unwrap().phase.as_deref(), Some("Succeeded"));
        let end = terminated(pod).unwrap();
        assert_eq!((end.exit_code, end.reason.as_deref()), (0, Some("Completed")));
        assert!(end.started_at.is_some() && end.finished_at.is_some());
        assert!(pod.metadata.finalizers.clone().unwrap_or_default().is_empty(), "the tracking finalizer is gone");
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller, owner.block_owner_deletion),
            ("Job", Some(true), Some(true))
        );
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["controller-uid"], uid);
        assert_eq!(labels["job-name"], "pi");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_pods_are_retried_up_to_the_backoff_limit_then_the_job_fails() {
    let cluster = bare_cluster(3).await;
    fault_every_worker(&cluster, json!({"jobPodFailure": {"exitCode": 3, "message": "disk full"}})).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("flaky", json!({"backoffLimit": 2}))).await.unwrap();
    let failed = finished_job(&jobs, "flaky", "Failed").await;
    assert_eq!(
        condition(&failed, "Failed").unwrap(),
        ("BackoffLimitExceeded".to_owned(), "Job has reached the specified backoff limit".to_owned())
    );
    assert!(condition(&failed, "FailureTarget").is_some());
    assert!(condition(&failed, "Complete").is_none());
    let status = failed.status.unwrap();
    assert_eq!((status.failed, status.succeeded, status.active), (Some(3), Some(0), Some(0)));
    assert!(status.completion_time.is_none(), "a failed Job has no completionTime");
    let ran = pods_of(&pods, "flaky").await;
    assert_eq!(ran.len(), 3, "backoffLimit 2: the first pod and two retries");
    for pod in &ran {
        assert_eq!(pod.status.as_ref().unwrap().phase.as_deref(), Some("Failed"));
        let end = terminated(pod).unwrap();
        assert_eq!(
            (end.exit_code, end.reason.as_deref(), end.message.as_deref()),
            (3, Some("Error"), Some("disk full"))
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_failure_job_counts_container_restarts_against_its_backoff_limit() {
    let cluster = bare_cluster(2).await;
    fault_every_worker(&cluster, json!({"jobPodFailure": {"exitCode": 1}})).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let spec = json!({"backoffLimit": 2, "template": {"spec": {"restartPolicy": "OnFailure"}}});
    jobs.create(&PostParams::default(), &job("restarts", spec)).await.unwrap();
    let restarted = wait_for("the pod restarts its failed container in place", || async {
        let restarts = pods_of(&pods, "restarts")
            .await
            .iter()
            .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref()?.first().map(|c| c.restart_count))
            .max()
            .unwrap_or(0);
        (restarts >= 1).then_some(restarts)
    })
    .await;
    let failed = finished_job(&jobs, "restarts", "Failed").await;
    assert_eq!(condition(&failed, "Failed").unwrap().0, "BackoffLimitExceeded");
    assert!(restarted >= 1);
    eventually("the failed Job's pod is deleted", || async { pods_of(&pods, "restarts").await.is_empty() }).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_past_its_active_deadline_fails_and_its_pods_are_deleted() {
    let cluster = bare_cluster(2).await;
    fault_every_worker(&cluster, json!({"jobPodSeconds": 3600})).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("slow", json!({"activeDeadlineSeconds": 1}))).await.unwrap();
    let failed = finished_job(&jobs, "slow", "Failed").await;
    assert_eq!(
        condition(&failed, "Failed").unwrap(),
        ("DeadlineExceeded".to_owned(), "Job was active longer than specified deadline".to_owned())
    );
    eventually("the pod still running at the deadline counts as failed, as upstream counts it", || async {
        jobs.get("slow").await.unwrap().status.and_then(|s| s.failed) == Some(1)
    })
    .await;
    eventually("the running pod was deleted", || async { pods_of(&pods, "slow").await.is_empty() }).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_job_runs_nothing_until_it_is_resumed() {
    let cluster = bare_cluster(2).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("later", json!({"suspend": true}))).await.unwrap();
    let suspended = finished_job(&jobs, "later", "Suspended").await;
    assert_eq!(condition(&suspended, "Suspended").unwrap(), ("JobSuspended".to_owned(), "Job suspended".to_owned()));
    assert!(suspended.status.as_ref().unwrap().start_time.is_none());
    assert!(pods_of(&pods, "later").await.is_empty());
    // While suspended and never started, the template's scheduling directives may change.
    let pin = json!({"spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "worker-0"}}}}});
    jobs.patch("later", &PatchParams::default(), &Patch::Strategic(pin)).await.unwrap();
    jobs.patch("later", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": false}}))).await.unwrap();
    let done = finished_job(&jobs, "later", "Complete").await;
    let conditions = done.status.unwrap().conditions.unwrap();
    let resumed = conditions.iter().find(|c| c.type_ == "Suspended").unwrap();
    assert_eq!((resumed.status.as_str(), resumed.reason.as_deref()), ("False", Some("JobResumed")));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_fault_with_a_selector_fails_only_the_pods_it_selects() {
    let cluster = bare_cluster(3).await;
    fault_every_worker(&cluster, json!({"jobPodFailure": {"exitCode": 2, "labelSelector": "job-name=bad"}})).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("bad", json!({"backoffLimit": 0}))).await.unwrap();
    jobs.create(&PostParams::default(), &job("good", json!({}))).await.unwrap();
    finished_job(&jobs, "bad", "Failed").await;
    finished_job(&jobs, "good", "Complete").await;
    let refused =
        request(&cluster, "PUT", "/_dev/hosts/worker-0/faults", Some(json!({"jobPodFailure": {"exitCode": 0}}))).await;
    assert_eq!(refused.status, 400, "{:?}", refused.body);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_job_cascades_to_its_pods_only_when_asked_as_batch_v1_does() {
    let cluster = bare_cluster(2).await;
    fault_every_worker(&cluster, json!({"jobPodSeconds": 3600})).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    for name in ["cascade", "keep"] {
        jobs.create(&PostParams::default(), &job(name, json!({}))).await.unwrap();
        eventually("the Job's pod runs", || async {
            pods_of(&pods, name)
                .await
                .iter()
                .any(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        })
        .await;
    }
    jobs.delete("cascade", &DeleteParams::background()).await.unwrap();
    eventually("the background delete removed the pod", || async { pods_of(&pods, "cascade").await.is_empty() }).await;
    // Without a propagation policy batch/v1 orphans the pods (upstream keeps this for compatibility).
    jobs.delete("keep", &DeleteParams::default()).await.unwrap();
    eventually("the Job is gone", || async { jobs.get_opt("keep").await.unwrap().is_none() }).await;
    eventually("the orphaned pod loses its tracking finalizer", || async {
        pods_of(&pods, "keep").await.iter().all(|p| p.metadata.finalizers.clone().unwrap_or_default().is_empty())
    })
    .await;
    let kept = pods_of(&pods, "keep").await;
    assert_eq!(kept.len(), 1);
    assert!(kept[0].metadata.owner_references.clone().unwrap_or_default().is_empty());
    assert!(kept[0].metadata.deletion_timestamp.is_none());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_pod_whose_node_reboots_fails_and_the_job_replaces_it() {
    let cluster = bare_cluster(2).await;
    fault_every_worker(&cluster, json!({"jobPodSeconds": 3600})).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("reboot", json!({"backoffLimit": 3}))).await.unwrap();
    let node = wait_for("the Job's pod runs", || async {
        let running = pods_of(&pods, "reboot")
            .await
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        running.and_then(|pod| pod.spec?.node_name)
    })
    .await;
    cluster.hosts().reboot(&node).unwrap();
    eventually("the pod failed with its node and a replacement was created", || async {
        let all = pods_of(&pods, "reboot").await;
        let lost = all.iter().any(|p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
                && terminated(p).is_some_and(|t| t.exit_code == 255 && t.reason.as_deref() == Some("Unknown"))
        });
        lost && all.len() == 2
    })
    .await;
    eventually("the Job counts the failure", || async {
        jobs.get("reboot").await.unwrap().status.and_then(|s| s.failed) == Some(1)
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_with_a_ttl_is_deleted_with_its_pods() {
    let cluster = bare_cluster(2).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("short", json!({"ttlSecondsAfterFinished": 1}))).await.unwrap();
    eventually("the finished Job and its pod are gone", || async {
        jobs.get_opt("short").await.unwrap().is_none() && pods_of(&pods, "short").await.is_empty()
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_job_controller_counts_every_pod_once() {
    let cluster = bare_cluster(3).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    // The controller is paused while the pods finish, then resumed: nothing is lost or counted twice.
    jobs.create(&PostParams::default(), &job("paused", json!({"completions": 2, "parallelism": 2}))).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    eventually("both pods were created", || async { pods_of(&pods, "paused").await.len() == 2 }).await;
    cluster.faults().pause_controller(dev::controllers::names::JOB);
    eventually("both pods succeeded", || async {
        pods_of(&pods, "paused")
            .await
            .iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
    })
    .await;
    cluster.faults().resume_controller(dev::controllers::names::JOB);
    let done = finished_job(&jobs, "paused", "Complete").await;
    assert_eq!(done.status.unwrap().succeeded, Some(2));
    assert_eq!(pods_of(&pods, "paused").await.len(), 2);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_operation_job_runs_pinned_and_privileged_and_goes_with_its_owner() {
    // The shape of a Kairos NodeOp's Job: pinned to a node, privileged, the host's root mounted, a backoff limit,
    // owned by the object that asked for it.
    let cluster = bare_cluster(3).await;
    let client = cluster.client();
    let owners: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "default");
    let owner = serde_json::from_value(json!({"metadata": {"name": "nodeop"}})).unwrap();
    let owner = owners.create(&PostParams::default(), &owner).await.unwrap();
    let node = cluster.workers()[1].clone();
    let mut pinned = job(
        "nodeop-worker",
        json!({"backoffLimit": 1, "template": {"spec": {
        "nodeName": node,
        "hostPID": true,
        "containers": [{"name": "op", "image": "busybox:1.36", "command": ["sh", "-c", "chroot /host true"],
                        "securityContext": {"privileged": true},
                        "volumeMounts": [{"name": "host-root", "mountPath": "/host"}]}],
        "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
        "imagePullSecrets": [{"name": "registry"}]}}}),
    );
    pinned.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "nodeop".into(),
        uid: owner.metadata.uid.clone().unwrap(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    jobs.create(&PostParams::default(), &pinned).await.unwrap();
    finished_job(&jobs, "nodeop-worker", "Complete").await;
    let ran = pods_of(&pods, "nodeop-worker").await;
    assert_eq!(ran.len(), 1);
    let spec = ran[0].spec.clone().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some(node.as_str()));
    assert_eq!(spec.host_pid, Some(true));
    assert_eq!(spec.containers[0].security_context.as_ref().unwrap().privileged, Some(true));
    assert_eq!(spec.volumes.unwrap()[0].host_path.as_ref().unwrap().path, "/");
    assert_eq!(spec.image_pull_secrets.unwrap()[0].name, "registry");
    owners.delete("nodeop", &DeleteParams::background()).await.unwrap();
    eventually("the Job and its pod went with their owner", || async {
        jobs.get_opt("nodeop-worker").await.unwrap().is_none() && pods_of(&pods, "nodeop-worker").await.is_empty()
    })
    .await;
    cluster.shutdown().await;
}
