//! Writes the CustomResourceDefinitions generated from the Rust types into a directory, one file
//! per CRD (`make manifests` runs it into `deploy/crds/`).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir: PathBuf = std::env::args_os().nth(1).map(PathBuf::from).ok_or("usage: crdgen <output directory>")?;
    std::fs::create_dir_all(&dir)?;
    for crd in shared::crd::all() {
        let path = dir.join(shared::crd::file_name(&crd));
        std::fs::write(&path, shared::crd::to_yaml(&crd)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
