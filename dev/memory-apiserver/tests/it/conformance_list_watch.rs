//! Conformance checklist A (list and watch), with unmodified kube-rs clients and raw requests where the wire
//! format matters. Item numbers refer to §9 of k8s-api-semantics.md.

use crate::common;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

async fn config_maps(client: &kube::Client, ns: &str, names: &[&str]) -> Api<ConfigMap> {
    namespace(client, ns).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    for name in names {
        api.create(&PostParams::default(), &config_map(name, json!({}), json!({"v": "1"}))).await.unwrap();
    }
    api
}

fn names(list: &Value) -> Vec<String> {
    list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a01_pages_count_the_items_left_when_no_selector_makes_the_count_inexact() {
    let server = server().await;
    let client = server.client();
    config_maps(&client, "a01r", &["a", "b", "c", "d", "e"]).await;
    config_maps(&client, "a01s", &["x"]).await;
    let first = raw(&client, "GET", "/api/v1/namespaces/a01r/configmaps?limit=2", None, Value::Null).await.json();
    assert_eq!(first["metadata"]["remainingItemCount"], 3, "only this namespace's objects count");
    let token = first["metadata"]["continue"].as_str().unwrap();
    let uri = format!("/api/v1/namespaces/a01r/configmaps?limit=2&continue={token}");
    let second = raw(&client, "GET", &uri, None, Value::Null).await.json();
    assert_eq!(second["metadata"]["remainingItemCount"], 1);
    let token = second["metadata"]["continue"].as_str().unwrap();
    let uri = format!("/api/v1/namespaces/a01r/configmaps?limit=2&continue={token}");
    let last = raw(&client, "GET", &uri, None, Value::Null).await.json();
    assert!(last["metadata"].get("remainingItemCount").is_none(), "the last page has none");
    let all = raw(&client, "GET", "/api/v1/configmaps?limit=1", None, Value::Null).await.json();
    assert!(all["metadata"]["remainingItemCount"].as_u64().is_some_and(|n| n >= 5));
    let selected =
        raw(&client, "GET", "/api/v1/namespaces/a01r/configmaps?limit=2&labelSelector=x!%3Dy", None, Value::Null)
            .await
            .json();
    assert!(selected["metadata"]["continue"].is_string());
    assert!(selected["metadata"].get("remainingItemCount").is_none(), "a selector makes the count inexact");
    let table = raw_with(
        &client,
        "GET",
        "/api/v1/namespaces/a01r/configmaps?limit=4",
        &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        None,
        Value::Null,
    )
    .await
    .json();
    assert_eq!(table["metadata"]["remainingItemCount"], 1);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "a01r");
    let page = api.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(page.metadata.remaining_item_count, Some(2));
}

#[tokio::test]
async fn a01_pages_share_one_resource_version_and_come_in_key_order() {
    let server = server().await;
    let client = server.client();
    config_maps(&client, "a01", &["d", "b", "e", "a", "c"]).await;
    let mut pages = Vec::new();
    let mut uri = "/api/v1/namespaces/a01/configmaps?limit=2".to_owned();
    loop {
        let page = raw(&client, "GET", &uri, None, Value::Null).await.json();
        let token = page["metadata"]["continue"].as_str().map(str::to_owned);
        pages.push(page);
        match token {
            Some(token) => uri = format!("/api/v1/namespaces/a01/configmaps?limit=2&continue={token}"),
            None => break,
        }
    }
    assert_eq!(pages.len(), 3);
    let rvs: Vec<&Value> = pages.iter().map(|p| &p["metadata"]["resourceVersion"]).collect();
    assert!(rvs.iter().all(|rv| *rv == rvs[0] && rv.is_string()));
    let all: Vec<String> = pages.iter().flat_map(names).collect();
    assert_eq!(all, vec!["a", "b", "c", "d", "e"]);
    assert!(pages[2]["metadata"].get("continue").is_none());
    // Across namespaces the order is namespace/name.
    config_maps(&client, "a01-b", &["a"]).await;
    let all = raw(&client, "GET", "/api/v1/configmaps", None, Value::Null).await.json();
    let keys: Vec<String> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!("{}/{}", i["metadata"]["namespace"].as_str().unwrap(), i["metadata"]["name"].as_str().unwrap())
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
}

