//! Kubernetes on a simulated host: the kubeadm upgrade (`POST /_dev/hosts/{node}/kubernetes`) and the fetch ahead
//! of intent `fetch` (`POST .../kubernetes/fetch`, `POST .../kubernetes/discard`), both with the agent's own
//! installer (`agent::components`), so the real code paths run: downloads verified as they stream, a fetch cache
//! (the agent's default path under the host's directory) whose files are hashed again before they are installed.
//!
//! # Timing model
//! - **fetch**: the download time, which is the host's stage duration (`stageSeconds`, else the cluster's), when
//!   anything had to be downloaded; a fetch that finds every component in the cache, verified, is instant.
//! - **upgrade**: the download time again only when some component was not in the cache (an upgrade whose every
//!   component was fetched ahead and still verifies skips it), then kubeadm (a tenth of the reboot duration), then
//!   the kubelet restart (another tenth, the node NotReady meanwhile). So a node that fetched ahead is cordoned
//!   for the kubeadm and restart times only.
//!
//! # Faults
//! - A fetch is refused as a stage is: 503 when the host is not running (or goes down or reboots during the
//!   download time), the injected `stageFailure`'s status and message. An upgrade ignores `stageFailure` (as
//!   before); `kubeadmFailure` makes its kubeadm fail with that output (500).
//! - A request outside the components rules (a bad hash, version, role or install path) is refused with 400; a
//!   download that fails answers 502 (the agent retries), a hash mismatch 422 (nothing of it is kept, nothing is
//!   installed).
//! - Discarding a host's cache needs the host running (503 otherwise); it is idempotent.

use super::{HostError, Hosts};
use agent::components::{InstallError, Installer};
use serde::Deserialize;
use std::sync::Arc;

/// A Kubernetes upgrade as the agent's simulated backend asks for it (`POST .../kubernetes`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesRequest {
    /// The version (`v1.34.1`).
    pub version: String,
    /// `apply` (the first control-plane node) or `node`.
    pub role: String,
    /// The components, as the ConfigMap lists them (inline ones as `data:` URLs).
    pub components: Vec<shared::components::Component>,
}

/// A fetch ahead as the agent's simulated backend asks for it (`POST .../kubernetes/fetch`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FetchRequest {
    /// The version (`v1.34.1`).
    pub version: String,
    /// The components, as for [`KubernetesRequest`].
    pub components: Vec<shared::components::Component>,
}

impl Hosts {
    /// Calls `upgraded` with the version whenever a simulated `kubeadm upgrade apply` upgraded the control plane
    /// (the cluster makes its API server report it).
    pub fn on_control_plane_upgrade(&self, upgraded: impl Fn(&str) + Send + Sync + 'static) {
        *self.inner.on_apply.write() = Some(Arc::new(upgraded));
    }

