//! The Kubernetes components of a cluster version as Constellation ships them, and their validation.
//!
//! `spec.kubernetesComponentsReference` names an immutable ConfigMap in `kube-system`,
//! `k8s-components-sha256-<hex>`: `data.components` is a JSON list of `{url, hash, installPath, extract}` and
//! `data.cluster-version` the Kubernetes version (`vX.Y.Z`). The list's hash is `sha256:` + hex(SHA-256 of
//! the concatenated component hashes, as written), as Constellation computes it, and the ConfigMap's name is
//! `k8s-components-` + that hash with `:` replaced by `-`, so the name says what the content is.
//!
//! [`Release::from_config_map`] accepts a ConfigMap only when every rule holds, before any node is touched:
//! immutable, named after its content, every component with a well-formed `sha256:` hash (Constellation skips
//! verification of a component without one: here it is refused), an `https:`, `http:` or `data:` URL (a
//! download is verified against its hash before use; a `data:` URL's content is verified here, at once), an
//! install path under one of the allowed roots, and a `cluster-version` equal to the NodeVersion's.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use k8s_openapi::api::core::v1::ConfigMap;
use serde::{Deserialize, Serialize};

use crate::version::{KubeVersion, VersionError};

/// The namespace of the components ConfigMaps.
pub const NAMESPACE: &str = "kube-system";
/// The key of the component list in the ConfigMap's data.
pub const COMPONENTS_KEY: &str = "components";
/// The key of the Kubernetes version in the ConfigMap's data.
pub const CLUSTER_VERSION_KEY: &str = "cluster-version";
/// Every components ConfigMap's name starts with this, followed by its hash (`sha256-<hex>`).
pub const NAME_PREFIX: &str = "k8s-components-";
/// Where components may be installed when nothing else is configured: the binaries' directories of kubeadm
/// hosts and Constellation's, CNI plugins, and kubeadm's patch directory.
pub const DEFAULT_INSTALL_ROOTS: &[&str] =
    &["/usr/local/bin", "/usr/bin", "/opt/cni/bin", "/run/state/bin", "/etc/kubernetes/patches"];

/// A SHA-256 digest, written `sha256:<64 lowercase hex digits>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256([u8; 32]);

impl Sha256 {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self::from_digest(ring::digest::digest(&ring::digest::SHA256, bytes))
    }

    /// An incremental hasher, for downloads verified as they stream.
    pub fn hasher() -> Sha256Hasher {
        Sha256Hasher(ring::digest::Context::new(&ring::digest::SHA256))
    }

    fn from_digest(digest: ring::digest::Digest) -> Self {
        let mut bytes = [0; 32];
        bytes.copy_from_slice(digest.as_ref());
        Sha256(bytes)
    }

    /// The 64 lowercase hex digits.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Computes a [`Sha256`] from chunks.
pub struct Sha256Hasher(ring::digest::Context);

impl Sha256Hasher {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> Sha256 {
        Sha256::from_digest(self.0.finish())
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Sha256 {
    type Err = &'static str;

    /// Exactly `sha256:` and 64 lowercase hex digits (what Constellation writes; anything else is refused,
    /// not normalised).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let hex = s.strip_prefix("sha256:").ok_or("it does not start with sha256:")?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err("it is not sha256: followed by 64 lowercase hex digits");
        }
        let mut bytes = [0; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| "a hex digit is invalid")?;
        }
        Ok(Sha256(bytes))
    }
}

/// One component as written in the ConfigMap. Field names as this operator and Constellation's operator
/// write them (`installPath`), and the names of Constellation's older formats (`install_path`, `URL`, ...).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Component {
    #[serde(alias = "URL", alias = "Url")]
    pub url: String,
    #[serde(default, alias = "Hash")]
    pub hash: String,
    #[serde(alias = "install_path", alias = "InstallPath")]
    pub install_path: String,
    #[serde(default, alias = "Extract")]
    pub extract: bool,
}

/// Where a component comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Downloaded (`https:` or `http:`), verified against the hash before use.
    Download(String),
    /// Inline (`data:`), already verified against the hash.
    Inline(Vec<u8>),
}

/// A component that passed validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedComponent {
    pub source: Source,
    pub hash: Sha256,
    pub install_path: String,
    pub extract: bool,
}

/// A components ConfigMap that passed every rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// The ConfigMap's name.
    pub name: String,
    pub cluster_version: KubeVersion,
    pub components: Vec<VerifiedComponent>,
    /// The components hash nodes report once they run exactly these components.
    pub hash: Sha256,
}

