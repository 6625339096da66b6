//! The ScalingGroup controller: keeps a cloud group's template image on its NodeVersion's image.

use super::condition::{self, Wanted};
use super::{Attempts, Context, Error, retry_delay};
use crate::reason::Reason;
use cloud::{GroupId, ImageUpdate, Retry};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use shared::crd::{NodeVersion, ScalingGroup, ScalingGroupStatus};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Condition type: True while the group's template image differs from its NodeVersion's image (Constellation's
/// name).
pub const OUTDATED: &str = "Outdated";
/// Condition type: True when the last cloud calls for the group succeeded; False names the error.
pub const SYNCED: &str = "Synced";
/// How often an up-to-date group's template image is read again, to notice changes made outside the operator.
pub const RESYNC: Duration = Duration::from_secs(600);

/// What reconciling a group found and did at the cloud; the input of [`decide`].
#[derive(Debug)]
pub enum Outcome {
    /// The group's NodeVersion does not exist or names no image: nothing to set.
    NoTarget {
        /// The template image the cloud reported.
        template: String,
    },
    /// The NodeVersion's spec holds the group back (paused, or no valid spec to act on): the template is left as
    /// it is.
    Held {
        /// The template image the cloud reported.
        template: String,
        /// Why.
        why: String,
    },
    /// The template image is the NodeVersion's.
    UpToDate {
        /// The image.
        template: String,
    },
    /// The template image was changed to `to` now.
    ImageSet {
        /// The image before.
        from: String,
        /// The NodeVersion's image, now the template's.
        to: String,
    },
    /// The cloud accepted the change but it is not in effect yet (a multi-step change).
    ImageSetting {
        /// The image still in effect.
        from: String,
        /// The image being set.
        to: String,
    },
    /// Reading the template image failed.
    LookupFailed(cloud::Error),
    /// Setting the image failed.
    SetFailed {
        /// The image still in effect.
        template: String,
        /// The image that could not be set.
        to: String,
        /// Why.
        error: cloud::Error,
    },
}

/// An Event to publish about the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Why: PascalCase in the Event.
    pub reason: Reason,
    /// Warning rather than Normal.
    pub warning: bool,
    /// The note.
    pub message: String,
}

/// The group's new status, Event and next visit, decided from an [`Outcome`].
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// `status.imageReference`: the template image in effect; `None` keeps the one recorded (the cloud did not
    /// say).
    pub image_reference: Option<String>,
    /// Conditions to set.
    pub conditions: Vec<Wanted>,
    /// An Event, when something happened.
    pub event: Option<EventSpec>,
    /// When to look again: `Ok(after)` after success, `Err(retry)` after a cloud error (backoff per failure in a
    /// row).
    pub next: Result<Duration, Retry>,
}

/// What a group's template should run, from its NodeVersion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Desired {
    /// No NodeVersion of that name.
    Nothing,
    /// The NodeVersion holds its groups back: paused, or no valid spec (current or last valid) to act on.
    Held(String),
    /// The image of the NodeVersion's acting spec (validated; the last valid one while the current is invalid).
    Image(String),
}

/// What `version` asks of its groups at `now`: only a validated, acting spec's image ever reaches a cloud, and
/// none while the rollout is paused (a new template image is a change new instances would carry).
pub fn desired(version: Option<&NodeVersion>, now: Timestamp) -> Desired {
    let Some(version) = version else { return Desired::Nothing };
    let rollout = crate::forecast::snapshot::rollout(version, now);
    match (&rollout.spec, rollout.spec.acting()) {
        (_, Some(spec)) if spec.policy.paused => Desired::Held(format!("NodeVersion {} is paused", rollout.name)),
        (_, Some(spec)) => Desired::Image(spec.target.clone()),
        (crate::policy::SpecState::Invalid { errors, .. }, None) => {
            Desired::Held(format!("NodeVersion {} has no valid spec to act on: {}", rollout.name, errors.join("; ")))
        }
        (crate::policy::SpecState::Valid(_), None) => Desired::Nothing,
    }
}

