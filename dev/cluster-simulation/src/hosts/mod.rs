//! Simulated hosts: the machines under the dev cluster's nodes, which update-operator's agent stages images on
//! and reboots, over HTTP under `/_dev/hosts` (the contract of `agent/src/host/simulated.rs`).
//!
//! # Guarantees
//! - The host state is authoritative for what a node runs: its `osImage` and `bootID`. The kubelet publishes them
//!   in the Node's `status.nodeInfo` and reports the node NotReady while the host is down.
//! - `stage` holds for the host's stage duration, then records the image as staged; an injected stage failure
//!   answers with its status and message instead; staging fails if the host reboots meanwhile.
//! - `reboot` takes the host down at once; after the reboot duration it comes back with a new boot ID, running
//!   the staged image (if one was staged). With the "never returns" fault it stays down until
//!   [`Hosts::power_on`].
//! - [`Hosts::add_booting`] adds a host that is down until its first boot; [`Hosts::power_off`] takes one down
//!   until [`Hosts::power_on`]; a [`Hosts::retire`]d host is gone for good: [`Hosts::ensure`] does not add it
//!   again (a kubelet that still sees its node in a stale cache must not bring a deleted instance back).
//! - Listeners learn of every change of a host's power state, boot or image.
//! - [`Hosts::upgrade_kubernetes`] is kubeadm on a simulated host (`POST /_dev/hosts/{node}/kubernetes`): it
//!   downloads and verifies the components with the agent's own installer (into a directory per host; nothing
//!   is installed unless everything verified), taking those fetched ahead from the host's cache
//!   ([`Hosts::fetch_kubernetes`], `POST .../kubernetes/fetch`; [`Hosts::discard_fetched`],
//!   `POST .../kubernetes/discard`) instead, installs all but the kubelet and kubectl, runs the simulated
//!   `kubeadm upgrade plan` + `apply` (role `apply`: the API server's `/version` reports the new version after
//!   it) or `kubeadm upgrade node`, installs the kubelet and kubectl, records the components (the host's
//!   `componentsHash` from then on) and restarts the kubelet: the node is NotReady meanwhile, then reports the
//!   new `kubeletVersion`. The timing model and the faults are in [`kubernetes`].

pub mod http;
pub mod kubernetes;

use crate::apiserver::object::new_uid;
use crate::timing::Timing;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The longest image reference a host accepts (as the agent's protocol).
const MAX_IMAGE_LEN: usize = 1024;

/// Whether a host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Power {
    /// Running.
    Up,
    /// Rebooting; back when the reboot duration has passed.
    Rebooting,
    /// Down until powered on (a reboot that never returns).
    Down,
}

/// A stage failure to inject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageFailure {
    /// The HTTP status to answer with (400-599).
    pub status: u16,
    /// The message.
    pub message: String,
}

/// How the run-to-completion pods (`restartPolicy: Never` or `OnFailure`, e.g. Job pods) of a host fail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodFailure {
    /// The containers' exit code (not 0).
    pub exit_code: i32,
    /// Their termination message.
    #[serde(default)]
    pub message: String,
    /// Only pods matching this label selector (`job-name=upgrade`) fail; all of them without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

/// A termination message the run-to-completion pods of a host write before they succeed (a NodeOp's preflight
/// check says so that its node is to be skipped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodMessage {
    pub message: String,
    /// Only pods matching this label selector write it; all of them without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

/// Faults and per-host durations. JSON (for `PUT /_dev/hosts/{node}/faults`) in camelCase:
/// `{"stageFailure": {"status": 500, "message": "..."}, "rebootNeverReturns": true, "stageSeconds": 2.5,
/// "rebootSeconds": 10, "jobPodFailure": {"exitCode": 1, "message": "...", "labelSelector": "job-name=x"},
/// "jobPodSeconds": 1.5, "jobPodMessage": {"message": "...", "labelSelector": "x=y"}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostFaults {
    /// Every stage fails with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_failure: Option<StageFailure>,
    /// A reboot takes the host down for good.
    #[serde(default)]
    pub reboot_never_returns: bool,
    /// This host's stage duration, instead of the cluster's.
    #[serde(default, with = "seconds", skip_serializing_if = "Option::is_none")]
    pub stage_seconds: Option<Duration>,
    /// This host's reboot duration, instead of the cluster's.
    #[serde(default, with = "seconds", skip_serializing_if = "Option::is_none")]
    pub reboot_seconds: Option<Duration>,
    /// The run-to-completion pods of this host fail so (they succeed without this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_pod_failure: Option<PodFailure>,
    /// The run-to-completion pods of this host that succeed write this termination message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_pod_message: Option<PodMessage>,
    /// How long this host's run-to-completion pods run, instead of the cluster's.
    #[serde(default, with = "seconds", skip_serializing_if = "Option::is_none")]
    pub job_pod_seconds: Option<Duration>,
    /// kubeadm fails on this host with this output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeadm_failure: Option<String>,
}

