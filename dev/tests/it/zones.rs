//! Zone by zone (issue 34 item 1): nodes start zone by zone, and never more than `maxUnavailablePerZone` of one
//! zone are cordoned at once, checked every 5 ms by a sampler while the whole rollout runs.

use crate::support;

use dev::apiserver::Patch;
use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::Node;
use kube::api::PatchParams;
use parking_lot::Mutex;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use support::{bare_cluster, create_version, eventually, fake_agents, operator, rolled_out};

const NODES: [(&str, &str); 6] =
    [("w-0", "zone-c"), ("w-1", "zone-b"), ("w-2", "zone-a"), ("w-3", "zone-c"), ("w-4", "zone-b"), ("w-5", "zone-a")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_goes_zone_by_zone_with_at_most_max_unavailable_per_zone_in_each() {
    let names: Vec<&str> = NODES.iter().map(|(n, _)| *n).collect();
    let server = bare_cluster(&names).await;
    let store = server.store();
    for (node, zone) in NODES {
        let patch = json!({"metadata": {"labels": {"topology.kubernetes.io/zone": zone}}});
        store.api::<Node>().patch(None, node, &Patch::Merge(patch), &PatchParams::default()).unwrap();
    }
    let observer = Observer::start(server.client(), Limits::new(2, false));
    // Every instant: the cordoned nodes of each zone, and the order in which nodes were first cordoned.
    let seen: Arc<Mutex<(Vec<String>, Vec<String>)>> = Arc::default();
    let sampler = {
        let (store, seen) = (store.clone(), seen.clone());
        tokio::spawn(async move {
            loop {
                let nodes = store.api::<Node>().list(None, &Default::default()).map(|l| l.items).unwrap_or_default();
                let mut per_zone: BTreeMap<String, Vec<String>> = BTreeMap::new();
                {
                    let mut seen = seen.lock();
                    for n in &nodes {
                        if n.spec.as_ref().and_then(|s| s.unschedulable) != Some(true) {
                            continue;
                        }
                        let name = n.metadata.name.clone().unwrap_or_default();
                        let zone =
                            n.metadata.labels.as_ref().and_then(|l| l.get("topology.kubernetes.io/zone")).cloned();
                        per_zone.entry(zone.unwrap_or_default()).or_default().push(name.clone());
                        if !seen.1.contains(&name) {
                            seen.1.push(name);
                        }
                    }
                    for (zone, cordoned) in per_zone {
                        if cordoned.len() > 1 {
                            seen.0.push(format!("{zone}: {cordoned:?} cordoned at once"));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let agents = fake_agents(&server, &names, "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 2, "maxUnavailablePerZone": 1}));
    eventually(Duration::from_secs(120), "the rollout", || rolled_out(&store, 6)).await;
    sampler.abort();
    let (violations, order) = std::mem::take(&mut *seen.lock());
    assert_eq!(violations, Vec::<String>::new());
    // Zone by zone: zone-a's first node is among the first two cordoned (two may be cordoned by one plan), and zone-c's
    // nodes come last (by name alone, w-0 of zone-c would be first). The sampler checked the per-zone limit.
    assert_eq!(order.len(), 6, "{order:?}");
    assert!(order[..2].contains(&"w-2".to_owned()), "{order:?}");
    let mut last = order[4..].to_vec();
    last.sort();
    assert_eq!(last, ["w-0", "w-3"], "{order:?}");
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}
