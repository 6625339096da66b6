//! The compact forms the controllers cache: the metadata every controller reads ([`Meta`]), pods
//! ([`PodInfo`]), nodes ([`NodeInfo`]) and small kinds as their kube-rs types ([`Typed`]).
//!
//! # Invariants
//! - A cached form is built from a stored object only; it never holds more than the controllers read, and every
//!   value thousands of objects share (namespaces, label sets, owners, node names, scheduling constraints) is
//!   interned.
//! - Taint toleration follows upstream's `Toleration.ToleratesTaint`.

use super::intern::{self, Interner};
use crate::apiserver::object::{ObjectKey, object_key};
use jiff::Timestamp;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::{Arc, LazyLock};

/// A shared string.
pub type Str = Arc<str>;

/// Label sets, sorted by key: pods of one ReplicaSet share one.
pub type Labels = Arc<[(Str, Str)]>;

static LABEL_SETS: LazyLock<Interner<[(Str, Str)]>> = LazyLock::new(Interner::default);
static OWNER_SETS: LazyLock<Interner<[OwnerRef]>> = LazyLock::new(Interner::default);
static FINALIZER_SETS: LazyLock<Interner<[Str]>> = LazyLock::new(Interner::default);
static SCHEDULING: LazyLock<Interner<PodScheduling>> = LazyLock::new(Interner::default);
static TAINT_SETS: LazyLock<Interner<[Taint]>> = LazyLock::new(Interner::default);

/// One `metadata.ownerReferences` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerRef {
    /// `apiVersion` of the owner.
    pub api_version: Str,
    /// `kind` of the owner.
    pub kind: Str,
    /// `name` of the owner.
    pub name: Str,
    /// `uid` of the owner.
    pub uid: Str,
    /// `controller: true`.
    pub controller: bool,
    /// `blockOwnerDeletion: true`: a foreground deletion of the owner waits for this dependent.
    pub block_owner_deletion: bool,
}

impl OwnerRef {
    /// The API group of the owner (empty for core).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(group, _)| group)
    }

    fn parse(value: &Value) -> Option<OwnerRef> {
        let text = |key: &str| value.get(key).and_then(Value::as_str);
        Some(OwnerRef {
            api_version: intern::str(text("apiVersion")?),
            kind: intern::str(text("kind")?),
            name: intern::str(text("name")?),
            uid: intern::str(text("uid")?),
            controller: value.get("controller").and_then(Value::as_bool).unwrap_or(false),
            block_owner_deletion: value.get("blockOwnerDeletion").and_then(Value::as_bool).unwrap_or(false),
        })
    }
}

/// The metadata every controller reads.
#[derive(Debug, Clone)]
pub struct Meta {
    /// `namespace/name`, or `name` for cluster-scoped kinds: the store's key.
    pub key: ObjectKey,
    /// `metadata.namespace`.
    pub namespace: Option<Str>,
    /// `metadata.name`.
    pub name: Str,
    /// `metadata.uid`.
    pub uid: Str,
    /// `metadata.resourceVersion`.
    pub rv: u64,
    /// `metadata.generation` (0 when the kind has none).
    pub generation: i64,
    /// `metadata.creationTimestamp`.
    pub created: Option<Timestamp>,
    /// `metadata.labels`, sorted by key.
    pub labels: Labels,
    /// `metadata.ownerReferences`.
    pub owners: Arc<[OwnerRef]>,
    /// `metadata.deletionTimestamp`.
    pub deletion: Option<Timestamp>,
    /// `metadata.deletionGracePeriodSeconds`.
    pub deletion_grace_seconds: Option<i64>,
    /// `metadata.finalizers`.
    pub finalizers: Arc<[Str]>,
}

/// Parses a `metav1.Time` or `MicroTime`.
pub fn time(value: Option<&Value>) -> Option<Timestamp> {
    value.and_then(Value::as_str).and_then(|t| t.parse().ok())
}

