//! The command backend's kubeadm upgrade with stand-in executables in a temporary host root: the kubeadm
//! stand-in is served over local HTTP with its real hash, installed, and records its argv; the kubelet
//! restart stand-in records what kubelet it found.

use super::*;
use crate::components::tests::serve;
use crate::kubeadm::Role;
use k8s_openapi::api::core::v1::ConfigMap;
use percent_encoding::{NON_ALPHANUMERIC, percent_encode};
use serde_json::json;
use shared::components::{Release, Sha256, components_hash, config_map_name};
use std::collections::HashMap;
use tempfile::TempDir;

const PATCH: &[u8] = b"- op: add\n  path: /spec/containers/0/args/-\n  value: --profiling=false\n";
const PATCH_PATH: &str = "/etc/kubernetes/patches/kube-apiserver0+json.yaml";

struct Fixture {
    root: TempDir,
    /// Where the stand-ins write what they saw (outside the host root).
    log: TempDir,
}

impl Fixture {
    fn new() -> Self {
        let fixture = Fixture { root: tempfile::tempdir().unwrap(), log: tempfile::tempdir().unwrap() };
        // The kubelet the host runs before the upgrade.
        let bin = fixture.root.path().join("usr/local/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("kubelet"), "kubelet v1.33.5").unwrap();
        fixture
    }

    fn log(&self, name: &str) -> String {
        self.log.path().join(name).display().to_string()
    }

    /// A kubeadm stand-in: appends its argv (NUL-separated, one call a line) to `kubeadm.calls`, and the kubelet
    /// and patches it found to `kubeadm.saw`; exits with `status`, printing `output` on stdout and stderr.
    fn kubeadm(&self, status: i32, output: &str) -> Vec<u8> {
        let root = self.root.path().display();
        format!(
            "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" >> '{calls}'\necho >> '{calls}'\n\
             cat '{root}/usr/local/bin/kubelet' >> '{saw}'; echo >> '{saw}'\n\
             ls '{root}/etc/kubernetes/patches' >> '{saw}'\n\
             echo '[upgrade] {output}'; echo '{output}' >&2\nexit {status}\n",
            calls = self.log("kubeadm.calls"),
            saw = self.log("kubeadm.saw"),
        )
        .into_bytes()
    }

    /// The host, with the restart stand-in recording its argv and the kubelet it restarts.
    fn host(&self) -> CommandHost {
        let restart = self.log.path().join("restart.sh");
        let root = self.root.path().display();
        let script = format!(
            "printf '%s\\0' \"$@\" >> '{calls}'; echo >> '{calls}'; cat '{root}/usr/local/bin/kubelet' >> '{calls}'; echo >> '{calls}'\n",
            calls = self.log("restart.calls")
        );
        std::fs::write(&restart, script).unwrap();
        let restart = restart.display().to_string();
        let config = json!({
            "check": {"argv": ["true"]}, "apply": {"argv": ["true"]}, "reboot": {"argv": ["true"]},
            "kubernetes": {
                "hostRoot": self.root.path(),
                "restartKubelet": [{"argv": ["/bin/sh", restart, "daemon-reload"]}, {"argv": ["/bin/sh", restart, "restart", "kubelet"]}],
            },
        });
        CommandHost::new(CommandConfig::from_json(&config.to_string(), Path::new("test.json")).unwrap())
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.log.path().join(name)).unwrap_or_default()
    }

    /// The argv of every kubeadm call.
    fn kubeadm_calls(&self) -> Vec<Vec<String>> {
        self.read("kubeadm.calls")
            .lines()
            .map(|line| line.split_terminator('\0').map(str::to_owned).collect())
            .collect()
    }

    fn installed(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.root.path().join(path.trim_start_matches('/'))).ok()
    }
}

