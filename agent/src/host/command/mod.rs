//! The command backend: for distributions without an update API, the host is read and updated by
//! commands from the agent's configuration (see [`CommandConfig`]).
//!
//! - `check` prints the OS image the host runs (first line of stdout, trimmed);
//! - `apply` stages the target, which is passed as its last argument (exit 0 = staged);
//! - `reboot` reboots the host;
//! - `staged` (optional) prints the staged image, or nothing;
//! - `unstage` (optional) discards the staged target, which is passed as its last argument.
//!
//! With a `kubernetes` section, the `kubeadm-upgrade` step installs the components under its `hostRoot` and
//! runs kubeadm and the kubelet restart (see [`HostUpdater::upgrade_kubernetes`] and [`CommandConfig`]); the
//! `fetch` step fetches them ahead into the fetch cache under `hostRoot`
//! ([`crate::components::DEFAULT_FETCH_CACHE`]), which the upgrade then installs from.
//!
//! With `nsenter: true` every command runs in the host's namespaces (those of PID 1: cgroup, IPC, UTS,
//! network, PID, mount), entered by the agent itself before the command is executed, as
//! `nsenter --target 1 --cgroup --ipc --uts --net --pid --mount -- <argv...>` would ([`namespaces`]).
//! With a `cgroup` section every command runs in a cgroup of its own outside the agent's, with its own memory
//! limit ([`cgroup`]).
//!
//! # Guarantees
//! - No shell is ever involved, and nothing from the cluster is spliced into a command line: the
//!   target is exactly one argument, the last, and a target that could pass for an option (a
//!   leading `-`) is refused.
//! - Every command has a time limit, after which it is killed with everything it started.
//! - A failed command is reported with its exit status and the last lines of its stderr.
//! - `stage` skips `apply` when `staged` already reports the target, and after `apply` it checks
//!   that `staged` reports the target (with no `staged` command, `apply`'s exit status is trusted);
//!   `activate_and_reboot` reboots only when `staged` (if configured) reports the target, or the
//!   host already runs it with nothing else staged.

pub mod cgroup;
mod config;
pub mod namespaces;
mod run;

pub use config::{CommandConfig, DEFAULT_COMMAND_MEMORY_MAX, MAX_TIMEOUT_SECONDS};

use super::{
    EX_TEMPFAIL, HostError, HostFacts, HostUpdater, KubernetesFetch, KubernetesUpgrade, check_reported_image,
    read_boot_id,
};
use crate::components::{Installer, installed_in_background};
use crate::kubeadm;
use cgroup::Cgroups;
use config::{CommandSpec, KubernetesConfig};
use namespaces::Namespaces;
use run::{Finished, Placement, RunError};
use shared::protocol::ComponentsHash;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Time limits of the commands without a configured `timeoutSeconds`.
const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(60);
const DEFAULT_STAGED_TIMEOUT: Duration = Duration::from_secs(60);
/// Staging downloads an image; slow mirrors take many minutes.
const DEFAULT_APPLY_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// `systemctl reboot` only queues the reboot; anything slower is stuck.
const DEFAULT_REBOOT_TIMEOUT: Duration = Duration::from_secs(120);
/// Discarding a staged image deletes files or a boot entry.
const DEFAULT_UNSTAGE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// `kubeadm upgrade apply` pulls images and waits for every static Pod to restart.
const DEFAULT_KUBEADM_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Restarting the kubelet is a systemd job.
const DEFAULT_RESTART_TIMEOUT: Duration = Duration::from_secs(120);

/// A host updated by configured commands.
#[derive(Debug, Clone)]
pub struct CommandHost {
    config: CommandConfig,
    boot_id_path: PathBuf,
    /// The `/proc/PID/ns` directory whose namespaces the commands run in (with `nsenter: true`).
    namespaces_dir: PathBuf,
    /// The commands' cgroups (with a `cgroup` section), shared by the clones of this host.
    cgroups: Option<Arc<Cgroups>>,
    /// The proxy of the component downloads and the hosts that bypass it (`NO_PROXY` syntax), instead of the
    /// process's environment (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`).
    proxy: Option<(String, String)>,
}