/// Why a components ConfigMap is refused. Each message names the ConfigMap field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComponentsError {
    #[error("ConfigMap {name}: it is not immutable (set immutable: true so its content cannot change under a rollout)")]
    NotImmutable { name: String },
    #[error("ConfigMap {name}: it is in namespace {namespace}, components ConfigMaps live in {NAMESPACE}")]
    Namespace { name: String, namespace: String },
    #[error("ConfigMap {name}: data.{key} is missing")]
    Missing { name: String, key: &'static str },
    #[error(
        "ConfigMap {name}: data.{COMPONENTS_KEY} is not a JSON list of {{url, hash, installPath, extract}}: {reason}"
    )]
    Json { name: String, reason: String },
    #[error("ConfigMap {name}: data.{COMPONENTS_KEY} is an empty list")]
    Empty { name: String },
    #[error(
        "ConfigMap {name}: data.{COMPONENTS_KEY}[{index}].hash is missing (every component is verified before use)"
    )]
    MissingHash { name: String, index: usize },
    #[error("ConfigMap {name}: data.{COMPONENTS_KEY}[{index}].hash {value:?}: {reason}")]
    BadHash { name: String, index: usize, value: String, reason: &'static str },
    #[error("ConfigMap {name}: data.{COMPONENTS_KEY}[{index}].url {url:?}: {reason}")]
    BadUrl { name: String, index: usize, url: String, reason: String },
    #[error(
        "ConfigMap {name}: data.{COMPONENTS_KEY}[{index}].url: the data: URL's content has {actual}, not its hash {expected}"
    )]
    InlineMismatch { name: String, index: usize, expected: Sha256, actual: Sha256 },
    #[error("ConfigMap {name}: data.{COMPONENTS_KEY}[{index}].installPath {path:?}: {reason}")]
    BadInstallPath { name: String, index: usize, path: String, reason: String },
    #[error(
        "ConfigMap {name}: data.{COMPONENTS_KEY}[{index}].installPath {path:?} is also the path of component {first}"
    )]
    DuplicateInstallPath { name: String, index: usize, first: usize, path: String },
    #[error("ConfigMap {name}: its name does not match its content, whose hash {hash} names it {expected}")]
    NameMismatch { name: String, expected: String, hash: Sha256 },
    #[error("ConfigMap {name}: data.{CLUSTER_VERSION_KEY}: {error}")]
    BadVersion { name: String, error: VersionError },
    #[error(
        "ConfigMap {name}: data.{CLUSTER_VERSION_KEY} is {in_config_map}, but spec.kubernetesClusterVersion is {in_spec}"
    )]
    VersionMismatch { name: String, in_config_map: KubeVersion, in_spec: KubeVersion },
}

/// The components hash of a list, as Constellation computes it: `sha256:` + hex(SHA-256 of the component
/// hashes as written, concatenated in order).
pub fn components_hash<'a>(hashes: impl IntoIterator<Item = &'a str>) -> Sha256 {
    let mut hasher = Sha256::hasher();
    for hash in hashes {
        hasher.update(hash.as_bytes());
    }
    hasher.finish()
}

/// The name of the ConfigMap whose components hash is `hash`.
pub fn config_map_name(hash: &Sha256) -> String {
    format!("{NAME_PREFIX}sha256-{}", hash.hex())
}

impl Release {
    /// Validates a components ConfigMap against every rule (module doc). `spec_version` is the NodeVersion's
    /// `kubernetesClusterVersion`, when set; `install_roots` the directories components may be installed under.
    pub fn from_config_map(
        config_map: &ConfigMap,
        spec_version: Option<&KubeVersion>,
        install_roots: &[&str],
    ) -> Result<Release, ComponentsError> {
        let name = config_map.metadata.name.clone().unwrap_or_default();
        let namespace = config_map.metadata.namespace.as_deref().unwrap_or(NAMESPACE);
        if namespace != NAMESPACE {
            return Err(ComponentsError::Namespace { name, namespace: namespace.to_owned() });
        }
        if config_map.immutable != Some(true) {
            return Err(ComponentsError::NotImmutable { name });
        }
        let data = config_map.data.as_ref();
        let value = |key: &'static str| {
            data.and_then(|d| d.get(key)).ok_or(ComponentsError::Missing { name: name.clone(), key })
        };
        let raw: Vec<Component> = serde_json::from_str(value(COMPONENTS_KEY)?)
            .map_err(|e| ComponentsError::Json { name: name.clone(), reason: e.to_string() })?;
        if raw.is_empty() {
            return Err(ComponentsError::Empty { name });
        }
        let cluster_version: KubeVersion = value(CLUSTER_VERSION_KEY)?
            .parse()
            .map_err(|error| ComponentsError::BadVersion { name: name.clone(), error })?;
        let mut components = Vec::with_capacity(raw.len());
        let mut paths: Vec<&str> = Vec::new();
        for (index, component) in raw.iter().enumerate() {
            components.push(verify(&name, index, component, install_roots)?);
            if let Some(first) = paths.iter().position(|p| *p == component.install_path) {
                let path = component.install_path.clone();
                return Err(ComponentsError::DuplicateInstallPath { name, index, first, path });
            }
            paths.push(&component.install_path);
        }
        let hash = components_hash(raw.iter().map(|c| c.hash.as_str()));
        let expected = config_map_name(&hash);
        if name != expected {
            return Err(ComponentsError::NameMismatch { name, expected, hash });
        }
        if let Some(in_spec) = spec_version
            && *in_spec != cluster_version
        {
            return Err(ComponentsError::VersionMismatch {
                name,
                in_config_map: cluster_version,
                in_spec: in_spec.clone(),
            });
        }
        Ok(Release { name, cluster_version, components, hash })
    }
}

