//! Command-line settings shared by the `dev-cluster` and `cluster-bench` programs.

use crate::cloud::GroupSpec;
use crate::cluster::{ClusterConfig, PdbStyle, SampleWorkloads};
use crate::timing::Timing;
use std::time::Duration;

/// Parses `250ms`, `2s`, `1.5s`, `3m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number.trim().parse().map_err(|_| format!("{text:?} is not a duration (e.g. 500ms, 2s, 1m)"))?;
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{text:?}: {e}"))
}

/// `0` turns a periodic action off.
fn optional(duration: Duration) -> Option<Duration> {
    (!duration.is_zero()).then_some(duration)
}

/// Which budgets the sample workloads get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PdbArg {
    /// In turn `maxUnavailable: 1`, `minAvailable: n-1`, `maxUnavailable: 50%`, `minAvailable: 50%`.
    Mixed,
    /// `minAvailable: replicas - 1`.
    MinAvailable,
    /// `maxUnavailable: 1`.
    MaxUnavailable,
    /// No PodDisruptionBudgets.
    None,
}

/// The base timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TimingArg {
    /// Quick, as in tests.
    Fast,
    /// Closer to a real cluster.
    Realistic,
}

/// The cluster's shape, workloads and timing.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// Nodes in total.
    #[arg(long, default_value_t = 4)]
    pub nodes: usize,
    /// How many of the nodes are control planes.
    #[arg(long, default_value_t = 1)]
    pub control_planes: usize,
    /// The image every host runs at first (the nodes' `osImage`).
    #[arg(long, default_value = "v1")]
    pub image: String,
    /// The nodes' kubelet version.
    #[arg(long, default_value = "v1.33.0")]
    pub kubelet_version: String,
    /// No sample workloads.
    #[arg(long)]
    pub no_workloads: bool,
    /// Sample pods (Deployments and StatefulSets) per worker.
    #[arg(long, default_value_t = 2)]
    pub pods_per_worker: usize,
    /// Replicas of each sample Deployment and StatefulSet.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Every n-th sample workload is a StatefulSet (0: none).
    #[arg(long, default_value_t = 3)]
    pub statefulset_every: usize,
    /// The sample PodDisruptionBudgets.
    #[arg(long, value_enum, default_value_t = PdbArg::Mixed)]
    pub pdb: PdbArg,
    /// No sample DaemonSet.
    #[arg(long)]
    pub no_daemonset: bool,
    /// The base timing; the flags below override single values.
    #[arg(long, value_enum, default_value_t = TimingArg::Fast)]
    pub timing: TimingArg,
    /// Pod startup on a Ready node.
    #[arg(long, value_parser = parse_duration)]
    pub pod_startup: Option<Duration>,
    /// Upper bound of a pod's termination (its grace period otherwise).
    #[arg(long, value_parser = parse_duration)]
    pub pod_termination_cap: Option<Duration>,
    /// How long a host stages an image.
    #[arg(long, value_parser = parse_duration)]
    pub stage: Option<Duration>,
    /// How long a host is down in a reboot.
    #[arg(long, value_parser = parse_duration)]
    pub reboot: Option<Duration>,
    /// Node status heartbeat interval (0: off).
    #[arg(long, value_parser = parse_duration)]
    pub heartbeat: Option<Duration>,
    /// Node Lease renewal interval (0: no Leases).
    #[arg(long, value_parser = parse_duration)]
    pub lease_renew: Option<Duration>,
    /// The disruption controller's lag.
    #[arg(long, value_parser = parse_duration)]
    pub disruption_lag: Option<Duration>,
    /// How long a Job's (or any run-to-completion) pod runs before it exits.
    #[arg(long, value_parser = parse_duration)]
    pub job_pod_run: Option<Duration>,
    /// The Job controller's first delay before it replaces a failed pod (doubling per failure).
    #[arg(long, value_parser = parse_duration)]
    pub job_backoff: Option<Duration>,
    /// How long a new cloud instance is Creating.
    #[arg(long, value_parser = parse_duration)]
    pub instance_provision: Option<Duration>,
    /// From a cloud instance running to its node registering (NotReady).
    #[arg(long, value_parser = parse_duration)]
    pub node_join: Option<Duration>,
    /// From a new node registering to it Ready.
    #[arg(long, value_parser = parse_duration)]
    pub node_ready: Option<Duration>,
    /// How long a deleted cloud instance is Terminating.
    #[arg(long, value_parser = parse_duration)]
    pub instance_terminate: Option<Duration>,
    /// Scaling groups of the simulated cloud, besides the --nodes: `NAME:SIZE[:control-plane|worker]`, comma
    /// separated (e.g. `cp:3:control-plane,workers-a:4,workers-b:3`).
    #[arg(long, value_delimiter = ',', value_parser = GroupSpec::parse)]
    pub scaling_groups: Vec<GroupSpec>,
    /// How long to wait for every node and sample pod to be Ready.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    pub ready_timeout: Duration,
}

