//! Test support: a bare API server with update-operator's CRDs and nodes whose hosts "reboot" by
//! updating their Node's status, for fast tests that need no workloads.
#![allow(dead_code)]

use agent::host::{HostError, HostFacts, HostUpdater};
use dev::apiserver::{ApiServer, ApiServerConfig, Patch, Store};
use dev::operator::{Access, Manifest};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{PatchParams, PostParams};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::BootId;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct HostState {
    pub image: String,
    pub boot: u32,
    pub staged: Option<String>,
}

/// A host that stages quickly and reboots by flipping its Node's Ready condition and boot ID.
pub struct FakeHost {
    pub node: String,
    pub store: Store,
    pub state: Arc<Mutex<HostState>>,
    /// How long staging takes.
    pub stage_time: Duration,
}

pub fn boot_id(node: &str, boot: u32) -> String {
    format!("{node}-boot-{boot}")
}

pub fn set_status(store: &Store, node: &str, ready: bool, boot: u32) {
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }, "reason": "Test"}],
        "nodeInfo": {"bootID": boot_id(node, boot)}
    }});
    store.api::<Node>().patch_status(None, node, &Patch::Merge(status), &PatchParams::default()).unwrap();
}

impl HostUpdater for FakeHost {
    async fn facts(&self) -> Result<HostFacts, HostError> {
        let s = self.state.lock().unwrap();
        Ok(HostFacts {
            os_image: s.image.clone(),
            boot_id: BootId::parse("boot", &boot_id(&self.node, s.boot)).unwrap(),
            staged_image: s.staged.clone(),
            components_hash: None,
        })
    }

    async fn stage(&self, target: &str) -> Result<(), HostError> {
        tokio::time::sleep(self.stage_time).await;
        self.state.lock().unwrap().staged = Some(target.to_owned());
        Ok(())
    }

    async fn activate_and_reboot(&self, _target: &str) -> Result<(), HostError> {
        let (store, node, state) = (self.store.clone(), self.node.clone(), self.state.clone());
        let boot = state.lock().unwrap().boot;
        set_status(&store, &node, false, boot);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let boot = {
                let mut s = state.lock().unwrap();
                s.image = s.staged.take().unwrap_or_else(|| s.image.clone());
                s.boot += 1;
                s.boot
            };
            set_status(&store, &node, true, boot);
        });
        Ok(())
    }

    async fn upgrade_kubernetes(&self, upgrade: &agent::host::KubernetesUpgrade) -> Result<(), HostError> {
        Err(HostError::Unsupported {
            operation: format!("upgrading Kubernetes to {}", upgrade.version),
            reason: "this fake host only stages and reboots".into(),
        })
    }

    async fn fetch_kubernetes(&self, fetch: &agent::host::KubernetesFetch) -> Result<(), HostError> {
        Err(HostError::Unsupported {
            operation: format!("fetching the Kubernetes {} components ahead", fetch.version),
            reason: "this fake host only stages and reboots".into(),
        })
    }

    async fn discard_fetched(&self) -> Result<(), HostError> {
        Ok(())
    }
}

impl FakeHost {
    pub fn new(store: Store, node: &str, image: &str) -> FakeHost {
        FakeHost {
            node: node.to_owned(),
            store,
            state: Arc::new(Mutex::new(HostState { image: image.to_owned(), boot: 0, staged: None })),
            stage_time: Duration::from_millis(50),
        }
    }

    /// The same host, staging for `time`.
    pub fn staging_for(self, time: Duration) -> FakeHost {
        FakeHost { stage_time: time, ..self }
    }
}

/// One agent per node of `names` on fake hosts running `image`, staging for `stage_time`.
pub fn fake_agents(
    server: &ApiServer,
    names: &[&str],
    image: &str,
    stage_time: Duration,
) -> Vec<dev::harness::Component> {
    names
        .iter()
        .map(|name| {
            let (store, name, image) = (server.store(), name.to_string(), image.to_owned());
            dev::harness::agent_with(&operator(server), &name.clone(), move || {
                Ok(FakeHost::new(store, &name, &image).staging_for(stage_time))
            })
        })
        .collect()
}

/// The NodeVersion `name`'s status (default when it has none).
pub fn status_of(store: &Store, name: &str) -> shared::crd::NodeVersionStatus {
    store.api::<NodeVersion>().get(None, name).ok().and_then(|v| v.status).unwrap_or_default()
}

