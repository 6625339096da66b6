//! The command backend against real processes. The fixtures are small `/bin/sh` scripts run as
//! `["/bin/sh", script, ...]`; the agent itself never invokes a shell.

use crate::support;

use agent::host::command::{CommandConfig, CommandHost};
use agent::host::{HostError, HostUpdater};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use support::wait_for;
use tempfile::TempDir;

const BOOT_ID: &str = "5e0f8c7d-0f6a-4bd8-9a1b-7d281c1e6e5a";

struct Fixture {
    dir: TempDir,
}

impl Fixture {
    fn new() -> Self {
        let fixture = Fixture { dir: tempfile::tempdir().unwrap() };
        std::fs::write(fixture.path("boot_id"), format!("{BOOT_ID}\n")).unwrap();
        fixture
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn dir(&self) -> String {
        self.dir.path().to_str().unwrap().to_owned()
    }

    /// Writes the shell script `body` and returns the argv that runs it with `args`.
    fn script(&self, name: &str, body: &str, args: &[&str]) -> Value {
        let path = self.path(name);
        std::fs::write(&path, body).unwrap();
        let mut argv = vec!["/bin/sh".to_owned(), path.to_str().unwrap().to_owned()];
        argv.extend(args.iter().map(|arg| (*arg).to_owned()));
        json!(argv)
    }

    /// A host with the given commands, and defaults for the others: `check` prints `img-v1`,
    /// `apply` succeeds, `reboot` leaves a file `rebooted`.
    fn host(&self, commands: Value) -> CommandHost {
        let mut config = commands;
        if config.get("check").is_none() {
            config["check"] =
                json!({"argv": self.script("default-check.sh", "echo '  img-v1  '; echo second line", &[])});
        }
        if config.get("apply").is_none() {
            config["apply"] = json!({"argv": self.script("default-apply.sh", "exit 0", &[])});
        }
        if config.get("reboot").is_none() {
            let reboot = self.script("default-reboot.sh", "touch \"$1/rebooted\"", &[&self.dir()]);
            config["reboot"] = json!({"argv": reboot});
        }
        let config = CommandConfig::from_json(&config.to_string(), Path::new("test.json")).unwrap();
        CommandHost::new(config).with_boot_id_path(self.path("boot_id"))
    }

    fn rebooted(&self) -> bool {
        self.path("rebooted").exists()
    }
}

/// The NUL-separated arguments a fixture recorded.
fn recorded_args(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    text.split_terminator('\0').map(str::to_owned).collect()
}

#[tokio::test]
async fn facts_come_from_check_staged_and_the_boot_id() {
    let fixture = Fixture::new();
    let host = fixture.host(json!({"staged": {"argv": fixture.script("staged.sh", "echo img-v2", &[])}}));
    let facts = host.facts().await.unwrap();
    assert_eq!(facts.os_image, "img-v1");
    assert_eq!(facts.staged_image.as_deref(), Some("img-v2"));
    assert_eq!(facts.boot_id.as_str(), BOOT_ID);
    assert_eq!(facts.components_hash, None);

    let nothing_staged = fixture.host(json!({"staged": {"argv": fixture.script("none.sh", "true", &[])}}));
    assert_eq!(nothing_staged.facts().await.unwrap().staged_image, None);
}

#[tokio::test]
async fn stage_passes_the_target_as_exactly_one_last_argument() {
    let fixture = Fixture::new();
    let record = "out=$1; shift; printf '%s\\0' \"$@\" > \"$out\"";
    let args_file = fixture.path("apply.args");
    let host = fixture.host(json!({
        "apply": {"argv": fixture.script("apply.sh", record, &[args_file.to_str().unwrap(), "--stage"])},
    }));
    let pwned = fixture.path("pwned");
    let target = format!(
        "img with spaces 'single' \"double\" $(touch {pwned}) `touch {pwned}`; touch {pwned} && echo | cat * ?",
        pwned = pwned.display()
    );
    host.stage(&target).await.unwrap();
    assert_eq!(recorded_args(&args_file), ["--stage", target.as_str()]);
    assert!(!pwned.exists(), "the target was interpreted by a shell");
}

#[tokio::test]
async fn a_target_that_looks_like_an_option_is_refused_before_running_anything() {
    let fixture = Fixture::new();
    let host =
        fixture.host(json!({"apply": {"argv": fixture.script("apply.sh", "touch \"$1/applied\"", &[&fixture.dir()])}}));
    let error = host.stage("--reboot-now").await.unwrap_err();
    assert!(matches!(error, HostError::InvalidTarget { .. }), "{error:?}");
    assert!(!fixture.path("applied").exists());
}

#[tokio::test]
async fn a_failing_command_reports_its_exit_status_and_the_end_of_its_stderr() {
    let fixture = Fixture::new();
    let failing = "i=1; while [ $i -le 30 ]; do echo \"progress $i\" >&2; i=$((i+1)); done\n\
                   echo 'error: no space left on device' >&2; exit 3";
    let host = fixture.host(json!({"apply": {"argv": fixture.script("apply.sh", failing, &[])}}));
    let error = host.stage("img-v2").await.unwrap_err();
    assert!(!error.is_retryable());
    let message = error.to_string();
    assert!(
        message.starts_with("the apply command \"/bin/sh\" exited with status 3; stderr: progress 22 / "),
        "{message}"
    );
    assert!(message.ends_with("progress 30 / error: no space left on device"), "{message}");
}

#[tokio::test]
async fn a_command_exiting_with_ex_tempfail_is_retryable() {
    let fixture = Fixture::new();
    let tempfail = "echo 'mirror busy, try later' >&2; exit 75";
    let host = fixture.host(json!({"apply": {"argv": fixture.script("apply.sh", tempfail, &[])}}));
    let error = host.stage("img-v2").await.unwrap_err();
    assert!(error.is_retryable(), "{error:?}");
    assert_eq!(
        error.to_string(),
        "the apply command \"/bin/sh\" exited with status 75; stderr: mirror busy, try later"
    );
}

fn process_is_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie waits for its (new) parent to reap it; it runs no more.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_command_that_outlives_its_timeout_is_killed_with_everything_it_started() {
    let fixture = Fixture::new();
    let hanging = "echo $$ > \"$1/sh.pid\"; sleep 600 & echo $! > \"$1/sleep.pid\"; wait";
    let host = fixture.host(json!({
        "apply": {"argv": fixture.script("apply.sh", hanging, &[&fixture.dir()]), "timeoutSeconds": 3},
    }));
    let error = host.stage("img-v2").await.unwrap_err();
    assert!(matches!(error, HostError::TimedOut { .. }), "{error:?}");
    assert_eq!(error.to_string(), "the apply command \"/bin/sh\" did not finish within 3s");
    assert!(error.is_retryable());
    for name in ["sh.pid", "sleep.pid"] {
        let pid = std::fs::read_to_string(fixture.path(name)).unwrap().trim().to_owned();
        wait_for(&format!("{name} {pid} to be killed"), || process_is_gone(&pid)).await;
    }
}

#[tokio::test]
async fn staging_what_is_already_staged_does_not_run_apply() {
    let fixture = Fixture::new();
    let host = fixture.host(json!({
        "apply": {"argv": fixture.script("apply.sh", "exit 1", &[])},
        "staged": {"argv": fixture.script("staged.sh", "echo img-v2", &[])},
    }));
    host.stage("img-v2").await.unwrap();
    assert!(host.stage("img-v3").await.is_err(), "apply runs for anything not staged");
}

#[tokio::test]
async fn a_stage_is_verified_with_the_staged_command() {
    let fixture = Fixture::new();
    let staged = fixture.path("staged");
    let staged_argv = fixture.script("staged.sh", "cat \"$1\" 2>/dev/null || true", &[staged.to_str().unwrap()]);
    // An apply that says it succeeded but staged something else.
    let wrong = fixture.script("apply.sh", "echo img-v9 > \"$1\"", &[staged.to_str().unwrap()]);
    let host = fixture.host(json!({"apply": {"argv": wrong}, "staged": {"argv": staged_argv}}));
    let error = host.stage("img-v2").await.unwrap_err();
    assert!(!error.is_retryable());
    assert_eq!(
        error.to_string(),
        "staging img-v2 failed on the host: the apply command \"/bin/sh\" succeeded, but the staged command \"/bin/sh\" then printed \"img-v9\""
    );
    // One that does what it says.
    let right = fixture.script("apply-right.sh", "echo \"$2\" > \"$1\"", &[staged.to_str().unwrap()]);
    let host = fixture.host(json!({"apply": {"argv": right}, "staged": {"argv": staged_argv}}));
    host.stage("img-v2").await.unwrap();
    assert_eq!(host.facts().await.unwrap().staged_image.as_deref(), Some("img-v2"));
}

#[tokio::test]
async fn a_cancelled_stage_kills_apply_with_everything_it_started() {
    let fixture = Fixture::new();
    let slow = "echo $$ > \"$1/sh.pid\"; sleep 600 & echo $! > \"$1/sleep.pid\"; wait";
    let host = fixture.host(json!({"apply": {"argv": fixture.script("apply.sh", slow, &[&fixture.dir()])}}));
    let staging = tokio::spawn(async move { host.stage("img-v2").await });
    wait_for("apply to start its child", || fixture.path("sleep.pid").exists()).await;
    staging.abort();
    assert!(staging.await.unwrap_err().is_cancelled());
    for name in ["sh.pid", "sleep.pid"] {
        let pid = std::fs::read_to_string(fixture.path(name)).unwrap().trim().to_owned();
        wait_for(&format!("{name} {pid} to be killed"), || process_is_gone(&pid)).await;
    }
}

#[tokio::test]
async fn release_runs_unstage_with_the_target_as_its_last_argument() {
    let fixture = Fixture::new();
    let args_file = fixture.path("unstage.args");
    let record = "out=$1; shift; printf '%s\\0' \"$@\" > \"$out\"";
    let host = fixture.host(json!({
        "unstage": {"argv": fixture.script("unstage.sh", record, &[args_file.to_str().unwrap(), "--discard"])},
    }));
    host.release("img v2").await.unwrap();
    assert_eq!(recorded_args(&args_file), ["--discard", "img v2"]);
    let failing = fixture.host(json!({"unstage": {"argv": fixture.script("unstage-fails.sh", "exit 4", &[])}}));
    let message = failing.release("img-v2").await.unwrap_err().to_string();
    assert!(message.starts_with("the unstage command \"/bin/sh\" exited with status 4"), "{message}");
    // Without an unstage command there is nothing to undo.
    fixture.host(json!({})).release("img-v2").await.unwrap();
    // A target that apply would never have been given was never staged: nothing runs.
    let unstage_args = fixture.path("unstage-again.args");
    let record_again = fixture.script("unstage2.sh", record, &[unstage_args.to_str().unwrap()]);
    fixture.host(json!({"unstage": {"argv": record_again}})).release("--all").await.unwrap();
    assert!(!unstage_args.exists());
}

#[tokio::test]
async fn reboot_runs_only_when_the_target_boots_next() {
    let fixture = Fixture::new();
    let staged = fixture.path("staged");
    let host = fixture.host(json!({
        "staged": {"argv": fixture.script("staged.sh", "cat \"$1\" 2>/dev/null || true", &[staged.to_str().unwrap()])},
    }));
    let error = host.activate_and_reboot("img-v2").await.unwrap_err();
    assert_eq!(error.to_string(), "cannot activate img-v2: nothing is staged; stage the target first");
    std::fs::write(&staged, "img-v3\n").unwrap();
    let error = host.activate_and_reboot("img-v2").await.unwrap_err();
    assert_eq!(error.to_string(), "cannot activate img-v2: img-v3 is staged instead; stage the target first");
    assert!(!fixture.rebooted());

    std::fs::write(&staged, "img-v2\n").unwrap();
    host.activate_and_reboot("img-v2").await.unwrap();
    assert!(fixture.rebooted());
}

#[tokio::test]
async fn without_a_staged_command_reboot_trusts_apply() {
    let fixture = Fixture::new();
    fixture.host(json!({})).activate_and_reboot("img-v2").await.unwrap();
    assert!(fixture.rebooted());
}

#[tokio::test]
async fn a_reboot_command_ended_by_the_shutdown_counts_as_under_way() {
    let fixture = Fixture::new();
    let host = fixture.host(json!({"reboot": {"argv": fixture.script("reboot.sh", "kill -TERM $$", &[])}}));
    host.activate_and_reboot("img-v2").await.unwrap();
    let failing = fixture.host(json!({"reboot": {"argv": fixture.script("reboot.sh", "echo 'Failed to reboot: access denied' >&2; exit 1", &[])}}));
    let message = failing.activate_and_reboot("img-v2").await.unwrap_err().to_string();
    assert_eq!(message, "the reboot command \"/bin/sh\" exited with status 1; stderr: Failed to reboot: access denied");
}

#[tokio::test]
async fn unusable_check_output_is_a_clear_error() {
    let fixture = Fixture::new();
    for (body, expected) in [
        ("true", "printed nothing; it must print the OS image on its first line"),
        ("printf '\\377\\376'", "printed output that is not UTF-8"),
        ("printf 'img\\001v2'", "printed an unusable image"),
    ] {
        let host = fixture.host(json!({"check": {"argv": fixture.script("check.sh", body, &[])}}));
        let message = host.facts().await.unwrap_err().to_string();
        assert!(message.contains(expected), "{body}: {message}");
    }
}

#[tokio::test]
async fn a_missing_program_is_a_clear_error() {
    let fixture = Fixture::new();
    let host = fixture.host(json!({"check": {"argv": ["/nonexistent/os-version"]}}));
    let message = host.facts().await.unwrap_err().to_string();
    assert!(message.starts_with("cannot start the check command \"/nonexistent/os-version\": "), "{message}");
}

/// Whether this process may call setns(2) (CAP_SYS_ADMIN in its effective set).
fn may_setns() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim).unwrap_or("0");
    u64::from_str_radix(effective, 16).is_ok_and(|caps| caps & (1 << 21) != 0)
}

