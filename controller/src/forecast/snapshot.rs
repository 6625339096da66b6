//! The cluster as a forecast reads it: one list of each kind, read-only (get/list only).

use super::membership::{CloudAnswers, Membership, classify};
use crate::cluster_version::ClusterVersions;
use crate::drain::filters::{DaemonSetLookup, MIRROR_POD_ANNOTATION, PodContext, PodVerdict};
use crate::groups::instances::{CONCURRENCY, ask};
use crate::nodes::SlimNode;
use crate::policy::kubernetes::KubernetesSpec;
use crate::policy::{DrainProgress, NodeSelector, NodeView, Rollout, SpecState, ValidSpec};
use cloud::{CloudProvider, ProviderId};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Pod, PodSpec, PodStatus, Volume};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use shared::crd::{DrainOptions, NodeVersion, PendingNode, ScalingGroup};
use shared::protocol::Step;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What the drains of a rollout would meet: the pods that could keep a node from draining, the budgets, and the
/// DaemonSets that exist.
#[derive(Debug, Clone, Default)]
pub struct Workloads {
    /// Only the pods a drain could be blocked by ([`Workloads::add`]): the others are counted, not kept.
    pub pods: Vec<PodFacts>,
    pub budgets: Vec<PodDisruptionBudget>,
    /// (namespace, name) of the DaemonSets that control a pod and exist.
    pub daemon_sets: BTreeSet<(String, String)>,
    /// (namespace, name) of the DaemonSets looked up, found or not.
    looked_up: BTreeSet<(String, String)>,
    /// How many pods were read, kept or not.
    pub read: usize,
}

impl Workloads {
    /// The workloads of a cluster with these PodDisruptionBudgets and existing DaemonSets, before any pod is added.
    pub fn new(budgets: Vec<PodDisruptionBudget>, daemon_sets: BTreeSet<(String, String)>) -> Workloads {
        let looked_up = daemon_sets.clone();
        Workloads { pods: Vec::new(), budgets, daemon_sets, looked_up, read: 0 }
    }

    /// Lists the PodDisruptionBudgets, then the pods of the whole cluster in pages, each pod reduced as it arrives
    /// ([`Workloads::add`]); the DaemonSets that control pods are looked up as a drain looks them up (`get` only,
    /// once each).
    pub async fn read(client: &Client) -> Result<Workloads, kube::Error> {
        let budgets = Api::<PodDisruptionBudget>::all(client.clone()).list(&ListParams::default()).await?.items;
        let mut workloads = Workloads::new(budgets, BTreeSet::new());
        let api = Api::<Pod>::all(client.clone());
        let mut params = ListParams::default().limit(POD_PAGE);
        loop {
            let page = api.list(&params).await?;
            let owners: BTreeSet<(String, String)> = page
                .items
                .iter()
                .filter_map(|pod| {
                    let daemon_set = crate::drain::filters::daemon_set_of(pod)?;
                    Some((pod.metadata.namespace.clone().unwrap_or_default(), daemon_set.name.clone()))
                })
                .filter(|owner| !workloads.looked_up.contains(owner))
                .collect();
            for (namespace, name) in owners {
                if Api::<DaemonSet>::namespaced(client.clone(), &namespace).get_opt(&name).await?.is_some() {
                    workloads.daemon_sets.insert((namespace.clone(), name.clone()));
                }
                workloads.looked_up.insert((namespace, name));
            }
            for pod in page.items {
                workloads.add(pod);
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(workloads),
            }
        }
    }

