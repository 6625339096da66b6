//! The command backend's cgroups against this machine's real cgroup v2 hierarchy: a host command runs in a cgroup of
//! its own under the configured parent, not in the agent's (so that its memory is charged there, not to the
//! agent's limit), whatever it leaves behind is killed with its cgroup, and cgroups left by an earlier agent are
//! emptied and removed.
//!
//! What is real here: the kernel's cgroup v2 hierarchy (mkdir, migration through `cgroup.procs` from the forked
//! child, `cgroup.kill`, rmdir). What is not: the memory charge itself. On a host where the memory controller is
//! bound to cgroup v1 (a hybrid layout, as on the machine these tests were written on) the v2 hierarchy has no
//! `memory.max`; there the tests check that the command's cgroup is not the agent's (in cgroup v2 a process's
//! memory is charged to the cgroup it is in, Documentation/admin-guide/cgroup-v2.rst, "Memory Ownership") and
//! that asking for a limit fails with a clear error; where the memory controller is available they check the
//! limit the command runs under. The limit logic is also tested against a temporary directory laid out as a
//! hierarchy (`agent/src/host/command/cgroup/tests.rs`).
//!
//! They need root and a writable cgroup v2 mount: CI fails without them, elsewhere they skip.

use crate::support::wait_for;
use agent::host::HostUpdater;
use agent::host::command::{CommandConfig, CommandHost};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A writable cgroup v2 mount of this machine (the first one of `/proc/self/mountinfo` where a cgroup can be
/// created), or `None` outside CI.
fn hierarchy() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let found = mountinfo.lines().find_map(|line| {
        let (fields, after) = line.split_once(" - ")?;
        if after.split_whitespace().next() != Some("cgroup2") {
            return None;
        }
        let mount = PathBuf::from(fields.split_whitespace().nth(4)?);
        // One name per probe: tests probe at the same time (eight at a time), and a name taken by another test's
        // probe made the mount look unwritable.
        static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let probe = mount.join(format!("update-operator-probe-{}-{n}", std::process::id()));
        std::fs::create_dir(&probe).ok()?;
        std::fs::remove_dir(&probe).ok()?;
        Some(mount)
    });
    assert!(found.is_some() || std::env::var_os("CI").is_none(), "no writable cgroup v2 hierarchy (CI runs as root)");
    if found.is_none() {
        eprintln!("skipping: no writable cgroup v2 hierarchy");
    }
    found
}

/// The cgroup v2 path of process `pid` (`/proc/PID/cgroup`'s `0::` line).
fn cgroup_of(pid: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    text.lines().find_map(|l| l.strip_prefix("0::")).unwrap().to_owned()
}

fn process_is_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A parent cgroup of its own for each test, removed with whatever is left in it.
struct Parent {
    mount: PathBuf,
    name: String,
}

impl Parent {
    fn new(mount: &Path, test: &str) -> Parent {
        Parent { mount: mount.to_owned(), name: format!("update-operator-test-{}-{test}", std::process::id()) }
    }

    fn path(&self) -> PathBuf {
        self.mount.join(&self.name)
    }

    /// The cgroups under the parent.
    fn children(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.path()) else { return Vec::new() };
        entries.flatten().filter(|e| e.path().is_dir()).map(|e| e.file_name().to_string_lossy().into_owned()).collect()
    }
}

impl Drop for Parent {
    fn drop(&mut self) {
        for child in self.children() {
            let path = self.path().join(child);
            let _ = std::fs::write(path.join("cgroup.kill"), "1");
            for _ in 0..100 {
                if std::fs::remove_dir(&path).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let _ = std::fs::remove_dir(self.path());
    }
}

/// A host whose `check` runs `script` with `/bin/sh` (its first line is the reported image) and whose commands run
/// in cgroups under `parent`.
fn host(dir: &Path, parent: &Parent, script: &str, memory_max: Value, nsenter: bool) -> CommandHost {
    let path = dir.join("check.sh");
    std::fs::write(&path, script).unwrap();
    let config = json!({
        "check": {"argv": ["/bin/sh", path]},
        "apply": {"argv": ["/bin/sh", path]},
        "reboot": {"argv": ["/bin/true"]},
        "nsenter": nsenter,
        "cgroup": {"root": parent.mount, "parent": parent.name, "memoryMax": memory_max},
    });
    std::fs::write(dir.join("boot_id"), "5e0f8c7d-0f6a-4bd8-9a1b-7d281c1e6e5a\n").unwrap();
    let host = CommandHost::new(CommandConfig::from_json(&config.to_string(), Path::new("test.json")).unwrap())
        .with_boot_id_path(dir.join("boot_id"));
    if nsenter { host.with_namespaces_of("/proc/self/ns") } else { host }
}

/// Whether this process may call setns(2) (CAP_SYS_ADMIN in its effective set).
fn may_setns() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim).unwrap_or("0");
    u64::from_str_radix(effective, 16).is_ok_and(|caps| caps & (1 << 21) != 0)
}

