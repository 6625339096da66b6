//! Command line of `update-operator`.

use crate::clouds::CloudArgs;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Keeps every opted-in node of a Kubernetes cluster on the desired OS image and Kubernetes
/// version.
///
/// Run it as `update-operator -controller` (a leader-elected Deployment) or `update-operator
/// -agent` (a DaemonSet on every opted-in node); `controller` and `agent` work as subcommands too.
#[derive(Debug, Parser)]
#[command(name = "update-operator", version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub mode: Mode,
}

#[derive(Debug, Subcommand)]
// Parsed once at start and moved into its mode's run: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Mode {
    /// Decide which node updates next and drive the rollout (run as a Deployment).
    Controller(ControllerArgs),
    /// Report this node's state and carry out the controller's intents on it (run as a DaemonSet).
    Agent(AgentArgs),
    /// Preview a rollout before it starts: the order and waves, the predicted duration and every
    /// blocker (read-only). Exit status 0 when nothing blocks, 3 when something would, 1 on errors.
    Plan(PlanArgs),
}

/// Flags of `update-operator plan`.
#[derive(Debug, Args)]
#[command(mut_arg("cloud_provider", |arg| arg.help(PLAN_CLOUD_HELP)))]
#[command(mut_arg("cloud_rate_limit", |arg| arg.help(PLAN_RATE_HELP)))]
pub struct PlanArgs {
    /// Kubeconfig file to use. Without it: $KUBECONFIG, then ~/.kube/config, then the in-cluster
    /// service account.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// A NodeVersion (YAML or JSON) not applied yet: planned in place of the one of its name, or as
    /// the newest.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Output format: `text` for people, `json` for scripts.
    #[arg(short = 'o', long, value_enum, default_value_t = PlanOutput::Text)]
    pub output: PlanOutput,
    /// How long staging an image takes (default: as this cluster measured it, else 3m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub stage_time: Option<std::time::Duration>,
    /// How long draining a node takes (default: as measured, else 2m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub drain_time: Option<std::time::Duration>,
    /// How long a reboot takes until the node is verified (default: as measured, else 3m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub reboot_time: Option<std::time::Duration>,
    /// How long a node's kubeadm upgrade takes until it is verified, for a NodeVersion that upgrades
    /// Kubernetes (default: as measured, else 5m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub kubeadm_upgrade_time: Option<std::time::Duration>,
    /// How long a node of a ScalingGroup takes from the start of its replacement until its drain starts: its
    /// new instance's creation and join, and the soak time (default: as measured, else 5m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub replace_time: Option<std::time::Duration>,
    /// How long a replaced node's drain and the deletion of its Node take (default: as measured, else 3m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub retire_time: Option<std::time::Duration>,
    /// How long deleting a replaced node's instance takes after its Node is gone (default: as measured, else 1m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub release_time: Option<std::time::Duration>,
    /// The node the controller runs on (it is updated last).
    #[arg(long, value_name = "NAME")]
    pub controller_node: Option<String>,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

/// `plan --cloud-provider`'s help (the other cloud flags are the controller's, help included).
const PLAN_CLOUD_HELP: &str = "Ask this cloud which ScalingGroup each node's instance belongs to and its image, as \
    the controller does, with the controller's flags and only its read calls (docs/plan.md lists the permissions). \
    Without it a node's group follows from its provider ID where the ID names it (Azure scale set VMs, the \
    simulated cloud) and the other nodes of a cloud are listed and forecast in place";
/// `plan --cloud-rate-limit`'s help.
const PLAN_RATE_HELP: &str = "Cloud API requests per second, sustained, retries included, as the controller's flag \
    (plan asks two calls per node of the cloud, one where the provider ID names the group)";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanOutput {
    Text,
    Json,
}

/// Flags both modes take.
#[derive(Debug, Args)]
pub struct CommonArgs {
    /// Kubeconfig file to use. Without it: $KUBECONFIG, then ~/.kube/config, then the in-cluster
    /// service account.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Log line format: `json` (one JSON object per line, for log collectors) or `text`.
    #[arg(long, value_enum, default_value_t = LogFormat::Json, env = "UPDATE_OPERATOR_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter in `tracing` syntax, for example `info` or `info,controller=debug`.
    #[arg(long, default_value = "info", env = "RUST_LOG", value_name = "FILTER")]
    pub log_level: String,
    /// Address of the HTTP endpoint serving /metrics (Prometheus text format), /healthz and
    /// /readyz. Port 0 picks a free port.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR")]
    pub metrics_addr: SocketAddr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

#[derive(Debug, Args)]
pub struct ControllerArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Namespace of the leader-election Lease (set it from the downward API: metadata.namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "update-operator", value_name = "NAMESPACE")]
    pub lease_namespace: String,
    /// Name of the leader-election Lease; replicas sharing it elect one leader.
    #[arg(long, default_value = "update-operator-controller", value_name = "NAME")]
    pub lease_name: String,
    /// This replica's identity in the Lease (set it from the downward API: metadata.name).
    /// Default: the host name and process ID.
    #[arg(long, env = "POD_NAME", value_name = "NAME")]
    pub identity: Option<String>,
    /// The node this replica runs on (downward API: spec.nodeName); it is updated last.
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
    /// The ValidatingAdmissionPolicy (and binding of the same name) that confines the agents. No
    /// node is updated until both exist and the binding denies.
    #[arg(long, default_value = controller::agent_policy::DEFAULT_POLICY, value_name = "NAME")]
    pub agent_policy: String,
    /// Update nodes even where the agents' admission policy is missing (Kubernetes before 1.30):
    /// every agent can then change every Node.
    #[arg(long)]
    pub allow_unconfined_agents: bool,
    /// Do not run the Kairos NodeOp and NodeOpUpgrade controllers (operator.kairos.io).
    #[arg(long)]
    pub disable_node_operations: bool,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// How long a new instance may take to become a Ready Node when its PendingNode names no deadline
    /// (e.g. `30m`, `1h`).
    #[arg(long, default_value = "30m", value_name = "DURATION", value_parser = parse_duration)]
    pub join_timeout: std::time::Duration,
    /// How long a leaving instance may take to be terminated when its PendingNode names no deadline
    /// (e.g. `5m`).
    #[arg(long, default_value = "5m", value_name = "DURATION", value_parser = parse_duration)]
    pub leave_timeout: std::time::Duration,
    /// etcd client URLs (comma-separated, e.g. `https://10.0.0.1:2379`) to start from: a replaced control-plane
    /// node's etcd member is removed through them (then through the members' own client URLs) once its
    /// replacement's member is a healthy voter, before its Node is deleted. Without it (or `--external-etcd`) a
    /// drained control-plane node is never deleted: it is held as `EtcdUnavailable`.
    #[arg(long, value_name = "URL,...", value_delimiter = ',', requires = "cloud_provider")]
    pub etcd_endpoints: Vec<String>,
    /// The control-plane nodes run no etcd member (external etcd, a managed control plane): a replaced
    /// control-plane node is deleted without touching etcd.
    #[arg(long, requires = "cloud_provider", conflicts_with = "etcd_endpoints")]
    pub external_etcd: bool,
    /// The etcd CA, for `https://` endpoints (kubeadm's path by default).
    #[arg(long, default_value = "/etc/kubernetes/pki/etcd/ca.crt", value_name = "PATH")]
    pub etcd_ca: PathBuf,
    /// The etcd client certificate (kubeadm's API server client certificate by default).
    #[arg(long, default_value = "/etc/kubernetes/pki/apiserver-etcd-client.crt", value_name = "PATH")]
    pub etcd_cert: PathBuf,
    /// The etcd client certificate's key.
    #[arg(long, default_value = "/etc/kubernetes/pki/apiserver-etcd-client.key", value_name = "PATH")]
    pub etcd_key: PathBuf,
    /// The deadline of each etcd request.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_duration)]
    pub etcd_timeout: std::time::Duration,
}

