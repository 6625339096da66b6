//! Regenerates the manifests derived from the Rust types (`make manifests`): one file per CRD in
//! `<deploy>/crds/`, and `<deploy>/update-operator.yaml`, the CRDs plus `<deploy>/operator.yaml`.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let deploy: PathBuf = std::env::args_os().nth(1).map(PathBuf::from).ok_or("usage: crdgen <deploy directory>")?;
    let crds = deploy.join("crds");
    std::fs::create_dir_all(&crds)?;
    for crd in shared::crd::all() {
        let path = crds.join(shared::crd::file_name(&crd));
        std::fs::write(&path, shared::crd::to_yaml(&crd)?)?;
        println!("wrote {}", path.display());
    }
    let operator = std::fs::read_to_string(deploy.join("operator.yaml"))?;
    let bundle = deploy.join("update-operator.yaml");
    std::fs::write(&bundle, shared::crd::bundle(&operator)?)?;
    println!("wrote {}", bundle.display());
    Ok(())
}
