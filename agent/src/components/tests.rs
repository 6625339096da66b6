use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A plain HTTP/1.1 server on loopback answering GET paths from `files` (404 otherwise), one request per
/// connection. Returns its base URL.
pub(crate) async fn serve(files: HashMap<String, Vec<u8>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let files = Arc::new(files);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let files = files.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&request);
                let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (status, body) = match files.get(&path) {
                    Some(body) => ("200 OK", body.clone()),
                    None => ("404 Not Found", b"not found".to_vec()),
                };
                // A body `REDIRECT <location>` answers 302 with that Location, as dl.k8s.io and
                // GitHub's release downloads do.
                let (status, location, body) = match body.strip_prefix(b"REDIRECT ") {
                    Some(location) => {
                        ("302 Found", format!("Location: {}\r\n", String::from_utf8_lossy(location)), Vec::new())
                    }
                    None => (status, String::new(), body),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\n{location}Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(&body).await;
            });
        }
    });
    base
}

fn download(url: String, content: &[u8], path: &str) -> VerifiedComponent {
    VerifiedComponent {
        source: Source::Download(url),
        hash: Sha256::of(content),
        install_path: path.into(),
        extract: false,
    }
}

fn tarball(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (name, content) in entries {
        let mut header = tar::Header::new_gnu();
        // Written raw so that tests can put names tar::Builder refuses (`..`, absolute) into an archive.
        let bytes = name.as_bytes();
        header.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
        header.set_size(content.len() as u64);
        header.set_mode(0o755);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder.append(&header, *content).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

const RECORD: &str = "/var/lib/update-operator/components.json";

#[tokio::test]
async fn components_are_verified_then_installed_and_recorded() {
    let root = tempfile::tempdir().unwrap();
    let archive = tarball(&[("bridge", b"bridge plugin"), ("./sub/host-local", b"host-local plugin")]);
    let base = serve(HashMap::from([
        ("/kubeadm".to_owned(), b"kubeadm v1.34.1".to_vec()),
        ("/cni.tgz".to_owned(), archive.clone()),
    ]))
    .await;
    // An old kubeadm is replaced.
    std::fs::create_dir_all(root.path().join("usr/local/bin")).unwrap();
    std::fs::write(root.path().join("usr/local/bin/kubeadm"), b"kubeadm v1.33.2").unwrap();
    let components = vec![
        download(format!("{base}/kubeadm"), b"kubeadm v1.34.1", "/usr/local/bin/kubeadm"),
        VerifiedComponent { extract: true, ..download(format!("{base}/cni.tgz"), &archive, "/opt/cni/bin") },
        VerifiedComponent {
            source: Source::Inline(b"patch".to_vec()),
            hash: Sha256::of(b"patch"),
            install_path: "/etc/kubernetes/patches/kube-apiserver0+strategic.yaml".into(),
            extract: false,
        },
    ];
    let installer = Installer::new(root.path(), RECORD).unwrap();
    assert_eq!(installer.installed().unwrap(), None);
    let record = installer.install(&components).await.unwrap();
    let kubeadm = root.path().join("usr/local/bin/kubeadm");
    assert_eq!(std::fs::read(&kubeadm).unwrap(), b"kubeadm v1.34.1");
    assert_eq!(std::fs::metadata(&kubeadm).unwrap().permissions().mode() & 0o777, 0o755);
    assert_eq!(std::fs::read(root.path().join("opt/cni/bin/bridge")).unwrap(), b"bridge plugin");
    assert_eq!(std::fs::read(root.path().join("opt/cni/bin/sub/host-local")).unwrap(), b"host-local plugin");
    assert_eq!(
        std::fs::read(root.path().join("etc/kubernetes/patches/kube-apiserver0+strategic.yaml")).unwrap(),
        b"patch"
    );
    let hashes: Vec<String> = components.iter().map(|c| c.hash.to_string()).collect();
    assert_eq!(record.hash, components_hash(hashes.iter().map(String::as_str)).to_string());
    assert_eq!(installer.installed().unwrap(), Some(record));
    // No temporary file is left behind.
    assert!(files(root.path()).iter().all(|f| !f.contains(".tmp") && !f.contains(".d/")), "{:?}", files(root.path()));
    // Installing the same again is harmless.
    installer.install(&components).await.unwrap();
}

#[tokio::test]
async fn a_hash_mismatch_installs_nothing_even_of_the_components_that_verified() {
    let root = tempfile::tempdir().unwrap();
    let base = serve(HashMap::from([
        ("/kubeadm".to_owned(), b"kubeadm v1.34.1".to_vec()),
        ("/kubelet".to_owned(), b"a tampered kubelet".to_vec()),
    ]))
    .await;
    let components = vec![
        download(format!("{base}/kubeadm"), b"kubeadm v1.34.1", "/usr/local/bin/kubeadm"),
        download(format!("{base}/kubelet"), b"kubelet v1.34.1", "/usr/local/bin/kubelet"),
    ];
    let installer = Installer::new(root.path(), RECORD).unwrap();
    let error = installer.install(&components).await.unwrap_err();
    assert!(matches!(error, InstallError::HashMismatch { .. }), "{error}");
    assert!(error.to_string().contains("/kubelet") && error.to_string().contains("nothing was installed"), "{error}");
    assert_eq!(files(root.path()), Vec::<String>::new());
    assert_eq!(installer.installed().unwrap(), None);
}

#[tokio::test]
async fn unreachable_missing_and_oversized_downloads_fail_cleanly() {
    let root = tempfile::tempdir().unwrap();
    let base = serve(HashMap::from([("/big".to_owned(), vec![7u8; 4096])])).await;
    let installer = Installer::new(root.path(), RECORD).unwrap().with_limits(1024, Duration::from_secs(30));
    let missing = installer.install(&[download(format!("{base}/nope"), b"x", "/usr/local/bin/x")]).await.unwrap_err();
    assert!(missing.to_string().contains("404"), "{missing}");
    let big =
        installer.install(&[download(format!("{base}/big"), &[7u8; 4096], "/usr/local/bin/x")]).await.unwrap_err();
    assert!(matches!(big, InstallError::TooLarge { .. }), "{big}");
    // A port nothing listens on.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    let unreachable =
        installer.install(&[download(format!("http://{closed}/x"), b"x", "/usr/local/bin/x")]).await.unwrap_err();
    assert!(matches!(unreachable, InstallError::Download { .. }), "{unreachable}");
    assert!(files(root.path()).iter().all(|f| !f.contains(".tmp")), "{:?}", files(root.path()));
}

#[tokio::test]
async fn archive_entries_that_escape_their_directory_or_are_links_are_refused() {
    for bad in ["../evil", "/etc/evil", "ok/../../evil"] {
        let root = tempfile::tempdir().unwrap();
        let archive = tarball(&[("fine", b"fine"), (bad, b"evil")]);
        let base = serve(HashMap::from([("/a.tgz".to_owned(), archive.clone())])).await;
        let component =
            VerifiedComponent { extract: true, ..download(format!("{base}/a.tgz"), &archive, "/opt/cni/bin") };
        let error = Installer::new(root.path(), RECORD).unwrap().install(&[component]).await.unwrap_err();
        assert!(error.to_string().contains("outside its directory"), "{bad}: {error}");
        assert_eq!(files(root.path()), Vec::<String>::new(), "{bad}");
    }
    // A symbolic link is refused too.
    let root = tempfile::tempdir().unwrap();
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Symlink);
    header.set_size(0);
    builder.append_link(&mut header, "link", "/etc/shadow").unwrap();
    let archive = builder.into_inner().unwrap();
    let base = serve(HashMap::from([("/a.tar".to_owned(), archive.clone())])).await;
    let component = VerifiedComponent { extract: true, ..download(format!("{base}/a.tar"), &archive, "/opt/cni/bin") };
    let error = Installer::new(root.path(), RECORD).unwrap().install(&[component]).await.unwrap_err();
    assert!(error.to_string().contains("not a regular file"), "{error}");
    assert_eq!(files(root.path()), Vec::<String>::new());
}

#[tokio::test]
async fn a_tampered_record_is_an_error_not_a_hash() {
    let root = tempfile::tempdir().unwrap();
    let installer = Installer::new(root.path(), RECORD).unwrap();
    let path = root.path().join(RECORD.trim_start_matches('/'));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, br#"{"componentHashes": ["sha256:00"], "installPaths": ["/x"], "hash": "sha256:11"}"#)
        .unwrap();
    assert!(installer.installed().unwrap_err().to_string().contains("does not match"));
    std::fs::write(&path, b"not json").unwrap();
    assert!(matches!(installer.installed(), Err(InstallError::Record { .. })));
}

fn redirect(location: &str) -> Vec<u8> {
    format!("REDIRECT {location}").into_bytes()
}

#[tokio::test]
async fn downloads_follow_redirects_as_dl_k8s_io_and_github_releases_answer() {
    let root = tempfile::tempdir().unwrap();
    // The CDN and the object store: the artifacts, one behind a relative redirect of its own.
    let cdn = serve(HashMap::from([
        ("/release/v1.34.1/bin/linux/amd64/kubeadm".to_owned(), b"kubeadm v1.34.1".to_vec()),
        (
            "/moved/cni.tgz".to_owned(),
            redirect("/assets/cni.tgz?X-Amz-Signature=abc&response-content-disposition=attachment"),
        ),
        (
            "/assets/cni.tgz?X-Amz-Signature=abc&response-content-disposition=attachment".to_owned(),
            tarball(&[("bridge", b"bridge plugin")]),
        ),
    ]))
    .await;
    // dl.k8s.io and github.com: redirects to absolute URLs of other hosts.
    let origin = serve(HashMap::from([
        (
            "/v1.34.1/bin/linux/amd64/kubeadm".to_owned(),
            redirect(&format!("{cdn}/release/v1.34.1/bin/linux/amd64/kubeadm")),
        ),
        (
            "/containernetworking/plugins/releases/download/v1.5.0/cni.tgz".to_owned(),
            redirect(&format!("{cdn}/moved/cni.tgz")),
        ),
    ]))
    .await;
    let archive = tarball(&[("bridge", b"bridge plugin")]);
    let components = vec![
        download(format!("{origin}/v1.34.1/bin/linux/amd64/kubeadm"), b"kubeadm v1.34.1", "/usr/local/bin/kubeadm"),
        VerifiedComponent {
            extract: true,
            ..download(
                format!("{origin}/containernetworking/plugins/releases/download/v1.5.0/cni.tgz"),
                &archive,
                "/opt/cni/bin",
            )
        },
    ];
    let installer = Installer::new(root.path(), RECORD).unwrap().with_proxies(Matcher::builder().build()).unwrap();
    installer.install(&components).await.unwrap();
    assert_eq!(std::fs::read(root.path().join("usr/local/bin/kubeadm")).unwrap(), b"kubeadm v1.34.1");
    assert_eq!(std::fs::read(root.path().join("opt/cni/bin/bridge")).unwrap(), b"bridge plugin");
}

#[tokio::test]
async fn redirects_are_bounded() {
    let root = tempfile::tempdir().unwrap();
    let base = serve(HashMap::from([("/loop".to_owned(), redirect("/loop"))])).await;
    let installer = Installer::new(root.path(), RECORD).unwrap().with_proxies(Matcher::builder().build()).unwrap();
    let error = installer.install(&[download(format!("{base}/loop"), b"x", "/usr/local/bin/x")]).await.unwrap_err();
    assert!(error.to_string().contains("more than 10 redirects"), "{error}");
    assert!(matches!(error, InstallError::Download { .. }));
}

/// An HTTP proxy on loopback: forwards requests in absolute form to their origin, refuses CONNECT
/// (403); records every request line. Returns its URL and the record.
pub(crate) async fn proxy() -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request).to_string();
                let line = text.lines().next().unwrap_or_default().to_owned();
                seen.lock().unwrap().push(line.clone());
                let mut parts = line.split_whitespace();
                let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
                let Some(rest) = target.strip_prefix("http://").filter(|_| method == "GET") else {
                    let _ = socket.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n").await;
                    return;
                };
                let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let Ok(mut origin) = tokio::net::TcpStream::connect(authority).await else { return };
                let forwarded = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
                let _ = origin.write_all(forwarded.as_bytes()).await;
                let mut answer = Vec::new();
                let _ = origin.read_to_end(&mut answer).await;
                let _ = socket.write_all(&answer).await;
            });
        }
    });
    (url, record)
}