impl ControllerArgs {
    /// The etcd client configuration, when `--etcd-endpoints` is given; TLS files only for `https://` endpoints.
    pub fn etcd(&self) -> Option<controller::etcd::EtcdConfig> {
        if self.etcd_endpoints.is_empty() {
            return None;
        }
        let tls = self.etcd_endpoints.iter().any(|e| e.starts_with("https://")).then(|| controller::etcd::TlsFiles {
            ca: self.etcd_ca.clone(),
            cert: Some(self.etcd_cert.clone()),
            key: Some(self.etcd_key.clone()),
        });
        Some(controller::etcd::EtcdConfig { endpoints: self.etcd_endpoints.clone(), tls, timeout: self.etcd_timeout })
    }
}

/// A non-negative duration such as `30m`, `90s`, `1h30m` (jiff's friendly format).
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let duration: jiff::SignedDuration = text.parse().map_err(|e| format!("{text:?} is not a duration: {e}"))?;
    std::time::Duration::try_from(duration).map_err(|_| format!("{text:?} is negative"))
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Name of the Node this agent runs on (set it from the downward API: spec.nodeName).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
    /// How the agent updates its host: `bottlerocket` (the Bottlerocket API socket), `command`
    /// (configured commands, for other distributions) or `simulated` (the dev cluster's hosts).
    #[arg(long, value_enum, default_value_t = HostBackend::Bottlerocket)]
    pub host_backend: HostBackend,
    /// The Bottlerocket API's Unix socket (mounted from the host).
    #[arg(long, default_value = "/run/api.sock", value_name = "PATH")]
    pub bottlerocket_api_socket: PathBuf,
    /// JSON file with the commands of the `command` backend (check, apply, reboot, ...).
    #[arg(long, value_name = "PATH", required_if_eq("host_backend", "command"))]
    pub host_command_config: Option<PathBuf>,
    /// Base URL of the dev cluster's simulated hosts, for the `simulated` backend.
    #[arg(long, value_name = "URL", required_if_eq("host_backend", "simulated"))]
    pub simulated_hosts_url: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HostBackend {
    Bottlerocket,
    Command,
    Simulated,
}