#[tokio::test]
async fn a_host_command_runs_in_a_cgroup_of_its_own_outside_the_agents_which_is_removed_after() {
    let Some(mount) = hierarchy() else { return };
    let dir = tempfile::tempdir().unwrap();
    let agent = cgroup_of("self");
    for nsenter in [false, true] {
        if nsenter && !may_setns() {
            continue;
        }
        let parent = Parent::new(&mount, &format!("own-{nsenter}"));
        let host = host(dir.path(), &parent, "sed -n 's/^0:://p' /proc/self/cgroup", json!(null), nsenter);
        for run in 0..2 {
            let command = host.facts().await.unwrap().os_image;
            // The agent's cgroup path is relative to the root of its cgroup namespace, as the command's.
            assert_ne!(command, agent, "the command ran in the agent's cgroup");
            let expected = format!("/{}/check-{}-{run}", parent.name, std::process::id());
            assert_eq!(command, expected, "nsenter {nsenter}");
            assert!(parent.children().is_empty(), "left behind: {:?}", parent.children());
        }
    }
}

#[tokio::test]
async fn what_a_command_leaves_running_is_killed_with_its_cgroup() {
    let Some(mount) = hierarchy() else { return };
    let dir = tempfile::tempdir().unwrap();
    let parent = Parent::new(&mount, "leftover");
    // A daemon of its own session: outside the command's process group, only its cgroup still holds it.
    let script = format!(
        "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > {}/daemon.pid; echo img-v1",
        dir.path().display()
    );
    let host = host(dir.path(), &parent, &script, json!(null), false);
    host.stage("img-v2").await.unwrap();
    let pid = std::fs::read_to_string(dir.path().join("daemon.pid")).unwrap().trim().to_owned();
    wait_for(&format!("the daemon {pid} to be killed"), || process_is_gone(&pid)).await;
    wait_for("the command's cgroup to be removed", || parent.children().is_empty()).await;
}

#[tokio::test]
async fn a_cancelled_command_is_killed_with_everything_in_its_cgroup() {
    let Some(mount) = hierarchy() else { return };
    let dir = tempfile::tempdir().unwrap();
    let parent = Parent::new(&mount, "cancelled");
    // The daemon escapes the command's process group (which cancelling kills); the command then hangs.
    let script = format!(
        "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! > {}/daemon.pid; sleep 600",
        dir.path().display()
    );
    let host = host(dir.path(), &parent, &script, json!(null), false);
    let daemon_pid = dir.path().join("daemon.pid");
    let cancelled = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        tokio::select! {
            _ = host.stage("img-v2") => panic!("the hanging apply ended"),
            _ = async {
                while !std::fs::read_to_string(&daemon_pid).is_ok_and(|pid| pid.ends_with('\n')) {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            } => {}
        }
    });
    cancelled.await.unwrap();
    let pid = std::fs::read_to_string(&daemon_pid).unwrap().trim().to_owned();
    wait_for(&format!("the daemon {pid} to be killed"), || process_is_gone(&pid)).await;
    wait_for("the command's cgroup to be removed", || parent.children().is_empty()).await;
}

#[tokio::test]
async fn the_cgroups_an_earlier_agent_left_are_emptied_and_removed_before_the_first_command() {
    let Some(mount) = hierarchy() else { return };
    let dir = tempfile::tempdir().unwrap();
    let parent = Parent::new(&mount, "stale");
    let stale = parent.path().join("kubeadm-1-0");
    std::fs::create_dir_all(&stale).unwrap();
    let mut orphan = Command::new("sleep").arg("600").spawn().unwrap();
    std::fs::write(stale.join("cgroup.procs"), orphan.id().to_string()).unwrap();
    assert_eq!(cgroup_of(&orphan.id().to_string()), format!("/{}/kubeadm-1-0", parent.name));

    let host = host(dir.path(), &parent, "echo img-v1", json!(null), false);
    assert_eq!(host.facts().await.unwrap().os_image, "img-v1");
    assert!(!stale.exists(), "the stale cgroup is still there");
    let status = orphan.wait().unwrap();
    assert!(!status.success(), "the orphan was not killed: {status:?}");
}

#[tokio::test]
async fn a_command_runs_under_its_memory_limit_or_not_at_all() {
    let Some(mount) = hierarchy() else { return };
    let dir = tempfile::tempdir().unwrap();
    let parent = Parent::new(&mount, "memory");
    let script = format!("cat \"{}$(sed -n 's/^0:://p' /proc/self/cgroup)/memory.max\"", mount.display());
    let host = host(dir.path(), &parent, &script, json!(64 << 20), false);
    let offered = std::fs::read_to_string(mount.join("cgroup.subtree_control")).unwrap();
    let facts = host.facts().await;
    if offered.split_whitespace().any(|c| c == "memory") {
        assert_eq!(facts.unwrap().os_image, (64u64 << 20).to_string());
    } else {
        // This hierarchy has no memory controller (cgroup v1 holds it): no command runs without its limit.
        let error = facts.unwrap_err().to_string();
        assert!(error.starts_with("cannot start the check command \"/bin/sh\": cannot limit the memory"), "{error}");
        assert!(error.contains("the memory controller is not enabled"), "{error}");
    }
    assert!(parent.children().is_empty(), "left behind: {:?}", parent.children());
}