impl CommandHost {
    pub fn new(config: CommandConfig) -> Self {
        let cgroups = config.cgroup.as_ref().map(|c| Arc::new(Cgroups::new(&c.root, &c.parent, c.memory_max)));
        CommandHost {
            config,
            boot_id_path: super::default_boot_id_path(),
            namespaces_dir: PathBuf::from(namespaces::HOST_NAMESPACES),
            cgroups,
            proxy: None,
        }
    }

    /// Downloads components through the proxy at `url` (for `http://` and `https://` URLs), except from the hosts
    /// `no_proxy` names (`NO_PROXY` syntax), instead of the proxies of the process's environment.
    pub fn with_proxy(mut self, url: impl Into<String>, no_proxy: impl Into<String>) -> Self {
        self.proxy = Some((url.into(), no_proxy.into()));
        self
    }

    /// Reads the configuration file at `path` and sets up the backend.
    pub async fn from_file(path: &Path) -> Result<Self, super::ConfigError> {
        Ok(Self::new(CommandConfig::load(path).await?))
    }

    /// Reads the boot ID from `path` instead of the kernel's file.
    pub fn with_boot_id_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.boot_id_path = path.into();
        self
    }

    /// With `nsenter: true`, enters the namespaces of `dir` (a `/proc/PID/ns` directory) instead of
    /// the host's init process's.
    pub fn with_namespaces_of(mut self, dir: impl Into<PathBuf>) -> Self {
        self.namespaces_dir = dir.into();
        self
    }

    /// The argument vector that runs `spec` (with `last_arg` appended).
    fn argv(&self, spec: &CommandSpec, last_arg: Option<&str>) -> Vec<String> {
        let mut argv = Vec::with_capacity(spec.argv.len() + 1);
        argv.extend(spec.argv.iter().cloned());
        argv.extend(last_arg.map(str::to_owned));
        argv
    }

    /// The namespaces the commands run in: `None` without `nsenter: true`.
    fn namespaces(&self, name: &'static str, program: &str) -> Result<Option<Arc<Namespaces>>, HostError> {
        if !self.config.nsenter {
            return Ok(None);
        }
        let namespaces = Namespaces::open(&self.namespaces_dir).map_err(|error| HostError::CommandStart {
            command: name,
            program: program.to_owned(),
            source: std::io::Error::new(error.source.kind(), error.to_string()),
        })?;
        Ok(Some(Arc::new(namespaces)))
    }

    /// Runs `spec` to its end.
    async fn run(
        &self,
        name: &'static str,
        spec: &CommandSpec,
        last_arg: Option<&str>,
        default_timeout: Duration,
    ) -> Result<Finished, HostError> {
        let argv = self.argv(spec, last_arg);
        let timeout = spec.timeout(default_timeout);
        tracing::debug!(command = name, ?argv, "running host command");
        let namespaces = self.namespaces(name, spec.program())?;
        let start_error = |source| HostError::CommandStart { command: name, program: argv[0].clone(), source };
        let cgroup = match &self.cgroups {
            Some(cgroups) => Some(
                cgroups
                    .create(name)
                    .await
                    .map_err(|error| start_error(std::io::Error::new(error.source.kind(), error.to_string())))?,
            ),
            None => None,
        };
        let dir = cgroup.as_ref().and_then(|c| c.dir()).map(|dir| dir.try_clone()).transpose().map_err(start_error)?;
        if let Some(cgroup) = &cgroup {
            tracing::debug!(command = name, cgroup = %cgroup.path().display(), "host command in its own cgroup");
        }
        let ran = run::run(&argv, Placement { namespaces, cgroup: dir }, timeout).await;
        if let Some(cgroup) = cgroup {
            cgroup.remove().await;
        }
        ran.map_err(|error| match error {
            RunError::Start(source) | RunError::Wait(source) => start_error(source),
            RunError::TimedOut => {
                HostError::TimedOut { operation: format!("the {name} command {:?}", spec.program()), after: timeout }
            }
        })
    }

    /// Runs `spec` and returns its stdout if it succeeded.
    async fn run_to_success(
        &self,
        name: &'static str,
        spec: &CommandSpec,
        last_arg: Option<&str>,
        default_timeout: Duration,
    ) -> Result<Vec<u8>, HostError> {
        let finished = self.run(name, spec, last_arg, default_timeout).await?;
        if finished.status.success() {
            return Ok(finished.stdout);
        }
        Err(failed(name, spec, &finished))
    }

    /// The `kubernetes` section, or why the step is refused without one.
    fn kubernetes(&self, version: &shared::version::KubeVersion) -> Result<&KubernetesConfig, HostError> {
        self.config.kubernetes.as_ref().ok_or_else(|| HostError::Unsupported {
            operation: format!("upgrading Kubernetes to {version}"),
            reason: "the host command configuration has no kubernetes section".to_owned(),
        })
    }

    /// The installer of the `kubernetes` section, downloading through the configured proxy.
    fn installer(&self, kubernetes: &KubernetesConfig) -> Result<Installer, HostError> {
        let mut installer = Installer::new(&kubernetes.host_root, &kubernetes.record)?;
        if let Some((url, no_proxy)) = &self.proxy {
            let proxies =
                crate::components::Matcher::builder().http(url.clone()).https(url.clone()).no(no_proxy.clone());
            installer = installer.with_proxies(proxies.build())?;
        }
        Ok(installer)
    }

    /// The components hash from the record of installed components; `None` without a `kubernetes` section
    /// or a record.
    async fn components_hash(&self) -> Result<Option<ComponentsHash>, HostError> {
        let Some(kubernetes) = &self.config.kubernetes else { return Ok(None) };
        let path = kubernetes.host_root.join(kubernetes.record.strip_prefix("/").unwrap_or(&kubernetes.record));
        let Some(record) = installed_in_background(path.clone()).await? else { return Ok(None) };
        ComponentsHash::parse("the record's hash", &record.hash).map(Some).map_err(|error| {
            crate::components::InstallError::Record { path: path.display().to_string(), reason: error.to_string() }
                .into()
        })
    }

    /// Runs one step of the upgrade to success: a failure is reported with the end of its output (kubeadm
    /// prints its progress on stdout and the failing phase on stderr).
    async fn run_upgrade_command(
        &self,
        name: &'static str,
        argv: Vec<String>,
        timeout: Duration,
    ) -> Result<(), HostError> {
        let spec = CommandSpec { argv, timeout_seconds: Some(timeout.as_secs().max(1)) };
        let finished = self.run(name, &spec, None, timeout).await?;
        if finished.status.success() {
            return Ok(());
        }
        let mut output = finished.stdout.clone();
        output.push(b'\n');
        output.extend_from_slice(&finished.stderr_tail);
        Err(HostError::CommandFailed {
            command: name,
            program: spec.program().to_owned(),
            status: run::describe(finished.status),
            stderr_tail: run::stderr_summary(&output),
            temporary: finished.status.code() == Some(EX_TEMPFAIL),
        })
    }

    /// The first line of a command's output, trimmed; `None` when it printed nothing.
    async fn first_line(
        &self,
        name: &'static str,
        spec: &CommandSpec,
        default_timeout: Duration,
    ) -> Result<Option<String>, HostError> {
        let stdout = self.run_to_success(name, spec, None, default_timeout).await?;
        let bad = |reason: String| HostError::BadOutput { command: name, program: spec.program().to_owned(), reason };
        let text = String::from_utf8(stdout).map_err(|_| bad("output that is not UTF-8".to_owned()))?;
        let Some(line) = text.lines().map(str::trim).find(|line| !line.is_empty()) else {
            return Ok(None);
        };
        check_reported_image(line).map_err(|reason| bad(format!("an unusable image {line:?}: {reason}")))?;
        Ok(Some(line.to_owned()))
    }

    async fn os_image(&self) -> Result<String, HostError> {
        let check = &self.config.check;
        self.first_line("check", check, DEFAULT_CHECK_TIMEOUT).await?.ok_or_else(|| HostError::BadOutput {
            command: "check",
            program: check.program().to_owned(),
            reason: "nothing; it must print the OS image on its first line".to_owned(),
        })
    }

    /// The staged image; `None` when nothing is staged or no `staged` command is configured.
    async fn staged_image(&self) -> Result<Option<String>, HostError> {
        match &self.config.staged {
            Some(staged) => self.first_line("staged", staged, DEFAULT_STAGED_TIMEOUT).await,
            None => Ok(None),
        }
    }
}

