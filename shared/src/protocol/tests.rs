use super::*;
use proptest::prelude::*;

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn apply(current: &mut BTreeMap<String, String>, rendered: Vec<(&'static str, Option<String>)>) {
    for (key, value) in rendered {
        match value {
            Some(v) => current.insert(key.to_owned(), v),
            None => current.remove(key),
        };
    }
}

fn since() -> Timestamp {
    "2026-11-21T10:00:00Z".parse().unwrap()
}

#[test]
fn a_node_without_annotations_has_no_intent_and_an_empty_report() {
    let empty = BTreeMap::new();
    assert_eq!(ControllerAnnotations::parse(&empty).unwrap(), ControllerAnnotations::default());
    assert_eq!(AgentReport::parse(&empty).unwrap(), AgentReport::default());
}

#[test]
fn a_reboot_intent_round_trips() {
    let ours = ControllerAnnotations {
        intent: Some(Intent {
            step: Step::Reboot,
            target: "projects/constellation-images/global/images/v2-3-0".into(),
            token: Token::from_u64(123_456_789),
            since: since(),
            boot_id_before: Some(BootId::parse("k", "0f6a1c1e-7d28-4bd8-9a1b-5e0f8c7d6e5a").unwrap()),
            kubeadm: None,
            message: None,
        }),
        cordoned_by_us: true,
    };
    let mut current = annotations(&[("unrelated", "kept")]);
    apply(&mut current, ours.render());
    assert_eq!(current[keys::INTENT], "reboot");
    assert_eq!(current[keys::INTENT_SINCE], "2026-11-21T10:00:00.000Z");
    assert_eq!(current["unrelated"], "kept");
    assert_eq!(ControllerAnnotations::parse(&current).unwrap(), ours);
}

#[test]
fn removing_the_intent_removes_every_controller_key() {
    let mut current = annotations(&[
        (keys::INTENT, "failed"),
        (keys::INTENT_TARGET, "v2"),
        (keys::INTENT_TOKEN, "abc"),
        (keys::INTENT_SINCE, "2026-11-21T10:00:00Z"),
        (keys::INTENT_MESSAGE, "drain timed out"),
        (keys::CORDONED_BY, keys::CORDONED_BY_VALUE),
        (keys::STATE, "idle"),
    ]);
    apply(&mut current, ControllerAnnotations::default().render());
    assert_eq!(current, annotations(&[(keys::STATE, "idle")]));
}

#[test]
fn an_agent_report_round_trips() {
    let report = AgentReport {
        state: Some(AgentState::Error),
        token: Some(Token::parse("k", "z9").unwrap()),
        message: Some("sha256 mismatch for https://example.com/os.img".into()),
        boot_id: Some(BootId::parse("k", "b00t").unwrap()),
        os_image: Some("Bottlerocket OS 1.20.3 (aws-k8s-1.29)".into()),
        components_hash: Some(ComponentsHash::parse("k", &format!("sha256:{}", "ab".repeat(32))).unwrap()),
    };
    let mut current = BTreeMap::new();
    apply(&mut current, report.render());
    assert_eq!(AgentReport::parse(&current).unwrap(), report);
}

#[test]
fn unknown_values_are_typed_errors_naming_the_key() {
    let err = ControllerAnnotations::parse(&annotations(&[(keys::INTENT, "explode")])).unwrap_err();
    assert!(matches!(err, ProtocolError::UnknownValue { key: keys::INTENT, .. }), "{err}");
    assert!(err.to_string().contains("update.edgeless.systems/intent"), "{err}");
    let err = AgentReport::parse(&annotations(&[(keys::STATE, "Done")])).unwrap_err();
    assert!(matches!(err, ProtocolError::UnknownValue { key: keys::STATE, .. }), "{err}");
    let err = ControllerAnnotations::parse(&annotations(&[(keys::CORDONED_BY, "someone-else")])).unwrap_err();
    assert!(matches!(err, ProtocolError::UnknownValue { key: keys::CORDONED_BY, .. }), "{err}");
}

#[test]
fn malformed_and_missing_values_are_typed_errors() {
    let base = [
        (keys::INTENT, "stage"),
        (keys::INTENT_TARGET, "v2"),
        (keys::INTENT_TOKEN, "abc"),
        (keys::INTENT_SINCE, "2026-11-21T10:00:00Z"),
    ];
    assert!(ControllerAnnotations::parse(&annotations(&base)).is_ok());
    let cases: &[(&str, &str, &str)] = &[
        (keys::INTENT_TOKEN, "ABC", "a-z"),
        (keys::INTENT_TOKEN, "", "1 to 32"),
        (keys::INTENT_TOKEN, &"a".repeat(33), "1 to 32"),
        (keys::INTENT_SINCE, "yesterday", "RFC 3339"),
        (keys::INTENT_TARGET, "", "empty"),
        (keys::INTENT_TARGET, " v2", "white space"),
        (keys::INTENT_TARGET, "v2\n", "control"),
        (keys::BOOT_ID_BEFORE, "not a boot id!", "boot ID"),
    ];
    for (key, value, reason) in cases {
        let mut a = annotations(&base);
        a.insert(key.to_string(), value.to_string());
        let err = ControllerAnnotations::parse(&a).unwrap_err();
        match &err {
            ProtocolError::Malformed { key: k, reason: r, .. } => {
                assert_eq!(k, key);
                assert!(r.contains(reason), "{err}");
            }
            other => panic!("{key}={value:?}: expected Malformed, got {other}"),
        }
    }
    for missing in [keys::INTENT_TARGET, keys::INTENT_TOKEN, keys::INTENT_SINCE] {
        let mut a = annotations(&base);
        a.remove(missing);
        assert_eq!(
            ControllerAnnotations::parse(&a).unwrap_err(),
            ProtocolError::Missing { key: missing, with: keys::INTENT }
        );
    }
    let mut reboot = annotations(&base);
    reboot.insert(keys::INTENT.into(), "reboot".into());
    assert!(matches!(
        ControllerAnnotations::parse(&reboot).unwrap_err(),
        ProtocolError::Missing { key: keys::BOOT_ID_BEFORE, .. }
    ));
    let busy_without_token = annotations(&[(keys::STATE, "busy")]);
    assert!(matches!(
        AgentReport::parse(&busy_without_token).unwrap_err(),
        ProtocolError::Missing { key: keys::STATE_TOKEN, .. }
    ));
    let bad_hash = annotations(&[(keys::COMPONENTS_HASH, "md5:abc")]);
    assert!(matches!(AgentReport::parse(&bad_hash).unwrap_err(), ProtocolError::Malformed { .. }));
}

#[test]
fn an_intent_of_ours_with_an_unreadable_target_is_told_apart_from_garbage() {
    let ours = annotations(&[
        (keys::INTENT, "stage"),
        (keys::INTENT_TARGET, "v2 "),
        (keys::INTENT_TOKEN, "abc"),
        (keys::INTENT_SINCE, "2026-11-21T10:00:00.250Z"),
        (keys::CORDONED_BY, keys::CORDONED_BY_VALUE),
    ]);
    let unreadable = ControllerAnnotations::read(&ours).unwrap_err();
    assert!(matches!(unreadable.error, ProtocolError::Malformed { key: keys::INTENT_TARGET, .. }));
    assert!(unreadable.intent_present);
    assert_eq!(
        unreadable.ours,
        Some(OursUnreadable {
            step: Step::Stage,
            since: "2026-11-21T10:00:00.250Z".parse().unwrap(),
            cordoned_by_us: true
        })
    );
    // Another defect besides the target: not in the form the controller writes.
    let mut two_defects = ours.clone();
    two_defects.insert(keys::INTENT_TOKEN.into(), "ABC".into());
    let unreadable = ControllerAnnotations::read(&two_defects).unwrap_err();
    assert_eq!((unreadable.intent_present, unreadable.ours), (true, None));
    let garbage = ControllerAnnotations::read(&annotations(&[(keys::INTENT, "explode")])).unwrap_err();
    assert_eq!((garbage.intent_present, garbage.ours), (true, None));
    let foreign_cordon = ControllerAnnotations::read(&annotations(&[(keys::CORDONED_BY, "x")])).unwrap_err();
    assert_eq!((foreign_cordon.intent_present, foreign_cordon.ours), (false, None));
    assert_eq!(ControllerAnnotations::read(&BTreeMap::new()), Ok(ControllerAnnotations::default()));
}

#[test]
fn targets_are_counted_in_characters_as_the_api_server_counts_max_length() {
    assert!(parse_target("k", &"é".repeat(MAX_TARGET_LEN)).is_ok());
    assert!(parse_target("k", &"é".repeat(MAX_TARGET_LEN + 1)).is_err());
    for bad in ["v2 ", " v2", "v2\n", "\u{a0}v2", "v2\u{3000}", "v\u{85}2", "a\u{7f}b", ""] {
        assert!(parse_target("k", bad).is_err(), "{bad:?}");
    }
    for good in ["v2", "a b", "Bottlerocket OS 1.20.3 (aws-k8s-1.29)", "é"] {
        assert!(parse_target("k", good).is_ok(), "{good:?}");
    }
}

#[test]
fn cut_keeps_whole_characters() {
    assert_eq!(cut("héllo", 2), "h");
    assert_eq!(cut("héllo", 3), "hé");
    assert_eq!(cut("héllo", 100), "héllo");
}

#[test]
fn a_report_about_another_token_is_stale() {
    let t1 = Token::parse("k", "t1").unwrap();
    let t2 = Token::parse("k", "t2").unwrap();
    let report = AgentReport { state: Some(AgentState::Done), token: Some(t1.clone()), ..Default::default() };
    assert_eq!(report.finished(&t1), Some(AgentState::Done));
    assert_eq!(report.finished(&t2), None);
    let busy = AgentReport { state: Some(AgentState::Busy), token: Some(t2.clone()), ..Default::default() };
    assert_eq!(busy.finished(&t2), None);
}

#[test]
fn long_messages_are_cut_at_a_character_boundary() {
    let report = AgentReport { message: Some("é".repeat(MAX_MESSAGE_LEN)), ..Default::default() };
    let rendered = report.render();
    let message = rendered.iter().find(|(k, _)| *k == keys::STATE_MESSAGE).unwrap().1.clone().unwrap();
    assert!(message.len() <= MAX_MESSAGE_LEN && message.chars().all(|c| c == 'é'));
}

#[test]
fn step_and_state_strings_are_distinct_and_parse_back() {
    for step in Step::ALL {
        assert_eq!(step.as_str().parse::<Step>().unwrap(), step);
    }
    for state in AgentState::ALL {
        assert_eq!(state.as_str().parse::<AgentState>().unwrap(), state);
    }
}

#[test]
fn the_managed_label_must_be_exactly_true() {
    assert!(is_managed(Some(&annotations(&[(keys::MANAGED_LABEL, "true")]))));
    assert!(!is_managed(Some(&annotations(&[(keys::MANAGED_LABEL, "True")]))));
    assert!(!is_managed(None));
}

fn arb_token() -> impl Strategy<Value = Token> {
    "[a-z0-9]{1,32}".prop_map(|s| Token::parse("k", &s).unwrap())
}

fn arb_target() -> impl Strategy<Value = String> {
    "[A-Za-z0-9][A-Za-z0-9 ./:_@-]{0,80}[A-Za-z0-9]"
}

fn arb_intent() -> impl Strategy<Value = Intent> {
    (
        proptest::sample::select(Step::ALL.to_vec()),
        arb_target(),
        arb_token(),
        0i64..4_000_000_000_000,
        proptest::option::of("[a-f0-9-]{1,64}"),
        proptest::option::of("\\PC{0,200}"),
        ("[a-z0-9]([a-z0-9.-]{0,60}[a-z0-9])?", any::<bool>()),
    )
        .prop_map(|(step, target, token, secs, boot, message, (components, apply))| {
            let boot_id_before = match (step, boot) {
                (Step::Reboot, None) => Some(BootId::parse("k", "b").unwrap()),
                (_, b) => b.map(|b| BootId::parse("k", &b).unwrap()),
            };
            let role = if apply { KubeadmRole::Apply } else { KubeadmRole::Node };
            let kubeadm = match step {
                Step::KubeadmUpgrade => Some(KubeadmIntent { components, role: Some(role) }),
                Step::Fetch => Some(KubeadmIntent { components, role: None }),
                _ => None,
            };
            let since = Timestamp::from_millisecond(secs).unwrap();
            Intent { step, target, token, since, boot_id_before, kubeadm, message }
        })
}

proptest! {
    #[test]
    fn controller_annotations_round_trip(intent in proptest::option::of(arb_intent()), cordoned in any::<bool>()) {
        let ours = ControllerAnnotations { intent, cordoned_by_us: cordoned };
        let mut current = BTreeMap::new();
        apply(&mut current, ours.render());
        prop_assert_eq!(ControllerAnnotations::parse(&current).unwrap(), ours);
    }

    #[test]
    fn agent_reports_round_trip(
        state in proptest::option::of(proptest::sample::select(AgentState::ALL.to_vec())),
        token in arb_token(),
        message in proptest::option::of("\\PC{0,200}"),
        os_image in proptest::option::of(arb_target()),
        hash in proptest::option::of("[0-9a-f]{64}"),
    ) {
        let report = AgentReport {
            state,
            token: Some(token),
            message,
            boot_id: Some(BootId::parse("k", "abc-123").unwrap()),
            os_image,
            components_hash: hash.map(|h| ComponentsHash::parse("k", &format!("sha256:{h}")).unwrap()),
        };
        let mut current = BTreeMap::new();
        apply(&mut current, report.render());
        prop_assert_eq!(AgentReport::parse(&current).unwrap(), report);
    }

    #[test]
    fn parsing_arbitrary_annotations_never_panics(
        pairs in proptest::collection::vec(
            (proptest::sample::select([keys::CONTROLLER_KEYS, keys::AGENT_KEYS].concat()), "\\PC{0,40}|[a-z0-9-]{0,10}"),
            0..12,
        )
    ) {
        let a: BTreeMap<String, String> = pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        let _ = ControllerAnnotations::parse(&a);
        let _ = AgentReport::parse(&a);
    }

    /// The CRD pattern of `spec.image` (with its `maxLength`) and the protocol accept the same
    /// strings, so the API server refuses every image the agent could not read. The strings mix
    /// the characters where the two could differ: Unicode white space, controls, separators.
    #[test]
    fn the_target_pattern_accepts_exactly_what_the_protocol_parses(
        chars in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::sample::select(vec![
                    ' ', '\t', '\n', '\r', '\u{b}', '\u{c}', '\u{85}', '\u{a0}', '\u{1680}', '\u{2000}',
                    '\u{200a}', '\u{200b}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}',
                    '\u{feff}', '\u{0}', '\u{1f}', '\u{7f}', '\u{9f}', '\u{ad}',
                ]),
                proptest::char::any(),
                proptest::char::range('a', 'z'),
            ],
            0..6,
        )
    ) {
        let value: String = chars.into_iter().collect();
        let pattern = regex::Regex::new(TARGET_PATTERN).unwrap();
        let crd_accepts = pattern.is_match(&value) && value.chars().count() <= MAX_TARGET_LEN;
        prop_assert_eq!(crd_accepts, parse_target("k", &value).is_ok(), "{:?}", value);
    }

    #[test]
    fn a_render_diffed_against_itself_is_an_empty_patch(intent in proptest::option::of(arb_intent())) {
        let ours = ControllerAnnotations { intent, cordoned_by_us: false };
        let mut current = BTreeMap::new();
        apply(&mut current, ours.render());
        prop_assert!(patch::NodePatch::annotations(Some(&current), ours.render()).is_empty());
    }
}

