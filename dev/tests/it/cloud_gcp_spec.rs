//! Issue 28: the GCP emulator held to the published definition of what it serves (the Compute v1 discovery document,
//! the subset in `dev/cloud-emulators/src/specs/gcp-compute-v1.subset.json`). Requests the definition refuses are refused over
//! HTTP, as Compute refuses them and with nothing changed; the provider's own requests pass and the emulator's answers
//! fit the definition (also checked after the conformance suite, `cloud_gcp`).

use crate::cloud_gcp::{PROJECT, ZONE, mig, provider, setup};
use bytes::Bytes;
use cloud::{CloudProvider, Creation};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// One request to the emulator: its status and JSON body.
async fn send(url: &str, method: &str, path: &str, bearer: Option<&str>, body: Value) -> (u16, Value) {
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let body = if body.is_null() { Bytes::new() } else { Bytes::from(body.to_string()) };
    let mut request = http::Request::builder().method(method).uri(format!("{url}{path}"));
    request = request.header(http::header::CONTENT_TYPE, "application/json");
    if let Some(bearer) = bearer {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {bearer}"));
    }
    let answer = client.request(request.body(Full::new(body)).expect("a request")).await.expect("an answer");
    let status = answer.status().as_u16();
    let bytes = answer.into_body().collect().await.expect("a body").to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn message(body: &Value) -> &str {
    body.pointer("/error/message").and_then(Value::as_str).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emulator_refuses_what_the_discovery_document_refuses_and_the_providers_requests_pass() {
    let (cluster, emulator) = setup(0, 1).await;
    let url = emulator.url().to_owned();
    let refresh = emulator.adc_json()["refresh_token"].clone();
    let (status, token) = send(&url, "POST", "/token", None, json!({"refresh_token": refresh})).await;
    assert_eq!(status, 200, "{token}");
    let bearer = token["access_token"].as_str().expect("a token").to_owned();
    let bearer = Some(bearer.as_str());
    let workers = format!("/compute/v1/projects/{PROJECT}/zones/{ZONE}/instanceGroupManagers/workers");
    let before = emulator.instance_names(ZONE, "workers");

    // A misspelt field: `nmae` is no field of PerInstanceConfig; nothing is created.
    let create = format!("{workers}/createInstances");
    let (status, body) = send(&url, "POST", &create, bearer, json!({"instances": [{"nmae": "workers-x"}]})).await;
    assert_eq!(status, 400, "{body}");
    assert!(message(&body).contains("Unknown name \"nmae\" at 'instances[0]': Cannot find field."), "{body}");
    // A query parameter the method does not declare (`requestID` for `requestId`).
    let (status, body) = send(&url, "POST", &format!("{create}?requestID=1"), bearer, json!({"instances": []})).await;
    assert_eq!(status, 400, "{body}");
    assert!(message(&body).contains("Cannot bind query parameter. Field 'requestID'"), "{body}");
    // A missing required parameter: instanceTemplates.insert requires the template's name.
    let templates = format!("/compute/v1/projects/{PROJECT}/global/instanceTemplates");
    let unnamed = json!({"properties": {"machineType": "n2d-standard-4"}});
    let (status, body) = send(&url, "POST", &templates, bearer, unnamed).await;
    assert_eq!((status, message(&body)), (400, "Required field 'resource.name' not specified"), "{body}");
    // A value outside its type or pattern.
    let (status, body) =
        send(&url, "POST", &format!("{workers}/listManagedInstances?maxResults=ten"), bearer, Value::Null).await;
    assert_eq!(status, 400, "{body}");
    let bad_name = format!("/compute/v1/projects/{PROJECT}/zones/{ZONE}/instances/Not_A_Name");
    assert_eq!(send(&url, "GET", &bad_name, bearer, Value::Null).await.0, 400);
    // Another API version than the document's (v1) is not served.
    let beta = workers.replace("/compute/v1/", "/compute/v2/");
    assert_eq!(send(&url, "GET", &beta, bearer, Value::Null).await.0, 404);
    assert_eq!(emulator.instance_names(ZONE, "workers"), before, "a refused request changed the group");

    // The same request as the definition has it is served.
    let (status, body) = send(&url, "POST", &create, bearer, json!({"instances": [{"name": "workers-spec"}]})).await;
    assert_eq!(status, 200, "{body}");
    // The provider's own requests pass: a creation, its state, its deletion.
    let provider = provider(&emulator, emulator.adc_json()).await;
    let Creation::Created(instance) = provider.create_instance(&mig("workers")).await.expect("created") else {
        panic!("GCP creations are named in the answer")
    };
    provider.instance_state(&instance.provider_id).await.expect("its state");
    provider.group_image(&mig("workers")).await.expect("the group's image");
    provider.delete_instance(&mig("workers"), &instance.provider_id).await.expect("deleted");
    assert_eq!(emulator.spec_violations(), Vec::<String>::new(), "the emulator answered outside the definition");
    emulator.shutdown();
    cluster.shutdown().await;
}
