//! The cloud of the scaling groups: its flags, which `controller` and `plan` share, and the provider they build.

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use std::num::NonZeroU32;
#[cfg(feature = "azure")]
use std::path::PathBuf;
use std::sync::Arc;

/// The cloud flags of `controller` and `plan` (flattened into both, so that they are spelled, defaulted and
/// checked the same).
#[derive(Debug, Args)]
pub struct CloudArgs {
    /// The cloud of the ScalingGroups: `simulated` (the dev cluster's), `aws`, `azure` or `gcp` (each in a build
    /// with its feature). Without it the ScalingGroup, PendingNode and AutoscalingStrategy controllers do not run.
    #[arg(long, value_enum, value_name = "CLOUD")]
    pub cloud_provider: Option<CloudProviderKind>,
    /// The cloud API's address: for `simulated`, the dev cluster's URL (http://HOST:PORT), required; for `azure`
    /// (ARM, default https://management.azure.com/) and `gcp` another endpoint than the cloud's own, only for tests
    /// and emulators (AWS: `AWS_ENDPOINT_URL`).
    #[arg(long, value_name = "URL", requires = "cloud_provider", required_if_eq("cloud_provider", "simulated"))]
    pub cloud_endpoint: Option<String>,
    /// Cloud API requests per second, sustained, for all of the controller's calls (retries included). The
    /// default stays below the default API rate limits of AWS, Azure Resource Manager and GCE and leaves room for
    /// other clients of the account; raise it where the account's limits are higher and large groups are
    /// replaced (each replaced node costs about 8 calls).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub cloud_rate_limit: u32,
    /// Cloud API requests that may go at once after a quiet period.
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub cloud_burst: u32,
    // AWS (feature `aws`).
    /// The AWS region of the Auto Scaling groups (`--cloud-provider aws`). Credentials come from the
    /// default chain (IRSA, EKS Pod Identity, instance profile); `AWS_ENDPOINT_URL` overrides the
    /// endpoint, for tests against moto only.
    #[cfg(feature = "aws")]
    #[arg(long, env = "AWS_REGION", value_name = "REGION", required_if_eq("cloud_provider", "aws"))]
    pub aws_region: Option<String>,
    // Azure (feature `azure`).
    /// Azure: the subscription of the cluster's scale sets.
    #[cfg(feature = "azure")]
    #[arg(long, env = "AZURE_SUBSCRIPTION_ID", value_name = "ID", required_if_eq("cloud_provider", "azure"))]
    pub azure_subscription_id: Option<String>,
    /// Azure: the resource group of the cluster's scale sets.
    #[cfg(feature = "azure")]
    #[arg(long, value_name = "NAME", required_if_eq("cloud_provider", "azure"))]
    pub azure_resource_group: Option<String>,
    /// Azure: the Entra ID authority host (default https://login.microsoftonline.com; overridden only for tests
    /// and emulators).
    #[cfg(feature = "azure")]
    #[arg(long, value_name = "URL", requires = "azure_subscription_id")]
    pub azure_authority_host: Option<String>,
    /// Azure: a PEM file of CA certificates trusted besides the system's (only for tests and emulators).
    #[cfg(feature = "azure")]
    #[arg(long, value_name = "FILE", requires = "azure_subscription_id")]
    pub azure_ca_file: Option<PathBuf>,
    // GCP
    /// GCP: the project whose managed instance groups the cluster's ScalingGroups are (`--cloud-provider
    /// gcp`); credentials are Application Default Credentials (workload identity, the metadata server).
    #[cfg(feature = "gcp")]
    #[arg(long, env = "GCP_PROJECT", value_name = "PROJECT", required_if_eq("cloud_provider", "gcp"))]
    pub gcp_project: Option<String>,
}

/// The clouds whose scaling groups the controller can manage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CloudProviderKind {
    /// The dev cluster's simulated cloud (`/_dev/cloud`).
    Simulated,
    /// AWS EC2 Auto Scaling groups (needs the `aws` feature).
    Aws,
    /// Azure Virtual Machine Scale Sets (needs a build with the `azure` feature).
    Azure,
    /// Google Compute Engine managed instance groups (a binary built with the `gcp` feature).
    Gcp,
}

/// A provider as the process uses it: rate-limited and retried.
pub type Provider = cloud::Governed<Arc<dyn cloud::CloudProvider>>;

impl CloudArgs {
    /// The provider of `--cloud-provider`, rate-limited and retried by `--cloud-rate-limit` and `--cloud-burst`,
    /// every request reported to `calls`; `None` without `--cloud-provider`. Building makes no request.
    ///
    /// # Errors
    /// A cloud this binary was built without (named), and a provider its flags or environment cannot configure.
    pub async fn provider(&self, calls: Arc<dyn cloud::metrics::CallObserver>) -> anyhow::Result<Option<Provider>> {
        let Some(kind) = self.cloud_provider else {
            return Ok(None);
        };
        let provider = self.bare(kind).await?;
        let mut policy = cloud::CallPolicy::default();
        if let (Some(rate), Some(burst)) = (NonZeroU32::new(self.cloud_rate_limit), NonZeroU32::new(self.cloud_burst)) {
            policy.rate_per_second = rate;
            policy.burst = burst;
        }
        Ok(Some(cloud::Governed::new(provider, policy, calls)))
    }

