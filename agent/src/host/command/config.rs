//! The configuration of the command backend: a JSON file, validated when the agent starts.
//!
//! ```json
//! {
//!   "check":  {"argv": ["/usr/local/bin/os-update", "current"], "timeoutSeconds": 60},
//!   "apply":  {"argv": ["/usr/local/bin/os-update", "stage"], "timeoutSeconds": 3600},
//!   "reboot": {"argv": ["systemctl", "reboot"]},
//!   "staged": {"argv": ["/usr/local/bin/os-update", "staged"]},
//!   "unstage": {"argv": ["/usr/local/bin/os-update", "discard"]},
//!   "nsenter": true,
//!   "cgroup": {"root": "/proc/1/root/sys/fs/cgroup", "parent": "update-operator", "memoryMax": 1073741824},
//!   "kubernetes": {"hostRoot": "/host", "record": "/var/lib/update-operator/components.json",
//!                  "kubeadmTimeoutSeconds": 1800,
//!                  "restartKubelet": [{"argv": ["systemctl", "daemon-reload"]}, {"argv": ["systemctl", "restart", "kubelet"]}]}
//! }
//! ```
//!
//! `kubernetes` (optional) enables the `kubeadm-upgrade` step: components are installed under `hostRoot` (where
//! the agent sees the host's root filesystem: `/` for an agent running on the host, the mount of the host's
//! root in a container, which then needs `nsenter: true` so kubeadm runs on the host), the record of what is
//! installed is kept at the host path `record`, kubeadm commands may take `kubeadmTimeoutSeconds` (default
//! 30 min) each, and `restartKubelet` (default: `systemctl daemon-reload`, `systemctl restart kubelet`)
//! restarts the kubelet. Without nsenter, the kubeadm program is run from under `hostRoot`.
//!
//! `cgroup` (optional) runs every command in a cgroup v2 of its own under `parent` of the host's hierarchy, seen by
//! the agent at `root`, with `memoryMax` bytes (`null`: no limit of its own) instead of the agent's cgroup and
//! memory limit (see [`super::cgroup`]).
//!
//! # Guarantees
//! - Unknown fields are errors (a misspelt `"stagd"` is reported, not ignored), and every error
//!   names the field.
//! - A configuration that loads has a program in every command, no NUL in any argument, and every
//!   timeout between 1 s and [`MAX_TIMEOUT_SECONDS`].

use crate::components::DEFAULT_RECORD;
use crate::host::ConfigError;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// The longest timeout accepted: a day. A longer one is a typo, and would leave a node stuck.
pub const MAX_TIMEOUT_SECONDS: u64 = 24 * 60 * 60;

/// The commands that read and change what the host boots.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CommandConfig {
    /// Prints the OS image the host runs, on the first line of its output. Default timeout 60 s.
    pub(super) check: CommandSpec,
    /// Stages the image given as its last argument; exit status 0 means staged. Must be idempotent.
    /// Default timeout 1 h.
    pub(super) apply: CommandSpec,
    /// Reboots the host, e.g. `["systemctl", "reboot"]`. Default timeout 120 s.
    pub(super) reboot: CommandSpec,
    /// Prints the staged image on its first line, or nothing when none is staged. Optional; without
    /// it the host reports no staged image, and staging and activation trust `apply`. Default
    /// timeout 60 s.
    #[serde(default)]
    pub(super) staged: Option<CommandSpec>,
    /// Discards the staged image given as its last argument, so that the next boot runs what the
    /// host runs now; run when the controller gives the target up before the reboot. Must be
    /// idempotent. Optional (hosts that boot a staged image only once it is activated need none).
    /// Default timeout 10 min.
    #[serde(default)]
    pub(super) unstage: Option<CommandSpec>,
    /// Runs every command in the host's namespaces, those of PID 1, entered by the agent before it
    /// executes the command (the agent then runs privileged with `hostPID: true`).
    #[serde(default)]
    pub(super) nsenter: bool,
    /// How Kubernetes components are upgraded; without it the `kubeadm-upgrade` step is refused.
    #[serde(default)]
    pub(super) kubernetes: Option<KubernetesConfig>,
    /// The cgroups the commands run in; without it they run in the agent's (and count against its memory limit).
    #[serde(default)]
    pub(super) cgroup: Option<CgroupConfig>,
}

/// The default memory limit of one host command: 1 GiB, a ceiling against a runaway command rather than a
/// measured need (page cache is reclaimed before anything is killed).
pub const DEFAULT_COMMAND_MEMORY_MAX: u64 = 1024 * 1024 * 1024;
/// The smallest memory limit accepted: less would get any real program OOM-killed.
pub const MIN_COMMAND_MEMORY_MAX: u64 = 16 * 1024 * 1024;

/// The `cgroup` section (module docs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct CgroupConfig {
    #[serde(default = "default_cgroup_root")]
    pub root: std::path::PathBuf,
    #[serde(default = "default_cgroup_parent")]
    pub parent: std::path::PathBuf,
    #[serde(default = "default_memory_max")]
    pub memory_max: Option<u64>,
}

