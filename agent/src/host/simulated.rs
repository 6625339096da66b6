//! The simulated backend: the hosts of the dev cluster, which its server simulates over HTTP.
//!
//! # Contract (the dev server implements the other side)
//! `{base}` is the configured base URL (`http://host:port`, optionally with a path prefix);
//! `{node}` is the node name, percent-encoded as one path segment. Bodies are JSON; error answers
//! are `{"message": "..."}`.
//! - `GET {base}/_dev/hosts/{node}` → 200
//!   `{"osImage": "...", "bootID": "...", "stagedImage": null | "...", "componentsHash": null | "sha256:..."}`;
//!   404 if the host is unknown.
//! - `POST {base}/_dev/hosts/{node}/stage` with `{"image": "..."}` → 200 `{}` once staged (the
//!   server holds the request for the simulated stage duration); 404 if the host is unknown. A
//!   failure (an injected fault, or the host going down) answers 429, 502, 503 or 504 when it is
//!   transient (the agent tries again) and any other status when staging failed for good.
//! - `POST {base}/_dev/hosts/{node}/reboot` → 202 `{}`; the node then goes NotReady and comes back
//!   Ready with a new boot ID, running the staged image. The agent process lives on and learns of
//!   the new boot from `facts()`.
//! - `POST {base}/_dev/hosts/{node}/kubernetes` with `{"version": "v1.34.1", "role": "apply" | "node",
//!   "components": [{"url", "hash", "installPath", "extract"}]}` (inline components as `data:` URLs) → 200
//!   `{}` once the host downloaded and verified every component, installed them, ran the simulated kubeadm
//!   and restarted its kubelet (the server holds the request meanwhile); then its facts report the new
//!   `componentsHash`. Components fetched ahead (below) that still verify are installed from the host's cache
//!   instead of downloaded. Failures as for `stage`.
//! - `POST {base}/_dev/hosts/{node}/kubernetes/fetch` with `{"version": "v1.34.1", "components": [...]}` (the
//!   components as for `/kubernetes`) → 200 `{}` once the host downloaded every component into its fetch cache
//!   and verified it against its hash, installing nothing (the server holds the request meanwhile); the cache
//!   then holds this set only. Failures as for `stage`.
//! - `POST {base}/_dev/hosts/{node}/kubernetes/discard` → 200 `{}` once the host's fetch cache is deleted.
//!
//! # Guarantees
//! - `stage` asks the server only when the target is not staged yet.
//! - `activate_and_reboot` reboots only when the target is what the host boots next (staged, or
//!   running with nothing else staged); otherwise it reports what is staged instead.

use super::http::{self as transport, Answer, Endpoint};
use super::{ConfigError, HostError, HostFacts, HostUpdater, KubernetesFetch, KubernetesUpgrade, check_reported_image};
use crate::kubeadm::Role;
use ::http::{Method, StatusCode, Uri};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_encode, utf8_percent_encode};
use serde::Deserialize;
use shared::components::{Component, Source};
use shared::protocol::{BootId, ComponentsHash};
use std::time::Duration;

/// Names the service in error messages.
const SERVICE: &str = "the dev cluster's simulated hosts";

/// Everything but the unreserved characters of RFC 3986 is encoded in a path segment.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// Where the simulated host of this node is served.
#[derive(Debug, Clone)]
pub struct SimulatedConfig {
    /// `http://host:port`, optionally with a path prefix.
    pub base_url: String,
    /// The node the agent runs for.
    pub node_name: String,
    /// Limit for reading facts and asking for a reboot.
    pub request_timeout: Duration,
    /// Limit for staging (the server holds the request for the simulated stage duration).
    pub stage_timeout: Duration,
}

impl SimulatedConfig {
    pub fn new(base_url: impl Into<String>, node_name: impl Into<String>) -> Self {
        SimulatedConfig {
            base_url: base_url.into(),
            node_name: node_name.into(),
            request_timeout: Duration::from_secs(30),
            stage_timeout: Duration::from_secs(30 * 60),
        }
    }
}

/// The simulated host of one node.
#[derive(Debug, Clone)]
pub struct SimulatedHost {
    endpoint: Endpoint,
    /// `{prefix}/_dev/hosts/{node}`.
    host_path: String,
    config: SimulatedConfig,
}

/// The host's facts as the server sends them.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireFacts {
    os_image: String,
    #[serde(rename = "bootID")]
    boot_id: String,
    #[serde(default)]
    staged_image: Option<String>,
    #[serde(default)]
    components_hash: Option<String>,
}