impl Meta {
    /// The metadata of a stored object; `None` when it has no name.
    pub fn parse(object: &Value) -> Option<Meta> {
        let metadata = object.get("metadata")?;
        let text = |key: &str| metadata.get(key).and_then(Value::as_str);
        let name = text("name").filter(|n| !n.is_empty())?;
        let namespace = text("namespace").filter(|n| !n.is_empty()).map(intern::str);
        let mut labels: Vec<(Str, Str)> = metadata
            .get("labels")
            .and_then(Value::as_object)
            .map(|map| map.iter().map(|(k, v)| (intern::str(k), intern::str(v.as_str().unwrap_or_default()))).collect())
            .unwrap_or_default();
        labels.sort();
        let owners: Vec<OwnerRef> = metadata
            .get("ownerReferences")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(OwnerRef::parse).collect())
            .unwrap_or_default();
        let finalizers: Vec<Str> = metadata
            .get("finalizers")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter_map(Value::as_str).map(intern::str).collect())
            .unwrap_or_default();
        Some(Meta {
            key: object_key(namespace.as_deref(), name),
            name: Arc::from(name),
            namespace,
            uid: Arc::from(text("uid").unwrap_or_default()),
            rv: text("resourceVersion").and_then(|rv| rv.parse().ok()).unwrap_or(0),
            generation: metadata.get("generation").and_then(Value::as_i64).unwrap_or(0),
            created: time(metadata.get("creationTimestamp")),
            labels: LABEL_SETS.slice(&labels),
            owners: OWNER_SETS.slice(&owners),
            deletion: time(metadata.get("deletionTimestamp")),
            deletion_grace_seconds: metadata.get("deletionGracePeriodSeconds").and_then(Value::as_i64),
            finalizers: FINALIZER_SETS.slice(&finalizers),
        })
    }

    /// The value of a label.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok().map(|i| &*self.labels[i].1)
    }

    /// The owner reference with `controller: true`.
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owners.iter().find(|o| o.controller)
    }

    /// True when the object's controller has this uid.
    pub fn is_controlled_by(&self, uid: &str) -> bool {
        self.controller().is_some_and(|o| &*o.uid == uid)
    }

    /// True when `metadata.deletionTimestamp` is set.
    pub fn is_deleting(&self) -> bool {
        self.deletion.is_some()
    }

    /// True when `metadata.finalizers` holds `finalizer`.
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| &**f == finalizer)
    }
}

/// A cached object: its metadata plus what the controllers read of it.
pub trait Cached: Send + Sync + Sized + 'static {
    /// Builds the cached form of a stored object.
    fn parse(object: &Value) -> Result<Self, String>;
    /// The metadata.
    fn meta(&self) -> &Meta;
    /// The node the object is bound to (pods), for the node index.
    fn node_name(&self) -> Option<&Str> {
        None
    }
}

/// Only the metadata of an object (for kinds only the garbage collector reads).
#[derive(Debug, Clone)]
pub struct MetaOnly(pub Meta);

impl Cached for MetaOnly {
    fn parse(object: &Value) -> Result<Self, String> {
        Meta::parse(object).map(MetaOnly).ok_or_else(|| "the object has no metadata.name".to_owned())
    }

    fn meta(&self) -> &Meta {
        &self.0
    }
}

/// A small kind cached as its kube-rs type (PDBs and workloads: thousands, not hundreds of thousands).
#[derive(Debug, Clone)]
pub struct Typed<K> {
    /// The metadata.
    pub meta: Meta,
    /// The object.
    pub object: K,
}

impl<K: DeserializeOwned + Send + Sync + 'static> Cached for Typed<K> {
    fn parse(object: &Value) -> Result<Self, String> {
        let meta = Meta::parse(object).ok_or_else(|| "the object has no metadata.name".to_owned())?;
        let object = K::deserialize(object).map_err(|e| e.to_string())?;
        Ok(Typed { meta, object })
    }

    fn meta(&self) -> &Meta {
        &self.meta
    }
}

/// `status.phase` of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PodPhase {
    /// Not running yet (or no phase).
    Pending,
    /// Running.
    Running,
    /// Every container ended successfully.
    Succeeded,
    /// A container failed.
    Failed,
    /// The node stopped reporting.
    Unknown,
}

impl PodPhase {
    fn parse(text: Option<&str>) -> PodPhase {
        match text {
            Some("Running") => PodPhase::Running,
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            Some("Unknown") => PodPhase::Unknown,
            _ => PodPhase::Pending,
        }
    }

