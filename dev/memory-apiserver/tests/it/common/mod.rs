//! Helpers shared by the conformance tests: a server with fast timing, raw requests, watch-line readers and
//! polling.

#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::Client;
use kube::api::{Api, PostParams};
use memory_apiserver::{ApiServer, ApiServerConfig};
use serde_json::{Value, json};
use std::future::Future;
use std::time::Duration;

/// Generous bound for anything a test waits for; never an assertion on speed.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A server with bookmarks every second (tests that need other settings pass their own config).
pub async fn server() -> ApiServer {
    server_with(|_| {}).await
}

/// A server with adjusted settings.
pub async fn server_with(adjust: impl FnOnce(&mut ApiServerConfig)) -> ApiServer {
    let mut config = ApiServerConfig { bookmark_interval: Duration::from_secs(1), ..ApiServerConfig::default() };
    adjust(&mut config);
    ApiServer::start(config).await.expect("the test server starts")
}

/// Polls `check` until it returns true; panics after [`PATIENCE`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// Runs `future` with [`PATIENCE`] as its bound.
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A namespace.
pub async fn namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
}

/// A ConfigMap with labels and data.
pub fn config_map(name: &str, labels: Value, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": data})).unwrap()
}

/// A pod spec with one container; `node` binds it, `phase`/`ready` are set later through /status.
pub fn pod(name: &str, labels: Value, node: Option<&str>) -> Pod {
    let mut pod = json!({"metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "registry.example/app:1.0"}]}});
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    serde_json::from_value(pod).unwrap()
}

/// A raw response.
#[derive(Debug)]
pub struct Raw {
    /// HTTP status.
    pub status: u16,
    /// Headers.
    pub headers: http::HeaderMap,
    /// Body text.
    pub text: String,
}

impl Raw {
    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

/// Sends a raw request and reads the whole body.
pub async fn raw(client: &Client, method: &str, uri: &str, content_type: Option<&str>, body: Value) -> Raw {
    raw_with(client, method, uri, &[], content_type, body).await
}

/// Sends a raw request with extra headers.
pub async fn raw_with(
    client: &Client,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    content_type: Option<&str>,
    body: Value,
) -> Raw {
    let mut request = http::Request::builder().method(method).uri(uri);
    if let Some(content_type) = content_type {
        request = request.header(http::header::CONTENT_TYPE, content_type);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let bytes = if body.is_null() { Vec::new() } else { serde_json::to_vec(&body).unwrap() };
    let response = client.send(request.body(kube::client::Body::from(bytes)).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = String::from_utf8(response.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Raw { status, headers, text }
}

/// A watch read line by line from the raw HTTP body.
pub struct RawWatch {
    /// HTTP status of the watch response.
    pub status: u16,
    /// Headers of the watch response.
    pub headers: http::HeaderMap,
    body: kube::client::Body,
    buffer: BytesMut,
    /// Every byte received so far, to check the framing.
    pub received: Vec<u8>,
}

impl RawWatch {
    /// Opens a watch at `uri` (which carries `watch=true` and the parameters).
    pub async fn open(client: &Client, uri: &str) -> RawWatch {
        Self::open_with(client, uri, &[]).await
    }

    /// Opens a watch with extra headers.
    pub async fn open_with(client: &Client, uri: &str, headers: &[(&str, &str)]) -> RawWatch {
        let mut request = http::Request::builder().method("GET").uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = client.send(request.body(kube::client::Body::empty()).unwrap()).await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        RawWatch { status, headers, body: response.into_body(), buffer: BytesMut::new(), received: Vec::new() }
    }

    /// The next line as JSON, or `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(at) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Bytes = self.buffer.split_to(at + 1).freeze();
                return Some(
                    serde_json::from_slice(&line[..line.len() - 1])
                        .unwrap_or_else(|e| panic!("bad line ({e}): {line:?}")),
                );
            }
            match within("the next watch line", self.body.frame()).await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.received.extend_from_slice(&data);
                        self.buffer.extend_from_slice(&data);
                    }
                }
                Some(Err(_)) | None => {
                    assert!(self.buffer.is_empty(), "the stream ended inside a line: {:?}", self.buffer);
                    return None;
                }
            }
        }
    }

    /// The next line that is not a BOOKMARK.
    pub async fn next_event(&mut self) -> Option<Value> {
        loop {
            let line = self.next().await?;
            if line["type"] != "BOOKMARK" {
                return Some(line);
            }
        }
    }

    /// Waits up to `quiet` for a line; `None` when nothing came (the stream is still open).
    pub async fn poll_quietly(&mut self, quiet: Duration) -> Option<Option<Value>> {
        tokio::time::timeout(quiet, self.next()).await.ok()
    }
}

/// `metadata.resourceVersion` as a number.
pub fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {object}"))
}

/// A CRD `widgets.example.com/v1` (namespaced, status and scale subresources, a schema, printer columns).
pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                "additionalPrinterColumns": [
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {"name": "UpToDate", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"UpToDate\")].reason"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "required": ["color"], "properties": {
                            "color": {"type": "string", "enum": ["red", "blue"]},
                            "size": {"type": "integer", "minimum": 1, "default": 3},
                            "replicas": {"type": "integer"}
                        }},
                        "status": {"type": "object", "properties": {
                            "phase": {"type": "string"},
                            "replicas": {"type": "integer"},
                            "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                                "items": {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}, "reason": {"type": "string"}}}}
                        }}
                    }
                }}
            }]
        }
    })
}

/// Creates the Widget CRD and waits until it is established; returns a dynamic API for widgets in `namespace`.
pub async fn widgets(client: &Client, namespace: &str) -> Api<kube::api::DynamicObject> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(widget_crd()).unwrap();
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_already_exists() => {}
        Err(error) => panic!("creating the CRD failed: {error}"),
    }
    within(
        "the CRD is established",
        kube::runtime::wait::await_condition(
            crds,
            "widgets.example.com",
            kube::runtime::wait::conditions::is_crd_established(),
        ),
    )
    .await
    .unwrap();
    let resource = kube::api::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// A Widget object.
pub fn widget(name: &str, spec: Value) -> kube::api::DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}),
    )
    .unwrap()
}
