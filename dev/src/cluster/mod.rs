//! A whole dev cluster in one call: the API server, update-operator's CRDs, the built-in controllers, N nodes on
//! simulated hosts and sample workloads, Running and Ready when [`Cluster::start`] returns.
//!
//! ```no_run
//! # async fn example() -> Result<(), dev::cluster::ClusterError> {
//! use dev::cluster::{Cluster, ClusterConfig};
//! let cluster = Cluster::start(ClusterConfig { nodes: 4, control_planes: 1, ..ClusterConfig::default() }).await?;
//! let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(cluster.client());
//! # let _ = nodes;
//! cluster.hosts().reboot("worker-0").ok();
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//! - Nodes are `control-plane-<i>` (label `node-role.kubernetes.io/control-plane: ""`, taint
//!   `node-role.kubernetes.io/control-plane:NoSchedule`) and `worker-<i>`; every node is labelled
//!   `update.edgeless.systems/managed: "true"` and runs the configured image on its host.
//! - update-operator's CRDs exist, and so do the namespace, service accounts, RBAC and
//!   ValidatingAdmissionPolicy of `deploy/operator.yaml` ([`Cluster::operator`] hands out its identities), as
//!   `deploy/update-operator.yaml` creates them.
//! - With [`ClusterConfig::scaling_groups`], the simulated cloud ([`crate::cloud`]) has those groups, tagged
//!   `constellation-uid: <cluster uid>`, each with its instances running and their Nodes (named
//!   `<group>-xxxxx`, with `spec.providerID` `simulated://<group>/<name>`, labelled and tainted for the group's
//!   role) among [`Cluster::control_planes`] or [`Cluster::workers`]; a `ScalingGroup` object per group (named
//!   after it, `nodeImage: constellation-version`, `groupId` and `autoscalerGroupName` the group's name, its role)
//!   as Constellation creates them. The cloud's API is served under `/_dev/cloud/api` on the cluster's address.
//! - `start` returns once every node is Ready and every sample pod is Running and Ready, or fails with
//!   [`ClusterError::NotReady`] after `ready_timeout`.

pub mod workloads;

use crate::apiserver::core::DevRoutes;
use crate::apiserver::store::Store;
use crate::apiserver::{ApiError, ApiServer, ApiServerConfig, Faults, StartError};
use crate::cloud::{GroupSpec, SimulatedCloud};
use crate::controllers::{Informers, RunningControllers};
use crate::hosts::{HostError, Hosts};
pub use crate::node_manifest::{CONTROL_PLANE_LABEL, MANAGED_LABEL, node_manifest};
use crate::operator::{Access, ManifestError};
use crate::timing::Timing;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use shared::crd::{NodeRole, ScalingGroup, ScalingGroupSpec};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
pub use workloads::{PdbStyle, SampleWorkloads};

/// The namespace of update-operator's controller (and its leader-election Lease).
pub const OPERATOR_NAMESPACE: &str = "update-operator";

/// The NodeVersion the ScalingGroups name in `nodeImage` (Constellation's).
pub const NODE_VERSION_NAME: &str = "constellation-version";

/// How often readiness is checked while waiting (besides on every cache change).
const READY_CHECK: Duration = Duration::from_millis(200);

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Nodes in total.
    pub nodes: usize,
    /// How many of them are control-plane nodes.
    pub control_planes: usize,
    /// The image every host runs at first.
    pub image: String,
    /// `kubeletVersion` of every node.
    pub kubelet_version: String,
    /// Sample workloads, if any.
    pub workloads: Option<SampleWorkloads>,
    /// Durations of the simulation.
    pub timing: Timing,
    /// The API server's settings (port, kubeconfig path, history, ...).
    pub apiserver: ApiServerConfig,
    /// How long `start` waits for nodes and sample pods to be Ready.
    pub ready_timeout: Duration,
    /// Scaling groups of the simulated cloud, whose instances are nodes besides the `nodes` above.
    pub scaling_groups: Vec<GroupSpec>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            nodes: 4,
            control_planes: 1,
            image: "v1".to_owned(),
            kubelet_version: "v1.33.0".to_owned(),
            workloads: Some(SampleWorkloads::default()),
            timing: Timing::fast(),
            apiserver: ApiServerConfig::default(),
            ready_timeout: Duration::from_secs(300),
            scaling_groups: Vec::new(),
        }
    }
}

