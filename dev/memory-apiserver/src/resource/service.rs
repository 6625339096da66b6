//! core/v1 Service: upstream's defaulting and the validation that matters for clients (ports, types, cluster IPs,
//! node ports); the allocation of cluster IPs and node ports is in [`crate::ops::admit`].
//!
//! # Guarantees
//! - A new Service defaults to `type: ClusterIP`, `sessionAffinity: None`, `internalTrafficPolicy: Cluster`,
//!   each port to `protocol: TCP` and `targetPort` = `port`; NodePort and LoadBalancer Services get
//!   `externalTrafficPolicy: Cluster`, LoadBalancer ones `allocateLoadBalancerNodePorts: true`.
//! - An update that leaves out `clusterIP`/`clusterIPs` or a port's `nodePort` keeps the allocated values (as
//!   upstream's `patchAllocatedValues`, so `kubectl replace` of a manifest without them works); a type change drops
//!   the allocated values the new type has no use for (`dropTypeDependentFields`); changing an allocated
//!   `clusterIP` is refused.
//! - Endpoints and EndpointSlices are not served: nothing routes traffic in the dev cluster.

use super::defaulting::set_default;
use crate::schema::{ErrorKind, FieldError, field_error};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::net::Ipv4Addr;

/// The service CIDR cluster IPs come from (kubeadm's default).
pub const SERVICE_CIDR: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 96, 0, 0), 12);
/// The node port range (kube-apiserver's default `--service-node-port-range`).
pub const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;

const TYPES: [&str; 4] = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];

/// The Service's `spec.type` (ClusterIP when absent).
pub fn service_type(service: &Value) -> &str {
    service.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP")
}

/// True for types with node ports.
pub fn uses_node_ports(service: &Value) -> bool {
    matches!(service_type(service), "NodePort" | "LoadBalancer")
}

/// True for types with a cluster IP.
pub fn uses_cluster_ip(service: &Value) -> bool {
    service_type(service) != "ExternalName"
}

/// The defaults of a new or updated Service.
pub fn default_spec(service: &mut Value) {
    let node_ports = uses_node_ports(service);
    let load_balancer = service_type(service) == "LoadBalancer";
    let cluster_ip = uses_cluster_ip(service);
    let Some(spec) = service.get_mut("spec").filter(|s| s.is_object()) else { return };
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    if cluster_ip {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if node_ports {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if load_balancer {
        set_default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            set_default(port, "protocol", json!("TCP"));
            if let Some(number) = port.get("port").cloned() {
                set_default(port, "targetPort", number);
            }
        }
    }
}

/// Upstream `patchAllocatedValues` and `dropTypeDependentFields`: what an update leaves out of what was
/// allocated is kept, and what was allocated for a type the Service leaves (unchanged by the update) goes.
pub fn keep_allocated(old: &Value, new: &mut Value) {
    if uses_cluster_ip(old)
        && !uses_cluster_ip(new)
        && old.pointer("/spec/clusterIP") == new.pointer("/spec/clusterIP")
        && let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut)
    {
        for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            spec.remove(key);
        }
    }
    if uses_node_ports(old) && !uses_node_ports(new) {
        let old_ports = old.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
        let old_node_ports: Vec<Option<&Value>> = old_ports.iter().map(|p| p.get("nodePort")).collect();
        let ports = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut);
        if let Some(ports) = ports
            && ports.iter().map(|p| p.get("nodePort")).collect::<Vec<_>>() == old_node_ports
        {
            for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                port.remove("nodePort");
            }
        }
    }
    if uses_cluster_ip(old) && uses_cluster_ip(new) {
        let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else { return };
        for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            let missing = spec.get(key).is_none_or(|v| v.is_null() || v.as_str() == Some(""));
            if missing && let Some(value) = old.pointer(&format!("/spec/{key}")) {
                spec.insert(key.to_owned(), value.clone());
            }
        }
    }
    if uses_node_ports(old) && uses_node_ports(new) {
        let old_ports = old.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
        let Some(ports) = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut) else { return };
        for port in ports {
            if port.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                continue;
            }
            let same = old_ports.iter().find(|o| o.get("port") == port.get("port") && protocol(o) == protocol(port));
            if let (Some(same), Some(fields)) = (same.and_then(|o| o.get("nodePort")), port.as_object_mut()) {
                fields.insert("nodePort".into(), same.clone());
            }
        }
    }
}

