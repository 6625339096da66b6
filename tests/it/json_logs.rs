//! The binary's JSON logs, as a log pipeline reads them: a rollout on a dev cluster with the real
//! `update-operator` processes (one controller, one agent per node), and every line either mode
//! wrote is one JSON object in which no key appears twice.

use dev::cluster::{Cluster, ClusterConfig};
use kube::api::PostParams;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::json;
use shared::crd::NodeVersion;
use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A JSON value, refused if any object in it repeats a key (serde_json's `Value` keeps the last).
struct Strict;

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                return Err(de::Error::custom(format!("the key {key:?} appears twice")));
            }
            map.next_value::<Strict>()?;
        }
        Ok(Strict)
    }
}

/// A running `update-operator` whose stderr lines are collected.
struct Process {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

fn start(args: &[&str]) -> Process {
    let mut child = Command::new(env!("CARGO_BIN_EXE_update-operator"))
        .args(args)
        .args(["--log-format", "json", "--log-level", "info", "--metrics-addr", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .env_remove("UPDATE_OPERATOR_LOG_FORMAT")
        .env_remove("NODE_NAME")
        .env_remove("POD_NAME")
        .env_remove("POD_NAMESPACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let collected = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            collected.lock().unwrap().push(line);
        }
    });
    Process { child, lines, reader }
}

impl Process {
    /// Stops the process as Kubernetes does (SIGTERM) and returns its lines.
    fn stop(mut self) -> Vec<String> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.reader.join().unwrap();
        std::mem::take(&mut *self.lines.lock().unwrap())
    }
}

fn rolled_out(cluster: &Cluster, nodes: i32) -> bool {
    let version = cluster.store().api::<NodeVersion>().get(None, "constellation-version").ok();
    version.and_then(|v| v.status).is_some_and(|s| s.counts.up_to_date == nodes && s.in_flight.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_log_line_of_both_modes_has_each_key_once() {
    let cluster =
        Cluster::start(ClusterConfig { nodes: 3, control_planes: 1, ..ClusterConfig::default() }).await.unwrap();
    let kubeconfig = cluster.kubeconfig_path().to_str().unwrap().to_owned();
    let controller = start(&["controller", "--kubeconfig", &kubeconfig, "--identity", "logs-test"]);
    let agents: Vec<Process> = cluster
        .node_names()
        .iter()
        .map(|node| {
            start(&[
                "agent",
                "--kubeconfig",
                &kubeconfig,
                "--node-name",
                node,
                "--host-backend",
                "simulated",
                "--simulated-hosts-url",
                cluster.url(),
            ])
        })
        .collect();
    let version: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": "constellation-version"},
        "spec": {"image": "v2", "rollout": {"maxUnavailable": 1}}
    }))
    .unwrap();
    cluster.store().api::<NodeVersion>().create(None, &version, &PostParams::default()).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    while !rolled_out(&cluster, 3) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let finished = rolled_out(&cluster, 3);

    let mut by_mode = vec![("controller", controller.stop())];
    by_mode.extend(agents.into_iter().map(|a| ("agent", a.stop())));
    assert!(finished, "the rollout did not finish; the logs: {by_mode:#?}");
    for (mode, lines) in &by_mode {
        assert!(!lines.is_empty(), "the {mode} logged nothing");
        for line in lines {
            if let Err(error) = serde_json::from_str::<Strict>(line) {
                panic!("{mode}: {error}: {line}");
            }
        }
    }
    let all: Vec<serde_json::Value> =
        by_mode.iter().flat_map(|(_, lines)| lines).map(|l| serde_json::from_str(l).unwrap()).collect();
    let updated = all.iter().find(|v| v["message"] == "node updated").expect("no \"node updated\" line");
    assert!(updated["detail"].is_string() && updated["reason"].is_string(), "{updated}");
    assert!(all.iter().any(|v| v["message"] == "report written"), "no agent report logged");
    assert!(all.iter().any(|v| v["message"] == "shut down cleanly"));
    cluster.shutdown().await;
}