    /// Runs a simulated kubeadm upgrade on `node`'s host (see the module docs).
    pub async fn upgrade_kubernetes(&self, node: &str, request: &KubernetesRequest) -> Result<(), HostError> {
        let version = parse_version(&request.version)?;
        let apply = match request.role.as_str() {
            "apply" => true,
            "node" => false,
            other => return Err(HostError::BadUpgrade(format!("role {other:?} is neither apply nor node"))),
        };
        let components = verified_all(&request.components)?;
        let ((download_time, tenth_of_reboot), boots) = self.running(node, |host| {
            let reboot = host.faults.reboot_seconds.unwrap_or(self.inner.reboot);
            (host.faults.stage_seconds.unwrap_or(self.inner.stage), reboot / 10)
        })?;
        let installer = self.installer(node)?;
        // Downloads what the cache does not hold verified; the rest is copied from the cache, hashed again.
        let mut prepared = installer.prepare(&components).await.map_err(install_error)?;
        if prepared.downloaded() > 0 {
            self.sleep(node, download_time, boots).await?;
        }
        prepared.install_where(|c| !agent::kubeadm::replaced_after_kubeadm(c)).await.map_err(install_error)?;
        if let Some(output) = self.running(node, |host| host.faults.kubeadm_failure.clone())?.0 {
            return Err(HostError::KubeadmFailed { output });
        }
        self.sleep(node, tenth_of_reboot, boots).await?;
        if apply && let Some(upgraded) = self.inner.on_apply.read().clone() {
            upgraded(&version.to_string());
        }
        let record = prepared.finish().await.map_err(install_error)?;
        {
            let mut hosts = self.inner.hosts.lock();
            let host = hosts.get_mut(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
            host.facts.components_hash = Some(record.hash);
            host.kubelet_restarting = true;
        }
        self.notify(node);
        self.sleep(node, tenth_of_reboot, boots).await?;
        {
            let mut hosts = self.inner.hosts.lock();
            let host = hosts.get_mut(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
            host.kubelet_restarting = false;
            host.kubelet_version = Some(version.to_string());
        }
        self.notify(node);
        Ok(())
    }

    /// Fetches the components of `request` into `node`'s fetch cache ahead of its upgrade (see the module docs).
    pub async fn fetch_kubernetes(&self, node: &str, request: &FetchRequest) -> Result<(), HostError> {
        parse_version(&request.version)?;
        let components = verified_all(&request.components)?;
        let ((failure, download_time), boots) = self.running(node, |host| {
            (host.faults.stage_failure.clone(), host.faults.stage_seconds.unwrap_or(self.inner.stage))
        })?;
        if let Some(failure) = failure {
            return Err(HostError::StageFailed { status: failure.status, message: failure.message });
        }
        let fetched = self.installer(node)?.fetch(&components).await.map_err(install_error)?;
        if fetched.downloaded > 0 {
            self.sleep(node, download_time, boots).await?;
        }
        Ok(())
    }

    /// The files in `node`'s fetch cache (names: the hex SHA-256 of each component fetched ahead, and any temporary
    /// file an interrupted fetch left), sorted; empty when it has none or the host is unknown.
    pub fn fetched(&self, node: &str) -> Vec<String> {
        let Ok(dir) = self.installer(node).map(|i| i.cache_path()) else { return Vec::new() };
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|entries| entries.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned())).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Deletes `node`'s fetch cache.
    pub async fn discard_fetched(&self, node: &str) -> Result<(), HostError> {
        self.running(node, |_| ())?;
        self.installer(node)?.discard_fetched().await.map_err(install_error)
    }

    /// The installer of `node`'s host: its own directory under the hosts' install root, with the agent's record
    /// and fetch cache paths under it.
    fn installer(&self, node: &str) -> Result<Installer, HostError> {
        Installer::new(self.inner.install_root.join(node), agent::components::DEFAULT_RECORD).map_err(install_error)
    }
}

/// The answer to an installer's error: a failed download may pass (502), anything else will not (422).
fn install_error(error: InstallError) -> HostError {
    HostError::Install { transient: matches!(error, InstallError::Download { .. }), message: error.to_string() }
}

fn parse_version(version: &str) -> Result<shared::version::KubeVersion, HostError> {
    version.parse().map_err(|e: shared::version::VersionError| HostError::BadUpgrade(e.to_string()))
}

/// Every component of a request, as the installer takes them; 400 for the first that breaks a rule.
fn verified_all(
    components: &[shared::components::Component],
) -> Result<Vec<shared::components::VerifiedComponent>, HostError> {
    components.iter().map(verified).collect::<Result<Vec<_>, _>>().map_err(HostError::BadUpgrade)
}

/// A component of a request as the installer takes it: the hash parsed, a `data:` URL decoded.
fn verified(component: &shared::components::Component) -> Result<shared::components::VerifiedComponent, String> {
    use shared::components::{DEFAULT_INSTALL_ROOTS, Source, check_install_path, decode_data_url};
    check_install_path(&component.install_path, DEFAULT_INSTALL_ROOTS)
        .map_err(|e| format!("component {}: {e}", component.install_path))?;
    let hash = component.hash.parse().map_err(|e| format!("component {}: hash: {e}", component.install_path))?;
    let source = if component.url.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("data:")) {
        Source::Inline(
            decode_data_url(&component.url).map_err(|e| format!("component {}: {e}", component.install_path))?,
        )
    } else {
        Source::Download(component.url.clone())
    };
    Ok(shared::components::VerifiedComponent {
        source,
        hash,
        install_path: component.install_path.clone(),
        extract: component.extract,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{HostFaults, StageFailure};
    use super::*;
    use crate::timing::Timing;
    use parking_lot::Mutex;
    use std::time::{Duration, Instant};

    /// The request the agent's simulated backend sends for `config_map`.
    fn request(config_map: &k8s_openapi::api::core::v1::ConfigMap, role: &str) -> KubernetesRequest {
        let data = config_map.data.as_ref().unwrap();
        KubernetesRequest {
            version: data["cluster-version"].clone(),
            role: role.into(),
            components: serde_json::from_str(&data["components"]).unwrap(),
        }
    }

    #[tokio::test]
    async fn a_simulated_kubeadm_upgrade_installs_verified_components_and_upgrades_the_control_plane() {
        let timing = Timing { stage: Duration::from_millis(20), reboot: Duration::from_millis(200), ..Timing::fast() };
        let hosts = Hosts::new("v1", &timing);
        for node in ["cp", "w1", "w2", "w3"] {
            hosts.add(node, "v1").unwrap();
        }
        let applied = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = applied.clone();
        hosts.on_control_plane_upgrade(move |version| seen.lock().push(version.to_owned()));
        let artifacts = crate::artifacts::Artifacts::start().await.unwrap();
        let config_map = artifacts.publish_release("v1.34.1");
        let hash = config_map.metadata.name.as_deref().unwrap().replace("k8s-components-sha256-", "sha256:");

        hosts.upgrade_kubernetes("cp", &request(&config_map, "apply")).await.unwrap();
        assert_eq!(*applied.lock(), ["v1.34.1"]);
        let cp = hosts.state("cp").unwrap();
        assert_eq!((cp.kubelet_version.as_deref(), cp.kubelet_restarting), (Some("v1.34.1"), false));
        assert_eq!(cp.facts.components_hash.as_deref(), Some(hash.as_str()));
        hosts.upgrade_kubernetes("w1", &request(&config_map, "node")).await.unwrap();
        assert_eq!(applied.lock().len(), 1, "upgrade node leaves the control plane alone");

        // A corrupt kubelet: nothing installed, kubeadm never ran.
        artifacts.set_fault("v1.34.1/kubelet", Some(crate::artifacts::ArtifactFault::Corrupt));
        let error = hosts.upgrade_kubernetes("w2", &request(&config_map, "node")).await.unwrap_err();
        assert_eq!(error.status(), 422, "{error}");
        assert!(error.to_string().contains("nothing was installed"), "{error}");
        let w2 = hosts.state("w2").unwrap();
        assert_eq!((w2.facts.components_hash, w2.kubelet_version), (None, None));
        assert!(!hosts.inner.install_root.join("w2/usr/local/bin/kubeadm").exists());
        // Unreachable: a transient failure.
        artifacts.set_fault("v1.34.1/kubelet", Some(crate::artifacts::ArtifactFault::Unreachable));
        assert_eq!(hosts.upgrade_kubernetes("w2", &request(&config_map, "node")).await.unwrap_err().status(), 502);
        // kubeadm fails with its output; the kubelet is not replaced.
        artifacts.set_fault("v1.34.1/kubelet", None);
        let output = "[upgrade/node] FATAL: couldn't create a Kubernetes client".to_owned();
        hosts.set_faults("w3", HostFaults { kubeadm_failure: Some(output.clone()), ..Default::default() }).unwrap();
        let error = hosts.upgrade_kubernetes("w3", &request(&config_map, "node")).await.unwrap_err();
        assert_eq!((error.status(), error.to_string()), (500, format!("kubeadm upgrade failed: {output}")));
        assert!(!hosts.inner.install_root.join("w3/usr/local/bin/kubelet").exists());
        assert_eq!(hosts.state("w3").unwrap().kubelet_version, None);
        // A request outside the rules is refused.
        let mut bad = request(&config_map, "first");
        assert_eq!(hosts.upgrade_kubernetes("w3", &bad).await.unwrap_err().status(), 400);
        bad.role = "node".into();
        bad.components[0].install_path = "/usr/local/bin/../../etc/passwd".into();
        assert_eq!(hosts.upgrade_kubernetes("w3", &bad).await.unwrap_err().status(), 400);
        artifacts.shutdown();
    }

    /// The fetch the agent's simulated backend sends for `config_map`.
    fn fetch(config_map: &k8s_openapi::api::core::v1::ConfigMap) -> FetchRequest {
        let KubernetesRequest { version, components, .. } = request(config_map, "node");
        FetchRequest { version, components }
    }

    /// Hosts whose downloads take 100 ms unless a host says otherwise, kubeadm and the restart 20 ms each, and
    /// the artifacts of v1.34.1.
    async fn fetching_hosts(
        nodes: &[&str],
    ) -> (Hosts, crate::artifacts::Artifacts, k8s_openapi::api::core::v1::ConfigMap) {
        let timing = Timing { stage: Duration::from_millis(100), reboot: Duration::from_millis(200), ..Timing::fast() };
        let hosts = Hosts::new("v1", &timing);
        for node in nodes {
            hosts.add(node, "v1").unwrap();
        }
        let artifacts = crate::artifacts::Artifacts::start().await.unwrap();
        let config_map = artifacts.publish_release("v1.34.1");
        (hosts, artifacts, config_map)
    }

    fn download_time(hosts: &Hosts, node: &str, seconds: u64) {
        let faults = HostFaults { stage_seconds: Some(Duration::from_secs(seconds)), ..Default::default() };
        hosts.set_faults(node, faults).unwrap();
    }

    fn cached(hosts: &Hosts, node: &str) -> usize {
        hosts.fetched(node).len()
    }

    #[tokio::test]
    async fn an_upgrade_after_a_fetch_does_not_wait_the_download_time_again() {
        let (hosts, artifacts, config_map) = fetching_hosts(&["w1"]).await;
        let downloads = fetch(&config_map).components.iter().filter(|c| !c.url.starts_with("data:")).count();
        hosts.fetch_kubernetes("w1", &fetch(&config_map)).await.unwrap();
        assert_eq!(cached(&hosts, "w1"), downloads);
        assert!(!hosts.inner.install_root.join("w1/usr/local/bin/kubeadm").exists(), "nothing installed");
        assert_eq!(hosts.state("w1").unwrap().facts.components_hash, None);
        // Downloads would now take a minute: neither a fetch again nor the upgrade downloads anything.
        download_time(&hosts, "w1", 60);
        let started = Instant::now();
        hosts.fetch_kubernetes("w1", &fetch(&config_map)).await.unwrap();
        hosts.upgrade_kubernetes("w1", &request(&config_map, "node")).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
        let w1 = hosts.state("w1").unwrap();
        assert_eq!(w1.kubelet_version.as_deref(), Some("v1.34.1"));
        assert!(w1.facts.components_hash.is_some());
        artifacts.shutdown();
    }

    #[tokio::test]
    async fn an_upgrade_after_a_discard_waits_the_download_time() {
        let (hosts, artifacts, config_map) = fetching_hosts(&["w1"]).await;
        hosts.fetch_kubernetes("w1", &fetch(&config_map)).await.unwrap();
        hosts.discard_fetched("w1").await.unwrap();
        assert_eq!(cached(&hosts, "w1"), 0);
        hosts.discard_fetched("w1").await.unwrap();
        download_time(&hosts, "w1", 1);
        let started = Instant::now();
        hosts.upgrade_kubernetes("w1", &request(&config_map, "node")).await.unwrap();
        assert!(started.elapsed() >= Duration::from_secs(1), "{:?}", started.elapsed());
        artifacts.shutdown();
    }

    #[tokio::test]
    async fn a_fetch_is_refused_as_a_stage_is_and_keeps_nothing_unverified() {
        let (hosts, artifacts, config_map) = fetching_hosts(&["w1", "w2"]).await;
        // A bad hash, a bad version: refused before anything is downloaded.
        let mut bad = fetch(&config_map);
        bad.components[0].hash = "sha256:zz".into();
        assert_eq!(hosts.fetch_kubernetes("w1", &bad).await.unwrap_err().status(), 400);
        let mut bad = fetch(&config_map);
        bad.version = "1.34".into();
        assert_eq!(hosts.fetch_kubernetes("w1", &bad).await.unwrap_err().status(), 400);
        assert_eq!(cached(&hosts, "w1"), 0);
        // A stage failure fault fails fetches too, with its status and message.
        let failure = StageFailure { status: 507, message: "disk full".into() };
        hosts.set_faults("w1", HostFaults { stage_failure: Some(failure), ..Default::default() }).unwrap();
        let error = hosts.fetch_kubernetes("w1", &fetch(&config_map)).await.unwrap_err();
        assert_eq!((error.status(), error.to_string()), (507, "disk full".to_owned()));
        // A host that is down fetches and discards nothing.
        hosts.power_off("w1").unwrap();
        assert_eq!(hosts.fetch_kubernetes("w1", &fetch(&config_map)).await.unwrap_err().status(), 503);
        assert_eq!(hosts.discard_fetched("w1").await.unwrap_err().status(), 503);
        // A corrupt artifact: 422, and it is not in the cache.
        artifacts.set_fault("v1.34.1/kubelet", Some(crate::artifacts::ArtifactFault::Corrupt));
        let error = hosts.fetch_kubernetes("w2", &fetch(&config_map)).await.unwrap_err();
        assert_eq!(error.status(), 422, "{error}");
        let kubelet = fetch(&config_map).components.into_iter().find(|c| c.install_path.ends_with("/kubelet")).unwrap();
        let hex = kubelet.hash.trim_start_matches("sha256:").to_owned();
        assert!(!hosts.installer("w2").unwrap().cache_path().join(hex).exists());
        artifacts.shutdown();
    }
}
