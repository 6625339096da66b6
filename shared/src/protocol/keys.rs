//! Label and annotation keys of the node protocol, and who writes each.
//!
//! # Invariants
//! - One writer per key: the controller writes [`CONTROLLER_KEYS`], the node's own agent writes
//!   [`AGENT_KEYS`]. Neither side ever writes a key of the other.
//! - Every write is a JSON merge patch of only the keys that change (see [`super::patch`]).

/// Prefix of every key.
pub const PREFIX: &str = "update.edgeless.systems/";

/// Label that opts a node in: the agent DaemonSet is scheduled on, and the controller manages,
/// only nodes that carry it with the value [`MANAGED_VALUE`]. Set by the cluster administrator.
pub const MANAGED_LABEL: &str = "update.edgeless.systems/managed";
/// The value of [`MANAGED_LABEL`] that opts a node in.
pub const MANAGED_VALUE: &str = "true";

/// Controller: the step the controller wants the node in (see [`super::Step`]).
pub const INTENT: &str = "update.edgeless.systems/intent";
/// Controller: the OS image (or Kubernetes version, for `fetch` and `kubeadm-upgrade`, and for `drain` and
/// `done` in a Kubernetes upgrade) the step moves to.
pub const INTENT_TARGET: &str = "update.edgeless.systems/intent-target";
/// Controller: a fresh token for every intent written, echoed by the agent in [`STATE_TOKEN`], so
/// that a report about an earlier step is never taken for a report about this one.
pub const INTENT_TOKEN: &str = "update.edgeless.systems/intent-token";
/// Controller: when the intent was written (RFC 3339, UTC); deadlines and soak count from it.
pub const INTENT_SINCE: &str = "update.edgeless.systems/intent-since";
/// Controller: the node's boot ID when the controller asked for the reboot; the reboot counts
/// only once the node reports a different one.
pub const BOOT_ID_BEFORE: &str = "update.edgeless.systems/boot-id-before";
/// Controller: with `intent=kubeadm-upgrade`, the name of the components ConfigMap (in `kube-system`) the
/// agent installs from (`k8s-components-sha256-<hex>`, named after its content); with `intent=fetch`, the one
/// whose components it fetches and verifies ahead.
pub const INTENT_COMPONENTS: &str = "update.edgeless.systems/intent-components";
/// Controller: with `intent=kubeadm-upgrade`, which kubeadm command the node runs: `apply` (the first
/// control-plane node: `kubeadm upgrade plan` + `apply`) or `node` (every other node: `kubeadm upgrade node`).
pub const INTENT_KUBEADM: &str = "update.edgeless.systems/intent-kubeadm";
/// Controller: why the node is `failed` or `blocked`, for humans.
pub const INTENT_MESSAGE: &str = "update.edgeless.systems/intent-message";
/// Controller: present (value [`CORDONED_BY_VALUE`]) when the controller cordoned the node. The
/// controller uncordons only nodes that carry it, and removes it when it uncordons.
pub const CORDONED_BY: &str = "update.edgeless.systems/cordoned-by";
/// The value of [`CORDONED_BY`].
pub const CORDONED_BY_VALUE: &str = "update-operator";

/// Controller, on a node being replaced (the donor): the name of the node that replaces it (its heir),
/// written when the donor is cordoned for its drain.
pub const HEIR: &str = "update.edgeless.systems/heir";
/// Controller, on a replacing node (the heir), and on the PendingNodes of a replacement: the name of the
/// node it replaces (its donor). On the heir it is written together with the donor's labels and taints
/// and removed once the donor's instance is being deleted.
pub const DONOR: &str = "update.edgeless.systems/donor";
/// Controller, on the heir beside [`DONOR`]: the donor's `spec.providerID`, so that its instance can be
/// deleted after its Node is gone.
pub const DONOR_PROVIDER_ID: &str = "update.edgeless.systems/donor-provider-id";
/// Controller, on the heir beside [`DONOR`]: the cloud ID of the donor's scaling group.
pub const DONOR_GROUP: &str = "update.edgeless.systems/donor-group";

/// Controller, on a donor: when (RFC 3339) it last asked the cloud for the donor's new instance, written before
/// the request. A controller that finds it newer than the intent but no joining PendingNode crashed (or failed)
/// between the request and the record: it adopts the group's node that joined since instead of creating another.
pub const INSTANCE_REQUESTED: &str = "update.edgeless.systems/instance-requested";