    /// Succeeded or Failed: the pod will not run again.
    pub fn is_terminal(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

/// `spec.restartPolicy` of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RestartPolicy {
    /// Containers always restart: the pod runs until deleted.
    Always,
    /// Failed containers restart; the pod ends when its containers succeed.
    OnFailure,
    /// Nothing restarts; the pod ends when its containers end.
    Never,
}

impl RestartPolicy {
    fn parse(text: Option<&str>) -> RestartPolicy {
        match text {
            Some("OnFailure") => RestartPolicy::OnFailure,
            Some("Never") => RestartPolicy::Never,
            _ => RestartPolicy::Always,
        }
    }
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Taint {
    /// `key`.
    pub key: Str,
    /// `value` (empty when absent).
    pub value: Str,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: Str,
}

impl Taint {
    /// True for effects that keep pods that do not tolerate the taint off the node.
    pub fn repels(&self) -> bool {
        matches!(&*self.effect, "NoSchedule" | "NoExecute")
    }
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// `key`; empty with `Exists` tolerates every taint.
    pub key: Str,
    /// `Equal` (also when empty) or `Exists`.
    pub operator: Str,
    /// `value`.
    pub value: Str,
    /// `effect`; empty matches every effect.
    pub effect: Str,
}

impl Toleration {
    /// Upstream's `ToleratesTaint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match &*self.operator {
            "" | "Equal" => self.value == taint.value,
            "Exists" => true,
            _ => false,
        }
    }

    fn parse(value: &Value) -> Toleration {
        let text = |key: &str| intern::str(value.get(key).and_then(Value::as_str).unwrap_or_default());
        Toleration { key: text("key"), operator: text("operator"), value: text("value"), effect: text("effect") }
    }
}

/// True when every taint that repels pods is tolerated.
pub fn tolerates_all(tolerations: &[Toleration], taints: &[Taint]) -> bool {
    taints.iter().filter(|t| t.repels()).all(|taint| tolerations.iter().any(|t| t.tolerates(taint)))
}

/// What the scheduler reads of a pod spec; pods of one template share one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodScheduling {
    /// `spec.schedulerName`.
    pub scheduler_name: Str,
    /// `spec.nodeSelector`, sorted by key.
    pub node_selector: Vec<(Str, Str)>,
    /// `spec.tolerations`.
    pub tolerations: Vec<Toleration>,
}

impl PodScheduling {
    fn parse(spec: Option<&Value>) -> Arc<PodScheduling> {
        let mut node_selector: Vec<(Str, Str)> = spec
            .and_then(|s| s.get("nodeSelector"))
            .and_then(Value::as_object)
            .map(|m| m.iter().map(|(k, v)| (intern::str(k), intern::str(v.as_str().unwrap_or_default()))).collect())
            .unwrap_or_default();
        node_selector.sort();
        let tolerations = spec
            .and_then(|s| s.get("tolerations"))
            .and_then(Value::as_array)
            .map(|list| list.iter().map(Toleration::parse).collect())
            .unwrap_or_default();
        let scheduler_name =
            intern::str(spec.and_then(|s| s.get("schedulerName")).and_then(Value::as_str).unwrap_or_default());
        let scheduling = PodScheduling { scheduler_name, node_selector, tolerations };
        SCHEDULING.intern_with(&scheduling, |s| Arc::new(s.clone()))
    }

    /// True when the node's labels satisfy `spec.nodeSelector`.
    pub fn selects(&self, node: &Meta) -> bool {
        self.node_selector.iter().all(|(key, value)| node.label(key) == Some(&**value))
    }
}

/// The condition of `conditions` with this type: (status is "True", lastTransitionTime).
fn condition(conditions: Option<&Value>, kind: &str) -> Option<(bool, Option<Timestamp>)> {
    conditions?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
        .map(|c| (c.get("status").and_then(Value::as_str) == Some("True"), time(c.get("lastTransitionTime"))))
}

/// What the controllers read of a pod.
#[derive(Debug, Clone)]
pub struct PodInfo {
    /// The metadata.
    pub meta: Meta,
    /// `spec.nodeName`.
    pub node_name: Option<Str>,
    /// `status.phase`.
    pub phase: PodPhase,
    /// The `Ready` condition is True.
    pub ready: bool,
    /// When the `Ready` condition last changed.
    pub ready_since: Option<Timestamp>,
    /// The `PodScheduled` condition is False (the scheduler found no node).
    pub unschedulable: bool,
    /// Node selector, tolerations, scheduler.
    pub scheduling: Arc<PodScheduling>,
    /// `spec.restartPolicy`.
    pub restart_policy: RestartPolicy,
    /// The sum of the containers' `restartCount`.
    pub restarts: i32,
}

