//! Command line of `update-operator`.

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
pub enum Mode {
    /// Decide which node updates next and drive the rollout (run as a Deployment).
    Controller(ControllerArgs),
    /// Report this node's state and carry out the controller's intents on it (run as a DaemonSet).
    Agent(AgentArgs),
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
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Name of the Node this agent runs on (set it from the downward API: spec.nodeName).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
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
    fn flags_parse_after_the_single_dash_mode() {
        let cli = parse(&["update-operator", "-agent", "--node-name", "n1", "--log-format", "text"]).unwrap();
        let Mode::Agent(agent) = cli.mode else { panic!("agent mode expected") };
        assert_eq!(agent.node_name.as_deref(), Some("n1"));
        assert_eq!(agent.common.log_format, LogFormat::Text);
    }

    #[test]
    fn help_documents_every_flag() {
        for sub in ["controller", "agent"] {
            let mut command = Cli::command();
            let sub = command.find_subcommand_mut(sub).unwrap();
            for arg in sub.get_arguments() {
                assert!(arg.get_help().is_some(), "--{} has no help", arg.get_id());
            }
        }
    }
}
