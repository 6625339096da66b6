//! Health checks' evaluation (issue 33 item 1): a background task reads the objects each check of each rollout names
//! and evaluates its CEL expression, out of the reconcile; the planner's gate ([`crate::policy::health::hold`])
//! decides from the verdicts it keeps.
//!
//! # Guarantees
//! - **Only what the specs ask**: the reconciler hands over the checks of every acting spec on each plan
//!   ([`HealthChecks::apply`]); without a check nothing is read (no request, no write). A check added (or changed:
//!   it starts over) is evaluated at once; all are evaluated again every [`INTERVAL`].
//! - **A changed verdict plans again**: when a check turns true or false (or what it saw changes), the reconciler
//!   is triggered, so a rollout moves within one plan once its checks pass.
//! - **Reads**: the kind is found by discovery of `apiVersion` (cached; found again after a 404), then the object is
//!   read by name, or the objects are listed by the label selector (every one must pass, and at least one must be
//!   listed), through kube's dynamic API. A missing object, a read the controller's RBAC forbids (named with the
//!   role to extend, see README), an apiVersion/kind not served, or a read that fails or takes longer than
//!   [`READ_TIMEOUT`] is a false check, named: never true.
//! - **Type errors first**: with the kind's discovery, the OpenAPI v3 document of its group version is read once;
//!   an expression that selects a field the kind's schema does not have, can never be a bool, or applies an
//!   operator to operands of types no overload takes ([`crate::policy::health_types`]), fails the check before any
//!   object is read, naming the error.
//! - Each verdict keeps since when it has been true (or false) without a break: the `for` and the `timeout` of the
//!   check count from it.
//! - **A new leader resumes** the `for` and the `timeout`: a check's first verdict in a leadership term that finds
//!   what the NodeVersion's status records for the check (`status.healthChecks[]`, written for the spec's current
//!   generation by an earlier leader: same name, same outcome) keeps the recorded `since` (at most now) instead of
//!   starting over; a different outcome, a check of another generation, or none recorded starts now.

use crate::policy::health::{Check, Target, Verdict};
use crate::policy::health_types::{kind_document, type_error};
use crate::policy::{Rollout, SpecState};
use crate::reconciler::Clock;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::discovery::{ApiCapabilities, Scope};
use parking_lot::Mutex;
use shared::crd::HealthCheckStatus;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often every check is evaluated again.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// The longest an evaluation (discovery and the reads included) may take before the check counts as false.
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// The longest the read of a kind's OpenAPI document may take; without it the kind's checks are not type-checked.
pub const OPENAPI_TIMEOUT: Duration = Duration::from_secs(5);
/// The most objects a selector may list: more fail the check (a selector that broad is a mistake).
pub const MAX_OBJECTS: u32 = 500;
/// The label a ClusterRole carries to grant the controller what health checks read (README: Health checks).
pub const AGGREGATION_LABEL: &str = "update.edgeless.systems/aggregate-to-health-checks";

/// The checks of every rollout and their last verdicts; see the module docs.
pub struct HealthChecks {
    client: kube::Client,
    clock: Clock,
    /// The reconciler's trigger, notified when a verdict changes.
    trigger: Arc<Notify>,
    state: Mutex<State>,
    /// Notified when a check was added: it is evaluated at once.
    added: Notify,
}

#[derive(Default)]
struct State {
    /// By NodeVersion UID and check name.
    checks: BTreeMap<(String, String), Entry>,
    /// Discovery's answers by (apiVersion, kind), with the OpenAPI v3 document of the group version (None: not
    /// published or not readable; the checks of the kind are then not type-checked).
    resources: HashMap<(String, String), Resource>,
}

type Resource = (ApiResource, ApiCapabilities, Option<Arc<serde_json::Value>>);

struct Entry {
    check: Check,
    verdict: Option<Verdict>,
    /// What the status recorded of the check when it was handed over (passing, since): its first verdict resumes
    /// that since when it finds the same.
    recorded: Option<Recorded>,
}

/// A check's outcome as the status recorded it: whether it passed, and since when.
type Recorded = (bool, jiff::Timestamp);

