//! Entering a host process's namespaces before a command is executed, as `nsenter --target PID` does, from the
//! agent itself (no nsenter binary in the image).
//!
//! # Guarantees
//! - The namespace files are opened by the agent before the command is forked, so the forked child only calls
//!   `setns` on open descriptors (async-signal-safe) and then executes the command; a namespace that cannot be
//!   opened or entered fails the command's start with the namespace and the OS error, never a panic.
//! - The namespaces are entered in nsenter's order (cgroup, IPC, UTS, network, PID, mount): mount last, after
//!   which the child's root and working directory are the host's and the program is looked up on the host's file
//!   system. In the host's cgroup namespace the child sees the whole cgroup hierarchy, which moving itself out of
//!   the agent's cgroup needs ([`super::cgroup`]).
//! - Entering a PID namespace applies to the processes the command starts, not the command itself (as with
//!   `setns(2)`); with `hostPID: true` the agent shares the host's PID namespace anyway.
//!
//! # Assumptions
//! - The agent has the privileges `setns` needs (`CAP_SYS_ADMIN`, and `CAP_SYS_PTRACE` to open another
//!   user's `/proc/PID/ns/*`): the command-backend manifest runs it privileged with `hostPID: true`.

use rustix::fd::{AsFd, OwnedFd};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
use std::path::{Path, PathBuf};

/// The namespaces entered, in order, with their file names under `/proc/PID/ns`.
pub(super) const ENTERED: [(&str, LinkNameSpaceType); 6] = [
    ("cgroup", LinkNameSpaceType::ControlGroup),
    ("ipc", LinkNameSpaceType::InterProcessCommunication),
    ("uts", LinkNameSpaceType::HostNameAndNISDomainName),
    ("net", LinkNameSpaceType::Network),
    ("pid", LinkNameSpaceType::ProcessID),
    ("mnt", LinkNameSpaceType::Mount),
];

/// The directory of the host's init process's namespaces.
pub(super) const HOST_NAMESPACES: &str = "/proc/1/ns";

/// A namespace that could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the namespace {path}: {source}")]
pub struct OpenError {
    /// The namespace file.
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

/// Open namespace files of one process, ready to be entered by a forked child.
#[derive(Debug)]
pub(super) struct Namespaces {
    files: Vec<(&'static str, LinkNameSpaceType, OwnedFd)>,
}

impl Namespaces {
    /// Opens the namespaces of [`ENTERED`] in `dir` (a `/proc/PID/ns` directory).
    pub(super) fn open(dir: &Path) -> Result<Namespaces, OpenError> {
        let mut files = Vec::with_capacity(ENTERED.len());
        for (name, kind) in ENTERED {
            let path = dir.join(name);
            let file = std::fs::File::open(&path).map_err(|source| OpenError { path: path.clone(), source })?;
            files.push((name, kind, OwnedFd::from(file)));
        }
        Ok(Namespaces { files })
    }

    /// Moves the calling thread into every namespace. Only `setns` system calls: safe between `fork` and `exec`.
    pub(super) fn enter(&self) -> std::io::Result<()> {
        for (_, kind, fd) in &self.files {
            move_into_link_name_space(fd.as_fd(), Some(*kind))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_namespace_of_a_process_opens_and_a_missing_one_is_named() {
        let own = Namespaces::open(Path::new("/proc/self/ns")).unwrap();
        assert_eq!(
            own.files.iter().map(|(name, ..)| *name).collect::<Vec<_>>(),
            ["cgroup", "ipc", "uts", "net", "pid", "mnt"]
        );
        let error = Namespaces::open(Path::new("/proc/nonexistent/ns")).unwrap_err();
        assert_eq!(error.path, Path::new("/proc/nonexistent/ns/cgroup"));
        assert!(error.to_string().starts_with("cannot open the namespace /proc/nonexistent/ns/cgroup: "), "{error}");
    }
}
