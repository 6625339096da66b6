//! Two controller replicas while the leader's Lease requests are slowed past the lease duration,
//! answered with 500s, or left hanging: the API server's request log shows that no replica ever
//! wrote a Node, a NodeVersion status or an Event, or evicted a pod, while another replica held the
//! Lease (as the Lease writes in the same log record it); the rollouts complete and no invariant
//! breaks. Both replicas authenticate as the same service account; the log tells them apart by
//! User-Agent.

use crate::support;

use dev::apiserver::{ErrorFault, Identity, LoggedRequest, Patch, RequestMatch, Store};
use dev::harness::{self, Component};
use dev::observer::{Limits, Observer};
use dev::operator::Manifest;
use serde_json::json;
use shared::crd::NodeVersion;
use std::collections::BTreeSet;
use std::time::Duration;
use support::{create_version, eventually, full_cluster_with, rolled_out, stop_all};

const NODES: i32 = 10;
const REPLICAS: [&str; 2] = ["fencing-1", "fencing-2"];

/// Lease timing with a 2 s margin between a leader's own deadline and the earliest takeover.
fn options(identity: &str) -> controller::Options {
    let mut options = harness::controller_options(identity);
    options.lease_timing = controller::leader::LeaseTiming {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
    };
    options
}

/// The replica that sent a logged request, by its User-Agent.
fn replica(entry: &LoggedRequest) -> Option<&'static str> {
    REPLICAS.into_iter().find(|id| entry.request.user_agent == controller::user_agent(id))
}

fn is_lease_write(entry: &LoggedRequest) -> bool {
    entry.request.resource == "leases" && entry.request.verb.is_write()
}

/// Requests that act on the cluster: every write except the Lease's, and evictions.
fn is_action(entry: &LoggedRequest) -> bool {
    entry.request.verb.is_write() && entry.request.resource != "leases"
}

/// Every action of a replica while it was not the holder, taking the identity of the last
/// successful Lease write as the holder; and how often the holder changed.
fn fencing_violations(log: &[LoggedRequest]) -> (Vec<String>, usize) {
    let mut holder: Option<&str> = None;
    let mut changes = 0;
    let mut violations = Vec::new();
    for entry in log {
        let Some(who) = replica(entry) else { continue };
        if is_lease_write(entry) {
            if entry.succeeded() && holder != Some(who) {
                holder = Some(who);
                changes += 1;
            }
        } else if is_action(entry) && holder != Some(who) {
            violations.push(format!(
                "#{} at {}: {who} sent {} {}/{} {:?} (answered {}) while {holder:?} held the lease",
                entry.seq,
                entry.at,
                entry.request.verb.as_str(),
                entry.request.resource,
                entry.request.subresource,
                entry.request.name,
                entry.code
            ));
        }
    }
    (violations, changes)
}

fn holder(store: &Store) -> Option<String> {
    harness::lease_holder(store)
}

fn leases_of(identity: &str) -> RequestMatch {
    RequestMatch {
        resource: Some("leases".into()),
        user_agent_prefix: Some(controller::user_agent(identity)),
        ..Default::default()
    }
}

