use super::*;

fn member(id: u64, name: &str, peer: &str, learner: bool) -> Member {
    Member {
        id,
        name: name.to_owned(),
        peer_urls: vec![peer.to_owned()],
        client_urls: vec![peer.replace(":2380", ":2379")],
        is_learner: learner,
    }
}

fn three() -> Vec<Member> {
    vec![
        member(1, "cp-0", "https://10.0.0.1:2380", false),
        member(2, "cp-1", "https://10.0.0.2:2380", false),
        member(3, "cp-2", "https://[fd00::3]:2380", false),
    ]
}

#[test]
fn the_member_list_of_the_gateway_parses_with_string_ids() {
    let body = r#"{"header":{"cluster_id":"14398420247917935680","member_id":"1654818993570247861","raft_term":"2"},
        "members":[{"ID":"1654818993570247861","name":"m1","peerURLs":["https://127.0.0.1:23801"],
        "clientURLs":["https://127.0.0.1:23791"]},{"ID":17,"peerURLs":["https://127.0.0.1:23802"],"isLearner":true}]}"#;
    let list: MemberList = serde_json::from_str(body).unwrap();
    assert_eq!(list.members[0].id, 1654818993570247861);
    assert_eq!(list.members[0].client_urls, vec!["https://127.0.0.1:23791"]);
    assert_eq!((list.members[1].id, list.members[1].name.as_str(), list.members[1].is_learner), (17, "", true));
    assert!(serde_json::from_str::<MemberList>(r#"{"members":[{"ID":"x"}]}"#).is_err());
}

#[test]
fn a_nodes_member_is_found_by_name_then_by_peer_address() {
    let members = three();
    assert_eq!(find_member(&members, "cp-1", &[]).unwrap().map(|m| m.id), Some(2));
    assert_eq!(find_member(&members, "other", &["10.0.0.2".into()]).unwrap().map(|m| m.id), Some(2));
    assert_eq!(find_member(&members, "other", &["fd00::3".into()]).unwrap().map(|m| m.id), Some(3));
    assert_eq!(find_member(&members, "other", &["10.0.0.9".into()]).unwrap(), None);
    let mut twins = three();
    twins[1].peer_urls = vec!["https://10.0.0.1:2381".into()];
    assert!(matches!(find_member(&twins, "other", &["10.0.0.1".into()]), Err(Error::Ambiguous { .. })));
    // The name wins over addresses.
    assert_eq!(find_member(&twins, "cp-1", &["10.0.0.1".into()]).unwrap().map(|m| m.id), Some(2));
}

#[test]
fn removal_keeps_a_quorum_of_healthy_voters_and_never_removes_the_last() {
    let members = three();
    let all: BTreeSet<u64> = [1, 2, 3].into();
    assert_eq!(check_removal(&members, &members[0], &all), Ok(()));
    // 2 remain, quorum 2: both must be healthy.
    let refusal = check_removal(&members, &members[0], &[1, 2].into()).unwrap_err();
    assert_eq!(refusal, Refusal::QuorumLoss { name: "cp-0".into(), healthy: 1, remaining: 2, quorum: 2 });
    // The target's own health does not matter: removing a dead member is what replacement needs.
    assert_eq!(check_removal(&members, &members[0], &[2, 3].into()), Ok(()));
    let one = vec![member(1, "cp-0", "https://10.0.0.1:2380", false)];
    assert_eq!(check_removal(&one, &one[0], &[1].into()), Err(Refusal::LastMember { name: "cp-0".into() }));
    // Learners neither vote nor count.
    let mut with_learner = one.clone();
    with_learner.push(member(9, "cp-new", "https://10.0.0.9:2380", true));
    assert!(matches!(check_removal(&with_learner, &with_learner[0], &[1, 9].into()), Err(Refusal::LastMember { .. })));
    assert_eq!(check_removal(&with_learner, &with_learner[1], &[1].into()), Ok(()));
    // Five members, two unhealthy: removing a healthy one leaves 2 of 4 healthy (quorum 3).
    let five: Vec<Member> =
        (1..=5).map(|i| member(i, &format!("m{i}"), &format!("https://10.0.0.{i}:2380"), false)).collect();
    assert!(check_removal(&five, &five[0], &[1, 2, 3].into()).is_err());
    assert_eq!(check_removal(&five, &five[4], &[1, 2, 3].into()), Ok(()));
}

#[test]
fn a_donors_member_goes_only_once_its_heirs_member_is_a_healthy_voter() {
    let mut members = three();
    let heir = NodeRef { name: "cp-new", addresses: &[] };
    let all: BTreeSet<u64> = [1, 2, 3, 4].into();
    let refused = |m: &[Member], h: &BTreeSet<u64>| check_heir(m, &m[0], "cp-0", heir, h).unwrap_err().to_string();
    assert!(refused(&members, &all).contains("no member of it"), "{}", refused(&members, &all));
    // Added but not started: no name yet, found by its peer address.
    members.push(Member {
        id: 4,
        name: String::new(),
        peer_urls: vec!["https://10.0.0.4:2380".into()],
        client_urls: vec![],
        is_learner: true,
    });
    let by_address = NodeRef { name: "cp-new", addresses: &["10.0.0.4".to_owned()] };
    let error = check_heir(&members, &members[0], "cp-0", by_address, &all).unwrap_err().to_string();
    assert!(error.contains("has not started"), "{error}");
    members[3].name = "cp-new".into();
    assert!(refused(&members, &all).contains("learner"));
    members[3].is_learner = false;
    assert!(refused(&members, &[1, 2, 3].into()).contains("not healthy"));
    assert_eq!(check_heir(&members, &members[0], "cp-0", heir, &all), Ok(()));
    // The heir's addresses must not lead to the donor's own member.
    let confused = NodeRef { name: "other", addresses: &["10.0.0.1".to_owned()] };
    assert!(check_heir(&members, &members[0], "cp-0", confused, &all).is_err());
}

#[test]
fn bad_configurations_are_errors_before_any_request() {
    let config = |endpoints: &[&str], tls: Option<TlsFiles>| EtcdConfig {
        endpoints: endpoints.iter().map(|s| (*s).to_owned()).collect(),
        tls,
        timeout: Duration::from_secs(5),
    };
    assert!(matches!(EtcdClient::new(&config(&[], None)), Err(Error::Config(_))));
    assert!(matches!(EtcdClient::new(&config(&["https://127.0.0.1:2379"], None)), Err(Error::Config(_))));
    assert!(matches!(EtcdClient::new(&config(&["127.0.0.1:2379"], None)), Err(Error::Config(_))));
    assert!(EtcdClient::new(&config(&["http://127.0.0.1:2379"], None)).is_ok());
    let missing = TlsFiles { ca: "/nonexistent/ca.crt".into(), cert: None, key: None };
    let error = EtcdClient::new(&config(&["https://127.0.0.1:2379"], Some(missing))).unwrap_err();
    assert!(error.to_string().contains("/nonexistent/ca.crt"), "{error}");
    let pki = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/etcd-pki");
    let half = TlsFiles { ca: pki.join("ca.crt"), cert: Some(pki.join("client.crt")), key: None };
    assert!(matches!(EtcdClient::new(&config(&["https://127.0.0.1:2379"], Some(half))), Err(Error::Config(_))));
    let not_a_key =
        TlsFiles { ca: pki.join("ca.crt"), cert: Some(pki.join("client.crt")), key: Some(pki.join("ca.crt")) };
    assert!(matches!(EtcdClient::new(&config(&["https://127.0.0.1:2379"], Some(not_a_key))), Err(Error::Config(_))));
    let good =
        TlsFiles { ca: pki.join("ca.crt"), cert: Some(pki.join("client.crt")), key: Some(pki.join("client.key")) };
    assert!(EtcdClient::new(&config(&["https://127.0.0.1:2379"], Some(good))).is_ok());
    assert_eq!(TlsFiles::kubeadm().ca, PathBuf::from("/etc/kubernetes/pki/etcd/ca.crt"));
}

#[test]
fn only_transport_and_server_errors_are_retryable() {
    assert!(Error::Unreachable("x".into()).is_retryable());
    assert!(Error::Api { operation: "o", status: 503, code: 14, message: String::new() }.is_retryable());
    assert!(!Error::Api { operation: "o", status: 400, code: 9, message: String::new() }.is_retryable());
    assert!(!Error::Refused(Refusal::LastMember { name: "m".into() }).is_retryable());
    assert!(!Error::Config("x".into()).is_retryable());
}