#[tokio::test]
async fn a02_later_pages_show_the_snapshot_and_a_watch_from_it_delivers_the_change() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a02", &["a", "b", "c", "d"]).await;
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let snapshot_rv = first.metadata.resource_version.clone().unwrap();
    api.patch("c", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await.unwrap();
    api.create(&PostParams::default(), &config_map("bb", json!({}), json!({}))).await.unwrap();
    let second = api
        .list(&ListParams::default().limit(2).continue_token(first.metadata.continue_.as_deref().unwrap()))
        .await
        .unwrap();
    let second_names: Vec<String> = second.items.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
    assert_eq!(second_names, vec!["c", "d"], "bb was created after the snapshot");
    assert_eq!(second.items[0].data.as_ref().unwrap()["v"], "1", "page 2 shows the old version of c");
    assert_eq!(second.metadata.resource_version.as_deref(), Some(snapshot_rv.as_str()));
    let mut watch =
        RawWatch::open(&client, &format!("/api/v1/namespaces/a02/configmaps?watch=true&resourceVersion={snapshot_rv}"))
            .await;
    let modified = watch.next_event().await.unwrap();
    assert_eq!(
        (modified["type"].as_str(), modified["object"]["metadata"]["name"].as_str()),
        (Some("MODIFIED"), Some("c"))
    );
    let added = watch.next_event().await.unwrap();
    assert_eq!((added["type"].as_str(), added["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("bb")));
}

#[tokio::test]
async fn a03_a_continue_after_compaction_is_410_and_the_watcher_relists() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a03", &["a", "b", "c", "d", "e"]).await;
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    server.faults().compact();
    let token = first.metadata.continue_.unwrap();
    let expired =
        raw(&client, "GET", &format!("/api/v1/namespaces/a03/configmaps?limit=2&continue={token}"), None, Value::Null)
            .await;
    assert_eq!(expired.status, 410);
    assert_eq!(expired.json()["reason"], "Expired");
    assert_eq!(expired.json()["kind"], "Status");

    // The watcher's second page is held back until the compaction has happened.
    let faults = server.faults();
    let metrics = server.metrics();
    faults.add_latency(
        memory_apiserver::RequestMatch {
            verbs: vec![memory_apiserver::Verb::List],
            resource: Some("configmaps".into()),
            ..Default::default()
        },
        Duration::from_millis(500),
    );
    let before = metrics.count(|k| k.verb == memory_apiserver::Verb::List);
    let compactor = tokio::spawn({
        let metrics = metrics.clone();
        async move {
            eventually("the second page is requested", || {
                let metrics = metrics.clone();
                async move { metrics.count(|k| k.verb == memory_apiserver::Verb::List) >= before + 2 }
            })
            .await;
            faults.compact();
        }
    });
    let mut stream = watcher(api.clone(), watcher::Config::default().page_size(2)).boxed();
    let mut saw_initial_list_failed = false;
    let mut inits_after_failure = 0;
    let mut applied_after_failure = 0;
    within("the watcher relists", async {
        while let Some(item) = stream.next().await {
            match item {
                Err(watcher::Error::InitialListFailed(kube::Error::Api(status))) => {
                    assert_eq!(status.code, 410);
                    saw_initial_list_failed = true;
                }
                Err(other) => panic!("unexpected error {other}"),
                Ok(watcher::Event::Init) if saw_initial_list_failed => inits_after_failure += 1,
                Ok(watcher::Event::InitApply(_)) if saw_initial_list_failed => applied_after_failure += 1,
                Ok(watcher::Event::InitDone) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    compactor.await.unwrap();
    assert!(saw_initial_list_failed);
    assert_eq!(inits_after_failure, 1);
    assert_eq!(applied_after_failure, 5);
}

#[tokio::test]
async fn a04_a_watch_replays_every_change_after_its_resource_version() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a04", &[]).await;
    let from = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    api.create(&PostParams::default(), &config_map("x", json!({}), json!({}))).await.unwrap();
    api.patch("x", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    api.delete("x", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &config_map("y", json!({}), json!({}))).await.unwrap();
    let mut watch =
        RawWatch::open(&client, &format!("/api/v1/namespaces/a04/configmaps?watch=true&resourceVersion={from}")).await;
    let mut seen = Vec::new();
    let mut last_rv = from.parse::<u64>().unwrap();
    for _ in 0..4 {
        let event = watch.next_event().await.unwrap();
        let rv = rv_of(&event["object"]);
        assert!(rv > last_rv, "events come in resourceVersion order");
        last_rv = rv;
        seen.push(format!(
            "{} {}",
            event["type"].as_str().unwrap(),
            event["object"]["metadata"]["name"].as_str().unwrap()
        ));
    }
    assert_eq!(seen, vec!["ADDED x", "MODIFIED x", "DELETED x", "ADDED y"]);
}

#[tokio::test]
async fn a05_a_too_old_resource_version_is_one_in_stream_410_then_the_end() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a05", &["a"]).await;
    let old = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    api.create(&PostParams::default(), &config_map("b", json!({}), json!({}))).await.unwrap();
    server.faults().compact();
    let mut watch =
        RawWatch::open(&client, &format!("/api/v1/namespaces/a05/configmaps?watch=true&resourceVersion={old}")).await;
    assert_eq!(watch.status, 200);
    let error = watch.next().await.unwrap();
    assert_eq!(error["type"], "ERROR");
    assert_eq!(error["object"]["code"], 410);
    assert_eq!(error["object"]["reason"], "Expired");
    assert!(watch.next().await.is_none(), "the stream closes after the ERROR");

    // kube-rs: a watcher that falls behind (its selector hides the writes) gets WatchError, then relists.
    let selected: Api<ConfigMap> = Api::namespaced(client.clone(), "a05");
    let mut stream = watcher(selected, watcher::Config::default().labels("pick=me").disable_bookmarks()).boxed();
    within("the first list", async {
        while !matches!(stream.try_next().await.unwrap(), Some(watcher::Event::InitDone)) {}
    })
    .await;
    for i in 0..3 {
        api.create(&PostParams::default(), &config_map(&format!("other-{i}"), json!({}), json!({}))).await.unwrap();
    }
    server.faults().compact();
    server.faults().close_all_watches();
    within("a WatchError then Init", async {
        loop {
            match stream.next().await.unwrap() {
                Err(watcher::Error::WatchError(status)) => {
                    assert_eq!(status.code, 410);
                    break;
                }
                Err(other) => panic!("unexpected error {other}"),
                Ok(_) => {}
            }
        }
        assert!(matches!(stream.next().await.unwrap(), Ok(watcher::Event::Init)));
    })
    .await;
}

#[tokio::test]
async fn a06_every_event_is_one_line_and_bookmarks_carry_their_type() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a06", &["a"]).await;
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut watch = RawWatch::open_with(
        &client,
        &format!("/api/v1/namespaces/a06/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=4&resourceVersion={rv}"),
        &[("accept-encoding", "gzip")],
    )
    .await;
    assert!(watch.headers.get("content-encoding").is_none(), "watches are never compressed");
    api.create(&PostParams::default(), &config_map("b", json!({}), json!({"big": "x".repeat(100_000)}))).await.unwrap();
    let mut bookmark = None;
    let mut lines = 0;
    while let Some(line) = watch.next().await {
        lines += 1;
        if line["type"] == "BOOKMARK" {
            bookmark = Some(line);
        }
    }
    let bookmark = bookmark.expect("a bookmark before the timeout");
    assert_eq!(bookmark["object"]["kind"], "ConfigMap");
    assert_eq!(bookmark["object"]["apiVersion"], "v1");
    assert!(bookmark["object"]["metadata"]["resourceVersion"].is_string());
    let text = String::from_utf8(watch.received.clone()).unwrap();
    assert!(text.ends_with('\n'));
    assert_eq!(text.lines().count(), lines);
    for line in text.lines() {
        serde_json::from_str::<Value>(line).expect("each line is one JSON object");
    }
}

#[tokio::test]
async fn a07_the_watch_ends_at_its_timeout_and_the_watcher_resumes_without_relisting() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a07", &["a"]).await;
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut raw_watch = RawWatch::open(
        &client,
        &format!("/api/v1/namespaces/a07/configmaps?watch=true&timeoutSeconds=2&resourceVersion={rv}"),
    )
    .await;
    assert!(raw_watch.next().await.is_none(), "the stream closes cleanly at the timeout");

    let mut stream = watcher(api.clone(), watcher::Config::default().timeout(2)).boxed();
    let mut inits = 0;
    let mut seen = std::collections::BTreeSet::new();
    let writer = tokio::spawn({
        let api = api.clone();
        async move {
            for i in 0..6 {
                tokio::time::sleep(Duration::from_millis(900)).await;
                api.create(&PostParams::default(), &config_map(&format!("gap-{i}"), json!({}), json!({})))
                    .await
                    .unwrap();
            }
        }
    });
    within("every write during the gaps", async {
        while seen.len() < 6 {
            match stream.try_next().await.unwrap().unwrap() {
                watcher::Event::Init => inits += 1,
                watcher::Event::Apply(cm) => {
                    seen.insert(cm.metadata.name.unwrap());
                }
                _ => {}
            }
        }
    })
    .await;
    writer.await.unwrap();
    assert_eq!(inits, 1, "re-watching after a timeout does not relist");
    assert!(server.metrics().count(|k| k.verb == memory_apiserver::Verb::Watch && k.resource == "configmaps") >= 3);
}

#[tokio::test]
async fn a08_a_filtered_watcher_gets_bookmarks_past_unrelated_writes() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a08", &[]).await;
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut watch = RawWatch::open(
        &client,
        &format!("/api/v1/namespaces/a08/configmaps?watch=true&labelSelector=pick%3Dme&allowWatchBookmarks=true&resourceVersion={rv}"),
    )
    .await;
    let unrelated = api.create(&PostParams::default(), &config_map("unrelated", json!({}), json!({}))).await.unwrap();
    let unrelated_rv: u64 = unrelated.metadata.resource_version.unwrap().parse().unwrap();
    within("a bookmark past the unrelated write", async {
        loop {
            let line = watch.next().await.unwrap();
            assert_eq!(line["type"], "BOOKMARK", "nothing but bookmarks reaches this watcher");
            if rv_of(&line["object"]) >= unrelated_rv {
                break;
            }
        }
    })
    .await;

    // kube-rs: after a bookmark, compaction and a re-watch cost no relist. The watcher is driven all along, so
    // it reads the bookmarks as they come.
    let selected: Api<ConfigMap> = Api::namespaced(client.clone(), "a08");
    let (events, mut received) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut stream = watcher(selected, watcher::Config::default().labels("pick=me")).boxed();
        while let Some(item) = stream.next().await {
            if events.send(item.map_err(|e| e.to_string())).is_err() {
                return;
            }
        }
    });
    within("the first list", async {
        while !matches!(received.recv().await.unwrap(), Ok(watcher::Event::InitDone)) {}
    })
    .await;
    let metrics = server.metrics();
    let watches = metrics.count(|k| k.verb == memory_apiserver::Verb::Watch);
    eventually("the watcher's watch is open", || {
        let metrics = metrics.clone();
        async move { metrics.count(|k| k.verb == memory_apiserver::Verb::Watch) > watches }
    })
    .await;
    for i in 0..3 {
        api.create(&PostParams::default(), &config_map(&format!("other-{i}"), json!({}), json!({}))).await.unwrap();
    }
    // Bookmarks go out every second; a few of them put the watcher past the writes.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let faults = server.faults();
    faults.compact();
    faults.close_all_watches();
    api.create(&PostParams::default(), &config_map("picked", json!({"pick": "me"}), json!({}))).await.unwrap();
    within("the picked object, without an error or relist", async {
        loop {
            match received.recv().await.unwrap() {
                Ok(watcher::Event::Apply(cm)) if cm.metadata.name.as_deref() == Some("picked") => break,
                Ok(watcher::Event::Init) => panic!("the watcher relisted"),
                Err(error) => panic!("the watcher failed: {error}"),
                Ok(_) => {}
            }
        }
    })
    .await;
    driver.abort();
}

