//! What the write path does with other objects of the store before it validates: upstream's Priority admission
//! plugin (a pod's priority from its PriorityClass, one default class), the Service REST storage's cluster IP and
//! node port allocation, and the Job strategy's generated selector (which needs the generated name).
//!
//! # Guarantees
//! - A new pod gets `spec.priority` (and `preemptionPolicy`) from its `priorityClassName`, or from the class with
//!   `globalDefault: true` (whose name it then carries), else priority 0. An unknown class, or a `priority` or
//!   `preemptionPolicy` that differs from the class's, is a 403 with upstream's message. The system classes may
//!   be used in every namespace (as upstream since 1.17; a ResourceQuota could limit them there, and the dev
//!   cluster has no ResourceQuota).
//! - At most one PriorityClass has `globalDefault: true` (403 otherwise); the system classes cannot be deleted.
//! - A Service that uses a cluster IP gets a free one of [`service::SERVICE_CIDR`] unless it asks for one (which
//!   must be free and in range) or for `None`; NodePort and LoadBalancer ports get free node ports of
//!   [`service::NODE_PORTS`] unless they ask for free ones in range. Refusals are 422 with upstream's messages.
//!   Addresses and ports are free when no other Service holds them (the store is the allocator's memory).

use crate::core::Core;
use crate::error::ApiError;
use crate::object::{name_of, object_key};
use crate::resource::{Builtin, ResourceType, job, service};
use crate::schema::{ErrorKind, FieldError, field_error};
use crate::state::State;
use rand::Rng;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::net::Ipv4Addr;

/// How many random picks an allocator tries before it scans its range in order.
const RANDOM_PICKS: usize = 64;

