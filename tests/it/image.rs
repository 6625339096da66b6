//! The image `make image` writes: the archive is a valid OCI image layout with Docker's `manifest.json`, the
//! same binary gives the same digest, and the binary unpacked from it runs against the dev cluster as the
//! controller (it becomes leader) and as an agent (it reports its node).
//!
//! The test packs the debug binary (a static release build is what `make image` packs; building one here would
//! take most of CI's time) and unpacks with the system `tar`, an implementation independent of the writer.

use dev::cluster::{Cluster, ClusterConfig};
use dev::harness;
use k8s_openapi::api::core::v1::Node;
use serde_json::Value;
use shared::protocol::keys;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const REFERENCE: &str = "registry.example/update-operator:test";
const CA_BUNDLE: &[u8] = b"-----BEGIN CERTIFICATE-----\nnot a real certificate\n-----END CERTIFICATE-----\n";

fn image() -> oci_image::Image {
    let binary = std::fs::read(env!("CARGO_BIN_EXE_update-operator")).unwrap();
    let spec = oci_image::ImageSpec {
        binary,
        ca_bundle: CA_BUNDLE.to_vec(),
        reference: REFERENCE.into(),
        user: 65532,
        architecture: "amd64".into(),
    };
    oci_image::build(&spec).unwrap()
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

/// Unpacks the archive and its one layer; returns the root file system.
fn unpack(image: &oci_image::Image, dir: &Path) -> PathBuf {
    let archive = dir.join("image.tar");
    std::fs::write(&archive, &image.archive).unwrap();
    let layout = dir.join("layout");
    untar(&archive, &layout);
    assert_eq!(json(&layout.join("oci-layout"))["imageLayoutVersion"], "1.0.0");
    let index = json(&layout.join("index.json"));
    let entry = &index["manifests"][0];
    assert_eq!(entry["digest"], image.manifest_digest.as_str());
    assert_eq!(entry["annotations"]["io.containerd.image.name"], REFERENCE);
    let manifest = json(&blob(&layout, &image.manifest_digest));
    let config_digest = manifest["config"]["digest"].as_str().unwrap();
    assert_eq!(config_digest, image.config_digest);
    let config = json(&blob(&layout, config_digest));
    assert_eq!(config["config"]["User"], "65532:65532");
    let layer_digest = manifest["layers"][0]["digest"].as_str().unwrap();
    assert_eq!(config["rootfs"]["diff_ids"][0], layer_digest, "an uncompressed layer is its own diff ID");
    // Docker's view of the same blobs.
    let docker = json(&layout.join("manifest.json"));
    assert_eq!(docker[0]["RepoTags"][0], REFERENCE);
    assert_eq!(docker[0]["Config"], format!("blobs/{}", config_digest.replacen(':', "/", 1)));
    assert_eq!(docker[0]["Layers"][0], format!("blobs/{}", layer_digest.replacen(':', "/", 1)));
    let rootfs = dir.join("rootfs");
    untar(&blob(&layout, layer_digest), &rootfs);
    assert_eq!(std::fs::read(rootfs.join(oci_image::CA_BUNDLE_PATH)).unwrap(), CA_BUNDLE);
    let entrypoint = config["config"]["Entrypoint"][0].as_str().unwrap().trim_start_matches('/').to_owned();
    rootfs.join(entrypoint)
}

/// A child process killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(binary: &Path, args: &[&str], log: &Path) -> Running {
    let log = std::fs::File::create(log).unwrap();
    Running(
        Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", binary.display())),
    )
}

#[test]
fn the_same_binary_gives_the_same_image() {
    let (a, b) = (image(), image());
    assert_eq!(a.manifest_digest, b.manifest_digest);
    assert_eq!(a.archive, b.archive);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_in_the_image_leads_and_reports_against_the_dev_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let binary = unpack(&image(), dir.path());
    let cluster = Cluster::start(ClusterConfig { nodes: 2, control_planes: 1, workloads: None, ..Default::default() })
        .await
        .unwrap();
    let manifest = cluster.operator().manifest();
    let kubeconfig = |identity| cluster.server().kubeconfig_for(&identity).unwrap().display().to_string();
    let controller_config = kubeconfig(manifest.controller_identity().unwrap());
    let node = cluster.workers()[0].clone();
    let agent_config = kubeconfig(manifest.agent_identity(&node).unwrap());
    let common = ["--metrics-addr", "127.0.0.1:0", "--log-format", "text"];
    let mut controller_args = vec!["-controller", "--kubeconfig", &controller_config, "--identity", "from-image"];
    controller_args.extend(["--lease-namespace", harness::LEASE_NAMESPACE, "--lease-name", harness::LEASE_NAME]);
    controller_args.extend(common);
    let _controller = start(&binary, &controller_args, &dir.path().join("controller.log"));
    let mut agent_args = vec!["-agent", "--node-name", &node, "--kubeconfig", &agent_config];
    agent_args.extend(["--host-backend", "simulated", "--simulated-hosts-url", cluster.url()]);
    agent_args.extend(common);
    let _agent = start(&binary, &agent_args, &dir.path().join("agent.log"));

    let store = cluster.store();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let leader = harness::lease_holder(&store);
        let reported = store
            .api::<Node>()
            .get(None, &node)
            .ok()
            .and_then(|n| n.metadata.annotations)
            .and_then(|a| a.get(keys::OS_IMAGE).cloned());
        if leader.as_deref() == Some("from-image") && reported.is_some() {
            break;
        }
        let logs = || {
            ["controller.log", "agent.log"]
                .map(|f| std::fs::read_to_string(dir.path().join(f)).unwrap_or_default())
                .join("\n---\n")
        };
        assert!(Instant::now() < deadline, "leader {leader:?}, agent report {reported:?}; logs:\n{}", logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.shutdown().await;
}