impl HealthChecks {
    pub fn new(client: kube::Client, trigger: Arc<Notify>) -> HealthChecks {
        HealthChecks {
            client,
            clock: Clock::System,
            trigger,
            state: Mutex::new(State::default()),
            added: Notify::new(),
        }
    }

    /// The same with `clock` as the time verdicts are recorded at.
    pub fn with_clock(mut self, clock: Clock) -> HealthChecks {
        self.clock = clock;
        self
    }

    /// Keeps the checks of each rollout's acting spec (`uids[i]` is the UID of `rollouts[i]`'s NodeVersion, and
    /// `recorded[i]` what its status records of the checks of its current generation) and forgets the others; gives
    /// each rollout the verdicts its checks have so far.
    pub fn apply(&self, uids: &[String], recorded: &[&[HealthCheckStatus]], rollouts: &mut [Rollout]) {
        let mut state = self.state.lock();
        let mut wanted: BTreeMap<(String, String), (Check, Option<Recorded>)> = BTreeMap::new();
        for (i, (uid, rollout)) in uids.iter().zip(rollouts.iter()).enumerate() {
            // An invalid spec holds the rollout by itself: its last valid spec's checks are not read.
            let SpecState::Valid(spec) = &rollout.spec else { continue };
            for check in &spec.policy.health_checks {
                let status = recorded.get(i).and_then(|r| r.iter().find(|s| s.name == check.name));
                let resume = status.map(|s| (s.passing, s.since.0));
                wanted.insert((uid.clone(), check.name.clone()), (check.clone(), resume));
            }
        }
        state.checks.retain(|key, entry| wanted.get(key).is_some_and(|(check, _)| *check == entry.check));
        let mut added = false;
        for (key, (check, recorded)) in wanted {
            state.checks.entry(key).or_insert_with(|| {
                added = true;
                Entry { check, verdict: None, recorded }
            });
        }
        for (uid, rollout) in uids.iter().zip(rollouts.iter_mut()) {
            rollout.health = state
                .checks
                .range((uid.clone(), String::new())..)
                .take_while(|((u, _), _)| u == uid)
                .filter_map(|(_, e)| e.verdict.clone())
                .collect();
        }
        drop(state);
        if added {
            self.added.notify_one();
        }
    }

    /// Forgets every check (the leadership term ended: the next leader's reconciler hands them over again).
    pub fn clear(&self) {
        self.state.lock().checks.clear();
    }

