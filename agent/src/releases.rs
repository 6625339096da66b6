//! Where the agent reads the components ConfigMap an intent `kubeadm-upgrade` names.
//!
//! The ConfigMap is validated by the same rules the controller applied ([`Release::from_config_map`]:
//! immutable, in `kube-system`, named after its content, every component with a SHA-256, install paths under
//! [`DEFAULT_INSTALL_ROOTS`], `cluster-version` equal to the intent's target), so an agent never installs from
//! a ConfigMap the controller would have refused, whoever wrote the intent.

use crate::host::HostError;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use shared::components::{DEFAULT_INSTALL_ROOTS, NAMESPACE, Release};
use shared::version::KubeVersion;

/// A source of components ConfigMaps.
pub trait Releases: Send + Sync + 'static {
    /// The validated release of ConfigMap `name` for `version`. A ConfigMap that is missing or breaks a rule
    /// is a permanent error; an API server that cannot be reached is a transient one.
    fn release<'a>(&'a self, name: &'a str, version: &'a KubeVersion) -> BoxFuture<'a, Result<Release, HostError>>;
}

/// Components ConfigMaps in `kube-system`, read through the Kubernetes API.
pub struct KubeReleases {
    api: Api<ConfigMap>,
}

impl KubeReleases {
    pub fn new(client: Client) -> Self {
        KubeReleases { api: Api::namespaced(client, NAMESPACE) }
    }
}

/// Validates `config_map` (read as `name`) for `version`.
pub fn validate(name: &str, config_map: &ConfigMap, version: &KubeVersion) -> Result<Release, HostError> {
    let release = Release::from_config_map(config_map, Some(version), DEFAULT_INSTALL_ROOTS).map_err(|error| {
        HostError::StepFailed { step: format!("reading the components ConfigMap {name}"), message: error.to_string() }
    })?;
    if release.name != name {
        return Err(HostError::StepFailed {
            step: format!("reading the components ConfigMap {name}"),
            message: format!("the API server answered with ConfigMap {}", release.name),
        });
    }
    Ok(release)
}

impl Releases for KubeReleases {
    fn release<'a>(&'a self, name: &'a str, version: &'a KubeVersion) -> BoxFuture<'a, Result<Release, HostError>> {
        Box::pin(async move {
            let operation = format!("reading the components ConfigMap {NAMESPACE}/{name}");
            let config_map = match self.api.get_opt(name).await {
                Ok(Some(config_map)) => config_map,
                Ok(None) => {
                    return Err(HostError::StepFailed { step: operation, message: "it does not exist".to_owned() });
                }
                Err(kube::Error::Api(status)) if status.code < 500 && status.code != 429 => {
                    return Err(HostError::Refused {
                        service: "the Kubernetes API".to_owned(),
                        operation,
                        status: status.code,
                        message: status.message,
                    });
                }
                Err(error) => {
                    return Err(HostError::Unreachable {
                        service: "the Kubernetes API".to_owned(),
                        operation,
                        reason: error.to_string(),
                    });
                }
            };
            validate(name, &config_map, version)
        })
    }
}
