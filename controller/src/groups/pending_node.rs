//! The PendingNode controller: a joining instance becomes a Ready Node or is deleted at its deadline; a
//! leaving one is terminated, its deletion retried past the deadline.

use super::condition::{self, Wanted};
use super::scaling_group::EventSpec;
use super::{Attempts, Context, Error, GroupLabels, retry_delay};
use crate::nodes::SlimNode;
use crate::reason::Reason;
use cloud::{Deletion, GroupId, InstanceState, ProviderId, Retry};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use shared::crd::{CspState, PendingNode, PendingNodeGoal};
use shared::protocol::keys;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Condition type: True once a joining instance was given up (it did not join by its deadline, or the cloud
/// failed it) and deleted: a failed replacement. Stays True after the goal switched to `Leave`.
pub const JOIN_FAILED: &str = "JoinFailed";
/// How often a failed join's terminated record looks again whether its donor has seen the failure.
const DONOR_RECHECK: Duration = Duration::from_secs(2);
/// Condition type: True when a leaving instance was not terminated by its deadline.
pub const LEAVE_OVERDUE: &str = "LeaveOverdue";
/// Condition type: True when the last cloud calls for the instance succeeded; False names the error.
pub const SYNCED: &str = "Synced";

/// Whether the instance's Node is registered and Ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeFact {
    /// No Node carries the instance's provider ID.
    Absent,
    /// The Node exists and is not Ready (or has not reported).
    NotReady,
    /// The Node exists and is Ready.
    Ready,
}

/// Why a joining instance was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinFailure {
    /// Its deadline passed before its Node was Ready.
    DeadlineExceeded,
    /// The cloud reports it `Failed`: it does not become Ready by itself.
    InstanceFailed,
    /// The cloud reports it terminated (or does not know it): it cannot join.
    InstanceGone,
}

impl JoinFailure {
    /// PascalCase, as condition reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            JoinFailure::DeadlineExceeded => "DeadlineExceeded",
            JoinFailure::InstanceFailed => "InstanceFailed",
            JoinFailure::InstanceGone => "InstanceGone",
        }
    }
}

/// What the controller knows of a PendingNode at one moment; the input of [`decide`].
#[derive(Debug)]
pub struct Facts<'a> {
    /// The goal.
    pub goal: PendingNodeGoal,
    /// `status.reachedGoal` as recorded.
    pub reached_goal: bool,
    /// `spec.deadline`, or the creation time plus the goal's default timeout.
    pub deadline: Timestamp,
    /// When the PendingNode was created (polls slow down as it ages).
    pub created: Timestamp,
    /// Now.
    pub now: Timestamp,
    /// The instance's Node.
    pub node: NodeFact,
    /// The instance's state at the cloud, or why it could not be read.
    pub state: Result<InstanceState, &'a cloud::Error>,
    /// Whether `LeaveOverdue` is True already (the overdue Event and metric come once).
    pub leave_overdue: bool,
    /// The instance failed to join and its donor still waits for it (`intent=replace` of this attempt, not yet
    /// marked failed): the record stays until the rollout has seen the failure, so that the donor is counted
    /// failed instead of taking the missing record for an unrecorded request.
    pub donor_waits: bool,
}

/// What to do about a PendingNode (not a node's step: see `shared::protocol::Step`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Nothing at the cloud; record what was seen and look again at the decision's `wake`.
    Wait,
    /// The Node is Ready and the instance running: set `reachedGoal`; nothing more to watch.
    Joined,
    /// Delete the instance, then switch the goal to `Leave` with a new deadline and record the failure.
    GiveUp(JoinFailure),
    /// The instance is terminated: delete the PendingNode.
    Remove,
    /// The leave deadline passed: delete the instance again.
    RetryDelete,
}

