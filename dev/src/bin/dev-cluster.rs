//! `dev-cluster`: an in-memory Kubernetes cluster with simulated nodes, hosts and sample workloads, for the demo
//! and for trying update-operator by hand. Runs until SIGINT or SIGTERM.

use anyhow::Context;
use clap::Parser;
use dev::apiserver::Identity;
use dev::cli::ClusterArgs;
use dev::cluster::Cluster;
use std::path::PathBuf;
use tokio::signal::unix::{SignalKind, signal};

/// An in-memory Kubernetes cluster: API server, controllers, kubelets and simulated hosts.
#[derive(Debug, Parser)]
#[command(name = "dev-cluster", version)]
struct Cli {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Port on 127.0.0.1 (0: a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Where to write the kubeconfig (default: a new temporary directory).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Also write a kubeconfig for this identity (repeatable): `serviceaccount:NS:NAME`, `serviceaccount:NS:NAME@NODE`
    /// (a token bound to NODE, with its node-name extra, as an agent's), `user:NAME[:GROUP,...]` or `admin`. A
    /// missing ServiceAccount is created.
    #[arg(long = "kubeconfig-for", value_name = "IDENTITY", value_parser = Identity::parse)]
    kubeconfig_for: Vec<Identity>,
    /// Print one JSON line (`kubeconfig`, `url`, `httpsUrl`, `hostsUrl`, `nodes`, `kubeconfigs`, `cloudUrl`,
    /// `cloudTag`, `scalingGroups`) instead of text.
    #[arg(long)]
    json: bool,
    /// Log filter (`tracing` syntax), e.g. `info,dev=debug`.
    #[arg(long, env = "RUST_LOG", default_value = "warn")]
    log_level: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log_level).context("--log-level")?)
        .with_writer(std::io::stderr)
        .init();
    let mut config = cli.cluster.config();
    config.apiserver.port = cli.port;
    config.apiserver.kubeconfig_path = cli.kubeconfig.clone();
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    let cluster = tokio::select! {
        cluster = Cluster::start(config) => cluster.context("starting the dev cluster")?,
        _ = terminate.recv() => return Ok(()),
        _ = interrupt.recv() => return Ok(()),
    };
    let kubeconfig = cluster.kubeconfig_path().display().to_string();
    let url = cluster.url().to_owned();
    let https_url = cluster.server().https_url().to_owned();
    let mut kubeconfigs = serde_json::Map::new();
    for identity in &cli.kubeconfig_for {
        let path = cluster.server().kubeconfig_for(identity).with_context(|| format!("a kubeconfig for {identity}"))?;
        kubeconfigs.insert(identity.to_string(), serde_json::json!(path.display().to_string()));
    }
    let groups: serde_json::Map<String, serde_json::Value> = cli
        .cluster
        .scaling_groups
        .iter()
        .map(|g| (g.name.clone(), serde_json::json!(cluster.cloud().instances_of(&g.name))))
        .collect();
    let tag = cluster.cloud().cluster_tag();
    if cli.json {
        let line = serde_json::json!({"kubeconfig": kubeconfig, "url": url, "httpsUrl": https_url,
                                      "hostsUrl": format!("{url}/_dev/hosts"), "nodes": cluster.node_names(),
                                      "kubeconfigs": kubeconfigs, "cloudUrl": format!("{url}/_dev/cloud"),
                                      "cloudTag": {"key": tag.key, "value": tag.value}, "scalingGroups": groups});
        println!("{line}");
    } else {
        println!(
            "dev cluster ready: {} control plane(s), {} worker(s)",
            cluster.control_planes().len(),
            cluster.workers().len()
        );
        println!("kubeconfig:      {kubeconfig}   (the administrator, group system:masters)");
        for (identity, path) in &kubeconfigs {
            println!("kubeconfig:      {}   ({identity})", path.as_str().unwrap_or_default());
        }
        println!("API server:      {https_url} (kubeconfigs), {url} (plain HTTP, bearer tokens too)");
        println!("simulated hosts: {url}/_dev/hosts   (agent: --host-backend simulated --simulated-hosts-url {url})");
        if !groups.is_empty() {
            let names: Vec<&String> = groups.keys().collect();
            println!("scaling groups:  {names:?} (tag {}={})", tag.key, tag.value);
            println!("simulated cloud: {url}/_dev/cloud   (provider: simulated, endpoint {url})");
        }
        println!("try:             KUBECONFIG={kubeconfig} kubectl get nodes");
        println!("stop with Ctrl-C");
    }
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    cluster.shutdown().await;
    Ok(())
}