fn failed(name: &'static str, spec: &CommandSpec, finished: &Finished) -> HostError {
    HostError::CommandFailed {
        command: name,
        program: spec.program().to_owned(),
        status: run::describe(finished.status),
        stderr_tail: run::stderr_summary(&finished.stderr_tail),
        temporary: finished.status.code() == Some(EX_TEMPFAIL),
    }
}

/// Refuses targets that are not one plain argument.
fn check_target(target: &str) -> Result<(), HostError> {
    let invalid = |reason: &str| HostError::InvalidTarget { target: target.to_owned(), reason: reason.to_owned() };
    if target.is_empty() {
        return Err(invalid("the target is empty"));
    }
    if target.starts_with('-') {
        return Err(invalid("a target starting with '-' would be read as an option by the apply command"));
    }
    if target.len() > shared::protocol::MAX_TARGET_LEN {
        return Err(invalid("the target is longer than 1024 bytes"));
    }
    if target.chars().any(char::is_control) {
        return Err(invalid("the target contains control characters"));
    }
    Ok(())
}

impl HostUpdater for CommandHost {
    async fn facts(&self) -> Result<HostFacts, HostError> {
        Ok(HostFacts {
            os_image: self.os_image().await?,
            boot_id: read_boot_id(&self.boot_id_path).await?,
            staged_image: self.staged_image().await?,
            components_hash: self.components_hash().await?,
        })
    }