fn default_cgroup_root() -> std::path::PathBuf {
    "/proc/1/root/sys/fs/cgroup".into()
}

fn default_cgroup_parent() -> std::path::PathBuf {
    "update-operator".into()
}

fn default_memory_max() -> Option<u64> {
    Some(DEFAULT_COMMAND_MEMORY_MAX)
}

impl CgroupConfig {
    fn validate(&self) -> Result<(), String> {
        if !self.root.is_absolute() {
            return Err(format!("cgroup.root {:?} is not an absolute path", self.root));
        }
        let plain = self.parent.components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if self.parent.as_os_str().is_empty() || !plain {
            return Err(format!(
                "cgroup.parent {:?} must be a relative path below the root, without `.` or `..`",
                self.parent
            ));
        }
        if let Some(bytes) = self.memory_max
            && bytes < MIN_COMMAND_MEMORY_MAX
        {
            return Err(format!("cgroup.memoryMax is {bytes}; it must be at least {MIN_COMMAND_MEMORY_MAX} (16 MiB)"));
        }
        Ok(())
    }
}

/// The `kubernetes` section (module docs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct KubernetesConfig {
    #[serde(default = "default_host_root")]
    pub host_root: std::path::PathBuf,
    #[serde(default = "default_record")]
    pub record: std::path::PathBuf,
    #[serde(default)]
    pub kubeadm_timeout_seconds: Option<u64>,
    #[serde(default)]
    pub restart_kubelet: Option<Vec<CommandSpec>>,
}

fn default_host_root() -> std::path::PathBuf {
    "/".into()
}

fn default_record() -> std::path::PathBuf {
    DEFAULT_RECORD.into()
}

impl KubernetesConfig {
    fn validate(&self) -> Result<(), String> {
        if !self.host_root.is_absolute() {
            return Err(format!("kubernetes.hostRoot {:?} is not an absolute path", self.host_root));
        }
        if !self.record.is_absolute() {
            return Err(format!("kubernetes.record {:?} is not an absolute path", self.record));
        }
        if let Some(seconds) = self.kubeadm_timeout_seconds
            && !(1..=MAX_TIMEOUT_SECONDS).contains(&seconds)
        {
            return Err(format!(
                "kubernetes.kubeadmTimeoutSeconds is {seconds}; it must be between 1 and {MAX_TIMEOUT_SECONDS}"
            ));
        }
        for (index, spec) in self.restart_kubelet.iter().flatten().enumerate() {
            spec.validate(&format!("kubernetes.restartKubelet[{index}]"))?;
        }
        Ok(())
    }
}

/// One command: its argument vector (never run through a shell) and its time limit.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct CommandSpec {
    pub argv: Vec<String>,
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

impl CommandSpec {
    /// The time limit, `default` when none is configured.
    pub fn timeout(&self, default: Duration) -> Duration {
        self.timeout_seconds.map_or(default, Duration::from_secs)
    }

    /// The program (first element of `argv`).
    pub fn program(&self) -> &str {
        self.argv.first().map_or("", String::as_str)
    }

    fn validate(&self, field: &str) -> Result<(), String> {
        let Some(program) = self.argv.first() else {
            return Err(format!("{field}.argv is empty; it must name the program to run"));
        };
        if program.is_empty() {
            return Err(format!("{field}.argv[0] is empty; it must name the program to run"));
        }
        if let Some(index) = self.argv.iter().position(|arg| arg.contains('\0')) {
            return Err(format!("{field}.argv[{index}] contains a NUL character"));
        }
        if let Some(seconds) = self.timeout_seconds
            && !(1..=MAX_TIMEOUT_SECONDS).contains(&seconds)
        {
            return Err(format!("{field}.timeoutSeconds is {seconds}; it must be between 1 and {MAX_TIMEOUT_SECONDS}"));
        }
        Ok(())
    }
}