impl PodInfo {
    /// Not terminal and not being deleted: what ReplicaSets and StatefulSets count.
    pub fn is_active(&self) -> bool {
        !self.phase.is_terminal() && !self.meta.is_deleting()
    }

    /// Ready and not being deleted.
    pub fn is_ready(&self) -> bool {
        self.ready && !self.meta.is_deleting()
    }

    /// Ready for at least `min_ready_seconds` at `now`.
    pub fn is_available(&self, min_ready_seconds: i64, now: Timestamp) -> bool {
        if !self.is_ready() {
            return false;
        }
        if min_ready_seconds <= 0 {
            return true;
        }
        self.ready_since.is_some_and(|since| since.as_second() + min_ready_seconds <= now.as_second())
    }
}

impl Cached for PodInfo {
    fn parse(object: &Value) -> Result<Self, String> {
        let meta = Meta::parse(object).ok_or_else(|| "the pod has no metadata.name".to_owned())?;
        let spec = object.get("spec");
        let status = object.get("status");
        let conditions = status.and_then(|s| s.get("conditions"));
        let ready = condition(conditions, "Ready");
        Ok(PodInfo {
            meta,
            node_name: spec
                .and_then(|s| s.get("nodeName"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(intern::str),
            phase: PodPhase::parse(status.and_then(|s| s.get("phase")).and_then(Value::as_str)),
            ready: ready.is_some_and(|(true_, _)| true_),
            ready_since: ready.and_then(|(_, since)| since),
            unschedulable: condition(conditions, "PodScheduled").is_some_and(|(true_, _)| !true_),
            scheduling: PodScheduling::parse(spec),
            restart_policy: RestartPolicy::parse(spec.and_then(|s| s.get("restartPolicy")).and_then(Value::as_str)),
            restarts: status
                .and_then(|s| s.get("containerStatuses"))
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter().filter_map(|c| c.get("restartCount").and_then(Value::as_i64)).sum::<i64>() as i32
                })
                .unwrap_or(0),
        })
    }

    fn meta(&self) -> &Meta {
        &self.meta
    }

    fn node_name(&self) -> Option<&Str> {
        self.node_name.as_ref()
    }
}

/// What the controllers read of a node.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The metadata.
    pub meta: Meta,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `spec.taints`.
    pub taints: Arc<[Taint]>,
    /// The `Ready` condition: `None` before the kubelet first reported.
    pub ready: Option<bool>,
    /// `status.nodeInfo.bootID`.
    pub boot_id: Option<Str>,
    /// `status.nodeInfo.osImage`.
    pub os_image: Option<Str>,
    /// `status.nodeInfo.kubeletVersion`.
    pub kubelet_version: Option<Str>,
}

impl NodeInfo {
    /// Ready and not cordoned: where the scheduler may put pods.
    pub fn is_schedulable(&self) -> bool {
        self.ready == Some(true) && !self.unschedulable && !self.meta.is_deleting()
    }
}

impl Cached for NodeInfo {
    fn parse(object: &Value) -> Result<Self, String> {
        let meta = Meta::parse(object).ok_or_else(|| "the node has no metadata.name".to_owned())?;
        let spec = object.get("spec");
        let taints: Vec<Taint> = spec
            .and_then(|s| s.get("taints"))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|t| {
                        let text = |key: &str| intern::str(t.get(key).and_then(Value::as_str).unwrap_or_default());
                        Taint { key: text("key"), value: text("value"), effect: text("effect") }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let status = object.get("status");
        let info = |key: &str| {
            status
                .and_then(|s| s.pointer(&format!("/nodeInfo/{key}")))
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(intern::str)
        };
        Ok(NodeInfo {
            unschedulable: spec.and_then(|s| s.get("unschedulable")).and_then(Value::as_bool).unwrap_or(false),
            taints: TAINT_SETS.slice(&taints),
            ready: condition(status.and_then(|s| s.get("conditions")), "Ready").map(|(true_, _)| true_),
            boot_id: info("bootID"),
            os_image: info("osImage"),
            kubelet_version: info("kubeletVersion"),
            meta,
        })
    }

    fn meta(&self) -> &Meta {
        &self.meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint { key: key.into(), value: value.into(), effect: effect.into() }
    }

    fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        Toleration { key: key.into(), operator: operator.into(), value: value.into(), effect: effect.into() }
    }

