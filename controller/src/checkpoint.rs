//! Before/after-reboot checkpoints (issue 33): a rollout's `spec.rollout.beforeReboot` and `afterReboot` list
//! annotation names that the user's own hooks set to `"true"` on a node (a Job that sets rook's `noout`, say).
//!
//! # The protocol on the Node
//! - When a node is drained and about to reboot, the controller labels it
//!   [`keys::BEFORE_REBOOT_LABEL`]`=true`, with [`keys::CHECKPOINT_SINCE`] (when) and [`keys::CHECKPOINT_WAITS`]
//!   (the annotations it waits for), and reboots it only once each of those annotations is `"true"`.
//! - When the reboot is verified, it labels [`keys::AFTER_REBOOT_LABEL`]`=true` the same way and uncordons the
//!   node (`intent=done`) only once each `afterReboot` annotation is `"true"`.
//! - **Cleared when the checkpoint ends, whatever ends it**: every write of the controller to a node that is not
//!   the checkpoint's own ([`changes`]) removes the labels, both keys and the annotations the node's own
//!   [`keys::CHECKPOINT_WAITS`] names (read from the node, so a spec changed or deleted meanwhile still clears
//!   them): the reboot, `done`, a release (target changed, NodeVersion deleted), a block or a failure.
//! - A checkpoint that waits longer than `checkpointTimeout` blocks the node (`CheckpointTimedOut`), which
//!   uncordons it and clears the checkpoint.
//! - Agents cannot write any of it: the agents' admission policy lets an agent change only its own agent keys.

use jiff::Timestamp;
use shared::protocol::keys;
use std::collections::BTreeMap;

/// Which checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    BeforeReboot,
    AfterReboot,
}

impl Phase {
    /// The label that marks the node while it waits.
    pub fn label(self) -> &'static str {
        match self {
            Phase::BeforeReboot => keys::BEFORE_REBOOT_LABEL,
            Phase::AfterReboot => keys::AFTER_REBOOT_LABEL,
        }
    }

    /// The spec field that lists its annotations, for messages.
    pub fn field(self) -> &'static str {
        match self {
            Phase::BeforeReboot => "beforeReboot",
            Phase::AfterReboot => "afterReboot",
        }
    }
}

/// A node's checkpoint as its labels and annotations show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub phase: Phase,
    pub since: Timestamp,
    /// The annotations it waits for.
    pub waits: Vec<String>,
    /// Those of `waits` that are not `"true"` yet.
    pub pending: Vec<String>,
}

impl Checkpoint {
    /// The node's checkpoint, if it is at one: a checkpoint label `"true"` with a readable
    /// [`keys::CHECKPOINT_SINCE`]. Anything else reads as no checkpoint (the controller then sets it again).
    pub fn read(labels: Option<&BTreeMap<String, String>>, annotations: &BTreeMap<String, String>) -> Option<Self> {
        let set = |label: &str| labels.and_then(|l| l.get(label)).is_some_and(|v| v == "true");
        let phase = if set(keys::AFTER_REBOOT_LABEL) {
            Phase::AfterReboot
        } else if set(keys::BEFORE_REBOOT_LABEL) {
            Phase::BeforeReboot
        } else {
            return None;
        };
        let since = annotations.get(keys::CHECKPOINT_SINCE)?.parse().ok()?;
        let waits = waits(annotations);
        let pending = waits.iter().filter(|w| annotations.get(*w).is_none_or(|v| v != "true")).cloned().collect();
        Some(Checkpoint { phase, since, waits, pending })
    }

    /// Whether the checkpoint is `phase`'s and waits for exactly `waits`.
    pub fn is(&self, phase: Phase, waits: &[String]) -> bool {
        self.phase == phase && self.waits == waits
    }

    /// What it waits for, for `waitingOn` and messages.
    pub fn waiting_on(&self) -> String {
        format!(
            "{}: waiting for the annotation(s) {} to be \"true\"",
            self.phase.label(),
            self.pending.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>().join(", ")
        )
    }
}

