//! NodeOpUpgrade: the NodeOp that upgrades Kairos, with the Kairos operator's upgrade command, and its status.

use super::job::owner_reference;
use shared::crd::nodeop::{
    DEFAULT_HOST_MOUNT_PATH, NodeOp, NodeOpDrainOptions, NodeOpSpec, NodeOpStatus, NodeOpUpgrade, NodeOpUpgradeSpec,
    NodeOpUpgradeStatus,
};

/// Host paths every upgrade leaves alone: the pod's own copies (Kubernetes injects them) would replace the
/// node's.
pub const ALWAYS_EXCLUDED: [&str; 2] = ["/etc/hostname", "/etc/hosts"];
/// Label on the NodeOp of a NodeOpUpgrade, naming it (the Kairos operator's).
pub const UPGRADE_LABEL: &str = "nodeopupgrade.kairos.io/name";

/// The NodeOp that carries out `upgrade`: named as it, in its namespace, owned by it; the upgrade command of
/// [`command`], the host at `/host`, always cordoned and drained, rebooted when the active partition is
/// upgraded (the default), the selector, image, pull secrets, concurrency, `stopOnFailure` and
/// `uncordonOnFailure` passed through. `None` when the NodeOpUpgrade has no name or uid (never stored).
pub fn nodeop_for(upgrade: &NodeOpUpgrade) -> Option<NodeOp> {
    let name = upgrade.metadata.name.clone()?;
    let uid = upgrade.metadata.uid.as_deref()?;
    let spec = &upgrade.spec;
    let mut op = NodeOp::new(
        &name,
        NodeOpSpec {
            node_selector: spec.node_selector.clone(),
            command: command(spec),
            host_mount_path: DEFAULT_HOST_MOUNT_PATH.to_owned(),
            image: Some(spec.image.clone()),
            image_pull_secrets: spec.image_pull_secrets.clone(),
            cordon: Some(true),
            uncordon_on_failure: spec.uncordon_on_failure,
            drain_options: Some(NodeOpDrainOptions { enabled: Some(true), ..Default::default() }),
            reboot_on_success: Some(spec.upgrade_active.unwrap_or(true)),
            backoff_limit: None,
            concurrency: spec.concurrency,
            stop_on_failure: spec.stop_on_failure,
            preflight: None,
        },
    );
    op.metadata.namespace = upgrade.metadata.namespace.clone();
    op.metadata.labels = Some([(UPGRADE_LABEL.to_owned(), name.clone())].into());
    op.metadata.owner_references =
        Some(vec![owner_reference("operator.kairos.io/v1alpha1", "NodeOpUpgrade", &name, uid)]);
    Some(op)
}

/// The upgrade command, as the Kairos operator's NodeOpUpgrade runs it: `/bin/sh -c SCRIPT`, where the script
/// (unless `force`) exits early when the host already runs the image's Kairos version (`KAIROS_VERSION`, the
/// software version prefix and version, from `/etc/kairos-release` or else `/etc/os-release`, of the image and
/// of the host), binds the host's `/dev` and `/run`, and runs `kairos-agent [--debug] upgrade [--recovery]
/// --source dir:/` with an `--exclude-path` per [`ALWAYS_EXCLUDED`] path and per `excludePaths` entry: the
/// recovery partition if `upgradeRecovery`, the active one if `upgradeActive` (default) or if neither is asked.
/// Paths are single-quoted, so a path is one argument whatever it contains.
pub fn command(spec: &NodeOpUpgradeSpec) -> Vec<String> {
    let host = DEFAULT_HOST_MOUNT_PATH;
    let mut script = String::from("set -x -e\n\n");
    if !spec.force.unwrap_or(false) {
        script.push_str(&format!(
            r#"kairos_version() {{
    (. "$1" && echo "${{KAIROS_VERSION}}-${{KAIROS_SOFTWARE_VERSION_PREFIX}}${{KAIROS_SOFTWARE_VERSION}}")
}}
release_file() {{
    if [ -f "$1/etc/kairos-release" ]; then echo "$1/etc/kairos-release"; else echo "$1/etc/os-release"; fi
}}
UPDATE_VERSION=$(kairos_version "$(release_file "")")
CURRENT_VERSION=$(kairos_version "$(release_file {host})")
if [ "$CURRENT_VERSION" = "$UPDATE_VERSION" ]; then
    echo "Up to date: ${{CURRENT_VERSION}}"
    exit 0
fi

"#
        ));
    }
    script.push_str(&format!("mount --rbind {host}/dev /dev\nmount --rbind {host}/run /run\n\n"));
    let agent = if spec.debug.unwrap_or(false) { "kairos-agent --debug" } else { "kairos-agent" };
    let excludes: String = ALWAYS_EXCLUDED
        .iter()
        .copied()
        .chain(spec.exclude_paths.iter().map(String::as_str))
        .map(|path| format!(" --exclude-path '{}'", path.replace('\'', r"'\''")))
        .collect();
    let recovery = spec.upgrade_recovery.unwrap_or(false);
    let active = spec.upgrade_active.unwrap_or(true) || !recovery;
    if recovery {
        script.push_str(&format!("{agent} upgrade --recovery --source dir:/{excludes}\n"));
    }
    if active {
        script.push_str(&format!("{agent} upgrade --source dir:/{excludes}\n"));
    }
    script.push_str("exit 0\n");
    vec!["/bin/sh".to_owned(), "-c".to_owned(), script]
}

