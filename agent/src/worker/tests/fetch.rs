//! Fetching Kubernetes components ahead (intent `fetch`): carried out, reported, and discarded when no longer
//! wanted, against the in-memory Node and the scripted host of the parent module.

use super::*;

impl FakeNodes {
    /// An intent of a Kubernetes upgrade as the controller writes it, in one patch: `components` and `role` only
    /// where the step has them.
    fn kubernetes_intent(&self, step: &str, token: &str, components: Option<&str>, role: Option<&str>) {
        self.update(|node| {
            let annotations = node.metadata.annotations.get_or_insert_with(Default::default);
            for (key, value) in [
                (keys::INTENT, Some(step)),
                (keys::INTENT_TOKEN, Some(token)),
                (keys::INTENT_SINCE, Some("2026-11-21T10:00:00.000Z")),
                (keys::INTENT_TARGET, Some("v2.0.0")),
                (keys::INTENT_COMPONENTS, components),
                (keys::INTENT_KUBEADM, role),
            ] {
                match value {
                    Some(value) => annotations.insert(key.to_owned(), value.to_owned()),
                    None => annotations.remove(key),
                };
            }
        });
    }
}

/// The host calls but the facts reads.
fn work(host: &ScriptedHost) -> Vec<String> {
    host.calls().into_iter().filter(|c| c != "facts").collect()
}

#[tokio::test(start_paused = true)]
async fn a_fetch_is_reported_done_kept_through_the_upgrade_and_discarded_after_it() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    let agent = start(&nodes, &host);
    until("the first report", || nodes.annotation(keys::OS_IMAGE).is_some()).await;
    let name = release_config_map().metadata.name.unwrap();
    nodes.kubernetes_intent("fetch", "f1", Some(&name), None);
    until("the fetch to start", || nodes.state() == (some("busy"), some("f1"), None)).await;
    until("the fetch to end", || nodes.state() == (some("done"), some("f1"), None)).await;
    nodes.kubernetes_intent("drain", "d1", None, None);
    idle_for(Duration::from_secs(600)).await;
    assert_eq!(work(&host), ["fetch v2.0.0 /usr/local/bin/kubeadm"], "kept while the node drains");
    nodes.kubernetes_intent("kubeadm-upgrade", "k1", Some(&name), Some("node"));
    until("the upgrade to end", || nodes.state() == (some("done"), some("k1"), None)).await;
    until("the discard", || host.count("discard") == 1).await;
    assert_eq!(
        work(&host),
        ["fetch v2.0.0 /usr/local/bin/kubeadm", "kubernetes v2.0.0 Worker /usr/local/bin/kubeadm", "discard"]
    );
    // The controller verifies the node: nothing more to do.
    nodes.kubernetes_intent("done", "v1", None, None);
    idle_for(Duration::from_secs(600)).await;
    assert_eq!(host.count("discard"), 1);
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_fetch_given_up_is_cancelled_and_what_it_fetched_discarded() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    host.script().stage_takes = Duration::from_secs(3600);
    let agent = start(&nodes, &host);
    let name = release_config_map().metadata.name.unwrap();
    nodes.kubernetes_intent("fetch", "f1", Some(&name), None);
    until("the fetch to start", || host.count("fetch v2.0.0") == 1).await;
    nodes.release_intent();
    until("the discard", || host.count("discard") == 1).await;
    let call = "fetch v2.0.0 /usr/local/bin/kubeadm";
    assert_eq!(work(&host), [call.to_owned(), format!("{call} cancelled"), "discard".to_owned()]);
    until("the report to say nothing is under way", || nodes.state() == (some("idle"), None, None)).await;
    agent.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_fetch_of_a_components_configmap_that_is_not_there_fails_without_asking_the_host() {
    let (nodes, host) = (FakeNodes::new(), ScriptedHost::running("v1"));
    let agent = start(&nodes, &host);
    nodes.kubernetes_intent("fetch", "f1", Some("k8s-components-sha256-00"), None);
    until("the error", || nodes.state().0.as_deref() == Some("error")).await;
    let message = nodes.state().2.unwrap();
    assert!(message.contains("k8s-components-sha256-00"), "{message}");
    assert_eq!(host.count("fetch"), 0);
    agent.stop().await;
}