/// The annotations named by the node's [`keys::CHECKPOINT_WAITS`].
pub fn waits(annotations: &BTreeMap<String, String>) -> Vec<String> {
    annotations
        .get(keys::CHECKPOINT_WAITS)
        .map(|w| w.split(',').map(str::trim).filter(|w| !w.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The annotation and label changes of a write to a node: `set` (a checkpoint to set, at `now`) sets its label
/// and keys, and removes the other label and the annotations of a checkpoint it replaces; without, every
/// checkpoint label, key and awaited annotation the node has is removed. Values `None` remove.
pub type Changes = (Vec<(String, Option<String>)>, Vec<(String, Option<String>)>);

pub fn changes(
    set: Option<(Phase, &[String])>,
    labels: Option<&BTreeMap<String, String>>,
    annotations: &BTreeMap<String, String>,
    now: Timestamp,
) -> Changes {
    let current = Checkpoint::read(labels, annotations);
    let mut annotation_changes = Vec::new();
    let mut label_changes = Vec::new();
    let has_label = |label: &str| labels.is_some_and(|l| l.contains_key(label));
    match set {
        Some((phase, wanted)) if current.as_ref().is_some_and(|c| c.is(phase, wanted)) => {}
        Some((phase, wanted)) => {
            for old in waits(annotations).into_iter().filter(|w| !wanted.contains(w)) {
                annotation_changes.push((old, None));
            }
            let since = shared::protocol::render_timestamp(now);
            annotation_changes.push((keys::CHECKPOINT_SINCE.to_owned(), Some(since)));
            annotation_changes.push((keys::CHECKPOINT_WAITS.to_owned(), Some(wanted.join(","))));
            label_changes.push((phase.label().to_owned(), Some("true".to_owned())));
            for other in [Phase::BeforeReboot, Phase::AfterReboot].into_iter().filter(|p| *p != phase) {
                if has_label(other.label()) {
                    label_changes.push((other.label().to_owned(), None));
                }
            }
        }
        None => {
            for key in
                waits(annotations).into_iter().chain([keys::CHECKPOINT_SINCE.into(), keys::CHECKPOINT_WAITS.into()])
            {
                annotation_changes.push((key, None));
            }
            for phase in [Phase::BeforeReboot, Phase::AfterReboot] {
                if has_label(phase.label()) {
                    label_changes.push((phase.label().to_owned(), None));
                }
            }
        }
    }
    (annotation_changes, label_changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_checkpoint_reads_from_its_label_and_keys_and_names_what_is_still_pending() {
        let labels = map(&[(keys::BEFORE_REBOOT_LABEL, "true")]);
        let annotations = map(&[
            (keys::CHECKPOINT_SINCE, "2027-01-15T08:00:00.000Z"),
            (keys::CHECKPOINT_WAITS, "ceph.io/noout,example.com/ok"),
            ("ceph.io/noout", "true"),
            ("example.com/ok", "false"),
        ]);
        let c = Checkpoint::read(Some(&labels), &annotations).unwrap();
        assert_eq!(c.phase, Phase::BeforeReboot);
        assert_eq!(c.waits, ["ceph.io/noout", "example.com/ok"]);
        assert_eq!(c.pending, ["example.com/ok"]);
        assert_eq!(
            c.waiting_on(),
            "update.edgeless.systems/before-reboot: waiting for the annotation(s) \"example.com/ok\" to be \"true\""
        );
        // No label, a label not "true", or no readable time: no checkpoint.
        assert_eq!(Checkpoint::read(None, &annotations), None);
        assert_eq!(Checkpoint::read(Some(&map(&[(keys::BEFORE_REBOOT_LABEL, "yes")])), &annotations), None);
        let unreadable = map(&[(keys::CHECKPOINT_SINCE, "soon")]);
        assert_eq!(Checkpoint::read(Some(&labels), &unreadable), None);
    }

    #[test]
    fn setting_a_checkpoint_labels_once_and_any_other_write_clears_the_labels_keys_and_awaited_annotations() {
        let waits = vec!["ceph.io/noout".to_owned()];
        let (annotations, labels) = changes(Some((Phase::BeforeReboot, &waits)), None, &BTreeMap::new(), t(0));
        assert_eq!(
            annotations,
            vec![
                (keys::CHECKPOINT_SINCE.to_owned(), Some("2027-01-15T08:00:00.000Z".to_owned())),
                (keys::CHECKPOINT_WAITS.to_owned(), Some("ceph.io/noout".to_owned())),
            ]
        );
        assert_eq!(labels, vec![(keys::BEFORE_REBOOT_LABEL.to_owned(), Some("true".to_owned()))]);
        // Set already: nothing to write (its time is kept).
        let node_labels = map(&[(keys::BEFORE_REBOOT_LABEL, "true")]);
        let node_annotations = map(&[
            (keys::CHECKPOINT_SINCE, "2027-01-15T08:00:00.000Z"),
            (keys::CHECKPOINT_WAITS, "ceph.io/noout"),
            ("ceph.io/noout", "true"),
        ]);
        let set = Some((Phase::BeforeReboot, waits.as_slice()));
        assert_eq!(changes(set, Some(&node_labels), &node_annotations, t(60)), (vec![], vec![]));
        // The after-reboot checkpoint replaces it: the other label goes.
        let after = vec!["example.com/healthy".to_owned()];
        let (annotations, labels) =
            changes(Some((Phase::AfterReboot, &after)), Some(&node_labels), &node_annotations, t(60));
        assert_eq!(annotations[0], ("ceph.io/noout".to_owned(), None));
        assert_eq!(
            labels,
            vec![
                (keys::AFTER_REBOOT_LABEL.to_owned(), Some("true".to_owned())),
                (keys::BEFORE_REBOOT_LABEL.to_owned(), None)
            ]
        );
        // Any other write: everything goes.
        let (annotations, labels) = changes(None, Some(&node_labels), &node_annotations, t(60));
        assert_eq!(
            annotations,
            vec![
                ("ceph.io/noout".to_owned(), None),
                (keys::CHECKPOINT_SINCE.to_owned(), None),
                (keys::CHECKPOINT_WAITS.to_owned(), None)
            ]
        );
        assert_eq!(labels, vec![(keys::BEFORE_REBOOT_LABEL.to_owned(), None)]);
    }
}