impl SimulatedHost {
    pub fn new(config: SimulatedConfig) -> Result<Self, ConfigError> {
        if config.node_name.is_empty() {
            return Err(ConfigError::EmptyNodeName);
        }
        let bad_url = |reason: &str| ConfigError::BaseUrl { url: config.base_url.clone(), reason: reason.to_owned() };
        let uri: Uri = config.base_url.parse().map_err(|e: ::http::uri::InvalidUri| bad_url(&e.to_string()))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad_url("only http:// URLs are supported"));
        }
        let authority = uri.authority().ok_or_else(|| bad_url("the URL names no host"))?;
        if authority.host().is_empty() {
            return Err(bad_url("the URL names no host"));
        }
        if authority.as_str().contains('@') {
            return Err(bad_url("user information in the URL is not supported"));
        }
        if uri.query().is_some() {
            return Err(bad_url("the URL must not have a query"));
        }
        let address = format!("{}:{}", authority.host(), authority.port_u16().unwrap_or(80));
        let prefix = uri.path().trim_end_matches('/');
        let node = utf8_percent_encode(&config.node_name, PATH_SEGMENT);
        let host_path = format!("{prefix}/_dev/hosts/{node}");
        Ok(SimulatedHost { endpoint: Endpoint::Tcp(address), host_path, config })
    }

    async fn request(
        &self,
        operation: &str,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Answer, HostError> {
        let answer = transport::exchange(&self.endpoint, method, path, body, timeout)
            .await
            .map_err(|error| error.into_host_error(SERVICE, operation))?;
        if answer.status == StatusCode::NOT_FOUND {
            return Err(HostError::UnknownHost { node: self.config.node_name.clone(), message: answer.message() });
        }
        Ok(answer)
    }
}

impl SimulatedHost {
    /// POSTs `body` to `{host}/{action}`, which the server holds for the simulated duration (up to the stage
    /// timeout): a transient refusal may pass, any other failure is the step's.
    async fn long_step(&self, operation: String, action: &str, body: serde_json::Value) -> Result<(), HostError> {
        let path = format!("{}/{action}", self.host_path);
        let body = Some(body.to_string().into_bytes());
        let answer = self.request(&operation, Method::POST, &path, body, self.config.stage_timeout).await?;
        if answer.status.is_success() {
            return Ok(());
        }
        if is_transient(answer.status) {
            return Err(answer.refusal(SERVICE, &operation));
        }
        Err(HostError::StepFailed { step: operation, message: answer.message() })
    }
}

impl HostUpdater for SimulatedHost {
    async fn facts(&self) -> Result<HostFacts, HostError> {
        let operation = "reading the host's facts";
        let answer = self.request(operation, Method::GET, &self.host_path, None, self.config.request_timeout).await?;
        if answer.status != StatusCode::OK {
            return Err(answer.refusal(SERVICE, operation));
        }
        let bad = |reason: String| HostError::BadAnswer {
            service: SERVICE.to_owned(),
            operation: operation.to_owned(),
            reason,
        };
        let wire: WireFacts = serde_json::from_slice(&answer.body).map_err(|e| bad(e.to_string()))?;
        check_reported_image(&wire.os_image).map_err(|reason| bad(format!("osImage: {reason}")))?;
        if let Some(staged) = &wire.staged_image {
            check_reported_image(staged).map_err(|reason| bad(format!("stagedImage: {reason}")))?;
        }
        Ok(HostFacts {
            os_image: wire.os_image,
            boot_id: BootId::parse("bootID", &wire.boot_id).map_err(|e| bad(e.to_string()))?,
            staged_image: wire.staged_image,
            components_hash: wire
                .components_hash
                .map(|hash| ComponentsHash::parse("componentsHash", &hash))
                .transpose()
                .map_err(|e| bad(e.to_string()))?,
        })
    }

    async fn stage(&self, target: &str) -> Result<(), HostError> {
        // The server holds every stage request for the whole simulated duration.
        if self.facts().await?.staged_image.as_deref() == Some(target) {
            return Ok(());
        }
        self.long_step(format!("staging {target}"), "stage", serde_json::json!({ "image": target })).await
    }

    async fn activate_and_reboot(&self, target: &str) -> Result<(), HostError> {
        let facts = self.facts().await?;
        let boots_target_next = match facts.staged_image.as_deref() {
            Some(staged) => staged == target,
            None => facts.os_image == target,
        };
        if !boots_target_next {
            return Err(HostError::NotStaged { target: target.to_owned(), staged: facts.staged_image });
        }
        let operation = "rebooting";
        let path = format!("{}/reboot", self.host_path);
        let answer = self.request(operation, Method::POST, &path, None, self.config.request_timeout).await?;
        if !answer.status.is_success() {
            return Err(answer.refusal(SERVICE, operation));
        }
        tracing::info!(target, "simulated reboot under way");
        Ok(())
    }

    async fn upgrade_kubernetes(&self, upgrade: &KubernetesUpgrade) -> Result<(), HostError> {
        self.long_step(format!("upgrading Kubernetes to {}", upgrade.version), "kubernetes", upgrade_body(upgrade))
            .await
    }

    async fn fetch_kubernetes(&self, fetch: &KubernetesFetch) -> Result<(), HostError> {
        let operation = format!("fetching the Kubernetes {} components ahead", fetch.version);
        self.long_step(operation, "kubernetes/fetch", fetch_body(fetch)).await
    }

