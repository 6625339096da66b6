//! The reconciler's heartbeat, with paused time against a fake API server: an idle reconciler
//! stays live for as long as nothing happens (and plans nothing meanwhile), and one blocked in a
//! write the API server never answers makes the process not live.

use controller::drain::{DrainContext, Drains};
use controller::events::Events;
use controller::executor::Executor;
use controller::leadership::Leadership;
use controller::nodes::SlimNode;
use controller::reconciler::{self, Reconciler};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::health::Health;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

/// Answers the NodeVersion writes and Event creates of a reconcile, or leaves status writes
/// unanswered while `hang` is set.
#[derive(Default)]
struct FakeApi {
    hang: AtomicBool,
    status_writes: AtomicUsize,
}

impl FakeApi {
    async fn handle(&self, request: Request<kube::client::Body>) -> Response<kube::client::Body> {
        let (method, path) = (request.method().clone(), request.uri().path().to_owned());
        let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let reply = |status: StatusCode, body: serde_json::Value| {
            let mut response = Response::new(kube::client::Body::from(body.to_string().into_bytes()));
            *response.status_mut() = status;
            response
        };
        match method {
            Method::PATCH if path.ends_with("/status") => {
                self.status_writes.fetch_add(1, Ordering::SeqCst);
                if self.hang.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                reply(StatusCode::OK, version())
            }
            // The finalizer the reconciler adds before it acts.
            Method::PATCH if path.ends_with("/nodeversions/constellation-version") => reply(StatusCode::OK, version()),
            Method::POST => reply(StatusCode::CREATED, serde_json::from_slice(&body).unwrap_or_default()),
            _ => reply(StatusCode::NOT_FOUND, json!({"kind": "Status", "code": 404, "reason": "NotFound"})),
        }
    }
}

fn version() -> serde_json::Value {
    json!({"apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
           "metadata": {"name": "constellation-version", "generation": 1, "resourceVersion": "1"},
           "spec": {"image": "v2"}})
}

fn store_of<K>(objects: Vec<K>) -> Store<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, mut writer) = reflector::store::<K>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    // The writer must outlive the test for the store to stay ready.
    std::mem::forget(writer);
    store
}

#[tokio::test(start_paused = true)]
async fn an_idle_reconciler_stays_live_and_one_blocked_in_a_write_is_reported_stuck() {
    let api = Arc::new(FakeApi::default());
    let service = {
        let api = api.clone();
        tower::service_fn(move |request| {
            let api = api.clone();
            async move { Ok::<_, std::convert::Infallible>(api.handle(request).await) }
        })
    };
    let client = Client::new(service, "default");
    let leadership = Leadership::new();
    leadership.begin(tokio::time::Instant::now() + Duration::from_secs(86_400));
    let nodes: Store<SlimNode> = store_of(vec![]);
    let versions: Store<NodeVersion> = store_of(vec![serde_json::from_value(version()).unwrap()]);
    let trigger = Arc::new(Notify::new());
    let metrics = controller::Metrics::default();
    let events = Events::start(client.clone(), None, leadership.clone());
    let drains = Arc::new(Drains::new(DrainContext {
        eviction_client: client.clone(),
        watch_client: client.clone(),
        nodes: nodes.clone(),
        node_changes: watch::channel(0).1,
        pdb_changes: watch::channel(0).1,
        reconcile: trigger.clone(),
        metrics: metrics.clone(),
    }));
    let executor = Executor::new(Api::all(client.clone()), events.clone(), drains.clone(), metrics.clone());
    let reconciler = Reconciler::new(
        nodes,
        versions,
        Api::all(client.clone()),
        executor,
        drains,
        metrics,
        None,
        trigger.clone(),
        events,
    );
    let health = Health::default();
    let heartbeat = health.heartbeat("reconciler", reconciler::STUCK_AFTER);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(reconciler.run(leadership, heartbeat, shutdown.clone()));

    // Idle for an hour: live throughout, and nothing planned or written but the first reconcile's
    // two status writes (the valid spec recorded in status.lastValidSpec, then the status).
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(health.live(), Ok(()));
    }
    assert_eq!(api.status_writes.load(Ordering::SeqCst), 2);

    // A status write the API server never answers blocks the reconcile.
    api.hang.store(true, Ordering::SeqCst);
    trigger.notify_one();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(api.status_writes.load(Ordering::SeqCst), 3);
    assert_eq!(health.live(), Ok(()), "not stuck yet");
    // The last beat was at most a tick before the trigger.
    tokio::time::sleep(reconciler::STUCK_AFTER + reconciler::HEARTBEAT_TICK).await;
    let stuck = health.live().unwrap_err();
    assert!(stuck.starts_with("reconciler: no heartbeat for"), "{stuck}");

    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap();
}