    /// Evaluates every check now, then every [`INTERVAL`] (at once when one is added), until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let checks: Vec<((String, String), Check)> =
                self.state.lock().checks.iter().map(|(k, e)| (k.clone(), e.check.clone())).collect();
            let mut changed = false;
            for (key, check) in checks {
                let outcome = tokio::select! {
                    () = shutdown.cancelled() => return,
                    outcome = self.evaluate(&check) => outcome,
                };
                changed |= self.record(&key, &check, outcome);
            }
            if changed {
                self.trigger.notify_one();
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(INTERVAL) => {}
                () = self.added.notified() => {}
            }
        }
    }

    /// Records the outcome of `check` (if it is still wanted as it was): whether its verdict changed.
    fn record(&self, key: &(String, String), check: &Check, (passing, observed): (bool, String)) -> bool {
        // To the millisecond: the status holds it as it is (a `MicroTime`), so a status computed again equals it.
        let now = shared::protocol::truncate_to_millis(self.clock.now());
        let mut state = self.state.lock();
        let Some(entry) = state.checks.get_mut(key).filter(|e| e.check == *check) else { return false };
        // The first verdict of the term: what an earlier leader recorded, if it found the same, goes on.
        let resumed = match (entry.verdict.is_none(), entry.recorded.take()) {
            (true, Some((recorded, since))) if recorded == passing => Some(since.min(now)),
            _ => None,
        };
        match &mut entry.verdict {
            Some(v) if v.passing == passing => {
                let changed = v.observed != observed;
                v.observed = observed;
                changed
            }
            verdict => {
                if passing {
                    tracing::info!(check = check.name, detail = observed, "health check passes");
                } else {
                    tracing::warn!(check = check.name, detail = observed, "health check fails");
                }
                *verdict =
                    Some(Verdict { check: check.name.clone(), passing, since: resumed.unwrap_or(now), observed });
                true
            }
        }
    }

    /// Reads the objects of `check` and evaluates its expression: whether it passes, and what it saw.
    pub async fn evaluate(&self, check: &Check) -> (bool, String) {
        match tokio::time::timeout(READ_TIMEOUT, self.read_and_evaluate(check)).await {
            Ok(Ok(seen)) => (true, seen),
            Ok(Err(seen)) => (false, seen),
            Err(_) => (false, format!("{}: no answer from the API server within {READ_TIMEOUT:?}", check.object())),
        }
    }

    async fn read_and_evaluate(&self, check: &Check) -> Result<String, String> {
        let (resource, capabilities, document) = self.resource(check).await?;
        // A type error the object's schema shows: the check could never pass.
        if let Some(document) = document
            && let Some(error) =
                type_error(&check.expression, &document, &resource.group, &resource.version, &check.kind)
        {
            return Err(format!(
                "{}: {}: {error}; it fails until the expression is fixed",
                check.object(),
                check.expression.source()
            ));
        }
        let namespaced = capabilities.scope == Scope::Namespaced;
        let api: Api<DynamicObject> = match (&check.namespace, namespaced) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, &resource),
            (None, true) if matches!(check.target, Target::Selector(_)) => {
                Api::all_with(self.client.clone(), &resource)
            }
            (None, true) => return Err(format!("{}: {} is namespaced; set namespace", check.object(), check.kind)),
            (Some(_), false) => {
                return Err(format!("{}: {} is cluster-scoped; leave namespace out", check.object(), check.kind));
            }
            (None, false) => Api::all_with(self.client.clone(), &resource),
        };
        let objects = match &check.target {
            Target::Name(name) => match api.get(name).await {
                Ok(object) => vec![object],
                Err(error) => return Err(self.read_failed(check, &resource, "get", error)),
            },
            Target::Selector(selector) => {
                let params = ListParams::default().labels(selector).limit(MAX_OBJECTS);
                let list = match api.list(&params).await {
                    Ok(list) => list,
                    Err(error) => return Err(self.read_failed(check, &resource, "list", error)),
                };
                if list.metadata.continue_.as_deref().is_some_and(|c| !c.is_empty()) {
                    return Err(format!("{}: more than {MAX_OBJECTS} objects match", check.object()));
                }
                if list.items.is_empty() {
                    return Err(format!("{}: no object matches", check.object()));
                }
                list.items
            }
        };
        for object in &objects {
            let named = object_name(&check.kind, object);
            let json = serde_json::to_value(object).map_err(|e| format!("{named}: cannot be read as JSON: {e}"))?;
            check.expression.evaluate(&json).map_err(|seen| format!("{named}: {seen}"))?;
        }
        Ok(match objects.as_slice() {
            [one] => format!("{}: {} is true", object_name(&check.kind, one), check.expression.source()),
            many => format!("{}: true for each of {} objects", check.object(), many.len()),
        })
    }

    /// The resource of the check's apiVersion and kind, by discovery, and its group version's OpenAPI v3 document
    /// (cached).
    async fn resource(&self, check: &Check) -> Result<Resource, String> {
        let key = (check.api_version.clone(), check.kind.clone());
        if let Some(found) = self.state.lock().resources.get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = check.api_version.split_once('/').unwrap_or(("", &check.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &check.kind);
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, capabilities)) => {
                let document = self.openapi(group, version, &check.kind).await.map(Arc::new);
                let found = (resource, capabilities, document);
                self.state.lock().resources.insert(key, found.clone());
                Ok(found)
            }
            Err(error) => Err(format!(
                "{}: the API server does not serve kind {} in {}: {error}",
                check.object(),
                check.kind,
                check.api_version
            )),
        }
    }

    /// The OpenAPI v3 document of a group version (`/openapi/v3/api/v1`, `/openapi/v3/apis/GROUP/VERSION`), as
    /// every authenticated user may read it (the `system:discovery` role); None when it cannot be read.
    /// Only `kind`'s part of it is kept ([`kind_document`]); it is read within [`OPENAPI_TIMEOUT`].
    async fn openapi(&self, group: &str, version: &str, kind: &str) -> Option<serde_json::Value> {
        let path = if group.is_empty() {
            format!("/openapi/v3/api/{version}")
        } else {
            format!("/openapi/v3/apis/{group}/{version}")
        };
        let request = http::Request::get(&path).body(Vec::new()).ok()?;
        let read = tokio::time::timeout(OPENAPI_TIMEOUT, self.client.request::<serde_json::Value>(request)).await;
        let document = match read {
            Ok(Ok(document)) => document,
            Ok(Err(error)) => {
                tracing::info!(path, %error, "no OpenAPI document: health checks of {kind} are not type-checked");
                return None;
            }
            Err(_) => {
                tracing::info!(path, "no OpenAPI document in time: health checks of {kind} are not type-checked");
                return None;
            }
        };
        kind_document(&document, group, version, kind)
    }

    /// What a failed read says (a 404 forgets the kind's discovery: it may have been removed).
    fn read_failed(&self, check: &Check, resource: &ApiResource, verb: &str, error: kube::Error) -> String {
        let plural = if resource.group.is_empty() {
            resource.plural.clone()
        } else {
            format!("{}.{}", resource.plural, resource.group)
        };
        match error {
            kube::Error::Api(status) if status.code == 404 => {
                self.state.lock().resources.remove(&(check.api_version.clone(), check.kind.clone()));
                format!("{} not found", check.object())
            }
            kube::Error::Api(status) if status.code == 403 => format!(
                "{}: forbidden: may not {verb} {plural}; grant the controller get and list on them in a ClusterRole \
                 labelled {AGGREGATION_LABEL}: \"true\" (see README, Health checks)",
                check.object()
            ),
            other => format!("{}: cannot {verb} {plural}: {other}", check.object()),
        }
    }
}