/// Serde of optional seconds (`2.5`) as durations.
pub mod seconds {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Option<Duration>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => serializer.serialize_f64(duration.as_secs_f64()),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
        let Some(seconds) = Option::<f64>::deserialize(deserializer)? else { return Ok(None) };
        Duration::try_from_secs_f64(seconds).map(Some).map_err(serde::de::Error::custom)
    }
}

/// What a host reports: the wire form of `GET /_dev/hosts/{node}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostFacts {
    /// The image the host runs.
    pub os_image: String,
    /// The current boot's ID.
    #[serde(rename = "bootID")]
    pub boot_id: String,
    /// The image the next boot runs, if one is staged.
    pub staged_image: Option<String>,
    /// `sha256:<64 hex>` over the host's Kubernetes components, if set.
    pub components_hash: Option<String>,
}

/// A host's whole state, for tests and `GET /_dev/hosts`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostState {
    /// The node's name.
    pub name: String,
    /// What it reports.
    #[serde(flatten)]
    pub facts: HostFacts,
    /// Whether it runs.
    pub power: Power,
    /// Boots so far (1 after creation).
    pub boots: u64,
    /// Its faults and durations.
    pub faults: HostFaults,
    /// The kubelet version a simulated kubeadm upgrade installed; `None`: the cluster's.
    pub kubelet_version: Option<String>,
    /// The kubelet is restarting (the node is NotReady meanwhile).
    pub kubelet_restarting: bool,
}

impl HostState {
    /// Whether its kubelet reports the node Ready: the host runs and the kubelet is not restarting.
    pub fn kubelet_ready(&self) -> bool {
        self.power == Power::Up && !self.kubelet_restarting
    }
}

/// Why a host operation failed; `status()` is the HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// No host of that name.
    #[error("host {0:?} not found")]
    UnknownHost(String),
    /// The image is empty, too long, or has control characters or surrounding white space.
    #[error("invalid image {image:?}: {reason}")]
    InvalidImage {
        /// The image.
        image: String,
        /// Why.
        reason: &'static str,
    },
    /// An injected stage failure.
    #[error("{message}")]
    StageFailed {
        /// Its HTTP status.
        status: u16,
        /// Its message.
        message: String,
    },
    /// The host is down or went down meanwhile.
    #[error("host {0:?} is not running")]
    NotRunning(String),
    /// A fault description with a status outside 400-599.
    #[error("a stage failure needs a status between 400 and 599, not {0}")]
    BadFaultStatus(u16),
    /// A pod failure fault that is not one (exit code 0) or selects nothing parseable.
    #[error("invalid jobPodFailure: {0}")]
    BadPodFailure(String),
    /// A Kubernetes upgrade request that is not one.
    #[error("invalid Kubernetes upgrade: {0}")]
    BadUpgrade(String),
    /// The components could not be installed; `transient` when a download failed.
    #[error("{message}")]
    Install {
        /// The installer's error.
        message: String,
        /// Trying again may help.
        transient: bool,
    },
    /// The simulated kubeadm failed.
    #[error("kubeadm upgrade failed: {output}")]
    KubeadmFailed {
        /// Its output.
        output: String,
    },
}

impl HostError {
    /// The HTTP status of the error.
    pub fn status(&self) -> u16 {
        match self {
            HostError::UnknownHost(_) => 404,
            HostError::InvalidImage { .. }
            | HostError::BadFaultStatus(_)
            | HostError::BadPodFailure(_)
            | HostError::BadUpgrade(_) => 400,
            HostError::Install { transient: true, .. } => 502,
            HostError::Install { transient: false, .. } => 422,
            HostError::KubeadmFailed { .. } => 500,
            HostError::StageFailed { status, .. } => *status,
            HostError::NotRunning(_) => 503,
        }
    }
}

