//! A multi-platform image: one image per architecture, listed with its platform in an OCI image index, the way
//! `docker buildx build --platform linux/amd64,linux/arm64 --output type=oci` lays one out (image-spec
//! image-layout.md and image-index.md): `index.json` names one image index by the reference's annotations, and
//! that index lists each platform's manifest with `platform.architecture` and `platform.os`.
//!
//! # Guarantees
//! - Each platform's binary is an ELF executable of that platform's architecture ([`crate::check_binary`]).
//! - Reproducible, as a single image: the same inputs give the same bytes; platforms keep the order given.
//! - Docker's `manifest.json` (read by `docker load` without the containerd image store) names the first
//!   platform's image: Docker's format holds one platform per tag.

use crate::{ImageError, ImageSpec, Kind, Value, blobs, bytes, digest, layout_entries, name_annotations, tar_of};
use serde_json::json;

/// One platform of a multi-platform image.
#[derive(Debug, Clone)]
pub struct Platform {
    /// The OCI architecture (`amd64`, `arm64`).
    pub architecture: String,
    /// The (static) executable for it.
    pub binary: Vec<u8>,
}

/// What goes into a multi-platform image: what the platforms share, and each platform's binary.
#[derive(Debug, Clone)]
pub struct IndexSpec {
    /// PEM certificates of the CAs the binary trusts.
    pub ca_bundle: Vec<u8>,
    /// The image reference, `NAME:TAG`.
    pub reference: String,
    /// The user (and group) ID the image runs as.
    pub user: u32,
    /// The platforms, at least one, each architecture once.
    pub platforms: Vec<Platform>,
}

/// One platform's image in a written index.
#[derive(Debug, Clone)]
pub struct PlatformImage {
    pub architecture: String,
    /// The platform's manifest digest.
    pub manifest_digest: String,
    /// The platform's config digest.
    pub config_digest: String,
}

/// The written multi-platform image.
#[derive(Debug, Clone)]
pub struct IndexImage {
    /// The archive (OCI image layout plus Docker's `manifest.json` of the first platform).
    pub archive: Vec<u8>,
    /// The image index's digest, what a registry names the multi-platform image by.
    pub index_digest: String,
    /// The platforms' images, in the order given.
    pub platforms: Vec<PlatformImage>,
}

/// Writes the multi-platform image of `spec`.
pub fn build_index(spec: &IndexSpec) -> Result<IndexImage, ImageError> {
    let (_, tag) = crate::split_reference(&spec.reference)?;
    if spec.platforms.is_empty() {
        return Err(ImageError::Platforms("an image index needs at least one platform".to_owned()));
    }
    let mut images = Vec::with_capacity(spec.platforms.len());
    for (i, platform) in spec.platforms.iter().enumerate() {
        if spec.platforms[..i].iter().any(|p| p.architecture == platform.architecture) {
            return Err(ImageError::Platforms(format!("the platform {} is given twice", platform.architecture)));
        }
        let single = ImageSpec {
            binary: platform.binary.clone(),
            ca_bundle: spec.ca_bundle.clone(),
            reference: spec.reference.clone(),
            user: spec.user,
            architecture: platform.architecture.clone(),
        };
        images.push((platform.architecture.clone(), blobs(&single)?));
    }
    let manifests: Vec<Value> = images
        .iter()
        .map(|(architecture, blobs)| {
            json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": blobs.manifest_digest,
                "size": blobs.manifest.len(),
                "platform": {"architecture": architecture, "os": "linux"},
            })
        })
        .collect();
    let index = bytes(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }));
    let index_digest = digest(&index);
    let top = json!([{
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "digest": index_digest,
        "size": index.len(),
        "annotations": name_annotations(&spec.reference, tag),
    }]);
    let mut entries = layout_entries(top, &spec.reference, &images[0].1);
    entries.push((crate::blob_path(&index_digest), Kind::File, 0o644, index));
    let mut platforms = Vec::with_capacity(images.len());
    for (architecture, blobs) in images {
        platforms.push(PlatformImage {
            architecture,
            manifest_digest: blobs.manifest_digest.clone(),
            config_digest: blobs.config_digest.clone(),
        });
        entries.extend(blobs.entries());
    }
    // Platforms share the CA bundle and user, never a whole blob (their binaries differ); a blob written twice
    // would still be one file.
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|a, b| a.0 == b.0);
    Ok(IndexImage { archive: tar_of(entries)?, index_digest, platforms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::elf;

    fn spec(platforms: &[(&str, u16)]) -> IndexSpec {
        IndexSpec {
            ca_bundle: b"-----BEGIN CERTIFICATE-----\n".to_vec(),
            reference: "registry.example/update-operator:v1".into(),
            user: 65532,
            platforms: platforms
                .iter()
                .map(|(architecture, machine)| Platform {
                    architecture: (*architecture).into(),
                    binary: elf(*machine, architecture.as_bytes()),
                })
                .collect(),
        }
    }

    #[test]
    fn the_same_binaries_give_the_same_index_and_each_platform_its_own_manifest() {
        let a = build_index(&spec(&[("amd64", 62), ("arm64", 183)])).unwrap();
        let again = build_index(&spec(&[("amd64", 62), ("arm64", 183)])).unwrap();
        assert_eq!(a.archive, again.archive);
        assert_eq!(a.platforms.iter().map(|p| p.architecture.as_str()).collect::<Vec<_>>(), ["amd64", "arm64"]);
        assert_ne!(a.platforms[0].manifest_digest, a.platforms[1].manifest_digest);
    }

    #[test]
    fn platforms_are_checked() {
        let error = |platforms: &[(&str, u16)]| build_index(&spec(platforms)).unwrap_err().to_string();
        assert_eq!(error(&[]), "an image index needs at least one platform");
        assert_eq!(error(&[("amd64", 62), ("amd64", 62)]), "the platform amd64 is given twice");
        assert_eq!(error(&[("amd64", 62), ("arm64", 62)]), "the binary for arm64 is an ELF file for x86-64");
    }
}
