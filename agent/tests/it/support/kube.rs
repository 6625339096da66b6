//! A fake Kubernetes API for one Node, as a tower service for `kube::Client::new`: lists the
//! Node, streams its changes to watches, applies the agent's merge patches of annotations, and
//! lets the test play the controller (annotations, cordon). No I/O: works in paused time.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

type Body = BoxBody<Bytes, Infallible>;

struct State {
    node: Value,
    rv: u64,
}

/// One Node and the watches of it.
#[derive(Clone)]
pub struct FakeKube {
    state: Arc<Mutex<State>>,
    events: broadcast::Sender<String>,
}

impl FakeKube {
    /// A Ready Node `name` whose kubelet reports `boot_id`.
    pub fn new(name: &str, boot_id: &str) -> Self {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "uid-1", "resourceVersion": "1", "annotations": {}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"bootID": boot_id}}});
        let (events, _) = broadcast::channel(1024);
        FakeKube { state: Arc::new(Mutex::new(State { node, rv: 1 })), events }
    }

    /// A kube client of this API.
    pub fn client(&self) -> kube::Client {
        let fake = self.clone();
        let service = tower::service_fn(move |request| {
            let fake = fake.clone();
            async move { Ok::<_, Infallible>(fake.handle(request).await) }
        });
        kube::Client::new(service, "default")
    }

    /// The Node's annotations now.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let state = self.state.lock().unwrap();
        serde_json::from_value(state.node["metadata"]["annotations"].clone()).unwrap_or_default()
    }

    /// Changes the Node as another client would (the controller), and tells the watches.
    pub fn update(&self, change: impl FnOnce(&mut Value)) {
        let mut state = self.state.lock().unwrap();
        change(&mut state.node);
        self.modified(&mut state);
    }

    /// Sets (`Some`) or removes (`None`) annotations.
    pub fn annotate(&self, pairs: &[(&str, Option<&str>)]) {
        self.update(|node| {
            let annotations = node["metadata"]["annotations"].as_object_mut().unwrap();
            for (key, value) in pairs {
                match value {
                    Some(value) => annotations.insert((*key).to_owned(), json!(value)),
                    None => annotations.remove(*key),
                };
            }
        });
    }

    fn modified(&self, state: &mut State) {
        state.rv += 1;
        state.node["metadata"]["resourceVersion"] = json!(state.rv.to_string());
        let event = json!({"type": "MODIFIED", "object": state.node}).to_string() + "\n";
        // No watch open is fine: the next list shows the change.
        let _ = self.events.send(event);
    }

    async fn handle(&self, request: Request<kube::client::Body>) -> Response<Body> {
        let watch = request.uri().query().is_some_and(|q| q.contains("watch=true"));
        let method = request.method().clone();
        let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        match method {
            Method::GET if watch => {
                let receiver = self.events.subscribe();
                let stream = futures::stream::unfold(receiver, |mut receiver| async move {
                    loop {
                        match receiver.recv().await {
                            Ok(event) => return Some((Ok(Frame::data(Bytes::from(event))), receiver)),
                            Err(broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(broadcast::error::RecvError::Closed) => return None,
                        }
                    }
                });
                Response::new(BodyExt::boxed(StreamBody::new(stream)))
            }
            Method::GET => {
                let state = self.state.lock().unwrap();
                json_response(json!({"apiVersion": "v1", "kind": "NodeList",
                    "metadata": {"resourceVersion": state.rv.to_string()}, "items": [state.node]}))
            }
            Method::PATCH => {
                let patch: Value = serde_json::from_slice(&body).unwrap_or_default();
                let mut state = self.state.lock().unwrap();
                if let Some(changes) = patch["metadata"]["annotations"].as_object() {
                    let annotations = state.node["metadata"]["annotations"].as_object_mut().unwrap();
                    for (key, value) in changes {
                        match value {
                            Value::Null => annotations.remove(key),
                            value => annotations.insert(key.clone(), value.clone()),
                        };
                    }
                }
                self.modified(&mut state);
                json_response(state.node.clone())
            }
            _ => {
                let mut response = json_response(json!({"kind": "Status", "code": 405}));
                *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
                response
            }
        }
    }
}

fn json_response(value: Value) -> Response<Body> {
    Response::new(Full::new(Bytes::from(value.to_string())).boxed())
}
