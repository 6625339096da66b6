//! etcd member removal against a real etcd (Debian's `etcd-server`): clusters of members on loopback ports in a
//! temporary directory, with TLS as kubeadm sets it up (client certificates required).
//!
//! Without an `etcd` binary on PATH these tests are skipped with a message, except where a run requires them
//! (`UPDATE_OPERATOR_REQUIRE_ETCD=1`, which `.ci/run` sets, or `CI` set): there its absence fails them.

use crate::etcd_support;

use controller::etcd::{Error, EtcdClient, EtcdConfig, Member, NodeRef, Refusal, Removal, TlsFiles};
use etcd_support::{EtcdCluster, PATIENCE, etcd_available, free_ports, pki};
use std::time::Duration;

/// Polls `client.members()` until `check` holds; panics after [`PATIENCE`].
async fn members_until(client: &EtcdClient, what: &str, check: impl Fn(&[Member]) -> bool) -> Vec<Member> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Ok(members) = client.members().await
            && check(&members)
        {
            return members;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Removes the node's member as the controller does: requeued while the error is retryable. etcd itself refuses
/// removals (503 `unhealthy cluster`) until its members have been connected for 5 s (its strict reconfiguration
/// check), which a freshly started cluster has not.
async fn remove(client: &EtcdClient, node: &str) -> Result<Removal, Error> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match client.remove_node_member(NodeRef { name: node, addresses: &[] }, None).await {
            Err(error) if error.is_retryable() && tokio::time::Instant::now() < deadline => {
                eprintln!("removing the member of {node}: {error}; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            result => return result,
        }
    }
}

fn names(members: &[Member]) -> Vec<&str> {
    let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_nodes_member_is_removed_over_tls_and_the_others_stay_healthy() {
    if !etcd_available("a_control_plane_nodes_member_is_removed_over_tls_and_the_others_stay_healthy") {
        return;
    }
    let mut cluster = EtcdCluster::start(3, true).await;
    let client = cluster.client();
    assert_eq!(names(&client.members().await.unwrap()), vec!["m1", "m2", "m3"]);

    // Every member listens on 127.0.0.1: by address alone the node's member cannot be told.
    let ambiguous =
        client.remove_node_member(NodeRef { name: "some-node", addresses: &["127.0.0.1".to_owned()] }, None).await;
    assert!(matches!(ambiguous, Err(Error::Ambiguous { .. })), "{ambiguous:?}");

    let removal = remove(&client, "m2").await.unwrap();
    assert!(matches!(removal, Removal::Removed { ref name, .. } if name == "m2"), "{removal:?}");
    let members = members_until(&client, "two members remain", |m| m.len() == 2).await;
    assert_eq!(names(&members), vec!["m1", "m3"]);
    // Healthy once they agree on a leader (the removed member may have led).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    for member in &members {
        while !client.is_healthy(member).await {
            assert!(tokio::time::Instant::now() < deadline, "{} is not healthy after the removal", member.name);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Idempotent: the member is gone.
    // Gone only where the list proves it: no member of that name, none peering at the node's address.
    let m2 = NodeRef { name: "m2", addresses: &["10.9.9.2".to_owned()] };
    assert_eq!(client.remove_node_member(m2, None).await.unwrap(), Removal::AlreadyGone);
    // Without an address to look by, "no member of that name" proves nothing: an error, never "done".
    let unknown = client.remove_node_member(NodeRef { name: "m2", addresses: &[] }, None).await;
    assert!(matches!(unknown, Err(Error::MemberUnknown { .. })), "{unknown:?}");

    // A client without a client certificate is turned away by etcd's client-cert-auth.
    let mut anonymous = cluster.config();
    anonymous.tls = Some(TlsFiles { ca: pki("ca.crt"), cert: None, key: None });
    let refused = EtcdClient::new(&anonymous).unwrap().members().await;
    assert!(matches!(refused, Err(Error::Unreachable(_))), "{refused:?}");

    // With m3 down, removing m1 would leave no healthy voter of the one that remains: refused, nothing removed.
    cluster.kill("m3").await;
    let refusal = client.remove_node_member(NodeRef { name: "m1", addresses: &[] }, None).await;
    assert!(
        matches!(refusal, Err(Error::Refused(Refusal::QuorumLoss { healthy: 0, remaining: 1, quorum: 1, .. }))),
        "{refusal:?}"
    );
    assert!(!refusal.as_ref().unwrap_err().is_retryable());
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_member_is_never_removed_and_dead_endpoints_are_skipped() {
    if !etcd_available("the_last_member_is_never_removed_and_dead_endpoints_are_skipped") {
        return;
    }
    let cluster = EtcdCluster::start(1, false).await;
    let dead = format!("http://127.0.0.1:{}", free_ports(1)[0]);
    let mut config = cluster.config();
    config.endpoints.insert(0, dead.clone());
    let client = EtcdClient::new(&config).unwrap();
    assert_eq!(names(&client.members().await.unwrap()), vec!["m1"], "the dead endpoint is skipped");

    let refusal = client.remove_node_member(NodeRef { name: "m1", addresses: &[] }, None).await;
    assert!(matches!(refusal, Err(Error::Refused(Refusal::LastMember { .. }))), "{refusal:?}");
    assert_eq!(names(&client.members().await.unwrap()), vec!["m1"]);
    // A node without a member: nothing to do.
    assert_eq!(
        client
            .remove_node_member(NodeRef { name: "worker-0", addresses: &["10.9.9.9".to_owned()] }, None)
            .await
            .unwrap(),
        Removal::AlreadyGone
    );

    let nobody =
        EtcdClient::new(&EtcdConfig { endpoints: vec![dead], tls: None, timeout: Duration::from_secs(5) }).unwrap();
    let unreachable = nobody.members().await;
    assert!(matches!(unreachable, Err(ref e @ Error::Unreachable(_)) if e.is_retryable()), "{unreachable:?}");
}

/// Removes `donor`'s member for `heir` as the controller does: tried again while the heir has not joined or the
/// error is retryable.
async fn replace(client: &EtcdClient, donor: &str, heir: &str) -> Removal {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let result = client
            .remove_node_member(NodeRef { name: donor, addresses: &[] }, Some(NodeRef { name: heir, addresses: &[] }))
            .await;
        match result {
            Ok(removal) => return removal,
            Err(error) if tokio::time::Instant::now() < deadline => {
                assert!(
                    error.is_retryable() || matches!(error, Error::Refused(Refusal::HeirNotJoined { .. })),
                    "replacing {donor} by {heir}: {error}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(error) => panic!("replacing {donor} by {heir}: {error}"),
        }
    }
}

/// The whole control plane replaced, one member at a time, as kubeadm joins and the controller retires: each
/// donor's member stays until its heir's member is a healthy voter (never fewer healthy members than before), and
/// once every member the client was configured with is gone, it still reaches etcd through the member list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_every_member_keeps_quorum_and_follows_the_members_to_their_new_urls() {
    if !etcd_available("replacing_every_member_keeps_quorum_and_follows_the_members_to_their_new_urls") {
        return;
    }
    let mut cluster = EtcdCluster::start(3, true).await;
    let configured = cluster.config().endpoints;
    let client = cluster.client();
    for i in 1..=3 {
        let (donor, heir) = (format!("m{i}"), format!("h{i}"));
        let early = client
            .remove_node_member(NodeRef { name: &donor, addresses: &[] }, Some(NodeRef { name: &heir, addresses: &[] }))
            .await;
        assert!(matches!(early, Err(Error::Refused(Refusal::HeirNotJoined { .. }))), "{early:?}");
        assert_eq!(client.members().await.unwrap().len(), 3, "{donor}'s member stays while {heir} has not joined");
        cluster.add_member(&heir).await;
        let removal = replace(&client, &donor, &heir).await;
        assert!(matches!(removal, Removal::Removed { ref name, .. } if *name == donor), "{removal:?}");
        members_until(&client, &format!("{donor} gone, 3 members"), |m| {
            m.len() == 3 && m.iter().all(|m| m.name != donor)
        })
        .await;
    }
    let members = client.members().await.expect("etcd is reached through its members' new client URLs");
    assert_eq!(names(&members), vec!["h1", "h2", "h3"]);
    assert!(
        members.iter().flat_map(|m| &m.client_urls).all(|url| !configured.contains(url)),
        "every endpoint the client was configured with is gone"
    );
    let deadline = tokio::time::Instant::now() + PATIENCE;
    for member in &members {
        while !client.is_healthy(member).await {
            assert!(tokio::time::Instant::now() < deadline, "{} is not healthy", member.name);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    drop(cluster);
}
