//! Issue 28: the Azure emulator held to the published definition of what it serves (Microsoft.Compute 2024-07-01,
//! the subset in `dev/cloud-emulators/src/specs/azure-compute-2024-07-01.subset.json`). Requests the definition refuses are
//! refused, as ARM refuses them and with nothing changed; the provider's own requests pass and the emulator's answers
//! fit the definition (also checked after the conformance suite, `cloud_azure`).

use crate::cloud_azure::{Azure, group};
use cloud::{CloudProvider, Creation, GroupRole};
use dev::cloud::azure::{AzureEmulator, CLIENT_ID, FEDERATED_TOKEN, RESOURCE_GROUP, SUBSCRIPTION_ID, TENANT_ID};
use http::Method;
use serde_json::{Value, json};

/// A bearer token from the emulator's token endpoint (the workload identity's client-assertion grant).
fn token(emulator: &AzureEmulator) -> String {
    let form = format!(
        "grant_type=client_credentials&client_id={CLIENT_ID}&scope=https%3A%2F%2Fmanagement.azure.com%2F.default\
         &client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer\
         &client_assertion={FEDERATED_TOKEN}"
    );
    let path = format!("/{TENANT_ID}/oauth2/v2.0/token");
    let (status, body) = emulator.exchange(&Method::POST, &path, None, form.as_bytes());
    assert_eq!(status, 200, "{body:?}");
    body.and_then(|b| b["access_token"].as_str().map(str::to_owned)).expect("a token")
}

fn code(body: &Option<Value>) -> &str {
    body.as_ref().and_then(|b| b.pointer("/error/code")).and_then(Value::as_str).unwrap_or_default()
}

fn message(body: &Option<Value>) -> &str {
    body.as_ref().and_then(|b| b.pointer("/error/message")).and_then(Value::as_str).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emulator_refuses_what_the_published_definition_refuses_and_the_providers_requests_pass() {
    let azure = Azure::start(0, &[("spec", GroupRole::Worker, 1)]).await;
    let emulator = azure.emulator.clone();
    let bearer = format!("Bearer {}", token(&emulator));
    let scale_set = format!(
        "/subscriptions/{SUBSCRIPTION_ID}/resourceGroups/{RESOURCE_GROUP}/providers/Microsoft.Compute/virtualMachineScaleSets/spec"
    );
    let send = |method: Method, path: String, body: Value| {
        let body = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
        emulator.exchange(&method, &path, Some(bearer.as_str()), &body)
    };
    let api = "api-version=2024-07-01";
    let before = emulator.instance_ids("spec");

    // A misspelt field: `capacty` is no member of `Sku`; nothing is scaled.
    let (status, body) = send(Method::PATCH, format!("{scale_set}?{api}"), json!({"sku": {"capacty": 2}}));
    assert_eq!((status, code(&body)), (400, "InvalidRequestContent"), "{body:?}");
    assert!(
        message(&body).contains("Could not find member 'capacty' on object of type 'Sku'. Path 'sku.capacty'"),
        "{body:?}"
    );
    // A value of the wrong type, and one outside a closed enum.
    let (status, body) = send(Method::PATCH, format!("{scale_set}?{api}"), json!({"sku": {"capacity": "2"}}));
    assert_eq!((status, code(&body)), (400, "InvalidRequestContent"), "{body:?}");
    let policy = json!({"properties": {"upgradePolicy": {"mode": "Sometimes"}}});
    let (status, body) = send(Method::PATCH, format!("{scale_set}?{api}"), policy);
    assert_eq!((status, code(&body)), (400, "InvalidRequestContent"), "{body:?}");
    // A missing required parameter: the body of `delete` and its `instanceIds`; nothing is deleted.
    let (status, body) = send(Method::POST, format!("{scale_set}/delete?{api}"), json!({"instanceIDs": ["0"]}));
    assert_eq!((status, code(&body)), (400, "InvalidRequestContent"), "{body:?}");
    assert!(message(&body).contains("Required property 'instanceIds' not found in JSON"), "{body:?}");
    let (status, body) = send(Method::POST, format!("{scale_set}/delete?{api}"), Value::Null);
    assert_eq!((status, code(&body)), (400, "InvalidRequestContent"), "{body:?}");
    // A query parameter outside its closed enum.
    let (status, body) = send(Method::GET, format!("{scale_set}/virtualMachines/0?{api}&$expand=all"), Value::Null);
    assert_eq!((status, code(&body)), (400, "InvalidParameter"), "{body:?}");
    // The api-version: the definition's, required.
    let (status, body) = send(Method::GET, format!("{scale_set}?api-version=2023-09-01"), Value::Null);
    assert_eq!((status, code(&body)), (400, "NoRegisteredProviderFound"), "{body:?}");
    let (status, body) = send(Method::GET, scale_set.clone(), Value::Null);
    assert_eq!((status, code(&body)), (400, "MissingApiVersionParameter"), "{body:?}");
    assert_eq!(emulator.instance_ids("spec"), before, "a refused request changed the scale set");

    // The same requests as the definition has them are served.
    let (status, body) =
        send(Method::GET, format!("{scale_set}/virtualMachines/0?{api}&$expand=instanceView"), Value::Null);
    assert_eq!(status, 200, "{body:?}");
    // The provider's own requests pass: a creation, its instance named, a deletion.
    let provider = azure.provider();
    let Creation::Pending(token) = provider.create_instance(&group("spec")).await.expect("created") else {
        panic!("Azure creations are pending")
    };
    let named = loop {
        if let Some(instance) = provider.created_instance(&group("spec"), &token).await.expect("asked") {
            break instance;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    provider.instance_state(&named.provider_id).await.expect("its state");
    provider.delete_instance(&group("spec"), &named.provider_id).await.expect("deleted");
    assert_eq!(emulator.spec_violations(), Vec::<String>::new(), "the emulator answered outside the definition");
    azure.shutdown().await;
}