/// Rewrites the single-dash mode flags of the Bottlerocket operator (`-controller`, `-agent`) into
/// the subcommands clap parses, wherever they stand before a `--`.
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut seen_separator = false;
    args.into_iter()
        .map(|arg| {
            if arg == "--" {
                seen_separator = true;
            }
            match arg.to_str() {
                Some("-controller") if !seen_separator => OsString::from("controller"),
                Some("-agent") if !seen_separator => OsString::from("agent"),
                _ => arg,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clouds::CloudProviderKind;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(normalize_args(args.iter().map(OsString::from)))
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn single_dash_and_subcommand_forms_are_the_same() {
        for args in [["update-operator", "-controller"], ["update-operator", "controller"]] {
            assert!(matches!(parse(&args).unwrap().mode, Mode::Controller(_)));
        }
        for args in [["update-operator", "-agent"], ["update-operator", "agent"]] {
            assert!(matches!(parse(&args).unwrap().mode, Mode::Agent(_)));
        }
    }

    #[test]
    fn plan_takes_a_file_an_output_format_and_step_durations() {
        let cli = parse(&[
            "update-operator",
            "plan",
            "-f",
            "nv.yaml",
            "-o",
            "json",
            "--drain-time",
            "90s",
            "--kubeadm-upgrade-time",
            "4m",
        ])
        .unwrap();
        let Mode::Plan(plan) = cli.mode else { panic!("plan mode expected") };
        assert_eq!(plan.file, Some(PathBuf::from("nv.yaml")));
        assert_eq!(plan.output, PlanOutput::Json);
        assert_eq!(plan.drain_time, Some(std::time::Duration::from_secs(90)));
        assert_eq!(plan.kubeadm_upgrade_time, Some(std::time::Duration::from_secs(240)));
        assert!(parse(&["update-operator", "plan", "--stage-time", "soon"]).is_err());
    }

    #[test]
    fn plan_takes_the_replacement_durations_and_the_controllers_cloud_flags() {
        let cli = parse(&[
            "update-operator",
            "plan",
            "--replace-time",
            "6m",
            "--retire-time",
            "2m",
            "--release-time",
            "30s",
            "--cloud-provider",
            "simulated",
            "--cloud-endpoint",
            "http://h:1",
        ])
        .unwrap();
        let Mode::Plan(plan) = cli.mode else { panic!("plan mode expected") };
        let minutes = |m: u64| Some(std::time::Duration::from_secs(m * 60));
        assert_eq!((plan.replace_time, plan.retire_time), (minutes(6), minutes(2)));
        assert_eq!(plan.release_time, Some(std::time::Duration::from_secs(30)));
        assert_eq!(
            (plan.cloud.cloud_provider, plan.cloud.cloud_endpoint.as_deref()),
            (Some(CloudProviderKind::Simulated), Some("http://h:1"))
        );
        // As for the controller: the simulated cloud needs its endpoint, an endpoint needs a cloud.
        assert!(parse(&["update-operator", "plan", "--cloud-provider", "simulated"]).is_err());
        assert!(parse(&["update-operator", "plan", "--cloud-endpoint", "http://h:1"]).is_err());
    }

    #[test]
    fn flags_parse_after_the_single_dash_mode() {
        let cli = parse(&["update-operator", "-agent", "--node-name", "n1", "--log-format", "text"]).unwrap();
        let Mode::Agent(agent) = cli.mode else { panic!("agent mode expected") };
        assert_eq!(agent.node_name.as_deref(), Some("n1"));
        assert_eq!(agent.common.log_format, LogFormat::Text);
    }

    #[test]
    fn backends_that_need_a_setting_refuse_to_start_without_it() {
        assert!(parse(&["update-operator", "-agent", "--node-name", "n", "--host-backend", "command"]).is_err());
        assert!(parse(&["update-operator", "-agent", "--node-name", "n", "--host-backend", "simulated"]).is_err());
        let cli =
            parse(&["update-operator", "-agent", "--host-backend", "command", "--host-command-config", "/etc/c.json"])
                .unwrap();
        let Mode::Agent(agent) = cli.mode else { panic!("agent mode expected") };
        assert_eq!(agent.host_backend, HostBackend::Command);
    }

    /// The container args of the install manifests, as the binary would receive them.
    fn manifest_args() -> Vec<(String, Vec<String>)> {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/operator.yaml")).unwrap();
        let mut found = Vec::new();
        for doc in text.split("\n---\n") {
            let value: serde_json::Value = yaml_serde::from_str(doc).unwrap();
            for container in
                value.pointer("/spec/template/spec/containers").and_then(|c| c.as_array()).into_iter().flatten()
            {
                let args: Vec<String> =
                    container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
                found.push((value["kind"].as_str().unwrap().to_owned(), args));
            }
        }
        found
    }

    #[test]
    fn the_install_manifests_pass_flags_the_binary_accepts() {
        let found = manifest_args();
        assert_eq!(found.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), vec!["Deployment", "DaemonSet"]);
        for (kind, args) in found {
            let argv: Vec<&str> = std::iter::once("update-operator").chain(args.iter().map(String::as_str)).collect();
            let cli = parse(&argv).unwrap_or_else(|e| panic!("{kind}: {e}"));
            match (kind.as_str(), cli.mode) {
                ("Deployment", Mode::Controller(_)) | ("DaemonSet", Mode::Agent(_)) => {}
                (kind, mode) => panic!("{kind} runs {mode:?}"),
            }
        }
    }

    #[test]
    fn etcd_is_off_unless_its_endpoints_are_given_and_takes_kubeadms_files_by_default() {
        let cloud =
            ["update-operator", "controller", "--cloud-provider", "simulated", "--cloud-endpoint", "http://h:1"];
        let Ok(Mode::Controller(plain)) = parse(&cloud).map(|c| c.mode) else { panic!("parses") };
        assert_eq!(plain.etcd(), None);
        let with = [&cloud[..], &["--etcd-endpoints", "https://10.0.0.1:2379,https://10.0.0.2:2379"]].concat();
        let Ok(Mode::Controller(args)) = parse(&with).map(|c| c.mode) else { panic!("parses") };
        let etcd = args.etcd().expect("configured");
        assert_eq!(etcd.endpoints, ["https://10.0.0.1:2379", "https://10.0.0.2:2379"]);
        assert_eq!(etcd.tls, Some(controller::etcd::TlsFiles::kubeadm()));
        assert_eq!(etcd.timeout, std::time::Duration::from_secs(10));
        let plain_http =
            [&cloud[..], &["--etcd-endpoints", "http://127.0.0.1:2379", "--etcd-ca", "/x/ca.crt"]].concat();
        let Ok(Mode::Controller(args)) = parse(&plain_http).map(|c| c.mode) else { panic!("parses") };
        assert_eq!(args.etcd().and_then(|e| e.tls), None);
        // Member removal belongs to the replacement: without a cloud there is none.
        assert!(parse(&["update-operator", "controller", "--etcd-endpoints", "https://10.0.0.1:2379"]).is_err());
        // No etcd member to remove: said explicitly, never assumed, and not beside endpoints.
        assert!(!plain.external_etcd);
        let external = [&cloud[..], &["--external-etcd"]].concat();
        let Ok(Mode::Controller(args)) = parse(&external).map(|c| c.mode) else { panic!("parses") };
        assert!(args.external_etcd && args.etcd().is_none());
        let both = [&cloud[..], &["--external-etcd", "--etcd-endpoints", "http://127.0.0.1:2379"]].concat();
        assert!(parse(&both).is_err());
    }

    #[test]
    fn the_cloud_needs_its_endpoint_and_timeouts_parse() {
        assert!(parse(&["update-operator", "controller", "--cloud-provider", "simulated"]).is_err());
        assert!(parse(&["update-operator", "controller", "--cloud-endpoint", "http://127.0.0.1:1"]).is_err());
        let cli = parse(&[
            "update-operator",
            "controller",
            "--cloud-provider",
            "simulated",
            "--cloud-endpoint",
            "http://127.0.0.1:1",
            "--join-timeout",
            "2m",
        ])
        .unwrap();
        let Mode::Controller(controller) = cli.mode else { panic!("controller mode expected") };
        assert_eq!(controller.cloud.cloud_provider, Some(CloudProviderKind::Simulated));
        assert_eq!(controller.join_timeout, std::time::Duration::from_secs(120));
        // (The cloud flags' own parsing: crate::clouds.)
        assert_eq!(controller.leave_timeout, std::time::Duration::from_secs(300));
        assert!(parse(&["update-operator", "controller", "--leave-timeout", "-5m"]).is_err());
        assert!(parse(&["update-operator", "controller", "--leave-timeout", "soon"]).is_err());
    }

    #[test]
    fn the_controller_and_plan_take_the_same_cloud_flags() {
        let cloud = ["--cloud-provider", "simulated", "--cloud-endpoint", "http://h:1", "--cloud-rate-limit", "5"];
        let Ok(Mode::Controller(controller)) =
            parse(&[&["update-operator", "controller"][..], &cloud].concat()).map(|c| c.mode)
        else {
            panic!("the controller takes them")
        };
        let Ok(Mode::Plan(plan)) = parse(&[&["update-operator", "plan"][..], &cloud].concat()).map(|c| c.mode) else {
            panic!("plan takes them")
        };
        for args in [&controller.cloud, &plan.cloud] {
            assert_eq!(args.cloud_provider, Some(CloudProviderKind::Simulated));
            assert_eq!((args.cloud_endpoint.as_deref(), args.cloud_rate_limit), (Some("http://h:1"), 5));
        }
    }

    #[test]
    fn help_documents_every_flag() {
        for sub in ["controller", "agent", "plan"] {
            let mut command = Cli::command();
            let sub = command.find_subcommand_mut(sub).unwrap();
            for arg in sub.get_arguments() {
                assert!(arg.get_help().is_some(), "--{} has no help", arg.get_id());
            }
        }
    }
}