/// A [`Move`] with the status and Event that go with it and when to look again.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The step.
    pub step: Move,
    /// `status.cspState`, when the cloud answered.
    pub csp_state: Option<CspState>,
    /// Conditions to set.
    pub conditions: Vec<Wanted>,
    /// An Event.
    pub event: Option<EventSpec>,
    /// When to look again (`None`: only on a change). A timer, never shorter than needed: the deadline, or
    /// the next poll of the cloud's state.
    pub wake: Option<Duration>,
}

/// How often the provider's state is polled for a PendingNode of `age`: a tenth of its age, between 1 s and
/// 30 s (new instances change state quickly; old ones slowly). Node changes wake the controller at once.
pub fn poll_interval(age: Duration) -> Duration {
    (age / 10).clamp(Duration::from_secs(1), MAX_POLL)
}

/// The longest [`poll_interval`].
pub const MAX_POLL: Duration = Duration::from_secs(30);

/// The cloud's state as `status.cspState`.
pub fn csp_state(state: InstanceState) -> CspState {
    match state {
        InstanceState::Creating => CspState::Creating,
        InstanceState::Ready => CspState::Ready,
        InstanceState::Stopping => CspState::Stopping,
        InstanceState::Stopped => CspState::Stopped,
        InstanceState::Terminating => CspState::Terminating,
        InstanceState::Terminated => CspState::Terminated,
        InstanceState::Failed => CspState::Failed,
    }
}