/// A components ConfigMap (as the controller would find it) of kubeadm, kubelet and kubectl from `base` and an
/// inline patch, validated as the agent validates it.
fn release(base: &str, artifacts: &HashMap<String, Vec<u8>>) -> Release {
    let mut components: Vec<serde_json::Value> = ["kubeadm", "kubelet", "kubectl"]
        .iter()
        .map(|name| {
            json!({"url": format!("{base}/{name}"), "hash": Sha256::of(&artifacts[&format!("/{name}")]).to_string(),
                   "installPath": format!("/usr/local/bin/{name}")})
        })
        .collect();
    let data_url = format!("data:,{}", percent_encode(PATCH, NON_ALPHANUMERIC));
    components.push(json!({"url": data_url, "hash": Sha256::of(PATCH).to_string(), "installPath": PATCH_PATH}));
    let hashes: Vec<String> = components.iter().map(|c| c["hash"].as_str().unwrap().to_owned()).collect();
    let name = config_map_name(&components_hash(hashes.iter().map(String::as_str)));
    let config_map: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "kube-system"},
        "immutable": true,
        "data": {"components": serde_json::to_string(&components).unwrap(), "cluster-version": "v1.34.1"},
    }))
    .unwrap();
    Release::from_config_map(&config_map, Some(&"v1.34.1".parse().unwrap()), shared::components::DEFAULT_INSTALL_ROOTS)
        .unwrap()
}

fn artifacts(kubeadm: Vec<u8>) -> HashMap<String, Vec<u8>> {
    HashMap::from([
        ("/kubeadm".to_owned(), kubeadm),
        ("/kubelet".to_owned(), b"kubelet v1.34.1".to_vec()),
        ("/kubectl".to_owned(), b"kubectl v1.34.1".to_vec()),
    ])
}

fn upgrade(role: Role, release: &Release) -> KubernetesUpgrade {
    KubernetesUpgrade { version: release.cluster_version.clone(), role, components: release.components.clone() }
}

fn strings(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|a| (*a).to_owned()).collect()
}

#[tokio::test]
async fn the_first_control_plane_node_plans_and_applies_with_its_patches_then_restarts_the_new_kubelet() {
    let fixture = Fixture::new();
    let files = artifacts(fixture.kubeadm(0, "ok"));
    let release = release(&serve(files.clone()).await, &files);
    let host = fixture.host();
    assert_eq!(host.components_hash().await.unwrap(), None);
    host.upgrade_kubernetes(&upgrade(Role::FirstControlPlane, &release)).await.unwrap();

    let kubeadm = fixture.root.path().join("usr/local/bin/kubeadm").display().to_string();
    assert_eq!(
        fixture.kubeadm_calls(),
        [
            strings(&[&kubeadm, "upgrade", "plan", "v1.34.1"]),
            strings(&[&kubeadm, "upgrade", "apply", "--yes", "v1.34.1", "--patches", "/etc/kubernetes/patches"]),
        ]
    );
    // kubeadm ran with the patch in place and the old kubelet still installed.
    let saw = fixture.read("kubeadm.saw");
    assert_eq!(saw.matches("kubelet v1.33.5").count(), 2, "{saw}");
    assert!(saw.contains("kube-apiserver0+json.yaml") && !saw.contains("v1.34.1"), "{saw}");
    assert_eq!(fixture.installed(PATCH_PATH).as_deref(), Some(PATCH));
    // Then the kubelet was replaced and restarted.
    assert_eq!(
        fixture.read("restart.calls"),
        "daemon-reload\0\nkubelet v1.34.1\nrestart\0kubelet\0\nkubelet v1.34.1\n"
    );
    assert_eq!(fixture.installed("/usr/local/bin/kubectl").as_deref(), Some(&b"kubectl v1.34.1"[..]));
    // The reported hash is the record's, which is the release's.
    let facts_hash = host.components_hash().await.unwrap().unwrap();
    assert_eq!(facts_hash.as_str(), release.hash.to_string());
}

#[tokio::test]
async fn other_nodes_run_upgrade_node() {
    let fixture = Fixture::new();
    let files = artifacts(fixture.kubeadm(0, "ok"));
    let release = release(&serve(files.clone()).await, &files);
    fixture.host().upgrade_kubernetes(&upgrade(Role::Worker, &release)).await.unwrap();
    let kubeadm = fixture.root.path().join("usr/local/bin/kubeadm").display().to_string();
    assert_eq!(
        fixture.kubeadm_calls(),
        [strings(&[&kubeadm, "upgrade", "node", "--patches", "/etc/kubernetes/patches"])]
    );
}