/// Keeps rollouts going: whenever one completes, the next target is set.
fn keep_rolling(store: Store) -> tokio::task::JoinHandle<u32> {
    tokio::spawn(async move {
        let mut rollouts = 0;
        loop {
            if let Some(status) = rolled_out(&store, NODES) {
                rollouts += 1;
                let next = format!("v{}", rollouts + 2);
                if status.target_image.as_deref() != Some(next.as_str()) {
                    let patch = Patch::Merge(json!({"spec": {"image": next}}));
                    let versions = store.api::<NodeVersion>();
                    if versions.patch(None, "constellation-version", &patch, &Default::default()).is_err() {
                        return rollouts;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewals_are_slowed_failed_or_hung_never_acts_after_the_takeover() {
    support::log_to_env_file();
    let cluster = full_cluster_with(|c| {
        c.nodes = NODES as usize;
        c.control_planes = 2;
    })
    .await;
    let started = std::time::Instant::now();
    let store = cluster.store();
    let log = cluster.server().request_log();
    log.enable(1_000_000);
    let faults = cluster.faults();
    let observer = Observer::start(cluster.client(), Limits::new(2, true));
    let agents = support::start_agents(&cluster);
    let first: Component = harness::controller(cluster.operator(), options(REPLICAS[0]));
    eventually(Duration::from_secs(30), "the first replica leads", || {
        (holder(&store)?.as_str() == REPLICAS[0]).then_some(())
    })
    .await;
    let second: Component = harness::controller(cluster.operator(), options(REPLICAS[1]));
    create_version(&store, "v2", json!({"maxUnavailable": 2}));
    let rolling = keep_rolling(store.clone());
    eventually(Duration::from_secs(60), "the rollout under way", || {
        let v = store.api::<NodeVersion>().get(None, "constellation-version").ok()?;
        (v.status?.counts.up_to_date >= 1).then_some(())
    })
    .await;

    type Inject = Box<dyn Fn(&dev::apiserver::Faults, &str) -> dev::apiserver::FaultId>;
    let phases: Vec<(&str, Inject)> = vec![
        (
            "renewals slowed past the lease duration",
            Box::new(|f, id| f.add_latency(leases_of(id), Duration::from_secs(6))),
        ),
        ("renewals answered with 500", Box::new(|f, id| f.inject(ErrorFault::new(leases_of(id), 500)))),
        ("renewals hung", Box::new(|f, id| f.hang(leases_of(id)))),
        ("renewals slowed again", Box::new(|f, id| f.add_latency(leases_of(id), Duration::from_secs(6)))),
    ];
    for (what, inject) in phases {
        let leader = eventually(Duration::from_secs(30), "a leader", || holder(&store)).await;
        eprintln!("{:?} {what}: {leader} leads", started.elapsed());
        let fault = inject(&faults, &leader);
        eventually(Duration::from_secs(30), &format!("a takeover with {what}"), || {
            holder(&store).filter(|h| *h != leader)
        })
        .await;
        // The deposed leader is still cut off from the lease for a while: it must not act.
        tokio::time::sleep(Duration::from_secs(3)).await;
        faults.remove(fault);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    eprintln!("{:?} phases done", started.elapsed());
    rolling.abort();
    let _ = rolling.await;
    // As long as the other whole rollouts may take on a loaded 2-core machine (it took 46 s alone).
    support::eventually_or_say(
        Duration::from_secs(240),
        "the last rollout",
        || rolled_out(&store, NODES),
        || {
            // Takeovers since the start, the phases' five included: many more mean leadership flapping (renewals
            // missing their deadline on a loaded machine), each term starting its drains over.
            let (_, takeovers) = fencing_violations(&log.entries());
            format!(
                "; lease held by {:?} after {takeovers} takeovers{}",
                holder(&store),
                support::rollout_state(&store)
            )
        },
    )
    .await;
    eprintln!("{:?} rolled out", started.elapsed());
    let entries = log.entries();
    assert_eq!(log.dropped(), 0);
    let (violations, takeovers) = fencing_violations(&entries);
    assert_eq!(violations, Vec::<String>::new());
    assert!(takeovers >= 5, "the lease changed hands only {takeovers} times");
    for id in REPLICAS {
        let acted = entries.iter().filter(|e| replica(e) == Some(id) && is_action(e)).count();
        let evicted = entries.iter().filter(|e| replica(e) == Some(id) && e.request.subresource == "eviction").count();
        assert!(acted > 0 && evicted > 0, "{id} never acted ({acted} writes, {evicted} evictions)");
    }
    assert!(entries.iter().any(|e| e.request.resource == "leases" && e.code == 500), "no 500 was injected");
    // Both replicas authenticate as the manifest's controller service account: only their
    // User-Agent tells them apart.
    let Ok(Identity::ServiceAccount { namespace, name, .. }) =
        Manifest::operator().and_then(|m| m.controller_identity())
    else {
        panic!("the manifest names no controller service account")
    };
    let users: BTreeSet<&str> =
        entries.iter().filter(|e| replica(e).is_some()).map(|e| e.request.user.as_str()).collect();
    assert_eq!(users, BTreeSet::from([format!("system:serviceaccount:{namespace}:{name}").as_str()]));
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    first.stop(Duration::from_secs(15)).await.unwrap();
    second.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}