pub fn check_image(image: &str) -> Result<(), HostError> {
    let reason = if image.is_empty() {
        "the image is empty"
    } else if image.len() > MAX_IMAGE_LEN {
        "the image is longer than 1024 bytes"
    } else if image.chars().any(char::is_control) || image.trim() != image {
        "the image has control characters or surrounding white space"
    } else {
        return Ok(());
    };
    Err(HostError::InvalidImage { image: image.to_owned(), reason })
}

struct Host {
    facts: HostFacts,
    power: Power,
    boots: u64,
    faults: HostFaults,
    kubelet_version: Option<String>,
    kubelet_restarting: bool,
}

impl Host {
    fn new(facts: HostFacts, power: Power, boots: u64) -> Host {
        Host { facts, power, boots, faults: HostFaults::default(), kubelet_version: None, kubelet_restarting: false }
    }
}

type Listener = Arc<dyn Fn(&str) + Send + Sync>;

struct Inner {
    hosts: Mutex<BTreeMap<String, Host>>,
    /// Hosts removed for good (their instances were deleted).
    retired: Mutex<std::collections::BTreeSet<String>>,
    listeners: RwLock<Vec<Listener>>,
    /// Told the version a simulated `kubeadm upgrade apply` upgraded the control plane to.
    on_apply: RwLock<Option<Listener>>,
    /// Where each host's components are installed (a directory per host), removed with the hosts.
    install_root: std::path::PathBuf,
    default_image: String,
    stage: Duration,
    reboot: Duration,
    shutdown: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.install_root);
    }
}

/// The simulated hosts of one cluster (a cloneable handle).
#[derive(Clone)]
pub struct Hosts {
    inner: Arc<Inner>,
}

impl Hosts {
    /// No hosts yet; new ones run `default_image`; stage and reboot durations come from `timing`.
    pub fn new(default_image: &str, timing: &Timing) -> Hosts {
        Hosts {
            inner: Arc::new(Inner {
                hosts: Mutex::new(BTreeMap::new()),
                retired: Mutex::new(std::collections::BTreeSet::new()),
                listeners: RwLock::new(Vec::new()),
                on_apply: RwLock::new(None),
                install_root: std::env::temp_dir().join(format!("dev-hosts-{}", new_uid())),
                default_image: default_image.to_owned(),
                stage: timing.stage,
                reboot: timing.reboot,
                shutdown: CancellationToken::new(),
            }),
        }
    }

    /// Calls `listener` with the node's name after every change of a host.
    pub fn subscribe(&self, listener: impl Fn(&str) + Send + Sync + 'static) {
        self.inner.listeners.write().push(Arc::new(listener));
    }

    fn notify(&self, node: &str) {
        let listeners: Vec<Listener> = self.inner.listeners.read().clone();
        for listener in listeners {
            listener(node);
        }
    }

    /// Adds a running host for `node` with `image` (a no-op when it exists). Returns its facts.
    pub fn add(&self, node: &str, image: &str) -> Result<HostFacts, HostError> {
        check_image(image)?;
        let facts = {
            let mut hosts = self.inner.hosts.lock();
            let host = hosts.entry(node.to_owned()).or_insert_with(|| {
                let facts = HostFacts {
                    os_image: image.to_owned(),
                    boot_id: new_uid(),
                    staged_image: None,
                    components_hash: None,
                };
                Host::new(facts, Power::Up, 1)
            });
            host.facts.clone()
        };
        Ok(facts)
    }

    /// Adds a host for `node` with `image` that is down until it boots, `boot` from now (a new cloud instance);
    /// a no-op when it exists. Its first boot counts as boot 1.
    pub fn add_booting(&self, node: &str, image: &str, boot: Duration) -> Result<(), HostError> {
        check_image(image)?;
        {
            let mut hosts = self.inner.hosts.lock();
            if hosts.contains_key(node) {
                return Ok(());
            }
            self.inner.retired.lock().remove(node);
            let facts =
                HostFacts { os_image: image.to_owned(), boot_id: new_uid(), staged_image: None, components_hash: None };
            hosts.insert(node.to_owned(), Host::new(facts, Power::Rebooting, 0));
        }
        self.notify(node);
        self.boot_after(node, boot, 0);
        Ok(())
    }