    #[test]
    fn tolerations_match_as_upstream_does() {
        let control_plane = taint("node-role.kubernetes.io/control-plane", "", "NoSchedule");
        let cases = [
            (toleration("node-role.kubernetes.io/control-plane", "Exists", "", "NoSchedule"), true),
            (toleration("node-role.kubernetes.io/control-plane", "Exists", "", ""), true),
            (toleration("node-role.kubernetes.io/control-plane", "", "", "NoSchedule"), true),
            (toleration("node-role.kubernetes.io/control-plane", "Equal", "x", "NoSchedule"), false),
            (toleration("node-role.kubernetes.io/control-plane", "Exists", "", "NoExecute"), false),
            (toleration("", "Exists", "", ""), true),
            (toleration("other", "Exists", "", ""), false),
            (toleration("node-role.kubernetes.io/control-plane", "Lt", "", ""), false),
        ];
        for (toleration, expected) in cases {
            assert_eq!(toleration.tolerates(&control_plane), expected, "{toleration:?}");
        }
        let prefer = taint("soft", "", "PreferNoSchedule");
        assert!(tolerates_all(&[], &[prefer]));
        assert!(!tolerates_all(&[], &[control_plane]));
    }

    #[test]
    fn pods_are_read_into_their_compact_form() {
        let pod = json!({"metadata": {"name": "web-1", "namespace": "demo", "uid": "u1", "resourceVersion": "42",
                "labels": {"b": "2", "a": "1"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs1",
                                     "controller": true}],
                "deletionTimestamp": "2026-01-01T00:00:30Z", "deletionGracePeriodSeconds": 30},
            "spec": {"nodeName": "worker-0", "nodeSelector": {"disk": "ssd"}, "schedulerName": "default-scheduler",
                     "tolerations": [{"key": "k", "operator": "Exists"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let info = PodInfo::parse(&pod).unwrap();
        assert_eq!(&*info.meta.key, "demo/web-1");
        assert_eq!(info.meta.rv, 42);
        assert_eq!(info.meta.label("a"), Some("1"));
        assert_eq!(info.meta.label("c"), None);
        assert!(info.meta.is_controlled_by("rs1"));
        assert_eq!(info.meta.controller().unwrap().group(), "apps");
        assert_eq!(info.meta.deletion_grace_seconds, Some(30));
        assert_eq!(info.node_name.as_deref(), Some("worker-0"));
        assert_eq!(info.phase, PodPhase::Running);
        assert!(info.ready && !info.is_ready() && !info.is_active());
        let again = PodInfo::parse(&pod).unwrap();
        assert!(Arc::ptr_eq(&info.meta.labels, &again.meta.labels));
        assert!(Arc::ptr_eq(&info.scheduling, &again.scheduling));
        assert!(PodInfo::parse(&json!({"metadata": {}})).is_err());
    }

    #[test]
    fn availability_waits_for_min_ready_seconds() {
        let pod = json!({"metadata": {"name": "p"}, "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
        let info = PodInfo::parse(&pod).unwrap();
        let at = |t: &str| t.parse::<Timestamp>().unwrap();
        assert!(info.is_available(0, at("2026-01-01T00:00:00Z")));
        assert!(!info.is_available(10, at("2026-01-01T00:00:09Z")));
        assert!(info.is_available(10, at("2026-01-01T00:00:10Z")));
    }

    #[test]
    fn nodes_are_read_into_their_compact_form() {
        let node = json!({"metadata": {"name": "cp-0", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"unschedulable": true,
                     "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                       "nodeInfo": {"bootID": "b1", "osImage": "v1"}}});
        let info = NodeInfo::parse(&node).unwrap();
        assert_eq!(info.ready, Some(false));
        assert!(info.unschedulable && !info.is_schedulable());
        assert_eq!(info.taints.len(), 1);
        assert_eq!(info.boot_id.as_deref(), Some("b1"));
        assert_eq!(info.os_image.as_deref(), Some("v1"));
        assert_eq!(NodeInfo::parse(&json!({"metadata": {"name": "n"}})).unwrap().ready, None);
    }
}