impl CommandConfig {
    /// Parses and validates the configuration in `json`; `origin` names it in errors.
    pub fn from_json(json: &str, origin: &Path) -> Result<Self, ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid { path: origin.to_owned(), reason };
        let config: CommandConfig = serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
        config.check.validate("check").map_err(invalid)?;
        config.apply.validate("apply").map_err(invalid)?;
        config.reboot.validate("reboot").map_err(invalid)?;
        if let Some(staged) = &config.staged {
            staged.validate("staged").map_err(invalid)?;
        }
        if let Some(unstage) = &config.unstage {
            unstage.validate("unstage").map_err(invalid)?;
        }
        if let Some(kubernetes) = &config.kubernetes {
            kubernetes.validate().map_err(invalid)?;
        }
        if let Some(cgroup) = &config.cgroup {
            cgroup.validate().map_err(invalid)?;
        }
        Ok(config)
    }

    /// Reads, parses and validates the configuration file at `path`.
    pub async fn load(path: &Path) -> Result<Self, ConfigError> {
        let json = tokio::fs::read_to_string(path)
            .await
            .map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Self::from_json(&json, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<CommandConfig, String> {
        CommandConfig::from_json(json, Path::new("/etc/agent/host.json")).map_err(|e| e.to_string())
    }

    const MINIMAL: &str = r#"{"check": {"argv": ["os-version"]}, "apply": {"argv": ["os-stage"]}, "reboot": {"argv": ["systemctl", "reboot"]}}"#;

    #[test]
    fn a_minimal_configuration_loads_with_defaults() {
        let config = parse(MINIMAL).unwrap();
        assert!(!config.nsenter);
        assert!(config.staged.is_none());
        assert!(config.unstage.is_none());
        assert_eq!(config.reboot.argv, ["systemctl", "reboot"]);
        assert_eq!(config.apply.timeout(Duration::from_secs(7)), Duration::from_secs(7));
        assert!(config.kubernetes.is_none());
        assert!(config.cgroup.is_none());
        let cgroup = parse(&format!(r#"{}, "cgroup": {{}}}}"#, &MINIMAL[..MINIMAL.len() - 1])).unwrap().cgroup.unwrap();
        assert_eq!(cgroup.root, Path::new("/proc/1/root/sys/fs/cgroup"));
        assert_eq!(cgroup.parent, Path::new("update-operator"));
        assert_eq!(cgroup.memory_max, Some(DEFAULT_COMMAND_MEMORY_MAX));
        let unlimited = format!(r#"{}, "cgroup": {{"memoryMax": null}}}}"#, &MINIMAL[..MINIMAL.len() - 1]);
        assert_eq!(parse(&unlimited).unwrap().cgroup.unwrap().memory_max, None);
        let with =
            parse(&format!(r#"{}, "kubernetes": {{}}}}"#, &MINIMAL[..MINIMAL.len() - 1])).unwrap().kubernetes.unwrap();
        assert_eq!((with.host_root.to_str(), with.record.to_str()), (Some("/"), Some(DEFAULT_RECORD)));
    }

    #[test]
    fn every_bad_field_is_named() {
        let cases = [
            (r#"{"check": {"argv": []}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}}"#, "check.argv is empty"),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": [""]}, "reboot": {"argv": ["r"]}}"#,
                "apply.argv[0] is empty",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r", "x\u0000y"]}}"#,
                "reboot.argv[1] contains a NUL character",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"], "timeoutSeconds": 0}, "reboot": {"argv": ["r"]}}"#,
                "apply.timeoutSeconds is 0; it must be between 1 and 86400",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "staged": {"argv": ["s"], "timeoutSeconds": 90000}}"#,
                "staged.timeoutSeconds is 90000",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "unstage": {"argv": []}}"#,
                "unstage.argv is empty",
            ),
            (r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}}"#, "missing field `reboot`"),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "stagd": {"argv": ["s"]}}"#,
                "unknown field `stagd`, expected one of `check`, `apply`, `reboot`, `staged`, `unstage`, `nsenter`, `kubernetes`, `cgroup`",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "cgroup": {"root": "sys/fs/cgroup"}}"#,
                "cgroup.root \"sys/fs/cgroup\" is not an absolute path",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "cgroup": {"parent": "../kubepods"}}"#,
                "cgroup.parent \"../kubepods\" must be a relative path below the root",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "cgroup": {"parent": "/"}}"#,
                "cgroup.parent \"/\" must be a relative path",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "cgroup": {"memoryMax": 1024}}"#,
                "cgroup.memoryMax is 1024; it must be at least 16777216",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "cgroup": {"memory": 1}}"#,
                "unknown field `memory`, expected one of `root`, `parent`, `memoryMax`",
            ),
            (
                r#"{"check": {"argv": ["c"], "timeout": 5}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}}"#,
                "unknown field `timeout`, expected `argv` or `timeoutSeconds`",
            ),
            (
                r#"{"check": {"argv": "os-version"}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}}"#,
                "invalid type: string",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "nsenter": "yes"}"#,
                "invalid type: string \"yes\", expected a boolean",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "#,
                "EOF while parsing",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "kubernetes": {"hostRoot": "host"}}"#,
                "kubernetes.hostRoot \"host\" is not an absolute path",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "kubernetes": {"restartKubelet": [{"argv": []}]}}"#,
                "kubernetes.restartKubelet[0].argv is empty",
            ),
            (
                r#"{"check": {"argv": ["c"]}, "apply": {"argv": ["a"]}, "reboot": {"argv": ["r"]}, "kubernetes": {"kubeadmTimeoutSeconds": 0}}"#,
                "kubernetes.kubeadmTimeoutSeconds is 0",
            ),
        ];
        for (json, expected) in cases {
            let message = parse(json).unwrap_err();
            assert!(message.starts_with("host command configuration /etc/agent/host.json: "), "{message}");
            assert!(message.contains(expected), "expected {expected:?} in {message:?}");
        }
    }

    #[tokio::test]
    async fn an_unreadable_file_is_a_clear_error() {
        let message = CommandConfig::load(Path::new("/nonexistent/host.json")).await.unwrap_err().to_string();
        assert!(
            message.starts_with("cannot read the host command configuration /nonexistent/host.json: "),
            "{message}"
        );
    }
}
