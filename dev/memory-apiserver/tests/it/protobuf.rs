//! Protobuf bodies over HTTP: content negotiation as upstream does it (protobuf for built-in kinds when preferred,
//! JSON otherwise, 406 when nothing fits), protobuf requests, responses, Status errors and watch frames.

use crate::common;

use common::*;
use http_body_util::BodyExt;
use kube::Client;
use memory_apiserver::protobuf;
use serde_json::{Value, json};

/// What client-go 1.32+ typed clients send.
const TYPED: &str = "application/vnd.kubernetes.protobuf,application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

struct Reply {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Reply {
    fn decoded(&self) -> Value {
        assert_eq!(self.content_type, PROTOBUF, "status {}: {:?}", self.status, String::from_utf8_lossy(&self.body));
        protobuf::decode(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }

    fn json(&self) -> Value {
        assert!(self.content_type.starts_with("application/json"), "{}", self.content_type);
        serde_json::from_slice(&self.body).unwrap()
    }
}

async fn send(
    client: &Client,
    method: &str,
    uri: &str,
    accept: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Reply {
    let mut request = http::Request::builder().method(method).uri(uri).header(http::header::ACCEPT, accept);
    if let Some(content_type) = content_type {
        request = request.header(http::header::CONTENT_TYPE, content_type);
    }
    let response = client.send(request.body(kube::client::Body::from(body)).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let body = response.into_body().collect().await.unwrap().to_bytes().to_vec();
    Reply { status, content_type, body }
}

fn protobuf_body(object: Value) -> Vec<u8> {
    protobuf::encode(&object).unwrap()
}

#[tokio::test]
async fn built_in_kinds_are_created_read_and_listed_in_protobuf() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "pb").await;
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "y"}},
                            "data": {"k": "v"}, "binaryData": {"b": "AAE="}});
    let created =
        send(&client, "POST", "/api/v1/namespaces/pb/configmaps", TYPED, Some(PROTOBUF), protobuf_body(config_map))
            .await;
    assert_eq!(created.status, 201);
    let object = created.decoded();
    assert_eq!((object["kind"].as_str(), object["apiVersion"].as_str()), (Some("ConfigMap"), Some("v1")));
    assert_eq!(object["data"], json!({"k": "v"}));
    assert_eq!(object["binaryData"], json!({"b": "AAE="}));
    assert_eq!(object["metadata"]["namespace"], "pb");

    let read = send(&client, "GET", "/api/v1/namespaces/pb/configmaps/a", TYPED, None, Vec::new()).await;
    assert_eq!(read.decoded()["metadata"]["uid"], object["metadata"]["uid"]);
    let as_json =
        send(&client, "GET", "/api/v1/namespaces/pb/configmaps/a", "application/json", None, Vec::new()).await;
    assert_eq!(as_json.json()["data"], json!({"k": "v"}));
    let list = send(&client, "GET", "/api/v1/namespaces/pb/configmaps?limit=5", TYPED, None, Vec::new()).await;
    let list = list.decoded();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["items"][0]["metadata"]["name"], "a");
    assert!(list["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty()));

    let updated = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "w"}});
    let put =
        send(&client, "PUT", "/api/v1/namespaces/pb/configmaps/a", TYPED, Some(PROTOBUF), protobuf_body(updated)).await;
    assert_eq!((put.status, &put.decoded()["data"]["k"]), (200, &json!("w")));

    let missing = send(&client, "GET", "/api/v1/namespaces/pb/configmaps/nope", TYPED, None, Vec::new()).await;
    assert_eq!(missing.status, 404);
    let status = missing.decoded();
    assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("NotFound")));
    assert_eq!(status["message"], "configmaps \"nope\" not found");

    let options = json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                         "preconditions": {"uid": "not-the-uid"}});
    let refused =
        send(&client, "DELETE", "/api/v1/namespaces/pb/configmaps/a", TYPED, Some(PROTOBUF), protobuf_body(options))
            .await;
    assert_eq!(refused.status, 409, "the protobuf DeleteOptions' precondition is read");
    let deleted = send(&client, "DELETE", "/api/v1/namespaces/pb/configmaps/a", TYPED, None, Vec::new()).await;
    assert_eq!((deleted.status, &deleted.decoded()["status"]), (200, &json!("Success")));
}

#[tokio::test]
async fn bodies_in_an_unknown_or_broken_format_are_refused() {
    let server = server().await;
    let client = server.client();
    let uri = "/api/v1/namespaces/default/configmaps";
    let garbage = send(&client, "POST", uri, TYPED, Some(PROTOBUF), b"{\"metadata\":{}}".to_vec()).await;
    assert_eq!(garbage.status, 400);
    assert!(garbage.decoded()["message"].as_str().unwrap().contains("does not appear to be a protobuf message"));
    let secret = protobuf_body(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}));
    let wrong_kind = send(&client, "POST", uri, TYPED, Some(PROTOBUF), secret).await;
    assert_eq!(wrong_kind.status, 400, "the envelope names another kind");
    let text = send(&client, "POST", uri, "application/json", Some("text/plain"), b"x".to_vec()).await;
    assert_eq!(text.status, 415);
    assert_eq!(
        text.json()["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json, \
         application/yaml, application/vnd.kubernetes.protobuf"
    );
}