#[tokio::test]
async fn a_hash_mismatch_installs_nothing_and_runs_nothing() {
    let fixture = Fixture::new();
    let files = artifacts(fixture.kubeadm(0, "ok"));
    let release = release(&serve(files.clone()).await, &files);
    // The server now serves a kubelet other than the one the ConfigMap names.
    let mut tampered = files.clone();
    tampered.insert("/kubelet".into(), b"kubelet v1.34.1 with a backdoor".to_vec());
    let base = serve(tampered).await;
    let mut upgrade = upgrade(Role::Worker, &release);
    for component in &mut upgrade.components {
        if let shared::components::Source::Download(url) = &mut component.source {
            *url = format!("{base}{}", &url[url.rfind('/').unwrap()..]);
        }
    }
    let host = fixture.host();
    let error = host.upgrade_kubernetes(&upgrade).await.unwrap_err();
    assert!(matches!(error, HostError::Install(_)) && !error.is_retryable(), "{error}");
    assert!(error.to_string().contains("nothing was installed"), "{error}");
    assert!(fixture.kubeadm_calls().is_empty() && fixture.read("restart.calls").is_empty());
    assert_eq!(fixture.installed("/usr/local/bin/kubeadm"), None);
    assert_eq!(fixture.installed(PATCH_PATH), None);
    assert_eq!(fixture.installed("/usr/local/bin/kubelet").as_deref(), Some(&b"kubelet v1.33.5"[..]));
    assert_eq!(host.components_hash().await.unwrap(), None);
}

#[tokio::test]
async fn a_failing_kubeadm_is_reported_with_its_output_and_the_kubelet_is_not_replaced() {
    let fixture = Fixture::new();
    let files = artifacts(fixture.kubeadm(3, "error execution phase preflight: etcd is unhealthy"));
    let release = release(&serve(files.clone()).await, &files);
    let host = fixture.host();
    let error = host.upgrade_kubernetes(&upgrade(Role::FirstControlPlane, &release)).await.unwrap_err();
    let message = error.to_string();
    assert!(message.contains("exited with status 3"), "{message}");
    assert!(message.contains("etcd is unhealthy"), "{message}");
    assert_eq!(fixture.kubeadm_calls().len(), 1, "apply does not run after plan failed");
    assert!(fixture.read("restart.calls").is_empty());
    assert_eq!(fixture.installed("/usr/local/bin/kubelet").as_deref(), Some(&b"kubelet v1.33.5"[..]));
    assert_eq!(host.components_hash().await.unwrap(), None, "no record: the components are not all installed");
}

#[tokio::test]
async fn without_a_kubernetes_section_the_step_is_refused() {
    let config = r#"{"check": {"argv": ["true"]}, "apply": {"argv": ["true"]}, "reboot": {"argv": ["true"]}}"#;
    let host = CommandHost::new(CommandConfig::from_json(config, Path::new("t.json")).unwrap());
    let release = Release {
        name: "x".into(),
        cluster_version: "v1.34.1".parse().unwrap(),
        components: Vec::new(),
        hash: Sha256::of(b""),
    };
    let error = host.upgrade_kubernetes(&upgrade(Role::Worker, &release)).await.unwrap_err();
    assert!(error.to_string().contains("has no kubernetes section"), "{error}");
}

#[tokio::test]
async fn an_unreachable_artifact_server_is_a_transient_error_and_installs_nothing() {
    let fixture = Fixture::new();
    let files = artifacts(fixture.kubeadm(0, "ok"));
    let release = release(&serve(files.clone()).await, &files);
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let mut upgrade = upgrade(Role::Worker, &release);
    for component in &mut upgrade.components {
        if let shared::components::Source::Download(url) = &mut component.source {
            *url = format!("http://{closed}{}", &url[url.rfind('/').unwrap()..]);
        }
    }
    let error = fixture.host().upgrade_kubernetes(&upgrade).await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    assert!(fixture.kubeadm_calls().is_empty());
    assert_eq!(fixture.installed(PATCH_PATH), None);
}

