use std::collections::BTreeMap;

use super::*;

const ROOTS: &[&str] = DEFAULT_INSTALL_ROOTS;

fn sha(content: &[u8]) -> String {
    Sha256::of(content).to_string()
}

fn component(url: &str, hash: &str, path: &str, extract: bool) -> serde_json::Value {
    serde_json::json!({"url": url, "hash": hash, "installPath": path, "extract": extract})
}

/// A ConfigMap holding `components` at `version`, named after its content and immutable.
fn config_map(components: serde_json::Value, version: &str) -> ConfigMap {
    let hashes: Vec<String> = components
        .as_array()
        .map(|list| {
            list.iter()
                .map(|c| c.get("hash").or(c.get("Hash")).and_then(|h| h.as_str()).unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default();
    let name = config_map_name(&components_hash(hashes.iter().map(String::as_str)));
    ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name), namespace: Some(NAMESPACE.into()), ..Default::default() },
        immutable: Some(true),
        data: Some(BTreeMap::from([
            (COMPONENTS_KEY.to_owned(), components.to_string()),
            (CLUSTER_VERSION_KEY.to_owned(), version.to_owned()),
        ])),
        ..Default::default()
    }
}

fn patch() -> (String, String) {
    let content = b"apiVersion: v1\nkind: Pod\nspec: {}\n";
    let url = format!("data:application/yaml;base64,{}", base64::engine::general_purpose::STANDARD.encode(content));
    (url, sha(content))
}

fn good() -> serde_json::Value {
    let (patch_url, patch_hash) = patch();
    serde_json::json!([
        component(
            "https://dl.k8s.io/v1.34.1/bin/linux/amd64/kubeadm",
            &sha(b"kubeadm"),
            "/usr/local/bin/kubeadm",
            false
        ),
        component(
            "https://dl.k8s.io/v1.34.1/bin/linux/amd64/kubelet",
            &sha(b"kubelet"),
            "/usr/local/bin/kubelet",
            false
        ),
        component("https://github.com/containernetworking/plugins/cni.tgz", &sha(b"cni"), "/opt/cni/bin", true),
        component(&patch_url, &patch_hash, "/etc/kubernetes/patches/kube-apiserver+json.yaml", false),
    ])
}

fn v(s: &str) -> KubeVersion {
    s.parse().unwrap()
}