    /// Adds one pod, kept only when a drain could be blocked by it: a pod on a node that the drain's classification
    /// ([`crate::drain::filters::classify`]) refuses under the strictest drain options (every other option
    /// refuses less), or one a PodDisruptionBudget allowing no disruption selects. A pod evicted or left alone
    /// under every option, selected by no such budget, can block no drain: of a 5000-node cluster's pods, that is
    /// nearly all. A DaemonSet not among [`Workloads::daemon_sets`] counts as missing.
    pub fn add(&mut self, pod: Pod) {
        self.read += 1;
        let facts = PodFacts::new(pod, &self.budgets);
        if facts.node.is_none() {
            return;
        }
        let pod = facts.pod();
        let context = self.context(&facts, &pod);
        let refused =
            matches!(crate::drain::filters::classify(&pod, &DrainOptions::default(), &context), PodVerdict::Block(_));
        let namespace = facts.namespace.as_str();
        let holds = self.budgets.iter().any(|b| {
            b.metadata.namespace.as_deref() == Some(namespace)
                && b.metadata.name.as_ref().is_some_and(|n| facts.budgets.contains(n))
                && b.status.as_ref().is_some_and(|s| s.disruptions_allowed == 0)
        });
        if refused || holds || crate::do_not_disrupt::pod_holds(&pod).is_some() {
            self.pods.push(facts);
        }
    }

    /// What a drain's classification knows of the pod of `facts` (`pod`, built from them): whether its DaemonSet
    /// exists (one not among [`Workloads::daemon_sets`] is missing) and the budgets that select it.
    pub fn context(&self, facts: &PodFacts, pod: &Pod) -> PodContext {
        let daemon_set = crate::drain::filters::daemon_set_of(pod).map(|ds| {
            if self.daemon_sets.contains(&(facts.namespace.clone(), ds.name.clone())) {
                DaemonSetLookup::Exists
            } else {
                DaemonSetLookup::Missing
            }
        });
        PodContext { daemon_set, budgets: Some(facts.budgets.clone()) }
    }
}

/// How many pods one list request returns: a cluster's pods are read in pages, each reduced as it arrives, so
/// that the controller's preflight never holds every pod's whole JSON at once (bench at 1000 nodes: the
/// controller's peak RSS 126 MiB with one list, 71 MiB paged, 32 MiB without a preflight).
const POD_PAGE: u32 = 500;

/// Of a pod, only what a drain's classification ([`crate::drain::filters`]) reads: its name, namespace, node,
/// controller, whether it is a mirror pod, being deleted or uses an emptyDir volume, its phase, and the names of
/// the PodDisruptionBudgets that select it (found when it is read: its labels are not kept). A `Pod`, even
/// trimmed, is kilobytes of mostly empty fields (its spec and volumes above all); this is a few hundred bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodFacts {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    /// The PodDisruptionBudgets that select the pod, by name, sorted (as
    /// [`budgets_selecting`](crate::drain::filters::budgets_selecting) finds them).
    pub budgets: Vec<String>,
    controller: Option<OwnerReference>,
    mirror: bool,
    /// Its do-not-disrupt annotation set to `"true"`, if any (`crate::do_not_disrupt`).
    do_not_disrupt: Option<&'static str>,
    deletion: Option<Time>,
    empty_dir: bool,
    phase: Option<String>,
}

impl PodFacts {
    /// The facts of `pod`, with the budgets among `budgets` that select it.
    pub fn new(pod: Pod, budgets: &[PodDisruptionBudget]) -> PodFacts {
        let selecting = crate::drain::filters::budgets_selecting(budgets, &pod);
        let Pod { metadata, spec, status } = pod;
        let empty_dir =
            spec.as_ref().and_then(|s| s.volumes.as_ref()).is_some_and(|v| v.iter().any(|v| v.empty_dir.is_some()));
        PodFacts {
            namespace: metadata.namespace.unwrap_or_default(),
            name: metadata.name.unwrap_or_default(),
            node: spec.and_then(|s| s.node_name),
            budgets: selecting,
            controller: metadata.owner_references.into_iter().flatten().find(|r| r.controller == Some(true)),
            mirror: metadata.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION)),
            do_not_disrupt: crate::do_not_disrupt::marked(metadata.annotations.as_ref()),
            deletion: metadata.deletion_timestamp,
            empty_dir,
            phase: status.and_then(|s| s.phase),
        }
    }
}

