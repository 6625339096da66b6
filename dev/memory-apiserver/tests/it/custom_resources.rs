//! The operator's CRDs and custom resources as the dev API server admits them: every CRD in `deploy/` passes
//! the CRD admission of a real API server (structural schemas and the rest), the int-or-string form that a
//! real server refused is refused, and the seed READMEs' examples and broken variants of them are checked
//! against the schemas the Rust types generate.

use crate::common;

use common::{raw, server, within};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use memory_apiserver::{crd_validation, schema};
use serde_json::Value;
use shared::crd::{self, AutoscalingStrategy, NodeVersion, PendingNode, ScalingGroup};
use std::path::{Path, PathBuf};

/// The dev crate's directory, whose `tests/fixtures` the cloud tests there read too.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
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

/// Every CRD document of `deploy/`: the files of `deploy/crds/` and those inside the install bundle.
fn deploy_crds() -> Vec<(String, Value)> {
    let deploy = root().join("../deploy");
    let mut documents: Vec<(String, String)> = yaml_files(&deploy.join("crds"))
        .into_iter()
        .map(|file| (file.display().to_string(), std::fs::read_to_string(&file).unwrap()))
        .collect();
    let bundle = std::fs::read_to_string(deploy.join("update-operator.yaml")).unwrap();
    documents.push(("deploy/update-operator.yaml".into(), bundle));
    let mut crds = Vec::new();
    for (file, text) in documents {
        for document in text.split("\n---\n") {
            let Ok(value) = yaml_serde::from_str::<Value>(document) else { continue };
            if value["kind"] == "CustomResourceDefinition" {
                crds.push((format!("{file}: {}", value["metadata"]["name"]), value));
            }
        }
    }
    crds
}

#[test]
fn every_crd_in_deploy_passes_the_crd_admission_of_a_real_api_server() {
    let crds = deploy_crds();
    assert_eq!(crds.len(), 2 * crd::all().len(), "{:?}", crds.iter().map(|(n, _)| n).collect::<Vec<_>>());
    for (name, crd) in &crds {
        let typed: CustomResourceDefinition = serde_json::from_value(crd.clone()).unwrap();
        let errors = crd_validation::validate(&serde_json::to_value(typed).unwrap(), None);
        assert!(errors.is_empty(), "{name}: {:?}", errors.iter().map(ToString::to_string).collect::<Vec<_>>());
        for version in crd["spec"]["versions"].as_array().unwrap() {
            let schema = &version["schema"]["openAPIV3Schema"];
            assert!(schema::structural::is_structural(schema), "{name}: not structural");
        }
    }
}

/// The NodeVersion CRD with `maxUnavailable` in the form that a real API server refused.
fn node_version_crd_with_typed_branches() -> Value {
    let mut crd = serde_json::to_value(crd_for("NodeVersion")).unwrap();
    let field = crd
        .pointer_mut(
            "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/rollout/properties/maxUnavailable",
        )
        .unwrap();
    field["anyOf"] =
        serde_json::json!([{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^(100|[1-9][0-9]?)%$"}]);
    crd
}

#[tokio::test]
async fn the_server_creates_every_deploy_crd_and_refuses_the_broken_int_or_string_form() {
    let server = server().await;
    let client = server.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let broken = raw(
        &client,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        Some("application/json"),
        node_version_crd_with_typed_branches(),
    )
    .await;
    assert_eq!(broken.status, 422, "{}", broken.text);
    let status = broken.json();
    let field = "spec.validation.openAPIV3Schema.properties[spec].properties[rollout].properties[maxUnavailable]";
    assert_eq!(
        status["message"],
        format!(
            "CustomResourceDefinition.apiextensions.k8s.io \"nodeversions.update.edgeless.systems\" is invalid: [{field}.anyOf[0].type: Forbidden: must be empty to be structural, {field}.anyOf[1].type: Forbidden: must be empty to be structural]"
        )
    );
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(
        status["details"]["causes"][0],
        serde_json::json!({"reason": "FieldValueForbidden", "message": "Forbidden: must be empty to be structural",
                           "field": format!("{field}.anyOf[0].type")})
    );

    // The bundle's CRDs are what `kubectl apply -f deploy/update-operator.yaml` sends.
    for (name, crd) in deploy_crds().into_iter().filter(|(n, _)| n.starts_with("deploy/update-operator.yaml")) {
        let typed: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
        crds.create(&PostParams::default(), &typed).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let crd_name = typed.metadata.name.clone().unwrap();
        within("established", await_condition(crds.clone(), &crd_name, conditions::is_crd_established()))
            .await
            .unwrap();
    }
    // maxUnavailable: integers from 1, percentages from 1% to 100%.
    let versions = "/apis/update.edgeless.systems/v1alpha1/nodeversions";
    for (i, (value, accepted)) in [
        (json_value("3"), true),
        (json_value("\"10%\""), true),
        (json_value("0"), false),
        (json_value("\"0%\""), false),
        (json_value("\"ten\""), false),
        (json_value("true"), false),
    ]
    .into_iter()
    .enumerate()
    {
        let object = serde_json::json!({"apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
            "metadata": {"name": format!("v{i}")}, "spec": {"image": "img", "rollout": {"maxUnavailable": value}}});
        let response = raw(&client, "POST", versions, Some("application/json"), object).await;
        assert_eq!(response.status == 201, accepted, "maxUnavailable {value}: {}", response.text);
    }
}

fn json_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}