#[tokio::test]
async fn custom_resources_are_json_only_except_as_metadata() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "crs").await;
    let api = widgets(&client, "crs").await;
    api.create(&Default::default(), &widget("w", json!({"color": "blue", "size": 1}))).await.unwrap();
    let uri = "/apis/example.com/v1/namespaces/crs/widgets/w";
    // The 406 itself is a Status, which has a protobuf form, as the client prefers.
    let refused = send(&client, "GET", uri, PROTOBUF, None, Vec::new()).await;
    assert_eq!(refused.status, 406);
    assert_eq!(
        refused.decoded()["message"],
        "only the following media types are accepted: application/json, application/yaml, \
         application/vnd.kubernetes.protobuf"
    );
    let yaml = send(&client, "GET", uri, "application/yaml", None, Vec::new()).await;
    assert_eq!((yaml.status, yaml.content_type.as_str()), (200, "application/yaml"), "custom resources have YAML");
    let fallback = send(&client, "GET", uri, TYPED, None, Vec::new()).await;
    assert_eq!(fallback.json()["kind"], "Widget");
    let metadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let partial = send(&client, "GET", uri, metadata, None, Vec::new()).await;
    let partial = partial.decoded();
    assert_eq!(
        (partial["kind"].as_str(), partial["metadata"]["name"].as_str()),
        (Some("PartialObjectMetadata"), Some("w"))
    );
    let body = protobuf::envelope("example.com/v1", "Widget", b"");
    let posted =
        send(&client, "POST", "/apis/example.com/v1/namespaces/crs/widgets", TYPED, Some(PROTOBUF), body).await;
    assert_eq!(posted.status, 415);
}

#[tokio::test]
async fn representations_must_fit_the_request() {
    let server = server().await;
    let client = server.client();
    let table_only = "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io";
    let refused = send(&client, "GET", "/api/v1/namespaces", table_only, None, Vec::new()).await;
    assert_eq!(refused.status, 406, "a Table is never protobuf");
    let single = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    let list = send(&client, "GET", "/api/v1/namespaces", single, None, Vec::new()).await;
    assert_eq!(list.status, 406);
    assert!(list.json()["message"].as_str().unwrap().starts_with("you requested PartialObjectMetadata, but"));
    let metadata_list = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let listed = send(&client, "GET", "/api/v1/namespaces", metadata_list, None, Vec::new()).await.decoded();
    assert_eq!(listed["kind"], "PartialObjectMetadataList");
    assert!(listed["items"].as_array().is_some_and(|items| items.iter().any(|i| i["metadata"]["name"] == "default")));
    let beta = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
    let table = send(&client, "GET", "/api/v1/namespaces", beta, None, Vec::new()).await.json();
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1beta1");
    let yaml_table = "application/yaml;as=Table;v=v1;g=meta.k8s.io";
    let table = send(&client, "GET", "/api/v1/namespaces", yaml_table, None, Vec::new()).await;
    assert_eq!(table.content_type, "application/yaml");
    let table: Value = yaml_serde::from_slice(&table.body).unwrap();
    assert_eq!(table["kind"], "Table", "a Table may be YAML, as upstream allows");
    // Status errors follow the client's preference, YAML included.
    let missing = send(&client, "GET", "/api/v1/namespaces/nope", "application/yaml", None, Vec::new()).await;
    assert_eq!((missing.status, missing.content_type.as_str()), (404, "application/yaml"));
    let watch = "/api/v1/namespaces?watch=true";
    let refused = send(&client, "GET", watch, "application/yaml, application/json", None, Vec::new()).await;
    assert_eq!(refused.status, 406, "YAML is negotiated first and has no stream form");
}

#[tokio::test]
async fn a_protobuf_watch_sends_length_prefixed_watch_events() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "pbw").await;
    let rv = send(&client, "GET", "/api/v1/namespaces/pbw/configmaps", "application/json", None, Vec::new())
        .await
        .json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let uri = format!("/api/v1/namespaces/pbw/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=3");
    let request = http::Request::get(uri).header(http::header::ACCEPT, TYPED).body(kube::client::Body::empty());
    let response = client.send(request.unwrap()).await.unwrap();
    assert_eq!(response.headers()[http::header::CONTENT_TYPE], "application/vnd.kubernetes.protobuf;stream=watch");
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(client.clone(), "pbw");
    api.create(&Default::default(), &config_map("a", json!({}), json!({"k": "v"}))).await.unwrap();
    api.delete("a", &Default::default()).await.unwrap();
    // The stream ends at timeoutSeconds: read it whole, then split it into frames.
    let body = within("the watch ends", response.into_body().collect()).await.unwrap().to_bytes();
    let mut frames = Vec::new();
    let mut rest = &body[..];
    while !rest.is_empty() {
        let length = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        frames.push(&rest[4..4 + length]);
        rest = &rest[4 + length..];
    }
    let events: Vec<(String, Value)> = frames.iter().map(|frame| watch_event(frame)).collect();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!((events[0].0.as_str(), &events[0].1["data"]["k"]), ("ADDED", &json!("v")));
    assert_eq!((events[1].0.as_str(), &events[1].1["metadata"]["name"]), ("DELETED", &json!("a")));
}

/// The type and object of a `WatchEvent` message: field 1 the type, field 2 a `RawExtension` whose field 1 is the
/// object's protobuf body.
fn watch_event(frame: &[u8]) -> (String, Value) {
    use protobuf::codec::{Reader, WireValue};
    let mut event = Reader::new(frame);
    let (mut event_type, mut object) = (String::new(), Value::Null);
    while let Some((tag, value)) = event.next_field().unwrap() {
        match (tag, value) {
            (1, WireValue::Bytes(text)) => event_type = String::from_utf8(text.to_vec()).unwrap(),
            (2, WireValue::Bytes(raw_extension)) => {
                let Some((1, WireValue::Bytes(body))) = Reader::new(raw_extension).next_field().unwrap() else {
                    panic!("no raw object");
                };
                object = protobuf::decode(body).unwrap();
            }
            _ => {}
        }
    }
    (event_type, object)
}
