//! The custom resources of the operator as the dev API server admits them: the seed READMEs' examples and
//! broken variants of them, checked against the schemas the Rust types generate.

use dev::apiserver::schema;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;
use shared::crd::{self, AutoscalingStrategy, NodeVersion, PendingNode, ScalingGroup};
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