fn protocol(port: &Value) -> &str {
    port.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
}

fn port_range(path: &str, value: i64, errors: &mut Vec<FieldError>) {
    if !(1..=65535).contains(&value) {
        errors.push(field_error(
            path,
            ErrorKind::Invalid,
            format!("Invalid value: {value}: must be between 1 and 65535, inclusive"),
        ));
    }
}

/// Validates a new Service (`old` is `None`) or an update.
pub fn validate(service: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let empty = Value::Object(Map::new());
    let spec = service.get("spec").unwrap_or(&empty);
    let kind = service_type(service);
    if !TYPES.contains(&kind) {
        errors.push(field_error(
            "spec.type",
            ErrorKind::NotSupported,
            format!(
                "Unsupported value: {kind:?}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
            ),
        ));
    }
    let ports = spec.get("ports").and_then(Value::as_array).cloned().unwrap_or_default();
    if kind == "ExternalName" {
        let name = spec.get("externalName").and_then(Value::as_str).unwrap_or_default();
        if name.is_empty() {
            errors.push(field_error("spec.externalName", ErrorKind::Required, "Required value"));
        }
        if spec.get("clusterIP").and_then(Value::as_str).is_some_and(|ip| !ip.is_empty()) {
            errors.push(field_error(
                "spec.clusterIPs",
                ErrorKind::Forbidden,
                "Forbidden: may not be set for ExternalName services",
            ));
        }
    } else if ports.is_empty() {
        errors.push(field_error("spec.ports", ErrorKind::Required, "Required value"));
    }
    let cluster_ip = spec.get("clusterIP").and_then(Value::as_str).unwrap_or_default();
    if cluster_ip == "None" && kind != "ClusterIP" {
        errors.push(field_error(
            "spec.clusterIPs[0]",
            ErrorKind::Invalid,
            format!("Invalid value: \"None\": may not be set to 'None' for {kind} services"),
        ));
    } else if !cluster_ip.is_empty() && cluster_ip != "None" && cluster_ip.parse::<Ipv4Addr>().is_err() {
        errors.push(field_error(
            "spec.clusterIPs[0]",
            ErrorKind::Invalid,
            format!("Invalid value: {cluster_ip:?}: must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"),
        ));
    }
    let mut names = HashSet::new();
    let mut seen = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        let name = port.get("name").and_then(Value::as_str).unwrap_or_default();
        if ports.len() > 1 && name.is_empty() {
            errors.push(field_error(&format!("{path}.name"), ErrorKind::Required, "Required value"));
        } else if !name.is_empty() && !names.insert(name.to_owned()) {
            errors.push(field_error(
                &format!("{path}.name"),
                ErrorKind::Duplicate,
                format!("Duplicate value: {name:?}"),
            ));
        }
        port_range(&format!("{path}.port"), port.get("port").and_then(Value::as_i64).unwrap_or(0), &mut errors);
        let proto = protocol(port);
        if !["TCP", "UDP", "SCTP"].contains(&proto) {
            errors.push(field_error(
                &format!("{path}.protocol"),
                ErrorKind::NotSupported,
                format!("Unsupported value: {proto:?}: supported values: \"SCTP\", \"TCP\", \"UDP\""),
            ));
        }
        let key = (port.get("port").and_then(Value::as_i64).unwrap_or(0), proto.to_owned());
        if !seen.insert(key.clone()) {
            errors.push(field_error(
                &path,
                ErrorKind::Duplicate,
                format!("Duplicate value: core.ServicePort{{Name:{:?}, Protocol:{:?}, Port:{}}}", name, key.1, key.0),
            ));
        }
        if let Some(target) = port.get("targetPort").and_then(Value::as_i64) {
            port_range(&format!("{path}.targetPort"), target, &mut errors);
        }
        let node_port = port.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
        if node_port != 0 && !uses_node_ports(service) {
            errors.push(field_error(
                &format!("{path}.nodePort"),
                ErrorKind::Forbidden,
                format!("Forbidden: may not be used when `type` is '{kind}'"),
            ));
        }
    }
    if let Some(old) = old
        && uses_cluster_ip(old)
        && uses_cluster_ip(service)
    {
        let before = old.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or_default();
        if !before.is_empty() && before != cluster_ip {
            errors.push(field_error(
                "spec.clusterIPs[0]",
                ErrorKind::Invalid,
                format!("Invalid value: {:?}: may not change once set", cluster_ip),
            ));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: Value) -> Value {
        let mut service = json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec});
        default_spec(&mut service);
        service
    }

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn services_get_upstreams_defaults() {
        let plain = service(json!({"ports": [{"port": 80}]}));
        assert_eq!(plain["spec"]["type"], "ClusterIP");
        assert_eq!(plain["spec"]["sessionAffinity"], "None");
        assert_eq!(plain["spec"]["internalTrafficPolicy"], "Cluster");
        assert_eq!(plain["spec"]["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
        assert!(plain["spec"].get("externalTrafficPolicy").is_none());
        let balanced = service(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
        assert_eq!(balanced["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(balanced["spec"]["allocateLoadBalancerNodePorts"], true);
        assert!(validate(&plain, None).is_empty());
    }

    #[test]
    fn validation_refuses_what_upstream_refuses() {
        assert_eq!(messages(&validate(&service(json!({})), None)), vec!["spec.ports: Required value"]);
        let zero = service(json!({"ports": [{"port": 0}]}));
        assert_eq!(
            messages(&validate(&zero, None)),
            vec![
                "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive"
            ]
        );
        let unnamed = service(json!({"ports": [{"port": 80}, {"port": 443}]}));
        assert_eq!(
            messages(&validate(&unnamed, None)),
            vec!["spec.ports[0].name: Required value", "spec.ports[1].name: Required value"]
        );
        let node_port = service(json!({"ports": [{"port": 80, "nodePort": 30080}]}));
        assert_eq!(
            messages(&validate(&node_port, None)),
            vec!["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]
        );
        let headless_np = service(json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]}));
        assert_eq!(validate(&headless_np, None)[0].field, "spec.clusterIPs[0]");
        let external = service(json!({"type": "ExternalName"}));
        assert_eq!(messages(&validate(&external, None)), vec!["spec.externalName: Required value"]);
        let addressed =
            service(json!({"type": "ExternalName", "externalName": "db.example.com", "clusterIP": "10.96.0.9"}));
        assert_eq!(
            messages(&validate(&addressed, None)),
            vec!["spec.clusterIPs: Forbidden: may not be set for ExternalName services"]
        );
        let bogus = service(json!({"type": "Bogus", "ports": [{"port": 80}]}));
        assert_eq!(validate(&bogus, None)[0].kind, ErrorKind::NotSupported);
    }

    #[test]
    fn an_update_keeps_what_was_allocated_and_may_not_change_the_cluster_ip() {
        let old = service(json!({"type": "NodePort", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 80, "nodePort": 30080}]}));
        let mut replaced = service(json!({"type": "NodePort", "ports": [{"port": 80}]}));
        keep_allocated(&old, &mut replaced);
        assert_eq!(replaced["spec"]["clusterIP"], "10.96.0.10");
        assert_eq!(replaced["spec"]["ports"][0]["nodePort"], 30080);
        assert!(validate(&replaced, Some(&old)).is_empty());
        let mut internal = replaced.clone();
        internal["spec"]["type"] = json!("ClusterIP");
        keep_allocated(&old, &mut internal);
        assert!(internal["spec"]["ports"][0].get("nodePort").is_none(), "node ports go with the type");
        assert_eq!(internal["spec"]["clusterIP"], "10.96.0.10");
        let mut external = replaced.clone();
        external["spec"]["type"] = json!("ExternalName");
        external["spec"]["externalName"] = json!("db.example.com");
        keep_allocated(&old, &mut external);
        assert!(external["spec"].get("clusterIP").is_none(), "the cluster IP goes with the type");
        let mut moved = replaced.clone();
        moved["spec"]["clusterIP"] = json!("10.96.0.11");
        assert_eq!(
            messages(&validate(&moved, Some(&old))),
            vec!["spec.clusterIPs[0]: Invalid value: \"10.96.0.11\": may not change once set"]
        );
    }
}
