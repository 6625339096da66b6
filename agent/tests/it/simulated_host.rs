//! The simulated backend against a minimal server of the simulated-hosts contract.

use crate::support;

use agent::host::simulated::{SimulatedConfig, SimulatedHost};
use agent::host::{HostError, HostUpdater};
use http::StatusCode;
use support::simulated::{FakeDevServer, SimHost};

fn host(server: &FakeDevServer, node: &str) -> SimulatedHost {
    SimulatedHost::new(SimulatedConfig::new(&server.base_url, node)).unwrap()
}

#[tokio::test]
async fn facts_are_read_from_the_dev_server() {
    let server = FakeDevServer::start([("worker-0", SimHost::running("img-v1"))]).await;
    let facts = host(&server, "worker-0").facts().await.unwrap();
    assert_eq!(facts.os_image, "img-v1");
    assert_eq!(facts.boot_id.as_str(), "boot-0");
    assert_eq!(facts.staged_image, None);
    assert_eq!(facts.components_hash.unwrap().as_str(), format!("sha256:{}", "ab".repeat(32)));
}

#[tokio::test]
async fn stage_then_reboot_runs_the_target_after_a_new_boot_and_restaging_asks_nothing() {
    let server = FakeDevServer::start([("worker-0", SimHost::running("img-v1"))]).await;
    let host = host(&server, "worker-0");
    host.stage("img-v2").await.unwrap();
    assert_eq!(host.facts().await.unwrap().staged_image.as_deref(), Some("img-v2"));
    host.stage("img-v2").await.unwrap();
    host.activate_and_reboot("img-v2").await.unwrap();
    let facts = host.facts().await.unwrap();
    assert_eq!(facts.os_image, "img-v2");
    assert_eq!(facts.boot_id.as_str(), "boot-1");
    assert_eq!(
        server.requests(),
        [
            "GET worker-0",
            r#"POST worker-0 stage {"image":"img-v2"}"#,
            "GET worker-0",
            "GET worker-0",
            "GET worker-0",
            "POST worker-0 reboot",
            "GET worker-0"
        ]
    );
}

#[tokio::test]
async fn a_failing_stage_reports_the_servers_message() {
    let server = FakeDevServer::start([("worker-0", SimHost::running("img-v1"))]).await;
    server.fail_stages(StatusCode::INTERNAL_SERVER_ERROR, "injected fault: checksum mismatch");
    let error = host(&server, "worker-0").stage("img-v2").await.unwrap_err();
    assert_eq!(error.to_string(), "staging img-v2 failed on the host: injected fault: checksum mismatch");
    assert!(!error.is_retryable());
    assert_eq!(server.host("worker-0").staged_image, None);
}

#[tokio::test]
async fn a_stage_failing_with_a_try_again_status_is_retryable_and_succeeds_once_healed() {
    let server = FakeDevServer::start([("worker-0", SimHost::running("img-v1"))]).await;
    let host = host(&server, "worker-0");
    for status in [
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::BAD_GATEWAY,
        StatusCode::GATEWAY_TIMEOUT,
        StatusCode::TOO_MANY_REQUESTS,
    ] {
        server.fail_stages(status, "the update server is unavailable");
        let error = host.stage("img-v2").await.unwrap_err();
        assert!(error.is_retryable(), "{status}: {error:?}");
        assert!(error.to_string().contains("the update server is unavailable"), "{error}");
    }
    server.heal_stages();
    host.stage("img-v2").await.unwrap();
    assert_eq!(server.host("worker-0").staged_image.as_deref(), Some("img-v2"));
}

#[tokio::test]
async fn an_unknown_host_is_a_clear_error() {
    let server = FakeDevServer::start([("worker-0", SimHost::running("img-v1"))]).await;
    let error = host(&server, "worker-9").facts().await.unwrap_err();
    assert!(matches!(error, HostError::UnknownHost { .. }), "{error:?}");
    assert_eq!(error.to_string(), "the dev cluster has no simulated host worker-9: no simulated host worker-9");
}

#[tokio::test]
async fn node_names_and_images_arrive_exactly_as_given() {
    let node = "odd node/../name?x=1%";
    let image = r#"img "quoted" $(rm -rf /); ünïcode"#;
    let server = FakeDevServer::start([(node, SimHost::running("img-v1"))]).await;
    let host = host(&server, node);
    host.stage(image).await.unwrap();
    assert_eq!(server.host(node).staged_image.as_deref(), Some(image));
    host.activate_and_reboot(image).await.unwrap();
    assert_eq!(server.host(node).os_image, image);
}

