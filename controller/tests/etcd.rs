//! etcd member removal against a real etcd (Debian's `etcd-server`): clusters of members on loopback ports in a
//! temporary directory, with TLS as kubeadm sets it up (client certificates required).
//!
//! Without an `etcd` binary on PATH these tests are skipped with a message, except where a run requires them
//! (`UPDATE_OPERATOR_REQUIRE_ETCD=1`, which `.ci/run` sets, or `CI` set): there its absence fails them.

use controller::etcd::{Error, EtcdClient, EtcdConfig, Member, Refusal, Removal, TlsFiles};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

/// How long an etcd cluster may take to start (or a change to show) on a slow, shared machine.
const PATIENCE: Duration = Duration::from_secs(90);

fn pki(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/etcd-pki").join(file)
}

/// Whether an `etcd` binary runs here; panics when it does not and the run requires it.
fn etcd_available(test: &str) -> bool {
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
struct Node {
    name: String,
    client_url: String,
    child: Option<Child>,
}

/// An etcd cluster of member processes; dropping it kills them.
struct EtcdCluster {
    members: Vec<Node>,
    tls: bool,
    _dir: tempfile::TempDir,
}

fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> =
        (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port")).collect();
    listeners.iter().map(|l| l.local_addr().expect("an address").port()).collect()
}

impl EtcdCluster {
    /// Starts `size` members and waits until each is healthy; tries again on new ports if one does not come up
    /// (another process may have taken a port between choosing and binding it).
    async fn start(size: usize, tls: bool) -> EtcdCluster {
        for attempt in 1..=3 {
            let cluster = EtcdCluster::spawn(size, tls);
            if cluster.wait_healthy().await {
                return cluster;
            }
            eprintln!("etcd cluster attempt {attempt} did not come up:\n{}", cluster.logs());
        }
        panic!("no etcd cluster of {size} came up in 3 attempts");
    }

    fn spawn(size: usize, tls: bool) -> EtcdCluster {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let scheme = if tls { "https" } else { "http" };
        let ports = free_ports(2 * size);
        let names: Vec<String> = (1..=size).map(|i| format!("m{i}")).collect();
        let peer = |i: usize| format!("{scheme}://127.0.0.1:{}", ports[2 * i + 1]);
        let initial: Vec<String> = names.iter().enumerate().map(|(i, n)| format!("{n}={}", peer(i))).collect();
        let mut members = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let client_url = format!("{scheme}://127.0.0.1:{}", ports[2 * i]);
            let log = std::fs::File::create(dir.path().join(format!("{name}.log"))).expect("a log file");
            let mut command = Command::new("etcd");
            command
                .arg("--name")
                .arg(name)
                .arg("--data-dir")
                .arg(dir.path().join(name))
                .args(["--listen-client-urls", &client_url, "--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer(i), "--initial-advertise-peer-urls", &peer(i)])
                .args(["--initial-cluster", &initial.join(","), "--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "update-operator-test"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .kill_on_drop(true);
            if tls {
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
            members.push(Node { name: name.clone(), client_url, child: Some(child) });
        }
        EtcdCluster { members, tls, _dir: dir }
    }

    fn logs(&self) -> String {
        let mut text = String::new();
        for member in &self.members {
            let log =
                std::fs::read_to_string(self._dir.path().join(format!("{}.log", member.name))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            text.push_str(&format!("--- {}\n{}\n", member.name, tail.into_iter().rev().collect::<Vec<_>>().join("\n")));
        }
        text
    }

    fn config(&self) -> EtcdConfig {
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

    fn client(&self) -> EtcdClient {
        EtcdClient::new(&self.config()).expect("the client configuration is valid")
    }

    /// Waits until every member process answers healthy; false after [`PATIENCE`].
    async fn wait_healthy(&self) -> bool {
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

    async fn kill(&mut self, name: &str) {
        let member = self.members.iter_mut().find(|m| m.name == name).expect("a member of that name");
        if let Some(mut child) = member.child.take() {
            child.kill().await.expect("the member is killed");
        }
    }
}

/// Polls `client.members()` until `check` holds; panics after [`PATIENCE`].
async fn members_until(client: &EtcdClient, what: &str, check: impl Fn(&[Member]) -> bool) -> Vec<Member> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Ok(members) = client.members().await
            && check(&members)
        {
            return members;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Removes the node's member as the controller does: requeued while the error is retryable. etcd itself refuses
/// removals (503 `unhealthy cluster`) until its members have been connected for 5 s (its strict reconfiguration
/// check), which a freshly started cluster has not.
async fn remove(client: &EtcdClient, node: &str) -> Result<Removal, Error> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match client.remove_node_member(node, &[]).await {
            Err(error) if error.is_retryable() && tokio::time::Instant::now() < deadline => {
                eprintln!("removing the member of {node}: {error}; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            result => return result,
        }
    }
}

fn names(members: &[Member]) -> Vec<&str> {
    let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_nodes_member_is_removed_over_tls_and_the_others_stay_healthy() {
    if !etcd_available("a_control_plane_nodes_member_is_removed_over_tls_and_the_others_stay_healthy") {
        return;
    }
    let mut cluster = EtcdCluster::start(3, true).await;
    let client = cluster.client();
    assert_eq!(names(&client.members().await.unwrap()), vec!["m1", "m2", "m3"]);

    // Every member listens on 127.0.0.1: by address alone the node's member cannot be told.
    let ambiguous = client.remove_node_member("some-node", &["127.0.0.1".to_owned()]).await;
    assert!(matches!(ambiguous, Err(Error::Ambiguous { .. })), "{ambiguous:?}");

    let removal = remove(&client, "m2").await.unwrap();
    assert!(matches!(removal, Removal::Removed { ref name, .. } if name == "m2"), "{removal:?}");
    let members = members_until(&client, "two members remain", |m| m.len() == 2).await;
    assert_eq!(names(&members), vec!["m1", "m3"]);
    // Healthy once they agree on a leader (the removed member may have led).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    for member in &members {
        while !client.is_healthy(member).await {
            assert!(tokio::time::Instant::now() < deadline, "{} is not healthy after the removal", member.name);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Idempotent: the member is gone.
    assert_eq!(client.remove_node_member("m2", &[]).await.unwrap(), Removal::AlreadyGone);

    // A client without a client certificate is turned away by etcd's client-cert-auth.
    let mut anonymous = cluster.config();
    anonymous.tls = Some(TlsFiles { ca: pki("ca.crt"), cert: None, key: None });
    let refused = EtcdClient::new(&anonymous).unwrap().members().await;
    assert!(matches!(refused, Err(Error::Unreachable(_))), "{refused:?}");

    // With m3 down, removing m1 would leave no healthy voter of the one that remains: refused, nothing removed.
    cluster.kill("m3").await;
    let refusal = client.remove_node_member("m1", &[]).await;
    assert!(
        matches!(refusal, Err(Error::Refused(Refusal::QuorumLoss { healthy: 0, remaining: 1, quorum: 1, .. }))),
        "{refusal:?}"
    );
    assert!(!refusal.as_ref().unwrap_err().is_retryable());
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_member_is_never_removed_and_dead_endpoints_are_skipped() {
    if !etcd_available("the_last_member_is_never_removed_and_dead_endpoints_are_skipped") {
        return;
    }
    let cluster = EtcdCluster::start(1, false).await;
    let dead = format!("http://127.0.0.1:{}", free_ports(1)[0]);
    let mut config = cluster.config();
    config.endpoints.insert(0, dead.clone());
    let client = EtcdClient::new(&config).unwrap();
    assert_eq!(names(&client.members().await.unwrap()), vec!["m1"], "the dead endpoint is skipped");

    let refusal = client.remove_node_member("m1", &[]).await;
    assert!(matches!(refusal, Err(Error::Refused(Refusal::LastMember { .. }))), "{refusal:?}");
    assert_eq!(names(&client.members().await.unwrap()), vec!["m1"]);
    // A node without a member: nothing to do.
    assert_eq!(client.remove_node_member("worker-0", &["10.9.9.9".to_owned()]).await.unwrap(), Removal::AlreadyGone);

    let nobody =
        EtcdClient::new(&EtcdConfig { endpoints: vec![dead], tls: None, timeout: Duration::from_secs(5) }).unwrap();
    let unreachable = nobody.members().await;
    assert!(matches!(unreachable, Err(ref e @ Error::Unreachable(_)) if e.is_retryable()), "{unreachable:?}");
}
