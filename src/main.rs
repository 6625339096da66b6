//! `update-operator`: command line and wiring; the work is done by the `controller` and `agent`
//! crates.

mod cli;
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
use std::num::NonZeroU32;
use std::process::ExitCode;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Exit status for usage errors, as clap uses.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse_from(cli::normalize_args(std::env::args_os()));
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
    // One TLS provider for the whole process, chosen here rather than from rustls's crate features
    // (which cannot choose once a cloud SDK compiles in a second provider). Only fails if one is
    // already installed, which nothing does before this line.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The agent runs on every node and does one thing at a time: one thread is enough, and saves
    // the stacks and allocator arenas of a thread pool.
    let mut builder = match &cli.mode {
        Mode::Agent(_) => tokio::runtime::Builder::new_current_thread(),
        Mode::Controller(_) | Mode::Plan(_) => tokio::runtime::Builder::new_multi_thread(),
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
    let Some(kind) = args.cloud_provider else {
        return Ok(None);
    };
    let endpoint = args.cloud_endpoint.as_deref();
    let provider: Arc<dyn cloud::CloudProvider> = match kind {
        cli::CloudProviderKind::Simulated => {
            let endpoint = endpoint.context("--cloud-provider simulated needs --cloud-endpoint")?;
            Arc::new(cloud::simulated::SimulatedProvider::new(endpoint).context("--cloud-endpoint")?)
        }
        #[cfg(feature = "azure")]
        cli::CloudProviderKind::Azure => Arc::new(azure_provider(args)?),
        #[cfg(not(feature = "azure"))]
        cli::CloudProviderKind::Azure => {
            anyhow::bail!("--cloud-provider azure: this binary was built without the `azure` feature")
        }
        cli::CloudProviderKind::Gcp => gcp_provider(args).await?,
        #[cfg(feature = "aws")]
        cli::CloudProviderKind::Aws => {
            anyhow::ensure!(endpoint.is_none(), "--cloud-endpoint is not for aws (tests set AWS_ENDPOINT_URL)");
            let region = args.aws_region.as_deref().unwrap_or_default();
            Arc::new(cloud::aws::AwsProvider::from_env(region).await.context("--aws-region")?)
        }
        #[cfg(not(feature = "aws"))]
        cli::CloudProviderKind::Aws => anyhow::bail!("--cloud-provider aws: built without the `aws` feature"),
    };
    let calls = Arc::new(cloud::metrics::PrometheusCalls::register(registry));
    let mut policy = cloud::CallPolicy::default();
    if let (Some(rate), Some(burst)) = (NonZeroU32::new(args.cloud_rate_limit), NonZeroU32::new(args.cloud_burst)) {
        policy.rate_per_second = rate;
        policy.burst = burst;
    }
    let provider = cloud::Governed::new(provider, policy, calls);
    let mut options = controller::groups::CloudOptions::new(Arc::new(provider));
    options.join_timeout = args.join_timeout;
    options.leave_timeout = args.leave_timeout;
    options.etcd = args.etcd();
    options.metrics = controller::groups::GroupMetrics::register(registry);
    tracing::info!(cloud = ?kind, endpoint, "managing scaling groups");
    Ok(Some(options))
}

