//! Host commands outside the agent's cgroup: each command runs in a cgroup v2 of its own, created for it in the
//! host's hierarchy (not under the agent's pod), with its own memory limit, so that `kubeadm upgrade apply` and
//! the OS update commands are not charged to the agent's memory limit (32 MiB) and cannot get it OOM-killed.
//!
//! Entering the host's namespaces does not leave a cgroup (`setns` changes what a process sees, not where it is
//! accounted), and a container's memory limit covers every process of its cgroup: without this, a host command
//! is a child of the agent, in the agent container's cgroup.
//!
//! How (cgroup v2, Documentation/admin-guide/cgroup-v2.rst, "Organizing Processes", "Delegation Containment"):
//! 1. Once per agent process, the parent cgroup (`<root>/<parent>`) is created; with a memory limit, the memory
//!    controller is enabled for its children (`+memory` in its `cgroup.subtree_control`: the parent is the
//!    agent's, it holds no process). Cgroups left by an earlier agent process (one that died mid-command) are
//!    emptied (`cgroup.kill`) and removed: their commands die with the agent that ran them, as they did in the
//!    agent's own cgroup.
//! 2. For each command, `<parent>/<command>-<agent pid>-<n>` is created and its `memory.max` written; the agent
//!    opens the directory.
//! 3. The forked child, after entering the host's namespaces (the cgroup namespace among them), opens
//!    `cgroup.procs` of that directory and writes `0` (itself), then executes the program: everything the
//!    program maps or starts is charged to the command's cgroup. The kernel checks a migration against the
//!    cgroup namespace the `cgroup.procs` file was opened in (kernel/cgroup/cgroup.c, `__cgroup_procs_write`
//!    passes the open-time namespace to `cgroup_attach_permissions` since commit e57457641613, "cgroup: Use
//!    open-time cgroup namespace for process migration perm checks", January 2022, backported to stable): both the agent's cgroup and the command's must be visible from
//!    it, which they are from the host's (PID 1's) cgroup namespace, and not from a container's own. So the file
//!    is opened by the child after `setns`, not by the agent.
//! 4. When the command ends, is killed or is cancelled, whatever is left in its cgroup is killed (`cgroup.kill`,
//!    Linux 5.14; before that each process of `cgroup.procs`) and the cgroup removed.
//!
//! # Guarantees
//! - Only `openat` and `write` on descriptors and fixed names happen between `fork` and `exec` (no allocation).
//! - No command runs unless it was moved: a failed move fails the command's start (the program is not executed).
//! - Nothing under the parent cgroup but the agent's own per-command cgroups is created or removed, and nothing
//!   outside it is written (the root's `cgroup.subtree_control` belongs to the host's init system).
//!
//! # Assumptions
//! - `root` is where the agent sees the host's cgroup v2 hierarchy (`/proc/1/root/sys/fs/cgroup` for a
//!   privileged agent with `hostPID: true`), the memory controller is enabled in the root's
//!   `cgroup.subtree_control` (systemd does so), and the agent may write there (root, or `CAP_DAC_OVERRIDE`).
//! - `nsenter: true` when the agent runs in a container with its own cgroup namespace; an agent running on the
//!   host itself shares the host's.

use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long removing a cgroup waits for its killed processes to exit.
const REMOVE_WAIT: Duration = Duration::from_secs(5);

/// A cgroup operation that failed, with the file and the OS error.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}: {source}", path.display())]
pub struct CgroupError {
    /// What was done ("cannot create the cgroup").
    pub action: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

impl CgroupError {
    fn new(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        CgroupError { action, path: path.to_owned(), source }
    }
}

/// The agent's cgroups for host commands (module docs).
#[derive(Debug)]
pub(super) struct Cgroups {
    root: PathBuf,
    parent: PathBuf,
    memory_max: Option<u64>,
    prepared: tokio::sync::OnceCell<()>,
    next: AtomicU64,
}

impl Cgroups {
    /// `parent` is relative to `root`; `memory_max` in bytes, `None` for no limit of the commands' own.
    pub(super) fn new(root: &Path, parent: &Path, memory_max: Option<u64>) -> Cgroups {
        Cgroups {
            root: root.to_owned(),
            parent: root.join(parent),
            memory_max,
            prepared: tokio::sync::OnceCell::new(),
            next: AtomicU64::new(0),
        }
    }

    /// Creates a cgroup for one run of `command` (step 2), after the parent's preparation (step 1, once).
    pub(super) async fn create(&self, command: &str) -> Result<CommandCgroup, CgroupError> {
        self.prepared.get_or_try_init(|| self.prepare()).await?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.parent.join(format!("{}-{}-{n}", command.replace(' ', "-"), std::process::id()));
        std::fs::create_dir(&path).map_err(|e| CgroupError::new("cannot create the cgroup", &path, e))?;
        // From here on the cgroup is removed again whatever happens.
        let mut cgroup = CommandCgroup { path, dir: None, removed: false };
        if let Some(bytes) = self.memory_max {
            write_existing(&cgroup.path.join("memory.max"), &bytes.to_string())
                .map_err(|e| CgroupError::new("cannot limit the memory of the cgroup", &cgroup.path, e))?;
        }
        let dir = std::fs::File::open(&cgroup.path)
            .map_err(|e| CgroupError::new("cannot open the cgroup", &cgroup.path, e))?;
        cgroup.dir = Some(OwnedFd::from(dir));
        Ok(cgroup)
    }

