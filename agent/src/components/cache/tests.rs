//! The fetch cache through the installer: components fetched ahead are installed without a download, and
//! nothing unverified is ever used or left behind. Downloads go through the recording proxy of the installer's
//! tests, so every request the installer makes is seen.

use std::sync::{Arc, Mutex};

use shared::components::{Sha256, Source, VerifiedComponent};

use crate::components::tests::{proxy, serve};
use crate::components::{Fetched, InstallError, Installer, Matcher};

const RECORD: &str = "/var/lib/update-operator/components.json";

/// A server of `files`, an installer under a fresh root downloading through a recording proxy, and the record.
struct Fixture {
    root: tempfile::TempDir,
    base: String,
    installer: Installer,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Fixture {
    async fn new(files: &[(&str, &[u8])]) -> Self {
        let root = tempfile::tempdir().unwrap();
        let base = serve(files.iter().map(|(path, body)| ((*path).to_owned(), body.to_vec())).collect()).await;
        let (proxy, seen) = proxy().await;
        let installer = Installer::new(root.path(), RECORD)
            .unwrap()
            .with_proxies(Matcher::builder().http(proxy.clone()).build())
            .unwrap();
        Fixture { root, base, installer, seen }
    }

    fn download(&self, path: &str, content: &[u8], install_path: &str) -> VerifiedComponent {
        VerifiedComponent {
            source: Source::Download(format!("{}{path}", self.base)),
            hash: Sha256::of(content),
            install_path: install_path.into(),
            extract: false,
        }
    }

    /// How many downloads the proxy saw.
    fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The names in the cache directory, sorted; empty when it does not exist.
    fn cached(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.installer.cache_path()) else { return Vec::new() };
        let mut names: Vec<String> = entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    fn installed(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.root.path().join(path.trim_start_matches('/'))).ok()
    }
}

fn sorted_hex(contents: &[&[u8]]) -> Vec<String> {
    let mut names: Vec<String> = contents.iter().map(|c| Sha256::of(c).hex()).collect();
    names.sort();
    names
}

fn inline(content: &[u8], path: &str) -> VerifiedComponent {
    VerifiedComponent {
        source: Source::Inline(content.to_vec()),
        hash: Sha256::of(content),
        install_path: path.into(),
        extract: false,
    }
}

#[tokio::test]
async fn fetched_components_are_installed_without_any_download() {
    let f = Fixture::new(&[("/kubeadm", b"kubeadm v1.34.1"), ("/kubelet", b"kubelet v1.34.1")]).await;
    let components = vec![
        f.download("/kubeadm", b"kubeadm v1.34.1", "/usr/local/bin/kubeadm"),
        f.download("/kubelet", b"kubelet v1.34.1", "/usr/local/bin/kubelet"),
        inline(b"patch", "/etc/kubernetes/patches/kube-apiserver0+strategic.yaml"),
    ];
    let fetched = f.installer.fetch(&components).await.unwrap();
    assert_eq!(fetched, Fetched { downloaded: 2, cached: 0 });
    assert_eq!(f.requests(), 2);
    // Named by their hashes, with their content; nothing installed, nothing recorded.
    assert_eq!(f.cached(), sorted_hex(&[b"kubeadm v1.34.1", b"kubelet v1.34.1"]));
    let kubeadm = f.installer.cache_path().join(Sha256::of(b"kubeadm v1.34.1").hex());
    assert_eq!(std::fs::read(kubeadm).unwrap(), b"kubeadm v1.34.1");
    assert_eq!(f.installed("/usr/local/bin/kubeadm"), None);
    assert_eq!(f.installer.installed().unwrap(), None);
    // Fetching again verifies what is there and downloads nothing.
    assert_eq!(f.installer.fetch(&components).await.unwrap(), Fetched { downloaded: 0, cached: 2 });
    assert_eq!(f.requests(), 2);
    let prepared = f.installer.prepare(&components).await.unwrap();
    assert_eq!(prepared.downloaded(), 0);
    prepared.finish().await.unwrap();
    assert_eq!(f.requests(), 2, "the installation downloaded nothing");
    assert_eq!(f.installed("/usr/local/bin/kubeadm").as_deref(), Some(&b"kubeadm v1.34.1"[..]));
    assert_eq!(f.installed("/usr/local/bin/kubelet").as_deref(), Some(&b"kubelet v1.34.1"[..]));
    assert!(f.installer.installed().unwrap().is_some());
}

