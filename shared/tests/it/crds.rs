//! The committed CRDs and the install bundle are what the Rust types generate.

use serde_json::Value;
use shared::crd;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn committed_crds_match_the_rust_types() {
    let dir = root().join("../deploy/crds");
    let generated: Vec<(String, String)> =
        crd::all().iter().map(|c| (crd::file_name(c), crd::to_yaml(c).unwrap())).collect();
    let committed: Vec<String> =
        yaml_files(&dir).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let expected: Vec<String> = generated.iter().map(|(name, _)| name.clone()).collect();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(committed, expected_sorted, "deploy/crds/ holds other files than the CRDs; run `make manifests`");
    for (name, yaml) in generated {
        let on_disk = std::fs::read_to_string(dir.join(&name)).unwrap();
        assert!(on_disk == yaml, "deploy/crds/{name} differs from what the Rust types generate; run `make manifests`");
    }
}

#[test]
fn the_install_bundle_is_the_crds_plus_the_operator_manifests() {
    let deploy = root().join("../deploy");
    let operator = std::fs::read_to_string(deploy.join("operator.yaml")).unwrap();
    let on_disk = std::fs::read_to_string(deploy.join("update-operator.yaml")).unwrap();
    assert!(
        on_disk == crd::bundle(&operator).unwrap(),
        "deploy/update-operator.yaml differs from deploy/crds + deploy/operator.yaml; run `make manifests`"
    );
    // Every document parses, and every CRD is in it.
    let kinds: Vec<String> = on_disk
        .split("\n---\n")
        .filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')))
        .map(|d| {
            let v: Value = yaml_serde::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"));
            v["kind"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(kinds.iter().filter(|k| *k == "CustomResourceDefinition").count(), crd::all().len());
    for kind in ["Namespace", "Deployment", "DaemonSet", "ClusterRole", "ValidatingAdmissionPolicy"] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} in the bundle");
    }
}
