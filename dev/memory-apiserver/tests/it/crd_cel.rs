//! CRD validation rules (`x-kubernetes-validations`, CEL) and validation ratcheting, through the product's client
//! (kube) and the real kubectl against the dev cluster, with the answers a real kube-apiserver 1.30–1.33 gives.
//!
//! Checked against kubernetes/kubernetes: `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/
//! validation.go` (error shapes: `field.Invalid(path, <schema type>, message)`, `reason`, `fieldPath`,
//! `messageExpression`, transition rules only with an old value), `.../schema/cel/compilation.go` and
//! `pkg/apis/apiextensions/validation/validation.go` (a rule that does not compile refuses the CRD on
//! `...x-kubernetes-validations[i].rule`), `pkg/apiserver/validation/ratcheting.go` and
//! `staging/src/k8s.io/apiserver/pkg/cel/common/equality.go` (ratcheting), and
//! `pkg/registry/customresource/strategy.go` (schema errors first; type, required, enum and size errors block
//! the rules).

use crate::common;

use common::{raw, server, within};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

fn gadget_crd(spec_schema: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}}}]
        }
    })
}

/// The spec of a Gadget: `min <= max` (with a messageExpression), `mode` immutable once set (a transition rule
/// with a reason and a fieldPath), tags that are not `bad`, and a free-text `note`.
fn rules_schema() -> Value {
    json!({
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "messageExpression": "'min ' + string(self.min) + ' is above max ' + string(self.max)"},
            {"rule": "!has(oldSelf.mode) || self.mode == oldSelf.mode", "message": "mode is immutable",
             "reason": "FieldValueForbidden", "fieldPath": ".mode"}
        ],
        "properties": {
            "min": {"type": "integer"}, "max": {"type": "integer"}, "mode": {"type": "string"},
            "note": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self != 'bad'"}]}}
        }
    })
}

fn gadgets(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    Api::namespaced_with(client.clone(), "default", &resource)
}

fn gadget(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": name}, "spec": spec}),
    )
    .unwrap()
}

async fn establish(client: &kube::Client, crd: Value) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    crds.create(&PostParams::default(), &crd).await.expect("the CRD is accepted");
    within("the CRD is established", await_condition(crds, "gadgets.example.com", conditions::is_crd_established()))
        .await
        .unwrap();
}

/// Replaces the CRD's spec schema, keeping its resourceVersion.
async fn tighten(client: &kube::Client, spec_schema: Value) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = serde_json::to_value(crds.get("gadgets.example.com").await.unwrap()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = spec_schema;
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    crds.replace("gadgets.example.com", &PostParams::default(), &crd).await.expect("the tightened CRD is accepted");
}