fn verify(
    name: &str,
    index: usize,
    component: &Component,
    roots: &[&str],
) -> Result<VerifiedComponent, ComponentsError> {
    let name = name.to_owned();
    if component.hash.is_empty() {
        return Err(ComponentsError::MissingHash { name, index });
    }
    let hash: Sha256 = component.hash.parse().map_err(|reason| ComponentsError::BadHash {
        name: name.clone(),
        index,
        value: component.hash.clone(),
        reason,
    })?;
    let bad_url =
        |reason: String| ComponentsError::BadUrl { name: name.clone(), index, url: component.url.clone(), reason };
    let source = match component.url.split_once(':').map(|(scheme, _)| scheme.to_ascii_lowercase()) {
        Some(scheme) if scheme == "https" || scheme == "http" => {
            let rest = &component.url[scheme.len() + 1..];
            let host = rest.strip_prefix("//").and_then(|r| r.split(['/', '?', '#']).next()).unwrap_or_default();
            if host.is_empty() {
                return Err(bad_url("it has no host".into()));
            }
            if component.url.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
                return Err(bad_url("it contains whitespace or control characters".into()));
            }
            Source::Download(component.url.clone())
        }
        Some(scheme) if scheme == "data" => {
            let content = decode_data_url(&component.url).map_err(|reason| bad_url(reason.into()))?;
            let actual = Sha256::of(&content);
            if actual != hash {
                return Err(ComponentsError::InlineMismatch { name, index, expected: hash, actual });
            }
            Source::Inline(content)
        }
        Some(scheme) => return Err(bad_url(format!("the scheme {scheme}: is not https:, http: or data:"))),
        None => return Err(bad_url("it has no scheme (https:, http: or data:)".into())),
    };
    check_install_path(&component.install_path, roots).map_err(|reason| ComponentsError::BadInstallPath {
        name,
        index,
        path: component.install_path.clone(),
        reason,
    })?;
    Ok(VerifiedComponent { source, hash, install_path: component.install_path.clone(), extract: component.extract })
}

/// The content of a `data:` URL (RFC 2397: `data:[<mediatype>][;base64],<data>`, percent-encoded unless base64).
pub fn decode_data_url(url: &str) -> Result<Vec<u8>, &'static str> {
    let rest =
        url.get(..5).filter(|s| s.eq_ignore_ascii_case("data:")).map(|_| &url[5..]).ok_or("it is not a data: URL")?;
    let (header, data) = rest.split_once(',').ok_or("the data: URL has no comma before its data")?;
    if header.rsplit(';').next().is_some_and(|last| last.eq_ignore_ascii_case("base64")) {
        let data: String = percent_encoding::percent_decode_str(data)
            .decode_utf8()
            .map_err(|_| "the data: URL's base64 is not text")?
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        base64::engine::general_purpose::STANDARD.decode(data).map_err(|_| "the data: URL's base64 is invalid")
    } else {
        Ok(percent_encoding::percent_decode_str(data).collect())
    }
}

/// An install path is absolute, normalised (no empty, `.` or `..` segments, no trailing `/`), printable, and
/// below one of `roots` (or a root itself, for an archive extracted into it).
pub fn check_install_path(path: &str, roots: &[&str]) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err("it is not an absolute path".into());
    }
    if path.bytes().any(|b| b.is_ascii_control()) {
        return Err("it contains control characters".into());
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err("it ends with /".into());
    }
    if path[1..].split('/').any(|segment| segment.is_empty() || segment == "." || segment == "..") {
        return Err("it has an empty, . or .. segment".into());
    }
    let under = |root: &&str| path == *root || path.strip_prefix(*root).is_some_and(|rest| rest.starts_with('/'));
    if roots.iter().any(under) {
        Ok(())
    } else {
        Err(format!("it is not under an allowed directory ({})", roots.join(", ")))
    }
}

#[cfg(test)]
mod tests;