fn until(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// Decides the step for a PendingNode. Pure: every input is in `facts`.
pub fn decide(facts: &Facts<'_>) -> Decision {
    let state = facts.state.as_ref().ok().copied();
    let mut conditions = vec![match &facts.state {
        Ok(_) => Wanted::new(SYNCED, true, "CloudCallsSucceeded", "the instance's state was read"),
        Err(error) => {
            Wanted::new(SYNCED, false, error.outcome().as_str(), format!("reading the instance's state: {error}"))
        }
    }];
    let past_deadline = facts.now >= facts.deadline;
    let poll = match &facts.state {
        Ok(_) => poll_interval(until(facts.created, facts.now)),
        Err(error) => retry_delay(error.retry(), 1).max(poll_interval(until(facts.created, facts.now))),
    };
    let timer = |deadline: Timestamp| Some(poll.min(until(facts.now, deadline).max(Duration::from_millis(100))));
    let decision =
        |step, conditions, event, wake| Decision { step, csp_state: state.map(csp_state), conditions, event, wake };
    match facts.goal {
        PendingNodeGoal::Join if facts.reached_goal => decision(Move::Wait, conditions, None, None),
        PendingNodeGoal::Join => {
            let failure = match state {
                Some(InstanceState::Failed) => Some(JoinFailure::InstanceFailed),
                Some(InstanceState::Terminated | InstanceState::Terminating) => Some(JoinFailure::InstanceGone),
                _ if facts.node == NodeFact::Ready && state == Some(InstanceState::Ready) => None,
                _ if past_deadline => Some(JoinFailure::DeadlineExceeded),
                _ => None,
            };
            match failure {
                Some(why) => {
                    conditions.push(Wanted::new(JOIN_FAILED, true, why.as_str(), join_failure_message(why, facts)));
                    let event = EventSpec {
                        reason: Reason::JoinFailed,
                        warning: true,
                        message: format!("{}; deleting the instance", join_failure_message(why, facts)),
                    };
                    decision(Move::GiveUp(why), conditions, Some(event), Some(Duration::ZERO))
                }
                None if facts.node == NodeFact::Ready && state == Some(InstanceState::Ready) => {
                    let event = EventSpec {
                        reason: Reason::Joined,
                        warning: false,
                        message: "the instance's Node is Ready".into(),
                    };
                    decision(Move::Joined, conditions, Some(event), None)
                }
                None => decision(Move::Wait, conditions, None, timer(facts.deadline)),
            }
        }
        PendingNodeGoal::Leave => match state {
            Some(InstanceState::Terminated) if facts.donor_waits => {
                decision(Move::Wait, conditions, None, Some(DONOR_RECHECK))
            }
            Some(InstanceState::Terminated) => {
                let event =
                    EventSpec { reason: Reason::Left, warning: false, message: "the instance is terminated".into() };
                decision(Move::Remove, conditions, Some(event), None)
            }
            _ if past_deadline => {
                let overdue = until(facts.deadline, facts.now);
                let message = format!(
                    "the instance is {} {}s after its leave deadline; deleting it again",
                    state.map_or("of unknown state", InstanceState::as_str),
                    overdue.as_secs()
                );
                conditions.push(Wanted::new(LEAVE_OVERDUE, true, "DeadlineExceeded", message.clone()));
                let event = (!facts.leave_overdue).then_some(EventSpec {
                    reason: Reason::LeaveDeadlineExceeded,
                    warning: true,
                    message,
                });
                // Retries of the deletion slow down as the instance stays overdue: a tenth of the time since the
                // deadline, between 1 s and 5 min.
                let wake = (overdue / 10).clamp(Duration::from_secs(1), Duration::from_secs(300)).max(poll);
                decision(Move::RetryDelete, conditions, event, Some(wake))
            }
            _ => decision(Move::Wait, conditions, None, timer(facts.deadline)),
        },
    }
}

/// Whether `pending` records a failed join whose donor (its `donor` annotation) still has the `intent=replace` of
/// this attempt (since before the record was created, to the second) and no heir: the rollout has not marked it
/// failed yet. Asked only of a leaving record whose join failed. The donor is read from the controller's Node
/// cache: a cache that lags shows the donor still waiting, and the record is looked at again shortly.
fn donor_waits(pending: &PendingNode, nodes: &Store<SlimNode>) -> bool {
    let join_failed = pending
        .status
        .as_ref()
        .and_then(|s| condition::status_of(&s.conditions, JOIN_FAILED))
        .is_some_and(|s| s == "True");
    let created = pending.meta().creation_timestamp.as_ref().map(|t| t.0);
    let Some(donor) = pending.annotations().get(keys::DONOR).filter(|_| join_failed) else { return false };
    if pending.spec.goal != PendingNodeGoal::Leave {
        return false;
    }
    nodes.get(&ObjectRef::new(donor)).is_some_and(|node| attempt_waits(node.annotations(), created))
}

/// Whether a donor with `annotations` still waits for the joining record created at `created`: its intent is
/// `replace`, began no later than the record's second, and no heir was paired. Pure.
pub fn attempt_waits(annotations: &std::collections::BTreeMap<String, String>, created: Option<Timestamp>) -> bool {
    let Ok(controller) = shared::protocol::ControllerAnnotations::read(annotations) else { return false };
    let Some(intent) = controller.intent else { return false };
    intent.step == shared::protocol::Step::Replace
        && !annotations.contains_key(keys::HEIR)
        && created.is_some_and(|c| crate::policy::replacement::of_attempt(c, intent.since))
}

fn join_failure_message(why: JoinFailure, facts: &Facts<'_>) -> String {
    match why {
        JoinFailure::DeadlineExceeded => format!(
            "the instance's Node was not Ready by the deadline {} (node {}, instance {})",
            facts.deadline,
            match facts.node {
                NodeFact::Absent => "not registered",
                NodeFact::NotReady => "not Ready",
                NodeFact::Ready => "Ready",
            },
            facts.state.as_ref().map_or("state unknown", |s| s.as_str())
        ),
        JoinFailure::InstanceFailed => "the cloud reports the instance Failed".into(),
        JoinFailure::InstanceGone => "the cloud reports the instance terminated".into(),
    }
}

/// The conditions and Event when deleting the instance failed. Pure.
pub fn delete_failed(error: &cloud::Error) -> (Wanted, EventSpec) {
    let message = format!("deleting the instance: {error}");
    (
        Wanted::new(SYNCED, false, error.outcome().as_str(), message.clone()),
        EventSpec { reason: Reason::InstanceDeleteFailed, warning: true, message },
    )
}

/// The deadline of a PendingNode: `spec.deadline`, else its creation plus the goal's timeout.
pub fn deadline_of(pending: &PendingNode, created: Timestamp, join: Duration, leave: Duration) -> Timestamp {
    if let Some(deadline) = &pending.spec.deadline {
        return deadline.0;
    }
    let timeout = match pending.spec.goal {
        PendingNodeGoal::Join => join,
        PendingNodeGoal::Leave => leave,
    };
    created.saturating_add(SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX)).unwrap_or(created)
}