    async fn discard_fetched(&self) -> Result<(), HostError> {
        let operation = "discarding the Kubernetes components fetched ahead";
        let path = format!("{}/kubernetes/discard", self.host_path);
        let answer = self.request(operation, Method::POST, &path, None, self.config.request_timeout).await?;
        if !answer.status.is_success() {
            return Err(answer.refusal(SERVICE, operation));
        }
        Ok(())
    }
}

/// The body of `POST .../kubernetes`.
pub fn upgrade_body(upgrade: &KubernetesUpgrade) -> serde_json::Value {
    let role = match upgrade.role {
        Role::FirstControlPlane => "apply",
        Role::ControlPlane | Role::Worker => "node",
    };
    serde_json::json!({
        "version": upgrade.version.to_string(),
        "role": role,
        "components": wire_components(&upgrade.components),
    })
}

/// The body of `POST .../kubernetes/fetch`.
pub fn fetch_body(fetch: &KubernetesFetch) -> serde_json::Value {
    serde_json::json!({ "version": fetch.version.to_string(), "components": wire_components(&fetch.components) })
}

/// Components as the ConfigMap lists them, inline ones as `data:` URLs.
fn wire_components(components: &[shared::components::VerifiedComponent]) -> Vec<Component> {
    components
        .iter()
        .map(|c| Component {
            url: match &c.source {
                Source::Download(url) => url.clone(),
                Source::Inline(bytes) => format!("data:,{}", percent_encode(bytes, NON_ALPHANUMERIC)),
            },
            hash: c.hash.to_string(),
            install_path: c.install_path.clone(),
            extract: c.extract,
        })
        .collect()
}

/// The answers of the contract that say "try again later" (see the module docs).
fn is_transient(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(base_url: &str, node: &str) -> Result<SimulatedHost, ConfigError> {
        SimulatedHost::new(SimulatedConfig::new(base_url, node))
    }

    #[test]
    fn node_names_are_one_percent_encoded_path_segment() {
        let simulated = host("http://dev:8080/prefix/", "node/../a b%").unwrap();
        assert_eq!(simulated.host_path, "/prefix/_dev/hosts/node%2F..%2Fa%20b%25");
        let Endpoint::Tcp(address) = &simulated.endpoint else { panic!() };
        assert_eq!(address, "dev:8080");
        assert_eq!(host("http://dev", "worker-0.example").unwrap().host_path, "/_dev/hosts/worker-0.example");
    }

    #[test]
    fn inline_components_travel_as_data_urls_that_decode_to_their_content() {
        use shared::components::{Sha256, VerifiedComponent, decode_data_url};
        let patch = b"spec:\n  containers: [{name: x}]\n\xff".to_vec();
        let upgrade = KubernetesUpgrade {
            version: "v1.34.1".parse().unwrap(),
            role: Role::FirstControlPlane,
            components: vec![
                VerifiedComponent {
                    source: Source::Download("http://a/kubeadm".into()),
                    hash: Sha256::of(b"k"),
                    install_path: "/usr/local/bin/kubeadm".into(),
                    extract: false,
                },
                VerifiedComponent {
                    source: Source::Inline(patch.clone()),
                    hash: Sha256::of(&patch),
                    install_path: "/etc/kubernetes/patches/kube-apiserver0+json.yaml".into(),
                    extract: false,
                },
            ],
        };
        let body = upgrade_body(&upgrade);
        assert_eq!((body["version"].as_str(), body["role"].as_str()), (Some("v1.34.1"), Some("apply")));
        let components: Vec<Component> = serde_json::from_value(body["components"].clone()).unwrap();
        assert_eq!(components[0].url, "http://a/kubeadm");
        assert_eq!(components[0].hash, Sha256::of(b"k").to_string());
        assert_eq!(decode_data_url(&components[1].url).unwrap(), patch);
        // A fetch sends the same components, without a role.
        let fetch = fetch_body(&KubernetesFetch { version: upgrade.version.clone(), components: upgrade.components });
        assert_eq!(fetch, serde_json::json!({ "version": "v1.34.1", "components": body["components"] }));
    }

    #[test]
    fn a_url_without_port_uses_port_80() {
        let Endpoint::Tcp(address) = host("http://10.0.0.1", "n").unwrap().endpoint else { panic!() };
        assert_eq!(address, "10.0.0.1:80");
    }

    #[test]
    fn unusable_base_urls_are_clear_errors() {
        for (url, expected) in [
            ("https://dev:8443", "only http:// URLs are supported"),
            ("dev:8080", "only http:// URLs are supported"),
            ("/just/a/path", "only http:// URLs are supported"),
            ("http://dev:8080/?x=1", "must not have a query"),
            ("http://user@dev:8080", "user information"),
            ("http://dev:8080 x", "invalid"),
        ] {
            let message = host(url, "n").unwrap_err().to_string();
            assert!(message.contains(expected), "{url}: {message}");
        }
        assert!(matches!(host("http://dev", ""), Err(ConfigError::EmptyNodeName)));
    }
}