#[tokio::test]
async fn downloads_go_through_the_configured_proxy_unless_no_proxy_names_the_host() {
    let root = tempfile::tempdir().unwrap();
    let base = serve(HashMap::from([("/kubeadm".to_owned(), b"kubeadm v1.34.1".to_vec())])).await;
    let (proxy, seen) = proxy().await;
    let proxies = || Matcher::builder().http(proxy.clone()).https(proxy.clone());
    let component = download(format!("{base}/kubeadm"), b"kubeadm v1.34.1", "/usr/local/bin/kubeadm");

    // http: through the proxy, in absolute form.
    let installer = Installer::new(root.path(), RECORD).unwrap().with_proxies(proxies().build()).unwrap();
    installer.install(std::slice::from_ref(&component)).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), [format!("GET {base}/kubeadm HTTP/1.1")]);

    // https: a CONNECT tunnel (this proxy refuses it: the download fails, having asked).
    let https = download("https://dl.k8s.io.invalid/v1.34.1/kubeadm".into(), b"k", "/usr/local/bin/k");
    let error = installer.install(std::slice::from_ref(&https)).await.unwrap_err();
    assert!(matches!(error, InstallError::Download { .. }), "{error}");
    assert_eq!(seen.lock().unwrap().last().map(String::as_str), Some("CONNECT dl.k8s.io.invalid:443 HTTP/1.1"));

    // NO_PROXY: straight to the server.
    let before = seen.lock().unwrap().len();
    let direct = Installer::new(root.path(), RECORD).unwrap().with_proxies(proxies().no("127.0.0.1").build()).unwrap();
    direct.install(&[component]).await.unwrap();
    assert_eq!(seen.lock().unwrap().len(), before, "the proxy saw nothing");
}