impl PodFacts {
    /// The pod as a drain's classification reads it (built anew: only while one pod is classified).
    pub fn pod(&self) -> Pod {
        let metadata = ObjectMeta {
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            owner_references: self.controller.clone().map(|c| vec![c]),
            annotations: (self.mirror || self.do_not_disrupt.is_some()).then(|| {
                let mirror = self.mirror.then(|| (MIRROR_POD_ANNOTATION.to_owned(), String::new()));
                let marked = self.do_not_disrupt.map(|key| (key.to_owned(), "true".to_owned()));
                mirror.into_iter().chain(marked).collect()
            }),
            deletion_timestamp: self.deletion.clone(),
            ..ObjectMeta::default()
        };
        let volume =
            Volume { name: "empty-dir".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() };
        let spec = PodSpec {
            node_name: self.node.clone(),
            volumes: self.empty_dir.then(|| vec![volume]),
            ..PodSpec::default()
        };
        let status = PodStatus { phase: self.phase.clone(), ..PodStatus::default() };
        Pod { metadata, spec: Some(spec), status: Some(status) }
    }
}

/// Nodes, NodeVersions, ScalingGroups and workloads, each listed once.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub nodes: Vec<SlimNode>,
    pub versions: Vec<NodeVersion>,
    pub scaling_groups: Vec<ScalingGroup>,
    pub workloads: Workloads,
    /// By NodeVersion name: its Kubernetes upgrade as the controller validates it
    /// ([`Snapshot::check_kubernetes`]). A NodeVersion that asks for one and is missing here is
    /// forecast for its image only.
    pub kubernetes: BTreeMap<String, KubernetesSpec>,
    /// The PendingNodes (instances of replacements joining or leaving).
    pub pending: Vec<PendingNode>,
    /// What the cloud said about each node's instance, when it was asked ([`Snapshot::ask_cloud`]).
    pub cloud: Option<CloudAnswers>,
    /// By NodeVersion name: the verdict of each of its health checks, evaluated once
    /// ([`Snapshot::check_health`]). A check that passes counts as passing for its whole `for`.
    pub health: BTreeMap<String, Vec<crate::policy::health::Verdict>>,
    /// By node: why it would wait for the workloads of its pods now (`crate::settle`, [`Snapshot::check_settle`]),
    /// for the rollouts with `settleWorkloads`.
    pub settle: BTreeMap<String, String>,
}

impl Snapshot {
    /// Lists everything a forecast reads. A cluster without the ScalingGroup CRD has no groups.
    pub async fn read(client: &Client) -> Result<Snapshot, kube::Error> {
        let params = ListParams::default();
        let mut nodes = Api::<SlimNode>::all(client.clone()).list(&params).await?.items;
        for node in &mut nodes {
            node.trim();
        }
        let versions = Api::<NodeVersion>::all(client.clone()).list(&params).await?.items;
        let scaling_groups = match Api::<ScalingGroup>::all(client.clone()).list(&params).await {
            Ok(list) => list.items,
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(error) => return Err(error),
        };
        let pending = if scaling_groups.is_empty() {
            Vec::new()
        } else {
            match Api::<PendingNode>::all(client.clone()).list(&params).await {
                Ok(list) => list.items,
                Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
                Err(error) => return Err(error),
            }
        };
        let workloads = Workloads::read(client).await?;
        Ok(Snapshot {
            nodes,
            versions,
            scaling_groups,
            workloads,
            kubernetes: BTreeMap::new(),
            pending,
            cloud: None,
            health: BTreeMap::new(),
            settle: BTreeMap::new(),
        })
    }

