//! The Deployment controller: one ReplicaSet per pod template, rolled out as upstream does.
//!
//! # Guarantees
//! - The ReplicaSet whose template equals the Deployment's (ignoring `pod-template-hash`) is the new one; it is
//!   created as `<deployment>-<hash>` (template and selector labelled `pod-template-hash: <hash>`, annotation
//!   `deployment.kubernetes.io/revision`) when there is none.
//! - `RollingUpdate` grows the new ReplicaSet within `maxSurge` and shrinks the old ones within `maxUnavailable`
//!   ([`rollout`]); `Recreate` scales the old ones to 0 and starts the new one once their pods are gone. Old
//!   ReplicaSets end at 0 replicas; those beyond `revisionHistoryLimit` are deleted.
//! - A paused Deployment is not rolled out; its status is still kept.
//! - `status` (replicas, updated, ready, available, unavailable, observedGeneration, and the `Available` and
//!   `Progressing` conditions) is written through `/status` when it changes.

pub mod rollout;

use super::objects::{PodInfo, Typed};
use super::queue::WorkQueue;
use super::workload;
use super::{Informers, Outcome, READ_YOUR_WRITES, Reconciler, SyncError, names, rv_of};
use crate::apiserver::object::ObjectKey;
use crate::apiserver::store::{Patch, Store};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use kube::api::{DeleteParams, PatchParams, PostParams};
use rollout::Replicas;
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The label that ties a ReplicaSet and its pods to one template.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The annotation with a ReplicaSet's revision.
const REVISION: &str = "deployment.kubernetes.io/revision";

/// Starts the controller: subscribes to the caches now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    super::queue_changes(&informers.deployments, &queue);
    super::queue_controllers(&informers.replicasets, "Deployment", &queue);
    let controller =
        DeploymentController { store: store.with_identity("dev/deployment-controller"), informers: informers.clone() };
    super::worker(controller, queue, store.controller_gate(names::DEPLOYMENT), informers, shutdown)
}

struct DeploymentController {
    store: Store,
    informers: Informers,
}

/// The template without the `pod-template-hash` label (upstream `EqualIgnoreHash`).
fn without_hash(template: Option<&PodTemplateSpec>) -> Option<PodTemplateSpec> {
    let mut template = template?.clone();
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(POD_TEMPLATE_HASH);
        if labels.is_empty()
            && let Some(metadata) = template.metadata.as_mut()
        {
            metadata.labels = None;
        }
    }
    Some(template)
}

fn revision(rs: &Typed<ReplicaSet>) -> i64 {
    rs.object.metadata.annotations.as_ref().and_then(|a| a.get(REVISION)).and_then(|r| r.parse().ok()).unwrap_or(0)
}

fn replicas_of(rs: &Typed<ReplicaSet>) -> Replicas {
    Replicas {
        wanted: rs.object.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        available: rs.object.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0),
    }
}

/// Upstream's `SetDeploymentCondition`: times move only when the status or reason does.
fn set_condition(conditions: &mut Vec<DeploymentCondition>, type_: &str, ok: bool, reason: &str, message: String) {
    let status = if ok { "True" } else { "False" }.to_owned();
    let now = Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()));
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status == status && existing.reason.as_deref() == Some(reason) {
            return;
        }
        if existing.status != status {
            existing.last_transition_time = Some(now.clone());
        }
        existing.status = status;
        existing.reason = Some(reason.to_owned());
        existing.message = Some(message);
        existing.last_update_time = Some(now);
        return;
    }
    conditions.push(DeploymentCondition {
        type_: type_.to_owned(),
        status,
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_transition_time: Some(now.clone()),
        last_update_time: Some(now),
    });
}

impl DeploymentController {
    fn create_replicaset(
        &self,
        deployment: &Typed<Deployment>,
        template: &PodTemplateSpec,
        replicas: i32,
        revision: i64,
    ) -> Result<u64, SyncError> {
        let spec = deployment.object.spec.as_ref();
        let hash = workload::template_hash(template, 0);
        let mut template = template.clone();
        let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
        meta.labels.get_or_insert_with(Default::default).insert(POD_TEMPLATE_HASH.to_owned(), hash.clone());
        let mut selector: LabelSelector = spec.map(|s| s.selector.clone()).unwrap_or_default();
        selector.match_labels.get_or_insert_with(Default::default).insert(POD_TEMPLATE_HASH.to_owned(), hash.clone());
        let mut labels = template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
        labels.insert(POD_TEMPLATE_HASH.to_owned(), hash.clone());
        let rs = ReplicaSet {
            metadata: ObjectMeta {
                name: Some(format!("{}-{hash}", deployment.meta.name)),
                labels: Some(labels),
                annotations: Some([(REVISION.to_owned(), revision.to_string())].into()),
                owner_references: Some(vec![workload::controller_ref("apps/v1", "Deployment", &deployment.meta)]),
                ..ObjectMeta::default()
            },
            spec: Some(ReplicaSetSpec {
                replicas: Some(replicas),
                min_ready_seconds: spec.and_then(|s| s.min_ready_seconds),
                selector,
                template: Some(template),
            }),
            status: None,
        };
        let created =
            self.store.api::<ReplicaSet>().create(deployment.meta.namespace.as_deref(), &rs, &PostParams::default())?;
        Ok(rv_of(&created.metadata))
    }

