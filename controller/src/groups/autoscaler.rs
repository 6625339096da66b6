//! The AutoscalingStrategy controller: pauses the cluster-autoscaler (its Deployment scaled to 0, the replica
//! count remembered) while asked to, restores it afterwards, and writes its `--nodes` arguments.

use super::scaling_group::EventSpec;
use super::{Context, Error};
use crate::reason::Reason;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use shared::crd::{AutoscalingStrategy, AutoscalingStrategySpec, AutoscalingStrategyStatus, ScalingGroup};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Annotation on the autoscaler's Deployment: its replica count before the operator scaled it to 0. Written in
/// the same patch that scales it down, removed in the one that restores it, so a crash never loses it.
pub const REMEMBERED_REPLICAS: &str = "update.edgeless.systems/autoscaler-replicas";
/// The container whose arguments are written: the one of this name, else the Deployment's first.
pub const CONTAINER: &str = "cluster-autoscaler";

/// Whether the cluster-autoscaler should be paused, and why (for Events and logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pause {
    /// True while nodes of scaling groups are outdated or being replaced.
    pub wanted: bool,
    /// Why, for people.
    pub reason: String,
}

/// The sending side of the pause request: the replacement flow (today [`super::outdated::drive`]) sets it.
/// `None` until the sender knows: the controller then changes no replica count (after a restart, it must not
/// restore an autoscaler that a replacement still needs paused).
pub type PauseSender = watch::Sender<Option<Pause>>;

/// A pause request channel, unknown at first.
pub fn pause_channel() -> (PauseSender, watch::Receiver<Option<Pause>>) {
    watch::channel(None)
}

/// True when the autoscaler is confirmed down: the strategy's status says it is disabled and no autoscaler pod
/// exists any more (the Deployment's observed replicas are 0). New instances may be created only then.
pub fn confirmed_down(strategy: &AutoscalingStrategy) -> bool {
    strategy.status.as_ref().is_some_and(|s| !s.enabled && s.replicas == 0)
}

/// What the controller reads of the autoscaler's Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentFacts {
    /// `spec.replicas` (1 when unset, as the API defaults it).
    pub replicas: i32,
    /// `status.replicas`: the autoscaler pods that exist.
    pub observed: i32,
    /// The [`REMEMBERED_REPLICAS`] annotation, if set.
    pub remembered: Option<String>,
    /// The name of the container whose arguments are written, and its arguments; `None` without containers.
    pub container: Option<(String, Vec<String>)>,
}

impl DeploymentFacts {
    /// The facts of `deployment`.
    pub fn of(deployment: &Deployment) -> DeploymentFacts {
        let spec = deployment.spec.as_ref();
        let containers = spec.and_then(|s| s.template.spec.as_ref()).map(|s| s.containers.as_slice()).unwrap_or(&[]);
        let container = containers.iter().find(|c| c.name == CONTAINER).or_else(|| containers.first());
        DeploymentFacts {
            replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
            observed: deployment.status.as_ref().and_then(|s| s.replicas).unwrap_or(0),
            remembered: deployment.annotations().get(REMEMBERED_REPLICAS).cloned(),
            container: container.map(|c| (c.name.clone(), c.args.clone().unwrap_or_default())),
        }
    }
}

/// A scaling group the cluster-autoscaler may scale: `--nodes=MIN:MAX:NAME`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AutoscaledGroup {
    /// The autoscaler's name of the group.
    pub name: String,
    /// Minimum size.
    pub min: i32,
    /// Maximum size.
    pub max: i32,
}

