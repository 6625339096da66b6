//! Validates a NodeVersion's Kubernetes upgrade (`kubernetesClusterVersion` with `kubernetesComponentsReference`)
//! before any node is touched: the components ConfigMap by every rule of [`Release::from_config_map`], and the
//! version against what the API server's `/version` reports by the skew policy ([`check_upgrade`]).
//!
//! # Guarantees
//! - A refusal names the field or rule at fault; the rollout turns it into a hold (condition and Event).
//! - A ConfigMap that validated is remembered by name and version (it is immutable); one that is missing or
//!   cannot be read is looked up again on every reconcile.
//! - `/version` is read at most once per reconcile, and only while some NodeVersion asks for a version.
//! - Nothing here is watched: the reconciler validates a refused upgrade again 30 s later.

use crate::policy::kubernetes::{KubernetesSpec, KubernetesTarget};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use shared::components::{DEFAULT_INSTALL_ROOTS, NAMESPACE, Release};
use shared::crd::NodeVersion;
use shared::version::{KubeVersion, check_upgrade};
use std::collections::HashMap;

/// Reads and validates Kubernetes upgrades; holds the ConfigMaps that validated.
pub struct ClusterVersions {
    config_maps: Api<ConfigMap>,
    client: kube::Client,
    /// By (ConfigMap name, version): the components hash.
    valid: HashMap<(String, String), String>,
    /// The highest version `/version` reported: mid-upgrade the Service may answer from an API server not upgraded
    /// yet, and the version must never go backwards (the plan also takes it from the control-plane nodes).
    highest: Option<KubeVersion>,
}

impl ClusterVersions {
    pub fn new(client: kube::Client) -> Self {
        ClusterVersions {
            config_maps: Api::namespaced(client.clone(), NAMESPACE),
            client,
            valid: HashMap::new(),
            highest: None,
        }
    }

    /// The Kubernetes upgrade of each of `versions` (`None` for those that ask none).
    pub async fn check_all(&mut self, versions: &[std::sync::Arc<NodeVersion>]) -> Vec<Option<KubernetesSpec>> {
        let mut api_server: Option<Result<KubeVersion, String>> = None;
        let mut out = Vec::with_capacity(versions.len());
        for version in versions {
            let spec = &version.spec;
            let (wanted, reference) =
                (spec.kubernetes_cluster_version.as_deref(), spec.kubernetes_components_reference.as_deref());
            let checked = match (wanted, reference) {
                (None, None) => None,
                (Some(_), None) | (None, Some(_)) => Some(KubernetesSpec::Refused(
                    "spec.kubernetesClusterVersion and spec.kubernetesComponentsReference are set together or not at all"
                        .to_owned(),
                )),
                (Some(wanted), Some(reference)) => {
                    if api_server.is_none() {
                        let read = self.api_server_version().await;
                        api_server = Some(read.map(|v| self.never_backwards(v)));
                    }
                    let running = api_server.clone().unwrap_or_else(|| Err("not read".to_owned()));
                    Some(self.check(wanted, reference, running).await)
                }
            };
            out.push(checked);
        }
        out
    }

    /// `read`, or the highest version read before if that is higher.
    fn never_backwards(&mut self, read: KubeVersion) -> KubeVersion {
        let highest = match self.highest.take() {
            Some(highest) if highest > read => highest,
            _ => read,
        };
        self.highest = Some(highest.clone());
        highest
    }

    async fn api_server_version(&self) -> Result<KubeVersion, String> {
        let info = self.client.apiserver_version().await.map_err(|e| format!("cannot read /version: {e}"))?;
        info.git_version.parse().map_err(|e| format!("/version reports gitVersion {:?}: {e}", info.git_version))
    }

    async fn check(&mut self, wanted: &str, reference: &str, running: Result<KubeVersion, String>) -> KubernetesSpec {
        let refused = KubernetesSpec::Refused;
        let version: KubeVersion = match wanted.parse() {
            Ok(version) => version,
            Err(error) => return refused(format!("spec.kubernetesClusterVersion: {error}")),
        };
        let api_server = match running {
            Ok(running) => running,
            Err(error) => {
                return refused(format!("the API server's version is unknown, so no node is touched: {error}"));
            }
        };
        if let Err(refusal) = check_upgrade(&api_server, &version) {
            return refused(format!("spec.kubernetesClusterVersion: {refusal}"));
        }
        let key = (reference.to_owned(), version.to_string());
        let hash = match self.valid.get(&key) {
            Some(hash) => hash.clone(),
            None => {
                let config_map = match self.config_maps.get_opt(reference).await {
                    Ok(Some(config_map)) => config_map,
                    Ok(None) => {
                        return refused(format!(
                            "spec.kubernetesComponentsReference: the ConfigMap {NAMESPACE}/{reference} does not exist"
                        ));
                    }
                    Err(error) => {
                        return refused(format!(
                            "spec.kubernetesComponentsReference: cannot read the ConfigMap {NAMESPACE}/{reference}: \
                             {error}"
                        ));
                    }
                };
                match Release::from_config_map(&config_map, Some(&version), DEFAULT_INSTALL_ROOTS) {
                    Ok(release) => {
                        let hash = release.hash.to_string();
                        self.valid.insert(key, hash.clone());
                        hash
                    }
                    Err(error) => return refused(format!("spec.kubernetesComponentsReference: {error}")),
                }
            }
        };
        KubernetesSpec::Upgrade(KubernetesTarget { version, components: reference.to_owned(), hash, api_server })
    }
}