#[tokio::test]
async fn rebooting_without_the_target_staged_is_refused_without_a_reboot() {
    let server = FakeDevServer::start([("worker-0", SimHost::running("img-v1"))]).await;
    let host = host(&server, "worker-0");
    let error = host.activate_and_reboot("img-v2").await.unwrap_err();
    assert_eq!(error.to_string(), "cannot activate img-v2: nothing is staged; stage the target first");
    host.stage("img-v3").await.unwrap();
    let error = host.activate_and_reboot("img-v2").await.unwrap_err();
    assert_eq!(error.to_string(), "cannot activate img-v2: img-v3 is staged instead; stage the target first");
    assert!(!server.requests().iter().any(|request| request.contains("reboot")));
}

#[tokio::test]
async fn malformed_facts_are_a_clear_error() {
    let server = FakeDevServer::start([("worker-0", SimHost::running("img-v1"))]).await;
    let host = host(&server, "worker-0");
    for (body, expected) in [
        (r#"{"osImage": "img", "bootID": "has spaces", "stagedImage": null, "componentsHash": null}"#, "a boot ID has"),
        (r#"{"osImage": "img", "bootID": "b", "stagedImage": null, "componentsHash": "md5:x"}"#, "starts with sha256:"),
        (
            r#"{"osImage": "", "bootID": "b", "stagedImage": null, "componentsHash": null}"#,
            "osImage: the image is empty",
        ),
        (r#"{"bootID": "b"}"#, "missing field `osImage`"),
        ("not json", "expected ident"),
    ] {
        server.answer_facts_with(body);
        let error = host.facts().await.unwrap_err();
        assert!(matches!(error, HostError::BadAnswer { .. }), "{error:?}");
        assert!(error.to_string().contains(expected), "{body}: {error}");
    }
}

#[tokio::test]
async fn an_unreachable_dev_server_is_a_retryable_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let host = SimulatedHost::new(SimulatedConfig::new(format!("http://{address}"), "worker-0")).unwrap();
    let error = host.facts().await.unwrap_err();
    assert!(matches!(error, HostError::Unreachable { .. }), "{error:?}");
    assert!(error.is_retryable());
}

#[tokio::test]
async fn a_fetch_sends_the_version_and_components_and_fails_as_a_stage_does_and_a_discard_asks_once() {
    use agent::host::KubernetesFetch;
    use shared::components::{Sha256, Source, VerifiedComponent};
    let server = FakeDevServer::start([("worker-0", SimHost::running("img-v1"))]).await;
    let host = host(&server, "worker-0");
    let fetch = KubernetesFetch {
        version: "v1.34.1".parse().unwrap(),
        components: vec![VerifiedComponent {
            source: Source::Download("http://artifacts/kubeadm".into()),
            hash: Sha256::of(b"kubeadm"),
            install_path: "/usr/local/bin/kubeadm".into(),
            extract: false,
        }],
    };
    host.fetch_kubernetes(&fetch).await.unwrap();
    host.discard_fetched().await.unwrap();
    let requests = server.requests();
    let body = requests[0].strip_prefix("POST worker-0 kubernetes/fetch ").unwrap();
    let expected = serde_json::json!({"version": "v1.34.1", "components": [{"url": "http://artifacts/kubeadm",
        "hash": Sha256::of(b"kubeadm").to_string(), "installPath": "/usr/local/bin/kubeadm", "extract": false}]});
    assert_eq!(serde_json::from_str::<serde_json::Value>(body).unwrap(), expected);
    assert_eq!(requests[1..], ["POST worker-0 kubernetes/discard"]);
    server.fail_stages(StatusCode::SERVICE_UNAVAILABLE, "the host is down");
    let error = host.fetch_kubernetes(&fetch).await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    server.fail_stages(StatusCode::UNPROCESSABLE_ENTITY, "a hash mismatch");
    let error = host.fetch_kubernetes(&fetch).await.unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    assert!(error.to_string().contains("fetching the Kubernetes v1.34.1 components ahead"), "{error}");
    assert!(error.to_string().contains("a hash mismatch"), "{error}");
}
