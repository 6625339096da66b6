//! The published OpenAPI documents over HTTP (content negotiation, protobuf for client-go, CRDs appearing and
//! going as they are created and deleted) and YAML responses.

use crate::common;

use common::*;
use http_body_util::BodyExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams};
use memory_apiserver::openapi::protobuf;
use prost::Message;
use serde_json::Value;

struct Reply {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

async fn get(client: &Client, uri: &str, accept: Option<&str>) -> Reply {
    let mut request = http::Request::builder().method("GET").uri(uri);
    if let Some(accept) = accept {
        request = request.header(http::header::ACCEPT, accept);
    }
    let response = client.send(request.body(kube::client::Body::empty()).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get(http::header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes().to_vec();
    Reply { status, content_type, body }
}

const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

#[tokio::test]
async fn openapi_v2_is_json_or_the_protobuf_client_go_asks_for() {
    let server = server().await;
    let client = server.client();
    let json = get(&client, "/openapi/v2", None).await;
    assert_eq!((json.status, json.content_type.as_str()), (200, "application/json"));
    let document = json.json();
    assert_eq!(document["swagger"], "2.0");
    assert!(document["definitions"]["io.k8s.api.core.v1.Pod"].is_object());

    let proto = get(&client, "/openapi/v2", Some(PROTOBUF)).await;
    assert_eq!(proto.status, 200);
    assert_eq!(proto.content_type, "application/com.github.proto-openapi.spec.v2.v1.0+protobuf");
    let decoded = protobuf::Document::decode(proto.body.as_slice()).unwrap();
    assert_eq!(decoded, protobuf::document(&document));

    let refused = get(&client, "/openapi/v2", Some("text/html")).await;
    assert_eq!(refused.status, 406);
}

#[tokio::test]
async fn openapi_v3_follows_the_crds_the_server_serves() {
    let server = server().await;
    let client = server.client();
    let path = "apis/example.com/v1";
    let index = get(&client, "/openapi/v3", None).await.json();
    assert!(index["paths"]["api/v1"]["serverRelativeURL"].as_str().unwrap().starts_with("/openapi/v3/api/v1?hash="));
    assert!(index["paths"].get(path).is_none());
    assert_eq!(get(&client, &format!("/openapi/v3/{path}"), None).await.status, 404);

    widgets(&client, "default").await;
    let index = get(&client, "/openapi/v3", None).await.json();
    let url = index["paths"][path]["serverRelativeURL"].as_str().unwrap().to_owned();
    let document = get(&client, &url, Some("application/json")).await.json();
    let widget = &document["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(widget["x-kubernetes-group-version-kind"][0]["kind"], "Widget");
    assert_eq!(widget["properties"]["spec"]["properties"]["size"]["minimum"].as_f64(), Some(1.0));
    let patch = &document["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
    assert!(document["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/scale"].is_object());
    // The v3 protobuf form is not served: a client asking only for it is told so.
    let protobuf_only = get(&client, &url, Some("application/com.github.proto-openapi.spec.v3@v1.0+protobuf")).await;
    assert_eq!(protobuf_only.status, 406);

    // A changed CRD changes its document and the hash that names it.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = crds.get("widgets.example.com").await.unwrap();
    crd.spec.versions[0].additional_printer_columns = None;
    if let Some(schema) = crd.spec.versions[0].schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
        schema.description = Some("A widget.".into());
    }
    crds.replace("widgets.example.com", &Default::default(), &crd).await.unwrap();
    let index = get(&client, "/openapi/v3", None).await.json();
    let changed = index["paths"][path]["serverRelativeURL"].as_str().unwrap().to_owned();
    assert_ne!(changed, url);
    let document = get(&client, &changed, None).await.json();
    assert_eq!(document["components"]["schemas"]["com.example.v1.Widget"]["description"], "A widget.");

    crds.delete("widgets.example.com", &DeleteParams::default()).await.unwrap();
    eventually("the CRD's document is gone", || {
        let client = client.clone();
        async move { get(&client, "/openapi/v3", None).await.json()["paths"].get(path).is_none() }
    })
    .await;
    let v2 = get(&client, "/openapi/v2", None).await.json();
    assert!(v2["definitions"].get("com.example.v1.Widget").is_none());
}

#[tokio::test]
async fn objects_and_lists_come_as_yaml_when_asked_and_watches_do_not() {
    let server = server().await;
    let client = server.client();
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "default");
    config_maps
        .create(&Default::default(), &config_map("y", serde_json::json!({"app": "web"}), serde_json::json!({"k": "v"})))
        .await
        .unwrap();
    let object = get(&client, "/api/v1/namespaces/default/configmaps/y", Some("application/yaml")).await;
    assert_eq!((object.status, object.content_type.as_str()), (200, "application/yaml"));
    let text = String::from_utf8(object.body.clone()).unwrap();
    assert!(text.starts_with("apiVersion: v1\ndata:\n  k: v\nkind: ConfigMap\nmetadata:\n"), "{text}");
    let value: Value = yaml_serde::from_slice(&object.body).unwrap();
    assert_eq!(value["metadata"]["labels"]["app"], "web");

    let list = get(&client, "/api/v1/namespaces/default/configmaps", Some("application/yaml, application/json")).await;
    assert_eq!(list.content_type, "application/yaml");
    let value: Value = yaml_serde::from_slice(&list.body).unwrap();
    assert_eq!(value["kind"], "ConfigMapList");
    assert_eq!(value["items"][0]["metadata"]["name"], "y");
    assert!(value["metadata"]["resourceVersion"].as_str().is_some());

    let watch = get(&client, "/api/v1/namespaces/default/configmaps?watch=true", Some("application/yaml")).await;
    assert_eq!(watch.status, 406);
    // JSON stays the default.
    assert_eq!(get(&client, "/api/v1/namespaces/default/configmaps/y", None).await.content_type, "application/json");
}