    /// Asks `provider` the group and image of every node's instance, as the controller does
    /// ([`crate::groups::instances::ask`]: one call when the provider ID names the group, else two), at most
    /// [`crate::groups::instances::CONCURRENCY`] at once. Instances of another cloud are in no group of it.
    pub async fn ask_cloud(&mut self, provider: &dyn CloudProvider) {
        use futures::StreamExt;
        let ids: Vec<(String, ProviderId)> = self
            .nodes
            .iter()
            .filter_map(|n| {
                let spelled = n.spec.provider_id.clone()?;
                let id = spelled.parse::<ProviderId>().ok()?;
                Some((spelled, id))
            })
            .collect();
        let answers = futures::stream::iter(ids)
            .map(|(spelled, id)| async move {
                if id.cloud() != provider.cloud() {
                    return (spelled, Ok(None));
                }
                (spelled, ask(provider, &id).await.map_err(|e| e.to_string()))
            })
            .buffer_unordered(CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        self.cloud = Some(answers.into_iter().collect());
    }

    /// Which nodes the scaling groups cover (see [`super::membership`]).
    pub fn membership(&self) -> Membership {
        classify(&self.nodes, &self.scaling_groups, &self.pending, &self.active_versions(), self.cloud.as_ref())
    }

    /// Validates the Kubernetes upgrade of each NodeVersion, and of `extra` (a NodeVersion not applied
    /// yet, in place of the one of its name), as the controller does: the components ConfigMap and the
    /// API server's `/version`, read only. A refusal is kept (the forecast holds the rollout on it).
    pub async fn check_kubernetes(&mut self, client: &Client, extra: Option<&NodeVersion>) {
        let mut versions: Vec<Arc<NodeVersion>> = self
            .versions
            .iter()
            .filter(|v| extra.is_none_or(|e| e.name_any() != v.name_any()))
            .cloned()
            .map(Arc::new)
            .collect();
        versions.extend(extra.cloned().map(Arc::new));
        if versions.iter().all(|v| v.spec.kubernetes_cluster_version.is_none()) {
            return;
        }
        let checked = ClusterVersions::new(client.clone()).check_all(&versions).await;
        self.kubernetes = versions.iter().zip(checked).filter_map(|(v, k)| Some((v.name_any(), k?))).collect();
    }

    /// Evaluates the health checks of each NodeVersion, and of `extra` (a NodeVersion not applied yet, in place of
    /// the one of its name), once, as the controller does (`crate::health_checks`): get/list of the objects they
    /// name, read only. A check that passes is taken as passing long enough (its `for`); one that fails, as failing
    /// since `now`.
    pub async fn check_health(&mut self, client: &Client, extra: Option<&NodeVersion>, now: Timestamp) {
        let versions: Vec<&NodeVersion> = self
            .versions
            .iter()
            .filter(|v| extra.is_none_or(|e| e.name_any() != v.name_any()))
            .chain(extra)
            .filter(|v| !v.spec.rollout.health_checks.is_empty())
            .collect();
        if versions.is_empty() {
            return;
        }
        let evaluator = crate::health_checks::HealthChecks::new(client.clone(), Default::default());
        for version in versions {
            let Ok(policy) = crate::policy::Policy::from_spec(&version.spec.rollout, now) else { continue };
            let mut verdicts = Vec::new();
            for check in &policy.health_checks {
                let (passing, observed) = evaluator.evaluate(check).await;
                let since = if passing { Timestamp::MIN } else { now };
                verdicts.push(crate::policy::health::Verdict { check: check.name.clone(), passing, since, observed });
            }
            self.health.insert(version.name_any(), verdicts);
        }
    }

    /// With a NodeVersion (or `extra`) that waits for workloads to settle (`settleWorkloads`), which nodes would
    /// wait now, as the controller looks before a start (`crate::settle`): read only. A read that fails is an
    /// error (the plan says it cannot read the cluster).
    pub async fn check_settle(&mut self, client: &Client, extra: Option<&NodeVersion>) -> Result<(), kube::Error> {
        let wanted = self.versions.iter().chain(extra).any(|v| v.spec.rollout.settle_workloads);
        if wanted {
            self.settle = crate::settle::unsettled_nodes(client, &self.workloads.budgets).await?;
        }
        Ok(())
    }

    /// The NodeVersions that ask for a Kubernetes upgrade [`Snapshot::check_kubernetes`] did not
    /// validate (only their image is forecast).
    pub fn kubernetes_unchecked(&self) -> Vec<String> {
        self.active_versions()
            .into_iter()
            .filter(|v| v.spec.kubernetes_cluster_version.is_some() || v.spec.kubernetes_components_reference.is_some())
            .map(|v| v.name_any())
            .filter(|name| !self.kubernetes.contains_key(name))
            .collect()
    }

    /// Puts `version` in place of the NodeVersion of the same name, or adds it as the newest.
    pub fn with_version(mut self, mut version: NodeVersion, now: Timestamp) -> Snapshot {
        match self.versions.iter_mut().find(|v| v.name_any() == version.name_any()) {
            Some(existing) => {
                version.metadata.creation_timestamp = existing.metadata.creation_timestamp.clone();
                version.metadata.generation = existing.metadata.generation.map(|g| g + 1);
                version.status = existing.status.clone();
                *existing = version;
            }
            None => {
                version.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
                version.metadata.generation = Some(1);
                self.versions.push(version);
            }
        }
        self
    }

    /// The NodeVersions not being deleted, oldest first, as the controller plans them.
    pub fn active_versions(&self) -> Vec<&NodeVersion> {
        let mut versions: Vec<&NodeVersion> =
            self.versions.iter().filter(|v| v.metadata.deletion_timestamp.is_none()).collect();
        versions.sort_by(|a, b| {
            (a.metadata.creation_timestamp.as_ref().map(|t| t.0), a.name_any())
                .cmp(&(b.metadata.creation_timestamp.as_ref().map(|t| t.0), b.name_any()))
        });
        versions
    }

    /// The rollouts of [`Snapshot::active_versions`] (specs validated as the controller does) and the
    /// nodes as the policy sees them (a node in the drain step drains).
    pub fn views(&self, now: Timestamp) -> (Vec<Rollout>, Vec<NodeView>) {
        let rollouts: Vec<Rollout> = self
            .active_versions()
            .into_iter()
            .map(|v| Rollout {
                kubernetes: self.kubernetes.get(&v.name_any()).cloned(),
                health: self.health.get(&v.name_any()).cloned().unwrap_or_default(),
                ..rollout(v, now)
            })
            .collect();
        let selectors: Vec<Option<&NodeSelector>> =
            rollouts.iter().map(|r| r.spec.acting().map(|s| &s.policy.selector)).collect();
        let views = self
            .nodes
            .iter()
            .map(|node| {
                let draining = shared::protocol::ControllerAnnotations::read(
                    node.metadata.annotations.as_ref().unwrap_or(&Default::default()),
                )
                .is_ok_and(|c| c.intent.is_some_and(|i| i.step == Step::Drain));
                let drain =
                    if draining { DrainProgress::Running { waiting_on: None } } else { DrainProgress::NotRunning };
                let mut view = node.view(selectors.iter().copied(), drain);
                // The nodes that would wait for their workloads now, under a rollout that waits for them.
                let settles = view
                    .selected_by
                    .first()
                    .and_then(|i| rollouts.get(*i))
                    .and_then(|r| r.spec.acting())
                    .is_some_and(|s| s.policy.settle.is_some());
                if let Some(why) = self.settle.get(&view.name).filter(|_| settles) {
                    let message = format!("{why}: the node waits until the workloads of its pods are whole again");
                    view.settle = Some(crate::policy::Hold::new(crate::reason::Reason::WaitingForWorkloads, message));
                }
                view
            })
            .collect();
        (rollouts, views)
    }
}

/// The rollout of `version`: its spec validated, or the errors and the last valid spec of its
/// status.
pub fn rollout(version: &NodeVersion, now: Timestamp) -> Rollout {
    let generation = version.metadata.generation.unwrap_or_default();
    let spec = match ValidSpec::from_spec(&version.spec, generation, now) {
        Ok(spec) => SpecState::Valid(Arc::new(spec)),
        Err(errors) => {
            let last_valid = version
                .status
                .as_ref()
                .and_then(|s| s.last_valid_spec.as_ref())
                .and_then(|l| ValidSpec::from_last_valid(l, now).ok())
                .map(Arc::new);
            SpecState::Invalid { errors, last_valid }
        }
    };
    Rollout::new(version.name_any(), spec, version.status.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::filters::{
        DaemonSetLookup, PodContext, budgets_matter, budgets_selecting, classify, daemon_set_of,
    };
    use serde_json::json;
    use shared::crd::DrainOptions;

    /// Pods of every kind a drain tells apart, each with the containers, statuses and managed fields a
    /// real pod carries.
    fn pods() -> Vec<Pod> {
        let owner =
            |kind: &str| json!([{"apiVersion": "apps/v1", "kind": kind, "name": "o", "uid": "u", "controller": true}]);
        let metadata = [
            json!({"name": "bare", "namespace": "a", "labels": {"app": "web"}}),
            json!({"name": "rs", "namespace": "a", "labels": {"app": "web"}, "ownerReferences": owner("ReplicaSet")}),
            json!({"name": "ds", "namespace": "a", "ownerReferences": owner("DaemonSet")}),
            json!({"name": "mirror", "namespace": "a", "annotations": {"kubernetes.io/config.mirror": "x"}}),
            json!({"name": "going", "namespace": "a", "deletionTimestamp": "2026-11-24T10:00:00Z", "ownerReferences": owner("ReplicaSet")}),
        ];
        let mut pods = Vec::new();
        for meta in metadata {
            for (volumes, phase) in
                [(json!([]), "Running"), (json!([{"name": "v", "emptyDir": {}}]), "Running"), (json!([]), "Succeeded")]
            {
                let mut meta = meta.clone();
                meta["managedFields"] =
                    json!([{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
                pods.push(
                    serde_json::from_value(json!({
                        "metadata": meta,
                        "spec": {"nodeName": "w1", "volumes": volumes,
                                 "containers": [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "1"}]}]},
                        "status": {"phase": phase, "containerStatuses": [{"name": "c", "image": "nginx", "imageID": "",
                                   "ready": true, "restartCount": 0}]}
                    }))
                    .unwrap(),
                );
            }
        }
        pods
    }

    #[test]
    fn a_pods_facts_are_classified_as_the_whole_pod_is() {
        let budget: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "a"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}}
        }))
        .unwrap();
        let budgets = [budget];
        for pod in pods() {
            let facts = PodFacts::new(pod.clone(), &budgets);
            assert_eq!(facts.node.as_deref(), Some("w1"));
            let trimmed = facts.pod();
            assert!(trimmed.metadata.managed_fields.is_none());
            assert!(trimmed.spec.as_ref().is_some_and(|s| s.containers.is_empty()));
            for options in [DrainOptions::default(), DrainOptions { force: true, delete_empty_dir_data: true }] {
                for daemon_set in [None, Some(DaemonSetLookup::Exists), Some(DaemonSetLookup::Missing)] {
                    let context = PodContext { daemon_set, budgets: Some(budgets_selecting(&budgets, &pod)) };
                    assert_eq!(
                        classify(&trimmed, &options, &context),
                        classify(&pod, &options, &context),
                        "{:?}",
                        pod.metadata.name
                    );
                }
            }
            assert_eq!(budgets_matter(&trimmed), budgets_matter(&pod));
            assert_eq!(facts.budgets, budgets_selecting(&budgets, &pod));
            assert_eq!(daemon_set_of(&trimmed), daemon_set_of(&pod));
        }
    }
}