#[test]
fn a_kubeadm_intent_names_its_components_and_role_and_round_trips() {
    let ours = ControllerAnnotations {
        intent: Some(Intent {
            step: Step::KubeadmUpgrade,
            target: "v1.34.1".into(),
            token: Token::from_u64(7),
            since: since(),
            boot_id_before: None,
            kubeadm: Some(KubeadmIntent {
                components: "k8s-components-sha256-ab12".into(),
                role: Some(KubeadmRole::Apply),
            }),
            message: None,
        }),
        cordoned_by_us: false,
    };
    let mut current = BTreeMap::new();
    apply(&mut current, ours.render());
    assert_eq!(current[keys::INTENT_COMPONENTS], "k8s-components-sha256-ab12");
    assert_eq!(current[keys::INTENT_KUBEADM], "apply");
    assert_eq!(ControllerAnnotations::parse(&current).unwrap(), ours);
    // Removing the intent removes the kubeadm keys too.
    apply(&mut current, ControllerAnnotations::default().render());
    assert!(current.is_empty(), "{current:?}");
}

#[test]
fn a_kubeadm_intent_without_its_components_or_role_is_an_error_naming_the_key() {
    let base = [
        (keys::INTENT, "kubeadm-upgrade"),
        (keys::INTENT_TARGET, "v1.34.1"),
        (keys::INTENT_TOKEN, "t1"),
        (keys::INTENT_SINCE, "2026-11-21T10:00:00.000Z"),
    ];
    let without = |extra: &[(&'static str, &'static str)]| {
        let mut pairs = base.to_vec();
        pairs.extend_from_slice(extra);
        ControllerAnnotations::parse(&annotations(&pairs)).unwrap_err()
    };
    assert_eq!(
        without(&[(keys::INTENT_KUBEADM, "node")]),
        ProtocolError::Missing { key: keys::INTENT_COMPONENTS, with: "intent=kubeadm-upgrade" }
    );
    assert_eq!(
        without(&[(keys::INTENT_COMPONENTS, "k8s-components-sha256-ab")]),
        ProtocolError::Missing { key: keys::INTENT_KUBEADM, with: "intent=kubeadm-upgrade" }
    );
    let bad_role = without(&[(keys::INTENT_COMPONENTS, "cm"), (keys::INTENT_KUBEADM, "first")]);
    assert!(matches!(bad_role, ProtocolError::UnknownValue { key: keys::INTENT_KUBEADM, .. }), "{bad_role}");
    for name in ["", "Upper", "-lead", "a/b", "trail-"] {
        let error = without(&[(keys::INTENT_COMPONENTS, name), (keys::INTENT_KUBEADM, "node")]);
        assert!(matches!(error, ProtocolError::Malformed { key: keys::INTENT_COMPONENTS, .. }), "{name:?}: {error}");
    }
}