    fn set_replicas(&self, rs: &Typed<ReplicaSet>, replicas: i32) -> Result<u64, SyncError> {
        let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
        let patched = self.store.api::<ReplicaSet>().patch(
            rs.meta.namespace.as_deref(),
            &rs.meta.name,
            &patch,
            &PatchParams::default(),
        )?;
        Ok(rv_of(&patched.metadata))
    }

    /// The new `spec.replicas` of the new and the old ReplicaSets (oldest first).
    fn plan(
        &self,
        deployment: &Typed<Deployment>,
        new: &Typed<ReplicaSet>,
        old: &[Arc<Typed<ReplicaSet>>],
    ) -> Result<(i32, Vec<i32>), SyncError> {
        let spec = deployment.object.spec.as_ref();
        let desired = spec.and_then(|s| s.replicas).unwrap_or(1);
        let strategy = spec.and_then(|s| s.strategy.as_ref());
        let old_replicas: Vec<Replicas> = old.iter().map(|rs| replicas_of(rs)).collect();
        if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
            let old_pods_remain = old.iter().any(|rs| {
                self.informers.pods.owned_by(&rs.meta.uid).iter().any(|p: &Arc<PodInfo>| !p.phase.is_terminal())
            });
            let new_target = if old_pods_remain { replicas_of(new).wanted.min(0) } else { desired };
            return Ok((new_target, vec![0; old.len()]));
        }
        let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
        let (surge, unavailable) = rollout::resolve_fenceposts(
            rolling.and_then(|r| r.max_surge.as_ref()),
            rolling.and_then(|r| r.max_unavailable.as_ref()),
            desired,
        )
        .map_err(|failure| {
            SyncError::Api(crate::apiserver::ApiError::bad_request(format!("invalid rolling update: {failure}")))
        })?;
        let new_now = replicas_of(new);
        let new_target = rollout::new_replicas(desired, surge, new_now, &old_replicas);
        let old_targets = rollout::old_replicas(desired, unavailable, new_now, &old_replicas);
        Ok((new_target, old_targets))
    }

    fn status(
        &self,
        deployment: &Typed<Deployment>,
        new: Option<&Typed<ReplicaSet>>,
        all: &[Arc<Typed<ReplicaSet>>],
    ) -> DeploymentStatus {
        let spec = deployment.object.spec.as_ref();
        let desired = spec.and_then(|s| s.replicas).unwrap_or(1);
        let status_of = |rs: &Typed<ReplicaSet>| rs.object.status.clone().unwrap_or_default();
        let sum = |f: &dyn Fn(&Typed<ReplicaSet>) -> i32| all.iter().map(|rs| f(rs)).sum::<i32>();
        let replicas = sum(&|rs| status_of(rs).replicas);
        let ready = sum(&|rs| status_of(rs).ready_replicas.unwrap_or(0));
        let available = sum(&|rs| status_of(rs).available_replicas.unwrap_or(0));
        let wanted = sum(&|rs| rs.object.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1));
        let updated = new.map_or(0, |rs| status_of(rs).replicas);
        let old = deployment.object.status.clone().unwrap_or_default();
        let mut conditions = old.conditions.clone().unwrap_or_default();
        let unavailable_allowed = spec
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.rolling_update.as_ref())
            .and_then(|r| rollout::resolve_fenceposts(r.max_surge.as_ref(), r.max_unavailable.as_ref(), desired).ok())
            .map_or(0, |(_, unavailable)| unavailable);
        if available >= desired - unavailable_allowed {
            set_condition(
                &mut conditions,
                "Available",
                true,
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            );
        } else {
            set_condition(
                &mut conditions,
                "Available",
                false,
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            );
        }
        if let Some(new) = new {
            let complete = updated == desired && replicas == desired && available >= desired;
            let (reason, message) = if complete {
                ("NewReplicaSetAvailable", format!("ReplicaSet \"{}\" has successfully progressed.", new.meta.name))
            } else {
                ("ReplicaSetUpdated", format!("ReplicaSet \"{}\" is progressing.", new.meta.name))
            };
            set_condition(&mut conditions, "Progressing", true, reason, message);
        }
        DeploymentStatus {
            observed_generation: Some(deployment.meta.generation),
            replicas: Some(replicas),
            updated_replicas: Some(updated),
            ready_replicas: Some(ready),
            available_replicas: Some(available),
            unavailable_replicas: Some((wanted - available).max(0)),
            terminating_replicas: old.terminating_replicas,
            collision_count: old.collision_count,
            conditions: Some(conditions),
        }
    }

    /// Deletes old ReplicaSets with nothing left beyond `revisionHistoryLimit`, the oldest first.
    fn clean_up(&self, deployment: &Typed<Deployment>, old: &[Arc<Typed<ReplicaSet>>]) -> Result<(), SyncError> {
        let limit = deployment.object.spec.as_ref().and_then(|s| s.revision_history_limit).unwrap_or(10).max(0);
        let idle: Vec<&Arc<Typed<ReplicaSet>>> = old
            .iter()
            .filter(|rs| {
                replicas_of(rs).wanted == 0
                    && rs.object.status.as_ref().is_none_or(|s| s.replicas == 0)
                    && !rs.meta.is_deleting()
            })
            .collect();
        let surplus = idle.len().saturating_sub(limit as usize);
        for rs in &idle[..surplus] {
            match self.store.api::<ReplicaSet>().delete(
                rs.meta.namespace.as_deref(),
                &rs.meta.name,
                &DeleteParams::default(),
            ) {
                Ok(_) => {}
                Err(error) if error.code == 404 => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }
}

impl Reconciler for DeploymentController {
    type Key = ObjectKey;

    async fn sync(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let Some(deployment) = self.informers.deployments.get(key) else { return Ok(Outcome::Done) };
        if deployment.meta.is_deleting() {
            return Ok(Outcome::Done);
        }
        let spec = deployment.object.spec.as_ref();
        let mut owned: Vec<Arc<Typed<ReplicaSet>>> = self
            .informers
            .replicasets
            .owned_by(&deployment.meta.uid)
            .into_iter()
            .filter(|rs| rs.meta.is_controlled_by(&deployment.meta.uid))
            .collect();
        owned.sort_by_key(|rs| (rs.meta.created, revision(rs), rs.meta.name.clone()));
        let template = spec.map(|s| &s.template);
        let wanted_template = without_hash(template);
        let new = owned
            .iter()
            .find(|rs| without_hash(rs.object.spec.as_ref().and_then(|s| s.template.as_ref())) == wanted_template);
        let paused = spec.and_then(|s| s.paused).unwrap_or(false);
        let mut last_write = 0;
        match (new, template) {
            (None, Some(template)) if !paused => {
                let old: Vec<Replicas> = owned.iter().map(|rs| replicas_of(rs)).collect();
                let desired = spec.and_then(|s| s.replicas).unwrap_or(1);
                let recreate =
                    spec.and_then(|s| s.strategy.as_ref()).and_then(|s| s.type_.as_deref()) == Some("Recreate");
                let initial = match (recreate, owned.is_empty()) {
                    (_, true) => desired,
                    (true, false) => 0,
                    (false, false) => {
                        let rolling = spec.and_then(|s| s.strategy.as_ref()).and_then(|s| s.rolling_update.as_ref());
                        let surge = rollout::resolve_fenceposts(
                            rolling.and_then(|r| r.max_surge.as_ref()),
                            rolling.and_then(|r| r.max_unavailable.as_ref()),
                            desired,
                        )
                        .map_or(0, |(surge, _)| surge);
                        rollout::new_replicas(desired, surge, Replicas { wanted: 0, available: 0 }, &old)
                    }
                };
                let next_revision = owned.iter().map(|rs| revision(rs)).max().unwrap_or(0) + 1;
                last_write = self.create_replicaset(&deployment, template, initial, next_revision)?;
            }
            (Some(new), _) if !paused => {
                let old: Vec<Arc<Typed<ReplicaSet>>> =
                    owned.iter().filter(|rs| rs.meta.uid != new.meta.uid).cloned().collect();
                let (new_target, old_targets) = self.plan(&deployment, new, &old)?;
                if new_target != replicas_of(new).wanted {
                    last_write = self.set_replicas(new, new_target)?;
                }
                for (rs, target) in old.iter().zip(old_targets) {
                    if target != replicas_of(rs).wanted {
                        last_write = self.set_replicas(rs, target)?;
                    }
                }
                if revision(new) < old.iter().map(|rs| revision(rs)).max().unwrap_or(0) {
                    // A rollback to an earlier template makes its ReplicaSet the newest revision again.
                    let next = old.iter().map(|rs| revision(rs)).max().unwrap_or(0) + 1;
                    let patch = Patch::Merge(json!({"metadata": {"annotations": {REVISION: next.to_string()}}}));
                    let patched = self.store.api::<ReplicaSet>().patch(
                        new.meta.namespace.as_deref(),
                        &new.meta.name,
                        &patch,
                        &PatchParams::default(),
                    )?;
                    last_write = rv_of(&patched.metadata);
                }
                self.clean_up(&deployment, &old)?;
            }
            _ => {}
        }
        if last_write > 0 {
            self.informers.replicasets.wait_for_rv(last_write, READ_YOUR_WRITES).await;
            // The next pass sees the written ReplicaSets; a rollout goes on as their pods change.
            return Ok(Outcome::RequeueAfter(Duration::ZERO));
        }
        let status = self.status(&deployment, new.map(|rs| &**rs), &owned);
        super::write_status(&self.store, &self.informers.deployments, &deployment, status).await?;
        Ok(Outcome::Done)
    }
}