#[test]
fn the_hash_is_constellations_over_the_component_hashes_as_written() {
    // sha256 of the concatenation "sha256:aa…" + "sha256:bb…", computed independently with sha256sum.
    let a = format!("sha256:{}", "a".repeat(64));
    let b = format!("sha256:{}", "b".repeat(64));
    let hash = components_hash([a.as_str(), b.as_str()]);
    assert_eq!(hash, Sha256::of(format!("{a}{b}").as_bytes()));
    assert_eq!(
        Sha256::of(b"abc").to_string(),
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        config_map_name(&Sha256::of(b"abc")),
        "k8s-components-sha256-ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    let mut hasher = Sha256::hasher();
    hasher.update(b"a");
    hasher.update(b"bc");
    assert_eq!(hasher.finish(), Sha256::of(b"abc"));
}

#[test]
fn a_well_formed_config_map_is_accepted_with_its_inline_content() {
    let release = Release::from_config_map(&config_map(good(), "v1.34.1"), Some(&v("1.34.1")), ROOTS).unwrap();
    assert_eq!(release.cluster_version, v("v1.34.1"));
    assert_eq!(release.components.len(), 4);
    assert_eq!(release.name, config_map_name(&release.hash));
    assert_eq!(
        release.components[0].source,
        Source::Download("https://dl.k8s.io/v1.34.1/bin/linux/amd64/kubeadm".into())
    );
    assert_eq!(release.components[3].source, Source::Inline(b"apiVersion: v1\nkind: Pod\nspec: {}\n".to_vec()));
    assert!(release.components[2].extract);
    // Without a version in the spec, the ConfigMap's is taken.
    assert!(Release::from_config_map(&config_map(good(), "v1.34.1"), None, ROOTS).is_ok());
}

#[test]
fn constellations_older_field_names_are_read() {
    let list = serde_json::json!([
        {"URL": "https://dl.k8s.io/kubeadm", "Hash": sha(b"kubeadm"), "InstallPath": "/run/state/bin/kubeadm", "Extract": false},
        {"url": "https://dl.k8s.io/kubelet", "hash": sha(b"kubelet"), "install_path": "/run/state/bin/kubelet"},
    ]);
    let release = Release::from_config_map(&config_map(list, "v1.34.1"), None, ROOTS).unwrap();
    assert_eq!(release.components[1].install_path, "/run/state/bin/kubelet");
}

/// Every malformed case is refused with the field at fault named.
#[test]
fn malformed_config_maps_are_refused_naming_the_field() {
    let check = |cm: ConfigMap, spec: Option<&str>, expect: &str| {
        let spec = spec.map(v);
        let error = Release::from_config_map(&cm, spec.as_ref(), ROOTS).unwrap_err().to_string();
        assert!(error.contains(expect), "expected {expect:?} in {error:?}");
    };
    let with = |index: usize, field: &str, value: serde_json::Value| {
        let mut list = good();
        list[index][field] = value;
        config_map(list, "v1.34.1")
    };
    let mut mutable = config_map(good(), "v1.34.1");
    mutable.immutable = None;
    check(mutable, None, "not immutable");
    let mut elsewhere = config_map(good(), "v1.34.1");
    elsewhere.metadata.namespace = Some("default".into());
    check(elsewhere, None, "namespace default");
    let mut no_data = config_map(good(), "v1.34.1");
    no_data.data = None;
    check(no_data, None, "data.components is missing");
    let mut no_version = config_map(good(), "v1.34.1");
    no_version.data.as_mut().unwrap().remove(CLUSTER_VERSION_KEY);
    check(no_version, None, "data.cluster-version is missing");
    let mut not_json = config_map(good(), "v1.34.1");
    not_json.data.as_mut().unwrap().insert(COMPONENTS_KEY.into(), "[{".into());
    check(not_json, None, "is not a JSON list");
    check(config_map(serde_json::json!([]), "v1.34.1"), None, "empty list");
    check(config_map(serde_json::json!({"url": "x"}), "v1.34.1"), None, "is not a JSON list");
    check(with(1, "instalPath", "/usr/local/bin/x".into()), None, "unknown field");
    check(with(1, "hash", "".into()), None, "components[1].hash is missing");
    check(with(1, "hash", serde_json::Value::Null), None, "is not a JSON list");
    check(with(0, "hash", format!("sha256sum:{}", "a".repeat(64)).into()), None, "components[0].hash");
    check(with(0, "hash", format!("sha256:{}", "A".repeat(64)).into()), None, "64 lowercase hex");
    check(with(0, "hash", format!("sha256:{}", "a".repeat(63)).into()), None, "64 lowercase hex");
    check(with(0, "url", "file:///etc/passwd".into()), None, "the scheme file: is not");
    check(with(0, "url", "ftp://example.com/kubeadm".into()), None, "the scheme ftp: is not");
    check(with(0, "url", "kubeadm".into()), None, "no scheme");
    check(with(0, "url", "https:///kubeadm".into()), None, "no host");
    check(with(0, "url", "https://dl.k8s.io/kube adm".into()), None, "whitespace");
    check(with(3, "url", "data:,not the patch".into()), None, "content has sha256:");
    check(with(3, "url", "data:;base64,!!!".into()), None, "base64 is invalid");
    check(with(3, "url", "data:no-comma".into()), None, "no comma");
    check(with(0, "installPath", "usr/local/bin/kubeadm".into()), None, "not an absolute path");
    check(with(0, "installPath", "/usr/local/bin/../../etc/shadow".into()), None, ".. segment");
    check(with(0, "installPath", "/usr/local/bin//kubeadm".into()), None, "empty");
    check(with(0, "installPath", "/usr/local/bin/kubeadm/".into()), None, "ends with /");
    check(with(0, "installPath", "/etc/shadow".into()), None, "not under an allowed directory");
    check(with(0, "installPath", "/usr/local/binx/kubeadm".into()), None, "not under an allowed directory");
    check(with(0, "installPath", "/usr/local/bin/kube\nadm".into()), None, "control characters");
    check(with(1, "installPath", "/usr/local/bin/kubeadm".into()), None, "also the path of component 0");
    check(config_map(good(), "1.34"), None, "data.cluster-version");
    check(config_map(good(), "v1.34.1"), Some("v1.34.2"), "spec.kubernetesClusterVersion is v1.34.2");
    let mut renamed = config_map(good(), "v1.34.1");
    renamed.metadata.name = Some(format!("k8s-components-sha256-{}", "0".repeat(64)));
    check(renamed, None, "does not match its content");
    // A name written as the Constellation design document did (version in the name) is refused too.
    let mut design = config_map(good(), "v1.34.1");
    design.metadata.name = Some("k8s-components-1.34.1".into());
    check(design, None, "does not match its content");
}

#[test]
fn data_urls_decode_base64_and_percent_encoding() {
    assert_eq!(decode_data_url("data:,a%20b").unwrap(), b"a b");
    assert_eq!(decode_data_url("data:text/plain;base64,aGVs bG8=").unwrap(), b"hello");
    assert_eq!(decode_data_url("DATA:;BASE64,aGVsbG8=").unwrap(), b"hello");
    assert!(decode_data_url("https://x").is_err());
    assert!(decode_data_url("dat").is_err());
}

#[test]
fn install_roots_are_matched_on_whole_segments() {
    assert!(check_install_path("/opt/cni/bin", ROOTS).is_ok());
    assert!(check_install_path("/opt/cni/bin/bridge", ROOTS).is_ok());
    assert!(check_install_path("/opt/cni/binaries", ROOTS).is_err());
    assert!(check_install_path("/", ROOTS).is_err());
    assert!(check_install_path("/srv/x", &["/srv"]).is_ok());
}

#[test]
fn arbitrary_input_never_panics() {
    for input in
        ["", "data:", "data:,", "data:;base64,", "https:", "https://", ":", "sha256:", "\u{0}", "é", "data:é,é"]
    {
        let _ = decode_data_url(input);
        let _ = check_install_path(input, ROOTS);
        let _ = input.parse::<Sha256>();
        let list = serde_json::json!([component(input, input, input, false)]);
        let _ = Release::from_config_map(&config_map(list, input), None, ROOTS);
    }
}
