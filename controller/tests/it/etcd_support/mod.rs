//! A real etcd for tests (Debian's `etcd-server`): clusters of members on loopback ports in a temporary directory,
//! with TLS as kubeadm sets it up (client certificates required). Shared by the controller's etcd tests and the
//! dev cluster's replacement tests (`#[path]`), so that both start etcd the same way.
#![allow(dead_code)]

use controller::etcd::{EtcdClient, EtcdConfig, TlsFiles};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// How long an etcd cluster may take to start (or a change to show) on a slow, shared machine.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// A file of the test PKI (`controller/tests/etcd-pki`), from the controller's or another workspace crate.
pub fn pki(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../controller/tests/etcd-pki").join(file)
}

/// Whether an `etcd` binary runs here; panics when it does not and the run requires it.
pub fn etcd_available(test: &str) -> bool {
    let found = std::process::Command::new("etcd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    let required = std::env::var("UPDATE_OPERATOR_REQUIRE_ETCD").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    match (found, required) {
        (true, _) => true,
        (false, true) => panic!(
            "{test}: no `etcd` binary on PATH, and this run requires it (UPDATE_OPERATOR_REQUIRE_ETCD=1 or CI): \
             install Debian's etcd-server"
        ),
        (false, false) => {
            eprintln!("SKIPPED {test}: no `etcd` binary on PATH (install Debian's etcd-server to run it)");
            false
        }
    }
}

/// A member process.
pub struct Node {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    child: Option<Child>,
}

/// An etcd cluster of member processes; dropping it kills them.
pub struct EtcdCluster {
    pub members: Vec<Node>,
    tls: bool,
    _dir: tempfile::TempDir,
}

pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port")).collect();
    listeners.iter().map(|l| l.local_addr().expect("an address").port()).collect()
}

impl EtcdCluster {
    /// Starts `size` members and waits until each is healthy; tries again on new ports if one does not come up
    /// (another process may have taken a port between choosing and binding it).
    pub async fn start(size: usize, tls: bool) -> EtcdCluster {
        let names: Vec<String> = (1..=size).map(|i| format!("m{i}")).collect();
        EtcdCluster::start_named(&names, tls).await
    }

    /// [`EtcdCluster::start`] with members of these names (a node's member is named after the node).
    pub async fn start_named(names: &[String], tls: bool) -> EtcdCluster {
        let size = names.len();
        for attempt in 1..=3 {
            let cluster = EtcdCluster::spawn(names, tls);
            if cluster.wait_healthy().await {
                return cluster;
            }
            eprintln!("etcd cluster attempt {attempt} did not come up:\n{}", cluster.logs());
        }
        panic!("no etcd cluster of {size} came up in 3 attempts");
    }

    fn spawn(names: &[String], tls: bool) -> EtcdCluster {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let scheme = if tls { "https" } else { "http" };
        let ports = free_ports(2 * names.len());
        let peer = |i: usize| format!("{scheme}://127.0.0.1:{}", ports[2 * i + 1]);
        let initial: Vec<String> = names.iter().enumerate().map(|(i, n)| format!("{n}={}", peer(i))).collect();
        let mut cluster = EtcdCluster { members: Vec::new(), tls, _dir: dir };
        for (i, name) in names.iter().enumerate() {
            let client_url = format!("{scheme}://127.0.0.1:{}", ports[2 * i]);
            cluster.spawn_member(name, client_url, peer(i), &initial.join(","), "new");
        }
        cluster
    }