#[tokio::test]
async fn a09_selector_transitions_are_added_and_deleted_with_the_old_body() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a09", &["x"]).await;
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut watch = RawWatch::open(
        &client,
        &format!("/api/v1/namespaces/a09/configmaps?watch=true&labelSelector=a%3Db&resourceVersion={rv}"),
    )
    .await;
    api.patch("x", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}))).await.unwrap();
    let added = watch.next_event().await.unwrap();
    assert_eq!(added["type"], "ADDED");
    let moved = api
        .patch("x", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "c"}}})))
        .await
        .unwrap();
    let deleted = watch.next_event().await.unwrap();
    assert_eq!(deleted["type"], "DELETED");
    assert_eq!(deleted["object"]["metadata"]["labels"]["a"], "b", "the previous body");
    assert_eq!(
        deleted["object"]["metadata"]["resourceVersion"].as_str(),
        moved.metadata.resource_version.as_deref(),
        "at the new RV"
    );
}

#[tokio::test]
async fn a10_streaming_lists_end_their_initial_events_with_a_bookmark() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a10", &["a", "b", "c"]).await;
    let mut watch = RawWatch::open(
        &client,
        "/api/v1/namespaces/a10/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true",
    )
    .await;
    for _ in 0..3 {
        assert_eq!(watch.next().await.unwrap()["type"], "ADDED");
    }
    let end = watch.next().await.unwrap();
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
    api.create(&PostParams::default(), &config_map("d", json!({}), json!({}))).await.unwrap();
    let live = watch.next_event().await.unwrap();
    assert_eq!((live["type"].as_str(), live["object"]["metadata"]["name"].as_str()), (Some("ADDED"), Some("d")));

    let invalid = raw(
        &client,
        "GET",
        "/api/v1/namespaces/a10/configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true",
        None,
        Value::Null,
    )
    .await;
    assert_eq!(invalid.status, 422);
    assert_eq!(invalid.json()["reason"], "Invalid");

    let mut stream = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let mut applied = 0;
    within("InitDone from a streaming list", async {
        loop {
            match stream.try_next().await.unwrap().unwrap() {
                watcher::Event::InitApply(_) => applied += 1,
                watcher::Event::InitDone => break,
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(applied, 4);
    assert_eq!(server.metrics().count(|k| k.verb == memory_apiserver::Verb::List && k.resource == "configmaps"), 0);
}

#[tokio::test]
async fn a11_a_deleted_event_carries_a_newer_resource_version_than_the_last_modification() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a11", &["x"]).await;
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    api.patch("x", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await.unwrap();
    api.delete("x", &DeleteParams::default()).await.unwrap();
    let mut watch =
        RawWatch::open(&client, &format!("/api/v1/namespaces/a11/configmaps?watch=true&resourceVersion={rv}")).await;
    let modified = watch.next_event().await.unwrap();
    let deleted = watch.next_event().await.unwrap();
    assert_eq!((modified["type"].as_str(), deleted["type"].as_str()), (Some("MODIFIED"), Some("DELETED")));
    assert!(rv_of(&deleted["object"]) > rv_of(&modified["object"]));
}

#[tokio::test]
async fn a12_a_watch_from_the_future_stays_quiet_until_the_store_gets_there() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a12", &[]).await;
    let now: u64 = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap().parse().unwrap();
    let future = now + 3;
    let mut watch = RawWatch::open(
        &client,
        &format!("/api/v1/namespaces/a12/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion={future}"),
    )
    .await;
    assert_eq!(watch.status, 200);
    assert!(watch.poll_quietly(Duration::from_millis(1500)).await.is_none(), "no event, error or bookmark yet");
    for i in 0..5 {
        api.create(&PostParams::default(), &config_map(&format!("c{i}"), json!({}), json!({}))).await.unwrap();
    }
    let first = watch.next_event().await.unwrap();
    assert_eq!(first["type"], "ADDED");
    assert!(rv_of(&first["object"]) > future);
}

#[tokio::test]
async fn a13_metadata_watches_send_partial_objects_and_controller_owns_works() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "a13", &["parent"]).await;
    let mut watch = RawWatch::open_with(
        &client,
        "/api/v1/namespaces/a13/configmaps?watch=true&resourceVersion=0",
        &[("accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")],
    )
    .await;
    let event = watch.next_event().await.unwrap();
    assert_eq!(event["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(event["object"]["apiVersion"], "meta.k8s.io/v1");
    assert!(event["object"].get("data").is_none());

    let parent = api.get("parent").await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "a13");
    let owned: Secret = serde_json::from_value(json!({"metadata": {"name": "child", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": parent.metadata.uid, "controller": true}]}}))
    .unwrap();
    secrets.create(&PostParams::default(), &owned).await.unwrap();
    let reconciles = Arc::new(AtomicUsize::new(0));
    let controller = Controller::new(api.clone(), watcher::Config::default())
        .owns(secrets.clone(), watcher::Config::default())
        .run(
            |_cm: Arc<ConfigMap>, count: Arc<AtomicUsize>| async move {
                count.fetch_add(1, Ordering::SeqCst);
                Ok::<_, kube::Error>(Action::await_change())
            },
            |_, _, _| Action::await_change(),
            reconciles.clone(),
        )
        .for_each(|_| async {});
    let running = tokio::spawn(controller);
    eventually("the first reconcile", || async { reconciles.load(Ordering::SeqCst) >= 1 }).await;
    let before = reconciles.load(Ordering::SeqCst);
    secrets
        .patch("child", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})))
        .await
        .unwrap();
    eventually("a reconcile of the owner", || async { reconciles.load(Ordering::SeqCst) > before }).await;
    running.abort();
}

#[tokio::test]
async fn a14_a_slow_consumer_is_closed_without_an_error_and_kube_rs_recovers() {
    let server = server_with(|c| c.watch_buffer = 5).await;
    let client = server.client();
    let api = config_maps(&client, "a14", &[]).await;
    let api_for_driver = api.clone();
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut watch =
        RawWatch::open(&client, &format!("/api/v1/namespaces/a14/configmaps?watch=true&resourceVersion={rv}")).await;
    // 60 events of 800 kB are more than the socket buffers and the client hold: the server has to stop writing.
    let big = json!({"blob": "x".repeat(800_000)});
    for i in 0..60 {
        api.create(&PostParams::default(), &config_map(&format!("c{i}"), json!({}), big.clone())).await.unwrap();
    }
    let mut received = 0;
    while let Some(line) = watch.next().await {
        assert_ne!(line["type"], "ERROR", "a slow consumer gets no ERROR");
        received += 1;
    }
    assert!(received < 60, "the watch was cut off ({received} events)");

    // A reflector whose consumer stalls falls behind the same way and still converges. The stream is driven
    // through a channel of one item: while the test reads nothing, the reflector reads nothing either.
    let (reader, writer) = kube::runtime::reflector::store();
    let (items, mut consumed) = tokio::sync::mpsc::channel(1);
    let driver = tokio::spawn(async move {
        let mut stream = kube::runtime::reflector(writer, watcher(api_for_driver, watcher::Config::default())).boxed();
        while let Some(item) = stream.next().await {
            if items.send(item.map(|_| ()).map_err(|e| e.to_string())).await.is_err() {
                return;
            }
        }
    });
    within("the first list", async { while consumed.recv().await.unwrap().is_ok() && reader.state().len() < 60 {} })
        .await;
    let metrics_handle = server.metrics();
    eventually("the reflector's watch is open", || {
        let metrics = metrics_handle.clone();
        async move { metrics.count(|k| k.verb == memory_apiserver::Verb::Watch) >= 2 }
    })
    .await;
    // 60 more of 800 kB (48 MB) exceed what loopback sockets can hold (tcp_rmem's maximum is 32 MiB on some
    // hosts, plus the send buffer): 40 were sometimes absorbed whole.
    for i in 60..120 {
        api.create(&PostParams::default(), &config_map(&format!("c{i}"), json!({}), big.clone())).await.unwrap();
    }
    let drain = tokio::spawn(async move { while consumed.recv().await.is_some() {} });
    eventually("the reflector holds all 120 objects", || {
        let reader = reader.clone();
        async move { reader.state().len() == 120 }
    })
    .await;
    drain.abort();
    driver.abort();
    let metrics = raw(&client, "GET", "/_dev/metrics", None, Value::Null).await.json();
    assert!(
        metrics["slowWatchersClosed"].as_u64().unwrap() >= 2,
        "both the raw watch and the reflector's fell behind: {metrics}"
    );
}

#[tokio::test]
async fn a_list_at_a_future_resource_version_times_out_with_504() {
    let server = server_with(|c| c.future_rv_wait = Duration::from_millis(200)).await;
    let client = server.client_with(|c| c.default_retry = false);
    let api = config_maps(&client, "future", &["a"]).await;
    let now: u64 = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap().parse().unwrap();
    let response = raw(
        &client,
        "GET",
        &format!("/api/v1/namespaces/future/configmaps?resourceVersion={}", now + 100),
        None,
        Value::Null,
    )
    .await;
    assert_eq!(response.status, 504);
    let status = response.json();
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(status["details"]["causes"][0]["reason"], "ResourceVersionTooLarge");
    assert_eq!(response.headers.get("retry-after").map(|v| v.to_str().unwrap()), Some("1"));
    let exact = raw(
        &client,
        "GET",
        &format!("/api/v1/namespaces/future/configmaps?resourceVersion={now}&resourceVersionMatch=Exact"),
        None,
        Value::Null,
    )
    .await;
    assert_eq!(exact.status, 200);
    let unmatched = raw(
        &client,
        "GET",
        "/api/v1/namespaces/future/configmaps?resourceVersionMatch=NotOlderThan",
        None,
        Value::Null,
    )
    .await;
    assert_eq!(unmatched.status, 422);
}

#[tokio::test]
async fn a_bookmark_precedes_the_watch_deadline() {
    let server = server_with(|c| c.bookmark_interval = Duration::from_secs(600)).await;
    let client = server.client();
    let api = config_maps(&client, "deadline", &[]).await;
    let rv = api.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut watch = RawWatch::open(&client, &format!("/api/v1/namespaces/deadline/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=4&resourceVersion={rv}")).await;
    let bookmark = watch.next().await.expect("a bookmark before the end");
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert!(watch.next().await.is_none(), "then the stream ends at the deadline");
    let mut silent = RawWatch::open(
        &client,
        &format!("/api/v1/namespaces/deadline/configmaps?watch=true&timeoutSeconds=3&resourceVersion={rv}"),
    )
    .await;
    assert!(silent.next().await.is_none(), "no bookmark without allowWatchBookmarks");
}

#[tokio::test]
async fn a_watch_without_a_resource_version_starts_with_the_current_objects() {
    let server = server().await;
    let client = server.client();
    let api = config_maps(&client, "unset", &["a", "b"]).await;
    let mut watch = RawWatch::open(&client, "/api/v1/namespaces/unset/configmaps?watch=true").await;
    let mut added = vec![];
    for _ in 0..2 {
        let event = watch.next().await.unwrap();
        assert_eq!(event["type"], "ADDED");
        added.push(event["object"]["metadata"]["name"].as_str().unwrap().to_owned());
    }
    assert_eq!(added, vec!["a", "b"]);
    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(watch.next().await.unwrap()["type"], "DELETED");
}