/// A fetch ahead names the components it fetches and no role; without its components it is an error naming the key,
/// and a role written beside it is not read (nothing runs).
#[test]
fn a_fetch_intent_names_its_components_and_no_role() {
    let ours = ControllerAnnotations {
        intent: Some(Intent {
            step: Step::Fetch,
            target: "v1.34.1".into(),
            token: Token::from_u64(8),
            since: since(),
            boot_id_before: None,
            kubeadm: Some(KubeadmIntent { components: "k8s-components-sha256-cd34".into(), role: None }),
            message: None,
        }),
        cordoned_by_us: false,
    };
    let mut current = BTreeMap::new();
    apply(&mut current, ours.render());
    assert_eq!(current[keys::INTENT], "fetch");
    assert_eq!(current[keys::INTENT_COMPONENTS], "k8s-components-sha256-cd34");
    assert!(!current.contains_key(keys::INTENT_KUBEADM), "{current:?}");
    assert_eq!(ControllerAnnotations::parse(&current).unwrap(), ours);
    current.insert(keys::INTENT_KUBEADM.into(), "apply".into());
    assert_eq!(ControllerAnnotations::parse(&current).unwrap(), ours);
    current.remove(keys::INTENT_COMPONENTS);
    assert_eq!(
        ControllerAnnotations::parse(&current).unwrap_err(),
        ProtocolError::Missing { key: keys::INTENT_COMPONENTS, with: "intent=fetch" }
    );
}

/// Issue 27 item 5: one random token generator for every writer; its tokens are valid annotation values and do
/// not repeat, also across threads (each thread has its own generator, seeded by the operating system).
#[test]
fn fresh_tokens_are_valid_and_do_not_repeat() {
    let drawn: Vec<Token> = std::thread::scope(|scope| {
        let threads: Vec<_> =
            (0..4).map(|_| scope.spawn(|| (0..5_000).map(|_| Token::fresh()).collect::<Vec<_>>())).collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    for token in &drawn {
        assert_eq!(token.as_str().len(), Token::FRESH_LEN);
        assert_eq!(Token::parse(keys::INTENT_TOKEN, token.as_str()).as_ref(), Ok(token));
    }
    let distinct: std::collections::HashSet<&Token> = drawn.iter().collect();
    assert_eq!(distinct.len(), drawn.len());
}
