//! The demo program, run as a user runs it (stdout not a terminal): a rollout that completes exits
//! 0 with a summary; each fault option ends as it should, with the reason.

use std::process::Command;

fn demo(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(["--nodes", "6", "--control-planes", "1", "--timeout", "240"])
        .args(args)
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    (output.status.code().unwrap_or(-1), format!("{stdout}\n--- stderr\n{stderr}"))
}

#[test]
fn a_rollout_exits_0_with_step_lines_and_a_summary() {
    let (code, out) = demo(&[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(" worker-0 stage\n") && out.contains(" worker-0 done\n"), "no step lines: {out}");
    for line in ["wall time", "evictions", "refused by a PDB (429)", "Node writes, agents       18"] {
        assert!(out.contains(line), "no {line:?} in the summary: {out}");
    }
    // Four writes of the controller per node (stage, drain with the cordon, reboot, done with the uncordon and the
    // taint of outdated nodes off), and one more for each node the rollout's first plan does not start: the taint of
    // outdated nodes put on (`preferUpdatedNodes`, on by default; the first plan's starts carry it in their stage
    // write), four or five of the six. The summary counts requests, and one the API server refuses because the Node
    // changed in the same instant is sent again: 24 or 25 were seen without the taint in runs of the same commit,
    // 28 with it. Never a second round of writes.
    let controller: Option<u32> =
        out.lines().find_map(|l| l.strip_prefix("Node writes, controller")).and_then(|n| n.trim().parse().ok());
    assert!(controller.is_some_and(|n| (28..=32).contains(&n)), "controller writes {controller:?}: {out}");
    assert!(out.contains("rollout complete: every node runs v2"), "{out}");
}

#[test]
fn a_failing_update_exits_1_naming_the_node_and_the_reason() {
    let (code, out) = demo(&["--fail-update", "worker-2"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("rollout stopped: FailureBudgetExhausted") && out.contains("worker-2: StageFailed"), "{out}");
}

#[test]
fn a_blocking_pdb_exits_1_with_the_blocked_nodes() {
    let (code, out) = demo(&["--blocking-pdb"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("blocked: worker-") && out.contains("DrainTimedOut"), "{out}");
    assert!(!out.contains("safety violations"), "{out}");
}

#[test]
fn a_killed_controller_is_replaced_and_the_rollout_completes() {
    let (code, out) = demo(&["--kill-controller-after", "3"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("fault: killed the leading controller replica"), "{out}");
}
