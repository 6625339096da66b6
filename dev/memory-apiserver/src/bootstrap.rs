//! The objects a real API server creates when it starts and the dev server serves too (besides the namespaces of
//! its config and the RBAC objects of [`super::auth::bootstrap`]).

use super::resource::{Builtin, priority, service};
use serde_json::{Value, json};
use std::net::Ipv4Addr;

/// The objects a real API server creates at start that the dev server serves too: the system PriorityClasses
/// and, in `default`, the `kubernetes` Service on the first address of the service CIDR.
pub fn bootstrap_objects(namespaces: &[String]) -> Vec<(Builtin, Option<&'static str>, Value)> {
    let mut objects: Vec<(Builtin, Option<&'static str>, Value)> = priority::SYSTEM_CLASSES
        .iter()
        .map(|(name, value, description)| {
            (Builtin::PriorityClass, None, priority::system_class(name, *value, description))
        })
        .collect();
    if namespaces.iter().any(|n| n == "default") {
        let (base, _) = service::SERVICE_CIDR;
        let ip = Ipv4Addr::from(u32::from(base) + 1).to_string();
        objects.push((
            Builtin::Service,
            Some("default"),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "kubernetes", "namespace": "default",
                                "labels": {"component": "apiserver", "provider": "kubernetes"}},
                   "spec": {"type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip], "ipFamilies": ["IPv4"],
                            "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                            "internalTrafficPolicy": "Cluster",
                            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]},
                   "status": {"loadBalancer": {}}}),
        ));
    }
    objects
}