impl ClusterArgs {
    /// The timing the flags ask for.
    pub fn timing(&self) -> Timing {
        let mut timing = match self.timing {
            TimingArg::Fast => Timing::fast(),
            TimingArg::Realistic => Timing::realistic(),
        };
        if let Some(d) = self.pod_startup {
            timing.pod_startup = d;
        }
        if let Some(d) = self.pod_termination_cap {
            timing.pod_termination_cap = d;
        }
        if let Some(d) = self.stage {
            timing.stage = d;
        }
        if let Some(d) = self.reboot {
            timing.reboot = d;
        }
        if let Some(d) = self.heartbeat {
            timing.node_heartbeat = optional(d);
        }
        if let Some(d) = self.lease_renew {
            timing.lease_renew = optional(d);
        }
        if let Some(d) = self.disruption_lag {
            timing.disruption_lag = d;
        }
        if let Some(d) = self.job_pod_run {
            timing.job_pod_run = d;
        }
        if let Some(d) = self.job_backoff {
            timing.job_backoff = d;
        }
        for (flag, field) in [
            (self.instance_provision, &mut timing.instance_provision),
            (self.node_join, &mut timing.node_join),
            (self.node_ready, &mut timing.node_ready),
            (self.instance_terminate, &mut timing.instance_terminate),
        ] {
            if let Some(d) = flag {
                *field = d;
            }
        }
        timing
    }

    /// The cluster the flags ask for.
    pub fn config(&self) -> ClusterConfig {
        let workloads = (!self.no_workloads).then(|| SampleWorkloads {
            pods_per_worker: self.pods_per_worker,
            replicas: self.replicas,
            statefulset_every: self.statefulset_every,
            pdb: match self.pdb {
                PdbArg::Mixed => PdbStyle::Mixed,
                PdbArg::MinAvailable => PdbStyle::MinAvailable,
                PdbArg::MaxUnavailable => PdbStyle::MaxUnavailable,
                PdbArg::None => PdbStyle::None,
            },
            daemonset: !self.no_daemonset,
            ..SampleWorkloads::default()
        });
        ClusterConfig {
            nodes: self.nodes,
            control_planes: self.control_planes,
            image: self.image.clone(),
            kubelet_version: self.kubelet_version.clone(),
            workloads,
            timing: self.timing(),
            ready_timeout: self.ready_timeout,
            scaling_groups: self.scaling_groups.clone(),
            ..ClusterConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_bare_seconds() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn zero_turns_heartbeats_and_leases_off() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cluster: ClusterArgs,
        }
        let cli = Cli::parse_from(["x", "--heartbeat", "0", "--lease-renew", "0", "--reboot", "5s", "--pdb", "none"]);
        let config = cli.cluster.config();
        assert_eq!((config.timing.node_heartbeat, config.timing.lease_renew), (None, None));
        assert_eq!(config.timing.reboot, Duration::from_secs(5));
        assert_eq!(config.workloads.unwrap().pdb, PdbStyle::None);
        assert!(config.scaling_groups.is_empty());
    }

    #[test]
    fn scaling_groups_and_cloud_durations_come_from_their_flags() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            cluster: ClusterArgs,
        }
        let cli = Cli::parse_from(["x", "--scaling-groups", "cp:3:control-plane,workers-a:4", "--node-join", "2s"]);
        let config = cli.cluster.config();
        let names: Vec<(&str, u32)> = config.scaling_groups.iter().map(|g| (g.name.as_str(), g.size)).collect();
        assert_eq!(names, vec![("cp", 3), ("workers-a", 4)]);
        assert_eq!(config.scaling_groups[0].role, cloud::GroupRole::ControlPlane);
        assert_eq!(config.timing.node_join, Duration::from_secs(2));
        assert!(Cli::try_parse_from(["x", "--scaling-groups", "cp:three"]).is_err());
    }
}