    async fn upgrade_kubernetes(&self, upgrade: &KubernetesUpgrade) -> Result<(), HostError> {
        let kubernetes = self.kubernetes(&upgrade.version)?;
        let commands =
            kubeadm::upgrade_commands(upgrade.role, &upgrade.version, &upgrade.components).map_err(|error| {
                HostError::StepFailed {
                    step: format!("upgrading Kubernetes to {}", upgrade.version),
                    message: error.to_string(),
                }
            })?;
        let installer = self.installer(kubernetes)?;
        // Everything is downloaded (or taken from the fetch cache) and verified before anything is installed.
        let mut prepared = installer.prepare(&upgrade.components).await?;
        prepared.install_where(|component| !kubeadm::replaced_after_kubeadm(component)).await?;
        let kubeadm_timeout = kubernetes.kubeadm_timeout_seconds.map_or(DEFAULT_KUBEADM_TIMEOUT, Duration::from_secs);
        for mut argv in commands {
            if !self.config.nsenter {
                // The program is a host path; without the host's mount namespace it is found under the root.
                argv[0] = kubernetes.host_root.join(argv[0].trim_start_matches('/')).to_string_lossy().into_owned();
            }
            self.run_upgrade_command("kubeadm", argv, kubeadm_timeout).await?;
        }
        prepared.finish().await?;
        let default_restart = || {
            kubeadm::RESTART_KUBELET
                .iter()
                .map(|argv| CommandSpec { argv: argv.iter().map(|a| (*a).to_owned()).collect(), timeout_seconds: None })
                .collect::<Vec<_>>()
        };
        for spec in kubernetes.restart_kubelet.clone().unwrap_or_else(default_restart) {
            let timeout = spec.timeout(DEFAULT_RESTART_TIMEOUT);
            self.run_upgrade_command("kubelet restart", spec.argv, timeout).await?;
        }
        tracing::info!(version = %upgrade.version, "Kubernetes components upgraded");
        Ok(())
    }

    async fn fetch_kubernetes(&self, fetch: &KubernetesFetch) -> Result<(), HostError> {
        let kubernetes = self.kubernetes(&fetch.version)?;
        let fetched = self.installer(kubernetes)?.fetch(&fetch.components).await.map_err(HostError::Fetch)?;
        tracing::info!(version = %fetch.version, fetched.downloaded, fetched.cached, "Kubernetes components fetched ahead");
        Ok(())
    }

    async fn discard_fetched(&self) -> Result<(), HostError> {
        // Without a kubernetes section nothing was ever fetched.
        let Some(kubernetes) = &self.config.kubernetes else { return Ok(()) };
        self.installer(kubernetes)?.discard_fetched().await.map_err(HostError::Fetch)
    }