    /// Takes `node`'s host down until [`Hosts::power_on`] (an instance stopped or being deleted).
    pub fn power_off(&self, node: &str) -> Result<(), HostError> {
        {
            let mut hosts = self.inner.hosts.lock();
            let host = hosts.get_mut(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
            if host.power == Power::Down {
                return Ok(());
            }
            host.power = Power::Down;
        }
        self.notify(node);
        Ok(())
    }

    /// Removes `node`'s host for good: [`Hosts::ensure`] will not add it again.
    pub fn retire(&self, node: &str) {
        self.inner.retired.lock().insert(node.to_owned());
        self.inner.hosts.lock().remove(node);
        self.notify(node);
    }

    /// The host of `node`, added with the default image when missing (a node someone created by hand). A
    /// retired host is reported down and not added.
    pub fn ensure(&self, node: &str) -> HostState {
        if let Some(state) = self.state(node) {
            return state;
        }
        if self.inner.retired.lock().contains(node) {
            let facts = HostFacts {
                os_image: self.inner.default_image.clone(),
                boot_id: String::new(),
                staged_image: None,
                components_hash: None,
            };
            return HostState {
                name: node.to_owned(),
                facts,
                power: Power::Down,
                boots: 0,
                faults: HostFaults::default(),
                kubelet_version: None,
                kubelet_restarting: false,
            };
        }
        let _ = self.add(node, &self.inner.default_image.clone());
        self.state(node).unwrap_or_else(|| unreachable!("the host was just added"))
    }

    /// Removes the host of `node`.
    pub fn remove(&self, node: &str) {
        self.inner.hosts.lock().remove(node);
    }

    /// The facts of `node`'s host.
    pub fn facts(&self, node: &str) -> Option<HostFacts> {
        self.inner.hosts.lock().get(node).map(|h| h.facts.clone())
    }

    /// The whole state of `node`'s host.
    pub fn state(&self, node: &str) -> Option<HostState> {
        self.inner.hosts.lock().get(node).map(|h| HostState {
            name: node.to_owned(),
            facts: h.facts.clone(),
            power: h.power,
            boots: h.boots,
            faults: h.faults.clone(),
            kubelet_version: h.kubelet_version.clone(),
            kubelet_restarting: h.kubelet_restarting,
        })
    }

    /// Every host, by name.
    pub fn states(&self) -> Vec<HostState> {
        let names: Vec<String> = self.inner.hosts.lock().keys().cloned().collect();
        names.iter().filter_map(|n| self.state(n)).collect()
    }

    /// Replaces the faults and durations of `node`'s host.
    pub fn set_faults(&self, node: &str, faults: HostFaults) -> Result<(), HostError> {
        if let Some(failure) = &faults.stage_failure
            && !(400..600).contains(&failure.status)
        {
            return Err(HostError::BadFaultStatus(failure.status));
        }
        if let Some(failure) = &faults.job_pod_failure {
            if failure.exit_code == 0 {
                return Err(HostError::BadPodFailure("an exit code of 0 is a success, not a failure".to_owned()));
            }
            if let Some(selector) = &failure.label_selector
                && let Err(why) = crate::apiserver::selector::label::LabelSelector::parse(selector)
            {
                return Err(HostError::BadPodFailure(format!("labelSelector {selector:?}: {why}")));
            }
        }
        if let Some(selector) = faults.job_pod_message.as_ref().and_then(|m| m.label_selector.as_ref())
            && let Err(why) = crate::apiserver::selector::label::LabelSelector::parse(selector)
        {
            return Err(HostError::BadPodFailure(format!("jobPodMessage labelSelector {selector:?}: {why}")));
        }
        let mut hosts = self.inner.hosts.lock();
        let host = hosts.get_mut(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
        host.faults = faults;
        Ok(())
    }

    /// Sets the components hash `node`'s host reports.
    pub fn set_components_hash(&self, node: &str, hash: Option<String>) -> Result<(), HostError> {
        let mut hosts = self.inner.hosts.lock();
        let host = hosts.get_mut(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
        host.facts.components_hash = hash;
        Ok(())
    }

    /// Stages `image` on `node`'s host: waits for the stage duration, then records it (see the module docs).
    pub async fn stage(&self, node: &str, image: &str) -> Result<(), HostError> {
        check_image(image)?;
        let (duration, boots) = {
            let hosts = self.inner.hosts.lock();
            let host = hosts.get(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
            if host.power != Power::Up {
                return Err(HostError::NotRunning(node.to_owned()));
            }
            if let Some(failure) = &host.faults.stage_failure {
                return Err(HostError::StageFailed { status: failure.status, message: failure.message.clone() });
            }
            (host.faults.stage_seconds.unwrap_or(self.inner.stage), host.boots)
        };
        tokio::select! {
            () = tokio::time::sleep(duration) => {}
            () = self.inner.shutdown.cancelled() => return Err(HostError::NotRunning(node.to_owned())),
        }
        {
            let mut hosts = self.inner.hosts.lock();
            let host = hosts.get_mut(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
            if host.power != Power::Up || host.boots != boots {
                return Err(HostError::NotRunning(node.to_owned()));
            }
            host.facts.staged_image = Some(image.to_owned());
        }
        self.notify(node);
        Ok(())
    }

    /// Reboots `node`'s host (see the module docs). Asking a host that is already rebooting is a no-op.
    pub fn reboot(&self, node: &str) -> Result<(), HostError> {
        let (duration, boots) = {
            let mut hosts = self.inner.hosts.lock();
            let host = hosts.get_mut(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
            match host.power {
                Power::Rebooting => return Ok(()),
                Power::Down => return Err(HostError::NotRunning(node.to_owned())),
                Power::Up => {}
            }
            if host.faults.reboot_never_returns {
                host.power = Power::Down;
                (None, host.boots)
            } else {
                host.power = Power::Rebooting;
                (Some(host.faults.reboot_seconds.unwrap_or(self.inner.reboot)), host.boots)
            }
        };
        self.notify(node);
        if let Some(duration) = duration {
            self.boot_after(node, duration, boots);
        }
        Ok(())
    }

    /// Ends the reboot that began in boot number `boots` after `duration`.
    fn boot_after(&self, node: &str, duration: Duration, boots: u64) {
        let hosts = self.clone();
        let node = node.to_owned();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(duration) => hosts.boot(&node, boots),
                () = hosts.inner.shutdown.cancelled() => {}
            }
        });
    }

    /// Brings a host that is down (or rebooting) up at once, with a new boot.
    pub fn power_on(&self, node: &str) -> Result<(), HostError> {
        let boots = {
            let mut hosts = self.inner.hosts.lock();
            let host = hosts.get_mut(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
            if host.power == Power::Up {
                return Ok(());
            }
            host.power = Power::Rebooting;
            host.boots
        };
        self.boot(node, boots);
        Ok(())
    }

    /// Ends the reboot that began in boot number `boots` (if the host is still coming up): a new boot ID, the
    /// staged image.
    fn boot(&self, node: &str, boots: u64) {
        {
            let mut hosts = self.inner.hosts.lock();
            let Some(host) = hosts.get_mut(node) else { return };
            // Only a host that is coming up boots: one powered off meanwhile stays down.
            if host.boots != boots || host.power != Power::Rebooting {
                return;
            }
            host.power = Power::Up;
            host.boots += 1;
            host.facts.boot_id = new_uid();
            if let Some(staged) = host.facts.staged_image.take() {
                host.facts.os_image = staged;
            }
        }
        self.notify(node);
    }

    /// `read` of `node`'s host if it runs, with its boot count.
    fn running<T>(&self, node: &str, read: impl FnOnce(&Host) -> T) -> Result<(T, u64), HostError> {
        let hosts = self.inner.hosts.lock();
        let host = hosts.get(node).ok_or_else(|| HostError::UnknownHost(node.to_owned()))?;
        if host.power != Power::Up {
            return Err(HostError::NotRunning(node.to_owned()));
        }
        Ok((read(host), host.boots))
    }

    /// Waits `duration`; an error if the host went down or rebooted meanwhile, or the hosts shut down.
    async fn sleep(&self, node: &str, duration: Duration, boots: u64) -> Result<(), HostError> {
        tokio::select! {
            () = tokio::time::sleep(duration) => {}
            () = self.inner.shutdown.cancelled() => return Err(HostError::NotRunning(node.to_owned())),
        }
        match self.running(node, |_| ()) {
            Ok(((), now)) if now == boots => Ok(()),
            _ => Err(HostError::NotRunning(node.to_owned())),
        }
    }

    /// Ends every pending stage and reboot timer.
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts() -> Hosts {
        let timing = Timing { stage: Duration::from_secs(5), reboot: Duration::from_secs(30), ..Timing::fast() };
        let hosts = Hosts::new("v1", &timing);
        hosts.add("n1", "v1").unwrap();
        hosts
    }

    #[tokio::test(start_paused = true)]
    async fn a_reboot_boots_the_staged_image_with_a_new_boot_id() {
        let hosts = hosts();
        let before = hosts.facts("n1").unwrap();
        hosts.stage("n1", "v2").await.unwrap();
        assert_eq!(hosts.facts("n1").unwrap().staged_image.as_deref(), Some("v2"));
        hosts.reboot("n1").unwrap();
        assert_eq!(hosts.state("n1").unwrap().power, Power::Rebooting);
        tokio::time::sleep(Duration::from_secs(31)).await;
        let after = hosts.state("n1").unwrap();
        assert_eq!(after.power, Power::Up);
        assert_eq!(after.facts.os_image, "v2");
        assert_eq!(after.facts.staged_image, None);
        assert_ne!(after.facts.boot_id, before.boot_id);
        assert_eq!(after.boots, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn faults_fail_stages_and_keep_hosts_down() {
        let hosts = hosts();
        let failure = StageFailure { status: 500, message: "disk full".into() };
        hosts.set_faults("n1", HostFaults { stage_failure: Some(failure), ..Default::default() }).unwrap();
        let error = hosts.stage("n1", "v2").await.unwrap_err();
        assert_eq!((error.status(), error.to_string()), (500, "disk full".to_owned()));
        hosts.set_faults("n1", HostFaults { reboot_never_returns: true, ..Default::default() }).unwrap();
        hosts.reboot("n1").unwrap();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(hosts.state("n1").unwrap().power, Power::Down);
        assert_eq!(hosts.stage("n1", "v2").await.unwrap_err().status(), 503);
        hosts.power_on("n1").unwrap();
        assert_eq!(hosts.state("n1").unwrap().power, Power::Up);
        assert!(
            hosts
                .set_faults(
                    "n1",
                    HostFaults {
                        stage_failure: Some(StageFailure { status: 200, message: String::new() }),
                        ..Default::default()
                    }
                )
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stage_interrupted_by_a_reboot_fails() {
        let hosts = hosts();
        let staging = {
            let hosts = hosts.clone();
            tokio::spawn(async move { hosts.stage("n1", "v2").await })
        };
        tokio::task::yield_now().await;
        hosts.reboot("n1").unwrap();
        assert_eq!(staging.await.unwrap().unwrap_err().status(), 503);
        assert_eq!(hosts.facts("n1").unwrap().staged_image, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_booting_host_comes_up_once_and_a_retired_one_never_comes_back() {
        let hosts = hosts();
        hosts.add_booting("n2", "v2", Duration::from_secs(10)).unwrap();
        assert_eq!((hosts.state("n2").unwrap().power, hosts.state("n2").unwrap().boots), (Power::Rebooting, 0));
        tokio::time::sleep(Duration::from_secs(11)).await;
        let up = hosts.state("n2").unwrap();
        assert_eq!((up.power, up.boots, up.facts.os_image.as_str()), (Power::Up, 1, "v2"));
        hosts.power_off("n2").unwrap();
        assert_eq!(hosts.state("n2").unwrap().power, Power::Down);
        // A host powered off while it boots stays down.
        hosts.add_booting("n3", "v2", Duration::from_secs(10)).unwrap();
        hosts.power_off("n3").unwrap();
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(hosts.state("n3").unwrap().power, Power::Down);
        hosts.retire("n2");
        assert_eq!(hosts.state("n2"), None);
        assert_eq!(hosts.ensure("n2").power, Power::Down);
        assert_eq!(hosts.state("n2"), None, "ensure must not add a retired host back");
    }

    #[test]
    fn bad_images_and_unknown_hosts_are_errors() {
        let hosts = hosts();
        assert!(matches!(hosts.add("n2", " v1"), Err(HostError::InvalidImage { .. })));
        assert_eq!(hosts.reboot("nope").unwrap_err().status(), 404);
        assert_eq!(hosts.ensure("n3").facts.os_image, "v1");
    }
}