/// The image to set on a group whose template runs `template`, for a NodeVersion image `desired` (`None`: no
/// NodeVersion or no image): `Some` only when they differ.
pub fn image_to_set<'a>(desired: Option<&'a str>, template: &str) -> Option<&'a str> {
    desired.filter(|d| !d.is_empty() && *d != template)
}

/// Decides the status, Event and next visit from what reconciling found. Pure.
pub fn decide(outcome: &Outcome, node_version: &str) -> Decision {
    let synced = Wanted::new(SYNCED, true, "CloudCallsSucceeded", "the last cloud calls for the group succeeded");
    let failed = |what: &str, error: &cloud::Error| {
        Wanted::new(SYNCED, false, error.outcome().as_str(), format!("{what}: {error}"))
    };
    match outcome {
        Outcome::NoTarget { template } => Decision {
            image_reference: Some(template.clone()),
            conditions: vec![
                Wanted::unknown(
                    OUTDATED,
                    "NoNodeVersion",
                    format!("NodeVersion {node_version:?} does not exist or names no image"),
                ),
                synced,
            ],
            event: None,
            next: Ok(RESYNC),
        },
        Outcome::Held { template, why } => Decision {
            image_reference: Some(template.clone()),
            conditions: vec![
                Wanted::unknown(OUTDATED, "NodeVersionHeld", format!("{why}: the image is left as it is")),
                synced,
            ],
            event: None,
            next: Ok(RESYNC),
        },
        Outcome::UpToDate { template } => Decision {
            image_reference: Some(template.clone()),
            conditions: vec![
                Wanted::new(
                    OUTDATED,
                    false,
                    "ImageUpToDate",
                    format!("new instances get {template}, the image of NodeVersion {node_version:?}"),
                ),
                synced,
            ],
            event: None,
            next: Ok(RESYNC),
        },
        Outcome::ImageSet { from, to } => Decision {
            image_reference: Some(to.clone()),
            conditions: vec![
                Wanted::new(
                    OUTDATED,
                    false,
                    "ImageUpToDate",
                    format!("new instances get {to}, the image of NodeVersion {node_version:?}"),
                ),
                synced,
            ],
            event: Some(EventSpec {
                reason: Reason::GroupImageSet,
                warning: false,
                message: format!("new instances get {to} (was {from}), the image of NodeVersion {node_version:?}"),
            }),
            next: Ok(RESYNC),
        },
        Outcome::ImageSetting { from, to } => Decision {
            image_reference: Some(from.clone()),
            conditions: vec![
                Wanted::new(OUTDATED, true, "ImageUpdateInProgress", format!("the cloud is switching {from} to {to}")),
                synced,
            ],
            event: None,
            next: Err(Retry::Backoff),
        },
        Outcome::LookupFailed(error) => Decision {
            image_reference: None,
            conditions: vec![failed("reading the group's image", error)],
            event: Some(EventSpec {
                reason: Reason::GroupImageLookupFailed,
                warning: true,
                message: format!("reading the group's image: {error}"),
            }),
            next: Err(error.retry()),
        },
        Outcome::SetFailed { template, to, error } => Decision {
            image_reference: Some(template.clone()),
            conditions: vec![
                Wanted::new(OUTDATED, true, "ImageUpdateFailed", format!("new instances get {template}, not {to}")),
                failed(&format!("setting the group's image to {to}"), error),
            ],
            event: Some(EventSpec {
                reason: Reason::GroupImageUpdateFailed,
                warning: true,
                message: format!("setting the group's image to {to}: {error}"),
            }),
            next: Err(error.retry()),
        },
    }
}