/// Issue 27 item 3k: the agent runs on a single-threaded runtime, so an extraction run inline would stall its
/// reports and watches until it ended. The archive here is a named pipe that another task of the same runtime
/// feeds: the extraction can only finish if that task runs while the extraction is under way. No timing is
/// asserted: inline, the runtime's only thread would block in the extraction forever (the 60 s are a bound for
/// the test, not a measurement).
#[test]
fn an_extraction_leaves_the_single_threaded_runtime_free() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = dir.path().join("archive.tgz");
    let made = std::process::Command::new("mkfifo").arg(&pipe).status().unwrap();
    assert!(made.success(), "mkfifo: {made}");
    let archive = tarball(&[("bin/tool", b"tool v2"), ("lib/plugin", &[7u8; 256 * 1024])]);
    let out = dir.path().join("out");
    let (done, finished) = std::sync::mpsc::channel();
    let (feed_pipe, feed, extract_to) = (pipe.clone(), archive.clone(), out.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let result = runtime.block_on(async move {
            let feeder = tokio::spawn(async move {
                let mut writer = tokio::fs::OpenOptions::new().write(true).open(&feed_pipe).await?;
                writer.write_all(&feed).await?;
                writer.flush().await
            });
            let extracted = extract_in_background(pipe, extract_to, "/opt/tool".to_owned()).await;
            (extracted, feeder.await)
        });
        let _ = done.send(result);
    });
    let Ok((extracted, fed)) = finished.recv_timeout(Duration::from_secs(60)) else {
        // Unblock the stuck extraction so that its thread ends, then fail.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("archive.tgz"))
            .map(|mut w| w.write_all(&archive));
        panic!("the extraction did not let the runtime's other task feed its archive: it blocked the runtime's thread");
    };
    extracted.unwrap();
    fed.unwrap().unwrap();
    assert_eq!(std::fs::read(out.join("bin/tool")).unwrap(), b"tool v2");
    assert_eq!(std::fs::read(out.join("lib/plugin")).unwrap().len(), 256 * 1024);
}