/// The condition `type_` of `status`: (status, reason, message).
pub fn condition_of(status: &shared::crd::NodeVersionStatus, type_: &str) -> Option<(String, String, String)> {
    status.conditions.iter().find(|c| c.type_ == type_).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// A bare API server with the CRDs, what `deploy/operator.yaml` grants (namespace, service
/// accounts, RBAC, admission policy) and Ready nodes; names starting with `cp` are control-plane nodes.
pub async fn bare_cluster(names: &[&str]) -> ApiServer {
    bare_cluster_with(names, &Manifest::operator().unwrap()).await
}

/// [`bare_cluster`] with `manifest` installed instead of the committed one.
pub async fn bare_cluster_with(names: &[&str], manifest: &Manifest) -> ApiServer {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let store = server.store();
    for crd in shared::crd::all() {
        store.api::<CustomResourceDefinition>().create(None, &crd, &PostParams::default()).unwrap();
    }
    manifest.install(&server.store().with_identity("dev/operator-manifest")).unwrap();
    for name in names {
        let mut labels = json!({"update.edgeless.systems/managed": "true"});
        if name.starts_with("cp") {
            labels["node-role.kubernetes.io/control-plane"] = json!("");
        }
        let node: Node = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        store.api::<Node>().create(None, &node, &PostParams::default()).unwrap();
        set_status(&store, name, true, 0);
    }
    server
}

/// The identities of `deploy/operator.yaml` on `server` (installed by [`bare_cluster`]).
pub fn operator(server: &ApiServer) -> Access {
    Access::of(server, Manifest::operator().unwrap())
}

/// The name of the NodeVersion the tests create ([`create_version`]) and read.
pub const VERSION: &str = "constellation-version";

/// Creates the NodeVersion `constellation-version` for `image` with the rollout policy `rollout`.
pub fn create_version(store: &Store, image: &str, rollout: serde_json::Value) {
    let version: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": VERSION},
        "spec": {"image": image, "rollout": rollout}
    }))
    .unwrap();
    store.api::<NodeVersion>().create(None, &version, &PostParams::default()).unwrap();
}

/// Polls `check` every 100 ms until it returns Some, or panics with `what` after `timeout`.
pub async fn eventually<T>(timeout: Duration, what: &str, check: impl FnMut() -> Option<T>) -> T {
    eventually_or_say(timeout, what, check, String::new).await
}

/// [`eventually`], the panic also saying what `say` reads of the cluster then.
pub async fn eventually_or_say<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
    say: impl Fn() -> String,
) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}{}", say());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The NodeVersion's status, once every selected node is up to date and none is in flight.
pub fn rolled_out(store: &Store, total: i32) -> Option<shared::crd::NodeVersionStatus> {
    let version = store.api::<NodeVersion>().get(None, VERSION).ok()?;
    let status = version.status?;
    (status.counts.up_to_date == total && status.in_flight.is_empty()).then_some(status)
}

/// Writes the process's logs to the file `IT_LOG` names, filtered by `IT_LOG_LEVEL` (default `info`), when set: for
/// a test that failed in CI, run alone with them. Tests of one process share the subscriber; the first call sets it.
pub fn log_to_env_file() {
    let Some(path) = std::env::var_os("IT_LOG") else { return };
    let Ok(file) = std::fs::File::create(path) else { return };
    let level = std::env::var("IT_LOG_LEVEL").unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(level)
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .with_thread_names(true)
        .try_init();
}

/// What a stalled rollout is waiting for, for a timeout's message: the NodeVersion's status and, per Node, whether
/// it is cordoned and its protocol annotations.
pub fn rollout_state(store: &Store) -> String {
    let status = store.api::<NodeVersion>().get(None, VERSION).ok().and_then(|v| v.status);
    let mut out = format!("\nNodeVersion status: {}", serde_json::to_string(&status).unwrap_or_default());
    let nodes = store.api::<Node>().list(None, &Default::default()).map(|l| l.items).unwrap_or_default();
    for node in nodes {
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        let keys: std::collections::BTreeMap<&String, &String> = node
            .metadata
            .annotations
            .iter()
            .flatten()
            .filter(|(k, _)| k.starts_with(shared::protocol::keys::PREFIX))
            .collect();
        out += &format!("\n{} cordoned={cordoned} {keys:?}", node.metadata.name.as_deref().unwrap_or("?"));
    }
    // Pods that are not running and ready: what a drain may wait for (a PDB that no replacement pod satisfies yet).
    let pods = store.api::<k8s_openapi::api::core::v1::Pod>().list(None, &Default::default());
    for pod in pods.map(|l| l.items).unwrap_or_default() {
        if !dev::observer::pod_ready(&pod) {
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
            let deleting = pod.metadata.deletion_timestamp.is_some();
            let name = pod.metadata.name.as_deref().unwrap_or("?");
            out += &format!("\npod {name} on {node:?}: {phase}, not ready, deleting={deleting}");
        }
    }
    out
}

