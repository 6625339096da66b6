//! `oci-image`: writes the update-operator image archive (see the library docs); `make image` runs it.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// Writes an OCI image layout tar (docker-load compatible) of one binary and a CA bundle on scratch.
#[derive(Debug, Parser)]
struct Args {
    /// The executable (build it static: see `make image`).
    #[arg(long)]
    binary: PathBuf,
    /// The CA bundle (PEM).
    #[arg(long, default_value = "/etc/ssl/certs/ca-certificates.crt")]
    ca_bundle: PathBuf,
    /// The image reference, NAME:TAG.
    #[arg(long)]
    reference: String,
    /// The user and group ID the image runs as.
    #[arg(long, default_value_t = 65532)]
    user: u32,
    /// The OCI architecture.
    #[arg(long, default_value = "amd64")]
    architecture: String,
    /// Where to write the archive.
    #[arg(long)]
    output: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let read = |path: &PathBuf| std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()));
    let result = (|| -> Result<oci_image::Image, String> {
        let spec = oci_image::ImageSpec {
            binary: read(&args.binary)?,
            ca_bundle: read(&args.ca_bundle)?,
            reference: args.reference.clone(),
            user: args.user,
            architecture: args.architecture.clone(),
        };
        let image = oci_image::build(&spec).map_err(|e| e.to_string())?;
        std::fs::write(&args.output, &image.archive)
            .map_err(|e| format!("cannot write {}: {e}", args.output.display()))?;
        Ok(image)
    })();
    match result {
        Ok(image) => {
            println!("{} {} {}", args.output.display(), args.reference, image.manifest_digest);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