#[tokio::test]
async fn a_corrupted_fetched_file_is_deleted_and_the_component_downloaded_instead() {
    let f = Fixture::new(&[("/kubeadm", b"kubeadm v1.34.1"), ("/kubelet", b"kubelet v1.34.1")]).await;
    let components = vec![
        f.download("/kubeadm", b"kubeadm v1.34.1", "/usr/local/bin/kubeadm"),
        f.download("/kubelet", b"kubelet v1.34.1", "/usr/local/bin/kubelet"),
    ];
    f.installer.fetch(&components).await.unwrap();
    let kubelet = f.installer.cache_path().join(Sha256::of(b"kubelet v1.34.1").hex());
    std::fs::write(&kubelet, b"a tampered kubelet").unwrap();
    let before = f.requests();
    let prepared = f.installer.prepare(&components).await.unwrap();
    assert_eq!(prepared.downloaded(), 1);
    prepared.finish().await.unwrap();
    assert_eq!(f.requests(), before + 1);
    assert!(f.seen.lock().unwrap().last().unwrap().contains("/kubelet"));
    assert_eq!(f.installed("/usr/local/bin/kubelet").as_deref(), Some(&b"kubelet v1.34.1"[..]));
    assert!(!kubelet.exists(), "the corrupted file is gone");
    assert_eq!(f.cached(), sorted_hex(&[b"kubeadm v1.34.1"]));
}

#[tokio::test]
async fn a_corrupted_fetched_file_is_never_installed_even_when_the_download_fails_too() {
    let f = Fixture::new(&[("/kubelet", b"another tampered kubelet")]).await;
    let component = f.download("/kubelet", b"kubelet v1.34.1", "/usr/local/bin/kubelet");
    let cache = f.installer.cache_path();
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join(component.hash.hex()), b"a tampered kubelet").unwrap();
    let error = f.installer.install(std::slice::from_ref(&component)).await.unwrap_err();
    assert!(matches!(error, InstallError::HashMismatch { .. }), "{error}");
    assert_eq!(f.installed("/usr/local/bin/kubelet"), None);
    assert_eq!(f.cached(), Vec::<String>::new());
}

#[tokio::test]
async fn discarding_empties_the_cache_and_the_next_installation_downloads() {
    let f = Fixture::new(&[("/kubeadm", b"kubeadm v1.34.1")]).await;
    let components = vec![f.download("/kubeadm", b"kubeadm v1.34.1", "/usr/local/bin/kubeadm")];
    f.installer.fetch(&components).await.unwrap();
    assert_eq!(f.cached().len(), 1);
    f.installer.discard_fetched().await.unwrap();
    assert!(!f.installer.cache_path().exists());
    f.installer.discard_fetched().await.unwrap();
    let prepared = f.installer.prepare(&components).await.unwrap();
    assert_eq!((prepared.downloaded(), f.requests()), (1, 2));
}

#[tokio::test]
async fn a_failed_fetch_leaves_nothing_of_the_component_that_failed() {
    let f = Fixture::new(&[("/kubeadm", b"kubeadm v1.34.1"), ("/kubelet", b"a tampered kubelet")]).await;
    let kubeadm = f.download("/kubeadm", b"kubeadm v1.34.1", "/usr/local/bin/kubeadm");
    for (failing, expected) in [
        (f.download("/kubelet", b"kubelet v1.34.1", "/usr/local/bin/kubelet"), "has sha256:"),
        (f.download("/missing", b"kubectl", "/usr/local/bin/kubectl"), "404"),
    ] {
        let error = f.installer.fetch(&[kubeadm.clone(), failing]).await.unwrap_err();
        assert!(error.to_string().contains(expected), "{error}");
        // The component verified before the failure stays (a retry need not download it); no temporary file.
        assert_eq!(f.cached(), sorted_hex(&[b"kubeadm v1.34.1"]));
    }
    let oversized = Installer::new(f.root.path(), RECORD)
        .unwrap()
        .with_proxies(Matcher::builder().build())
        .unwrap()
        .with_limits(4, std::time::Duration::from_secs(30));
    let kubelet = f.download("/kubelet", b"a tampered kubelet", "/usr/local/bin/kubelet");
    let error = oversized.fetch(&[kubelet]).await.unwrap_err();
    assert!(matches!(error, InstallError::TooLarge { .. }), "{error}");
    assert_eq!(f.cached(), Vec::<String>::new(), "a new set replaced the old, and the failed one left nothing");
}

#[tokio::test]
async fn a_new_fetch_replaces_the_set_fetched_before_and_leftovers_of_an_interrupted_one() {
    let f = Fixture::new(&[("/v1/kubeadm", b"kubeadm v1.34.1"), ("/v2/kubeadm", b"kubeadm v1.35.0")]).await;
    f.installer.fetch(&[f.download("/v1/kubeadm", b"kubeadm v1.34.1", "/usr/local/bin/kubeadm")]).await.unwrap();
    std::fs::write(f.installer.cache_path().join(".kubelet.update-operator-1-1.tmp"), b"half a kubel").unwrap();
    f.installer.fetch(&[f.download("/v2/kubeadm", b"kubeadm v1.35.0", "/usr/local/bin/kubeadm")]).await.unwrap();
    assert_eq!(f.cached(), sorted_hex(&[b"kubeadm v1.35.0"]));
}
