//! Runs one host command: an argument vector, never a shell, with a time limit and bounded output.
//!
//! # Guarantees
//! - The command gets no stdin; at most [`MAX_STDOUT`] bytes of its stdout and the last
//!   [`MAX_STDERR`] bytes of its stderr are kept, the rest is read and dropped, so a chatty
//!   command neither blocks nor fills the agent's memory.
//! - The command runs in a process group of its own. When it outlives its time limit, or the
//!   future running it is dropped (the agent cancelled the work), the whole group (the command and
//!   whatever it started) is killed.
//! - With a cgroup, the child moves itself into it after entering the namespaces and before executing the
//!   program ([`super::cgroup`]); a failed move fails the start.
//!
//! # Assumptions
//! - Commands do not leave processes behind that keep their stdout or stderr open; such a command
//!   counts as running until its time limit.

use super::namespaces::Namespaces;
use rustix::fd::OwnedFd;
use rustix::process::{Pid, Signal, kill_process_group};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Stdout kept: the commands print one image reference.
pub(super) const MAX_STDOUT: usize = 64 * 1024;
/// Stderr kept (its end, where the reason for a failure usually is).
pub(super) const MAX_STDERR: usize = 16 * 1024;

/// A command that ran to its end.
#[derive(Debug)]
pub(super) struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr_tail: Vec<u8>,
}

/// Why a command did not run to its end.
#[derive(Debug)]
pub(super) enum RunError {
    /// It could not be started.
    Start(std::io::Error),
    /// It outlived its time limit and was killed.
    TimedOut,
    /// Waiting for it failed.
    Wait(std::io::Error),
}

/// Where a command runs: the namespaces it enters, and the cgroup it moves into (an open cgroup directory).
#[derive(Debug, Default)]
pub(super) struct Placement {
    pub namespaces: Option<Arc<Namespaces>>,
    pub cgroup: Option<OwnedFd>,
}

/// Runs `argv` (program first), placed as `placement` says, and waits at most `timeout` for it to end.
pub(super) async fn run(argv: &[String], placement: Placement, timeout: Duration) -> Result<Finished, RunError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(RunError::Start(std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty argv")));
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let Placement { namespaces, cgroup } = placement;
    let what = match (namespaces.is_some(), cgroup.is_some()) {
        (false, false) => None,
        (true, false) => Some("entering the host's namespaces or executing the program failed"),
        (false, true) => Some("moving into the command's cgroup or executing the program failed"),
        (true, true) => {
            Some("entering the host's namespaces, moving into the command's cgroup or executing the program failed")
        }
    };
    if what.is_some() {
        // SAFETY: the closure runs in the forked child before exec and only makes setns, openat and write system
        // calls on descriptors opened before the fork and a fixed name (no allocation, no locks).
        unsafe {
            command.pre_exec(move || {
                if let Some(namespaces) = &namespaces {
                    namespaces.enter()?;
                }
                if let Some(dir) = &cgroup {
                    super::cgroup::join(dir)?;
                }
                Ok(())
            });
        }
    }
    let mut child = command.spawn().map_err(|error| match what {
        Some(what) => RunError::Start(std::io::Error::new(error.kind(), format!("{what}: {error}"))),
        None => RunError::Start(error),
    })?;
    let mut group = GroupKiller(child.id().and_then(|id| i32::try_from(id).ok()).and_then(Pid::from_raw));
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let ran = tokio::time::timeout(timeout, async {
        tokio::join!(read_head(stdout, MAX_STDOUT), read_tail(stderr, MAX_STDERR), child.wait())
    })
    .await;
    match ran {
        Ok((stdout, stderr_tail, Ok(status))) => {
            group.disarm();
            Ok(Finished { status, stdout, stderr_tail })
        }
        Ok((_, _, Err(error))) => Err(RunError::Wait(error)),
        Err(_elapsed) => {
            group.kill();
            let _ = child.start_kill();
            let _ = child.wait().await;
            Err(RunError::TimedOut)
        }
    }
}

/// Kills a command's process group when dropped, unless disarmed once the command ended.
struct GroupKiller(Option<Pid>);

impl GroupKiller {
    fn kill(&mut self) {
        // IMPORTANT: never signal group 1 (kill(-1) signals every process we may signal).
        if let Some(group) = self.0.take().filter(|pid| !pid.is_init()) {
            let _ = kill_process_group(group, Signal::KILL);
        }
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads `reader` to its end, keeping the first `limit` bytes.
async fn read_head<R: AsyncRead + Unpin>(reader: Option<R>, limit: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(mut reader) = reader else { return kept };
    let mut buffer = [0u8; 8192];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = limit - kept.len();
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        }
    }
}

/// Reads `reader` to its end, keeping the last `limit` bytes.
async fn read_tail<R: AsyncRead + Unpin>(reader: Option<R>, limit: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(mut reader) = reader else { return kept };
    let mut buffer = [0u8; 8192];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                kept.extend_from_slice(&buffer[..n]);
                // Drop the front only now and then, not on every read.
                if kept.len() > 2 * limit {
                    kept.drain(..kept.len() - limit);
                }
            }
        }
    }
    if kept.len() > limit {
        kept.drain(..kept.len() - limit);
    }
    kept
}

/// "exited with status 3" or "was killed by signal 9".
pub(super) fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended without an exit status".to_owned(),
    }
}

/// The last lines of stderr for an error message: at most `MAX_LINES` lines and `MAX_CHARS`
/// characters, joined with " / ".
pub(super) fn stderr_summary(stderr_tail: &[u8]) -> String {
    const MAX_LINES: usize = 10;
    const MAX_CHARS: usize = 800;
    crate::host::text::tail(&String::from_utf8_lossy(stderr_tail), MAX_LINES, MAX_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stderr_summary_is_the_end_of_stderr_even_when_it_is_not_utf8() {
        let many: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let summary = stderr_summary(many.as_bytes());
        assert!(summary.starts_with("line 21 / ") && summary.ends_with("line 30"), "{summary}");
        assert!(stderr_summary(&vec![b'x'; 5000]).len() <= 800);
        assert_eq!(stderr_summary(b"bad \xff byte"), "bad \u{fffd} byte");
    }

    #[tokio::test]
    async fn output_beyond_the_limits_is_dropped_without_blocking_the_command() {
        // 1 MiB on each stream: far more than a pipe buffer, so a reader that stopped would hang.
        let argv: Vec<String> =
            ["/bin/sh", "-c", "head -c 1048576 /dev/zero; head -c 1048575 /dev/zero >&2; printf E >&2"]
                .map(str::to_owned)
                .to_vec();
        let finished = run(&argv, Placement::default(), Duration::from_secs(60)).await.unwrap();
        assert!(finished.status.success());
        assert_eq!(finished.stdout.len(), MAX_STDOUT);
        assert_eq!(finished.stderr_tail.len(), MAX_STDERR);
        assert_eq!(finished.stderr_tail.last(), Some(&b'E'));
    }

    #[tokio::test]
    async fn a_program_that_does_not_exist_cannot_start() {
        let error =
            run(&["/nonexistent/program".to_owned()], Placement::default(), Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(error, RunError::Start(ref e) if e.kind() == std::io::ErrorKind::NotFound), "{error:?}");
        assert!(matches!(run(&[], Placement::default(), Duration::from_secs(5)).await, Err(RunError::Start(_))));
    }
}
