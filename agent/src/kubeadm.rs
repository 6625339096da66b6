//! The commands of a kubeadm Kubernetes upgrade on one host, by the host's role, as kubeadm documents the
//! order (<https://kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/>): the first
//! control-plane node plans and applies the new version, every other node runs `kubeadm upgrade node`, and
//! each then restarts its kubelet once its new binary is in place.
//!
//! Commands are argv vectors, never a shell line: the version is one argument, checked to be a version (so
//! nothing from the cluster can pass for an option), and the paths come from the verified components.

use shared::components::VerifiedComponent;
use shared::version::KubeVersion;

/// The role a host plays in an upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The control-plane node that upgrades the cluster's control plane (`kubeadm upgrade apply`).
    FirstControlPlane,
    /// Any other control-plane node.
    ControlPlane,
    Worker,
}

/// kubeadm's directory of patches for its static Pod manifests.
pub const PATCHES_DIR: &str = "/etc/kubernetes/patches";

/// Why the commands cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the components include no kubeadm binary (a component installed as .../kubeadm)")]
    NoKubeadm,
}

/// The commands that restart the kubelet once its new binary is in place (systemd hosts).
pub const RESTART_KUBELET: &[&[&str]] = &[&["systemctl", "daemon-reload"], &["systemctl", "restart", "kubelet"]];

/// Whether `component` is the kubelet or kubectl binary: those are replaced only after kubeadm upgraded the
/// node, right before the kubelet restarts (kubeadm's documented order), so that a kubelet that restarts for
/// any other reason meanwhile never runs a version newer than its control plane.
pub fn replaced_after_kubeadm(component: &VerifiedComponent) -> bool {
    !component.extract && matches!(component.install_path.rsplit('/').next(), Some("kubelet" | "kubectl"))
}

/// The kubeadm argv vectors to run, in order; each must succeed before the next runs. The kubelet restart
/// ([`RESTART_KUBELET`]) follows them once the kubelet binary is replaced.
pub fn upgrade_commands(
    role: Role,
    version: &KubeVersion,
    components: &[VerifiedComponent],
) -> Result<Vec<Vec<String>>, PlanError> {
    let kubeadm = components
        .iter()
        .find(|c| !c.extract && c.install_path.rsplit('/').next() == Some("kubeadm"))
        .map(|c| c.install_path.clone())
        .ok_or(PlanError::NoKubeadm)?;
    let patches = components.iter().any(|c| c.install_path.starts_with(&format!("{PATCHES_DIR}/")));
    let patch_args: &[&str] = if patches { &["--patches", PATCHES_DIR] } else { &[] };
    let kubeadm_argv = |args: &[&str]| -> Vec<String> {
        std::iter::once(kubeadm.as_str())
            .chain(args.iter().copied())
            .chain(patch_args.iter().copied())
            .map(str::to_owned)
            .collect()
    };
    let version = version.to_string();
    let commands = match role {
        // `upgrade plan` only reads: it takes no patches.
        Role::FirstControlPlane => vec![
            vec![kubeadm.clone(), "upgrade".into(), "plan".into(), version.clone()],
            kubeadm_argv(&["upgrade", "apply", "--yes", &version]),
        ],
        Role::ControlPlane | Role::Worker => vec![kubeadm_argv(&["upgrade", "node"])],
    };
    Ok(commands)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::components::{Sha256, Source};

    fn component(path: &str, extract: bool) -> VerifiedComponent {
        VerifiedComponent {
            source: Source::Download(format!("https://dl.k8s.io{path}")),
            hash: Sha256::of(path.as_bytes()),
            install_path: path.into(),
            extract,
        }
    }

    fn strings(commands: &[&[&str]]) -> Vec<Vec<String>> {
        commands.iter().map(|c| c.iter().map(|s| (*s).to_owned()).collect()).collect()
    }

    #[test]
    fn the_first_control_plane_node_plans_and_applies_the_version() {
        let version: KubeVersion = "1.34.1".parse().unwrap();
        let components = [component("/opt/cni/bin", true), component("/usr/local/bin/kubeadm", false)];
        assert_eq!(
            upgrade_commands(Role::FirstControlPlane, &version, &components).unwrap(),
            strings(&[
                &["/usr/local/bin/kubeadm", "upgrade", "plan", "v1.34.1"],
                &["/usr/local/bin/kubeadm", "upgrade", "apply", "--yes", "v1.34.1"],
            ])
        );
    }

    #[test]
    fn other_nodes_run_upgrade_node_with_the_patches_when_there_are_some() {
        let version: KubeVersion = "v1.34.1".parse().unwrap();
        let components = [
            component("/run/state/bin/kubeadm", false),
            component("/etc/kubernetes/patches/kube-apiserver0+json.yaml", false),
        ];
        for role in [Role::ControlPlane, Role::Worker] {
            assert_eq!(
                upgrade_commands(role, &version, &components).unwrap(),
                strings(&[&["/run/state/bin/kubeadm", "upgrade", "node", "--patches", "/etc/kubernetes/patches"],])
            );
        }
        let first = upgrade_commands(Role::FirstControlPlane, &version, &components).unwrap();
        assert_eq!(first[0], strings(&[&["/run/state/bin/kubeadm", "upgrade", "plan", "v1.34.1"]])[0]);
        assert_eq!(
            first[1],
            strings(&[&[
                "/run/state/bin/kubeadm",
                "upgrade",
                "apply",
                "--yes",
                "v1.34.1",
                "--patches",
                "/etc/kubernetes/patches"
            ]])[0]
        );
    }

    #[test]
    fn only_the_kubelet_and_kubectl_binaries_wait_for_kubeadm() {
        let late: Vec<bool> = [
            component("/usr/local/bin/kubelet", false),
            component("/usr/local/bin/kubectl", false),
            component("/usr/local/bin/kubeadm", false),
            component("/opt/cni/bin", true),
            component("/etc/kubernetes/patches/kubelet", true),
        ]
        .iter()
        .map(replaced_after_kubeadm)
        .collect();
        assert_eq!(late, [true, true, false, false, false]);
    }

    #[test]
    fn without_kubeadm_nothing_is_planned() {
        let version: KubeVersion = "v1.34.1".parse().unwrap();
        let components = [component("/usr/local/bin/kubelet", false), component("/usr/local/bin/kubeadm", true)];
        assert_eq!(upgrade_commands(Role::Worker, &version, &components), Err(PlanError::NoKubeadm));
    }
}