/// Controller, on a node a NodeOp works on (`operator.kairos.io`): `<namespace>/<name>@<uid>` of that NodeOp,
/// written before it cordons the node or starts its Job, removed once it is done with the node. Rollouts hold
/// such a node, and a NodeOp starts only on a node no rollout disrupts, so a node never does both at once.
pub const NODE_OPERATION: &str = "update.edgeless.systems/node-operation";

/// Agent: how far the agent got with the intent of [`STATE_TOKEN`] (see [`super::AgentState`]).
pub const STATE: &str = "update.edgeless.systems/state";
/// Agent: the [`INTENT_TOKEN`] the state is about.
pub const STATE_TOKEN: &str = "update.edgeless.systems/state-token";
/// Agent: error message when the state is `error`.
pub const STATE_MESSAGE: &str = "update.edgeless.systems/state-message";
/// Agent: the host's current boot ID (`/proc/sys/kernel/random/boot_id`).
pub const BOOT_ID: &str = "update.edgeless.systems/boot-id";
/// Agent: the OS image the host runs now.
pub const OS_IMAGE: &str = "update.edgeless.systems/os-image";
/// Agent: `sha256:<hex>` over the hashes of the Kubernetes components installed on the host.
pub const COMPONENTS_HASH: &str = "update.edgeless.systems/components-hash";

/// Users: on a pod or a Node, `"true"` keeps rollouts from disrupting the node while it is there (the pod runs, the
/// Node carries it). Neither the controller nor the agent writes it.
pub const DO_NOT_DISRUPT: &str = "update.edgeless.systems/do-not-disrupt";

/// Controller: a label, `"true"` while a drained node waits before its reboot for the annotations of
/// `spec.rollout.beforeReboot` (set by the user's hook).
pub const BEFORE_REBOOT_LABEL: &str = "update.edgeless.systems/before-reboot";
/// Controller: a label, `"true"` while a rebooted, verified node waits for the annotations of
/// `spec.rollout.afterReboot` before it is uncordoned.
pub const AFTER_REBOOT_LABEL: &str = "update.edgeless.systems/after-reboot";
/// Controller: when the node's checkpoint label was set (RFC 3339, UTC); `checkpointTimeout` counts from it.
pub const CHECKPOINT_SINCE: &str = "update.edgeless.systems/checkpoint-since";
/// Controller: the annotations the node's checkpoint waits for, comma-separated; removed with the label when
/// the checkpoint ends.
pub const CHECKPOINT_WAITS: &str = "update.edgeless.systems/checkpoint-waits";

/// Every annotation key the controller writes.
pub const CONTROLLER_KEYS: &[&str] = &[
    INTENT,
    INTENT_TARGET,
    INTENT_TOKEN,
    INTENT_SINCE,
    BOOT_ID_BEFORE,
    INTENT_COMPONENTS,
    INTENT_KUBEADM,
    INTENT_MESSAGE,
    CORDONED_BY,
    HEIR,
    DONOR,
    DONOR_PROVIDER_ID,
    DONOR_GROUP,
    INSTANCE_REQUESTED,
    NODE_OPERATION,
    CHECKPOINT_SINCE,
    CHECKPOINT_WAITS,
];
/// Every annotation key the agent writes.
pub const AGENT_KEYS: &[&str] = &[STATE, STATE_TOKEN, STATE_MESSAGE, BOOT_ID, OS_IMAGE, COMPONENTS_HASH];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_under_the_prefix_and_has_exactly_one_writer() {
        for key in CONTROLLER_KEYS.iter().chain(AGENT_KEYS) {
            assert!(key.starts_with(PREFIX), "{key}");
            // A key is a valid Kubernetes qualified name: prefix/name with name <= 63 chars.
            let name = &key[PREFIX.len()..];
            assert!(!name.is_empty() && name.len() <= 63, "{key}");
        }
        for key in CONTROLLER_KEYS {
            assert!(!AGENT_KEYS.contains(key), "{key} has two writers");
        }
        assert!(!CONTROLLER_KEYS.contains(&MANAGED_LABEL) && !AGENT_KEYS.contains(&MANAGED_LABEL));
    }
}