/// `ConfigMap ceph/health` for an object read.
fn object_name(kind: &str, object: &DynamicObject) -> String {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    match object.metadata.namespace.as_deref() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Policy, ValidSpec};
    use jiff::Timestamp;

    /// A client no request reaches: these tests record outcomes by hand.
    fn client() -> kube::Client {
        let service = tower::service_fn(|_request: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, std::io::Error>(std::io::Error::other("no server here"))
        });
        kube::Client::new(service, "default")
    }

    fn rollout(expression: &str, valid: bool) -> Rollout {
        let spec: shared::crd::HealthCheck = serde_json::from_value(serde_json::json!({
            "name": "ceph", "apiVersion": "v1", "kind": "ConfigMap", "namespace": "ceph", "objectName": "health",
            "expression": expression
        }))
        .unwrap();
        let policy = Policy { health_checks: crate::policy::health::validate(&[spec]).unwrap(), ..Policy::default() };
        let spec = Arc::new(ValidSpec { generation: 1, target: "v2".into(), policy, raw: serde_json::json!({}) });
        let spec = if valid {
            SpecState::Valid(spec)
        } else {
            SpecState::Invalid { errors: vec!["spec.image: bad".into()], last_valid: Some(spec) }
        };
        Rollout::new("nv", spec, None)
    }

    #[tokio::test(start_paused = true)]
    async fn health_a_verdict_keeps_its_since_while_it_holds_and_a_changed_check_starts_over() {
        let t0: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        let checks = HealthChecks::new(client(), Default::default()).with_clock(Clock::tokio(t0));
        let uids = ["uid-1".to_owned()];
        let mut rollouts = [rollout("self.data.health == 'HEALTH_OK'", true)];
        checks.apply(&uids, &[], &mut rollouts);
        assert!(rollouts[0].health.is_empty(), "not evaluated yet");
        let key = ("uid-1".to_owned(), "ceph".to_owned());
        let check = match &rollouts[0].spec {
            SpecState::Valid(spec) => spec.policy.health_checks[0].clone(),
            SpecState::Invalid { .. } => unreachable!(),
        };

        assert!(checks.record(&key, &check, (false, "HEALTH_WARN".into())));
        tokio::time::advance(Duration::from_secs(5)).await;
        // Still failing: the since stays; what it saw changes (a change to report), or not.
        assert!(checks.record(&key, &check, (false, "HEALTH_ERR".into())));
        assert!(!checks.record(&key, &check, (false, "HEALTH_ERR".into())));
        checks.apply(&uids, &[], &mut rollouts);
        let v = &rollouts[0].health[0];
        assert_eq!((v.passing, v.since, v.observed.as_str()), (false, t0, "HEALTH_ERR"));
        // It passes: since now.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(checks.record(&key, &check, (true, "HEALTH_OK".into())));
        checks.apply(&uids, &[], &mut rollouts);
        let v = &rollouts[0].health[0];
        assert!(v.passing && v.since >= t0 + jiff::SignedDuration::from_secs(10), "{v:?}");

        // The check changed: it starts over, and an outcome of the old one is dropped.
        let mut changed = [rollout("self.data.health != 'HEALTH_ERR'", true)];
        checks.apply(&uids, &[], &mut changed);
        assert!(changed[0].health.is_empty());
        assert!(!checks.record(&key, &check, (true, "HEALTH_OK".into())));
        // An invalid spec's (last valid) checks are not read; a rollout that went is forgotten.
        checks.apply(&uids, &[], &mut [rollout("self.data.health != 'HEALTH_ERR'", false)]);
        assert!(checks.state.lock().checks.is_empty());
        checks.apply(&uids, &[], &mut changed);
        checks.apply(&[], &[], &mut []);
        assert!(checks.state.lock().checks.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn health_a_new_leader_resumes_the_since_its_status_records_when_it_finds_the_same() {
        let t0: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        let earlier = t0 - jiff::SignedDuration::from_secs(300);
        let recorded = |passing: bool| HealthCheckStatus {
            name: "ceph".into(),
            passing,
            since: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(earlier),
            message: "ConfigMap ceph/health: ...".into(),
        };
        let uids = ["uid-1".to_owned()];
        let key = ("uid-1".to_owned(), "ceph".to_owned());
        let fresh = || {
            let checks = HealthChecks::new(client(), Default::default()).with_clock(Clock::tokio(t0));
            let rollouts = [rollout("self.data.health == 'HEALTH_OK'", true)];
            let check = match &rollouts[0].spec {
                SpecState::Valid(spec) => spec.policy.health_checks[0].clone(),
                SpecState::Invalid { .. } => unreachable!(),
            };
            (checks, rollouts, check)
        };
        let since = |checks: &HealthChecks, rollouts: &mut [Rollout]| {
            checks.apply(&uids, &[], rollouts);
            rollouts[0].health[0].since
        };

        // Failing as the earlier leader recorded: its since goes on (the timeout counts from it).
        let (checks, mut rollouts, check) = fresh();
        checks.apply(&uids, &[&[recorded(false)]], &mut rollouts);
        assert!(checks.record(&key, &check, (false, "HEALTH_WARN".into())));
        assert_eq!(since(&checks, &mut rollouts), earlier);
        // A later change of outcome starts a new since, as always.
        assert!(checks.record(&key, &check, (true, "HEALTH_OK".into())));
        assert_eq!(since(&checks, &mut rollouts), t0);

        // Another outcome than the one recorded: since now.
        let (checks, mut rollouts, check) = fresh();
        checks.apply(&uids, &[&[recorded(true)]], &mut rollouts);
        assert!(checks.record(&key, &check, (false, "HEALTH_WARN".into())));
        assert_eq!(since(&checks, &mut rollouts), t0);

        // Nothing recorded (or for another generation: the reconciler hands none): since now.
        let (checks, mut rollouts, check) = fresh();
        checks.apply(&uids, &[], &mut rollouts);
        assert!(checks.record(&key, &check, (false, "HEALTH_WARN".into())));
        assert_eq!(since(&checks, &mut rollouts), t0);
    }
}