    /// The provider of `kind`, configured from the flags, without rate limit or retries.
    async fn bare(&self, kind: CloudProviderKind) -> anyhow::Result<Arc<dyn cloud::CloudProvider>> {
        let endpoint = self.cloud_endpoint.as_deref();
        Ok(match kind {
            CloudProviderKind::Simulated => {
                let endpoint = endpoint.context("--cloud-provider simulated needs --cloud-endpoint")?;
                Arc::new(cloud::simulated::SimulatedProvider::new(endpoint).context("--cloud-endpoint")?)
            }
            CloudProviderKind::Azure => self.azure()?,
            CloudProviderKind::Gcp => self.gcp().await?,
            CloudProviderKind::Aws => self.aws().await?,
        })
    }

    /// The AWS provider of `--aws-region`, credentials and `AWS_ENDPOINT_URL` from the environment.
    #[cfg(feature = "aws")]
    async fn aws(&self) -> anyhow::Result<Arc<dyn cloud::CloudProvider>> {
        anyhow::ensure!(self.cloud_endpoint.is_none(), "--cloud-endpoint is not for aws (tests set AWS_ENDPOINT_URL)");
        let region = self.aws_region.as_deref().unwrap_or_default();
        Ok(Arc::new(cloud::aws::AwsProvider::from_env(region).await.context("--aws-region")?))
    }

    #[cfg(not(feature = "aws"))]
    async fn aws(&self) -> anyhow::Result<Arc<dyn cloud::CloudProvider>> {
        anyhow::bail!("--cloud-provider aws: built without the `aws` feature")
    }

    /// The Azure provider of `--azure-*` and `--cloud-endpoint`, credentials from the environment.
    #[cfg(feature = "azure")]
    fn azure(&self) -> anyhow::Result<Arc<dyn cloud::CloudProvider>> {
        let (Some(subscription), Some(group)) = (&self.azure_subscription_id, &self.azure_resource_group) else {
            anyhow::bail!("--cloud-provider azure needs --azure-subscription-id and --azure-resource-group");
        };
        let mut config = cloud::azure::AzureConfig::new(subscription, group);
        config.arm_endpoint = self.cloud_endpoint.clone();
        config.authority_host = self.azure_authority_host.clone();
        if let Some(path) = &self.azure_ca_file {
            config.extra_ca_pem =
                Some(std::fs::read(path).with_context(|| format!("--azure-ca-file {}", path.display()))?);
        }
        Ok(Arc::new(cloud::azure::AzureProvider::new(config).context("--cloud-provider azure")?))
    }

    #[cfg(not(feature = "azure"))]
    fn azure(&self) -> anyhow::Result<Arc<dyn cloud::CloudProvider>> {
        anyhow::bail!("--cloud-provider azure: this binary was built without the `azure` feature")
    }

    /// The GCP provider of `--gcp-project` (Application Default Credentials).
    #[cfg(feature = "gcp")]
    async fn gcp(&self) -> anyhow::Result<Arc<dyn cloud::CloudProvider>> {
        let project = self.gcp_project.clone().context("--cloud-provider gcp needs --gcp-project")?;
        let config = cloud::gcp::GcpConfig { project, endpoint: self.cloud_endpoint.clone(), credentials: None };
        Ok(Arc::new(cloud::gcp::GcpProvider::new(config).await.context("--cloud-provider gcp")?))
    }

    #[cfg(not(feature = "gcp"))]
    async fn gcp(&self) -> anyhow::Result<Arc<dyn cloud::CloudProvider>> {
        anyhow::bail!("--cloud-provider gcp: this binary was built without the `gcp` feature")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A command with nothing but the cloud flags.
    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        cloud: CloudArgs,
    }

    fn parse(args: &[&str]) -> Result<CloudArgs, clap::Error> {
        Flags::try_parse_from(std::iter::once("flags").chain(args.iter().copied())).map(|f| f.cloud)
    }

