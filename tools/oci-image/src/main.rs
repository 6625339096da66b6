//! `oci-image`: writes the update-operator image archive (see the library docs); `make image` runs it with one
//! `--platform` per architecture (an OCI image index), `--binary` writes a single-platform image.

use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Writes an OCI image layout tar (docker-load compatible) of one binary per platform and a CA bundle on scratch.
#[derive(Debug, Parser)]
struct Args {
    /// The executable of a single-platform image, of `--architecture` (build it static: see `make image`).
    #[arg(long, required_unless_present = "platforms", conflicts_with = "platforms")]
    binary: Option<PathBuf>,
    /// The OCI architecture of `--binary`.
    #[arg(long, default_value = "amd64", conflicts_with = "platforms")]
    architecture: String,
    /// One platform of a multi-platform image (an OCI image index): ARCH=BINARY, e.g. arm64=target/aarch64-unknown-linux-gnu/release/update-operator.
    /// Repeat it for each architecture; the first one is also what `docker load` without the containerd image store loads.
    #[arg(long = "platform", value_name = "ARCH=BINARY")]
    platforms: Vec<String>,
    /// The CA bundle (PEM).
    #[arg(long, default_value = "/etc/ssl/certs/ca-certificates.crt")]
    ca_bundle: PathBuf,
    /// The image reference, NAME:TAG.
    #[arg(long)]
    reference: String,
    /// The user and group ID the image runs as.
    #[arg(long, default_value_t = 65532)]
    user: u32,
    /// Where to write the archive.
    #[arg(long)]
    output: PathBuf,
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The archive and what names it (the manifest digest of a single image, each platform's and the index's of
/// an index).
fn build(args: &Args) -> Result<(Vec<u8>, String), String> {
    let ca_bundle = read(&args.ca_bundle)?;
    if let Some(binary) = &args.binary {
        let spec = oci_image::ImageSpec {
            binary: read(binary)?,
            ca_bundle,
            reference: args.reference.clone(),
            user: args.user,
            architecture: args.architecture.clone(),
        };
        let image = oci_image::build(&spec).map_err(|e| e.to_string())?;
        return Ok((image.archive, image.manifest_digest));
    }
    let mut platforms = Vec::with_capacity(args.platforms.len());
    for platform in &args.platforms {
        let (architecture, binary) = platform
            .split_once('=')
            .filter(|(a, b)| !a.is_empty() && !b.is_empty())
            .ok_or_else(|| format!("--platform {platform:?} is not ARCH=BINARY"))?;
        platforms.push(oci_image::index::Platform {
            architecture: architecture.to_owned(),
            binary: read(Path::new(binary))?,
        });
    }
    let spec = oci_image::index::IndexSpec { ca_bundle, reference: args.reference.clone(), user: args.user, platforms };
    let image = oci_image::index::build_index(&spec).map_err(|e| e.to_string())?;
    let named: Vec<String> =
        image.platforms.iter().map(|p| format!("{}={}", p.architecture, p.manifest_digest)).collect();
    Ok((image.archive, format!("{} ({})", image.index_digest, named.join(", "))))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = build(&args).and_then(|(archive, digests)| {
        std::fs::write(&args.output, archive).map_err(|e| format!("cannot write {}: {e}", args.output.display()))?;
        Ok(digests)
    });
    match result {
        Ok(digests) => {
            println!("{} {} {digests}", args.output.display(), args.reference);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
