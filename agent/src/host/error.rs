//! Errors of the host seam: [`HostError`] at run time, [`ConfigError`] when a backend is set up.

use crate::components::InstallError;
use std::path::PathBuf;
use std::time::Duration;

/// Why a host operation failed. The `Display` text is written for people: it ends up in the node's
/// `state-message` annotation and in an Event. [`HostError::is_retryable`] tells whether trying the
/// same operation again later may succeed without anyone changing anything.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The host's update service could not be reached, or the connection broke.
    #[error("cannot reach {service} for {operation}: {reason}")]
    Unreachable { service: String, operation: String, reason: String },
    /// An operation did not finish within its time limit.
    #[error("{operation} did not finish within {}s", after.as_secs())]
    TimedOut { operation: String, after: Duration },
    /// Another client held the host's update lock for every attempt.
    #[error(
        "{operation}: the host's update lock was still held after {attempts} attempts (another update client is at work on this host)"
    )]
    Locked { operation: String, attempts: usize },
    /// The host's update service refused a request.
    #[error("{operation} was refused by {service} (HTTP {status}): {message}")]
    Refused { service: String, operation: String, status: u16, message: String },
    /// The host's update service answered something this agent does not understand.
    #[error("{operation}: unexpected answer from {service}: {reason}")]
    BadAnswer { service: String, operation: String, reason: String },
    /// The target cannot be handed to this host's updater.
    #[error("target {target:?} cannot be used on this host: {reason}")]
    InvalidTarget { target: String, reason: String },
    /// The update repository does not offer the target.
    #[error("target {target} is not offered by the update repository; available: {}", list_or_none(available))]
    TargetNotOffered { target: String, available: Vec<String> },
    /// A step of the update failed on the host (its updater says why).
    #[error("{step} failed on the host: {message}")]
    StepFailed { step: String, message: String },
    /// The host's updater could not fetch from its update repository (unreachable, an error or
    /// overload answer, a broken transfer): another attempt may pass.
    #[error("{step} failed on the host (the update repository may be unreachable; trying again): {message}")]
    RepositoryFailed { step: String, message: String },
    /// Activation was asked for a target that is not staged.
    #[error("cannot activate {target}: {}", staged_instead(staged.as_deref()))]
    NotStaged { target: String, staged: Option<String> },
    /// The host's update state does not allow the operation, and did not settle into one that does.
    #[error("{operation}: {detail}")]
    UnexpectedState { operation: String, detail: String },
    /// The host is unknown to the simulated hosts' server.
    #[error("the dev cluster has no simulated host {node}: {message}")]
    UnknownHost { node: String, message: String },
    /// A configured host command could not be started.
    #[error("cannot start the {command} command {program:?}: {source}")]
    CommandStart {
        command: &'static str,
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// A configured host command exited unsuccessfully. `temporary` when it exited with
    /// [`EX_TEMPFAIL`] (75), the `sysexits.h` status for "a temporary failure: try again later".
    #[error("the {command} command {program:?} {status}{}", stderr_suffix(stderr_tail))]
    CommandFailed { command: &'static str, program: String, status: String, stderr_tail: String, temporary: bool },
    /// A configured host command printed something unusable.
    #[error("the {command} command {program:?} printed {reason}")]
    BadOutput { command: &'static str, program: String, reason: String },
    /// The backend cannot carry out the operation on this kind of host.
    #[error("{operation} is not supported on this host: {reason}")]
    Unsupported { operation: String, reason: String },
    /// The Kubernetes components could not be installed (see [`InstallError`]).
    #[error("installing the Kubernetes components: {0}")]
    Install(#[from] InstallError),
    /// The Kubernetes components could not be fetched ahead (see [`InstallError`]); nothing was installed.
    #[error("fetching the Kubernetes components ahead: {0}")]
    Fetch(InstallError),
    /// The host's boot ID could not be read.
    #[error("cannot read the boot ID from {}: {reason}", path.display())]
    BootId { path: PathBuf, reason: String },
}

/// The exit status of a command that failed temporarily (`EX_TEMPFAIL` of `sysexits.h`): the
/// command backend tries it again, as mail transfer agents do.
pub const EX_TEMPFAIL: i32 = 75;

impl HostError {
    /// Whether trying the same operation again later may succeed without anyone changing anything:
    /// transport failures, timeouts, a held update lock, an update state that another client is
    /// still changing, an update repository the host's updater could not fetch from, a server-side error or overload (HTTP 5xx or 429), a command that exited
    /// with [`EX_TEMPFAIL`], a component download that failed, and a command that could not start for want of a resource (a process
    /// slot, memory, a file descriptor) or because its program was being written. Everything else
    /// needs a different target, another configuration or a human.
    pub fn is_retryable(&self) -> bool {
        match self {
            HostError::Unreachable { .. }
            | HostError::TimedOut { .. }
            | HostError::Locked { .. }
            | HostError::RepositoryFailed { .. }
            | HostError::UnexpectedState { .. } => true,
            HostError::Refused { status, .. } => *status >= 500 || *status == 429,
            HostError::CommandFailed { temporary, .. } => *temporary,
            // An unreachable or failing artifact server may come back; a hash mismatch never passes.
            HostError::Install(error) | HostError::Fetch(error) => matches!(error, InstallError::Download { .. }),
            HostError::CommandStart { source, .. } => matches!(
                rustix::io::Errno::from_io_error(source),
                Some(
                    rustix::io::Errno::AGAIN
                        | rustix::io::Errno::NOMEM
                        | rustix::io::Errno::MFILE
                        | rustix::io::Errno::NFILE
                        | rustix::io::Errno::TXTBSY
                )
            ),
            HostError::BadAnswer { .. }
            | HostError::InvalidTarget { .. }
            | HostError::TargetNotOffered { .. }
            | HostError::StepFailed { .. }
            | HostError::NotStaged { .. }
            | HostError::UnknownHost { .. }
            | HostError::BadOutput { .. }
            | HostError::Unsupported { .. }
            | HostError::BootId { .. } => false,
        }
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() { "none".to_owned() } else { items.join(", ") }
}

fn staged_instead(staged: Option<&str>) -> String {
    match staged {
        Some(other) => format!("{other} is staged instead; stage the target first"),
        None => "nothing is staged; stage the target first".to_owned(),
    }
}

fn stderr_suffix(stderr_tail: &str) -> String {
    if stderr_tail.is_empty() { "; it wrote nothing to stderr".to_owned() } else { format!("; stderr: {stderr_tail}") }
}

/// Why a backend could not be set up from its configuration. Never retryable: the configuration
/// has to be fixed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read the host command configuration {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not valid.
    #[error("host command configuration {}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    /// The simulated hosts' base URL is not usable.
    #[error("simulated hosts' base URL {url:?}: {reason}")]
    BaseUrl { url: String, reason: String },
    /// The node name is empty.
    #[error("the node name is empty")]
    EmptyNodeName,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_sentences_for_the_state_message() {
        let not_offered =
            HostError::TargetNotOffered { target: "1.21.0".into(), available: vec!["1.20.0".into(), "1.20.1".into()] };
        assert_eq!(
            not_offered.to_string(),
            "target 1.21.0 is not offered by the update repository; available: 1.20.0, 1.20.1"
        );
        let none_offered = HostError::TargetNotOffered { target: "1.21.0".into(), available: vec![] };
        assert!(none_offered.to_string().ends_with("available: none"));
        let not_staged = HostError::NotStaged { target: "1.21.0".into(), staged: Some("1.20.0".into()) };
        assert_eq!(not_staged.to_string(), "cannot activate 1.21.0: 1.20.0 is staged instead; stage the target first");
        let failed = HostError::CommandFailed {
            command: "apply",
            program: "/usr/bin/os-update".into(),
            status: "exited with status 3".into(),
            stderr_tail: "no space left on device".into(),
            temporary: false,
        };
        assert_eq!(
            failed.to_string(),
            "the apply command \"/usr/bin/os-update\" exited with status 3; stderr: no space left on device"
        );
    }

    #[test]
    fn only_transient_failures_are_retryable() {
        let refused =
            |status| HostError::Refused { service: "s".into(), operation: "o".into(), status, message: "m".into() };
        for status in [500, 502, 503, 504, 429] {
            assert!(refused(status).is_retryable(), "{status}");
        }
        for status in [400, 403, 404, 409, 422] {
            assert!(!refused(status).is_retryable(), "{status}");
        }
        assert!(HostError::Locked { operation: "o".into(), attempts: 3 }.is_retryable());
        assert!(HostError::TimedOut { operation: "o".into(), after: Duration::from_secs(1) }.is_retryable());
        assert!(
            HostError::Unreachable { service: "s".into(), operation: "o".into(), reason: "r".into() }.is_retryable()
        );
        assert!(!HostError::StepFailed { step: "s".into(), message: "m".into() }.is_retryable());
        assert!(!HostError::TargetNotOffered { target: "t".into(), available: vec![] }.is_retryable());
        assert!(
            !HostError::BadAnswer { service: "s".into(), operation: "o".into(), reason: "r".into() }.is_retryable()
        );
    }

    #[test]
    fn a_command_is_retried_only_after_a_temporary_failure() {
        let failed = |temporary| HostError::CommandFailed {
            command: "apply",
            program: "p".into(),
            status: "exited with status 1".into(),
            stderr_tail: String::new(),
            temporary,
        };
        assert!(failed(true).is_retryable());
        assert!(!failed(false).is_retryable());
        let start = |errno: i32| HostError::CommandStart {
            command: "apply",
            program: "p".into(),
            source: std::io::Error::from_raw_os_error(errno),
        };
        let (enoent, eacces, eagain, etxtbsy) = (2, 13, 11, 26);
        assert!(!start(enoent).is_retryable());
        assert!(!start(eacces).is_retryable());
        assert!(start(eagain).is_retryable());
        assert!(start(etxtbsy).is_retryable());
    }
}
