//! The update-operator container image, assembled without a container engine: one binary and a CA bundle on
//! an empty base (`scratch`), written as an OCI image layout tar that also carries Docker's `manifest.json`, so
//! that `docker load`, `podman load`, `kind load image-archive` and `ctr images import` all read it.
//!
//! # Guarantees
//! - Reproducible: the same inputs give the same bytes, hence the same digests (entries sorted, fixed
//!   modification times and owners, no creation time in the config, uncompressed layer).
//! - The image runs the binary as its entrypoint, as the given non-root user (a `passwd` and `group` entry
//!   name it), with `SSL_CERT_FILE` pointing at the bundle.
//! - The binary is an ELF executable of the image's architecture (its `e_machine`): an amd64 binary is never
//!   packed as arm64.
//!
//! [`build`] writes one platform's image; [`index::build_index`] one image per platform under an OCI image index
//! (what `make image` writes: amd64 and arm64).

pub mod index;
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
    /// The architecture is not one this tool knows the ELF machine of.
    #[error("unsupported architecture {0:?} (amd64 or arm64)")]
    Architecture(String),
    /// The binary is not an ELF executable of the image's architecture.
    #[error("the binary for {architecture} is {found}")]
    WrongBinary { architecture: String, found: String },
    /// The same architecture was given twice, or none.
    #[error("{0}")]
    Platforms(String),
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

/// The ELF machine (`e_machine`) of an OCI architecture: EM_X86_64 and EM_AARCH64 of the System V ABI.
fn elf_machine(architecture: &str) -> Result<u16, ImageError> {
    match architecture {
        "amd64" => Ok(62),
        "arm64" => Ok(183),
        other => Err(ImageError::Architecture(other.to_owned())),
    }
}

/// Checks that `binary` is a little-endian 64-bit ELF file for `architecture`.
pub fn check_binary(binary: &[u8], architecture: &str) -> Result<(), ImageError> {
    let expected = elf_machine(architecture)?;
    let wrong = |found: String| ImageError::WrongBinary { architecture: architecture.to_owned(), found };
    if binary.len() < 20 || &binary[..4] != b"\x7fELF" {
        return Err(wrong("not an ELF file".to_owned()));
    }
    // EI_CLASS 2 = 64-bit, EI_DATA 1 = little-endian (both architectures' Linux ABI).
    if binary[4] != 2 || binary[5] != 1 {
        return Err(wrong("not a 64-bit little-endian ELF file".to_owned()));
    }
    let machine = u16::from_le_bytes([binary[18], binary[19]]);
    if machine != expected {
        let name = match machine {
            62 => "x86-64".to_owned(),
            183 => "AArch64".to_owned(),
            other => format!("machine {other}"),
        };
        return Err(wrong(format!("an ELF file for {name}")));
    }
    Ok(())
}

/// The blobs of one platform's image.
struct Blobs {
    layer: Vec<u8>,
    layer_digest: String,
    config: Vec<u8>,
    config_digest: String,
    manifest: Vec<u8>,
    manifest_digest: String,
}

impl Blobs {
    /// The archive entries of the blobs.
    fn entries(self) -> Vec<(String, Kind, u32, Vec<u8>)> {
        let file = |path: String, data: Vec<u8>| (path, Kind::File, 0o644, data);
        vec![
            file(blob_path(&self.layer_digest), self.layer),
            file(blob_path(&self.config_digest), self.config),
            file(blob_path(&self.manifest_digest), self.manifest),
        ]
    }
}

fn blobs(spec: &ImageSpec) -> Result<Blobs, ImageError> {
    check_binary(&spec.binary, &spec.architecture)?;
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
    Ok(Blobs { layer, layer_digest, config, config_digest, manifest, manifest_digest })
}

/// The files every archive has besides the blobs: the blob directories, `index.json` (its `manifests`), Docker's
/// `manifest.json` for `docker_image` (Docker's format holds one platform), and `oci-layout`.
fn layout_entries(index_manifests: Value, reference: &str, docker_image: &Blobs) -> Vec<(String, Kind, u32, Vec<u8>)> {
    let index = bytes(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": index_manifests,
    }));
    let docker_manifest = bytes(&json!([{
        "Config": blob_path(&docker_image.config_digest),
        "RepoTags": [reference],
        "Layers": [blob_path(&docker_image.layer_digest)],
    }]));
    let file = |path: &str, data: Vec<u8>| (path.to_owned(), Kind::File, 0o644, data);
    vec![
        ("blobs/".into(), Kind::Directory, 0o755, Vec::new()),
        ("blobs/sha256/".into(), Kind::Directory, 0o755, Vec::new()),
        file("index.json", index),
        file("manifest.json", docker_manifest),
        file("oci-layout", bytes(&json!({"imageLayoutVersion": "1.0.0"}))),
    ]
}

/// The annotations that name the image in `index.json` (containerd's and OCI's).
fn name_annotations(reference: &str, tag: &str) -> Value {
    json!({"io.containerd.image.name": reference, "org.opencontainers.image.ref.name": tag})
}

/// Writes the image of `spec`.
pub fn build(spec: &ImageSpec) -> Result<Image, ImageError> {
    let (_, tag) = split_reference(&spec.reference)?;
    let blobs = blobs(spec)?;
    let manifests = json!([{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": blobs.manifest_digest,
        "size": blobs.manifest.len(),
        "annotations": name_annotations(&spec.reference, tag),
    }]);
    let mut entries = layout_entries(manifests, &spec.reference, &blobs);
    let (manifest_digest, config_digest) = (blobs.manifest_digest.clone(), blobs.config_digest.clone());
    entries.extend(blobs.entries());
    let archive = tar_of(entries)?;
    Ok(Image { archive, manifest_digest, config_digest })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF header for `machine` (62 x86-64, 183 AArch64) followed by `rest`.
    pub(crate) fn elf(machine: u16, rest: &[u8]) -> Vec<u8> {
        let mut binary = b"\x7fELF\x02\x01\x01".to_vec();
        binary.resize(18, 0);
        binary.extend_from_slice(&machine.to_le_bytes());
        binary.extend_from_slice(rest);
        binary
    }

    fn spec(rest: &[u8]) -> ImageSpec {
        ImageSpec {
            binary: elf(62, rest),
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
    fn only_an_elf_binary_of_the_images_architecture_is_packed() {
        check_binary(&elf(62, b""), "amd64").unwrap();
        check_binary(&elf(183, b""), "arm64").unwrap();
        for (binary, architecture, message) in [
            (elf(62, b""), "arm64", "the binary for arm64 is an ELF file for x86-64"),
            (elf(183, b""), "amd64", "the binary for amd64 is an ELF file for AArch64"),
            (elf(40, b""), "arm64", "the binary for arm64 is an ELF file for machine 40"),
            (b"#!/bin/sh\nexit 0\n".to_vec(), "amd64", "the binary for amd64 is not an ELF file"),
            (b"\x7fELF".to_vec(), "amd64", "the binary for amd64 is not an ELF file"),
            (elf(62, b""), "riscv64", "unsupported architecture \"riscv64\" (amd64 or arm64)"),
        ] {
            assert_eq!(check_binary(&binary, architecture).unwrap_err().to_string(), message);
        }
        let mut wrong = spec(b"x");
        wrong.architecture = "arm64".into();
        assert!(matches!(build(&wrong), Err(ImageError::WrongBinary { .. })));
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