/// The groups of `groups` the autoscaler may scale (`spec.autoscaling` true, with an autoscaler group name and
/// a maximum; the minimum defaults to 0), sorted by name.
pub fn autoscaled_groups<'a>(groups: impl IntoIterator<Item = &'a ScalingGroup>) -> Vec<AutoscaledGroup> {
    let mut found: Vec<AutoscaledGroup> = groups
        .into_iter()
        .filter(|g| g.spec.autoscaling)
        .filter_map(|g| {
            Some(AutoscaledGroup {
                name: g.spec.autoscaler_group_name.clone().filter(|n| !n.is_empty())?,
                min: g.spec.min.unwrap_or(0),
                max: g.spec.max?,
            })
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The autoscaler's arguments: `current` without `--nodes=` arguments and without the arguments `extra` sets,
/// then one `--nodes=MIN:MAX:NAME` per group and `--KEY=VALUE` per extra argument (sorted). Pure.
pub fn desired_args(current: &[String], groups: &[AutoscaledGroup], extra: &BTreeMap<String, String>) -> Vec<String> {
    let key_of = |arg: &str| arg.trim_start_matches('-').split('=').next().unwrap_or_default().to_owned();
    let mut args: Vec<String> = current
        .iter()
        .filter(|arg| !arg.starts_with("--nodes=") && !extra.contains_key(&key_of(arg)))
        .cloned()
        .collect();
    args.extend(groups.iter().map(|g| format!("--nodes={}:{}:{}", g.min, g.max, g.name)));
    args.extend(extra.iter().map(|(key, value)| format!("--{}={value}", key.trim_start_matches('-'))));
    args
}

/// What to write to the Deployment and the strategy's status.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// A strategic merge patch of the Deployment (replicas, the annotation, the container's arguments).
    pub patch: Option<Value>,
    /// The strategy's status after the patch.
    pub status: AutoscalingStrategyStatus,
    /// An Event about the strategy.
    pub event: Option<EventSpec>,
}

/// One write of a [`Decision`], in the order [`Decision::writes`] gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The strategy's status (only when it differs from the one recorded).
    Status,
    /// The patch of the autoscaler's Deployment.
    Deployment,
    /// The Event about the strategy.
    Event,
}

impl Decision {
    /// The writes this decision needs over the strategy's recorded status `recorded`, in the order they must be
    /// made. IMPORTANT: a pause is lifted in the status first, so the rollouts' gate ([`confirmed_down`]) closes
    /// before the first autoscaler pod can exist; a pause is confirmed in the status after the Deployment is
    /// scaled down (its status says 0 only once the pods observed are gone). A crash between two writes leaves
    /// the gate closed in both directions.
    pub fn writes(&self, recorded: Option<&AutoscalingStrategyStatus>) -> Vec<Write> {
        let status = (recorded != Some(&self.status)).then_some(Write::Status);
        let restoring = self.status.enabled && recorded.is_some_and(|s| !s.enabled);
        let deployment = self.patch.is_some().then_some(Write::Deployment);
        let event = self.event.is_some().then_some(Write::Event);
        if restoring {
            [status, deployment, event].into_iter().flatten().collect()
        } else {
            [deployment, event, status].into_iter().flatten().collect()
        }
    }
}

/// Decides the Deployment's replicas, annotation and arguments and the strategy's status. Pure.
///
/// Paused (`pause.wanted` or `spec.enabled` false): a Deployment with replicas is scaled to 0 and its count
/// remembered in [`REMEMBERED_REPLICAS`] in the same patch. Not paused: a remembered count is restored and the
/// annotation removed in one patch (an unreadable one restores 1, with a Warning). Nothing else changes the
/// replicas: an autoscaler an administrator scaled to 0 stays at 0.
pub fn decide(
    spec: &AutoscalingStrategySpec,
    pause: &Pause,
    deployment: &DeploymentFacts,
    groups: &[AutoscaledGroup],
) -> Decision {
    let off = pause.wanted || !spec.enabled;
    let why = if pause.wanted { pause.reason.clone() } else { "spec.enabled is false".to_owned() };
    let mut patch = json!({});
    let mut event = None;
    let mut replicas = deployment.replicas;
    if off && deployment.replicas > 0 {
        replicas = 0;
        patch = json!({
            "metadata": {"annotations": {REMEMBERED_REPLICAS: deployment.replicas.to_string()}},
            "spec": {"replicas": 0}
        });
        event = Some(EventSpec {
            reason: Reason::AutoscalerPaused,
            warning: false,
            message: format!("scaled the cluster-autoscaler from {} to 0 replicas: {why}", deployment.replicas),
        });
    } else if !off && let Some(remembered) = &deployment.remembered {
        let (restore, warning) = match remembered.parse::<i32>() {
            Ok(n) if n >= 0 => (n, None),
            _ => (1, Some(format!("the {REMEMBERED_REPLICAS} annotation {remembered:?} is not a replica count"))),
        };
        replicas = restore;
        patch = json!({
            "metadata": {"annotations": {REMEMBERED_REPLICAS: null}},
            "spec": {"replicas": restore}
        });
        event = Some(match warning {
            None => EventSpec {
                reason: Reason::AutoscalerRestored,
                warning: false,
                message: format!("restored the cluster-autoscaler to {restore} replicas"),
            },
            Some(problem) => EventSpec {
                reason: Reason::AutoscalerRestored,
                warning: true,
                message: format!("{problem}; restored the cluster-autoscaler to 1 replica"),
            },
        });
    }
    if let Some((name, current)) = &deployment.container {
        let args = desired_args(current, groups, &spec.autoscaler_extra_args);
        if &args != current {
            patch["spec"]["template"]["spec"]["containers"] = json!([{"name": name, "args": args}]);
        }
    }
    Decision {
        patch: (patch != json!({})).then_some(patch),
        // `replicas` is what runs (the Deployment's observed pods), so that 0 confirms the pause.
        status: AutoscalingStrategyStatus { enabled: replicas > 0, replicas: deployment.observed },
        event,
    }
}

struct State {
    context: Context,
    pause: watch::Receiver<Option<Pause>>,
    groups: kube::runtime::reflector::Store<ScalingGroup>,
}

/// Runs the controller until `shutdown` is cancelled: every AutoscalingStrategy, again when its Deployment or
/// any ScalingGroup changes and whenever the pause request changes.
pub async fn run(context: Context, pause: watch::Receiver<Option<Pause>>, shutdown: CancellationToken) {
    let client = context.client.clone();
    let (groups, writer) = kube::runtime::reflector::store::<ScalingGroup>();
    let group_events = kube::runtime::WatchStreamExt::default_backoff(kube::runtime::reflector(
        writer,
        watcher(Api::<ScalingGroup>::all(client.clone()), watcher::Config::default()),
    ))
    .map(|_| ());
    let controller = Controller::new(Api::<AutoscalingStrategy>::all(client.clone()), watcher::Config::default());
    let store = controller.store();
    let pause_changes = futures::stream::unfold(pause.clone(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    let results = controller
        .watches(Api::<Deployment>::all(client), watcher::Config::default(), move |deployment: Deployment| {
            let (name, namespace) = (deployment.name_any(), deployment.namespace().unwrap_or_default());
            store
                .state()
                .iter()
                .filter(|s| s.spec.deployment_name == name && s.spec.deployment_namespace == namespace)
                .map(|s| ObjectRef::from_obj(s.as_ref()))
                .collect::<Vec<_>>()
        })
        .reconcile_all_on(futures::stream::select(pause_changes, group_events))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, Arc::new(State { context, pause, groups }));
    super::log_results("AutoscalingStrategy", results).await;
}

async fn reconcile(strategy: Arc<AutoscalingStrategy>, state: Arc<State>) -> Result<Action, Error> {
    let name = strategy.name_any();
    let kube_error = |source| Error::Kube { kind: "AutoscalingStrategy", name: name.clone(), source };
    let ctx = &state.context;
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &strategy.spec.deployment_namespace);
    let Some(pause) = state.pause.borrow().clone() else {
        // Not known yet: its first value reconciles every strategy.
        return Ok(Action::await_change());
    };
    let decision = match deployments.get_opt(&strategy.spec.deployment_name).await.map_err(kube_error)? {
        None => {
            Decision { patch: None, status: AutoscalingStrategyStatus { enabled: false, replicas: 0 }, event: None }
        }
        Some(deployment) => {
            let groups = autoscaled_groups(state.groups.state().iter().map(|g| g.as_ref()));
            decide(&strategy.spec, &pause, &DeploymentFacts::of(&deployment), &groups)
        }
    };
    for write in decision.writes(strategy.status.as_ref()) {
        match write {
            Write::Status => {
                let api: Api<AutoscalingStrategy> = Api::all(ctx.client.clone());
                let status = Patch::Merge(json!({ "status": decision.status }));
                super::fenced(ctx, api.patch_status(&name, &PatchParams::default(), &status))
                    .await?
                    .map_err(kube_error)?;
            }
            Write::Deployment => {
                let Some(patch) = &decision.patch else { continue };
                let deployment = &strategy.spec.deployment_name;
                super::fenced(ctx, deployments.patch(deployment, &PatchParams::default(), &Patch::Strategic(patch)))
                    .await?
                    .map_err(kube_error)?;
                tracing::info!(strategy = %name, %patch, "patched the cluster-autoscaler Deployment");
            }
            Write::Event => {
                let Some(event) = &decision.event else { continue };
                ctx.events.publish_named(
                    strategy.object_ref(&()),
                    None,
                    event.reason,
                    event.warning,
                    event.message.clone(),
                    "ScaleAutoscaler",
                );
            }
        }
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<AutoscalingStrategy>, error: &Error, _: Arc<State>) -> Action {
    tracing::warn!(%error, "AutoscalingStrategy reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(enabled: bool) -> AutoscalingStrategySpec {
        AutoscalingStrategySpec {
            enabled,
            deployment_name: "cluster-autoscaler".into(),
            deployment_namespace: "kube-system".into(),
            autoscaler_extra_args: BTreeMap::new(),
        }
    }

    fn deployment(replicas: i32, observed: i32, remembered: Option<&str>) -> DeploymentFacts {
        DeploymentFacts {
            replicas,
            observed,
            remembered: remembered.map(str::to_owned),
            container: Some((CONTAINER.into(), vec![])),
        }
    }

    fn paused() -> Pause {
        Pause { wanted: true, reason: "2 nodes outdated".into() }
    }

    #[test]
    fn pausing_scales_to_zero_and_remembers_the_count_in_one_patch() {
        let decision = decide(&spec(true), &paused(), &deployment(3, 3, None), &[]);
        assert_eq!(
            decision.patch,
            Some(json!({"metadata": {"annotations": {REMEMBERED_REPLICAS: "3"}}, "spec": {"replicas": 0}}))
        );
        assert_eq!(decision.status, AutoscalingStrategyStatus { enabled: false, replicas: 3 });
        assert!(decision.event.unwrap().message.contains("2 nodes outdated"));
        // Once the pods are gone: confirmed down, and nothing more to write.
        let decision = decide(&spec(true), &paused(), &deployment(0, 0, Some("3")), &[]);
        assert_eq!(decision.patch, None);
        assert_eq!(decision.status, AutoscalingStrategyStatus { enabled: false, replicas: 0 });
    }

    #[test]
    fn resuming_restores_the_remembered_count_not_always_one() {
        let decision = decide(&spec(true), &Pause::default(), &deployment(0, 0, Some("3")), &[]);
        assert_eq!(
            decision.patch,
            Some(json!({"metadata": {"annotations": {REMEMBERED_REPLICAS: null}}, "spec": {"replicas": 3}}))
        );
        assert!(decision.status.enabled);
        assert_eq!(decision.event.unwrap().reason, Reason::AutoscalerRestored);
        // A remembered 0 is restored as 0.
        let decision = decide(&spec(true), &Pause::default(), &deployment(0, 0, Some("0")), &[]);
        assert_eq!(decision.patch.unwrap()["spec"]["replicas"], 0);
    }

    #[test]
    fn a_pause_is_lifted_in_the_status_before_the_deployment_and_confirmed_after_it() {
        let off = AutoscalingStrategyStatus { enabled: false, replicas: 0 };
        // Restoring: the status says enabled (the rollouts' gate closes) before any autoscaler pod can exist.
        let decision = decide(&spec(true), &Pause::default(), &deployment(0, 0, Some("3")), &[]);
        assert_eq!(decision.writes(Some(&off)), [Write::Status, Write::Deployment, Write::Event]);
        // Pausing: the Deployment is scaled down first; the status follows (and says 0 only once the pods are gone).
        let on = AutoscalingStrategyStatus { enabled: true, replicas: 3 };
        let decision = decide(&spec(true), &paused(), &deployment(3, 3, None), &[]);
        assert_eq!(decision.writes(Some(&on)), [Write::Deployment, Write::Event, Write::Status]);
        // The pods gone: only the status, confirming the pause.
        let decision = decide(&spec(true), &paused(), &deployment(0, 0, Some("3")), &[]);
        assert_eq!(decision.writes(Some(&AutoscalingStrategyStatus { enabled: false, replicas: 3 })), [Write::Status]);
        assert_eq!(decision.writes(Some(&off)), []);
        // A first reconcile (no status yet) that pauses: the Deployment first, so the status never says paused
        // while pods run.
        let decision = decide(&spec(true), &paused(), &deployment(2, 2, None), &[]);
        assert_eq!(decision.writes(None), [Write::Deployment, Write::Event, Write::Status]);
    }

    #[test]
    fn a_garbled_annotation_restores_one_replica_with_a_warning() {
        for garbled in ["three", "-2", ""] {
            let decision = decide(&spec(true), &Pause::default(), &deployment(0, 0, Some(garbled)), &[]);
            assert_eq!(decision.patch.unwrap()["spec"]["replicas"], 1, "{garbled:?}");
            assert!(decision.event.unwrap().warning);
        }
    }

    #[test]
    fn without_a_pause_or_a_remembered_count_the_replicas_are_left_alone() {
        for replicas in [0, 1, 5] {
            let decision = decide(&spec(true), &Pause::default(), &deployment(replicas, replicas, None), &[]);
            assert_eq!(decision.patch, None, "an administrator's count stays");
            assert_eq!(decision.status.enabled, replicas > 0);
        }
    }

    #[test]
    fn a_disabled_strategy_pauses_too() {
        let decision = decide(&spec(false), &Pause::default(), &deployment(2, 2, None), &[]);
        assert_eq!(decision.patch.unwrap()["spec"]["replicas"], 0);
        assert!(decision.event.unwrap().message.contains("spec.enabled is false"));
        // Scaled up again by someone while paused: scaled down again, the new count remembered.
        let decision = decide(&spec(true), &paused(), &deployment(4, 1, Some("3")), &[]);
        assert_eq!(decision.patch.unwrap()["metadata"]["annotations"][REMEMBERED_REPLICAS], "4");
    }

    #[test]
    fn node_group_arguments_are_written_as_constellation_writes_them() {
        let groups = [
            AutoscaledGroup { name: "workers-b".into(), min: 1, max: 5 },
            AutoscaledGroup { name: "workers-a".into(), min: 0, max: 10 },
        ];
        let mut extra = BTreeMap::new();
        extra.insert("scale-down-delay-after-add".to_owned(), "5m".to_owned());
        let current = vec![
            "--cloud-provider=aws".to_owned(),
            "--nodes=1:2:gone".to_owned(),
            "--scale-down-delay-after-add=10m".to_owned(),
        ];
        let mut sorted = groups.to_vec();
        sorted.sort();
        assert_eq!(
            desired_args(&current, &sorted, &extra),
            vec![
                "--cloud-provider=aws",
                "--nodes=0:10:workers-a",
                "--nodes=1:5:workers-b",
                "--scale-down-delay-after-add=5m"
            ]
        );
        let mut facts = deployment(1, 1, None);
        facts.container = Some(("autoscaler".into(), current));
        let decision = decide(
            &AutoscalingStrategySpec { autoscaler_extra_args: extra.clone(), ..spec(true) },
            &Pause::default(),
            &facts,
            &sorted,
        );
        let patch = decision.patch.unwrap();
        assert_eq!(patch["spec"]["template"]["spec"]["containers"][0]["name"], "autoscaler");
        assert_eq!(patch["spec"]["template"]["spec"]["containers"][0]["args"][1], "--nodes=0:10:workers-a");
        // Arguments already right: no patch.
        facts.container = Some(("autoscaler".into(), desired_args(&[], &sorted, &extra)));
        let decision = decide(
            &AutoscalingStrategySpec { autoscaler_extra_args: extra, ..spec(true) },
            &Pause::default(),
            &facts,
            &sorted,
        );
        assert_eq!(decision.patch, None);
    }

    #[test]
    fn only_autoscaled_groups_with_a_name_and_a_maximum_get_arguments() {
        let group = |name: &str, autoscaling: bool, asg: Option<&str>, max: Option<i32>| {
            ScalingGroup::new(
                name,
                shared::crd::ScalingGroupSpec {
                    node_image: "nv".into(),
                    group_id: name.into(),
                    autoscaler_group_name: asg.map(str::to_owned),
                    autoscaling,
                    max,
                    ..Default::default()
                },
            )
        };
        let groups = [
            group("a", true, Some("a"), Some(3)),
            group("b", false, Some("b"), Some(3)),
            group("c", true, None, Some(3)),
            group("d", true, Some("d"), None),
        ];
        assert_eq!(autoscaled_groups(&groups), vec![AutoscaledGroup { name: "a".into(), min: 0, max: 3 }]);
    }

    #[test]
    fn confirmed_down_needs_a_disabled_status_and_no_pods() {
        let mut strategy = AutoscalingStrategy::new("s", spec(true));
        assert!(!confirmed_down(&strategy), "no status yet");
        strategy.status = Some(AutoscalingStrategyStatus { enabled: false, replicas: 1 });
        assert!(!confirmed_down(&strategy), "a pod still runs");
        strategy.status = Some(AutoscalingStrategyStatus { enabled: false, replicas: 0 });
        assert!(confirmed_down(&strategy));
    }

    #[test]
    fn the_facts_come_from_the_deployment() {
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "cluster-autoscaler", "annotations": {REMEMBERED_REPLICAS: "3"}},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "sidecar", "args": ["x"]}, {"name": CONTAINER, "args": ["--v=2"]}]}}},
            "status": {"replicas": 2}
        }))
        .unwrap();
        let facts = DeploymentFacts::of(&deployment);
        assert_eq!(facts.replicas, 1, "unset replicas default to 1");
        assert_eq!(facts.observed, 2);
        assert_eq!(facts.remembered.as_deref(), Some("3"));
        assert_eq!(facts.container, Some((CONTAINER.to_owned(), vec!["--v=2".to_owned()])));
    }
}
