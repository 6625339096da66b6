//! `update-operator plan` as a user runs it: the real binary against a dev cluster, its JSON and text
//! output and its exit status.

use dev::cluster::{Cluster, ClusterConfig};
use std::process::Output;

async fn plan(kubeconfig: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_update-operator"))
        .arg("plan")
        .args(["--kubeconfig", kubeconfig])
        .args(args)
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_prints_the_forecast_and_the_blockers_and_exits_with_3_when_something_blocks() {
    let cluster = Cluster::start(ClusterConfig { nodes: 2, control_planes: 1, workloads: None, ..Default::default() })
        .await
        .unwrap();
    let kubeconfig = cluster.server().kubeconfig_path().display().to_string();
    let dir = tempfile::tempdir().unwrap();

    // No NodeVersion: nothing to roll out, nothing blocks.
    let out = plan(&kubeconfig, &[]).await;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no NodeVersion"));

    // A spec not applied yet, on nodes whose agents never reported: each node is a blocker.
    let file = dir.path().join("nv.yaml");
    std::fs::write(
        &file,
        "apiVersion: update.edgeless.systems/v1alpha1\nkind: NodeVersion\nmetadata: {name: nv}\nspec: {image: v2}\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let out = plan(&kubeconfig, &["-f", &file, "-o", "json"]).await;
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let blockers = report["blockers"].as_array().unwrap();
    let named: Vec<(&str, &str)> =
        blockers.iter().map(|b| (b["kind"].as_str().unwrap(), b["nodes"][0].as_str().unwrap())).collect();
    assert_eq!(named, vec![("NoAgent", "control-plane-0"), ("NoAgent", "worker-0")]);
    assert_eq!(report["rollouts"][0]["name"], "nv");
    assert_eq!(report["rollouts"][0]["ending"]["state"], "Stuck");
    assert_eq!(report["durations"][0]["source"]["kind"], "Default");
    let text = plan(&kubeconfig, &["-f", &file, "--stage-time", "2m"]).await;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("2 blocker(s):") && text.contains("stage 2m00s (flag)"), "{text}");
    // Nothing was written: the NodeVersion of the file does not exist.
    let versions = cluster.store().api::<shared::crd::NodeVersion>().list(None, &Default::default()).unwrap();
    assert!(versions.items.is_empty());

    // A file that is not there is an error (1), not a blocker.
    let out = plan(&kubeconfig, &["-f", "/nonexistent/nv.yaml"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/nv.yaml"));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_replaces_the_nodes_of_scaling_groups_asking_the_cloud_when_given_its_flags() {
    let config = ClusterConfig {
        nodes: 1,
        control_planes: 0,
        workloads: None,
        scaling_groups: vec![dev::cloud::GroupSpec::new("workers-a", cloud::GroupRole::Worker, 2)],
        ..Default::default()
    };
    let cluster = Cluster::start(config).await.unwrap();
    let kubeconfig = cluster.server().kubeconfig_path().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nv.yaml");
    std::fs::write(
        &file,
        "apiVersion: update.edgeless.systems/v1alpha1\nkind: NodeVersion\nmetadata: {name: constellation-version}\n\
         spec: {image: v2, rollout: {maxSurge: 1}}\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let replaced = |report: &serde_json::Value| -> Vec<bool> {
        report["rollouts"][0]["nodes"].as_array().unwrap().iter().map(|n| n["replaced"].as_bool().unwrap()).collect()
    };

    // Asking the simulated cloud: its two nodes are replaced one at a time (maxSurge 1), with the flag's time.
    let cloud = ["--cloud-provider", "simulated", "--cloud-endpoint", cluster.url()];
    let out = plan(&kubeconfig, &[&["-f", &file, "-o", "json", "--replace-time", "1m"][..], &cloud[..]].concat()).await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The in-place node has no agent (a blocker); the group nodes need none.
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(replaced(&report), vec![true, true], "{report:#}");
    let waves: Vec<u64> =
        report["rollouts"][0]["nodes"].as_array().unwrap().iter().map(|n| n["wave"].as_u64().unwrap()).collect();
    assert_eq!(waves, vec![1, 2]);
    let replace = report["durations"].as_array().unwrap().iter().find(|d| d["step"] == "replace").unwrap();
    assert_eq!((replace["seconds"].as_f64(), replace["source"]["kind"].as_str()), (Some(60.0), Some("Flag")));
    let assumptions = report["assumptions"].to_string();
    assert!(assumptions.contains("as the cloud told"), "{assumptions}");

    // Without the cloud: the groups follow from the provider IDs, the images are taken as outdated.
    let out = plan(&kubeconfig, &["-f", &file, "-o", "json"]).await;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(replaced(&report), vec![true, true], "{report:#}");
    let assumptions = report["assumptions"].to_string();
    assert!(
        assumptions.contains("from their provider IDs") && assumptions.contains("taken as outdated"),
        "{assumptions}"
    );

    // A cloud this build cannot ask, or one without its flags, is an error, not a silent in-place forecast (the
    // clouds a build has: tests/it/plan_clouds.rs).
    let out = plan(&kubeconfig, &["-f", &file, "--cloud-provider", "gcp"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "gcp") {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--gcp-project"), "{stderr}");
    } else {
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("built without the `gcp` feature"), "{stderr}");
    }
    cluster.shutdown().await;
}
