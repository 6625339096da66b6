//! Server-side field validation (`?fieldValidation=Strict|Warn|Ignore`) of creates, updates and patches, for
//! built-in kinds and custom resources, with upstream's status codes, messages and `Warning` headers.

use crate::common;

use common::*;
use http_body_util::BodyExt;
use kube::Client;
use serde_json::{Value, json};

struct Reply {
    status: u16,
    warnings: Vec<String>,
    body: Value,
}

/// Sends `body` exactly as given (duplicate keys stay).
async fn send(client: &Client, method: &str, uri: &str, content_type: &str, body: &str) -> Reply {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::CONTENT_TYPE, content_type)
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .unwrap();
    let response = client.send(request).await.unwrap();
    let status = response.status().as_u16();
    let warnings =
        response.headers().get_all(http::header::WARNING).iter().map(|v| v.to_str().unwrap().to_owned()).collect();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply { status, warnings, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
}

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";
const BAD_CONFIG_MAP: &str = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "name": "cm"}, "data": {"a": "b"}, "datta": {}}"#;

#[tokio::test]
async fn creates_of_built_ins_fail_warn_or_pass_as_the_directive_says() {
    let server = server().await;
    let client = server.client();

    let strict =
        send(&client, "POST", &format!("{CONFIG_MAPS}?fieldValidation=Strict"), "application/json", BAD_CONFIG_MAP)
            .await;
    assert_eq!(strict.status, 400);
    assert_eq!(strict.body["reason"], "BadRequest");
    assert_eq!(
        strict.body["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: duplicate field \"metadata.name\", unknown field \"datta\""
    );

    // The default is Warn: the object is created (the last duplicate wins, the unknown field is dropped).
    let warned = send(&client, "POST", CONFIG_MAPS, "application/json", BAD_CONFIG_MAP).await;
    assert_eq!(warned.status, 201, "{}", warned.body);
    assert_eq!(
        warned.warnings,
        vec![r#"299 - "duplicate field \"metadata.name\"""#, r#"299 - "unknown field \"datta\"""#]
    );
    assert_eq!(warned.body["metadata"]["name"], "cm");
    assert!(warned.body.get("datta").is_none());

    let ignored = send(
        &client,
        "POST",
        &format!("{CONFIG_MAPS}?fieldValidation=Ignore"),
        "application/json",
        &BAD_CONFIG_MAP.replace("\"cm\"", "\"cm2\""),
    )
    .await;
    assert_eq!(ignored.status, 201);
    assert!(ignored.warnings.is_empty());

    let unsupported =
        send(&client, "POST", &format!("{CONFIG_MAPS}?fieldValidation=strict"), "application/json", "{}").await;
    assert_eq!(unsupported.status, 422);
    assert_eq!(
        unsupported.body["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
    );

    // A clean body has nothing to say under Strict.
    let clean = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok"}, "data": {"a": "b"}}"#;
    let created =
        send(&client, "POST", &format!("{CONFIG_MAPS}?fieldValidation=Strict"), "application/json", clean).await;
    assert_eq!(created.status, 201);
    assert!(created.warnings.is_empty());

    // Updates are decoded the same way.
    let mut update = created.body.clone();
    update["data"]["c"] = json!("d");
    update["spec"] = json!({"x": 1});
    let put = send(
        &client,
        "PUT",
        &format!("{CONFIG_MAPS}/ok?fieldValidation=Strict"),
        "application/json",
        &update.to_string(),
    )
    .await;
    assert_eq!(put.status, 400);
    assert_eq!(
        put.body["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"spec\""
    );
}

#[tokio::test]
async fn patches_are_checked_on_their_result_and_their_body() {
    let server = server().await;
    let client = server.client();
    let clean = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}, "data": {"a": "b"}}"#;
    assert_eq!(send(&client, "POST", CONFIG_MAPS, "application/json", clean).await.status, 201);
    let uri = format!("{CONFIG_MAPS}/p?fieldValidation=Strict");

    let merge =
        send(&client, "PATCH", &uri, "application/merge-patch+json", r#"{"data": {"c": "d"}, "bogus": 1}"#).await;
    assert_eq!(merge.status, 422);
    let message = merge.body["message"].as_str().unwrap();
    assert!(message.starts_with(" \"\" is invalid: patch: Invalid value: \"{"), "{message}");
    assert!(message.ends_with("\": strict decoding error: unknown field \"bogus\""), "{message}");
    assert_eq!(merge.body["details"]["causes"][0]["field"], "patch");

    let strategic =
        send(&client, "PATCH", &uri, "application/strategic-merge-patch+json", r#"{"data": {"c": "d", "c": "e"}}"#)
            .await;
    assert_eq!(strategic.status, 422);
    assert_eq!(
        strategic.body["message"],
        " \"\" is invalid: patch: Invalid value: \"map[data:map[c:e]]\": strict decoding error: duplicate field \"data.c\""
    );

    let json_patch = send(
        &client,
        "PATCH",
        &uri,
        "application/json-patch+json",
        r#"[{"op": "add", "path": "/data/c", "value": "d", "valeu": 1}]"#,
    )
    .await;
    assert_eq!(json_patch.status, 422);
    assert!(
        json_patch.body["message"]
            .as_str()
            .unwrap()
            .ends_with("strict decoding error: json patch unknown field \"[0].valeu\""),
        "{}",
        json_patch.body
    );

    // Warn (the default) applies the patch and says what it dropped.
    let warned = send(
        &client,
        "PATCH",
        &format!("{CONFIG_MAPS}/p"),
        "application/merge-patch+json",
        r#"{"data": {"c": "d"}, "bogus": 1}"#,
    )
    .await;
    assert_eq!(warned.status, 200);
    assert_eq!(warned.warnings, vec![r#"299 - "unknown field \"bogus\"""#]);
    assert_eq!(warned.body["data"], json!({"a": "b", "c": "d"}));
}

#[tokio::test]
async fn custom_resources_report_pruned_fields_and_unknown_metadata() {
    let server = server().await;
    let client = server.client();
    widgets(&client, "default").await;
    let uri = "/apis/example.com/v1/namespaces/default/widgets";
    let body = r#"{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labelz": {}},
        "spec": {"color": "red", "colour": "blue", "color": "blue"}}"#;
    let strict = send(&client, "POST", &format!("{uri}?fieldValidation=Strict"), "application/json", body).await;
    assert_eq!(strict.status, 400, "{}", strict.body);
    assert_eq!(
        strict.body["message"],
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: duplicate field \"spec.color\", unknown field \"metadata.labelz\", unknown field \"spec.colour\""
    );
    let warned = send(&client, "POST", uri, "application/json", body).await;
    assert_eq!(warned.status, 201, "{}", warned.body);
    assert_eq!(warned.warnings.len(), 3);
    assert_eq!(warned.body["spec"], json!({"color": "blue", "size": 3}));

    let patched = send(
        &client,
        "PATCH",
        &format!("{uri}/w?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"spec": {"shade": "dark"}}"#,
    )
    .await;
    assert_eq!(patched.status, 422);
    assert!(patched.body["message"].as_str().unwrap().ends_with("strict decoding error: unknown field \"spec.shade\""));
}

#[tokio::test]
async fn an_eviction_body_with_unknown_fields_is_warned_about_by_default() {
    let server = server().await;
    let client = server.client();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client.clone(), "default");
    pods.create(&kube::api::PostParams::default(), &pod("victim", json!({}), None)).await.unwrap();
    // kube-rs sends the delete options under `delete_options`, which policy/v1 Eviction does not have.
    let body =
        r#"{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "victim"}, "delete_options": {}}"#;
    let evicted =
        send(&client, "POST", "/api/v1/namespaces/default/pods/victim/eviction", "application/json", body).await;
    assert_eq!(evicted.status, 201, "{}", evicted.body);
    assert_eq!(evicted.warnings, vec![r#"299 - "unknown field \"delete_options\"""#]);
}
