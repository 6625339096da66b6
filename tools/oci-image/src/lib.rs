//! The update-operator container image, assembled without a container engine: one binary and a CA bundle on
//! an empty base (`scratch`), written as an OCI image layout tar that also carries Docker's `manifest.json`, so
//! that `docker load`, `podman load`, `kind load image-archive` and `ctr images import` all read it.
//!
//! # Guarantees
//! - Reproducible: the same inputs give the same bytes, hence the same digests (entries sorted, fixed
//!   modification times and owners, no creation time in the config, uncompressed layer).
//! - The image runs the binary as its entrypoint, as the given non-root user (a `passwd` and `group` entry
//!   name it), with `SSL_CERT_FILE` pointing at the bundle.

pub mod tar;

use serde_json::{Value, json};
use tar::{Kind, TarError, TarWriter};

/// Where the binary is in the image.
pub const BINARY_PATH: &str = "usr/local/bin/update-operator";
/// Where the CA bundle is in the image.
pub const CA_BUNDLE_PATH: &str = "etc/ssl/certs/ca-certificates.crt";

/// What goes into the image.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    /// The (static) executable.
    pub binary: Vec<u8>,
    /// PEM certificates of the CAs the binary trusts.
    pub ca_bundle: Vec<u8>,
    /// The image reference the archive names, `NAME:TAG` (e.g. `ghcr.io/x/update-operator:0.1.0`).
    pub reference: String,
    /// The user (and group) ID the image runs as.
    pub user: u32,
    /// The OCI architecture (`amd64`, `arm64`).
    pub architecture: String,
}

/// An image that cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// The reference has no tag or an empty name.
    #[error("image reference {0:?} is not NAME:TAG")]
    Reference(String),
    /// Writing a tar failed.
    #[error(transparent)]
    Tar(#[from] TarError),
}

/// The written image.
#[derive(Debug, Clone)]
pub struct Image {
    /// The archive (OCI image layout plus `manifest.json`).
    pub archive: Vec<u8>,
    /// The manifest digest (`sha256:...`), what a registry or containerd names the image by.
    pub manifest_digest: String,
    /// The config digest (`sha256:...`), Docker's image ID.
    pub config_digest: String,
}

/// `sha256:<hex>` of `data`.
pub fn digest(data: &[u8]) -> String {
    let hash = ring::digest::digest(&ring::digest::SHA256, data);
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn blob_path(digest: &str) -> String {
    format!("blobs/{}", digest.replacen(':', "/", 1))
}

/// Splits `NAME:TAG` (the tag is after the last `:` that follows the last `/`).
fn split_reference(reference: &str) -> Result<(&str, &str), ImageError> {
    let bad = || ImageError::Reference(reference.to_owned());
    let (name, tag) = reference.rsplit_once(':').ok_or_else(bad)?;
    if name.is_empty() || tag.is_empty() || tag.contains('/') {
        return Err(bad());
    }
    Ok((name, tag))
}

/// One sorted tar of `(path, kind, mode, data)` entries (directories end with `/`), owned by root.
fn tar_of(mut entries: Vec<(String, Kind, u32, Vec<u8>)>) -> Result<Vec<u8>, TarError> {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let mut tar = TarWriter::new(Vec::new());
    for (path, kind, mode, data) in &entries {
        tar.append(path, *kind, *mode, 0, 0, data)?;
    }
    tar.finish()
}

/// The root file system: the binary, the CA bundle, `passwd` and `group`, and their directories.
fn layer(spec: &ImageSpec) -> Result<Vec<u8>, TarError> {
    let dir = |path: &str| (path.to_owned(), Kind::Directory, 0o755, Vec::new());
    let user = spec.user;
    let passwd = format!("root:x:0:0:root:/:/sbin/nologin\nnonroot:x:{user}:{user}:nonroot:/:/sbin/nologin\n");
    let group = format!("root:x:0:\nnonroot:x:{user}:\n");
    tar_of(vec![
        dir("etc/"),
        ("etc/passwd".into(), Kind::File, 0o644, passwd.into_bytes()),
        ("etc/group".into(), Kind::File, 0o644, group.into_bytes()),
        dir("etc/ssl/"),
        dir("etc/ssl/certs/"),
        (CA_BUNDLE_PATH.into(), Kind::File, 0o644, spec.ca_bundle.clone()),
        dir("usr/"),
        dir("usr/local/"),
        dir("usr/local/bin/"),
        (BINARY_PATH.into(), Kind::File, 0o755, spec.binary.clone()),
    ])
}

fn bytes(value: &Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// Writes the image of `spec`.
pub fn build(spec: &ImageSpec) -> Result<Image, ImageError> {
    let (_, tag) = split_reference(&spec.reference)?;
    let layer = layer(spec)?;
    let layer_digest = digest(&layer);
    let config = bytes(&json!({
        "architecture": spec.architecture,
        "os": "linux",
        "config": {
            "User": format!("{0}:{0}", spec.user),
            "Entrypoint": [format!("/{BINARY_PATH}")],
            "Env": [format!("SSL_CERT_FILE=/{CA_BUNDLE_PATH}")],
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "oci-image (update-operator repository tool)"}],
    }));
    let config_digest = digest(&config);
    let manifest = bytes(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer.len()}],
    }));
    let manifest_digest = digest(&manifest);
    let index = bytes(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "annotations": {"io.containerd.image.name": spec.reference, "org.opencontainers.image.ref.name": tag},
        }],
    }));
    let docker_manifest = bytes(&json!([{
        "Config": blob_path(&config_digest),
        "RepoTags": [spec.reference],
        "Layers": [blob_path(&layer_digest)],
    }]));
    let file = |path: String, data: Vec<u8>| (path, Kind::File, 0o644, data);
    let archive = tar_of(vec![
        ("blobs/".into(), Kind::Directory, 0o755, Vec::new()),
        ("blobs/sha256/".into(), Kind::Directory, 0o755, Vec::new()),
        file(blob_path(&layer_digest), layer),
        file(blob_path(&config_digest), config),
        file(blob_path(&manifest_digest), manifest),
        file("index.json".into(), index),
        file("manifest.json".into(), docker_manifest),
        file("oci-layout".into(), bytes(&json!({"imageLayoutVersion": "1.0.0"}))),
    ])?;
    Ok(Image { archive, manifest_digest, config_digest })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(binary: &[u8]) -> ImageSpec {
        ImageSpec {
            binary: binary.to_vec(),
            ca_bundle: b"-----BEGIN CERTIFICATE-----\n".to_vec(),
            reference: "registry.example:5000/update-operator:v1".into(),
            user: 65532,
            architecture: "amd64".into(),
        }
    }

    #[test]
    fn the_same_binary_gives_the_same_digest_and_another_binary_another() {
        let a = build(&spec(b"binary one")).unwrap();
        let again = build(&spec(b"binary one")).unwrap();
        assert_eq!(a.archive, again.archive);
        assert_eq!(a.manifest_digest, again.manifest_digest);
        let b = build(&spec(b"binary two")).unwrap();
        assert_ne!(a.manifest_digest, b.manifest_digest);
        assert_ne!(a.config_digest, b.config_digest);
    }

    #[test]
    fn references_need_a_tag() {
        assert_eq!(split_reference("registry.example:5000/op:v1").unwrap(), ("registry.example:5000/op", "v1"));
        for bad in ["op", "registry.example:5000/op", ":v1", "op:"] {
            assert!(split_reference(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sha256_of_the_empty_string() {
        assert_eq!(digest(b""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