/// The NodeOpUpgrade's status from its NodeOp's (`None`: the NodeOp is not there yet), keeping its conditions.
pub fn status_from(upgrade: &NodeOpUpgrade, nodeop: Option<&NodeOpStatus>, message: String) -> NodeOpUpgradeStatus {
    let current = upgrade.status.clone().unwrap_or_default();
    let name = upgrade.metadata.name.clone().unwrap_or_default();
    match nodeop {
        Some(status) => NodeOpUpgradeStatus {
            phase: status.phase,
            node_op_name: name,
            node_statuses: status.node_statuses.clone(),
            message,
            last_updated: current.last_updated,
            conditions: status.conditions.clone(),
        },
        None => NodeOpUpgradeStatus { node_op_name: name, message, ..current },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn upgrade(spec: serde_json::Value) -> NodeOpUpgrade {
        serde_json::from_value(json!({
            "apiVersion": "operator.kairos.io/v1alpha1", "kind": "NodeOpUpgrade",
            "metadata": {"name": "up", "namespace": "ns", "uid": "u9"},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn the_default_upgrade_checks_the_version_and_upgrades_the_active_partition() {
        let spec = upgrade(json!({"image": "quay.io/kairos/x:v3"})).spec;
        let command = command(&spec);
        assert_eq!(command[..2], ["/bin/sh", "-c"]);
        let script = &command[2];
        assert!(script.contains(r#"if [ "$CURRENT_VERSION" = "$UPDATE_VERSION" ]"#), "{script}");
        assert!(script.contains("mount --rbind /host/dev /dev\nmount --rbind /host/run /run"), "{script}");
        assert!(
            script.contains(
                "kairos-agent upgrade --source dir:/ --exclude-path '/etc/hostname' --exclude-path '/etc/hosts'\n"
            ),
            "{script}"
        );
        assert!(!script.contains("--recovery"), "{script}");
    }

    #[test]
    fn recovery_force_debug_and_exclusions_change_the_command() {
        let spec = upgrade(json!({"image": "i", "upgradeRecovery": true, "upgradeActive": false, "force": true,
                                  "debug": true, "excludePaths": ["/var/it's"]}))
        .spec;
        let script = command(&spec).remove(2);
        assert!(!script.contains("UPDATE_VERSION"), "force skips the version check: {script}");
        assert!(script.contains(r"kairos-agent --debug upgrade --recovery --source dir:/ --exclude-path '/etc/hostname' --exclude-path '/etc/hosts' --exclude-path '/var/it'\''s'"), "{script}");
        assert!(!script.contains("upgrade --source"), "{script}");
        let both = command(&upgrade(json!({"image": "i", "upgradeRecovery": true})).spec).remove(2);
        let recovery = both.find("upgrade --recovery").unwrap();
        assert!(
            both[recovery..].contains("kairos-agent upgrade --source dir:/"),
            "recovery first, then active: {both}"
        );
    }

    #[test]
    fn the_nodeop_cordons_drains_reboots_and_belongs_to_the_upgrade() {
        let up = upgrade(json!({"image": "img", "concurrency": 1, "stopOnFailure": true,
                                "imagePullSecrets": [{"name": "private-registry-secret"}],
                                "nodeSelector": {"matchLabels": {"kairos.io/managed": "true"}}}));
        let op = nodeop_for(&up).unwrap();
        assert_eq!(op.metadata.name.as_deref(), Some("up"));
        assert_eq!(op.metadata.namespace.as_deref(), Some("ns"));
        let owner = &op.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("NodeOpUpgrade", "u9", Some(true)));
        let spec = &op.spec;
        assert_eq!((spec.cordon, spec.reboot_on_success, spec.stop_on_failure), (Some(true), Some(true), Some(true)));
        assert_eq!(spec.drain_options.as_ref().and_then(|d| d.enabled), Some(true));
        assert_eq!((spec.concurrency, spec.image.as_deref()), (1, Some("img")));
        assert_eq!(spec.image_pull_secrets[0].name, "private-registry-secret");
        assert_eq!(spec.node_selector, up.spec.node_selector);
        let no_active = nodeop_for(&upgrade(json!({"image": "i", "upgradeActive": false}))).unwrap();
        assert_eq!(no_active.spec.reboot_on_success, Some(false));
    }
}
