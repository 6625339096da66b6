//! kubectl against the server: `get nodes`, `annotate node`, `cordon`, `uncordon`, with the kubectl on PATH and
//! every `kubectl.1.NN` beside it (the Google Cloud SDK ships several minor versions).

mod common;

use common::*;
use dev::apiserver::ApiServer;
use k8s_openapi::api::core::v1::Node;
use kube::api::PostParams;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The kubectl on PATH plus its `kubectl.1.NN` siblings, resolved through symlinks.
fn kubectls() -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(found) = std::env::split_paths(&path).map(|dir| dir.join("kubectl")).find(|p| p.is_file()) else {
        return Vec::new();
    };
    let resolved = std::fs::canonicalize(&found).unwrap_or(found.clone());
    let mut all = vec![found];
    if let Some(dir) = resolved.parent()
        && let Ok(entries) = std::fs::read_dir(dir)
    {
        let mut versions: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("kubectl.1.")))
            .collect();
        versions.sort();
        all.extend(versions);
    }
    all
}

async fn kubectl(binary: &Path, server: &ApiServer, cache: &Path, args: &[&str]) -> String {
    let mut command = tokio::process::Command::new(binary);
    command.arg("--kubeconfig").arg(server.kubeconfig_path()).arg("--cache-dir").arg(cache).args(args);
    command.kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} timed out", binary.display()))
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{} {args:?} failed\nstdout: {stdout}\nstderr: {stderr}", binary.display());
    stdout
}

#[tokio::test]
async fn every_kubectl_gets_annotates_cordons_and_uncordons_nodes() {
    let binaries = kubectls();
    assert!(!binaries.is_empty(), "no kubectl on PATH (CI installs one)");
    for binary in binaries {
        println!("using {}", binary.display());
        let server = server().await;
        let cache = server.kubeconfig_path().parent().unwrap().join("kubectl-cache");
        let nodes: kube::Api<Node> = kube::Api::all(server.client());
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        )
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();

        let table = kubectl(&binary, &server, &cache, &["get", "nodes"]).await;
        assert!(
            table.contains("NAME") && table.contains("STATUS") && table.contains("n1") && table.contains("Ready"),
            "{table}"
        );
        kubectl(&binary, &server, &cache, &["annotate", "node", "n1", "example.com/touched=yes"]).await;
        let annotated = nodes.get("n1").await.unwrap();
        assert_eq!(annotated.metadata.annotations.unwrap()["example.com/touched"], "yes");
        kubectl(&binary, &server, &cache, &["cordon", "n1"]).await;
        assert_eq!(nodes.get("n1").await.unwrap().spec.unwrap().unschedulable, Some(true));
        let table = kubectl(&binary, &server, &cache, &["get", "node", "n1"]).await;
        assert!(table.contains("SchedulingDisabled"), "{table}");
        kubectl(&binary, &server, &cache, &["uncordon", "n1"]).await;
        assert_ne!(nodes.get("n1").await.unwrap().spec.unwrap_or_default().unschedulable, Some(true));
        let yaml = kubectl(&binary, &server, &cache, &["get", "node", "n1", "-o", "yaml"]).await;
        assert!(yaml.contains("example.com/touched: \"yes\"") || yaml.contains("example.com/touched: yes"), "{yaml}");
        server.shutdown().await;
    }
}
