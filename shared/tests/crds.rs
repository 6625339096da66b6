//! The CRDs as committed, the seed READMEs' examples and broken variants of them, checked against
//! the schema the Rust types generate.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;
use shared::crd::{self, AutoscalingStrategy, NodeVersion, PendingNode, ScalingGroup};
use shared::schema;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn crd_for(kind: &str) -> CustomResourceDefinition {
    crd::all().into_iter().find(|c| c.spec.names.kind == kind).unwrap_or_else(|| panic!("no CRD of kind {kind}"))
}

fn schema_of(crd: &CustomResourceDefinition) -> Value {
    let version = crd.spec.versions.iter().find(|v| v.storage).expect("a storage version");
    serde_json::to_value(version.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("a schema"))
        .unwrap()
}

/// What the API server would say about `object`: its pruned form and the validation errors.
fn admit(object: &Value) -> (Value, Vec<String>) {
    let kind = object["kind"].as_str().expect("a kind");
    let crd = crd_for(kind);
    assert_eq!(object["apiVersion"], format!("{}/{}", crd::GROUP, crd::VERSION));
    let schema = schema_of(&crd);
    let mut pruned = object.clone();
    schema::prune_and_default(&schema, &mut pruned);
    let errors = schema::validate(&schema, &pruned).iter().map(ToString::to_string).collect();
    (pruned, errors)
}

/// Every path that holds a scalar in `v`, with its value.
fn leaves(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| leaves(v, format!("{path}.{k}"), out)),
        Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| leaves(v, format!("{path}[{i}]"), out)),
        scalar => out.push((path, scalar.clone())),
    }
}

/// Deserializes into the Rust type of the object's kind and serializes back.
fn typed_round_trip(object: &Value) -> Result<Value, serde_json::Error> {
    fn via<K: serde::de::DeserializeOwned + serde::Serialize>(v: &Value) -> Result<Value, serde_json::Error> {
        serde_json::to_value(serde_json::from_value::<K>(v.clone())?)
    }
    match object["kind"].as_str() {
        Some("NodeVersion") => via::<NodeVersion>(object),
        Some("ScalingGroup") => via::<ScalingGroup>(object),
        Some("PendingNode") => via::<PendingNode>(object),
        Some("AutoscalingStrategy") => via::<AutoscalingStrategy>(object),
        other => panic!("unexpected kind {other:?}"),
    }
}

#[test]
fn committed_crds_match_the_rust_types() {
    let dir = root().join("../deploy/crds");
    let generated: Vec<(String, String)> =
        crd::all().iter().map(|c| (crd::file_name(c), crd::to_yaml(c).unwrap())).collect();
    let committed: Vec<String> =
        yaml_files(&dir).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let expected: Vec<String> = generated.iter().map(|(name, _)| name.clone()).collect();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(committed, expected_sorted, "deploy/crds/ holds other files than the CRDs; run `make manifests`");
    for (name, yaml) in generated {
        let on_disk = std::fs::read_to_string(dir.join(&name)).unwrap();
        assert!(on_disk == yaml, "deploy/crds/{name} differs from what the Rust types generate; run `make manifests`");
    }
}

#[test]
fn the_install_bundle_is_the_crds_plus_the_operator_manifests() {
    let deploy = root().join("../deploy");
    let operator = std::fs::read_to_string(deploy.join("operator.yaml")).unwrap();
    let on_disk = std::fs::read_to_string(deploy.join("update-operator.yaml")).unwrap();
    assert!(
        on_disk == crd::bundle(&operator).unwrap(),
        "deploy/update-operator.yaml differs from deploy/crds + deploy/operator.yaml; run `make manifests`"
    );
    // Every document parses, and every CRD is in it.
    let kinds: Vec<String> = on_disk
        .split("\n---\n")
        .filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')))
        .map(|d| {
            let v: Value = yaml_serde::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"));
            v["kind"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(kinds.iter().filter(|k| *k == "CustomResourceDefinition").count(), crd::all().len());
    for kind in ["Namespace", "Deployment", "DaemonSet", "ClusterRole", "ValidatingAdmissionPolicy"] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} in the bundle");
    }
}

#[test]
fn every_seed_example_deserializes_and_validates_without_losing_a_field() {
    let files = yaml_files(&root().join("tests/fixtures/seed"));
    // 7 examples in each of the two README versions, plus the design's NodeVersion.
    assert_eq!(files.len(), 15, "seed fixtures missing: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let object: Value = yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let (pruned, errors) = admit(&object);
        assert!(errors.is_empty(), "{}: {errors:?}", file.display());
        let mut kept = Vec::new();
        leaves(&pruned, String::new(), &mut kept);
        let mut original = Vec::new();
        leaves(&object, String::new(), &mut original);
        for leaf in &original {
            assert!(kept.contains(leaf), "{}: the schema drops {} = {}", file.display(), leaf.0, leaf.1);
        }
        let typed = typed_round_trip(&object).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut round_tripped = Vec::new();
        leaves(&typed, String::new(), &mut round_tripped);
        for (path, value) in &original {
            // Times are re-rendered in UTC; everything else must come back as written.
            let back = round_tripped.iter().find(|(p, _)| p == path).map(|(_, v)| v);
            if path.ends_with(".deadline") {
                assert_eq!(back, Some(&Value::String("2022-07-04T08:33:18Z".into())), "{}", file.display());
            } else {
                assert_eq!(back, Some(value), "{}: {path} lost in the Rust type", file.display());
            }
        }
    }
}

#[test]
fn broken_variants_are_rejected_with_a_clear_message() {
    let files = yaml_files(&root().join("tests/fixtures/invalid"));
    assert!(files.len() >= 8, "invalid fixtures missing: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let expected = text
            .lines()
            .find_map(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: no `# expect:` line", file.display()));
        let object: Value = yaml_serde::from_str(&text).unwrap();
        let (_, errors) = admit(&object);
        assert!(
            errors.iter().any(|e| e.starts_with(expected)),
            "{}: expected an error starting with {expected:?}, got {errors:?}",
            file.display()
        );
    }
}
