//! The agent's heartbeat, with paused time against a fake API server: an idle agent stays live
//! for as long as nothing happens, and one blocked in a report write the API server never answers
//! makes the process not live.

use agent::host::{HostError, HostFacts, HostUpdater};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use kube::Client;
use serde_json::{Value, json};
use shared::health::Health;
use shared::protocol::BootId;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const NODE: &str = "worker-0";

/// A host that reports facts and is never asked for more here.
struct IdleHost;

impl HostUpdater for IdleHost {
    async fn facts(&self) -> Result<HostFacts, HostError> {
        Ok(HostFacts {
            os_image: "v1".into(),
            boot_id: BootId::parse("boot ID", "b0").unwrap(),
            staged_image: None,
            components_hash: None,
        })
    }
    async fn stage(&self, _: &str) -> Result<(), HostError> {
        Ok(())
    }
    async fn activate_and_reboot(&self, _: &str) -> Result<(), HostError> {
        Ok(())
    }
    async fn upgrade_kubernetes(&self, _: &agent::host::KubernetesUpgrade) -> Result<(), HostError> {
        Ok(())
    }
    async fn fetch_kubernetes(&self, _: &agent::host::KubernetesFetch) -> Result<(), HostError> {
        Ok(())
    }
    async fn discard_fetched(&self) -> Result<(), HostError> {
        Ok(())
    }
}

/// Lists the node, keeps every watch open without events, and answers report writes unless
/// `hang` is set.
#[derive(Default)]
struct FakeApi {
    hang: AtomicBool,
    patches: AtomicUsize,
}

fn node(annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": NODE, "resourceVersion": "10", "annotations": annotations},
           "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"bootID": "b0"}}})
}

type Body = BoxBody<Bytes, Infallible>;

fn json_response(value: Value) -> Response<Body> {
    Response::new(Full::new(Bytes::from(value.to_string())).boxed())
}

impl FakeApi {
    async fn handle(&self, request: Request<kube::client::Body>) -> Response<Body> {
        let watch = request.uri().query().is_some_and(|q| q.contains("watch=true"));
        let method = request.method().clone();
        let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        match method {
            Method::GET if watch => {
                let silence = futures::stream::pending::<Result<Frame<Bytes>, Infallible>>();
                Response::new(BodyExt::boxed(StreamBody::new(silence)))
            }
            Method::GET => json_response(json!({"apiVersion": "v1", "kind": "NodeList",
                                                "metadata": {"resourceVersion": "10"}, "items": [node(json!({}))]})),
            Method::PATCH => {
                self.patches.fetch_add(1, Ordering::SeqCst);
                if self.hang.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                let patch: Value = serde_json::from_slice(&body).unwrap_or_default();
                let mut written = node(patch["metadata"]["annotations"].clone());
                written["metadata"]["resourceVersion"] = json!("11");
                json_response(written)
            }
            _ => {
                let mut response = json_response(json!({"kind": "Status", "code": 405}));
                *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
                response
            }
        }
    }
}

/// Runs the agent against `api`; returns its health and how to stop it.
fn start(api: &Arc<FakeApi>) -> (Health, CancellationToken, tokio::task::JoinHandle<Result<(), agent::Error>>) {
    let service = {
        let api = api.clone();
        tower::service_fn(move |request| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.handle(request).await) }
        })
    };
    let client = Client::new(service, "default");
    let health = Health::default();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(agent::run(
        client,
        NODE.into(),
        Arc::new(IdleHost),
        agent::Metrics::default(),
        health.clone(),
        shutdown.clone(),
    ));
    (health, shutdown, task)
}

#[tokio::test(start_paused = true)]
async fn an_idle_agent_stays_live() {
    let api = Arc::new(FakeApi::default());
    let (health, shutdown, task) = start(&api);
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(health.live(), Ok(()));
    }
    assert!(health.is_ready());
    assert_eq!(api.patches.load(Ordering::SeqCst), 1, "one report, then nothing to write");
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_agent_blocked_in_a_write_that_is_never_answered_is_reported_stuck() {
    let api = Arc::new(FakeApi { hang: AtomicBool::new(true), ..Default::default() });
    let (health, shutdown, task) = start(&api);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(api.patches.load(Ordering::SeqCst), 1, "the report write is under way");
    assert_eq!(health.live(), Ok(()), "not stuck yet");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let stuck = health.live().unwrap_err();
    assert!(stuck.starts_with("agent: no heartbeat for"), "{stuck}");
    shutdown.cancel();
    task.abort();
}