impl Core {
    /// Runs the steps of the module docs for a create (`old` is `None`) or an update of `object` through the
    /// main endpoint.
    pub(crate) fn admit_builtin(
        &self,
        state: &State,
        rt: &ResourceType,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        match rt.builtin() {
            Some(Builtin::Pod) if old.is_none() => self.admit_pod(state, rt, object),
            Some(Builtin::PriorityClass) => self.admit_priority_class(state, rt, object, old),
            Some(Builtin::Service) => {
                let errors = self.allocate(state, rt, object, old);
                if errors.is_empty() { Ok(()) } else { Err(ApiError::invalid(rt, name_of(object), &errors)) }
            }
            Some(Builtin::Job) if old.is_none() => {
                job::generate_selector_and_labels(object);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn priority_classes(&self, state: &State) -> Vec<Value> {
        let classes = self.builtin(Builtin::PriorityClass);
        state.objects(&classes).values().map(|stored| stored.value()).collect()
    }

    /// The class with `globalDefault: true` (the lowest value if a race made several, as upstream picks).
    fn default_class(&self, state: &State) -> Option<Value> {
        self.priority_classes(state)
            .into_iter()
            .filter(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
            .min_by_key(|c| c.get("value").and_then(Value::as_i64).unwrap_or(0))
    }

    fn admit_pod(&self, state: &State, rt: &ResourceType, pod: &mut Value) -> Result<(), ApiError> {
        let name = name_of(pod).to_owned();
        let requested = pod.pointer("/spec/priorityClassName").and_then(Value::as_str).unwrap_or_default().to_owned();
        let class = if requested.is_empty() {
            self.default_class(state)
        } else {
            let classes = self.builtin(Builtin::PriorityClass);
            match state.get(&classes, &object_key(None, &requested)) {
                Some(stored) => Some(stored.value()),
                None => {
                    let why = format!("no PriorityClass with name {requested} was found");
                    return Err(ApiError::forbidden(rt, &name, &why));
                }
            }
        };
        let value = class.as_ref().and_then(|c| c.get("value")).and_then(Value::as_i64).unwrap_or(0);
        let policy = class.as_ref().and_then(|c| c.get("preemptionPolicy")).and_then(Value::as_str).map(str::to_owned);
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
        if let Some(given) = spec.get("priority").and_then(Value::as_i64)
            && given != value
        {
            let why = format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
            );
            return Err(ApiError::forbidden(rt, &name, &why));
        }
        spec.insert("priority".into(), json!(value));
        if requested.is_empty()
            && let Some(class) = &class
        {
            spec.insert("priorityClassName".into(), json!(name_of(class)));
        }
        if let Some(policy) = policy {
            if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str)
                && given != policy
            {
                let why = format!(
                    "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
                );
                return Err(ApiError::forbidden(rt, &name, &why));
            }
            spec.insert("preemptionPolicy".into(), json!(policy));
        }
        Ok(())
    }

    fn admit_priority_class(
        &self,
        state: &State,
        rt: &ResourceType,
        class: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if class.get("globalDefault").and_then(Value::as_bool) != Some(true) {
            return Ok(());
        }
        let name = name_of(class);
        match self.default_class(state) {
            Some(existing) if old.is_none() || name_of(&existing) != name => Err(ApiError::forbidden(
                rt,
                name,
                &format!(
                    "PriorityClass {} is already marked as default. Only one default can exist",
                    name_of(&existing)
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Allocates the cluster IP and node ports of a Service; returns the refusals.
    fn allocate(&self, state: &State, rt: &ResourceType, object: &mut Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let key = object_key(object.pointer("/metadata/namespace").and_then(Value::as_str), name_of(object));
        let mut used_ips = HashSet::new();
        let mut used_ports = HashSet::new();
        for (other_key, other) in state.objects(rt).iter() {
            if *other_key == key {
                continue;
            }
            let other = other.value();
            if let Some(ip) = other.pointer("/spec/clusterIP").and_then(Value::as_str).and_then(|ip| ip.parse().ok()) {
                used_ips.insert(ip);
            }
            for port in other.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten() {
                if let Some(node_port) = port.get("nodePort").and_then(Value::as_i64) {
                    used_ports.insert(node_port);
                }
            }
        }
        let kept_ip = old.and_then(|o| o.pointer("/spec/clusterIP")).and_then(Value::as_str).unwrap_or_default();
        if service::uses_cluster_ip(object) {
            let asked = object.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or_default().to_owned();
            let ip = if asked.is_empty() {
                match free_ip(&used_ips) {
                    Some(ip) => Some(ip.to_string()),
                    None => {
                        errors.push(field_error(
                            "spec.clusterIPs",
                            ErrorKind::Invalid,
                            "Invalid value: []: failed to allocate IP: range is full",
                        ));
                        None
                    }
                }
            } else if asked == "None" || asked == kept_ip {
                Some(asked)
            } else {
                match check_ip(&asked, &used_ips) {
                    Ok(()) => Some(asked),
                    Err(why) => {
                        errors.push(field_error(
                            "spec.clusterIPs",
                            ErrorKind::Invalid,
                            format!("Invalid value: []string{{{asked:?}}}: failed to allocate IP {asked}: {why}"),
                        ));
                        None
                    }
                }
            };
            if let (Some(ip), Some(spec)) = (ip, object.get_mut("spec").and_then(Value::as_object_mut)) {
                spec.insert("clusterIP".into(), json!(ip));
                spec.insert("clusterIPs".into(), json!([ip]));
                spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
                spec.entry("ipFamilyPolicy").or_insert_with(|| json!("SingleStack"));
            }
        }
        if service::uses_node_ports(object) {
            let kept: HashSet<i64> = old
                .and_then(|o| o.pointer("/spec/ports"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("nodePort").and_then(Value::as_i64))
                .collect();
            let ports = object.pointer_mut("/spec/ports").and_then(Value::as_array_mut);
            for (i, port) in ports.into_iter().flatten().enumerate() {
                let asked = port.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
                let chosen = if asked == 0 {
                    free_port(&used_ports)
                } else if kept.contains(&asked) && !used_ports.contains(&asked) {
                    Some(asked)
                } else {
                    let why = if !service::NODE_PORTS.contains(&asked) {
                        Some(format!(
                            "provided port is not in the valid range. The range of valid ports is {}-{}",
                            service::NODE_PORTS.start(),
                            service::NODE_PORTS.end()
                        ))
                    } else if used_ports.contains(&asked) {
                        Some("provided port is already allocated".to_owned())
                    } else {
                        None
                    };
                    if let Some(why) = why {
                        errors.push(field_error(
                            &format!("spec.ports[{i}].nodePort"),
                            ErrorKind::Invalid,
                            format!("Invalid value: {asked}: {why}"),
                        ));
                    }
                    Some(asked)
                };
                match (chosen, port.as_object_mut()) {
                    (Some(chosen), Some(fields)) => {
                        used_ports.insert(chosen);
                        fields.insert("nodePort".into(), json!(chosen));
                    }
                    _ => errors.push(field_error(
                        &format!("spec.ports[{i}].nodePort"),
                        ErrorKind::Invalid,
                        "Invalid value: 0: failed to allocate a nodePort: range is full",
                    )),
                }
            }
        }
        errors
    }
}

/// The addresses of the service CIDR that may be handed out: not the network or broadcast address.
fn ip_range() -> (u32, u32) {
    let (base, bits) = service::SERVICE_CIDR;
    let first = u32::from(base);
    let size = 1u32 << (32 - bits);
    (first + 1, first + size - 2)
}

fn check_ip(asked: &str, used: &HashSet<Ipv4Addr>) -> Result<(), String> {
    let (first, last) = ip_range();
    let (base, bits) = service::SERVICE_CIDR;
    let ip: Ipv4Addr = asked.parse().map_err(|_| "not a valid IP address".to_owned())?;
    if !(first..=last).contains(&u32::from(ip)) {
        return Err(format!(
            "the provided IP ({asked}) is not in the valid range. The range of valid IPs is {base}/{bits}"
        ));
    }
    if used.contains(&ip) {
        return Err("provided IP is already allocated".to_owned());
    }
    Ok(())
}

fn free_ip(used: &HashSet<Ipv4Addr>) -> Option<Ipv4Addr> {
    let (first, last) = ip_range();
    let mut rng = rand::rng();
    (0..RANDOM_PICKS)
        .map(|_| Ipv4Addr::from(rng.random_range(first..=last)))
        .chain((first..=last).map(Ipv4Addr::from))
        .find(|ip| !used.contains(ip))
}

fn free_port(used: &HashSet<i64>) -> Option<i64> {
    let mut rng = rand::rng();
    (0..RANDOM_PICKS)
        .map(|_| rng.random_range(service::NODE_PORTS))
        .chain(service::NODE_PORTS)
        .find(|port| !used.contains(port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocators_skip_what_is_used_and_check_what_is_asked_for() {
        let (first, last) = ip_range();
        assert_eq!(Ipv4Addr::from(first), Ipv4Addr::new(10, 96, 0, 1));
        assert_eq!(Ipv4Addr::from(last), Ipv4Addr::new(10, 111, 255, 254));
        let used: HashSet<Ipv4Addr> = [Ipv4Addr::new(10, 96, 0, 1)].into();
        assert_eq!(check_ip("10.96.0.1", &used).unwrap_err(), "provided IP is already allocated");
        assert!(check_ip("10.0.0.1", &used).unwrap_err().contains("The range of valid IPs is 10.96.0.0/12"));
        assert!(check_ip("10.96.0.2", &used).is_ok());
        let ip = free_ip(&used).unwrap();
        assert!(!used.contains(&ip) && (first..=last).contains(&u32::from(ip)));
        let all_but_one: HashSet<i64> = service::NODE_PORTS.filter(|p| *p != 31000).collect();
        assert_eq!(free_port(&all_but_one), Some(31000));
        let all: HashSet<i64> = service::NODE_PORTS.collect();
        assert_eq!(free_port(&all), None);
    }
}