    fn args(args: &[&str]) -> CloudArgs {
        parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    async fn error(args: &CloudArgs) -> String {
        let calls = Arc::new(cloud::metrics::NoObserver);
        args.provider(calls).await.err().map(|e| format!("{e:#}")).unwrap_or_default()
    }

    #[tokio::test]
    async fn without_a_cloud_there_is_no_provider_and_the_simulated_one_is_built_from_its_endpoint() {
        let none = args(&[]);
        assert!(none.provider(Arc::new(cloud::metrics::NoObserver)).await.unwrap().is_none());
        let simulated = args(&["--cloud-provider", "simulated", "--cloud-endpoint", "http://127.0.0.1:9"]);
        let provider = simulated.provider(Arc::new(cloud::metrics::NoObserver)).await.unwrap().unwrap();
        assert_eq!(cloud::CloudProvider::cloud(&provider), cloud::Cloud::Simulated);
        let bad = args(&["--cloud-provider", "simulated", "--cloud-endpoint", "not a url"]);
        assert!(error(&bad).await.contains("--cloud-endpoint"));
    }

    #[test]
    fn the_cloud_needs_its_endpoint_and_the_rate_limit_parses() {
        assert!(parse(&["--cloud-provider", "simulated"]).is_err());
        assert!(parse(&["--cloud-endpoint", "http://127.0.0.1:1"]).is_err());
        let simulated = ["--cloud-provider", "simulated", "--cloud-endpoint", "http://h:1"];
        let plain = args(&simulated);
        assert_eq!(plain.cloud_provider, Some(CloudProviderKind::Simulated));
        assert_eq!((plain.cloud_rate_limit, plain.cloud_burst), (10, 20));
        let faster = args(&[&simulated[..], &["--cloud-rate-limit", "50", "--cloud-burst", "100"]].concat());
        assert_eq!((faster.cloud_rate_limit, faster.cloud_burst), (50, 100));
        assert!(parse(&[&simulated[..], &["--cloud-rate-limit", "0"]].concat()).is_err(), "a rate of 0 stops all");
    }

    #[cfg(not(feature = "aws"))]
    #[tokio::test]
    async fn a_build_without_aws_refuses_it_by_name() {
        assert!(error(&args(&["--cloud-provider", "aws"])).await.contains("built without the `aws` feature"));
    }

    #[cfg(feature = "aws")]
    #[test]
    fn aws_needs_its_region() {
        // The flag falls back to AWS_REGION: the missing case is only checked where it is unset.
        if std::env::var_os("AWS_REGION").is_none() {
            assert!(parse(&["--cloud-provider", "aws"]).is_err());
        }
        let aws = args(&["--cloud-provider", "aws", "--aws-region", "eu-central-1"]);
        assert_eq!(aws.cloud_provider, Some(CloudProviderKind::Aws));
        assert_eq!(aws.aws_region.as_deref(), Some("eu-central-1"));
        assert_eq!(aws.cloud_endpoint, None);
    }

    #[cfg(feature = "aws")]
    #[tokio::test]
    async fn aws_refuses_an_endpoint_flag() {
        let aws = args(&["--cloud-provider", "aws", "--aws-region", "eu-central-1", "--cloud-endpoint", "http://h:1"]);
        assert!(error(&aws).await.contains("AWS_ENDPOINT_URL"));
    }

    #[cfg(not(feature = "gcp"))]
    #[tokio::test]
    async fn a_build_without_gcp_refuses_it_by_name() {
        assert!(error(&args(&["--cloud-provider", "gcp"])).await.contains("built without the `gcp` feature"));
    }

    #[cfg(feature = "gcp")]
    #[test]
    fn gcp_needs_its_project_and_no_endpoint() {
        if std::env::var_os("GCP_PROJECT").is_none() {
            assert!(parse(&["--cloud-provider", "gcp"]).is_err());
        }
        let gcp = args(&["--cloud-provider", "gcp", "--gcp-project", "my-project"]);
        assert_eq!(gcp.cloud_provider, Some(CloudProviderKind::Gcp));
        assert_eq!((gcp.gcp_project.as_deref(), gcp.cloud_endpoint), (Some("my-project"), None));
    }

    #[cfg(feature = "gcp")]
    #[tokio::test]
    async fn gcp_is_built_from_its_project_with_application_default_credentials() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let gcp =
            args(&["--cloud-provider", "gcp", "--gcp-project", "my-project", "--cloud-endpoint", "http://127.0.0.1:9"]);
        // Building looks up ADC but makes no request; here without credentials it may fail only as a credentials
        // error, never as a missing feature.
        match gcp.provider(Arc::new(cloud::metrics::NoObserver)).await {
            Ok(provider) => assert!(provider.is_some()),
            Err(error) => assert!(!format!("{error:#}").contains("feature"), "{error:#}"),
        }
    }

    #[cfg(not(feature = "azure"))]
    #[tokio::test]
    async fn a_build_without_the_azure_feature_refuses_azure_with_a_clear_message() {
        assert!(error(&args(&["--cloud-provider", "azure"])).await.contains("built without the `azure` feature"));
    }

    #[cfg(feature = "azure")]
    #[tokio::test]
    async fn azure_needs_its_subscription_and_resource_group_and_builds_its_provider() {
        if std::env::var_os("AZURE_SUBSCRIPTION_ID").is_none() {
            assert!(parse(&["--cloud-provider", "azure", "--azure-resource-group", "rg"]).is_err());
        }
        let azure = [
            "--cloud-provider",
            "azure",
            "--azure-subscription-id",
            "0d202bbb-4fa7-4af8-8125-58c269a05435",
            "--azure-resource-group",
            "rg",
        ];
        let with_ca = args(&[&azure[..], &["--azure-ca-file", "/nonexistent/ca.pem"]].concat());
        assert!(error(&with_ca).await.contains("--azure-ca-file"));
        // Managed identity needs no environment to be configured; no request is made yet.
        let provider = args(&azure).provider(Arc::new(cloud::metrics::NoObserver)).await;
        assert!(provider.expect("the Azure provider is configured").is_some());
    }
}
