//! The shared caches every controller reads: one informer per kind the controllers watch, listed and watched
//! from the store once for all of them.

use super::informer::Informer;
use super::objects::{MetaOnly, NodeInfo, PodInfo, Typed};
use crate::apiserver::Gvr;
use crate::apiserver::store::Store;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::ClusterRole;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The shared caches every controller reads.
#[derive(Clone)]
pub struct Informers {
    /// Pods, indexed by owner, node and label.
    pub pods: Informer<PodInfo>,
    /// Nodes.
    pub nodes: Informer<NodeInfo>,
    /// PodDisruptionBudgets.
    pub pdbs: Informer<Typed<PodDisruptionBudget>>,
    /// Deployments.
    pub deployments: Informer<Typed<Deployment>>,
    /// ReplicaSets.
    pub replicasets: Informer<Typed<ReplicaSet>>,
    /// StatefulSets.
    pub statefulsets: Informer<Typed<StatefulSet>>,
    /// DaemonSets.
    pub daemonsets: Informer<Typed<DaemonSet>>,
    /// Jobs.
    pub jobs: Informer<Typed<Job>>,
    /// Node Leases and other Leases (for the garbage collector).
    pub leases: Informer<MetaOnly>,
    /// ClusterRoles (for the aggregation controller).
    pub cluster_roles: Informer<Typed<ClusterRole>>,
    /// Kinds only the garbage collector reads.
    pub others: Vec<Informer<MetaOnly>>,
}

impl Informers {
    pub(super) fn new() -> Self {
        Informers {
            pods: Informer::with_label_index(Gvr::of::<Pod>()),
            nodes: Informer::new(Gvr::of::<Node>()),
            pdbs: Informer::new(Gvr::of::<PodDisruptionBudget>()),
            deployments: Informer::new(Gvr::of::<Deployment>()),
            replicasets: Informer::new(Gvr::of::<ReplicaSet>()),
            statefulsets: Informer::new(Gvr::of::<StatefulSet>()),
            daemonsets: Informer::new(Gvr::of::<DaemonSet>()),
            jobs: Informer::new(Gvr::of::<Job>()),
            leases: Informer::new(Gvr::of::<Lease>()),
            cluster_roles: Informer::new(Gvr::of::<ClusterRole>()),
            others: vec![
                Informer::new(Gvr::of::<ControllerRevision>()),
                Informer::new(Gvr::of::<ConfigMap>()),
                Informer::new(Gvr::of::<Secret>()),
                Informer::new(Gvr::of::<ServiceAccount>()),
                Informer::new(Gvr::of::<Service>()),
            ],
        }
    }

    pub(super) fn spawn(&self, store: &Store, shutdown: &CancellationToken, tasks: &mut Vec<JoinHandle<()>>) {
        let store = store.with_identity("dev/informers");
        let (s, c) = (&store, shutdown);
        tasks.push(tokio::spawn(self.pods.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.nodes.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.pdbs.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.deployments.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.replicasets.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.statefulsets.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.daemonsets.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.jobs.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.leases.clone().run(s.clone(), c.clone())));
        tasks.push(tokio::spawn(self.cluster_roles.clone().run(s.clone(), c.clone())));
        for other in &self.others {
            tasks.push(tokio::spawn(other.clone().run(s.clone(), c.clone())));
        }
    }

    /// Returns once every cache has its first list.
    pub async fn wait_listed(&self) {
        self.pods.wait_listed().await;
        self.nodes.wait_listed().await;
        self.pdbs.wait_listed().await;
        self.deployments.wait_listed().await;
        self.replicasets.wait_listed().await;
        self.statefulsets.wait_listed().await;
        self.daemonsets.wait_listed().await;
        self.jobs.wait_listed().await;
        self.leases.wait_listed().await;
        self.cluster_roles.wait_listed().await;
        for other in &self.others {
            other.wait_listed().await;
        }
    }
}