/// Components installed with `install_where` stay when the rest is dropped unfinished; what was staged and not
/// installed is removed (on the blocking pool, so it is waited for here) and nothing is recorded.
#[tokio::test]
async fn dropping_a_preparation_removes_only_what_was_not_installed() {
    let root = tempfile::tempdir().unwrap();
    let inline = |content: &[u8], path: &str| VerifiedComponent {
        source: Source::Inline(content.to_vec()),
        hash: Sha256::of(content),
        install_path: path.into(),
        extract: false,
    };
    let archive = tarball(&[("bridge", b"bridge plugin")]);
    let components = vec![
        inline(b"kubeadm v1.34.1", "/usr/local/bin/kubeadm"),
        inline(b"kubelet v1.34.1", "/usr/local/bin/kubelet"),
        VerifiedComponent { extract: true, ..inline(&archive, "/opt/cni/bin") },
    ];
    let installer = Installer::new(root.path(), RECORD).unwrap();
    let mut prepared = installer.prepare(&components).await.unwrap();
    prepared.install_where(|c| c.install_path.ends_with("kubeadm")).await.unwrap();
    drop(prepared);
    let mut left = files(root.path());
    for _ in 0..600 {
        if left == ["usr/local/bin/kubeadm"] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = files(root.path());
    }
    assert_eq!(left, ["usr/local/bin/kubeadm"]);
    assert_eq!(installer.installed().unwrap(), None);
}
