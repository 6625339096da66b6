//! kube-runtime's `watcher`, `reflector` and `Controller` end to end against the server.

use crate::common;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[tokio::test]
async fn a_controller_reconciles_every_object_and_every_change() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "ctl").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "ctl");
    for i in 0..10 {
        api.create(&PostParams::default(), &config_map(&format!("c{i}"), json!({}), json!({}))).await.unwrap();
    }
    let seen: Arc<Mutex<BTreeMap<String, Vec<String>>>> = Arc::default();
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .run(
            |cm: Arc<ConfigMap>, seen: Arc<Mutex<BTreeMap<String, Vec<String>>>>| async move {
                let name = cm.metadata.name.clone().unwrap_or_default();
                let value = cm.data.as_ref().and_then(|d| d.get("v")).cloned().unwrap_or_default();
                seen.lock().unwrap().entry(name).or_default().push(value);
                Ok::<_, kube::Error>(Action::await_change())
            },
            |_, _, _| Action::await_change(),
            seen.clone(),
        )
        .for_each(|_| async {});
    let running = tokio::spawn(controller);
    eventually("every object reconciled", || async { seen.lock().unwrap().len() == 10 }).await;
    api.patch("c3", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "changed"}}))).await.unwrap();
    eventually("the change reconciled", || async {
        seen.lock().unwrap().get("c3").is_some_and(|values| values.last().map(String::as_str) == Some("changed"))
    })
    .await;
    running.abort();
}

#[tokio::test]
async fn a_per_node_pod_watcher_sees_only_its_node_through_binding_and_deletion() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "agents").await;
    let pods: Api<Pod> = Api::all(client.clone());
    let (reader, writer) = reflector::store();
    let stream =
        reflector(writer, watcher(pods, watcher::Config::default().fields("spec.nodeName=n1"))).applied_objects();
    let driver = tokio::spawn(stream.for_each(|_| async {}));
    let namespaced: Api<Pod> = Api::namespaced(client.clone(), "agents");
    namespaced.create(&PostParams::default(), &pod("mine", json!({}), Some("n1"))).await.unwrap();
    namespaced.create(&PostParams::default(), &pod("theirs", json!({}), Some("n2"))).await.unwrap();
    namespaced.create(&PostParams::default(), &pod("later", json!({}), None)).await.unwrap();
    server.store().bind("agents", "later", "n1").unwrap();
    let names = |reader: &reflector::Store<Pod>| {
        let mut names: Vec<String> = reader.state().iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        names.sort();
        names
    };
    eventually("the node's pods, bound one included", || {
        let reader = reader.clone();
        async move { names(&reader) == vec!["later", "mine"] }
    })
    .await;
    namespaced.delete("mine", &DeleteParams::default().grace_period(0)).await.unwrap();
    eventually("the deleted pod leaves the cache", || {
        let reader = reader.clone();
        async move { names(&reader) == vec!["later"] }
    })
    .await;
    driver.abort();
}

#[tokio::test]
async fn an_in_memory_client_is_authenticated_authorized_counted_and_watches_like_one_over_tcp() {
    use memory_apiserver::{Identity, Verb};
    let server = server().await;
    namespace(&server.client(), "mem").await;
    let admin_token = server.token_for(&Identity::Admin).unwrap();
    let admin = server.in_memory_client(&admin_token, "mem-admin/1").unwrap();
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "mem");
    let stream = watcher(api.clone(), watcher::Config::default()).applied_objects();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorder = seen.clone();
    let watching = tokio::spawn(stream.for_each(move |object| {
        if let Ok(cm) = object {
            recorder.lock().unwrap().push(cm.metadata.name.unwrap_or_default());
        }
        async {}
    }));
    api.create(&PostParams::default(), &config_map("a", json!({}), json!({}))).await.unwrap();
    eventually("the watch delivers the new object", || async { seen.lock().unwrap().contains(&"a".to_owned()) }).await;
    watching.abort();

    // Authorization applies: a user without roles is refused, as over TCP.
    let nobody_token = server.token_for(&Identity::User { name: "nobody".into(), groups: vec![] }).unwrap();
    let nobody = server.in_memory_client(&nobody_token, "mem-nobody/1").unwrap();
    let refused = Api::<ConfigMap>::namespaced(nobody, "mem").get("a").await.unwrap_err();
    assert!(matches!(&refused, kube::Error::Api(status) if status.code == 403), "{refused:?}");
    // A wrong token is not a user at all.
    let stranger = server.in_memory_client("not-a-token", "mem-stranger/1").unwrap();
    let refused = Api::<ConfigMap>::namespaced(stranger, "mem").get("a").await.unwrap_err();
    assert!(matches!(&refused, kube::Error::Api(status) if status.code == 401), "{refused:?}");

    // The requests are counted under the client's User-Agent.
    let metrics = server.metrics();
    assert_eq!(metrics.count(|k| k.user_agent == "mem-admin/1" && k.verb == Verb::Create), 1);
    assert!(metrics.count(|k| k.user_agent == "mem-admin/1" && k.verb == Verb::Watch) >= 1);
    // Discovery answers as over TCP (the server's address, without a scheme).
    let (in_memory, over_tcp) =
        (admin.list_core_api_versions().await.unwrap(), server.client().list_core_api_versions().await.unwrap());
    assert_eq!(in_memory.server_address_by_client_cidrs, over_tcp.server_address_by_client_cidrs);
    // A header that cannot be sent is an error, not a panic.
    assert!(server.in_memory_client("token\nwith newline", "x").is_err());
}
