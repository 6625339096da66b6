//! `meta.k8s.io/v1` Tables, as `kubectl get` asks for them (`Accept: application/json;as=Table;...`): the
//! printer columns of CRDs, and the columns upstream prints for pods, nodes, namespaces, deployments and leases.

use super::jsonpath::JsonPath;
use super::object::parse_time;
use super::resource::{Builtin, PrinterColumn, ResourceType};
use serde_json::{Value, json};

/// What each row carries in `object` (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// A `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the query parameter (default Metadata).
    pub fn parse(value: Option<&str>) -> IncludeObject {
        match value {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

pub(crate) fn column(name: &str, type_: &str, format: &str, priority: i64, description: &str) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        format: format.into(),
        description: description.into(),
        priority,
        json_path: String::new(),
    }
}

fn name_column() -> PrinterColumn {
    column("Name", "string", "name", 0, "Name must be unique within a namespace.")
}

pub(crate) fn age_column() -> PrinterColumn {
    column(
        "Age",
        "string",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    )
}

fn columns(rt: &ResourceType) -> Vec<PrinterColumn> {
    let mut columns = vec![name_column()];
    if let Some(custom) = rt.custom() {
        columns.extend(custom.printer_columns.iter().cloned());
        return columns;
    }
    if let Some(kind) = rt.builtin()
        && let Some(more) = super::auth::printers::columns(kind)
    {
        columns.extend(more);
        return columns;
    }
    match rt.builtin() {
        Some(Builtin::Pod) => columns.extend([
            column("Ready", "string", "", 0, "The aggregate readiness state of this pod for accepting traffic."),
            column("Status", "string", "", 0, "The aggregate status of the containers in this pod."),
            column("Restarts", "string", "", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            age_column(),
            column("IP", "string", "", 1, "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
            column("Node", "string", "", 1, "Name of the Node this pod runs on."),
            column("Nominated Node", "string", "", 1, "Name of the node that is the nominated node for the pod."),
            column("Readiness Gates", "string", "", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
        ]),
        Some(Builtin::Node) => columns.extend([
            column("Status", "string", "", 0, "The status of the node"),
            column("Roles", "string", "", 0, "The roles of the node"),
            age_column(),
            column("Version", "string", "", 0, "Kubelet Version reported by the node."),
            column("Internal-IP", "string", "", 1, "List of addresses reachable to the node. Queried from cloud provider, if available."),
            column("External-IP", "string", "", 1, "List of addresses reachable to the node. Queried from cloud provider, if available."),
            column("OS-Image", "string", "", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            column("Kernel-Version", "string", "", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            column("Container-Runtime", "string", "", 1, "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ]),
        Some(Builtin::Namespace) => {
            columns.extend([column("Status", "string", "", 0, "The status of the namespace"), age_column()]);
        }
        Some(Builtin::Deployment) => columns.extend([
            column("Ready", "string", "", 0, "Number of the pod with ready state"),
            column("Up-to-date", "string", "", 0, "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
            column("Available", "string", "", 0, "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
            age_column(),
        ]),
        Some(Builtin::Lease) => columns.extend([column("Holder", "string", "", 0, "The holder of the lease"), age_column()]),
        _ => columns.push(age_column()),
    }
    columns
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

pub(crate) fn age(object: &Value) -> String {
    match parse_time(text(object, "/metadata/creationTimestamp")) {
        Some(created) => human_duration(jiff::Timestamp::now().duration_since(created).as_secs()),
        None => "<unknown>".into(),
    }
}

fn cells(rt: &ResourceType, object: &Value) -> Vec<Value> {
    let mut cells = vec![json!(text(object, "/metadata/name"))];
    if let Some(custom) = rt.custom() {
        cells.extend(custom.printer_columns.iter().map(|c| custom_cell(c, object)));
        return cells;
    }
    if let Some(kind) = rt.builtin()
        && let Some(more) = super::auth::printers::cells(kind, object)
    {
        cells.extend(more);
        return cells;
    }
    match rt.builtin() {
        Some(Builtin::Pod) => {
            let statuses =
                object.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
            let total = object.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
            let ready = statuses.iter().filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true)).count();
            let restarts: i64 = statuses.iter().filter_map(|s| s.get("restartCount").and_then(Value::as_i64)).sum();
            let node = text(object, "/spec/nodeName");
            let nominated = text(object, "/status/nominatedNodeName");
            let ip = text(object, "/status/podIP");
            let or_none = |s: &str| if s.is_empty() { "<none>".to_owned() } else { s.to_owned() };
            cells.extend([
                json!(format!("{ready}/{total}")),
                json!(pod_status(object, &statuses)),
                json!(restarts.to_string()),
                json!(age(object)),
                json!(or_none(ip)),
                json!(or_none(node)),
                json!(or_none(nominated)),
                json!("<none>"),
            ]);
        }
        Some(Builtin::Node) => {
            let address = |kind: &str| {
                object
                    .pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .and_then(|a| a.iter().find(|a| a.get("type").and_then(Value::as_str) == Some(kind)))
                    .and_then(|a| a.get("address").and_then(Value::as_str))
                    .unwrap_or("<none>")
                    .to_owned()
            };
            cells.extend([
                json!(node_status(object)),
                json!(node_roles(object)),
                json!(age(object)),
                json!(text(object, "/status/nodeInfo/kubeletVersion")),
                json!(address("InternalIP")),
                json!(address("ExternalIP")),
                json!(text(object, "/status/nodeInfo/osImage")),
                json!(text(object, "/status/nodeInfo/kernelVersion")),
                json!(text(object, "/status/nodeInfo/containerRuntimeVersion")),
            ]);
        }
        Some(Builtin::Namespace) => cells.extend([json!(text(object, "/status/phase")), json!(age(object))]),
        Some(Builtin::Deployment) => {
            let int = |p: &str| object.pointer(p).and_then(Value::as_i64).unwrap_or(0);
            cells.extend([
                json!(format!("{}/{}", int("/status/readyReplicas"), int("/spec/replicas"))),
                json!(int("/status/updatedReplicas")),
                json!(int("/status/availableReplicas")),
                json!(age(object)),
            ]);
        }
        Some(Builtin::Lease) => cells.extend([json!(text(object, "/spec/holderIdentity")), json!(age(object))]),
        _ => cells.push(json!(age(object))),
    }
    cells
}

fn custom_cell(column: &PrinterColumn, object: &Value) -> Value {
    let Ok(path) = JsonPath::parse(&column.json_path) else { return Value::Null };
    let Some(value) = path.find(object).into_iter().next() else { return Value::Null };
    match column.type_.as_str() {
        "date" => match value.as_str().and_then(parse_time) {
            Some(t) => json!(human_duration(jiff::Timestamp::now().duration_since(t).as_secs())),
            None => Value::Null,
        },
        "string" => match value {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        },
        _ => value.clone(),
    }
}

fn pod_status(pod: &Value, statuses: &[Value]) -> String {
    let mut reason = match text(pod, "/status/reason") {
        "" => text(pod, "/status/phase").to_owned(),
        r => r.to_owned(),
    };
    for status in statuses {
        let waiting = status.pointer("/state/waiting/reason").and_then(Value::as_str);
        let terminated = status.pointer("/state/terminated/reason").and_then(Value::as_str);
        if let Some(r) = waiting.or(terminated).filter(|r| !r.is_empty()) {
            reason = r.to_owned();
        }
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) && reason != "NodeLost" {
        reason = "Terminating".into();
    }
    reason
}

fn node_status(node: &Value) -> String {
    let ready = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready")))
        .and_then(|c| c.get("status").and_then(Value::as_str));
    let mut status = match ready {
        Some("True") => "Ready".to_owned(),
        Some("False") => "NotReady".to_owned(),
        _ => "Unknown".to_owned(),
    };
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    status
}

fn node_roles(node: &Value) -> String {
    let mut roles: Vec<String> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
                    Some(role) if !role.is_empty() => Some(role.to_owned()),
                    _ if k == "kubernetes.io/role" => v.as_str().map(str::to_owned),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.dedup();
    if roles.is_empty() { "<none>".into() } else { roles.join(",") }
}

/// `PartialObjectMetadata` of an object.
pub fn partial_metadata(object: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({}))})
}

/// The Table of `objects`.
pub fn table(
    rt: &ResourceType,
    objects: &[Value],
    rv: Option<u64>,
    continue_token: Option<&str>,
    include: IncludeObject,
) -> Value {
    let definitions: Vec<Value> = columns(rt)
        .iter()
        .map(|c| {
            let type_ = if c.type_ == "date" { "string" } else { c.type_.as_str() };
            json!({"name": c.name, "type": type_, "format": c.format, "description": c.description, "priority": c.priority})
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let mut row = json!({"cells": cells(rt, object)});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(object),
                IncludeObject::Object => row["object"] = object.clone(),
            }
            row
        })
        .collect();
    let mut metadata = json!({});
    if let Some(rv) = rv {
        metadata["resourceVersion"] = json!(rv.to_string());
    }
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": definitions, "rows": rows})
}

/// Go's `duration.HumanDuration`: `45s`, `5m10s`, `3h`, `2d5h`, `3y`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resource::builtin_types;

    #[test]
    fn durations_read_as_kubectl_prints_them() {
        for (seconds, text) in [
            (-5, "<invalid>"),
            (45, "45s"),
            (310, "5m10s"),
            (900, "15m"),
            (3 * 3600 + 60, "3h1m"),
            (50 * 3600, "2d2h"),
            (400 * 86400, "400d"),
        ] {
            assert_eq!(human_duration(seconds), text);
        }
    }

    #[test]
    fn node_and_pod_rows_show_status() {
        let types = builtin_types();
        let nodes = types.iter().find(|t| t.plural == "nodes").unwrap();
        let node = json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"unschedulable": true}, "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.33.0"}}});
        let table = table(nodes, &[node], Some(5), None, IncludeObject::Metadata);
        assert_eq!(table["rows"][0]["cells"][1], "Ready,SchedulingDisabled");
        assert_eq!(table["rows"][0]["cells"][2], "control-plane");
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(table["metadata"]["resourceVersion"], "5");
        let pods = types.iter().find(|t| t.plural == "pods").unwrap();
        let pod = json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"containers": [{}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}]}});
        let row = &super::table(pods, &[pod], None, None, IncludeObject::None)["rows"][0];
        assert_eq!(row["cells"][1], "1/1");
        assert_eq!(row["cells"][2], "Terminating");
        assert_eq!(row["cells"][3], "2");
        assert!(row.get("object").is_none());
    }
}
