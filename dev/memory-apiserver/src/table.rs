//! `meta.k8s.io/v1` Tables, as `kubectl get` asks for them (`Accept: application/json;as=Table;...`): the
//! printer columns of CRDs, and for built-in kinds the columns and cells of upstream's `printers.go`, keyed by
//! group and kind name (so a kind registered later gets its printer as soon as it is served).

use super::jsonpath::JsonPath;
use super::object::parse_time;
use super::printer_columns::{age, age_column, column, human_duration, since};
use super::resource::{PrinterColumn, ResourceType};
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

fn name_column() -> PrinterColumn {
    column("Name", "string", "name", 0, "Name must be unique within a namespace.")
}

/// Describes the wide columns every workload printer shares.
const CONTAINERS: &str = "Names of each container in the template.";
const IMAGES: &str = "Images referenced by each container in the template.";

/// The columns of a built-in kind, keyed by group and kind name (upstream `printers.go`); a kind without a printer
/// gets upstream's default table: Name and Created At. Priority-1 columns are what `kubectl get -o wide` adds.
fn builtin_columns(group: &str, kind: &str) -> Vec<PrinterColumn> {
    let c = |name: &str, type_: &str, priority: i64, description: &str| column(name, type_, "", priority, description);
    let workload = |extra: &[(&str, &str, i64, &str)]| -> Vec<PrinterColumn> {
        extra.iter().map(|(name, type_, priority, description)| c(name, type_, *priority, description)).collect()
    };
    let mut columns = vec![name_column()];
    columns.extend(match (group, kind) {
        ("", "Pod") => vec![
            c("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
            c("Status", "string", 0, "The aggregate status of the containers in this pod."),
            c("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
            age_column(),
            c("IP", "string", 1, "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
            c("Node", "string", 1, "Name of the Node this pod runs on."),
            c("Nominated Node", "string", 1, "Name of the node that is the nominated node for the pod."),
            c("Readiness Gates", "string", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
        ],
        ("", "Node") => vec![
            c("Status", "string", 0, "The status of the node"),
            c("Roles", "string", 0, "The roles of the node"),
            age_column(),
            c("Version", "string", 0, "Kubelet Version reported by the node."),
            c("Internal-IP", "string", 1, "List of addresses reachable to the node. Queried from cloud provider, if available."),
            c("External-IP", "string", 1, "List of addresses reachable to the node. Queried from cloud provider, if available."),
            c("OS-Image", "string", 1, "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            c("Kernel-Version", "string", 1, "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            c("Container-Runtime", "string", 1, "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ],
        ("", "Namespace") => vec![c("Status", "string", 0, "The status of the namespace"), age_column()],
        ("", "ConfigMap") => vec![c("Data", "string", 0, "Data contains the configuration data."), age_column()],
        ("", "Secret") => vec![
            c("Type", "string", 0, "Used to facilitate programmatic handling of secret data."),
            c("Data", "string", 0, "Data contains the secret data."),
            age_column(),
        ],
        ("", "ServiceAccount") => vec![
            c("Secrets", "string", 0, "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."),
            age_column(),
        ],
        ("", "Event") | ("events.k8s.io", "Event") => {
            return vec![
                c("Last Seen", "string", 0, "The time at which the most recent occurrence of this event was recorded."),
                c("Type", "string", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
                c("Reason", "string", 0, "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
                c("Object", "string", 0, "The object that this event is about."),
                c("Subobject", "string", 1, "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement."),
                c("Source", "string", 1, "The component reporting this event. Should be a short machine understandable string."),
                c("Message", "string", 0, "A human-readable description of the status of this operation."),
                c("First Seen", "string", 1, "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
                c("Count", "string", 1, "The number of times this event has occurred."),
                column("Name", "string", "name", 1, "Name must be unique within a namespace."),
            ];
        }
        ("", "Service") => vec![
            c("Type", "string", 0, "type determines how the Service is exposed."),
            c("Cluster-IP", "string", 0, "clusterIP is the IP address of the service and is usually assigned randomly."),
            c("External-IP", "string", 0, "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
            c("Port(s)", "string", 0, "The list of ports that are exposed by this service."),
            age_column(),
            c("Selector", "string", 1, "Route service traffic to pods with label keys and values matching this selector."),
        ],
        ("apps", "Deployment") => {
            let mut columns = workload(&[
                ("Ready", "string", 0, "Number of the pod with ready state"),
                ("Up-to-date", "string", 0, "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
                ("Available", "string", 0, "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
            ]);
            columns.push(age_column());
            columns.extend(workload(&[
                ("Containers", "string", 1, CONTAINERS),
                ("Images", "string", 1, IMAGES),
                ("Selector", "string", 1, "Label selector for pods."),
            ]));
            columns
        }
        ("apps", "ReplicaSet") => {
            let mut columns = workload(&[
                ("Desired", "integer", 0, "Replicas is the number of desired replicas."),
                ("Current", "integer", 0, "Replicas is the most recently observed number of replicas."),
                ("Ready", "integer", 0, "The number of ready replicas for this replica set."),
            ]);
            columns.push(age_column());
            columns.extend(workload(&[
                ("Containers", "string", 1, CONTAINERS),
                ("Images", "string", 1, IMAGES),
                ("Selector", "string", 1, "Selector is a label query over pods that should match the replica count."),
            ]));
            columns
        }
        ("apps", "StatefulSet") => {
            let mut columns = workload(&[("Ready", "string", 0, "Number of the pod with ready state")]);
            columns.push(age_column());
            columns.extend(workload(&[("Containers", "string", 1, CONTAINERS), ("Images", "string", 1, IMAGES)]));
            columns
        }
        ("apps", "DaemonSet") => {
            let mut columns = workload(&[
                ("Desired", "integer", 0, "The total number of nodes that should be running the daemon pod."),
                ("Current", "integer", 0, "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod."),
                ("Ready", "integer", 0, "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready."),
                ("Up-to-date", "integer", 0, "The total number of nodes that are running updated daemon pod"),
                ("Available", "integer", 0, "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available."),
                ("Node Selector", "string", 0, "NodeSelector is a selector which must be true for the pod to fit on a node."),
            ]);
            columns.push(age_column());
            columns.extend(workload(&[
                ("Containers", "string", 1, CONTAINERS),
                ("Images", "string", 1, IMAGES),
                ("Selector", "string", 1, "A label query over pods that are managed by the daemon set."),
            ]));
            columns
        }
        ("apps", "ControllerRevision") => vec![
            c("Controller", "string", 0, "Controller of the object"),
            c("Revision", "string", 0, "Revision indicates the revision of the state represented by Data."),
            age_column(),
        ],
        ("batch", "Job") => {
            let mut columns = workload(&[
                ("Status", "string", 0, "Status of the job."),
                ("Completions", "string", 0, "The number of pods which reached phase Succeeded."),
                ("Duration", "string", 0, "Time required to complete the job."),
            ]);
            columns.push(age_column());
            columns.extend(workload(&[
                ("Containers", "string", 1, CONTAINERS),
                ("Images", "string", 1, IMAGES),
                ("Selector", "string", 1, "A label query over pods that should match the pod count."),
            ]));
            columns
        }
        ("policy", "PodDisruptionBudget") => vec![
            c("Min Available", "string", 0, "The minimum number of pods that must be available."),
            c("Max Unavailable", "string", 0, "The maximum number of pods that may be unavailable."),
            c("Allowed Disruptions", "integer", 0, "Calculated number of pods that may be disrupted at this time."),
            age_column(),
        ],
        ("coordination.k8s.io", "Lease") => {
            vec![c("Holder", "string", 0, "holderIdentity contains the identity of the holder of a current lease."), age_column()]
        }
        ("scheduling.k8s.io", "PriorityClass") => vec![
            c("Value", "integer", 0, "value represents the integer value of this priority class."),
            c("Global-Default", "boolean", 0, "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class."),
            age_column(),
            c("PreemptionPolicy", "string", 0, "preemptionPolicy is the Policy for preempting pods with lower priority."),
        ],
        _ => vec![column(
            "Created At",
            "date",
            "",
            0,
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
        )],
    });
    columns
}

/// The columns of `rt`: its CRD's printer columns, the RBAC and admission-policy printers
/// ([`super::auth::printers`]), or [`builtin_columns`].
fn columns(rt: &ResourceType) -> Vec<PrinterColumn> {
    if let Some(custom) = rt.custom() {
        return std::iter::once(name_column()).chain(custom.printer_columns.iter().cloned()).collect();
    }
    match rt.builtin().and_then(super::auth::printers::columns) {
        Some(more) => std::iter::once(name_column()).chain(more).collect(),
        None => builtin_columns(&rt.group, &rt.kind),
    }
}

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn int(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn len_of(object: &Value, pointer: &str) -> usize {
    match object.pointer(pointer) {
        Some(Value::Object(map)) => map.len(),
        Some(Value::Array(items)) => items.len(),
        _ => 0,
    }
}

/// `labels.FormatLabels`: `k=v,...` sorted by key, `<none>` when empty.
fn format_labels(labels: Option<&Value>) -> String {
    let pairs: Vec<String> = labels
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect())
        .unwrap_or_default();
    if pairs.is_empty() { "<none>".into() } else { pairs.join(",") }
}

/// `LabelSelectorAsSelector(...).String()`: the requirements sorted by key, `k=v`, `k in (a,b)`, `k notin (a)`,
/// `k`, `!k`; empty for no selector.
fn selector_string(selector: Option<&Value>) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    let Some(selector) = selector else { return String::new() };
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in labels {
            requirements.push((key.clone(), format!("{key}={}", value.as_str().unwrap_or_default())));
        }
    }
    for expression in selector.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let key = expression.get("key").and_then(Value::as_str).unwrap_or_default();
        let mut values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let rendered = match expression.get("operator").and_then(Value::as_str).unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        };
        requirements.push((key.to_owned(), rendered));
    }
    requirements.sort();
    requirements.into_iter().map(|(_, r)| r).collect::<Vec<_>>().join(",")
}

/// `metav1.FormatLabelSelector`: [`selector_string`], `<none>` when empty.
fn format_selector(selector: Option<&Value>) -> String {
    let rendered = selector_string(selector);
    if rendered.is_empty() { "<none>".into() } else { rendered }
}

/// `layoutContainerCells`: the names and the images of the containers, comma-separated.
fn container_cells(containers: Option<&Value>) -> [Value; 2] {
    let containers = containers.and_then(Value::as_array).cloned().unwrap_or_default();
    let join =
        |key: &str| containers.iter().map(|c| text(c, &format!("/{key}")).to_owned()).collect::<Vec<_>>().join(",");
    [json!(join("name")), json!(join("image"))]
}

/// The cells of a built-in kind's row, as upstream prints them with `Wide` (the server always does).
fn builtin_cells(group: &str, kind: &str, object: &Value) -> Vec<Value> {
    let name = json!(text(object, "/metadata/name"));
    let or_none = |s: &str| if s.is_empty() { "<none>".to_owned() } else { s.to_owned() };
    let mut cells = vec![name.clone()];
    match (group, kind) {
        ("", "Pod") => {
            let statuses =
                object.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
            let total = len_of(object, "/spec/containers");
            let ready = statuses.iter().filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true)).count();
            let restarts: i64 = statuses.iter().filter_map(|s| s.get("restartCount").and_then(Value::as_i64)).sum();
            cells.extend([
                json!(format!("{ready}/{total}")),
                json!(pod_status(object, &statuses)),
                json!(restarts.to_string()),
                json!(age(object)),
                json!(or_none(text(object, "/status/podIP"))),
                json!(or_none(text(object, "/spec/nodeName"))),
                json!(or_none(text(object, "/status/nominatedNodeName"))),
                json!("<none>"),
            ]);
        }
        ("", "Node") => {
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
        ("", "Namespace") => cells.extend([json!(text(object, "/status/phase")), json!(age(object))]),
        ("", "ConfigMap") => {
            cells.extend([json!(len_of(object, "/data") + len_of(object, "/binaryData")), json!(age(object))]);
        }
        ("", "Secret") => {
            cells.extend([json!(text(object, "/type")), json!(len_of(object, "/data")), json!(age(object))]);
        }
        ("", "ServiceAccount") => cells.extend([json!(len_of(object, "/secrets")), json!(age(object))]),
        ("", "Event") | ("events.k8s.io", "Event") => return event_cells(object),
        ("", "Service") => {
            let cluster_ip = object
                .pointer("/spec/clusterIPs/0")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| "<none>".to_owned());
            let ports: Vec<String> = object
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|p| {
                    let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or_default();
                    match p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
                        Some(node_port) => format!("{}:{node_port}/{protocol}", int(p, "/port")),
                        None => format!("{}/{protocol}", int(p, "/port")),
                    }
                })
                .collect();
            cells.extend([
                json!(text(object, "/spec/type")),
                json!(cluster_ip),
                json!(service_external_ip(object)),
                json!(if ports.is_empty() { "<none>".to_owned() } else { ports.join(",") }),
                json!(age(object)),
                json!(format_labels(object.pointer("/spec/selector"))),
            ]);
        }
        ("apps", "Deployment") => {
            let [names, images] = container_cells(object.pointer("/spec/template/spec/containers"));
            cells.extend([
                json!(format!("{}/{}", int(object, "/status/readyReplicas"), int(object, "/spec/replicas"))),
                json!(int(object, "/status/updatedReplicas")),
                json!(int(object, "/status/availableReplicas")),
                json!(age(object)),
                names,
                images,
                json!(selector_string(object.pointer("/spec/selector"))),
            ]);
        }
        ("apps", "ReplicaSet") => {
            let [names, images] = container_cells(object.pointer("/spec/template/spec/containers"));
            cells.extend([
                json!(int(object, "/spec/replicas")),
                json!(int(object, "/status/replicas")),
                json!(int(object, "/status/readyReplicas")),
                json!(age(object)),
                names,
                images,
                json!(format_selector(object.pointer("/spec/selector"))),
            ]);
        }
        ("apps", "StatefulSet") => {
            let [names, images] = container_cells(object.pointer("/spec/template/spec/containers"));
            cells.extend([
                json!(format!("{}/{}", int(object, "/status/readyReplicas"), int(object, "/spec/replicas"))),
                json!(age(object)),
                names,
                images,
            ]);
        }
        ("apps", "DaemonSet") => {
            let [names, images] = container_cells(object.pointer("/spec/template/spec/containers"));
            cells.extend([
                json!(int(object, "/status/desiredNumberScheduled")),
                json!(int(object, "/status/currentNumberScheduled")),
                json!(int(object, "/status/numberReady")),
                json!(int(object, "/status/updatedNumberScheduled")),
                json!(int(object, "/status/numberAvailable")),
                json!(format_labels(object.pointer("/spec/template/spec/nodeSelector"))),
                json!(age(object)),
                names,
                images,
                json!(format_selector(object.pointer("/spec/selector"))),
            ]);
        }
        ("apps", "ControllerRevision") => {
            let owner = object
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .and_then(|refs| refs.iter().find(|r| r.get("controller").and_then(Value::as_bool) == Some(true)));
            let controller = match owner {
                Some(owner) => {
                    let group = text(owner, "/apiVersion").rsplit_once('/').map(|(g, _)| g).unwrap_or_default();
                    let kind = text(owner, "/kind");
                    let group_kind = if group.is_empty() { kind.to_owned() } else { format!("{kind}.{group}") };
                    format!("{}/{}", group_kind.to_lowercase(), text(owner, "/name"))
                }
                None => "<none>".to_owned(),
            };
            cells.extend([json!(controller), json!(int(object, "/revision")), json!(age(object))]);
        }
        ("batch", "Job") => {
            let succeeded = int(object, "/status/succeeded");
            let completions = match object.pointer("/spec/completions").and_then(Value::as_i64) {
                Some(completions) => format!("{succeeded}/{completions}"),
                None => match int(object, "/spec/parallelism") {
                    parallelism if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
                    _ => format!("{succeeded}/1"),
                },
            };
            let start = parse_time(text(object, "/status/startTime"));
            let end = parse_time(text(object, "/status/completionTime"));
            let duration = match (start, end) {
                (None, _) => String::new(),
                (Some(start), None) => human_duration(jiff::Timestamp::now().duration_since(start).as_secs()),
                (Some(start), Some(end)) => human_duration(end.duration_since(start).as_secs()),
            };
            let [names, images] = container_cells(object.pointer("/spec/template/spec/containers"));
            cells.extend([
                json!(job_status(object)),
                json!(completions),
                json!(duration),
                json!(age(object)),
                names,
                images,
                json!(format_selector(object.pointer("/spec/selector"))),
            ]);
        }
        ("policy", "PodDisruptionBudget") => {
            let bound = |key: &str| match object.pointer(&format!("/spec/{key}")) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => "N/A".to_owned(),
            };
            cells.extend([
                json!(bound("minAvailable")),
                json!(bound("maxUnavailable")),
                json!(int(object, "/status/disruptionsAllowed")),
                json!(age(object)),
            ]);
        }
        ("coordination.k8s.io", "Lease") => {
            cells.extend([json!(text(object, "/spec/holderIdentity")), json!(age(object))])
        }
        ("scheduling.k8s.io", "PriorityClass") => cells.extend([
            json!(int(object, "/value")),
            json!(object.get("globalDefault").and_then(Value::as_bool).unwrap_or(false)),
            json!(age(object)),
            json!(text(object, "/preemptionPolicy")),
        ]),
        _ => cells.push(json!(text(object, "/metadata/creationTimestamp"))),
    }
    cells
}

/// `printEvent`, wide: Last Seen, Type, Reason, Object, Subobject, Source, Message, First Seen, Count, Name. Reads
/// the stored (core/v1) form, whichever API asked.
fn event_cells(event: &Value) -> Vec<Value> {
    let micro_since = |pointer: &str| since(text(event, pointer));
    let first = match text(event, "/firstTimestamp") {
        "" => micro_since("/eventTime"),
        time => since(time),
    };
    let mut last = match text(event, "/lastTimestamp") {
        "" => first.clone(),
        time => since(time),
    };
    let mut count = int(event, "/count");
    if event.get("series").is_some_and(|s| !s.is_null()) {
        last = micro_since("/series/lastObservedTime");
        count = int(event, "/series/count");
    } else if count == 0 {
        // Singleton events don't have a count set in the new API.
        count = 1;
    }
    let kind = text(event, "/involvedObject/kind").to_lowercase();
    let target = match text(event, "/involvedObject/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let first_non_empty = |a: &str, b: &str| if a.is_empty() { b.to_owned() } else { a.to_owned() };
    let component = first_non_empty(text(event, "/source/component"), text(event, "/reportingComponent"));
    let instance = first_non_empty(text(event, "/source/host"), text(event, "/reportingInstance"));
    let source = if instance.is_empty() { component } else { format!("{component}, {instance}") };
    vec![
        json!(last),
        json!(text(event, "/type")),
        json!(text(event, "/reason")),
        json!(target),
        json!(text(event, "/involvedObject/fieldPath")),
        json!(source),
        json!(text(event, "/message").trim()),
        json!(first),
        json!(count),
        json!(text(event, "/metadata/name")),
    ]
}

/// `getServiceExternalIP` (not wide).
fn service_external_ip(service: &Value) -> String {
    let external: Vec<&str> = service
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match text(service, "/spec/type") {
        "ClusterIP" | "NodePort" if !external.is_empty() => external.join(","),
        "ClusterIP" | "NodePort" => "<none>".into(),
        "LoadBalancer" => {
            let mut ingress: Vec<String> = service
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|i| {
                    let ip = text(i, "/ip");
                    let host = text(i, "/hostname");
                    if !ip.is_empty() {
                        Some(ip.to_owned())
                    } else if !host.is_empty() {
                        Some(host.to_owned())
                    } else {
                        None
                    }
                })
                .collect();
            ingress.sort();
            ingress.dedup();
            let mut lb = ingress.join(",");
            if lb.len() > 16 {
                lb = format!("{}...", &lb[..13]);
            }
            match (lb.is_empty(), external.is_empty()) {
                (_, false) => lb
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .chain(external.iter().map(|s| (*s).to_owned()))
                    .collect::<Vec<_>>()
                    .join(","),
                (false, true) => lb,
                (true, true) => "<pending>".into(),
            }
        }
        "ExternalName" => text(service, "/spec/externalName").to_owned(),
        _ => "<unknown>".into(),
    }
}

/// `printJob`'s status: the first that holds of Complete, Failed, Terminating, Suspended, FailureTarget, else
/// Running.
fn job_status(job: &Value) -> &'static str {
    let holds = |ty: &str| {
        job.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(ty)))
            .is_some_and(|c| c.get("status").and_then(Value::as_str) == Some("True"))
    };
    if holds("Complete") {
        "Complete"
    } else if holds("Failed") {
        "Failed"
    } else if job.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        "Terminating"
    } else if holds("Suspended") {
        "Suspended"
    } else if holds("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

/// The cells of `object`'s row, from the same printer as [`columns`].
fn cells(rt: &ResourceType, object: &Value) -> Vec<Value> {
    let name = || std::iter::once(json!(text(object, "/metadata/name")));
    if let Some(custom) = rt.custom() {
        return name().chain(custom.printer_columns.iter().map(|c| custom_cell(c, object))).collect();
    }
    match rt.builtin().and_then(|kind| super::auth::printers::cells(kind, object)) {
        Some(more) => name().chain(more).collect(),
        None => builtin_cells(&rt.group, &rt.kind, object),
    }
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

/// `PartialObjectMetadata` of an object, in meta.k8s.io `version` (`v1` or `v1beta1`).
pub fn partial_metadata(object: &Value, version: &str) -> Value {
    let metadata = object.get("metadata").cloned().unwrap_or_else(|| json!({}));
    json!({"kind": "PartialObjectMetadata", "apiVersion": format!("meta.k8s.io/{version}"), "metadata": metadata})
}

/// The Table of `objects`, in meta.k8s.io `version` (`v1` or `v1beta1`).
pub fn table(
    rt: &ResourceType,
    objects: &[Value],
    rv: Option<u64>,
    continue_token: Option<&str>,
    include: IncludeObject,
    version: &str,
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
                IncludeObject::Metadata => row["object"] = partial_metadata(object, version),
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
    json!({"kind": "Table", "apiVersion": format!("meta.k8s.io/{version}"), "metadata": metadata,
           "columnDefinitions": definitions, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::builtin_types;

    /// The column names and the first row's cells of `object` as a `kind` in `group`.
    fn printed(group: &str, kind: &str, object: Value) -> (Vec<String>, Vec<Value>) {
        let columns = builtin_columns(group, kind).into_iter().map(|c| c.name).collect();
        (columns, builtin_cells(group, kind, &object))
    }

    #[test]
    fn workloads_print_their_replicas_and_wide_columns() {
        let template = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:2"}]}});
        let selector = json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]});
        let (columns, cells) = printed(
            "apps",
            "ReplicaSet",
            json!({"metadata": {"name": "rs"},
            "spec": {"replicas": 3, "selector": selector, "template": template}, "status": {"replicas": 2, "readyReplicas": 1}}),
        );
        assert_eq!(columns, ["Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"]);
        assert_eq!(cells[1..4], [json!(3), json!(2), json!(1)]);
        assert_eq!(cells[5..8], [json!("a,b"), json!("x:1,y:2"), json!("app=web,tier in (a,b)")]);
        let (columns, cells) = printed(
            "apps",
            "DaemonSet",
            json!({"metadata": {"name": "ds"}, "spec": {"template":
            {"spec": {"nodeSelector": {"b": "2", "a": "1"}}}}, "status": {"desiredNumberScheduled": 4, "numberReady": 3}}),
        );
        assert_eq!(columns[1..8], ["Desired", "Current", "Ready", "Up-to-date", "Available", "Node Selector", "Age"]);
        assert_eq!(
            (&cells[1], &cells[3], &cells[6], &cells[10]),
            (&json!(4), &json!(3), &json!("a=1,b=2"), &json!("<none>"))
        );
        let (columns, cells) = printed(
            "apps",
            "StatefulSet",
            json!({"metadata": {"name": "s"}, "spec": {"replicas": 2},
            "status": {"readyReplicas": 1}}),
        );
        assert_eq!(columns, ["Name", "Ready", "Age", "Containers", "Images"]);
        assert_eq!(cells[1], "1/2");
        let (_, cells) = printed(
            "apps",
            "ControllerRevision",
            json!({"metadata": {"name": "r", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "controller": true}]}, "revision": 3}),
        );
        assert_eq!((&cells[1], &cells[2]), (&json!("daemonset.apps/agent"), &json!(3)));
    }

    #[test]
    fn config_and_policy_kinds_print_what_kubectl_shows() {
        let (columns, cells) = printed(
            "policy",
            "PodDisruptionBudget",
            json!({"metadata": {"name": "p"},
            "spec": {"maxUnavailable": "25%"}, "status": {"disruptionsAllowed": 1}}),
        );
        assert_eq!(columns, ["Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"]);
        assert_eq!(cells[1..4], [json!("N/A"), json!("25%"), json!(1)]);
        let (columns, cells) = printed(
            "",
            "ConfigMap",
            json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "binaryData": {"b": "AA=="}}),
        );
        assert_eq!(columns, ["Name", "Data", "Age"]);
        assert_eq!(cells[1], 2);
        let (columns, cells) =
            printed("", "Secret", json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"a": "AA=="}}));
        assert_eq!(columns, ["Name", "Type", "Data", "Age"]);
        assert_eq!(cells[1..3], [json!("Opaque"), json!(1)]);
        let (columns, cells) = printed("", "ServiceAccount", json!({"metadata": {"name": "sa"}}));
        assert_eq!(columns, ["Name", "Secrets", "Age"]);
        assert_eq!(cells[1], 0);
        let (columns, cells) = printed(
            "scheduling.k8s.io",
            "PriorityClass",
            json!({"metadata": {"name": "high"},
            "value": 1000, "globalDefault": true, "preemptionPolicy": "Never"}),
        );
        assert_eq!(columns, ["Name", "Value", "Global-Default", "Age", "PreemptionPolicy"]);
        assert_eq!((&cells[1], &cells[2], &cells[4]), (&json!(1000), &json!(true), &json!("Never")));
        let (columns, cells) = printed(
            "",
            "Service",
            json!({"metadata": {"name": "svc"}, "spec": {"type": "NodePort",
            "clusterIPs": ["10.0.0.1"], "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}], "selector": {"app": "web"}}}),
        );
        assert_eq!(columns, ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"]);
        assert_eq!(cells[1..5], [json!("NodePort"), json!("10.0.0.1"), json!("<none>"), json!("80:30080/TCP")]);
        assert_eq!(cells[6], "app=web");
        let (columns, cells) = printed(
            "batch",
            "Job",
            json!({"metadata": {"name": "j"}, "spec": {"completions": 2},
            "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}),
        );
        assert_eq!(columns[..5], ["Name", "Status", "Completions", "Duration", "Age"]);
        assert_eq!(cells[1..3], [json!("Complete"), json!("1/2")]);
        let (columns, cells) = printed(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            json!({"metadata":
            {"name": "widgets.example.com", "creationTimestamp": "2026-01-02T03:04:05Z"}}),
        );
        assert_eq!(columns, ["Name", "Created At"], "upstream's default table");
        assert_eq!(cells[1], "2026-01-02T03:04:05Z");
    }

    #[test]
    fn events_print_series_counts_and_reporting_controllers() {
        let event = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "NodeVersion", "name": "v"},
            "type": "Warning", "reason": "Blocked", "message": " stuck ", "eventTime": "2026-01-02T03:04:05.000000Z",
            "reportingComponent": "update-operator", "reportingInstance": "r1"});
        let cells = event_cells(&event);
        assert_eq!(
            cells[1..7],
            [
                json!("Warning"),
                json!("Blocked"),
                json!("nodeversion/v"),
                json!(""),
                json!("update-operator, r1"),
                json!("stuck")
            ]
        );
        assert_eq!(cells[8], 1, "a singleton new-style Event counts once");
        assert_eq!(cells[0], cells[7], "last seen is first seen without a series");
        let mut series = event.clone();
        series["series"] = json!({"count": 5, "lastObservedTime": "2026-01-02T03:04:06.000000Z"});
        series["source"] = json!({"component": "kubelet"});
        let cells = event_cells(&series);
        assert_eq!((&cells[5], &cells[8]), (&json!("kubelet, r1"), &json!(5)));
    }

    #[test]
    fn node_and_pod_rows_show_status() {
        let types = builtin_types();
        let nodes = types.iter().find(|t| t.plural == "nodes").unwrap();
        let node = json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "spec": {"unschedulable": true}, "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1.33.0"}}});
        let table = table(nodes, &[node], Some(5), None, IncludeObject::Metadata, "v1");
        assert_eq!(table["rows"][0]["cells"][1], "Ready,SchedulingDisabled");
        assert_eq!(table["rows"][0]["cells"][2], "control-plane");
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(table["metadata"]["resourceVersion"], "5");
        let pods = types.iter().find(|t| t.plural == "pods").unwrap();
        let pod = json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"containers": [{}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}]}});
        let row = &super::table(pods, &[pod], None, None, IncludeObject::None, "v1")["rows"][0];
        assert_eq!(row["cells"][1], "1/1");
        assert_eq!(row["cells"][2], "Terminating");
        assert_eq!(row["cells"][3], "2");
        assert!(row.get("object").is_none());
    }
}
