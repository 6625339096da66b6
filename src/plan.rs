//! `update-operator plan`: reads the cluster once (get/list only), forecasts every rollout with the
//! controller's own policy (see `controller::forecast`) and prints the order, the waves, the
//! predicted duration and every blocker. Writes nothing.

use crate::cli::{PlanArgs, PlanOutput};
use anyhow::Context as _;
use cloud::metrics::NoObserver;
use controller::forecast::report::{Flags, Report};
use controller::forecast::snapshot::Snapshot;
use shared::crd::NodeVersion;
use std::process::ExitCode;
use std::sync::Arc;

/// Exit status when something would block a rollout.
pub const EXIT_BLOCKED: u8 = 3;

/// Runs `plan` on a runtime of its own; the exit status says whether something blocks.
pub fn main(args: PlanArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(report) if report.blocked() => ExitCode::from(EXIT_BLOCKED),
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: PlanArgs) -> anyhow::Result<Report> {
    // Read the file first: a typo should not wait for the cluster.
    let version = match &args.file {
        Some(path) => Some(read_version(path)?),
        None => None,
    };
    let user_agent = format!("update-operator/plan {}", env!("CARGO_PKG_VERSION"));
    let config = crate::config_from(args.kubeconfig.as_deref(), args.context.clone(), &user_agent).await?;
    let client = kube::Client::try_from(config).context("cannot build the Kubernetes client")?;
    let mut snapshot = Snapshot::read(&client).await.context("cannot read the cluster")?;
    snapshot.check_kubernetes(&client, version.as_ref()).await;
    // The health checks, each evaluated once (get/list of the objects they name).
    snapshot.check_health(&client, version.as_ref(), jiff::Timestamp::now()).await;
    // With settleWorkloads: the nodes whose workloads are not whole now (the pods, and each workload once).
    snapshot.check_settle(&client, version.as_ref()).await.context("cannot read the workloads of the nodes' pods")?;
    // Only the provider's read calls (instance group and image, `Snapshot::ask_cloud`), rate-limited and retried
    // as the controller's; an answer that fails leaves its node unplaced, said in the assumptions with the error.
    if let Some(provider) = args.cloud.provider(Arc::new(NoObserver)).await? {
        snapshot.ask_cloud(&provider).await;
    }
    let duration = |d: Option<std::time::Duration>| d.and_then(|d| jiff::SignedDuration::try_from(d).ok());
    let flags = Flags {
        stage: duration(args.stage_time),
        drain: duration(args.drain_time),
        reboot: duration(args.reboot_time),
        kubeadm_upgrade: duration(args.kubeadm_upgrade_time),
        replace: duration(args.replace_time),
        retire: duration(args.retire_time),
        release: duration(args.release_time),
    };
    let report = Report::build(snapshot, version, flags, args.controller_node.as_deref(), jiff::Timestamp::now());
    match args.output {
        PlanOutput::Text => print!("{}", report.text()),
        PlanOutput::Json => println!("{}", serde_json::to_string_pretty(&report).context("cannot write the report")?),
    }
    Ok(report)
}

/// The NodeVersion of a YAML or JSON file.
fn read_version(path: &std::path::Path) -> anyhow::Result<NodeVersion> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let version: NodeVersion =
        yaml_serde::from_str(&text).with_context(|| format!("{} is not a NodeVersion", path.display()))?;
    anyhow::ensure!(
        version.metadata.name.as_deref().is_some_and(|n| !n.is_empty()),
        "{}: the NodeVersion has no metadata.name",
        path.display()
    );
    Ok(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_named_node_version_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let good = write(
            "nv.yaml",
            "apiVersion: update.edgeless.systems/v1alpha1\nkind: NodeVersion\nmetadata: {name: nv}\nspec: {image: v3}\n",
        );
        assert_eq!(read_version(&good).unwrap().spec.image, "v3");
        let unnamed = write(
            "unnamed.yaml",
            "apiVersion: update.edgeless.systems/v1alpha1\nkind: NodeVersion\nspec: {image: v3}\n",
        );
        // Refused with its path: by the name check, or already by the parse where a build's features make
        // `metadata` required (seen with --all-features).
        let error = format!("{:#}", read_version(&unnamed).unwrap_err());
        assert!(error.contains("unnamed.yaml") && !error.contains("nv.yaml"), "{error}");
        let broken = write("broken.yaml", "spec: [");
        assert!(format!("{:#}", read_version(&broken).unwrap_err()).contains("broken.yaml is not a NodeVersion"));
        assert!(read_version(&dir.path().join("missing.yaml")).is_err());
    }
}
