//! The parts of the cgroup arrangement that need no cgroup hierarchy, against a temporary directory laid out as a
//! cgroup v2 one (regular files). The real hierarchy is exercised by `agent/tests/it/command_cgroup.rs`.

use super::*;

fn layout(controllers: &str, subtree_control: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cgroup.controllers"), controllers).unwrap();
    std::fs::write(dir.path().join("cgroup.subtree_control"), subtree_control).unwrap();
    dir
}

#[test]
fn the_memory_controller_is_enabled_for_the_commands_when_offered() {
    let dir = layout("cpuset cpu io memory pids\n", "\n");
    enable_memory(dir.path()).unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("cgroup.subtree_control")).unwrap(), "+memory");
    // Already enabled: nothing is written.
    let dir = layout("memory pids\n", "pids memory\n");
    enable_memory(dir.path()).unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("cgroup.subtree_control")).unwrap(), "pids memory\n");
}

#[test]
fn without_the_memory_controller_no_limit_can_be_set_and_the_error_says_why() {
    let dir = layout("hugetlb\n", "");
    let error = enable_memory(dir.path()).unwrap_err().to_string();
    assert!(error.starts_with("cannot limit the memory of host commands under "), "{error}");
    assert!(error.contains("the memory controller is not enabled for it"), "{error}");
    assert_eq!(std::fs::read_to_string(dir.path().join("cgroup.subtree_control")).unwrap(), "");
}

#[tokio::test]
async fn a_root_that_is_not_a_cgroup_v2_hierarchy_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let cgroups = Cgroups::new(dir.path(), Path::new("update-operator"), None);
    let error = cgroups.create("check").await.unwrap_err().to_string();
    assert!(error.starts_with("no cgroup v2 hierarchy (no cgroup.controllers) at the cgroup root "), "{error}");
    assert!(!dir.path().join("update-operator").exists());
}

#[tokio::test]
async fn a_cgroup_whose_limit_cannot_be_written_is_removed_again() {
    // A directory where memory.max does not appear (as in a hierarchy without the memory controller).
    let dir = layout("memory\n", "");
    let parent = dir.path().join("update-operator");
    std::fs::create_dir(&parent).unwrap();
    std::fs::write(parent.join("cgroup.controllers"), "memory\n").unwrap();
    std::fs::write(parent.join("cgroup.subtree_control"), "").unwrap();
    let cgroups = Cgroups::new(dir.path(), Path::new("update-operator"), Some(64 << 20));
    let error = cgroups.create("kubeadm").await.unwrap_err().to_string();
    assert!(error.starts_with("cannot limit the memory of the cgroup "), "{error}");
    let left: Vec<_> = std::fs::read_dir(&parent).unwrap().flatten().filter(|e| e.path().is_dir()).collect();
    assert!(left.is_empty(), "{left:?}");
}