#[tokio::test]
async fn an_upgrade_whose_component_urls_redirect_as_dl_k8s_io_does_completes() {
    let fixture = Fixture::new();
    let files = artifacts(fixture.kubeadm(0, "ok"));
    // The CDN serves the artifacts under another path; the origin only redirects there.
    let cdn_files: HashMap<String, Vec<u8>> =
        files.iter().map(|(path, body)| (format!("/release/v1.34.1/bin/linux/amd64{path}"), body.clone())).collect();
    let cdn = serve(cdn_files).await;
    let redirects: HashMap<String, Vec<u8>> = files
        .keys()
        .map(|path| (path.clone(), format!("REDIRECT {cdn}/release/v1.34.1/bin/linux/amd64{path}").into_bytes()))
        .collect();
    let release = release(&serve(redirects).await, &files);
    fixture.host().upgrade_kubernetes(&upgrade(Role::Worker, &release)).await.unwrap();
    assert_eq!(fixture.installed("/usr/local/bin/kubelet").as_deref(), Some(&b"kubelet v1.34.1"[..]));
    assert_eq!(fixture.kubeadm_calls().len(), 1);
}

/// Issue 29 item 4: behind a proxy (`HTTPS_PROXY`/`HTTP_PROXY`, here given to the host), every component of the
/// upgrade is downloaded through it and the upgrade completes.
#[tokio::test]
async fn an_upgrade_behind_a_proxy_downloads_through_it_and_completes() {
    let fixture = Fixture::new();
    let files = artifacts(fixture.kubeadm(0, "ok"));
    let base = serve(files.clone()).await;
    let release = release(&base, &files);
    let (proxy, seen) = crate::components::tests::proxy().await;
    let host = fixture.host().with_proxy(proxy, "");
    host.upgrade_kubernetes(&upgrade(Role::Worker, &release)).await.unwrap();
    assert_eq!(fixture.installed("/usr/local/bin/kubelet").as_deref(), Some(&b"kubelet v1.34.1"[..]));
    assert_eq!(fixture.kubeadm_calls().len(), 1);
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let asked: Vec<String> =
        ["kubeadm", "kubectl", "kubelet"].iter().map(|n| format!("GET {base}/{n} HTTP/1.1")).collect();
    assert_eq!(seen, asked, "every download went through the proxy");
}

/// Issue 32: what `intent=fetch` fetched is installed by the later upgrade with the artifact server gone, and a
/// discard deletes it (the same upgrade then needs the server again).
#[tokio::test]
async fn components_fetched_ahead_are_installed_without_the_artifact_server_until_discarded() {
    let fixture = Fixture::new();
    let files = artifacts(fixture.kubeadm(0, "ok"));
    let served = release(&serve(files.clone()).await, &files);
    let host = fixture.host();
    let fetch = KubernetesFetch { version: served.cluster_version.clone(), components: served.components.clone() };
    host.fetch_kubernetes(&fetch).await.unwrap();
    assert_eq!(fixture.installed("/usr/local/bin/kubeadm"), None, "a fetch installs nothing");
    assert_eq!(host.components_hash().await.unwrap(), None);
    // The same components (same hashes) from a server that is gone: only the cache can serve them.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let unreachable = release(&format!("http://{closed}"), &files);
    host.upgrade_kubernetes(&upgrade(Role::Worker, &unreachable)).await.unwrap();
    assert_eq!(fixture.installed("/usr/local/bin/kubectl").as_deref(), Some(&b"kubectl v1.34.1"[..]));
    host.discard_fetched().await.unwrap();
    assert!(!fixture.root.path().join("var/lib/update-operator/fetched").exists());
    let error = host.upgrade_kubernetes(&upgrade(Role::Worker, &unreachable)).await.unwrap_err();
    assert!(error.is_retryable(), "a download that failed: {error}");
}
