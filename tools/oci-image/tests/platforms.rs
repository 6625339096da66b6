//! The multi-platform image `make image` writes: an OCI image index with an amd64 and an arm64 image, each with
//! the binary of its architecture, and the arm64 update-operator binary runs (its `-agent --help`) under qemu's
//! user-mode emulation.
//!
//! The arm64 binary is the static debug build `.ci/run` makes before the tests (`cargo build --target
//! aarch64-unknown-linux-gnu --bin update-operator`, in this test's target directory); qemu-user-static runs it.
//! CI installs both and fails without them; elsewhere the test skips when one is missing. The amd64 image packs
//! this test's own executable (any x86-64 ELF file will do: running the amd64 binary from the image is
//! `tests/it/image.rs`'s). The archive is unpacked with the system `tar`, an implementation independent of the
//! writer.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const REFERENCE: &str = "registry.example/update-operator:test";
const ARM64_TARGET: &str = "aarch64-unknown-linux-gnu";

/// The arm64 debug build of the binary in this test's target directory (`<target>/debug/deps/platforms-HASH` ->
/// `<target>/aarch64-unknown-linux-gnu/debug/update-operator`).
fn arm64_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target_dir = exe.parent().and_then(Path::parent).and_then(Path::parent).unwrap();
    target_dir.join(ARM64_TARGET).join("debug").join("update-operator")
}

/// qemu's aarch64 user-mode emulator on PATH.
fn qemu() -> Option<&'static str> {
    ["qemu-aarch64-static", "qemu-aarch64"].into_iter().find(|q| Command::new(q).arg("--version").output().is_ok())
}

/// The arm64 binary and qemu, or `None` (outside CI) when one is missing.
fn prerequisites() -> Option<(PathBuf, &'static str)> {
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipping: the amd64 image packs this test's own executable, which is not x86-64 here");
        return None;
    }
    let binary = arm64_binary();
    let found = (binary.exists(), qemu());
    let ci = std::env::var_os("CI").is_some();
    assert!(binary.exists() || !ci, "{} is missing: .ci/run builds it", binary.display());
    assert!(found.1.is_some() || !ci, "qemu-aarch64(-static) is missing: .ci/run installs qemu-user-static");
    match found {
        (true, Some(qemu)) => Some((binary, qemu)),
        _ => {
            eprintln!("skipping: no {} or no qemu-aarch64", binary.display());
            None
        }
    }
}

fn untar(archive: &Path, into: &Path) {
    std::fs::create_dir_all(into).unwrap();
    let status = Command::new("tar").arg("-xf").arg(archive).arg("-C").arg(into).status().unwrap();
    assert!(status.success(), "tar -xf {}", archive.display());
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    let path = layout.join("blobs").join(digest.replacen(':', "/", 1));
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(oci_image::digest(&data), digest, "the blob's content does not match its name");
    path
}

/// Runs `program args` and returns its stdout; panics with its output when it fails.
fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(output.status.success(), "{program} {args:?}: {}\n{}", text(&output.stdout), text(&output.stderr));
    text(&output.stdout)
}

#[test]
fn the_image_index_holds_amd64_and_arm64_and_the_arm64_binary_runs_under_emulation() {
    let Some((arm64, qemu)) = prerequisites() else { return };
    let amd64 = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let spec = oci_image::index::IndexSpec {
        ca_bundle: b"-----BEGIN CERTIFICATE-----\n".to_vec(),
        reference: REFERENCE.into(),
        user: 65532,
        platforms: vec![
            oci_image::index::Platform { architecture: "amd64".into(), binary: amd64.clone() },
            oci_image::index::Platform { architecture: "arm64".into(), binary: std::fs::read(&arm64).unwrap() },
        ],
    };
    let image = oci_image::index::build_index(&spec).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("image.tar");
    std::fs::write(&archive, &image.archive).unwrap();
    let layout = dir.path().join("layout");
    untar(&archive, &layout);

    // index.json names one image index by the reference; it lists one manifest per platform.
    let top = json(&layout.join("index.json"));
    let entries = top["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{top}");
    assert_eq!(entries[0]["mediaType"], "application/vnd.oci.image.index.v1+json");
    assert_eq!(entries[0]["annotations"]["io.containerd.image.name"], REFERENCE);
    assert_eq!(entries[0]["digest"], image.index_digest.as_str());
    let index = json(&blob(&layout, &image.index_digest));
    let platforms: Vec<(String, String)> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["platform"]["os"], "linux");
            (m["platform"]["architecture"].as_str().unwrap().to_owned(), m["digest"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(platforms.iter().map(|(a, _)| a.as_str()).collect::<Vec<_>>(), ["amd64", "arm64"]);

    for (architecture, manifest_digest) in &platforms {
        let manifest = json(&blob(&layout, manifest_digest));
        let config = json(&blob(&layout, manifest["config"]["digest"].as_str().unwrap()));
        assert_eq!(config["architecture"], architecture.as_str());
        let rootfs = dir.path().join(format!("rootfs-{architecture}"));
        untar(&blob(&layout, manifest["layers"][0]["digest"].as_str().unwrap()), &rootfs);
        let entrypoint = config["config"]["Entrypoint"][0].as_str().unwrap().trim_start_matches('/');
        let binary = rootfs.join(entrypoint);
        let packed = std::fs::read(&binary).unwrap();
        oci_image::check_binary(&packed, architecture).unwrap();
        if architecture == "arm64" {
            assert_eq!(packed, std::fs::read(&arm64).unwrap());
            let help = run(qemu, &[binary.to_str().unwrap(), "-agent", "--help"]);
            assert!(help.contains("--host-backend"), "the arm64 -agent --help printed:\n{help}");
        } else {
            assert_eq!(packed, amd64);
        }
    }
    // docker load without the containerd image store reads manifest.json: the first platform, amd64.
    let docker = json(&layout.join("manifest.json"));
    let amd64_manifest = json(&blob(&layout, &platforms[0].1));
    let config_path = format!("blobs/{}", amd64_manifest["config"]["digest"].as_str().unwrap().replacen(':', "/", 1));
    assert_eq!(docker[0]["Config"], config_path);
}

#[test]
fn make_image_builds_and_packs_both_platforms() {
    if Command::new("make").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "make is missing (CI installs it)");
        eprintln!("skipping: make is not installed");
        return;
    }
    let repo = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let plan = run("make", &["--no-print-directory", "-n", "-C", repo, "image"]);
    for expected in [
        "--target x86_64-unknown-linux-gnu --bin update-operator",
        "--target aarch64-unknown-linux-gnu --bin update-operator",
        "--platform amd64=target/x86_64-unknown-linux-gnu/release/update-operator",
        "--platform arm64=target/aarch64-unknown-linux-gnu/release/update-operator",
    ] {
        assert!(plan.contains(expected), "make -n image does not run {expected:?}:\n{plan}");
    }
}