#[tokio::test]
async fn with_nsenter_the_agent_enters_the_namespaces_itself_before_the_command_runs() {
    let fixture = Fixture::new();
    // The command reports the namespaces it runs in; entering the test's own namespaces is a no-op
    // that exercises the whole path (open, fork, setns, exec) without a second host.
    let check =
        fixture.script("check.sh", "readlink /proc/$$/ns/mnt /proc/$$/ns/uts /proc/$$/ns/net | tr '\\n' ' '", &[]);
    let host = fixture.host(json!({"check": {"argv": check}, "nsenter": true})).with_namespaces_of("/proc/self/ns");
    let mut facts = host.facts().await;
    for _ in 0..50 {
        match &facts {
            Err(HostError::CommandStart { source, .. }) if source.raw_os_error() == Some(26) => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                facts = host.facts().await;
            }
            _ => break,
        }
    }
    if may_setns() {
        let own: Vec<String> = ["mnt", "uts", "net"]
            .iter()
            .map(|ns| std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap().display().to_string())
            .collect();
        assert_eq!(facts.unwrap().os_image, own.join(" "));
    } else {
        // Without CAP_SYS_ADMIN, setns fails in the child and the command does not run.
        let message = facts.unwrap_err().to_string();
        assert!(message.contains("entering the host's namespaces or executing the program failed"), "{message}");
    }
    // A namespace that cannot be opened fails the command before anything is forked.
    let missing = fixture.host(json!({"nsenter": true})).with_namespaces_of(fixture.path("no-such-ns"));
    let message = missing.facts().await.unwrap_err().to_string();
    assert!(message.starts_with("cannot start the check command"), "{message}");
    assert!(message.contains("cannot open the namespace"), "{message}");
    assert!(message.contains("no-such-ns/cgroup"), "{message}");
}

#[tokio::test]
async fn the_configuration_is_read_from_its_file() {
    let fixture = Fixture::new();
    let path = fixture.path("host.json");
    std::fs::write(
        &path,
        r#"{"check": {"argv": ["/bin/echo", "img-v7"]}, "apply": {"argv": ["true"]}, "reboot": {"argv": ["true"]}}"#,
    )
    .unwrap();
    let host = CommandHost::from_file(&path).await.unwrap().with_boot_id_path(fixture.path("boot_id"));
    assert_eq!(host.facts().await.unwrap().os_image, "img-v7");
    std::fs::write(&path, r#"{"check": {"argv": []}}"#).unwrap();
    let message = CommandHost::from_file(&path).await.unwrap_err().to_string();
    assert!(message.contains("missing field `apply`"), "{message}");
}

#[test]
fn the_configuration_the_readme_shows_loads() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).unwrap();
    let section = &readme[readme.find("## Host backends").unwrap()..];
    let start = section.find("```json\n").unwrap() + "```json\n".len();
    let end = start + section[start..].find("```").unwrap();
    let json: String = section[start..end].lines().map(str::trim_start).collect::<Vec<_>>().join("\n");
    CommandConfig::from_json(&json, Path::new("README.md")).unwrap();
}