/// How many of `pending` record a failed join (condition [`JOIN_FAILED`] True): the failed replacements a
/// rollout's failure budget counts while their PendingNodes exist.
pub fn failed_joins<'a>(pending: impl IntoIterator<Item = &'a PendingNode>) -> usize {
    pending
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| condition::status_of(&s.conditions, JOIN_FAILED)) == Some("True"))
        .count()
}

/// Whether two `spec.providerID`s name the same instance: equal strings, or equal once parsed (Azure IDs compare
/// case-insensitively: cloud-provider-azure lowercases the resource group, ARM's answers may not).
pub fn same_instance(a: &str, b: &str) -> bool {
    a == b || matches!((a.parse::<ProviderId>(), b.parse::<ProviderId>()), (Ok(a), Ok(b)) if a == b)
}

/// The Node with `provider_id` among `nodes`, as a [`NodeFact`].
pub fn node_fact<'a>(nodes: impl IntoIterator<Item = &'a Node>, provider_id: &str) -> NodeFact {
    let node = nodes.into_iter().find(|n| {
        n.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|p| same_instance(p, provider_id))
    });
    match node {
        None => NodeFact::Absent,
        Some(node) => {
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True");
            if ready { NodeFact::Ready } else { NodeFact::NotReady }
        }
    }
}

/// How old a group's list a read may take (never one started before the PendingNode's first look, see
/// [`StateMemo::list_since`]).
pub const LIST_REUSE: Duration = Duration::from_secs(1);

/// The state of `id` from one list of its group shared by every PendingNode of the group ([`GroupLists`]: one
/// request per group per poll) started at `since` or later, or the instance's own state where the provider cannot
/// list or the list cannot tell.
async fn read_state(
    instances: &super::instances::Instances,
    provider: &dyn cloud::CloudProvider,
    group: &str,
    id: &ProviderId,
    since: tokio::time::Instant,
) -> Result<InstanceState, cloud::Error> {
    match instances.lists().state(&GroupId(group.to_owned()), id, since).await? {
        Some(state) => Ok(state),
        None => provider.instance_state(id).await,
    }
}

/// How young a PendingNode's first look is taken for one right after the replacer's cloud call (see [`first_look`]).
pub const FIRST_LOOK: Duration = Duration::from_secs(5);

/// What a PendingNode's instance is taken to be at its first look, before its first poll: a joining instance was
/// just created (`Creating`), a leaving one is being deleted (`Terminating`). Neither state decides anything but to
/// wait for the poll (or the deadline).
pub fn first_look(goal: PendingNodeGoal) -> InstanceState {
    match goal {
        PendingNodeGoal::Join => InstanceState::Creating,
        PendingNodeGoal::Leave => InstanceState::Terminating,
    }
}

/// The instance states the cloud gave, by PendingNode, so that a reconcile that changes nothing the state depends
/// on does not ask again. A reconcile runs on every event of the instance's Node (its agent's and kubelet's
/// writes) and on the controller's own status writes; the state is asked again only when it is older than the
/// poll interval, when the Node's [`NodeFact`] changed since it was read (registered, Ready, gone: moments at
/// which the cloud's state changes too), and after the controller deleted the instance. Errors are not kept.
#[derive(Debug, Default)]
pub struct StateMemo {
    seen: std::collections::HashMap<String, Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    state: InstanceState,
    node: NodeFact,
    at: Timestamp,
    valid_for: Duration,
    /// The first look at the PendingNode (after its instance was created, or deleted by this controller): no list
    /// started before it answers for the instance.
    anchor: tokio::time::Instant,
}