    /// Starts one member process; `state` is `new` (a new cluster) or `existing` (joining one).
    fn spawn_member(&mut self, name: &str, client_url: String, peer_url: String, initial: &str, state: &str) {
        let dir = self._dir.path();
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("a log file");
        let mut command = Command::new("etcd");
        command
            .arg("--name")
            .arg(name)
            .arg("--data-dir")
            .arg(dir.join(name))
            .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url, "--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", initial, "--initial-cluster-state", state])
            .args(["--initial-cluster-token", "update-operator-test"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        if self.tls {
            let (cert, key, ca) = (pki("server.crt"), pki("server.key"), pki("ca.crt"));
            command
                .arg("--cert-file")
                .arg(&cert)
                .arg("--key-file")
                .arg(&key)
                .arg("--trusted-ca-file")
                .arg(&ca)
                .arg("--client-cert-auth")
                .arg("--peer-cert-file")
                .arg(&cert)
                .arg("--peer-key-file")
                .arg(&key)
                .arg("--peer-trusted-ca-file")
                .arg(&ca)
                .arg("--peer-client-cert-auth");
        }
        let child = command.spawn().expect("etcd starts");
        self.members.push(Node { name: name.to_owned(), client_url, peer_url, child: Some(child) });
    }

    /// A new member `name` joins, as kubeadm joins a control-plane node's etcd: `etcdctl member add` (Debian's
    /// `etcd-client`) on a member that answers, then the member's process started with the existing cluster.
    /// Returns once the process is started (it becomes a healthy voter shortly after).
    pub async fn add_member(&mut self, name: &str) {
        let scheme = if self.tls { "https" } else { "http" };
        let ports = free_ports(2);
        let (client_url, peer_url) =
            (format!("{scheme}://127.0.0.1:{}", ports[0]), format!("{scheme}://127.0.0.1:{}", ports[1]));
        let client = self.client();
        let endpoints = client.endpoints().join(",");
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let mut etcdctl = Command::new("etcdctl");
            etcdctl.env("ETCDCTL_API", "3").args(["--endpoints", &endpoints, "member", "add", name]);
            etcdctl.arg(format!("--peer-urls={peer_url}"));
            if self.tls {
                etcdctl.arg("--cacert").arg(pki("ca.crt")).arg("--cert").arg(pki("client.crt"));
                etcdctl.arg("--key").arg(pki("client.key"));
            }
            let output = etcdctl.output().await.expect("etcdctl runs (Debian's etcd-client)");
            if output.status.success() {
                break;
            }
            // etcd refuses a member change until its members have been connected for a while.
            let error = String::from_utf8_lossy(&output.stderr).into_owned();
            assert!(tokio::time::Instant::now() < deadline, "etcdctl member add {name}: {error}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let members = client.members().await.expect("etcd answers after the member was added");
        let initial: Vec<String> = members
            .iter()
            .filter_map(|m| {
                let peer = m.peer_urls.first()?;
                let member = if m.name.is_empty() { name } else { m.name.as_str() };
                Some(format!("{member}={peer}"))
            })
            .collect();
        self.spawn_member(name, client_url, peer_url, &initial.join(","), "existing");
    }

    pub fn logs(&self) -> String {
        let mut text = String::new();
        for member in &self.members {
            let log =
                std::fs::read_to_string(self._dir.path().join(format!("{}.log", member.name))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            text.push_str(&format!("--- {}\n{}\n", member.name, tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
        }
        text
    }

    pub fn config(&self) -> EtcdConfig {
        EtcdConfig {
            endpoints: self.members.iter().map(|m| m.client_url.clone()).collect(),
            tls: self.tls.then(|| TlsFiles {
                ca: pki("ca.crt"),
                cert: Some(pki("client.crt")),
                key: Some(pki("client.key")),
            }),
            timeout: Duration::from_secs(10),
        }
    }

    pub fn client(&self) -> EtcdClient {
        EtcdClient::new(&self.config()).expect("the client configuration is valid")
    }

    /// Waits until every member process answers healthy; false after [`PATIENCE`].
    pub async fn wait_healthy(&self) -> bool {
        let client = self.client();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while tokio::time::Instant::now() < deadline {
            if let Ok(members) = client.members().await
                && members.len() == self.members.len()
            {
                let mut healthy = 0;
                for member in &members {
                    healthy += usize::from(client.is_healthy(member).await);
                }
                if healthy == members.len() {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    pub async fn kill(&mut self, name: &str) {
        let member = self.members.iter_mut().find(|m| m.name == name).expect("a member of that name");
        if let Some(mut child) = member.child.take() {
            child.kill().await.expect("the member is killed");
        }
    }
}
