//! The Kubernetes upgrade, planned incrementally: what the [`Planner`](super::Planner) keeps of a rollout that asks
//! for one, and which flow plans the rollout at each plan ([`Mode`]).
//!
//! The Kubernetes flow ([`super::super::kubernetes`]) reads three things of every member besides its own progress:
//! whether every member is done with the upgrade (then the image flow plans), whether a control-plane member
//! verified on the target proves the API server upgraded, and each member's kubelet for the status. All three come
//! from a member's view alone, not from its assessment, so [`Views`] keeps them per member as nodes change, and a
//! plan reads them in a few look-ups. When the flow planning a rollout changes, or the target it plans with (the
//! API server proven upgraded), every member of that rollout is assessed again: twice or three times per upgrade.

use super::super::kubernetes::{self, Closing, Kubelet, KubernetesSpec, KubernetesTarget};
use super::super::{NodeView, Rollout};
use super::tally::set;
use jiff::Timestamp;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Which flow plans a rollout, and with what.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Mode {
    /// The image flow (no Kubernetes upgrade asked, or it is over for every member).
    #[default]
    Image,
    /// The upgrade is refused: nodes in flight finish, nothing starts.
    Refused,
    /// The upgrade is under way, to this target (the API server's version as the control plane proves it).
    Upgrade(KubernetesTarget),
}

/// What a rollout's Kubernetes flow reads of its members' views.
#[derive(Debug, Default)]
pub(super) struct Views {
    /// Control-plane members verified on the target ([`kubernetes::verified_control_plane`]).
    verified_control_plane: BTreeSet<String>,
    /// Members not done with the upgrade whatever the time ([`Closing::Open`]).
    open: BTreeSet<String>,
    /// Members verified on the target and soaking, by the end of their soak.
    soaking: BTreeSet<(Timestamp, String)>,
    /// Every member's kubelet, by name.
    kubelets: BTreeMap<String, Kubelet>,
    /// The first [`kubernetes::LISTED`] of `kubelets`, as the plans share them; `None` after a change.
    listed: Option<Arc<Vec<Kubelet>>>,
}

impl Views {
    /// Adds (`on`) or removes what a member of `rollout` says of the upgrade. Its kubelet is kept when it is
    /// removed (the next [`Views::note`] of the same node tells whether it changed): [`Views::gone`] forgets it.
    pub(super) fn note(&mut self, node: &NodeView, rollout: &Rollout, on: bool) {
        let Some(asked) = &rollout.kubernetes else { return };
        let name = &node.name;
        if on {
            let kubelet = kubernetes::kubelet(node);
            if self.kubelets.get(name) != Some(&kubelet) {
                self.changed(name);
                self.kubelets.insert(name.clone(), kubelet);
            }
        }
        let (KubernetesSpec::Upgrade(target), Some(spec)) = (asked, rollout.spec.acting()) else { return };
        if kubernetes::verified_control_plane(node, target) {
            set(&mut self.verified_control_plane, name.clone(), on);
        }
        match kubernetes::closing(node, target, spec) {
            Closing::Open => set(&mut self.open, name.clone(), on),
            Closing::Soaking(until) => set(&mut self.soaking, (until, name.clone()), on),
            Closing::Finished => {}
        }
    }

    /// Forgets the kubelet of a node that is no member any more.
    pub(super) fn gone(&mut self, name: &str) {
        if self.kubelets.remove(name).is_some() {
            self.changed(name);
        }
    }

    /// The kubelet of `name` changed: the list is built again if it holds it (or would).
    fn changed(&mut self, name: &str) {
        let outside = self.listed.as_ref().is_some_and(|l| {
            l.len() >= kubernetes::LISTED && l.last().is_some_and(|(last, _, _)| last.as_str() < name)
        });
        if !outside {
            self.listed = None;
        }
    }

    /// The flow that plans `rollout` at `now`.
    pub(super) fn mode(&self, rollout: &Rollout, now: Timestamp) -> Mode {
        if rollout.spec.acting().is_none() {
            return Mode::Image;
        }
        match &rollout.kubernetes {
            None => Mode::Image,
            Some(KubernetesSpec::Refused(_)) => Mode::Refused,
            Some(KubernetesSpec::Upgrade(target)) => {
                let soaking = self.soaking.last().is_some_and(|(until, _)| *until > now);
                if self.open.is_empty() && !soaking {
                    return Mode::Image;
                }
                Mode::Upgrade(kubernetes::effective(target, !self.verified_control_plane.is_empty()))
            }
        }
    }

    /// Builds the list of kubelets the status shows again, if one of them changed since.
    pub(super) fn refresh(&mut self) {
        let kubelets = &self.kubelets;
        self.listed.get_or_insert_with(|| Arc::new(kubelets.values().take(kubernetes::LISTED).cloned().collect()));
    }

    /// The kubelets the status lists, as of the last [`Views::refresh`].
    pub(super) fn listed(&self) -> Arc<Vec<Kubelet>> {
        self.listed.clone().unwrap_or_default()
    }
}
