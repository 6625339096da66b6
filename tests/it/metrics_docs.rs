//! docs/metrics.md names every metric the controller and the agent serve, with the prefixes the binary uses.

use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;

/// The metric families a registry serves (`# TYPE` lines), with the suffixes the text format adds.
fn served(registry: &Registry) -> Vec<String> {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| {
            let mut parts = rest.split(' ');
            let name = parts.next().unwrap_or_default();
            match parts.next() {
                Some("counter") => format!("{name}_total"),
                _ => name.to_owned(),
            }
        })
        .collect()
}

#[test]
fn every_served_metric_is_documented() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md")).unwrap();
    // The prefixes of src/main.rs.
    // A family is served once it has a label set: one each.
    let mut controller = Registry::with_prefix("update_operator");
    let c = controller::Metrics::register(&mut controller);
    c.nodes.get_or_create(&controller::metrics::NodeLabels { situation: "failed" }).set(1);
    c.actions.get_or_create(&controller::metrics::ActionLabels { reason: "Stage".into(), result: "ok" }).inc();
    c.evictions.get_or_create(&controller::metrics::EvictionLabels { result: "accepted" }).inc();
    let mut agent = Registry::with_prefix("update_operator_agent");
    let a = agent::Metrics::register(&mut agent);
    let op = agent::HostOpLabels { operation: "stage", result: "ok" };
    a.host_operations.get_or_create(&op).inc();
    a.host_retries.get_or_create(&op).inc();
    let names: Vec<String> = served(&controller).into_iter().chain(served(&agent)).collect();
    assert!(names.len() >= 11, "{names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !docs.contains(&format!("`{n}`"))).collect();
    assert!(missing.is_empty(), "docs/metrics.md does not list {missing:?}");
}
