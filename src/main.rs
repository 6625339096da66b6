//! `update-operator`: command line and wiring; the work is done by the `controller` and `agent`
//! crates.

mod allocator;
mod cli;
mod clouds;
mod logging;
mod plan;
mod probes;

use agent::host::bottlerocket::{BottlerocketConfig, BottlerocketHost};
use agent::host::command::CommandHost;
use agent::host::simulated::{SimulatedConfig, SimulatedHost};
use anyhow::Context as _;
use clap::Parser;
use cli::{Cli, CommonArgs, HostBackend, Mode};
use kube::config::{KubeConfigOptions, Kubeconfig};
use shared::health::Health;
use std::process::ExitCode;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Exit status for usage errors, as clap uses.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse_from(cli::normalize_args(std::env::args_os()));
    // One TLS provider for the whole process, chosen here rather than from rustls's crate features
    // (which cannot choose once a cloud SDK compiles in a second provider). Only fails if one is
    // already installed, which nothing does before this line.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match cli.mode {
        Mode::Plan(args) => return plan::main(args),
        mode => Cli { mode },
    };
    if let Mode::Agent(agent) = &cli.mode
        && agent.node_name.as_deref().is_none_or(str::is_empty)
    {
        eprintln!("error: the agent needs the name of its node: pass --node-name or set NODE_NAME");
        return ExitCode::from(EXIT_USAGE);
    }
    // The agent runs on every node and does one thing at a time: one thread is enough, and saves
    // the stacks and allocator arenas of a thread pool.
    let mut builder = match &cli.mode {
        Mode::Agent(_) => tokio::runtime::Builder::new_current_thread(),
        Mode::Controller(_) | Mode::Plan(_) => {
            allocator::one_arena();
            tokio::runtime::Builder::new_multi_thread()
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "exiting");
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let common = match &cli.mode {
        Mode::Controller(args) => &args.common,
        Mode::Agent(args) => &args.common,
        Mode::Plan(_) => anyhow::bail!("plan runs on its own (see plan::main)"),
    };
    logging::init(common.log_format, &common.log_level)?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let health = Health::default();
    let listener = tokio::net::TcpListener::bind(common.metrics_addr)
        .await
        .with_context(|| format!("cannot listen on --metrics-addr {}", common.metrics_addr))?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");

    match cli.mode {
        Mode::Controller(args) => {
            let identity = args.identity.clone().unwrap_or_else(default_identity);
            let config = config(&args.common, &controller::user_agent(&identity)).await?;
            let mut registry = prometheus_client::registry::Registry::with_prefix("update_operator");
            let metrics = controller::Metrics::register(&mut registry);
            let cloud = cloud_options(&args, &mut registry).await?;
            tokio::spawn(probes::serve(listener, Arc::new(registry), health.clone(), shutdown.clone()));
            let options = controller::Options {
                identity,
                lease_namespace: args.lease_namespace,
                lease_name: args.lease_name,
                lease_timing: Default::default(),
                own_node: args.node_name.filter(|n| !n.is_empty()),
                cloud,
                agent_policy: (!args.allow_unconfined_agents).then_some(args.agent_policy),
                node_operations: !args.disable_node_operations,
            };
            tracing::info!(identity = %options.identity, lease = %format!("{}/{}", options.lease_namespace, options.lease_name), "campaigning for leadership");
            controller::run(config, options, metrics, health, shutdown).await?;
        }
        Mode::Agent(args) => {
            let node_name = args.node_name.clone().unwrap_or_default();
            let user_agent = format!("update-operator/agent {}", env!("CARGO_PKG_VERSION"));
            let client = kube::Client::try_from(config(&args.common, &user_agent).await?)
                .context("cannot build the Kubernetes client")?;
            let mut registry = prometheus_client::registry::Registry::with_prefix("update_operator_agent");
            let metrics = agent::Metrics::register(&mut registry);
            tokio::spawn(probes::serve(listener, Arc::new(registry), health.clone(), shutdown.clone()));
            tracing::info!(node = %node_name, backend = ?args.host_backend, "starting the agent");
            match args.host_backend {
                HostBackend::Bottlerocket => {
                    let host = BottlerocketHost::new(BottlerocketConfig::new(&args.bottlerocket_api_socket));
                    agent::run(client, node_name, Arc::new(host), metrics, health, shutdown).await?;
                }
                HostBackend::Command => {
                    let path = args.host_command_config.as_deref().context("--host-command-config is required")?;
                    let host = CommandHost::from_file(path)
                        .await
                        .with_context(|| format!("--host-command-config {}", path.display()))?;
                    agent::run(client, node_name, Arc::new(host), metrics, health, shutdown).await?;
                }
                HostBackend::Simulated => {
                    let url = args.simulated_hosts_url.clone().context("--simulated-hosts-url is required")?;
                    let host = SimulatedHost::new(SimulatedConfig::new(url, node_name.clone()))
                        .context("--simulated-hosts-url")?;
                    agent::run(client, node_name, Arc::new(host), metrics, health, shutdown).await?;
                }
            }
        }
        Mode::Plan(_) => {}
    }
    tracing::info!("shut down cleanly");
    Ok(())
}