/// The cluster the end-to-end tests run on: 3 control-plane and 10 worker nodes with the
/// sample Deployments and StatefulSets under PDBs (and a DaemonSet), fast timing.
pub async fn full_cluster() -> dev::cluster::Cluster {
    full_cluster_with(|_| {}).await
}

/// `full_cluster` with adjustments.
pub async fn full_cluster_with(adjust: impl FnOnce(&mut dev::cluster::ClusterConfig)) -> dev::cluster::Cluster {
    let mut config = dev::cluster::ClusterConfig { nodes: 13, control_planes: 3, ..Default::default() };
    adjust(&mut config);
    dev::cluster::Cluster::start(config).await.unwrap()
}

/// Every node's name.
pub fn node_names(store: &Store) -> Vec<String> {
    use kube::ResourceExt;
    store.api::<Node>().list(None, &Default::default()).unwrap().items.iter().map(|n| n.name_any()).collect()
}

/// One real agent per node, on the cluster's simulated hosts.
pub fn start_agents(cluster: &dev::cluster::Cluster) -> Vec<dev::harness::Component> {
    node_names(&cluster.store()).iter().map(|n| dev::harness::agent(cluster.operator(), n)).collect()
}

/// Stops every component gracefully.
pub async fn stop_all(components: Vec<dev::harness::Component>) {
    for c in components {
        let name = c.name().to_owned();
        c.stop(Duration::from_secs(15)).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// The user an access record was made by (every operator identity is a service account).
pub fn user_of(record: &dev::apiserver::AccessRecord) -> dev::apiserver::UserInfo {
    match dev::apiserver::auth::user::split_service_account_username(&record.user) {
        Some((namespace, name)) => dev::apiserver::UserInfo::service_account(namespace, name, ""),
        None => dev::apiserver::UserInfo::user(&record.user, &[]),
    }
}

/// The cluster-autoscaler Deployment `kube-system/cluster-autoscaler` with `replicas` and the container's
/// `args`, as an AutoscalingStrategy names it (tolerating every taint, so that it runs on any node).
pub fn cluster_autoscaler(replicas: i32, args: &[&str]) -> k8s_openapi::api::apps::v1::Deployment {
    let mut container = json!({
        "name": "cluster-autoscaler", "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.0"
    });
    if !args.is_empty() {
        container["args"] = json!(args);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "cluster-autoscaler"}},
            "template": {
                "metadata": {"labels": {"app": "cluster-autoscaler"}},
                "spec": {"tolerations": [{"operator": "Exists"}], "containers": [container]}
            }
        }
    }))
    .expect("the cluster-autoscaler Deployment is well-formed")
}

/// A client of ServiceAccount `default/planner` (created here), bound to no role yet.
pub fn planner_client(cluster: &dev::cluster::Cluster) -> kube::Client {
    let account: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "planner", "namespace": "default"}})).unwrap();
    cluster.store().api().create(Some("default"), &account, &PostParams::default()).unwrap();
    let token = cluster
        .server()
        .token_for(&dev::apiserver::auth::user::Identity::service_account("default", "planner"))
        .unwrap();
    kube::Client::try_from(cluster.server().kube_config_with_token(&token)).unwrap()
}

/// Creates the ClusterRole of `deploy/examples/plan-clusterrole.yaml` (what a user needs to run `plan`) and binds
/// it to the ServiceAccount of [`planner_client`].
pub fn bind_plan_role(store: &Store) {
    let role_file = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/examples/plan-clusterrole.yaml");
    let role: k8s_openapi::api::rbac::v1::ClusterRole =
        yaml_serde::from_str(&std::fs::read_to_string(role_file).unwrap()).unwrap();
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "planner"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "update-operator-plan"},
        "subjects": [{"kind": "ServiceAccount", "name": "planner", "namespace": "default"}]
    }))
    .unwrap();
    store.api().create(None, &role, &PostParams::default()).unwrap();
    store.api().create(None, &binding, &PostParams::default()).unwrap();
}

/// `provider` behind the governed client at one request a second (burst 1): calls made at once after a first one wait
/// for the rate limit together, and go as one batch request where the provider has batch calls.
pub fn governed_one_per_second<P: cloud::CloudProvider + 'static>(provider: P) -> cloud::Governed<P> {
    let one = std::num::NonZeroU32::MIN;
    let policy = cloud::CallPolicy { rate_per_second: one, burst: one, ..cloud::CallPolicy::default() };
    cloud::Governed::new(provider, policy, Arc::new(cloud::metrics::CallCounts::default()))
}