impl StateMemo {
    /// The state read for `key` (a PendingNode's UID), if it is still valid at `now` and was read while the
    /// instance's Node was `node`.
    pub fn fresh(&self, key: &str, node: NodeFact, now: Timestamp) -> Option<InstanceState> {
        let seen = self.seen.get(key)?;
        let age = Duration::try_from(now.duration_since(seen.at)).ok()?;
        (seen.node == node && age < seen.valid_for).then_some(seen.state)
    }

    /// Records what the cloud said for `key` at `at`, while its Node was `node`, to be used for `valid_for`
    /// (the poll interval: the timer that polls next finds it expired); forgets what expired.
    pub fn record(&mut self, key: &str, node: NodeFact, state: InstanceState, at: Timestamp, valid_for: Duration) {
        let anchor = self.seen.get(key).map_or_else(tokio::time::Instant::now, |s| s.anchor);
        // Kept for twice their validity (or LIST_REUSE): [`StateMemo::list_since`] needs the first look's time.
        self.seen.retain(|_, s| {
            !matches!(Duration::try_from(at.duration_since(s.at)), Ok(age) if age >= 2 * s.valid_for.max(LIST_REUSE))
        });
        self.seen.insert(key.to_owned(), Seen { state, node, at, valid_for, anchor });
    }

    /// The earliest start of a group list that may answer for `key` at `now`: [`LIST_REUSE`] ago, but never before
    /// the PendingNode's first look (a list from before its instance was created does not show it). `None` at the
    /// first look (nothing recorded for `key`: a new PendingNode, or its instance just deleted by this controller).
    pub fn list_since(&self, key: &str, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let seen = self.seen.get(key)?;
        Some(now.checked_sub(LIST_REUSE).unwrap_or(now).max(seen.anchor))
    }

    /// Records that this controller deleted `key`'s instance at `at`: nothing is remembered of its state, and the
    /// next read takes only a list started after the deletion.
    pub fn deleted(&mut self, key: &str, at: Timestamp) {
        let anchor = tokio::time::Instant::now();
        let seen =
            Seen { state: InstanceState::Terminating, node: NodeFact::Absent, at, valid_for: Duration::ZERO, anchor };
        self.seen.insert(key.to_owned(), seen);
    }

    /// Forgets `key` (its PendingNode is done or gone).
    pub fn forget(&mut self, key: &str) {
        self.seen.remove(key);
    }