/// The scaling-group controllers' cloud, rate-limited and retried, its calls counted in `registry`; `None`
/// without `--cloud-provider`.
async fn cloud_options(
    args: &cli::ControllerArgs,
    registry: &mut prometheus_client::registry::Registry,
) -> anyhow::Result<Option<controller::groups::CloudOptions>> {
    if args.cloud.cloud_provider.is_none() {
        return Ok(None);
    }
    let calls = Arc::new(cloud::metrics::PrometheusCalls::register(registry));
    let Some(provider) = args.cloud.provider(calls).await? else {
        return Ok(None);
    };
    let mut options = controller::groups::CloudOptions::new(Arc::new(provider));
    options.join_timeout = args.join_timeout;
    options.leave_timeout = args.leave_timeout;
    options.etcd = args.etcd();
    options.external_etcd = args.external_etcd;
    options.metrics = controller::groups::GroupMetrics::register(registry);
    tracing::info!(cloud = ?args.cloud.cloud_provider, endpoint = args.cloud.cloud_endpoint, "managing scaling groups");
    Ok(Some(options))
}

/// The API server configuration; requests carry `user_agent` (`update-operator/<mode> VERSION`, and
/// the controller's identity) so that audit logs tell controller replicas and agents apart.
async fn config(common: &CommonArgs, user_agent: &str) -> anyhow::Result<kube::Config> {
    config_from(common.kubeconfig.as_deref(), common.context.clone(), user_agent).await
}

/// The API server configuration of kubeconfig file `kubeconfig` (else inferred) and `context`.
async fn config_from(
    kubeconfig: Option<&std::path::Path>,
    context: Option<String>,
    user_agent: &str,
) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions { context, ..Default::default() };
    let mut config = match kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context("no kubeconfig and not running in a cluster")?,
    };
    config.headers.push((http::header::USER_AGENT, user_agent.parse().context("user agent")?));
    tracing::info!(server = %config.cluster_url, "connecting to the API server");
    Ok(config)
}

/// The host name and process ID, for a controller started outside a pod.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(term) => term,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the process");
                let _ = tokio::signal::ctrl_c().await;
                shutdown.cancel();
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_controllers_cloud_options_take_its_flags_and_there_are_none_without_a_cloud() {
        let parse = |args: &[&str]| match cli::Cli::try_parse_from(args).map(|c| c.mode) {
            Ok(cli::Mode::Controller(args)) => args,
            other => panic!("controller arguments expected: {other:?}"),
        };
        let mut registry = prometheus_client::registry::Registry::default();
        assert!(cloud_options(&parse(&["update-operator", "controller"]), &mut registry).await.unwrap().is_none());
        let args = parse(&[
            "update-operator",
            "controller",
            "--cloud-provider",
            "simulated",
            "--cloud-endpoint",
            "http://127.0.0.1:9",
            "--leave-timeout",
            "7m",
            "--join-timeout",
            "1h",
        ]);
        let options = cloud_options(&args, &mut registry).await.unwrap().expect("a cloud");
        assert_eq!(options.leave_timeout, std::time::Duration::from_secs(420));
        assert_eq!(options.join_timeout, std::time::Duration::from_secs(3600));
        // A cloud the build lacks is refused by name (crate::clouds' tests cover each).
        #[cfg(not(feature = "gcp"))]
        {
            let gcp = parse(&["update-operator", "controller", "--cloud-provider", "gcp"]);
            let error = cloud_options(&gcp, &mut registry).await.err().map(|e| format!("{e:#}")).unwrap_or_default();
            assert!(error.contains("built without the `gcp` feature"), "{error}");
        }
    }
}