/// The Azure provider of `--azure-*` and `--cloud-endpoint`, credentials from the environment.
#[cfg(feature = "azure")]
fn azure_provider(args: &cli::ControllerArgs) -> anyhow::Result<cloud::azure::AzureProvider> {
    let (Some(subscription), Some(group)) = (&args.azure_subscription_id, &args.azure_resource_group) else {
        anyhow::bail!("--cloud-provider azure needs --azure-subscription-id and --azure-resource-group");
    };
    let mut config = cloud::azure::AzureConfig::new(subscription, group);
    config.arm_endpoint = args.cloud_endpoint.clone();
    config.authority_host = args.azure_authority_host.clone();
    if let Some(path) = &args.azure_ca_file {
        config.extra_ca_pem = Some(std::fs::read(path).with_context(|| format!("--azure-ca-file {}", path.display()))?);
    }
    cloud::azure::AzureProvider::new(config).context("--cloud-provider azure")
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
/// The GCP provider of `--gcp-project` (Application Default Credentials).
#[cfg(feature = "gcp")]
async fn gcp_provider(args: &cli::ControllerArgs) -> anyhow::Result<Arc<dyn cloud::CloudProvider>> {
    let project = args.gcp_project.clone().context("--cloud-provider gcp needs --gcp-project")?;
    let config = cloud::gcp::GcpConfig { project, endpoint: args.cloud_endpoint.clone(), credentials: None };
    Ok(Arc::new(cloud::gcp::GcpProvider::new(config).await.context("--cloud-provider gcp")?))
}

#[cfg(not(feature = "gcp"))]
async fn gcp_provider(_: &cli::ControllerArgs) -> anyhow::Result<Arc<dyn cloud::CloudProvider>> {
    anyhow::bail!("--cloud-provider gcp: this binary was built without the `gcp` feature")
}

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

    #[cfg(not(feature = "gcp"))]
    #[tokio::test]
    async fn a_build_without_gcp_refuses_it_by_name() {
        let cli = cli::Cli::try_parse_from(["update-operator", "controller", "--cloud-provider", "gcp"]).unwrap();
        let cli::Mode::Controller(args) = cli.mode else { panic!("controller mode expected") };
        let mut registry = prometheus_client::registry::Registry::default();
        let error = cloud_options(&args, &mut registry).await.err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(error.contains("built without the `gcp` feature"), "{error}");
    }

    #[cfg(feature = "gcp")]
    #[tokio::test]
    async fn gcp_is_built_from_its_project_with_application_default_credentials() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let cli = cli::Cli::try_parse_from([
            "update-operator",
            "controller",
            "--cloud-provider",
            "gcp",
            "--gcp-project",
            "my-project",
            "--cloud-endpoint",
            "http://127.0.0.1:9",
        ])
        .unwrap();
        let cli::Mode::Controller(args) = cli.mode else { panic!("controller mode expected") };
        let mut registry = prometheus_client::registry::Registry::default();
        // Building looks up ADC but makes no request; here without credentials it may fail only as a credentials
        // error, never as a missing feature.
        match cloud_options(&args, &mut registry).await {
            Ok(options) => assert!(options.is_some()),
            Err(error) => assert!(!format!("{error:#}").contains("feature"), "{error:#}"),
        }
    }

    fn controller_args(args: &[&str]) -> cli::ControllerArgs {
        let mut argv = vec!["update-operator", "controller"];
        argv.extend_from_slice(args);
        match cli::Cli::try_parse_from(argv).map(|c| c.mode) {
            Ok(cli::Mode::Controller(args)) => args,
            other => panic!("controller arguments expected: {other:?}"),
        }
    }

    #[cfg(not(feature = "azure"))]
    #[tokio::test]
    async fn a_build_without_the_azure_feature_refuses_azure_with_a_clear_message() {
        let args = controller_args(&["--cloud-provider", "azure"]);
        let error =
            cloud_options(&args, &mut Default::default()).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("built without the `azure` feature"), "{error}");
    }

    #[cfg(feature = "azure")]
    #[tokio::test]
    async fn azure_needs_its_subscription_and_resource_group_and_builds_its_provider() {
        let argv = ["update-operator", "controller", "--cloud-provider", "azure", "--azure-resource-group", "rg"];
        if std::env::var_os("AZURE_SUBSCRIPTION_ID").is_none() {
            assert!(cli::Cli::try_parse_from(argv).is_err(), "the subscription is required");
        }
        let azure = [
            "--cloud-provider",
            "azure",
            "--azure-subscription-id",
            "0d202bbb-4fa7-4af8-8125-58c269a05435",
            "--azure-resource-group",
            "rg",
        ];
        let args = controller_args(&[&azure[..], &["--azure-ca-file", "/nonexistent/ca.pem"]].concat());
        let error =
            cloud_options(&args, &mut Default::default()).await.err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(error.contains("--azure-ca-file"), "{error}");
        let args = controller_args(&azure);
        // Managed identity needs no environment to be configured; no request is made yet.
        let options = cloud_options(&args, &mut Default::default()).await.expect("the Azure provider is configured");
        assert!(options.is_some());
    }
}