    /// How many states are kept.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

struct State {
    context: Context,
    attempts: Attempts,
    /// The instance states read, reused while nothing they depend on changed.
    memo: std::sync::Mutex<StateMemo>,
    /// What the metrics counted already, by PendingNode UID and what (a reconcile may run on a copy that predates
    /// its own last status write, and must not count twice).
    counted: std::sync::Mutex<std::collections::HashSet<(String, &'static str)>>,
    /// The name of the Node of each provider ID seen (from the Node watch): an instance's Node is found by its
    /// provider ID whatever it is named (Constellation names AWS nodes by instance ID, the cloud answers with the
    /// private DNS name). Entries may be stale; the Node read by name is checked against the provider ID.
    node_names: std::sync::Mutex<std::collections::HashMap<ProviderId, String>>,
}

impl State {
    fn memo(&self) -> std::sync::MutexGuard<'_, StateMemo> {
        self.memo.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn node_names(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<ProviderId, String>> {
        self.node_names.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True the first time `what` happens to the PendingNode with `uid` in this process.
    fn first_time(&self, uid: Option<String>, what: &'static str) -> bool {
        let mut counted = self.counted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        counted.insert((uid.unwrap_or_default(), what))
    }
}

/// Runs the controller until `shutdown` is cancelled: every PendingNode, again when a Node with its provider
/// ID changes (the Node named `spec.nodeName` is read), at its deadline, and at its next poll of the cloud's state.
pub async fn run(context: Context, shutdown: CancellationToken) {
    let client = context.client.clone();
    let controller = Controller::new(Api::<PendingNode>::all(client.clone()), watcher::Config::default());
    let store = controller.store();
    let state = Arc::new(State {
        context,
        attempts: Attempts::default(),
        memo: Default::default(),
        counted: Default::default(),
        node_names: Default::default(),
    });
    let names = state.clone();
    let results = controller
        // Slim Nodes: only the provider ID is read (a whole Node carries its images and status).
        .watches(Api::<SlimNode>::all(client), watcher::Config::default(), move |node: SlimNode| {
            let Some(provider_id) = node.spec.provider_id else { return Vec::new() };
            let parsed = provider_id.parse::<ProviderId>().ok();
            let matched: Vec<_> = store
                .state()
                .iter()
                .filter(|p| {
                    p.spec.provider_id == provider_id
                        || parsed.is_some() && p.spec.provider_id.parse::<ProviderId>().ok() == parsed
                })
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect();
            // Only the Nodes of instances a PendingNode waits for are remembered.
            if !matched.is_empty()
                && let (Some(id), Some(name)) = (parsed, node.metadata.name)
            {
                names.node_names().insert(id, name);
            }
            matched
        })
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, state);
    super::log_results("PendingNode", results).await;
}

async fn reconcile(pending: Arc<PendingNode>, state: Arc<State>) -> Result<Action, Error> {
    let name = pending.name_any();
    let kube_error = |source| Error::Kube { kind: "PendingNode", name: name.clone(), source };
    let ctx = &state.context;
    let api: Api<PendingNode> = Api::all(ctx.client.clone());
    if pending.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Timestamp::now();
    let created = pending.meta().creation_timestamp.as_ref().map_or(now, |t| t.0);
    let deadline = deadline_of(&pending, created, ctx.cloud.join_timeout, ctx.cloud.leave_timeout);
    let provider = &ctx.cloud.provider;
    let labels = GroupLabels { group: pending.spec.group_id.clone() };
    let reached_goal = pending.status.as_ref().is_some_and(|s| s.reached_goal);
    if pending.spec.goal == PendingNodeGoal::Join && reached_goal {
        return Ok(Action::await_change());
    }
    let id: Result<ProviderId, _> = pending.spec.provider_id.parse();
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let node = nodes.get_opt(&pending.spec.node_name).await.map_err(kube_error)?;
    let mut node = node_fact(node.as_ref(), &pending.spec.provider_id);
    let named = match &id {
        Ok(id) if node == NodeFact::Absent => state.node_names().get(id).cloned(),
        _ => None,
    };
    if let Some(named) = named.filter(|n| *n != pending.spec.node_name) {
        // The instance's Node has another name than the cloud gave (Constellation names AWS nodes by instance
        // ID): read it by that name, and correct `spec.nodeName` so that the rollout finds the heir by it.
        let found = nodes.get_opt(&named).await.map_err(kube_error)?;
        node = node_fact(found.as_ref(), &pending.spec.provider_id);
        if node != NodeFact::Absent {
            tracing::info!(pending = %name, was = %pending.spec.node_name, node = %named, "the instance's Node has another name; correcting spec.nodeName");
            let patch =
                json!({"metadata": {"resourceVersion": pending.resource_version()}, "spec": {"nodeName": named}});
            super::fenced(ctx, api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)))
                .await?
                .map_err(kube_error)?;
            // The write wakes this PendingNode again, with the name.
            return Ok(Action::await_change());
        }
    }
    let key = pending.uid().unwrap_or_else(|| name.clone());
    let remembered = state.memo().fresh(&key, node, now);
    let mut assumed = false;
    // Bound first: the memo's lock is not held across the read.
    let since = state.memo().list_since(&key, tokio::time::Instant::now());
    let state_result = match (&id, remembered) {
        (Ok(_), Some(remembered)) => Ok(remembered),
        // A Ready Node with the instance's provider ID answers for the instance: its kubelet runs on it.
        (Ok(_), None) if pending.spec.goal == PendingNodeGoal::Join && node == NodeFact::Ready => {
            Ok(InstanceState::Ready)
        }
        (Ok(id), None) => match since {
            // The first look at a new PendingNode: the replacer has just had the cloud create or delete its
            // instance, so it is not asked before the first poll, [`LIST_REUSE`] later, which every PendingNode of
            // the group then answers from one list (a fresh list per new PendingNode cost one request per instance).
            // An older one (a restarted controller) or one past its deadline is asked at once.
            None if until(created, now) < FIRST_LOOK && now < deadline => {
                let looked = first_look(pending.spec.goal);
                state.memo().record(&key, node, looked, now, LIST_REUSE);
                assumed = true;
                Ok(looked)
            }
            since => {
                let since = since.unwrap_or_else(tokio::time::Instant::now);
                let read = read_state(&ctx.instances, provider.as_ref(), &pending.spec.group_id, id, since).await;
                if let Ok(read) = &read {
                    state.memo().record(&key, node, *read, now, poll_interval(until(created, now)));
                }
                read
            }
        },
        (Err(error), _) => Err(cloud::Error::invalid(format!("spec.providerID: {error}"))),
    };
    let leave_overdue = pending
        .status
        .as_ref()
        .and_then(|s| condition::status_of(&s.conditions, LEAVE_OVERDUE))
        .is_some_and(|s| s == "True");
    let donor_waits = match state_result {
        Ok(InstanceState::Terminated) => donor_waits(&pending, &ctx.nodes),
        _ => false,
    };
    let facts = Facts {
        donor_waits,
        goal: pending.spec.goal,
        reached_goal,
        deadline,
        created,
        now,
        node,
        state: state_result.as_ref().copied(),
        leave_overdue,
    };
    let mut decision = decide(&facts);
    if assumed {
        // Not the cloud's word: not shown as `cspState`, and the first poll comes LIST_REUSE later.
        decision.csp_state = None;
        decision.wake = Some(decision.wake.map_or(LIST_REUSE, |wake| wake.min(LIST_REUSE)));
    }
    tracing::debug!(pending = %name, ?facts, ?decision, assumed, "PendingNode decided");
    let group = GroupId(pending.spec.group_id.clone());
    let mut spec_patch = None;
    let mut cloud_failed = None;
    let mut events: Vec<EventSpec> = decision.event.take().into_iter().collect();
    if decision.step == Move::RetryDelete && !leave_overdue && state.first_time(pending.uid(), "overdue") {
        ctx.cloud.metrics.overdue_leaves.get_or_create(&labels).inc();
    }
    match decision.step {
        Move::Wait => {}
        // Nothing more to ask the cloud.
        Move::Joined => state.memo().forget(&key),
        Move::GiveUp(_) | Move::RetryDelete => {
            // The deletion changes the instance's state: the next reconcile asks the cloud, a list started after it.
            state.memo().deleted(&key, now);
            let deleted = match &id {
                Ok(id) => super::fenced(ctx, provider.delete_instance(&group, id)).await?,
                Err(error) => Err(cloud::Error::invalid(format!("spec.providerID: {error}"))),
            };
            match deleted {
                Ok(deletion) => {
                    tracing::info!(pending = %name, ?deletion, step = ?decision.step, "deleted the instance");
                    if matches!(decision.step, Move::GiveUp(_)) {
                        let leave_by = now.saturating_add(
                            SignedDuration::try_from(ctx.cloud.leave_timeout).unwrap_or(SignedDuration::MAX),
                        );
                        spec_patch = Some(json!({"spec": {"goal": "Leave", "deadline": leave_by.unwrap_or(now)}}));
                    }
                    if deletion == Deletion::AlreadyGone {
                        decision.wake = Some(Duration::ZERO);
                    }
                }
                Err(error) => {
                    let (synced, event) = delete_failed(&error);
                    decision.conditions.retain(|c| c.type_ != SYNCED && c.type_ != JOIN_FAILED);
                    decision.conditions.push(synced);
                    if matches!(decision.step, Move::GiveUp(_)) {
                        // Not given up yet: the JoinFailed Event comes with the deletion that succeeds.
                        events.clear();
                    }
                    events.push(event);
                    cloud_failed = Some(error.retry());
                }
            }
        }
        Move::Remove => {}
    }
    for event in &events {
        ctx.events.publish_named(
            pending.object_ref(&()),
            None,
            event.reason,
            event.warning,
            event.message.clone(),
            "ReplaceNode",
        );
    }
    if decision.step == Move::Remove {
        let params = DeleteParams {
            preconditions: Some(Preconditions { uid: pending.uid(), resource_version: None }),
            ..DeleteParams::default()
        };
        match super::fenced(ctx, api.delete(&name, &params)).await? {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(source) => return Err(kube_error(source)),
        }
        state.attempts.succeeded(&name);
        state.memo().forget(&key);
        if let Ok(id) = &id {
            state.node_names().remove(id);
        }
        state
            .counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(uid, _)| Some(uid) != pending.uid().as_ref());
        return Ok(Action::await_change());
    }
    // Writes carry the resourceVersion read: a reconcile of a copy older than the last write fails with a
    // conflict and runs again on the new one, instead of writing an old status back.
    let mut resource_version = pending.resource_version();
    let mut status = pending.status.clone().unwrap_or_default();
    let mut changed = false;
    if let Some(csp) = decision.csp_state
        && status.csp_state != csp
    {
        status.csp_state = csp;
        changed = true;
    }
    if decision.step == Move::Joined && !status.reached_goal {
        status.reached_goal = true;
        changed = true;
    }
    for wanted in &decision.conditions {
        changed |= condition::set(&mut status.conditions, wanted, pending.meta().generation, now);
    }
    if changed {
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": status});
        let written = super::fenced(ctx, api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)))
            .await?
            .map_err(kube_error)?;
        resource_version = written.resource_version();
    }
    if let Some(mut patch) = spec_patch {
        // The goal switches after the instance's deletion started: a crash in between repeats the (idempotent)
        // deletion, never leaves an instance behind.
        patch["metadata"] = json!({ "resourceVersion": resource_version });
        super::fenced(ctx, api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)))
            .await?
            .map_err(kube_error)?;
        if state.first_time(pending.uid(), "failed-join") {
            ctx.cloud.metrics.failed_joins.get_or_create(&labels).inc();
        }
    }
    let attempts = &state.attempts;
    Ok(match (cloud_failed, state_result.as_ref().err()) {
        (Some(retry), _) => Action::requeue(retry_delay(retry, attempts.failed(&name))),
        (None, Some(error)) => {
            let after = retry_delay(error.retry(), attempts.failed(&name));
            Action::requeue(decision.wake.map_or(after, |wake| wake.min(after).max(Duration::from_secs(1))))
        }
        (None, None) => {
            attempts.succeeded(&name);
            decision.wake.map_or_else(Action::await_change, Action::requeue)
        }
    })
}

fn error_policy(pending: Arc<PendingNode>, error: &Error, state: Arc<State>) -> Action {
    tracing::warn!(%error, "PendingNode reconcile failed; retrying");
    Action::requeue(retry_delay(Retry::Backoff, state.attempts.failed(&pending.name_any())))
}

#[cfg(test)]
#[path = "pending_node_tests.rs"]
mod tests;