/// The status `decision` makes of `current` at `now`, or `None` when nothing changes.
pub fn next_status(
    current: Option<&ScalingGroupStatus>,
    decision: &Decision,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<ScalingGroupStatus> {
    let mut status = current.cloned().unwrap_or_default();
    let mut changed = false;
    if let Some(image) = &decision.image_reference
        && status.image_reference.as_ref() != Some(image)
    {
        status.image_reference = Some(image.clone());
        changed = true;
    }
    for wanted in &decision.conditions {
        changed |= condition::set(&mut status.conditions, wanted, generation, now);
    }
    changed.then_some(status)
}

struct State {
    context: Context,
    attempts: Attempts,
}

/// What of a NodeVersion its groups' image depends on: its generation (the spec), and the image a rollback under way
/// moves the nodes back to (`status.rollback` of the spec's image, `crate::policy::rollback`).
type GroupsKey = (Option<i64>, Option<String>);

fn groups_key(version: &NodeVersion) -> GroupsKey {
    let rollback = crate::policy::rollback::Active::recorded(version.status.as_ref(), &version.spec.image);
    (version.metadata.generation, rollback.map(|r| r.to))
}

/// Runs the controller until `shutdown` is cancelled: every ScalingGroup, again when its NodeVersion changes.
pub async fn run(context: Context, shutdown: CancellationToken) {
    let client = context.client.clone();
    let controller = Controller::new(Api::<ScalingGroup>::all(client.clone()), watcher::Config::default());
    let store = controller.store();
    // The NodeVersion's status changes at every rollout step; only a new spec (its generation) or a rollback
    // recorded or dropped ([`groups_key`]) concerns the groups.
    let specs_seen = std::sync::Mutex::new(std::collections::HashMap::<String, GroupsKey>::new());
    let results = controller
        .watches(Api::<NodeVersion>::all(client), watcher::Config::default(), move |version: NodeVersion| {
            let name = version.name_any();
            let mut seen = specs_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let key = groups_key(&version);
            if seen.get(&name) == Some(&key) {
                return Vec::new();
            }
            seen.insert(name.clone(), key);
            store
                .state()
                .iter()
                .filter(|group| group.spec.node_image == name)
                .map(|group| ObjectRef::from_obj(group.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, Arc::new(State { context, attempts: Attempts::default() }));
    super::log_results("ScalingGroup", results).await;
}

async fn reconcile(group: Arc<ScalingGroup>, state: Arc<State>) -> Result<Action, Error> {
    let name = group.name_any();
    let kube_error = |source| Error::Kube { kind: "ScalingGroup", name: name.clone(), source };
    let ctx = &state.context;
    let versions: Api<NodeVersion> = Api::all(ctx.client.clone());
    let version = versions.get_opt(&group.spec.node_image).await.map_err(kube_error)?;
    let desired = desired(version.as_ref(), Timestamp::now());
    let provider = &ctx.cloud.provider;
    let id = GroupId(group.spec.group_id.clone());
    let outcome = match (provider.group_image(&id).await, desired) {
        (Err(error), _) => Outcome::LookupFailed(error),
        (Ok(template), Desired::Held(why)) => Outcome::Held { template, why },
        (Ok(template), Desired::Nothing) => Outcome::NoTarget { template },
        (Ok(template), Desired::Image(image)) => match image_to_set(Some(&image), &template) {
            None if image.is_empty() => Outcome::NoTarget { template },
            None => Outcome::UpToDate { template },
            Some(to) => match super::fenced(ctx, provider.set_group_image(&id, to)).await? {
                Ok(ImageUpdate::Applied) => Outcome::ImageSet { from: template, to: to.to_owned() },
                Ok(ImageUpdate::InProgress) => Outcome::ImageSetting { from: template, to: to.to_owned() },
                Err(error) => Outcome::SetFailed { template, to: to.to_owned(), error },
            },
        },
    };
    let decision = decide(&outcome, &group.spec.node_image);
    tracing::debug!(group = %name, ?outcome, "ScalingGroup reconciled");
    if let Some(event) = &decision.event {
        ctx.events.publish_named(
            reference(&group),
            None,
            event.reason,
            event.warning,
            event.message.clone(),
            "SetGroupImage",
        );
    }
    if let Some(status) = next_status(group.status.as_ref(), &decision, group.meta().generation, Timestamp::now()) {
        let api: Api<ScalingGroup> = Api::all(ctx.client.clone());
        super::fenced(
            ctx,
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": status }))),
        )
        .await?
        .map_err(kube_error)?;
    }
    Ok(match decision.next {
        Ok(after) => {
            state.attempts.succeeded(&name);
            Action::requeue(after)
        }
        Err(retry) => Action::requeue(retry_delay(retry, state.attempts.failed(&name))),
    })
}

fn error_policy(group: Arc<ScalingGroup>, error: &Error, state: Arc<State>) -> Action {
    tracing::warn!(%error, "ScalingGroup reconcile failed; retrying");
    Action::requeue(retry_delay(Retry::Backoff, state.attempts.failed(&group.name_any())))
}

/// A reference to `group` for Events.
fn reference(group: &ScalingGroup) -> ObjectReference {
    group.object_ref(&())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttled() -> cloud::Error {
        cloud::Error::Throttled { message: "slow down".into(), retry_after: Some(Duration::from_secs(4)) }
    }

    fn status_of<'a>(decision: &'a Decision, type_: &str) -> Option<&'a Wanted> {
        decision.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Only a validated, acting spec's image reaches a cloud, and none while the NodeVersion is paused.
    #[test]
    fn only_the_validated_acting_image_reaches_the_cloud_and_none_while_paused() {
        let now = Timestamp::from_second(1_000_000).unwrap();
        let version = |spec: serde_json::Value, last_valid: Option<serde_json::Value>| -> NodeVersion {
            let status = last_valid.map(|spec| json!({"lastValidSpec": {"generation": 1, "spec": spec}}));
            serde_json::from_value(json!({
                "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
                "metadata": {"name": "nv", "generation": 2}, "spec": spec, "status": status,
            }))
            .unwrap()
        };
        assert_eq!(desired(None, now), Desired::Nothing);
        assert_eq!(desired(Some(&version(json!({"image": "v2"}), None)), now), Desired::Image("v2".into()));
        let paused = version(json!({"image": "v2", "rollout": {"paused": true}}), None);
        assert!(matches!(desired(Some(&paused), now), Desired::Held(why) if why.contains("paused")));
        // An image no agent could read is never written to a cloud; the last valid spec's image acts meanwhile.
        let bad = json!({"image": "v2\n; rm -rf /"});
        assert!(
            matches!(desired(Some(&version(bad.clone(), None)), now), Desired::Held(why) if why.contains("spec.image"))
        );
        let kept = version(bad, Some(json!({"image": "v1"})));
        assert_eq!(desired(Some(&kept), now), Desired::Image("v1".into()));
        let held = decide(&Outcome::Held { template: "v1".into(), why: "NodeVersion nv is paused".into() }, "nv");
        assert_eq!(held.image_reference.as_deref(), Some("v1"));
        assert!(held.event.is_none());
    }

    /// During a rollback (`status.rollback` of the spec's image) the groups' template goes back to its `to`, so that
    /// replaced nodes get new instances of the previous image; a new image ends it.
    #[test]
    fn a_rollback_sets_the_previous_image_on_the_groups() {
        let now = Timestamp::from_second(1_000_000).unwrap();
        let version = |image: &str| -> NodeVersion {
            serde_json::from_value(json!({
                "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
                "metadata": {"name": "nv", "generation": 2}, "spec": {"image": image},
                "status": {"lastCompleteImage": "v1",
                           "rollback": {"from": "v2", "to": "v1", "since": "2026-11-29T00:00:00Z"}},
            }))
            .unwrap()
        };
        assert_eq!(desired(Some(&version("v2")), now), Desired::Image("v1".into()));
        assert_eq!(desired(Some(&version("v3")), now), Desired::Image("v3".into()));
        // The groups are visited again when the rollback is recorded: not only when the spec changes.
        let mut before = version("v2");
        before.status.as_mut().unwrap().rollback = None;
        assert_ne!(groups_key(&before), groups_key(&version("v2")));
        assert_eq!(groups_key(&before), groups_key(&version("v3")), "another image's record is no rollback");
    }

    #[test]
    fn an_image_is_set_only_when_the_node_version_names_a_different_one() {
        assert_eq!(image_to_set(Some("v2"), "v1"), Some("v2"));
        assert_eq!(image_to_set(Some("v1"), "v1"), None);
        assert_eq!(image_to_set(None, "v1"), None);
        assert_eq!(image_to_set(Some(""), "v1"), None, "an empty image is never set");
    }

    #[test]
    fn every_outcome_sets_outdated_and_synced_as_it_should() {
        let cases = [
            (Outcome::NoTarget { template: "v1".into() }, Some("Unknown"), Some("True"), Some("v1"), None),
            (Outcome::UpToDate { template: "v1".into() }, Some("False"), Some("True"), Some("v1"), None),
            (
                Outcome::ImageSet { from: "v1".into(), to: "v2".into() },
                Some("False"),
                Some("True"),
                Some("v2"),
                Some((Reason::GroupImageSet, false)),
            ),
            (
                Outcome::ImageSetting { from: "v1".into(), to: "v2".into() },
                Some("True"),
                Some("True"),
                Some("v1"),
                None,
            ),
            (
                Outcome::LookupFailed(cloud::Error::transient("503")),
                None,
                Some("False"),
                None,
                Some((Reason::GroupImageLookupFailed, true)),
            ),
            (
                Outcome::SetFailed { template: "v1".into(), to: "v2".into(), error: throttled() },
                Some("True"),
                Some("False"),
                Some("v1"),
                Some((Reason::GroupImageUpdateFailed, true)),
            ),
        ];
        for (outcome, outdated, synced, image, event) in cases {
            let decision = decide(&outcome, "constellation-version");
            assert_eq!(status_of(&decision, OUTDATED).map(|c| c.status), outdated, "{outcome:?}");
            assert_eq!(status_of(&decision, SYNCED).map(|c| c.status), synced, "{outcome:?}");
            assert_eq!(decision.image_reference.as_deref(), image, "{outcome:?}");
            assert_eq!(decision.event.as_ref().map(|e| (e.reason, e.warning)), event, "{outcome:?}");
        }
    }

    #[test]
    fn cloud_errors_name_the_error_and_retry_as_it_says() {
        let decision = decide(&Outcome::SetFailed { template: "v1".into(), to: "v2".into(), error: throttled() }, "nv");
        let synced = status_of(&decision, SYNCED).unwrap();
        assert_eq!(synced.reason, "Throttled");
        assert!(synced.message.contains("retry after 4.0s"), "{}", synced.message);
        assert_eq!(decision.next, Err(Retry::After(Duration::from_secs(4))));
        let denied = cloud::Error::PermissionDenied { message: "compute.instanceGroupManagers.get".into() };
        let decision = decide(&Outcome::LookupFailed(denied), "nv");
        assert_eq!(status_of(&decision, SYNCED).unwrap().reason, "PermissionDenied");
        assert_eq!(decision.next, Err(Retry::Never));
        let decision = decide(&Outcome::ImageSetting { from: "v1".into(), to: "v2".into() }, "nv");
        assert_eq!(decision.next, Err(Retry::Backoff), "a change in progress is polled with backoff");
        let decision = decide(&Outcome::UpToDate { template: "v1".into() }, "nv");
        assert_eq!(decision.next, Ok(RESYNC));
    }

    #[test]
    fn the_status_is_written_only_when_it_changes() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let decision = decide(&Outcome::UpToDate { template: "v1".into() }, "nv");
        let first = next_status(None, &decision, Some(1), now).unwrap();
        assert_eq!(first.image_reference.as_deref(), Some("v1"));
        assert_eq!(first.conditions.len(), 2);
        assert_eq!(next_status(Some(&first), &decision, Some(1), now), None);
        // A lookup failure keeps the recorded image and flips Synced only.
        let failed = decide(&Outcome::LookupFailed(cloud::Error::transient("503")), "nv");
        let second = next_status(Some(&first), &failed, Some(1), now).unwrap();
        assert_eq!(second.image_reference.as_deref(), Some("v1"));
        assert_eq!(condition::status_of(&second.conditions, OUTDATED), Some("False"));
        assert_eq!(condition::status_of(&second.conditions, SYNCED), Some("False"));
    }
}