/// Why a cluster did not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The API server did not start.
    #[error("the API server did not start: {0}")]
    Server(#[from] StartError),
    /// An object could not be created.
    #[error("creating {what} failed: {source}")]
    Create {
        /// What.
        what: String,
        /// The API error.
        #[source]
        source: ApiError,
    },
    /// A host could not be added.
    #[error("adding a host failed: {0}")]
    Host(#[from] HostError),
    /// A scaling group or instance could not be added.
    #[error("adding to the simulated cloud failed: {0}")]
    Cloud(#[from] crate::cloud::ControlError),
    /// The artifact server did not start.
    #[error("the artifact server did not start: {0}")]
    Artifacts(std::io::Error),
    /// More control planes than nodes.
    #[error("{control_planes} control planes do not fit in {nodes} nodes")]
    Shape {
        /// Nodes asked for.
        nodes: usize,
        /// Control planes asked for.
        control_planes: usize,
    },
    /// The operator's manifest could not be installed.
    #[error("{0}")]
    Manifest(#[from] ManifestError),
    /// Not everything was Ready in time.
    #[error("not ready after {after:?}: {what}")]
    NotReady {
        /// How long was waited.
        after: Duration,
        /// What was missing.
        what: String,
    },
}

/// A running dev cluster. Dropping it stops it; [`Cluster::shutdown`] also waits for every task.
pub struct Cluster {
    server: ApiServer,
    hosts: Hosts,
    cloud: SimulatedCloud,
    artifacts: crate::artifacts::Artifacts,
    controllers: RunningControllers,
    control_planes: Vec<String>,
    workers: Vec<String>,
    workloads: Option<SampleWorkloads>,
    access: Access,
}

fn created<T>(what: impl Into<String>, result: Result<T, ApiError>) -> Result<T, ClusterError> {
    match result {
        Ok(object) => Ok(object),
        Err(source) => Err(ClusterError::Create { what: what.into(), source }),
    }
}

impl Cluster {
    /// Starts a cluster (see the module docs).
    pub async fn start(config: ClusterConfig) -> Result<Cluster, ClusterError> {
        if config.control_planes > config.nodes {
            return Err(ClusterError::Shape { nodes: config.nodes, control_planes: config.control_planes });
        }
        let server = ApiServer::start(config.apiserver.clone()).await?;
        let hosts = Hosts::new(&config.image, &config.timing);
        hosts.on_control_plane_upgrade(server.version_setter());
        let cloud = SimulatedCloud::new(&server.store(), &hosts, &config.timing, &crate::apiserver::object::new_uid());
        let artifacts = crate::artifacts::Artifacts::start().await.map_err(ClusterError::Artifacts)?;
        server.mount_dev_routes(Arc::new(DevRouter {
            hosts: hosts.routes(),
            cloud: cloud.routes(),
            artifacts: artifacts.routes(),
        }));
        let store = server.store().with_identity("dev/cluster");
        for crd in shared::crd::all() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            created(
                format!("CRD {name}"),
                store.api::<CustomResourceDefinition>().create(None, &crd, &PostParams::default()),
            )?;
        }
        // What deploy/operator.yaml grants: the controller's Lease lives in its namespace.
        let access = Access::install(&server)?;
        let mut control_planes: Vec<String> =
            (0..config.control_planes).map(|i| format!("control-plane-{i}")).collect();
        let mut workers: Vec<String> =
            (0..config.nodes - config.control_planes).map(|i| format!("worker-{i}")).collect();
        let controllers = RunningControllers::start(&server.store(), &hosts, &config.timing, &config.kubelet_version);
        for (name, control_plane) in control_planes.iter().map(|n| (n, true)).chain(workers.iter().map(|n| (n, false)))
        {
            hosts.add(name, &config.image)?;
            created(
                format!("node {name}"),
                store.api::<Node>().create(None, &node_manifest(name, control_plane), &PostParams::default()),
            )?;
        }
        for group in &config.scaling_groups {
            cloud.add_group(group, &config.image)?;
            for _ in 0..group.size {
                let name = cloud.add_running_instance(&group.name)?;
                match group.role {
                    cloud::GroupRole::ControlPlane => control_planes.push(name),
                    cloud::GroupRole::Worker => workers.push(name),
                }
            }
            created(
                format!("ScalingGroup {}", group.name),
                store.api::<ScalingGroup>().create(None, &scaling_group(group), &PostParams::default()),
            )?;
        }
        let mut cluster =
            Cluster { server, hosts, cloud, artifacts, controllers, control_planes, workers, workloads: None, access };
        let started = Instant::now();
        // Nodes first: workloads created before every node is Ready would crowd onto the first Ready ones.
        cluster.wait_ready(config.ready_timeout).await?;
        cluster.workloads = config.workloads;
        cluster.create_workloads(&store)?;
        cluster.wait_ready(config.ready_timeout.saturating_sub(started.elapsed())).await?;
        Ok(cluster)
    }

    fn create_workloads(&self, store: &Store) -> Result<(), ClusterError> {
        let Some(samples) = &self.workloads else { return Ok(()) };
        let manifests = samples.manifests(self.workers.len());
        let ns = Some(samples.namespace.as_str());
        let post = PostParams::default();
        created(
            format!("namespace {}", samples.namespace),
            store.api::<Namespace>().create(None, &manifests.namespace, &post),
        )?;
        for pdb in &manifests.pdbs {
            created("a PodDisruptionBudget", store.api::<PodDisruptionBudget>().create(ns, pdb, &post))?;
        }
        for deployment in &manifests.deployments {
            created("a Deployment", store.api::<Deployment>().create(ns, deployment, &post))?;
        }
        for set in &manifests.statefulsets {
            created("a StatefulSet", store.api::<StatefulSet>().create(ns, set, &post))?;
        }
        if let Some(daemonset) = &manifests.daemonset {
            created("the DaemonSet", store.api::<DaemonSet>().create(ns, daemonset, &post))?;
        }
        Ok(())
    }

    /// Adds a node (a new host running `image`, and its Node object labelled and tainted as the others); the
    /// kubelet reports it Ready shortly after. Its name is not added to [`Cluster::workers`] or
    /// [`Cluster::control_planes`], which list the nodes the cluster started with.
    pub fn add_node(&self, name: &str, control_plane: bool, image: &str) -> Result<(), ClusterError> {
        self.hosts.add(name, image)?;
        let store = self.server.store().with_identity("dev/cluster");
        created(
            format!("node {name}"),
            store.api::<Node>().create(None, &node_manifest(name, control_plane), &PostParams::default()),
        )?;
        Ok(())
    }

    /// What is not Ready yet: nodes, and sample pods (missing, not Running, not Ready, being deleted).
    pub fn not_ready(&self) -> Option<String> {
        let informers = self.controllers.informers();
        let nodes = self.control_planes.len() + self.workers.len();
        let mut ready_nodes = 0;
        for name in self.control_planes.iter().chain(&self.workers) {
            ready_nodes += usize::from(informers.nodes.get(name).is_some_and(|node| node.ready == Some(true)));
        }
        if ready_nodes < nodes {
            return Some(format!("{ready_nodes} of {nodes} nodes Ready"));
        }
        let Some(samples) = &self.workloads else { return None };
        let manifests = samples.manifests(self.workers.len());
        let expected = manifests.replica_pods + if manifests.daemonset.is_some() { nodes } else { 0 };
        let (mut ready, mut total) = (0, 0);
        informers.pods.for_each(|pod| {
            if pod.meta.namespace.as_deref() == Some(samples.namespace.as_str()) {
                total += 1;
                ready += usize::from(pod.phase == crate::controllers::objects::PodPhase::Running && pod.is_ready());
            }
        });
        (ready < expected || total != expected)
            .then(|| format!("{ready} of {expected} sample pods Running and Ready ({total} pods exist)"))
    }

    /// Waits until [`Cluster::not_ready`] has nothing to report.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), ClusterError> {
        let started = Instant::now();
        let mut changes = self.controllers.informers().pods.changes();
        loop {
            let Some(missing) = self.not_ready() else { return Ok(()) };
            if started.elapsed() >= timeout {
                return Err(ClusterError::NotReady { after: timeout, what: missing });
            }
            let _ = tokio::time::timeout(READY_CHECK, changes.changed()).await;
            // Changes come in bursts: check at most every READY_CHECK / 4.
            tokio::time::sleep(READY_CHECK / 4).await;
        }
    }

    /// A kube-rs client with default settings (including kube-rs's retries of 429/503/504).
    pub fn client(&self) -> kube::Client {
        self.server.client()
    }

    /// A kube-rs client with adjusted settings (`|c| c.default_retry = false`).
    pub fn client_with(&self, adjust: impl FnOnce(&mut kube::Config)) -> kube::Client {
        self.server.client_with(adjust)
    }

    /// The kubeconfig file (context `dev`, the administrator's token, HTTPS).
    pub fn kubeconfig_path(&self) -> &Path {
        self.server.kubeconfig_path()
    }

    /// `http://127.0.0.1:PORT`: the API server, and the base URL of `/_dev/hosts` (the agent's
    /// `--simulated-hosts-url`).
    pub fn url(&self) -> &str {
        self.server.url()
    }

    /// The in-process store (writing as `dev/test`).
    pub fn store(&self) -> Store {
        self.server.store()
    }

    /// Fault injection of the API server (errors, latency, watches, pausing controllers).
    pub fn faults(&self) -> Faults {
        self.server.faults()
    }

    /// The file server of Kubernetes components for simulated upgrades.
    pub fn artifacts(&self) -> &crate::artifacts::Artifacts {
        &self.artifacts
    }

    /// The simulated hosts: state, faults, reboots.
    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    /// The simulated cloud: scaling groups, instances, faults. Its API is at [`Cluster::url`] (the
    /// `--cloud-endpoint` of `cloud::simulated::SimulatedProvider`).
    pub fn cloud(&self) -> &SimulatedCloud {
        &self.cloud
    }

    /// The identities of `deploy/operator.yaml` (what the harness runs the controller and agents as).
    pub fn operator(&self) -> &Access {
        &self.access
    }

    /// The API server.
    pub fn server(&self) -> &ApiServer {
        &self.server
    }

    /// The controllers' caches.
    pub fn informers(&self) -> &Informers {
        self.controllers.informers()
    }

    /// The control-plane nodes' names.
    pub fn control_planes(&self) -> &[String] {
        &self.control_planes
    }

    /// The worker nodes' names.
    pub fn workers(&self) -> &[String] {
        &self.workers
    }

    /// Every node's name, control planes first.
    pub fn node_names(&self) -> Vec<String> {
        self.control_planes.iter().chain(&self.workers).cloned().collect()
    }

    /// The sample workloads' namespace, if there are sample workloads.
    pub fn sample_namespace(&self) -> Option<&str> {
        self.workloads.as_ref().map(|w| w.namespace.as_str())
    }

    /// Stops the controllers, the hosts and the API server, and waits for them.
    pub async fn shutdown(self) {
        let Cluster { server, hosts, cloud, artifacts, controllers, .. } = self;
        artifacts.shutdown();
        cloud.shutdown();
        hosts.shutdown();
        controllers.shutdown().await;
        server.shutdown().await;
    }
}

/// The ScalingGroup object of a group, as Constellation creates them at cluster creation.
fn scaling_group(group: &GroupSpec) -> ScalingGroup {
    let worker = group.role == cloud::GroupRole::Worker;
    ScalingGroup::new(
        &group.name,
        ScalingGroupSpec {
            node_image: NODE_VERSION_NAME.to_owned(),
            group_id: group.name.clone(),
            autoscaler_group_name: Some(group.name.clone()),
            node_group_name: Some(group.name.clone()),
            autoscaling: worker,
            min: Some(i32::from(worker)),
            max: Some(i32::try_from(group.max).unwrap_or(i32::MAX)),
            role: Some(if worker { NodeRole::Worker } else { NodeRole::ControlPlane }),
        },
    )
}

/// The `/_dev/` routes of a cluster: `/_dev/cloud/...` to the simulated cloud, `/_dev/artifacts/...` to the
/// artifact server, the rest to the hosts.
struct DevRouter {
    hosts: Arc<crate::hosts::http::HostRoutes>,
    cloud: Arc<crate::cloud::http::CloudRoutes>,
    artifacts: Arc<crate::artifacts::ArtifactRoutes>,
}

impl DevRoutes for DevRouter {
    fn handle(
        &self,
        method: http::Method,
        segments: Vec<String>,
        body: bytes::Bytes,
    ) -> futures::future::BoxFuture<'static, (u16, serde_json::Value)> {
        match segments.first().map(String::as_str) {
            Some("cloud") => self.cloud.handle(method, segments, body),
            Some("artifacts") => self.artifacts.handle(method, segments, body),
            _ => self.hosts.handle(method, segments, body),
        }
    }
}