fn refusal(error: kube::Error) -> kube::core::Status {
    match error {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test]
async fn a_crd_whose_rule_does_not_compile_is_refused_with_the_rule_path() {
    let server = server().await;
    let client = server.client();
    for (rule, detail) in [
        ("self.min <=", "compilation failed: ERROR: <input>:1:"),
        (
            "self.min <= other",
            "compilation failed: ERROR: <input>:1:13: undeclared reference to 'other' (in container '')",
        ),
        // Type errors cel-go's checker finds against the schema (compilation.go).
        ("self.mni <= 1", "compilation failed: ERROR: <input>:1:5: undefined field 'mni'"),
        ("self.min", "cel expression must evaluate to a bool"),
    ] {
        let crd = gadget_crd(json!({"type": "object", "properties": {"min": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": rule}]}));
        let answer = raw(&client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", None, crd).await;
        assert_eq!(answer.status, 422, "{rule}: {}", answer.text);
        let body = answer.json();
        let cause = &body["details"]["causes"][0];
        assert_eq!(cause["field"], "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule");
        assert_eq!(cause["reason"], "FieldValueInvalid");
        let message = cause["message"].as_str().unwrap();
        assert!(message.starts_with("Invalid value: apiextensions.ValidationRule{Rule:"), "{message}");
        assert!(message.contains(detail), "{message}");
    }
    // A messageExpression that does not compile, and oldSelf below a list that cannot correlate it.
    let crd = gadget_crd(json!({"type": "object", "properties": {
        "min": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}},
        "x-kubernetes-validations": [{"rule": "true", "messageExpression": "'a' +"}]}));
    let answer = raw(&client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", None, crd).await;
    assert_eq!(answer.status, 422, "{}", answer.text);
    let fields: Vec<String> =
        answer.json()["details"]["causes"].as_array().unwrap().iter().map(|c| c["field"].to_string()).collect();
    assert!(
        fields.contains(
            &"\"spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].messageExpression\""
                .to_owned()
        ),
        "{fields:?}"
    );
    assert!(
        answer.text.contains("oldSelf cannot be used on the uncorrelatable portion of the schema within spec.validation.openAPIV3Schema.properties[spec].properties[tags]"),
        "{}",
        answer.text
    );
    server.shutdown().await;
}

#[tokio::test]
async fn rules_refuse_objects_with_the_real_servers_422() {
    let server = server().await;
    let client = server.client();
    establish(&client, gadget_crd(rules_schema())).await;
    let api = gadgets(&client);
    let pp = PostParams::default();

    let created =
        api.create(&pp, &gadget("good", json!({"min": 1, "max": 2, "mode": "a", "tags": ["x"]}))).await.unwrap();
    // min > max: the messageExpression's text, on the field of the rule's node, the value being the node's type.
    let status = refusal(api.create(&pp, &gadget("bad", json!({"min": 3, "max": 2}))).await.unwrap_err());
    assert_eq!(status.code, 422);
    assert_eq!(status.reason, "Invalid");
    assert_eq!(
        status.message,
        "Gadget.example.com \"bad\" is invalid: spec: Invalid value: \"object\": min 3 is above max 2"
    );
    let causes = status.details.as_ref().map(|d| d.causes.clone()).unwrap_or_default();
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, "spec");
    assert_eq!(causes[0].reason, "FieldValueInvalid");
    assert_eq!(causes[0].message, "Invalid value: \"object\": min 3 is above max 2");
    // An item's rule, without a message: `failed rule: <rule>` on the item.
    let status =
        refusal(api.create(&pp, &gadget("tags", json!({"min": 1, "max": 2, "tags": ["x", "bad"]}))).await.unwrap_err());
    assert_eq!(
        status.message,
        "Gadget.example.com \"tags\" is invalid: spec.tags[1]: Invalid value: \"string\": failed rule: self != 'bad'"
    );
    // A transition rule runs on update: reason Forbidden, on its fieldPath.
    let mut changed = created.clone();
    changed.data["spec"]["mode"] = json!("b");
    let status = refusal(api.replace("good", &pp, &changed).await.unwrap_err());
    assert_eq!(status.message, "Gadget.example.com \"good\" is invalid: spec.mode: Forbidden: mode is immutable");
    assert_eq!(status.details.unwrap().causes[0].reason, "FieldValueForbidden");
    // The same change through a merge patch.
    let patch = kube::api::Patch::Merge(json!({"spec": {"mode": "c"}}));
    let status = refusal(api.patch("good", &kube::api::PatchParams::default(), &patch).await.unwrap_err());
    assert_eq!(status.code, 422);
    // A valid update passes.
    let patch = kube::api::Patch::Merge(json!({"spec": {"max": 5}}));
    api.patch("good", &kube::api::PatchParams::default(), &patch).await.expect("a valid update passes");
    server.shutdown().await;
}

#[tokio::test]
async fn an_update_after_a_tightened_schema_is_ratcheted() {
    let server = server().await;
    let client = server.client();
    establish(&client, gadget_crd(rules_schema())).await;
    let api = gadgets(&client);
    let pp = PostParams::default();
    api.create(&pp, &gadget("old", json!({"min": 1, "max": 2, "note": "a long note", "tags": ["legacy"]})))
        .await
        .unwrap();

    // A new operator version tightens the schema: notes of at most 5 characters, tags with a CEL size rule.
    let mut tightened = rules_schema();
    tightened["properties"]["note"]["maxLength"] = json!(5);
    tightened["properties"]["tags"]["items"]["x-kubernetes-validations"] =
        json!([{"rule": "self.size() <= 3", "message": "tag too long"}]);
    tighten(&client, tightened).await;

    // New objects are held to it (a size error blocks the rules, strategy.go `hasBlockingErr`).
    const NOT_CHECKED: &str = "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";
    let status =
        refusal(api.create(&pp, &gadget("new", json!({"min": 1, "max": 2, "note": "a long note"}))).await.unwrap_err());
    assert_eq!(
        status.message,
        format!(
            "Gadget.example.com \"new\" is invalid: [spec.note: Too long: may not be more than 5 bytes, {NOT_CHECKED}]"
        )
    );
    // An update that leaves the invalid values as they were passes (a real server sends warnings).
    let patch = kube::api::Patch::Merge(json!({"spec": {"max": 9}}));
    let updated = api.patch("old", &kube::api::PatchParams::default(), &patch).await.expect("the update is ratcheted");
    assert_eq!(updated.data["spec"]["note"], "a long note");
    // Changing an invalid value to another invalid one is refused, by the schema and by the rule.
    let patch = kube::api::Patch::Merge(json!({"spec": {"note": "another long note", "tags": ["legacy2"]}}));
    let status = refusal(api.patch("old", &kube::api::PatchParams::default(), &patch).await.unwrap_err());
    assert_eq!(
        status.message,
        format!(
            "Gadget.example.com \"old\" is invalid: [spec.note: Too long: may not be more than 5 bytes, {NOT_CHECKED}]"
        )
    );
    let patch = kube::api::Patch::Merge(json!({"spec": {"tags": ["legacy2"]}}));
    let status = refusal(api.patch("old", &kube::api::PatchParams::default(), &patch).await.unwrap_err());
    assert_eq!(
        status.message,
        "Gadget.example.com \"old\" is invalid: spec.tags[0]: Invalid value: \"string\": tag too long"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn schema_errors_that_block_the_rules_are_reported_alone() {
    let server = server().await;
    let client = server.client();
    establish(&client, gadget_crd(rules_schema())).await;
    let api = gadgets(&client);
    // `min` of the wrong type: a TypeInvalid error, so the rules are not run (strategy.go `hasBlockingErr`).
    let status = refusal(
        api.create(&PostParams::default(), &gadget("typed", json!({"min": "one", "max": 2}))).await.unwrap_err(),
    );
    assert_eq!(
        status.message,
        "Gadget.example.com \"typed\" is invalid: [spec.min: Invalid value: \"one\": spec.min in body must be of type integer: \"string\", <nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
    );
    assert_eq!(status.details.unwrap().causes[0].reason, "FieldValueTypeInvalid");
    server.shutdown().await;
}

/// The kubectl on PATH (CI installs one; without it this test fails, as dev/tests/it/kubectl.rs does).
fn kubectl() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file())
        .expect("no kubectl on PATH: this test runs kubectl against the dev cluster; install kubectl (CI does)")
}

async fn run_kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let mut command = tokio::process::Command::new(kubectl());
    command.arg("--kubeconfig").arg(kubeconfig).args(args).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("kubectl finishes")
        .expect("kubectl runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_meets_the_rules_and_ratcheting() {
    let server = server().await;
    let config = server.kubeconfig_path().to_owned();
    let dir = config.parent().unwrap().to_owned();
    let write = |name: &str, value: Value| {
        let file = dir.join(name);
        std::fs::write(&file, serde_json::to_string(&value).unwrap()).unwrap();
        file.to_str().unwrap().to_owned()
    };

    let crd = write("crd.json", gadget_crd(rules_schema()));
    let (ok, out, err) = run_kubectl(&config, &["apply", "-f", &crd]).await;
    assert!(ok, "{out}{err}");
    let (ok, out, err) =
        run_kubectl(&config, &["wait", "--for=condition=Established", "crd/gadgets.example.com"]).await;
    assert!(ok, "{out}{err}");

    let bad = write("bad.json", serde_json::to_value(gadget("bad", json!({"min": 3, "max": 2}))).unwrap());
    let (ok, _, err) = run_kubectl(&config, &["apply", "-f", &bad]).await;
    assert!(!ok, "an object breaking a rule was applied");
    assert!(
        err.contains("The Gadget \"bad\" is invalid: spec: Invalid value: \"object\": min 3 is above max 2"),
        "{err}"
    );

    let old = write(
        "old.json",
        serde_json::to_value(gadget("old", json!({"min": 1, "max": 2, "mode": "a", "note": "a long note"}))).unwrap(),
    );
    let (ok, out, err) = run_kubectl(&config, &["apply", "-f", &old]).await;
    assert!(ok, "{out}{err}");
    let (ok, _, err) =
        run_kubectl(&config, &["patch", "gadget", "old", "--type=merge", "-p", r#"{"spec":{"mode":"b"}}"#]).await;
    assert!(!ok && err.contains("spec.mode: Forbidden: mode is immutable"), "{err}");

    // Tighten the schema; an update leaving the long note as it was passes, changing it is refused.
    let mut tightened = rules_schema();
    tightened["properties"]["note"]["maxLength"] = json!(5);
    let crd = write("crd.json", gadget_crd(tightened));
    let (ok, out, err) = run_kubectl(&config, &["apply", "-f", &crd]).await;
    assert!(ok, "{out}{err}");
    let (ok, out, err) =
        run_kubectl(&config, &["patch", "gadget", "old", "--type=merge", "-p", r#"{"spec":{"max":7}}"#]).await;
    assert!(ok, "the ratcheted update was refused: {out}{err}");
    let (ok, _, err) = run_kubectl(
        &config,
        &["patch", "gadget", "old", "--type=merge", "-p", r#"{"spec":{"note":"still too long"}}"#],
    )
    .await;
    assert!(!ok && err.contains("spec.note: Too long: may not be more than 5 bytes"), "{err}");
    server.shutdown().await;
}

/// The Kubernetes URL, IP, CIDR and format libraries (`staging/src/k8s.io/apiserver/pkg/cel/library/urls.go`,
/// `ip.go`, `cidr.go`, `format.go`; in the environment of new CRD rules on 1.33 per `environment/base.go`).
fn network_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "endpoint": {"type": "string", "maxLength": 256, "x-kubernetes-validations": [
                {"rule": "isURL(self) && url(self).getScheme() == 'https'", "message": "must be an https URL"}]},
            "address": {"type": "string", "maxLength": 64, "x-kubernetes-validations": [
                {"rule": "isIP(self) && ip.isCanonical(self)", "message": "must be a canonical IP address"},
                {"rule": "!ip(self).isLoopback()", "message": "must not be a loopback address"}]},
            "network": {"type": "string", "maxLength": 64, "x-kubernetes-validations": [
                {"rule": "isCIDR(self) && cidr(self) == cidr(self).masked()", "message": "must be a network address"}]},
            "zone": {"type": "string", "maxLength": 64, "x-kubernetes-validations": [
                {"rule": "!format.dns1123Label().validate(self).hasValue()",
                 "messageExpression": "format.dns1123Label().validate(self).value().join(', ')"}]}
        },
        "x-kubernetes-validations": [
            {"rule": "!has(self.address) || !has(self.network) || cidr(self.network).containsIP(self.address)",
             "message": "address must be in network"}
        ]
    })
}

#[tokio::test]
async fn the_url_ip_cidr_and_format_libraries_judge_objects_as_upstream() {
    let server = server().await;
    let client = server.client();
    establish(&client, gadget_crd(network_schema())).await;
    let api = gadgets(&client);
    let pp = PostParams::default();
    api.create(
        &pp,
        &gadget(
            "good",
            json!({"endpoint": "https://example.com:8443/api", "address": "10.1.2.3", "network": "10.0.0.0/8", "zone": "eu-west-1"}),
        ),
    )
    .await
    .expect("valid values pass");
    let refused = |name: &str, spec: Value| {
        let api = api.clone();
        let name = name.to_owned();
        async move { refusal(api.create(&PostParams::default(), &gadget(&name, spec)).await.unwrap_err()) }
    };
    let status = refused("http", json!({"endpoint": "http://example.com/"})).await;
    assert_eq!(
        status.message,
        "Gadget.example.com \"http\" is invalid: spec.endpoint: Invalid value: \"string\": must be an https URL"
    );
    let status = refused("relative", json!({"endpoint": "../x"})).await;
    assert_eq!(status.code, 422, "a relative URL is no URL");
    let status = refused("upper", json!({"address": "2001:DB8::1"})).await;
    assert_eq!(
        status.message,
        "Gadget.example.com \"upper\" is invalid: spec.address: Invalid value: \"string\": must be a canonical IP address"
    );
    let status = refused("loop", json!({"address": "127.0.0.1"})).await;
    assert_eq!(
        status.message,
        "Gadget.example.com \"loop\" is invalid: spec.address: Invalid value: \"string\": must not be a loopback address"
    );
    let status = refused("outside", json!({"address": "192.168.0.1", "network": "10.0.0.0/8"})).await;
    assert_eq!(
        status.message,
        "Gadget.example.com \"outside\" is invalid: spec: Invalid value: \"object\": address must be in network"
    );
    let status = refused("host-bits", json!({"network": "10.0.0.1/8"})).await;
    assert_eq!(
        status.message,
        "Gadget.example.com \"host-bits\" is invalid: spec.network: Invalid value: \"string\": must be a network address"
    );
    let status = refused("zone", json!({"zone": "EU_West"})).await;
    assert_eq!(
        status.message,
        "Gadget.example.com \"zone\" is invalid: spec.zone: Invalid value: \"string\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    );
    server.shutdown().await;
}

/// A rule iterating an unbounded list inside an iteration of it: upstream's estimate (`validation.go`
/// `getExpressionCost`, cel-go `checker/cost.go`) is far above `StaticEstimatedCostLimit`, so the CRD is refused;
/// with `maxItems`/`maxLength` it is accepted.
#[tokio::test]
async fn a_crd_whose_rule_costs_too_much_is_refused_with_upstreams_causes() {
    const HINT: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";
    let server = server().await;
    let client = server.client();
    let costly = |bounds: Value| {
        let mut items = json!({"type": "array", "items": {"type": "string"}});
        if let (Some(items), Some(bounds)) = (items.as_object_mut(), bounds.as_object()) {
            items.extend(bounds.clone());
        }
        gadget_crd(json!({"type": "object", "properties": {"names": items},
            "x-kubernetes-validations": [{"rule": "self.names.all(x, self.names.exists_one(y, x == y))", "message": "names are unique"}]}))
    };
    let answer =
        raw(&client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", None, costly(json!({}))).await;
    assert_eq!(answer.status, 422, "{}", answer.text);
    let body = answer.json();
    let causes: Vec<(String, String, String)> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_owned(),
                c["reason"].as_str().unwrap().to_owned(),
                c["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let rule = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule";
    assert!(
        causes.contains(&(
            rule.to_owned(),
            "FieldValueForbidden".to_owned(),
            format!("Forbidden: estimated rule cost exceeds budget by factor of more than 100x {HINT}")
        )),
        "{causes:?}"
    );
    assert!(
        causes.contains(&(
            "spec.validation.openAPIV3Schema".to_owned(),
            "FieldValueForbidden".to_owned(),
            format!("Forbidden: x-kubernetes-validations estimated rule & messageExpression cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {HINT}")
        )),
        "{causes:?}"
    );
    // A rule of the 1.33 semver library is not declared for new rules (compiled in the 1.32 environment).
    let semver = gadget_crd(json!({"type": "object", "properties": {"version": {"type": "string", "maxLength": 32}},
        "x-kubernetes-validations": [{"rule": "isSemver(self.version)"}]}));
    let answer = raw(&client, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", None, semver).await;
    assert_eq!(answer.status, 422, "{}", answer.text);
    assert!(
        answer
            .text
            .contains("compilation failed: ERROR: <input>:1:9: undeclared reference to 'isSemver' (in container '')"),
        "{}",
        answer.text
    );
    // Bounded, the same rule is cheap enough.
    let bounded = costly(json!({"maxItems": 16, "items": {"type": "string", "maxLength": 63}}));
    establish(&client, bounded).await;
    let status = refusal(
        gadgets(&client)
            .create(&PostParams::default(), &gadget("dup", json!({"names": ["a", "a"]})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        status.message,
        "Gadget.example.com \"dup\" is invalid: spec: Invalid value: \"object\": names are unique"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_meets_the_cost_limit_and_the_libraries() {
    let server = server().await;
    let config = server.kubeconfig_path().to_owned();
    let dir = config.parent().unwrap().to_owned();
    let write = |name: &str, value: Value| {
        let file = dir.join(name);
        std::fs::write(&file, serde_json::to_string(&value).unwrap()).unwrap();
        file.to_str().unwrap().to_owned()
    };
    let costly = write(
        "costly.json",
        gadget_crd(json!({"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string"}}},
            "x-kubernetes-validations": [{"rule": "self.names.all(x, self.names.all(y, x == y))"}]})),
    );
    let (ok, _, err) = run_kubectl(&config, &["apply", "-f", &costly]).await;
    assert!(!ok, "a CRD above the cost limit was applied");
    assert!(err.contains("estimated rule cost exceeds budget by factor of more than 100x"), "{err}");

    let crd = write("crd.json", gadget_crd(network_schema()));
    let (ok, out, err) = run_kubectl(&config, &["apply", "-f", &crd]).await;
    assert!(ok, "{out}{err}");
    let (ok, out, err) =
        run_kubectl(&config, &["wait", "--for=condition=Established", "crd/gadgets.example.com"]).await;
    assert!(ok, "{out}{err}");
    let bad = write("bad.json", serde_json::to_value(gadget("bad", json!({"address": "::ffff:1.2.3.4"}))).unwrap());
    let (ok, _, err) = run_kubectl(&config, &["apply", "-f", &bad]).await;
    assert!(!ok && err.contains("spec.address: Invalid value: \"string\": must be a canonical IP address"), "{err}");
    let good = write(
        "good.json",
        serde_json::to_value(gadget("good", json!({"address": "fd00::1", "network": "fd00::/8"}))).unwrap(),
    );
    let (ok, out, err) = run_kubectl(&config, &["apply", "-f", &good]).await;
    assert!(ok, "{out}{err}");
    server.shutdown().await;
}

/// cel-go's `ext.Sets` is in the CRD environment since 1.29 (`environment/base.go`): a CRD using it is accepted
/// and its rule judges objects.
#[tokio::test]
async fn the_sets_library_is_available_to_rules() {
    let server = server().await;
    let client = server.client();
    establish(
        &client,
        gadget_crd(json!({"type": "object", "properties": {
            "zones": {"type": "array", "maxItems": 8, "items": {"type": "string", "maxLength": 16}}},
            "x-kubernetes-validations": [{"rule": "sets.contains(['a', 'b', 'c'], self.zones)", "message": "unknown zone"}]})),
    )
    .await;
    let api = gadgets(&client);
    api.create(&PostParams::default(), &gadget("known", json!({"zones": ["a", "c"]}))).await.expect("known zones pass");
    let status = refusal(
        api.create(&PostParams::default(), &gadget("unknown", json!({"zones": ["a", "d"]}))).await.unwrap_err(),
    );
    assert_eq!(
        status.message,
        "Gadget.example.com \"unknown\" is invalid: spec: Invalid value: \"object\": unknown zone"
    );
    server.shutdown().await;
}