    /// Step 1: the parent cgroup, its memory controller, and no cgroup left by an earlier agent.
    async fn prepare(&self) -> Result<(), CgroupError> {
        let controllers = self.root.join("cgroup.controllers");
        std::fs::metadata(&controllers).map_err(|e| {
            CgroupError::new("no cgroup v2 hierarchy (no cgroup.controllers) at the cgroup root", &self.root, e)
        })?;
        match std::fs::create_dir_all(&self.parent) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(CgroupError::new("cannot create the cgroup", &self.parent, e)),
        }
        if self.memory_max.is_some() {
            enable_memory(&self.parent)?;
        }
        let entries =
            std::fs::read_dir(&self.parent).map_err(|e| CgroupError::new("cannot list the cgroup", &self.parent, e))?;
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let path = entry.path();
                tracing::info!(cgroup = %path.display(), "removing the cgroup of a host command of an earlier agent");
                kill_all(&path);
                remove_when_empty(&path).await.map_err(|e| CgroupError::new("cannot remove the cgroup", &path, e))?;
            }
        }
        Ok(())
    }
}

/// Enables the memory controller for the children of `parent` (its `cgroup.subtree_control`), which the
/// parent's parent must offer (its `cgroup.controllers`).
pub(super) fn enable_memory(parent: &Path) -> Result<(), CgroupError> {
    let available = parent.join("cgroup.controllers");
    let offered = std::fs::read_to_string(&available)
        .map_err(|e| CgroupError::new("cannot read", &available, e))?
        .split_whitespace()
        .any(|c| c == "memory");
    if !offered {
        let reason = "the memory controller is not enabled for it (its parent's cgroup.subtree_control has no \
                      memory; on a cgroup v1 or hybrid host the memory controller is not in the v2 hierarchy)";
        return Err(CgroupError::new(
            "cannot limit the memory of host commands under",
            parent,
            std::io::Error::new(ErrorKind::Unsupported, reason),
        ));
    }
    let subtree = parent.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&subtree).map_err(|e| CgroupError::new("cannot read", &subtree, e))?;
    if !enabled.split_whitespace().any(|c| c == "memory") {
        write_existing(&subtree, "+memory").map_err(|e| CgroupError::new("cannot write", &subtree, e))?;
    }
    Ok(())
}

/// Writes `value` to an existing file (cgroup interface files are never created).
fn write_existing(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(path)?.write_all(value.as_bytes())
}

/// Kills every process in the cgroup `path`, best effort (the cgroup may already be gone).
fn kill_all(path: &Path) {
    match write_existing(&path.join("cgroup.kill"), "1") {
        Ok(()) => {}
        // Before Linux 5.14: each process of the cgroup (their IDs in the agent's PID namespace, the host's with
        // `hostPID: true`).
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let procs = std::fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
            for pid in
                procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()).filter_map(rustix::process::Pid::from_raw)
            {
                // IMPORTANT: never signal PID 1, whatever a file says.
                if !pid.is_init() {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        Err(e) => tracing::warn!(cgroup = %path.display(), error = %e, "cannot kill the processes of the cgroup"),
    }
}

/// Removes the cgroup `path` once its (killed) processes have exited; at most [`REMOVE_WAIT`].
async fn remove_when_empty(path: &Path) -> std::io::Result<()> {
    let deadline = tokio::time::Instant::now() + REMOVE_WAIT;
    loop {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The cgroup of one command run: removed (with whatever is left in it) by [`CommandCgroup::remove`], or when
/// dropped.
#[derive(Debug)]
pub(super) struct CommandCgroup {
    path: PathBuf,
    dir: Option<OwnedFd>,
    removed: bool,
}

impl CommandCgroup {
    /// The cgroup's directory as the agent sees it.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The open directory, for [`join`] in the forked child.
    pub(super) fn dir(&self) -> Option<&OwnedFd> {
        self.dir.as_ref()
    }

    /// Kills what is left in the cgroup and removes it, waiting a little for the killed processes.
    pub(super) async fn remove(mut self) {
        self.removed = true;
        self.dir = None;
        kill_all(&self.path);
        if let Err(error) = remove_when_empty(&self.path).await {
            tracing::warn!(cgroup = %self.path.display(), %error, "cannot remove the cgroup of a host command; the next agent start removes it");
        }
    }
}

impl Drop for CommandCgroup {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // Cancelled: kill now, remove when the processes are gone (in the background when a runtime runs).
        self.dir = None;
        kill_all(&self.path);
        if std::fs::remove_dir(&self.path).is_err()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let path = self.path.clone();
            runtime.spawn(async move {
                if let Err(error) = remove_when_empty(&path).await {
                    tracing::warn!(cgroup = %path.display(), %error, "cannot remove the cgroup of a cancelled host command");
                }
            });
        }
    }
}

/// Moves the calling process into the cgroup `dir` (step 3). Only `openat` and `write`: safe between `fork` and
/// `exec`.
pub(super) fn join(dir: &OwnedFd) -> std::io::Result<()> {
    let procs = rustix::fs::openat(dir, c"cgroup.procs", OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::io::write(&procs, b"0")?;
    Ok(())
}

#[cfg(test)]
mod tests;