    async fn stage(&self, target: &str) -> Result<(), HostError> {
        check_target(target)?;
        if self.staged_image().await?.as_deref() == Some(target) {
            tracing::info!(target, "already staged");
            return Ok(());
        }
        self.run_to_success("apply", &self.config.apply, Some(target), DEFAULT_APPLY_TIMEOUT).await?;
        if let Some(spec) = &self.config.staged {
            let staged = self.staged_image().await?;
            if staged.as_deref() != Some(target) {
                return Err(HostError::StepFailed {
                    step: format!("staging {target}"),
                    message: format!(
                        "the apply command {:?} succeeded, but the staged command {:?} then printed {}",
                        self.config.apply.program(),
                        spec.program(),
                        staged.map_or_else(|| "nothing".to_owned(), |image| format!("{image:?}"))
                    ),
                });
            }
        }
        tracing::info!(target, "staged");
        Ok(())
    }

    async fn activate_and_reboot(&self, target: &str) -> Result<(), HostError> {
        check_target(target)?;
        if self.config.staged.is_some() {
            let staged = self.staged_image().await?;
            let boots_target_next = match staged.as_deref() {
                Some(staged) => staged == target,
                None => self.os_image().await? == target,
            };
            if !boots_target_next {
                return Err(HostError::NotStaged { target: target.to_owned(), staged });
            }
        }
        let reboot = &self.config.reboot;
        let finished = self.run("reboot", reboot, None, DEFAULT_REBOOT_TIMEOUT).await?;
        if finished.status.success() || killed_by_shutdown(finished.status) {
            tracing::info!(target, status = %run::describe(finished.status), "reboot under way");
            return Ok(());
        }
        Err(failed("reboot", reboot, &finished))
    }

    async fn release(&self, target: &str) -> Result<(), HostError> {
        // A target `apply` was never given cannot have been staged.
        let (Some(unstage), Ok(())) = (&self.config.unstage, check_target(target)) else { return Ok(()) };
        self.run_to_success("unstage", unstage, Some(target), DEFAULT_UNSTAGE_TIMEOUT).await?;
        tracing::info!(target, "discarded the staged image");
        Ok(())
    }
}

/// Whether the reboot command was ended by the shutdown it started (SIGTERM or SIGKILL from the
/// init system; our own time limit is reported as a timeout before this is asked).
fn killed_by_shutdown(status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    matches!(status.signal(), Some(signal) if signal == rustix::process::Signal::TERM.as_raw() || signal == rustix::process::Signal::KILL.as_raw())
}

#[cfg(test)]
mod kubeadm_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn host(nsenter: bool) -> CommandHost {
        let json = format!(
            r#"{{"check": {{"argv": ["os-version"]}}, "apply": {{"argv": ["os-update", "--stage"]}},
                "reboot": {{"argv": ["systemctl", "reboot"]}}, "nsenter": {nsenter}}}"#
        );
        CommandHost::new(CommandConfig::from_json(&json, Path::new("test.json")).unwrap())
    }

    #[test]
    fn the_target_is_the_last_argument_of_apply() {
        let host = host(false);
        assert_eq!(host.argv(&host.config.apply, Some("img $(x); y")), ["os-update", "--stage", "img $(x); y"]);
    }

    #[test]
    fn with_nsenter_the_argv_is_unchanged_and_the_namespaces_are_the_hosts() {
        let host = host(true);
        assert_eq!(host.argv(&host.config.reboot, None), ["systemctl", "reboot"]);
        assert_eq!(host.namespaces_dir, Path::new("/proc/1/ns"));
        assert!(self::host(false).namespaces("reboot", "systemctl").unwrap().is_none());
        let missing = self::host(true).with_namespaces_of("/proc/nonexistent/ns");
        let error = missing.namespaces("check", "os-version").unwrap_err().to_string();
        assert!(error.contains("/proc/nonexistent/ns/cgroup"), "{error}");
    }

    #[test]
    fn targets_that_are_not_one_plain_argument_are_refused() {
        for (target, reason) in [
            ("", "empty"),
            ("--force", "read as an option"),
            ("img\nrm", "control characters"),
            (&"x".repeat(1025), "longer than 1024"),
        ] {
            let message = check_target(target).unwrap_err().to_string();
            assert!(message.contains(reason), "{target:?}: {message}");
        }
        check_target("registry.example/os:v2 with 'quotes' $(x); y").unwrap();
    }
}
