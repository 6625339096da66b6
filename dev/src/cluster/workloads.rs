//! The sample workloads of a dev cluster: Deployments and StatefulSets with PodDisruptionBudgets (a mix of
//! `minAvailable` and `maxUnavailable`), and a DaemonSet, sized to the number of workers.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{Value, json};

/// The image of every sample pod.
pub const SAMPLE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// Which budgets the sample workloads get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdbStyle {
    /// No PodDisruptionBudgets.
    None,
    /// `minAvailable: replicas - 1` for every workload.
    MinAvailable,
    /// `maxUnavailable: 1` for every workload.
    MaxUnavailable,
    /// In turn: `maxUnavailable: 1`, `minAvailable: replicas - 1`, `maxUnavailable: "50%"`,
    /// `minAvailable: "50%"` (the last only for 2 or more replicas; one replica gets `maxUnavailable: 1`).
    Mixed,
}

/// The sample workloads.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleWorkloads {
    /// Their namespace.
    pub namespace: String,
    /// Workload pods per worker node (Deployments and StatefulSets together).
    pub pods_per_worker: usize,
    /// Replicas of each Deployment and StatefulSet.
    pub replicas: usize,
    /// Every n-th workload is a StatefulSet (0: none).
    pub statefulset_every: usize,
    /// The budgets.
    pub pdb: PdbStyle,
    /// A DaemonSet (`node-agent`) on every node, control planes included.
    pub daemonset: bool,
    /// `terminationGracePeriodSeconds` of the pods.
    pub termination_grace_seconds: i64,
}

impl Default for SampleWorkloads {
    fn default() -> Self {
        SampleWorkloads {
            namespace: "demo".to_owned(),
            pods_per_worker: 2,
            replicas: 3,
            statefulset_every: 3,
            pdb: PdbStyle::Mixed,
            daemonset: true,
            termination_grace_seconds: 30,
        }
    }
}

/// The objects to create, in order.
pub struct Manifests {
    /// The namespace.
    pub namespace: Namespace,
    /// Deployments.
    pub deployments: Vec<Deployment>,
    /// StatefulSets.
    pub statefulsets: Vec<StatefulSet>,
    /// Budgets.
    pub pdbs: Vec<PodDisruptionBudget>,
    /// The DaemonSet.
    pub daemonset: Option<DaemonSet>,
    /// Deployment and StatefulSet pods in total.
    pub replica_pods: usize,
}

fn pod_template(app: &str, grace: i64, extra_spec: Value) -> Value {
    let mut spec = json!({"terminationGracePeriodSeconds": grace,
                          "containers": [{"name": "app", "image": SAMPLE_IMAGE}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"metadata": {"labels": {"app": app}}, "spec": spec})
}

fn budget(style: PdbStyle, index: usize, replicas: usize) -> Option<Value> {
    let min_count = json!({"minAvailable": replicas.saturating_sub(1)});
    let max_one = json!({"maxUnavailable": 1});
    Some(match style {
        PdbStyle::None => return None,
        PdbStyle::MinAvailable => min_count,
        PdbStyle::MaxUnavailable => max_one,
        PdbStyle::Mixed => match index % 4 {
            0 => max_one,
            1 => min_count,
            2 => json!({"maxUnavailable": "50%"}),
            _ if replicas >= 2 => json!({"minAvailable": "50%"}),
            _ => max_one,
        },
    })
}

fn typed<T: serde::de::DeserializeOwned>(value: Value) -> T {
    match serde_json::from_value(value) {
        Ok(object) => object,
        // Every manifest here is a literal of the type's own fields.
        Err(error) => unreachable!("a sample manifest does not decode: {error}"),
    }
}

impl SampleWorkloads {
    /// The manifests for `workers` worker nodes.
    pub fn manifests(&self, workers: usize) -> Manifests {
        let replicas = self.replicas.max(1);
        let pods = workers * self.pods_per_worker;
        let count = pods.div_ceil(replicas);
        let grace = self.termination_grace_seconds;
        let mut manifests = Manifests {
            namespace: typed(json!({"metadata": {"name": self.namespace}})),
            deployments: Vec::new(),
            statefulsets: Vec::new(),
            pdbs: Vec::new(),
            daemonset: None,
            replica_pods: count * replicas,
        };
        for index in 0..count {
            let stateful = self.statefulset_every > 0 && index % self.statefulset_every == self.statefulset_every - 1;
            let name = if stateful { format!("db-{index}") } else { format!("web-{index}") };
            let template = pod_template(&name, grace, json!({}));
            let spec = json!({"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template});
            if stateful {
                let mut spec = spec;
                spec["serviceName"] = json!(name);
                manifests.statefulsets.push(typed(json!({"metadata": {"name": name}, "spec": spec})));
            } else {
                manifests.deployments.push(typed(json!({"metadata": {"name": name}, "spec": spec})));
            }
            if let Some(mut pdb_spec) = budget(self.pdb, index, replicas) {
                pdb_spec["selector"] = json!({"matchLabels": {"app": name}});
                manifests.pdbs.push(typed(json!({"metadata": {"name": name}, "spec": pdb_spec})));
            }
        }
        if self.daemonset {
            let tolerations = json!({"tolerations": [{"key": "node-role.kubernetes.io/control-plane",
                                                      "operator": "Exists", "effect": "NoSchedule"}]});
            let template = pod_template("node-agent", grace, tolerations);
            manifests.daemonset = Some(typed(json!({"metadata": {"name": "node-agent"},
                "spec": {"selector": {"matchLabels": {"app": "node-agent"}}, "template": template}})));
        }
        manifests
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn workloads_are_sized_to_the_workers_with_a_mix_of_budgets() {
        let samples = SampleWorkloads::default();
        let manifests = samples.manifests(6);
        assert_eq!(manifests.replica_pods, 12);
        assert_eq!(manifests.deployments.len() + manifests.statefulsets.len(), 4);
        assert_eq!(manifests.statefulsets.len(), 1);
        assert_eq!(manifests.pdbs.len(), 4);
        let specs: Vec<_> = manifests.pdbs.iter().map(|p| p.spec.clone().unwrap()).collect();
        assert_eq!(specs[0].max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(specs[1].min_available, Some(IntOrString::Int(2)));
        assert_eq!(specs[2].max_unavailable, Some(IntOrString::String("50%".into())));
        assert_eq!(specs[3].min_available, Some(IntOrString::String("50%".into())));
        assert!(manifests.daemonset.is_some());
        let none = SampleWorkloads { pdb: PdbStyle::None, daemonset: false, ..SampleWorkloads::default() };
        let manifests = none.manifests(0);
        assert_eq!((manifests.replica_pods, manifests.pdbs.len()), (0, 0));
        assert!(manifests.daemonset.is_none());
    }
}
