//! core/v1 Services (cluster IP and node port allocation, immutability) and scheduling.k8s.io/v1 PriorityClasses
//! (the system classes, the Priority admission of pods), over HTTP as clients see them.

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn service(name: &str, spec: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn status_of(error: kube::Error) -> (u16, String) {
    match error {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn services_get_cluster_ips_and_node_ports_as_upstream_allocates_them() {
    let server = server().await;
    let services: Api<Service> = Api::namespaced(server.client(), "default");
    let kubernetes = services.get("kubernetes").await.unwrap();
    assert_eq!(kubernetes.spec.as_ref().unwrap().cluster_ip.as_deref(), Some("10.96.0.1"));

    let web = services.create(&PostParams::default(), &service("web", json!({"ports": [{"port": 80}]}))).await.unwrap();
    let spec = web.spec.clone().unwrap();
    let ip: std::net::Ipv4Addr = spec.cluster_ip.clone().unwrap().parse().unwrap();
    assert_eq!(ip.octets()[0], 10);
    assert!((96..112).contains(&ip.octets()[1]), "{ip} is in 10.96.0.0/12");
    assert_eq!(spec.cluster_ips, Some(vec![ip.to_string()]));
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(
        spec.ports.unwrap()[0].target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
    );

    let taken = service("taken", json!({"clusterIP": ip.to_string(), "ports": [{"port": 80}]}));
    let (code, message) = status_of(services.create(&PostParams::default(), &taken).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(message.contains("provided IP is already allocated"), "{message}");
    let outside = service("outside", json!({"clusterIP": "192.168.0.1", "ports": [{"port": 80}]}));
    let (code, message) = status_of(services.create(&PostParams::default(), &outside).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(message.contains("The range of valid IPs is 10.96.0.0/12"), "{message}");

    let exposed = services
        .create(&PostParams::default(), &service("exposed", json!({"type": "NodePort", "ports": [{"port": 80}]})))
        .await
        .unwrap();
    let node_port = exposed.spec.unwrap().ports.unwrap()[0].node_port.unwrap();
    assert!((30000..=32767).contains(&node_port));
    let low = service("low", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 8080}]}));
    let (code, message) = status_of(services.create(&PostParams::default(), &low).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(message.contains("provided port is not in the valid range. The range of valid ports is 30000-32767"));
    let twin = service("twin", json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": node_port}]}));
    let (_, message) = status_of(services.create(&PostParams::default(), &twin).await.unwrap_err());
    assert!(message.contains("provided port is already allocated"), "{message}");

    // A replace without the allocated values keeps them; moving the cluster IP is refused.
    let mut replaced = service("exposed", json!({"type": "NodePort", "ports": [{"port": 80}]}));
    replaced.metadata.resource_version = services.get("exposed").await.unwrap().metadata.resource_version;
    let kept = services.replace("exposed", &PostParams::default(), &replaced).await.unwrap();
    assert_eq!(kept.spec.unwrap().ports.unwrap()[0].node_port, Some(node_port));
    let moved = json!({"spec": {"clusterIP": "10.96.0.77"}});
    let (code, message) =
        status_of(services.patch("web", &PatchParams::default(), &Patch::Merge(moved)).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(message.contains("may not change once set"), "{message}");
    // Field selectors upstream allows on Services.
    let node_ports = services.list(&ListParams::default().fields("spec.type=NodePort")).await.unwrap();
    assert_eq!(node_ports.items.len(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn pods_get_their_priority_from_their_class_as_the_priority_admission_plugin_gives_it() {
    let server = server().await;
    let classes: Api<PriorityClass> = Api::all(server.client());
    let critical = classes.get("system-node-critical").await.unwrap();
    assert_eq!(critical.value, 2_000_001_000);
    assert_eq!(classes.get("system-cluster-critical").await.unwrap().value, 2_000_000_000);
    let (code, message) =
        status_of(classes.delete("system-node-critical", &DeleteParams::default()).await.unwrap_err());
    assert_eq!(code, 403);
    assert!(message.contains("this is a system priority class and cannot be deleted"), "{message}");

    let class = |name: &str, value: i64, default: bool| -> PriorityClass {
        serde_json::from_value(json!({"metadata": {"name": name}, "value": value, "globalDefault": default})).unwrap()
    };
    classes.create(&PostParams::default(), &class("batch", 1000, false)).await.unwrap();
    let (code, _) =
        status_of(classes.create(&PostParams::default(), &class("huge", 2_000_000_000, false)).await.unwrap_err());
    assert_eq!(code, 422);

    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    let with_class = |name: &str, class: Option<&str>, priority: Option<i64>| -> Pod {
        let mut pod = pod(name, json!({}), None);
        let spec = pod.spec.as_mut().unwrap();
        spec.priority_class_name = class.map(str::to_owned);
        spec.priority = priority.map(|p| p as i32);
        pod
    };
    let plain = pods.create(&PostParams::default(), &with_class("plain", None, None)).await.unwrap();
    assert_eq!(plain.spec.unwrap().priority, Some(0));
    let batch = pods.create(&PostParams::default(), &with_class("batch", Some("batch"), None)).await.unwrap();
    let spec = batch.spec.unwrap();
    assert_eq!((spec.priority, spec.preemption_policy.as_deref()), (Some(1000), Some("PreemptLowerPriority")));
    // The system classes are usable in every namespace (upstream since 1.17).
    let node_critical =
        pods.create(&PostParams::default(), &with_class("agent", Some("system-node-critical"), None)).await.unwrap();
    assert_eq!(node_critical.spec.unwrap().priority, Some(2_000_001_000));
    let (code, message) =
        status_of(pods.create(&PostParams::default(), &with_class("ghost", Some("nope"), None)).await.unwrap_err());
    assert_eq!(
        (code, message.as_str()),
        (403, "pods \"ghost\" is forbidden: no PriorityClass with name nope was found")
    );
    let (code, message) =
        status_of(pods.create(&PostParams::default(), &with_class("liar", Some("batch"), Some(5))).await.unwrap_err());
    assert_eq!(code, 403);
    assert!(message.contains("the integer value of priority (5) must not be provided in pod spec"), "{message}");

    // One default class; pods without a class then get it.
    classes.create(&PostParams::default(), &class("default-low", 10, true)).await.unwrap();
    let (code, message) =
        status_of(classes.create(&PostParams::default(), &class("default-two", 20, true)).await.unwrap_err());
    assert_eq!(code, 403);
    assert!(message.contains("PriorityClass default-low is already marked as default. Only one default can exist"));
    let defaulted = pods.create(&PostParams::default(), &with_class("defaulted", None, None)).await.unwrap();
    let spec = defaulted.spec.unwrap();
    assert_eq!((spec.priority, spec.priority_class_name.as_deref()), (Some(10), Some("default-low")));
    let (code, _) = status_of(
        classes.patch("batch", &PatchParams::default(), &Patch::Merge(json!({"value": 2000}))).await.unwrap_err(),
    );
    assert_eq!(code, 422, "a class's value is immutable");
    server.shutdown().await;
}

#[tokio::test]
async fn the_new_kinds_are_discoverable_with_their_short_names_and_categories() {
    let server = server().await;
    let client = server.client();
    let core = raw(&client, "GET", "/api/v1", None, Value::Null).await.json();
    let services = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "services").unwrap().clone();
    assert_eq!(services["shortNames"], json!(["svc"]));
    assert_eq!(services["categories"], json!(["all"]));
    let batch = raw(&client, "GET", "/apis/batch/v1", None, Value::Null).await.json();
    let names: Vec<&str> = batch["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    assert_eq!(names, vec!["jobs", "jobs/status"]);
    let scheduling = raw(&client, "GET", "/apis/scheduling.k8s.io/v1", None, Value::Null).await.json();
    let classes = &scheduling["resources"][0];
    assert_eq!((classes["name"].as_str(), classes["namespaced"].as_bool()), (Some("priorityclasses"), Some(false)));
    assert_eq!(classes["shortNames"], json!(["pc"]));
    // ServiceAccounts keep what they list.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account = serde_json::from_value(json!({"metadata": {"name": "builder"}, "secrets": [{"name": "token"}],
        "imagePullSecrets": [{"name": "registry"}], "automountServiceAccountToken": false}))
    .unwrap();
    let account = accounts.create(&PostParams::default(), &account).await.unwrap();
    assert_eq!(account.secrets.unwrap()[0].name.as_deref(), Some("token"));
    assert_eq!(account.image_pull_secrets.unwrap()[0].name, "registry");
    assert_eq!(account.automount_service_account_token, Some(false));
    server.shutdown().await;
}
